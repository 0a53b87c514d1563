"""The `WorldLedger` port: both implementations keep its rules, and the Host needs nothing else.

`MemoryLedger` (tests/world/memory_ledger.py) is a second world engine written only against
the port, so the same conformance tests run on it and on the SQLite reference, and a Host
driven end to end on it proves the runtime reaches the ledger only through the port.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from hosttools import Clock, akey
from journal_provider import Journal, intents, make_family
from memory_ledger import MemoryLedger
from tether.runtime import Host
from tether.world import (
    CommittedTickReceipt,
    ComponentWrite,
    HeadConflict,
    PostCommitPending,
    ReceiptRejected,
    SqliteLedger,
    StaleWriter,
    UnsettledActivities,
    WorldClosing,
    WorldLedger,
    open_ledger,
)


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorldLedger]:
    impl: WorldLedger
    if request.param == "sqlite":
        impl = SqliteLedger.open(tmp_path / "world.db")
    elif request.param == "postgres":
        impl = open_ledger(request.getfixturevalue("pg_url"))
    else:
        impl = MemoryLedger()
    assert isinstance(impl, WorldLedger)
    yield impl
    impl.close()


def _commit(ledger: WorldLedger, world: str, *writes: ComponentWrite) -> CommittedTickReceipt:
    r = ledger.commit(ledger.acquire_writer(world), ledger.head(world), list(writes))
    ledger.complete_post_commit(r)
    return r


def _code(ledger: WorldLedger, receipt: CommittedTickReceipt) -> str:
    with pytest.raises(ReceiptRejected) as err:
        ledger.check_receipt(receipt)
    return err.value.code


def test_port_commit_fences_cas_and_post_commit_gate(ledger: WorldLedger) -> None:
    genesis = ledger.create_world("w")
    old, new = ledger.acquire_writer("w"), ledger.acquire_writer("w")
    with pytest.raises(StaleWriter):
        ledger.commit(old, genesis, [])
    r1 = ledger.commit(new, genesis, [ComponentWrite("e", "c", {"v": 1})])
    assert r1.visibility_token not in ("", genesis.visibility_token)
    assert r1.visibility_token in ledger.visibility_allowlist("w")
    with pytest.raises(PostCommitPending):
        ledger.commit(new, r1, [])
    assert ledger.pending_post_commit("w") == r1
    ledger.complete_post_commit(r1)
    with pytest.raises(HeadConflict):
        ledger.commit(new, genesis, [])
    r2 = ledger.commit(new, r1, [ComponentWrite("e", "c", None), ComponentWrite("f", "c", 2)])
    assert ledger.read_at(r1).get("e", "c") == {"v": 1}
    assert ledger.read_at(r2).get("e", "c") is None and ledger.read_at(r2).get("f", "c") == 2
    assert ledger.read_at(r2).changes == {("e", "c"), ("f", "c")}


def test_port_receipt_reader_fails_closed(ledger: WorldLedger) -> None:
    ledger.create_world("w")
    ledger.create_world("v")
    r1 = _commit(ledger, "w")
    r2 = _commit(ledger, "w")
    ledger.check_receipt(r2)
    assert _code(ledger, r1) == "not_head"
    assert _code(ledger, dataclasses.replace(r2, visibility_token="vt_sib")) == "sibling_token"
    assert _code(ledger, dataclasses.replace(r2, visibility_token="")) == "tokenless"
    assert _code(ledger, dataclasses.replace(r2, world_id="v")) == "wrong_run"
    assert _code(ledger, dataclasses.replace(r2, world_id="nope")) == "unknown_world"
    assert _code(ledger, dataclasses.replace(r2, run_id="run_x")) == "wrong_run"


def test_port_lifecycle(ledger: WorldLedger) -> None:
    ledger.create_world("w")
    r1 = ledger.commit(ledger.acquire_writer("w"), ledger.head("w"), [ComponentWrite("e", "c", 1)])
    with pytest.raises(PostCommitPending):
        ledger.fork(r1, "f")
    ledger.complete_post_commit(r1)
    fork = ledger.fork(r1, "f")
    assert ledger.read_at(fork).get("e", "c") == 1 and ledger.pending_post_commit("f") is None
    ledger.reserve_close("w", sticky=False)
    with pytest.raises(WorldClosing):
        ledger.commit(ledger.acquire_writer("w"), r1, [])
    ledger.rollback_close("w")
    assert ledger.close_state("w") == ("open", False)
    ledger.reserve_close("w", sticky=True)
    ledger.rollback_close("w")
    assert ledger.close_state("w") == ("closing", True)
    ledger.destroy("w", r1)
    assert ledger.worlds() == ["f"]
    assert _code(ledger, r1) == "world_closed"
    with ledger.lock("f"):
        assert ledger.holds_lock("f") and ledger.holds_lock() and not ledger.holds_lock("w")
        with ledger.lock("f"):  # re-entrant for its holder
            pass
        assert ledger.holds_lock("f")
    assert not ledger.holds_lock()


def test_host_runs_on_the_port_alone(tmp_path: Path) -> None:
    # One backend by design: the world is the in-memory port; the catalog is not the subject.
    ledger = MemoryLedger()
    host = Host(tmp_path, [make_family(tmp_path)], workers=2, ledger=ledger)
    try:
        host.create_world("w")
        r1 = host.commit_tick("w", intents(4))
        with pytest.raises(UnsettledActivities):
            host.fork_world("w", "w2")
        with pytest.raises(UnsettledActivities):
            host.destroy_world("w")
        assert ledger.close_state("w") == ("open", False)
        host.start()
        assert host.wait_settled("w", timeout_s=120)
        for i in range(4):
            rec = host.get(akey(i))
            assert rec is not None and rec.settlement is not None
            assert rec.source == r1 and rec.settlement.receipt.run_id == r1.run_id
            assert host.snapshot("w").get(f"task-{i:04d}", "task.status.crash.effect") == "done"
        fork = host.fork_world("w", "w2")
        assert ledger.read_at(fork).get("task-0000", "task.status.crash.effect") == "done"
        host.destroy_world("w")
        assert ledger.worlds() == ["w2"]
    finally:
        host.close()
    assert not (tmp_path / "world.db").exists()  # the SQLite ledger was never opened
    assert len(Journal(tmp_path / "provider.db").effects()) == 4


def test_host_on_the_port_blocks_the_next_tick_until_post_commit_work_succeeds(
    tmp_path: Path,
) -> None:
    # One backend by design: the world is the in-memory port; the catalog is not the subject.
    ledger = MemoryLedger()
    with Host(
        tmp_path, [make_family(tmp_path)], workers=0, observe=False, ledger=ledger, clock=Clock()
    ) as host:
        host.create_world("w")
        r1 = ledger.commit(host.ticker.writer("w"), ledger.head("w"), intents(1))  # "crashed" here
        assert host.get(akey(0)) is None
        r2 = host.commit_tick("w", [])  # finishes r1's projection from the retained receipt first
        rec = host.get(akey(0))
        assert rec is not None and rec.source == r1 and r2.tick == 2
