"""The world ledger on SQLite and PostgreSQL: atomic ticks, writer fencing, post-commit gating,
the receipt reader. Tests that tamper with the stored tables do it on each backend (raw SQL on
the file, or on the test's PostgreSQL schema); three stay SQLite only, since they check what
only the SQLite ledger has: its kept head snapshot (two) and its WAL sync of the mark."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tether.errors import TetherError
from tether.world import (
    RECEIPT_REJECTION_CODES,
    CommittedTickReceipt,
    ComponentWrite,
    HeadConflict,
    InvalidWrite,
    PostCommitPending,
    ReceiptRejected,
    SqliteLedger,
    StaleWriter,
    WorldClosing,
    WorldError,
    WorldExists,
    WorldLedger,
    WorldNotFound,
    open_ledger,
)
from tether.world._postgres import PostgresLedger

from tests.backends import empty_stores, pg_schema


@pytest.fixture(params=["sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorldLedger]:
    """The ledger on each backend: these rules hold for the PostgreSQL ledger too (tests that
    tamper with the SQLite file take `sqlite_ledger`)."""
    impl: WorldLedger
    if request.param == "postgres":
        impl = open_ledger(request.getfixturevalue("pg_url"))
    else:
        impl = SqliteLedger.open(tmp_path / "world.db")
    yield impl
    impl.close()


@pytest.fixture
def sqlite_ledger(tmp_path: Path) -> SqliteLedger:
    return SqliteLedger.open(tmp_path / "world.db")


class Stored:
    """The test's ledger store on its backend, opened as often as a test needs (a restart, a
    second process) and tampered with by raw SQL (``?`` placeholders on both)."""

    def __init__(self, backend: str, tmp_path: Path, pg_url: str | None) -> None:
        self.backend, self.path, self.pg_url = backend, tmp_path / "world.db", pg_url
        self.opened: list[WorldLedger] = []

    @property
    def cls(self) -> type[SqliteLedger] | type[PostgresLedger]:
        return SqliteLedger if self.pg_url is None else PostgresLedger

    @property
    def where(self) -> Any:
        return self.path if self.pg_url is None else self.pg_url

    def open(self) -> WorldLedger:
        ledger = self.cls(self.where)
        self.opened.append(ledger)
        return ledger

    def close(self) -> None:
        for ledger in self.opened:
            ledger.close()

    def sql(self, *statements: tuple[str, tuple[object, ...]]) -> None:
        if self.pg_url is None:
            raw = sqlite3.connect(self.path)
            try:
                for sql, args in statements:
                    raw.execute(sql, args)
                raw.commit()
            finally:
                raw.close()
            return
        import psycopg

        with psycopg.connect(self.pg_url) as conn:  # one transaction
            for sql, args in statements:
                conn.execute(sql.replace("?", "%s"), args)  # type: ignore[arg-type]


@pytest.fixture
def stored(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Stored]:
    pg_url = str(request.getfixturevalue("pg_url")) if backend == "postgres" else None
    store = Stored(backend, tmp_path, pg_url)
    yield store
    store.close()


def _commit(ledger: SqliteLedger, world: str, *writes: ComponentWrite) -> CommittedTickReceipt:
    """Commit one tick as the current writer and complete its post-commit work."""
    writer = ledger.acquire_writer(world)
    receipt = ledger.commit(writer, ledger.head(world), list(writes))
    ledger.complete_post_commit(receipt)
    return receipt


def test_sqlite_ledger_implements_the_port(ledger: SqliteLedger) -> None:
    assert isinstance(ledger, WorldLedger)


def test_commit_is_atomic_with_fresh_token_and_head(ledger: SqliteLedger) -> None:
    genesis = ledger.create_world("w")
    assert genesis.tick == 0 and genesis.visibility_token
    r1 = _commit(ledger, "w", ComponentWrite("e1", "pos", {"x": 1}))
    r2 = _commit(ledger, "w", ComponentWrite("e1", "pos", {"x": 2}), ComponentWrite("e2", "c", 7))
    assert (r1.tick, r2.tick) == (1, 2)
    assert len({genesis.visibility_token, r1.visibility_token, r2.visibility_token}) == 3
    assert r1.run_id == r2.run_id == genesis.run_id
    assert ledger.head("w") == r2
    assert ledger.read_at(r1).get("e1", "pos") == {"x": 1}
    assert ledger.read_at(r1).get("e2", "c") is None
    snap = ledger.read_at(r2)
    assert snap.get("e1", "pos") == {"x": 2} and snap.get("e2", "c") == 7
    assert snap.changes == {("e1", "pos"), ("e2", "c")}
    r3 = _commit(ledger, "w", ComponentWrite("e2", "c", None))
    assert ("e2", "c") not in ledger.read_at(r3)
    assert ledger.read_at(r2).get("e2", "c") == 7


def test_a_failing_commit_changes_nothing(stored: Stored) -> None:
    ledger = stored.open()
    genesis = ledger.create_world("w")
    before = _commit(ledger, "w", ComponentWrite("a", "c", 1))
    # A real storage fault in the middle of the transaction: the database refuses one row.
    if stored.pg_url is None:
        stored.sql(
            (
                "CREATE TRIGGER refuse BEFORE INSERT ON components WHEN NEW.entity = 'poison'"
                " BEGIN SELECT RAISE(ABORT, 'refused'); END",
                (),
            )
        )
    else:
        stored.sql(
            (
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RAISE EXCEPTION 'refused'; END $$",
                (),
            ),
            (
                "CREATE TRIGGER refuse BEFORE INSERT ON components FOR EACH ROW"
                " WHEN (NEW.entity = 'poison') EXECUTE FUNCTION refuse()",
                (),
            ),
        )
    writer = ledger.acquire_writer("w")
    with pytest.raises(WorldError):  # each ledger's typed storage error, never a driver's
        ledger.commit(
            writer, before, [ComponentWrite("a", "c", 2), ComponentWrite("poison", "c", 1)]
        )
    assert ledger.head("w") == before
    assert ledger.read_at(before).get("a", "c") == 1
    assert ledger.visibility_allowlist("w") == {genesis.visibility_token, before.visibility_token}


def test_invalid_writes_are_typed_errors(ledger: SqliteLedger) -> None:
    genesis = ledger.create_world("w")
    writer = ledger.acquire_writer("w")
    bad = [
        [ComponentWrite("e", "c", float("nan"))],
        [ComponentWrite("e", "c", {1: "x"})],
        [ComponentWrite("e", "c", object())],
        [ComponentWrite("", "c", 1)],
        [ComponentWrite("e", "bad name", 1)],
        [ComponentWrite("e", "c", 1), ComponentWrite("e", "c", 2)],
        ["not a write"],
    ]
    for writes in bad:
        with pytest.raises(InvalidWrite):
            ledger.commit(writer, genesis, writes)  # type: ignore[arg-type]
    assert ledger.head("w") == genesis
    assert issubclass(InvalidWrite, TetherError)


def test_a_newer_writer_epoch_fences_the_old_writer(ledger: SqliteLedger) -> None:
    genesis = ledger.create_world("w")
    old = ledger.acquire_writer("w")
    new = ledger.acquire_writer("w")
    with pytest.raises(StaleWriter):
        ledger.commit(old, genesis, [ComponentWrite("e", "c", "old")])
    r1 = ledger.commit(new, genesis, [ComponentWrite("e", "c", "new")])
    assert ledger.read_at(r1).get("e", "c") == "new"


def test_head_compare_and_swap_rejects_a_stale_parent(ledger: SqliteLedger) -> None:
    genesis = ledger.create_world("w")
    writer = ledger.acquire_writer("w")
    r1 = ledger.commit(writer, genesis, [])
    ledger.complete_post_commit(r1)
    with pytest.raises(HeadConflict):
        ledger.commit(writer, genesis, [ComponentWrite("e", "c", 1)])
    forged = dataclasses.replace(r1, visibility_token="vt_forged")
    with pytest.raises(HeadConflict):
        ledger.commit(writer, forged, [])
    assert ledger.head("w") == r1


def test_tick_t_plus_1_waits_for_post_commit_work_of_t(ledger: SqliteLedger) -> None:
    genesis = ledger.create_world("w")
    writer = ledger.acquire_writer("w")
    r1 = ledger.commit(writer, genesis, [])
    assert ledger.pending_post_commit("w") == r1
    with pytest.raises(PostCommitPending):
        ledger.commit(writer, r1, [])
    ledger.complete_post_commit(r1)
    assert ledger.pending_post_commit("w") is None
    assert ledger.commit(writer, r1, []).tick == 2


def test_restart_resumes_the_run_at_its_head(stored: Stored) -> None:
    first = stored.open()
    first.create_world("w")
    writer = first.acquire_writer("w")
    r1 = first.commit(writer, first.head("w"), [ComponentWrite("e", "c", 1)])
    first.close()
    again = stored.open()
    assert again.head("w") == r1
    assert again.pending_post_commit("w") == r1  # the retained receipt's work is still owed
    again.check_receipt(r1)
    new_writer = again.acquire_writer("w")
    again.complete_post_commit(r1)
    with pytest.raises(StaleWriter):  # the dead process's writer stays fenced by the new one
        again.commit(writer, r1, [])
    assert again.commit(new_writer, r1, []).run_id == r1.run_id


def test_start_run_makes_old_receipts_wrong_run(ledger: SqliteLedger) -> None:
    ledger.create_world("w")
    r1 = _commit(ledger, "w", ComponentWrite("e", "c", 1))
    run2 = ledger.start_run(ledger.acquire_writer("w"))
    assert run2.run_id != r1.run_id and run2.tick == 0
    assert ledger.read_at(run2).get("e", "c") is None
    with pytest.raises(ReceiptRejected) as err:
        ledger.check_receipt(r1)
    assert err.value.code == "wrong_run"


# -- the fail-closed receipt reader ---------------------------------------------------------


def _code(ledger: SqliteLedger, receipt: CommittedTickReceipt) -> str:
    with pytest.raises(ReceiptRejected) as err:
        ledger.check_receipt(receipt)
    assert err.value.code in RECEIPT_REJECTION_CODES
    return err.value.code


def test_receipt_reader_accepts_only_the_exact_head(ledger: SqliteLedger) -> None:
    ledger.create_world("w")
    ledger.create_world("other")
    r1 = _commit(ledger, "w")
    ledger.check_receipt(r1)
    r2 = _commit(ledger, "w")
    ledger.check_receipt(r2)
    assert _code(ledger, r1) == "not_head"  # a later head exists
    assert _code(ledger, dataclasses.replace(r2, visibility_token="")) == "tokenless"
    tokenless = CommittedTickReceipt("w", r2.run_id, r2.tick, None)  # type: ignore[arg-type]
    assert _code(ledger, tokenless) == "tokenless"
    assert _code(ledger, dataclasses.replace(r2, visibility_token="vt_x")) == "sibling_token"
    assert _code(ledger, dataclasses.replace(r2, world_id="nope")) == "unknown_world"
    other_head = ledger.head("other")
    assert _code(ledger, dataclasses.replace(r2, world_id="other")) == "wrong_run"
    assert (
        _code(ledger, dataclasses.replace(other_head, visibility_token=r2.visibility_token))
        == "sibling_token"
    )
    assert _code(ledger, dataclasses.replace(r2, run_id="run_x")) == "wrong_run"


def test_receipt_reader_rejects_multi_token_heads_and_missing_visibility(
    stored: Stored,
) -> None:
    ledger = stored.open()
    ledger.create_world("w")
    r1 = _commit(ledger, "w")
    stored.sql(("DELETE FROM visibility WHERE token = ?", (r1.visibility_token,)))
    assert _code(ledger, r1) == "not_visible"
    stored.sql(
        ("INSERT INTO visibility (world_id, token) VALUES ('w', ?)", (r1.visibility_token,)),
        (
            "INSERT INTO tick_tokens (world_id, run_id, tick, token)"
            " VALUES ('w', ?, ?, 'vt_sibling')",
            (r1.run_id, r1.tick),
        ),
    )
    assert _code(ledger, r1) == "ambiguous_head"
    with pytest.raises(ReceiptRejected):
        ledger.complete_post_commit(r1)


def test_read_at_rejects_receipts_that_name_no_committed_tick(ledger: SqliteLedger) -> None:
    ledger.create_world("w")
    r1 = _commit(ledger, "w", ComponentWrite("e", "c", [1, 2]))
    for bad in (dataclasses.replace(r1, visibility_token="vt_no"), dataclasses.replace(r1, tick=9)):
        with pytest.raises(ReceiptRejected) as err:
            ledger.read_at(bad)
        assert err.value.code == "no_such_tick"
    value = ledger.read_at(r1).get("e", "c")
    value.append(3)
    assert ledger.read_at(r1).get("e", "c") == [1, 2]


# -- lifecycle primitives -------------------------------------------------------------------


def test_fork_copies_head_state_into_a_fresh_world(ledger: SqliteLedger) -> None:
    ledger.create_world("src")
    r1 = _commit(ledger, "src", ComponentWrite("e", "c", {"v": 1}))
    fork = ledger.fork(r1, "dst")
    assert fork.tick == 0 and fork.run_id != r1.run_id
    assert ledger.read_at(fork).get("e", "c") == {"v": 1}
    assert ledger.pending_post_commit("dst") is None  # an ancestor tick is never reprojected
    with pytest.raises(WorldExists):
        ledger.fork(r1, "dst")
    _commit(ledger, "src", ComponentWrite("e", "c", {"v": 2}))
    with pytest.raises(ReceiptRejected):
        ledger.fork(r1, "dst2")  # only the current head may be forked


def test_close_reservation_blocks_ticks_and_rolls_back_unless_sticky(
    ledger: SqliteLedger,
) -> None:
    genesis = ledger.create_world("w")
    writer = ledger.acquire_writer("w")
    ledger.reserve_close("w", sticky=False)
    with pytest.raises(WorldClosing):
        ledger.commit(writer, genesis, [])
    ledger.check_receipt(genesis)  # settlement may still read the head while closing
    ledger.rollback_close("w")
    assert ledger.close_state("w") == ("open", False)
    r1 = ledger.commit(writer, genesis, [])
    ledger.complete_post_commit(r1)
    ledger.reserve_close("w", sticky=True)
    ledger.rollback_close("w")
    assert ledger.close_state("w") == ("closing", True)
    ledger.destroy("w")
    assert "w" not in ledger.worlds()
    assert _code(ledger, r1) == "world_closed"
    with pytest.raises(WorldNotFound):
        ledger.head("w")
    with pytest.raises(WorldExists):
        ledger.create_world("w")


# -- a model-based property -----------------------------------------------------------------

_writes = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["x", "y"]),
        st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=3)),
    ),
    max_size=5,
    unique_by=lambda t: (t[0], t[1]),
)


def _reads_back_every_receipt(
    ledger: WorldLedger, ticks: list[list[tuple[str, str, object]]]
) -> None:
    ledger.create_world("w")
    model: dict[tuple[str, str], object] = {}
    history: list[tuple[CommittedTickReceipt, dict[tuple[str, str], object]]] = []
    for tick in ticks:
        receipt = _commit(ledger, "w", *(ComponentWrite(e, c, v) for e, c, v in tick))
        for e, c, v in tick:
            if v is None:
                model.pop((e, c), None)
            else:
                model[(e, c)] = v
        history.append((receipt, dict(model)))
    for receipt, expected in history:
        snap = ledger.read_at(receipt)
        assert {k: snap.get(*k) for k in snap.keys()} == expected


@given(st.lists(_writes, min_size=1, max_size=6))
def test_every_receipt_reads_back_its_exact_state(
    ticks: list[list[tuple[str, str, object]]],
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        ledger = SqliteLedger.open(Path(d) / "world.db")
        try:
            _reads_back_every_receipt(ledger, ticks)
        finally:
            ledger.close()


@pytest.fixture(scope="module")
def module_pg_url(request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    """One PostgreSQL schema for the module's Hypothesis tests (emptied per example), made on
    first use."""
    with ExitStack() as stack:
        made: list[str] = []

        def url() -> str:
            if not made:
                made.append(stack.enter_context(pg_schema(str(request.getfixturevalue("pg_base")))))
            return made[0]

        yield url


@settings(max_examples=200 if os.environ.get("TETHER_SLOW") else 8)
@given(st.lists(_writes, min_size=1, max_size=6))
def test_every_receipt_reads_back_its_exact_state_on_postgres(
    module_pg_url: Callable[[], str], ticks: list[list[tuple[str, str, object]]]
) -> None:
    """The same on PostgreSQL, 8 examples by default and 200 with TETHER_SLOW=1 (the slow
    profile's 2,000 server round-trip examples would dominate a slow run): every example on
    the module's schema, emptied first."""
    url = module_pg_url()
    empty_stores(url)
    ledger = open_ledger(url)
    try:
        _reads_back_every_receipt(ledger, ticks)
    finally:
        ledger.close()


# -- lifecycle against a second process's writer --------------------------------------------


def test_fork_refuses_a_head_whose_post_commit_work_is_pending(ledger: SqliteLedger) -> None:
    ledger.create_world("src")
    r1 = ledger.commit(
        ledger.acquire_writer("src"), ledger.head("src"), [ComponentWrite("e", "c", 1)]
    )
    with pytest.raises(PostCommitPending):
        ledger.fork(r1, "dst")  # admissions of r1 may not exist yet: the fork would miss them
    assert "dst" not in ledger.worlds()
    ledger.complete_post_commit(r1)
    assert ledger.read_at(ledger.fork(r1, "dst")).get("e", "c") == 1


def test_fork_rechecks_the_head_inside_its_transaction(stored: Stored) -> None:
    """Another process commits between the caller's unsettled check and the fork's copy."""
    other = stored.open()  # a second process on the same store

    def read_at(self: Any, receipt: CommittedTickReceipt) -> Any:
        snapshot = stored.cls.read_at(self, receipt)
        writer = other.acquire_writer(receipt.world_id)
        other.commit(writer, receipt, [ComponentWrite("e", "c", "new intent")])
        return snapshot

    racing = type("Racing", (stored.cls,), {"read_at": read_at})
    ledger = racing(stored.where)
    stored.opened.append(ledger)
    ledger.create_world("src")
    r1 = _commit(ledger, "src", ComponentWrite("e", "c", 1))
    with pytest.raises(HeadConflict):
        ledger.fork(r1, "dst")
    assert ledger.worlds() == ["src"]


def test_destroy_with_a_checked_head_refuses_a_moved_or_unfinished_head(
    ledger: SqliteLedger,
) -> None:
    ledger.create_world("w")
    r1 = _commit(ledger, "w")
    r2 = ledger.commit(ledger.acquire_writer("w"), r1, [])
    ledger.reserve_close("w", sticky=True)
    with pytest.raises(HeadConflict):
        ledger.destroy("w", r1)
    with pytest.raises(PostCommitPending):
        ledger.destroy("w", r2)
    assert ledger.worlds() == ["w"]
    ledger.complete_post_commit(r2)
    ledger.destroy("w", r2)
    assert ledger.worlds() == []


@given(st.lists(_writes, min_size=1, max_size=6))
def test_a_kept_snapshot_is_the_same_as_one_read_afresh(
    ticks: list[list[tuple[str, str, object]]],
) -> None:
    # SQLite only: the kept head snapshot is the SQLite ledger's; the PostgreSQL one reads
    # every snapshot from SQL (the read-back property above covers it).
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        ledger = SqliteLedger.open(Path(d) / "world.db")
        ledger.create_world("w")
        kept = []
        for tick in ticks:
            r = _commit(ledger, "w", *(ComponentWrite(e, c, v) for e, c, v in tick))
            kept.append(ledger.read_at(r))  # built from the parent's and the writes
        fresh = SqliteLedger.open(Path(d) / "world.db")
        for snap in kept:
            again = fresh.read_at(snap.receipt)  # read from SQL
            assert snap.changes == again.changes
            assert dict(snap.encoded()) == dict(again.encoded())
        fresh.close()
        ledger.close()


def test_the_head_read_after_a_commit_reads_no_components(sqlite_ledger: SqliteLedger) -> None:
    ledger = sqlite_ledger  # statements are traced on the SQLite connection
    ledger.create_world("w")
    r1 = _commit(ledger, "w", ComponentWrite("e", "c", 1))
    ledger.read_at(r1)  # what post-commit work does with every head: now it is kept
    r2 = _commit(ledger, "w", ComponentWrite("e", "c", None), ComponentWrite("f", "c", 2))
    statements: list[str] = []
    ledger._db.set_trace_callback(statements.append)
    snap = ledger.read_at(r2)
    ledger._db.set_trace_callback(None)
    assert {k: snap.get(*k) for k in snap.keys()} == {("f", "c"): 2}
    assert snap.changes == {("e", "c"), ("f", "c")}
    assert not any("FROM components" in s for s in statements)
    assert any("FROM tick_tokens" in s for s in statements)  # the tick is still checked
    assert ledger.read_at(r1).get("e", "c") == 1  # a historical read comes from SQL
    statements.clear()
    ledger._db.set_trace_callback(statements.append)
    ledger.read_at(r2)  # and left the later snapshot kept
    ledger._db.set_trace_callback(None)
    assert not any("FROM components" in s for s in statements)


def test_the_post_commit_mark_does_not_sync_but_a_later_commit_carries_it(
    sqlite_ledger: SqliteLedger, tmp_path: Path
) -> None:
    ledger = sqlite_ledger  # WAL syncs are a SQLite matter
    ledger.create_world("w")
    writer = ledger.acquire_writer("w")
    r1 = ledger.commit(writer, ledger.head("w"), [ComponentWrite("e", "c", 1)])
    synced, commits = ledger.synced_commits, ledger.commits
    ledger.complete_post_commit(r1)
    assert (ledger.synced_commits, ledger.commits) == (synced, commits + 1)
    assert ledger._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # ticks: FULL
    assert ledger._unsynced.execute("PRAGMA synchronous").fetchone()[0] == 1  # the mark
    again = SqliteLedger.open(tmp_path / "world.db")  # another connection sees it at once
    try:
        assert again.pending_post_commit("w") is None
    finally:
        again.close()
    r2 = ledger.commit(writer, r1, [ComponentWrite("e", "c", 2)])
    assert ledger.synced_commits == synced + 1 and r2.tick == 2
