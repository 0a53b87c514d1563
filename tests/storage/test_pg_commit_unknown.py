"""A COMMIT whose reply was lost is an unknown outcome: the store says so (`CommitUnknown`),
the catalog re-reads, and the worker starts no effect on a claim or bind that did not land.

A loopback proxy (`pgproxy.CommitCutter`) drops either the COMMIT itself (the server rolls
back) or only its reply (the server committed); the client sees a broken connection both
times. A session terminated from another connection (`pg_terminate_backend`) is the same.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from tether.activities import Catalog, operation_id_for
from tether.errors import CatalogStorageError
from tether.runtime import Host
from tether.storage import CommitUnknown

from tests.activities.support import ManualClock, admission, key

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
from hosttools import akey
from journal_provider import Journal, intents, make_family
from pgproxy import CommitCutter


@pytest.fixture
def cutter(pg_url: str) -> Iterator[CommitCutter]:
    proxy = CommitCutter(pg_url)
    yield proxy
    proxy.close()


def test_a_lost_reply_of_a_landed_claim_is_unknown_and_the_reread_finds_it(
    cutter: CommitCutter,
) -> None:
    clock = ManualClock()
    with Catalog.open(cutter.url, clock=clock) as cat:
        k = key()
        cat.admit(admission(k))
        assert [r.key for r in cat.iter_claimable()] == [k]  # the clock alignment commits first
        cutter.arm("drop_reply")
        with pytest.raises(CommitUnknown) as info:
            cat.claim("w", 10_000)
        assert cutter.cuts == 1 and info.value.key == (k.world_id, k.kind, k.activity_id)
        landed = cat.committed(info.value)  # reconnects to re-read
        assert landed is not None and landed.attempt is not None
        assert landed.attempt.owner == "w" and landed.fence == 1


def test_a_dropped_commit_of_a_bind_is_unknown_and_the_reread_finds_it_absent(
    cutter: CommitCutter,
) -> None:
    clock = ManualClock()
    with Catalog.open(cutter.url, clock=clock) as cat:
        k = key()
        cat.admit(admission(k))
        c = cat.claim("w", 10_000)
        assert c is not None
        cutter.arm("drop_commit")
        with pytest.raises(CommitUnknown) as info:
            cat.bind_provider_operation(k, c.fence, operation_id_for(k))
        assert cat.committed(info.value) is None
        rec = cat.get(k)
        assert rec is not None and rec.operation_id is None  # the server rolled it back
        # The core decides again on the stored row: the live attempt may still bind.
        assert cat.bind_provider_operation(k, c.fence, operation_id_for(k)).operation_id


def test_a_terminated_session_mid_transaction_writes_nothing_and_the_store_reconnects(
    pg_url: str,
) -> None:
    clock = ManualClock()
    with Catalog.open(pg_url, clock=clock) as cat:
        k = key()
        cat.admit(admission(k))
        pid = cat.store.backend_pid  # type: ignore[attr-defined]

        def terminate_then_claim(row: tuple[object, ...]) -> tuple[object, ...]:
            with psycopg.connect(pg_url, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))  # gone first
            from tether import _core

            return _core.catalog_claim(row, "w", 10_000, clock.now())

        with pytest.raises(CatalogStorageError) as info:
            cat.store.claim(clock.now_ms, terminate_then_claim, None, None)
        assert not isinstance(info.value, CommitUnknown)  # it broke before COMMIT: definite
        rec = cat.get(k)  # a new session
        assert rec is not None and rec.attempt is None and rec.version == 1


@pytest.mark.parametrize(("mode", "landed"), [("drop_commit", False), ("drop_reply", True)])
def test_the_worker_starts_no_effect_on_a_bind_it_cannot_prove(
    tmp_path: Path, pg_url: str, cutter: CommitCutter, mode: str, landed: bool
) -> None:
    """The worker's claim commits, then its bind's COMMIT (or reply) is lost: it re-reads and
    executes only if the bind landed; otherwise no effect starts and nothing is recorded."""
    with Host(
        tmp_path,
        [make_family(tmp_path)],
        workers=0,
        observe=False,
        clock=ManualClock(),
        catalog_url=cutter.url,
        world_url=pg_url,
    ) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        assert len(list(host.catalog.iter_claimable())) == 1  # aligns the store's clock
        worker = host.new_worker("w0")
        try:
            cutter.arm(mode, skip=1)  # the claim's COMMIT passes, the bind's is cut
            assert worker.run_next() == akey(0)
        finally:
            worker.close()
        assert cutter.cuts == 1
        rec = host.get(akey(0))
        assert rec is not None
        effects = Journal(tmp_path / "provider.db").effects()
        if landed:
            assert rec.operation_id == operation_id_for(akey(0)) and rec.result is not None
            assert effects == {operation_id_for(akey(0)): 1}
        else:
            assert rec.operation_id is None and rec.result is None
            assert effects == {}


@pytest.mark.parametrize(("mode", "landed"), [("drop_commit", False), ("drop_reply", True)])
def test_a_lost_tick_commit_is_unknown_and_the_head_tells(
    cutter: CommitCutter, mode: str, landed: bool
) -> None:
    """The ledger raises `LedgerCommitUnknown`; re-reading the head tells whether the tick
    landed, and the head compare-and-swap refuses a second commit on the same parent."""
    from tether.errors import HeadConflict, LedgerCommitUnknown
    from tether.world import ComponentWrite, open_ledger

    ledger = open_ledger(cutter.url)
    try:
        genesis = ledger.create_world("w")
        writer = ledger.acquire_writer("w")
        cutter.arm(mode)
        with pytest.raises(LedgerCommitUnknown):
            ledger.commit(writer, genesis, [ComponentWrite("e", "c", 1)])
        head = ledger.head("w")  # a new session
        assert head.tick == (1 if landed else 0)
        if landed:
            assert ledger.read_at(head).get("e", "c") == 1
            with pytest.raises(HeadConflict):
                ledger.commit(writer, genesis, [ComponentWrite("e", "c", 1)])
        else:
            assert ledger.commit(writer, genesis, [ComponentWrite("e", "c", 1)]).tick == 1
    finally:
        ledger.close()


@pytest.mark.parametrize(("mode", "landed"), [("drop_commit", False), ("drop_reply", True)])
def test_a_lost_confirmed_absence_is_reread_and_never_authorises_a_guess(
    tmp_path: Path, pg_url: str, cutter: CommitCutter, mode: str, landed: bool
) -> None:
    """A reconcile attempt concludes absent and its COMMIT (or reply) is lost: the worker
    re-reads instead of failing the loop; only an absence that landed lets the next claim
    execute, one that did not leaves the next claim reconcile-only."""
    clock = ManualClock()
    with Host(
        tmp_path,
        [make_family(tmp_path)],
        workers=0,
        observe=False,
        clock=clock,
        catalog_url=cutter.url,
        world_url=pg_url,
    ) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        first = host.catalog.claim_key(akey(0), "gone", 1_000)
        host.catalog.bind_provider_operation(akey(0), first.fence, operation_id_for(akey(0)))
        clock.advance(1_001)  # the binder died before its effect: its lease ran out
        worker = host.new_worker("w0")
        try:
            cutter.arm(mode, skip=1)  # the reconcile claim's COMMIT passes, the absence's is cut
            assert worker.run_next() == akey(0)
        finally:
            worker.close()
        assert cutter.cuts == 1
        rec = host.get(akey(0))
        assert rec is not None and rec.result is None
        assert (rec.retry_guard is not None) == landed
        assert Journal(tmp_path / "provider.db").effects() == {}
        clock.advance(60_000)
        again = host.catalog.claim_key(akey(0), "next", 1_000)
        assert again.attempt.may_execute == landed
