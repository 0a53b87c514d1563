"""The world rules, table-tested as pure decisions, and every ledger deciding through them."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from memory_ledger import MemoryLedger
from tether.world import (
    CommittedTickReceipt,
    ComponentWrite,
    HeadConflict,
    InvalidWrite,
    PostCommitPending,
    SqliteLedger,
    StaleWriter,
    WorldClosing,
    WorldError,
    WorldExists,
    WorldFacts,
    WorldLedger,
    WorldNotFound,
    Writer,
    rules,
)

OPEN = WorldFacts(
    run_id="run-1",
    head_tick=4,
    head_token="vt-4",
    writer_epoch=2,
    post_commit_tick=4,
    close_state="open",
    close_sticky=False,
)
HEAD = CommittedTickReceipt("w", "run-1", 4, "vt-4")


def facts(**changes: Any) -> WorldFacts:
    return dataclasses.replace(OPEN, **changes)


def test_writer_epochs_fence_older_writers_and_need_an_open_world() -> None:
    assert rules.next_writer("w", OPEN) == Writer("w", 3)
    rules.check_writer(Writer("w", 2), OPEN)
    with pytest.raises(StaleWriter):
        rules.check_writer(Writer("w", 1), OPEN)
    with pytest.raises(WorldClosing):
        rules.check_writer(Writer("w", 2), facts(close_state="closing"))


def test_a_tick_commits_only_on_the_settled_head() -> None:
    assert rules.commit_tick(Writer("w", 2), HEAD, OPEN) == 5
    for parent in (
        dataclasses.replace(HEAD, tick=3),
        dataclasses.replace(HEAD, visibility_token="vt-sibling"),
        dataclasses.replace(HEAD, run_id="run-0"),
    ):
        with pytest.raises(HeadConflict):
            rules.commit_tick(Writer("w", 2), parent, OPEN)
    with pytest.raises(PostCommitPending):
        rules.commit_tick(Writer("w", 2), HEAD, facts(post_commit_tick=3))
    with pytest.raises(InvalidWrite):
        rules.commit_tick(Writer("w", 2), dataclasses.replace(HEAD, world_id="v"), OPEN)
    with pytest.raises(StaleWriter):
        rules.commit_tick(Writer("w", 1), HEAD, OPEN)


def test_a_tick_writes_each_component_once() -> None:
    assert rules.encode_writes([ComponentWrite("e", "c", {"b": 1, "a": 2})]) == {
        ("e", "c"): '{"a":2,"b":1}'
    }
    assert rules.encode_writes([ComponentWrite("e", "c", None)]) == {("e", "c"): None}
    with pytest.raises(InvalidWrite):
        rules.encode_writes([ComponentWrite("e", "c", 1), ComponentWrite("e", "c", 2)])
    with pytest.raises(InvalidWrite):
        rules.encode_writes(["not a write"])  # type: ignore[list-item]


def test_the_post_commit_mark_only_rises_and_only_for_the_head() -> None:
    pending = facts(post_commit_tick=3)
    assert rules.post_commit_pending(pending) and not rules.post_commit_pending(OPEN)
    assert rules.post_commit_mark(HEAD, pending) == 4
    assert rules.post_commit_mark(dataclasses.replace(HEAD, tick=3), pending) == 3
    assert rules.post_commit_mark(dataclasses.replace(HEAD, run_id="run-0"), pending) == 3
    assert rules.post_commit_mark(HEAD, facts(post_commit_tick=9, head_tick=4)) == 9


def test_close_is_sticky_once_any_reservation_was() -> None:
    assert rules.reserve_close(OPEN, sticky=False) == ("closing", False)
    assert rules.reserve_close(OPEN, sticky=True) == ("closing", True)
    assert rules.reserve_close(facts(close_sticky=True), sticky=False) == ("closing", True)
    assert rules.rollback_close(facts(close_state="closing")) == "open"
    assert rules.rollback_close(facts(close_state="closing", close_sticky=True)) == "closing"
    assert rules.rollback_close(OPEN) == "open"
    rules.check_destroyable("w", facts(close_state="closing"))
    with pytest.raises(WorldError):
        rules.check_destroyable("w", OPEN)


def test_lifecycle_needs_the_same_settled_head() -> None:
    rules.check_settled_head(HEAD, OPEN)
    with pytest.raises(HeadConflict):
        rules.check_settled_head(dataclasses.replace(HEAD, tick=3), OPEN)
    with pytest.raises(PostCommitPending):
        rules.check_settled_head(HEAD, facts(post_commit_tick=3))


def test_worlds_are_created_once_and_destroyed_ones_are_gone() -> None:
    rules.check_new_world("w", False)
    with pytest.raises(WorldExists):
        rules.check_new_world("w", True)
    with pytest.raises(InvalidWrite):
        rules.check_new_world("bad world", False)
    assert rules.live_world("w", OPEN) is OPEN
    for gone in (None, facts(close_state="destroyed")):
        with pytest.raises(WorldNotFound):
            rules.live_world("w", gone)


# Every decision a ledger must take from the rules module.
DECISIONS = (
    "check_new_world",
    "live_world",
    "next_writer",
    "check_writer",
    "encode_writes",
    "commit_tick",
    "post_commit_pending",
    "post_commit_mark",
    "reserve_close",
    "rollback_close",
    "check_destroyable",
    "check_settled_head",
    "judge_receipt",
)


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def counted(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[WorldLedger, Counter[str]]]:
    calls: Counter[str] = Counter()

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    for name in DECISIONS:
        monkeypatch.setattr(rules, name, counting(name, getattr(rules, name)))
    ledger: WorldLedger
    if request.param == "sqlite":
        ledger = SqliteLedger.open(tmp_path / "world.db")
    elif request.param == "postgres":
        from tether.world import open_ledger

        ledger = open_ledger(str(request.getfixturevalue("pg_url")))
    else:
        ledger = MemoryLedger()
    yield ledger, calls
    ledger.close()


def test_every_ledger_decides_through_the_rules_module(
    counted: tuple[WorldLedger, Counter[str]],
) -> None:
    ledger, calls = counted
    genesis = ledger.create_world("w")
    writer = ledger.acquire_writer("w")
    r1 = ledger.commit(writer, genesis, [ComponentWrite("e", "c", 1)])
    assert ledger.pending_post_commit("w") == r1
    ledger.complete_post_commit(r1)
    ledger.fork(ledger.head("w"), "w2")
    ledger.reserve_close("w", sticky=False)
    ledger.rollback_close("w")
    ledger.reserve_close("w", sticky=True)
    ledger.destroy("w", r1)
    assert set(DECISIONS) <= set(calls), f"not decided by the rules: {set(DECISIONS) - set(calls)}"


def test_a_changed_rule_changes_every_ledger(
    counted: tuple[WorldLedger, Counter[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ledger keeps its own copy: were sticky close a different rule, every ledger would
    follow it."""
    ledger, _ = counted
    ledger.create_world("w")
    monkeypatch.setattr(rules, "rollback_close", lambda facts: "open")
    ledger.reserve_close("w", sticky=True)
    ledger.rollback_close("w")
    assert ledger.close_state("w")[0] == "open"


def test_a_closed_sqlite_ledger_and_catalog_say_so_with_a_code(tmp_path: Path) -> None:
    """After `close`, a ledger call was a raw `sqlite3.ProgrammingError`, and a catalog's
    `the catalog is closed` had no `.code`."""
    from tether.activities import ActivityKey, Catalog
    from tether.errors import CatalogStorageError
    from tether.world import LedgerClosed, open_ledger

    ledger = open_ledger(f"sqlite://{tmp_path}/world.db")
    ledger.create_world("w")
    ledger.close()
    ledger.close()  # a second close is nothing
    with pytest.raises(LedgerClosed) as info:
        ledger.head("w")
    assert info.value.code == "ledger_closed"
    catalog = Catalog.open(f"sqlite:///{tmp_path}/catalog.db")
    catalog.close()
    with pytest.raises(CatalogStorageError) as closed:
        catalog.get(ActivityKey("w", "k", "a"))
    assert getattr(closed.value, "code", None) == "catalog_closed"
