"""A COMMIT whose reply was lost is an unknown outcome: the store says so (`CommitUnknown`),
the catalog re-reads, and the worker starts no effect on a claim or bind that did not land.

A loopback proxy (`pgproxy.CommitCutter`) drops either the COMMIT itself (the server rolls
back) or only its reply (the server committed); the client sees a broken connection both
times. A session terminated from another connection (`pg_terminate_backend`) is the same.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from tether.activities import ActivityKey, Catalog, operation_id_for
from tether.errors import CatalogStorageError
from tether.runtime import Host
from tether.storage import CommitUnknown

from tests.activities.support import ManualClock, admission, key

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash"))
from hosttools import akey
from journal_provider import KIND, Journal, intents, make_family
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
        # Said as every command says a server gone (it was an uncoded CatalogStorageError).
        assert getattr(info.value, "code", None) == "unreachable", info.value
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


# --- The Ticker: a lost COMMIT of a tick (or of its post-commit work) is re-read at once ---


def _ticks(pg_url: str, world: str) -> int:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM ticks WHERE world_id = %s", (world,)).fetchone()
    assert row is not None
    return int(row[0])


#: Cuts per sweep in the default run (TETHER_SLOW=1 cuts every COMMIT of the step).
SAMPLED_CUTS = 2


def _sweep(cutter: CommitCutter, mode: str, step: Callable[[int, Callable[[], None]], None]) -> int:
    """Cut the k-th COMMIT through `cutter` of a fresh `step(n, arm)` (which calls `arm()`
    where the cut window starts), for every k the step makes (a sample of them by default);
    return how many COMMITs one step makes. Steps 0 and 1 are uncut and count them."""
    start = [0]

    def arm_with(skip: int) -> Callable[[], None]:
        def arm() -> None:
            start[0] = cutter.commits
            cutter.arm(mode, skip=skip)

        return arm

    for n in range(2):  # the second uncut step counts: the first may do one-time work
        step(n, arm_with(10**9))
        cutter.disarm()
        commits = cutter.commits - start[0]
    assert commits > 0
    every = range(commits)
    sampled = sorted(random.sample(every, min(SAMPLED_CUTS, commits)))
    ks = every if os.environ.get("TETHER_SLOW") else sampled
    for n, k in enumerate(ks, 2):
        step(n, arm_with(k))
        assert cutter.cuts == n - 1, f"COMMIT {k} of the {commits} of a step was not cut"
    return commits


def _host(
    tmp_path: Path,
    pg_url: str,
    cutter: CommitCutter,
    store: str,
    clock: ManualClock | None = None,
) -> Host:
    """A thread-less Host whose catalog or world ledger (`store`) is behind the cutter."""
    return Host(
        tmp_path,
        [make_family(tmp_path)],
        workers=0,
        observe=False,
        clock=clock or ManualClock(),
        catalog_url=cutter.url if store == "catalog" else pg_url,
        world_url=cutter.url if store == "world" else pg_url,
    )


@pytest.mark.parametrize("mode", ["drop_commit", "drop_reply"])
@pytest.mark.parametrize("store", ["world", "catalog"])
def test_every_lost_commit_of_an_intent_tick_is_reread_before_anything_else(
    tmp_path: Path, pg_url: str, cutter: CommitCutter, store: str, mode: str
) -> None:
    """The k-th COMMIT that `commit_tick` makes on the ledger (or on the catalog) is cut, for
    every k: the tick itself (landed or not), its snapshot reads and receipt checks, its
    admissions and its post-commit mark. Each time `commit_tick` returns the head, the head's
    work is done (every Activity admitted from exactly that receipt) and exactly one tick was
    added: never a second tick on one parent, never a tick left for `Host.recover()`."""
    with _host(tmp_path, pg_url, cutter, store) as host:
        host.create_world("w")

        def step(n: int, arm: Callable[[], None]) -> None:
            arm()
            receipt = host.commit_tick("w", intents(2, prefix=f"n{n}"))
            assert receipt.tick == n + 1 and host.head("w") == receipt
            assert host.ledger.pending_post_commit("w") is None
            assert _ticks(pg_url, "w") == n + 2  # genesis and one tick per commit_tick
            for i in range(2):
                rec = host.get(ActivityKey("w", KIND, f"n{n}-{i:04d}"))
                assert rec is not None and rec.source == receipt

        commits = _sweep(cutter, mode, step)
        # The ledger: snapshot reads, the tick, receipt checks, the mark; the catalog: at
        # least the tick's admissions (one transaction for both).
        assert commits >= (4 if store == "world" else 1)


@pytest.mark.parametrize("mode", ["drop_commit", "drop_reply"])
@pytest.mark.parametrize("store", ["world", "catalog"])
def test_every_lost_commit_of_an_observation_tick_is_reread_and_settles_once(
    tmp_path: Path, pg_url: str, cutter: CommitCutter, store: str, mode: str
) -> None:
    """The k-th COMMIT of an observation tick (`observe_once`) is cut, for every k: the tick
    that commits the result's evidence, its settlement and its mark. Each time the one tick
    settles the Activity at exactly its receipt, the stager forgets the observation, and no
    second observation tick follows."""
    with _host(tmp_path, pg_url, cutter, store) as host:
        host.create_world("w")
        worker = host.new_worker("w0")
        steps = [0]
        try:

            def step(n: int, arm: Callable[[], None]) -> None:
                host.commit_tick("w", intents(1, prefix=f"n{n}"))
                key = ActivityKey("w", KIND, f"n{n}-0000")
                assert worker.run_next() == key
                arm()
                [receipt] = host.observe_once()
                assert host.head("w") == receipt
                assert host.ledger.pending_post_commit("w") is None
                rec = host.get(key)
                assert rec is not None and rec.settlement is not None
                assert rec.settlement.receipt == receipt
                assert host.stager.staged() == []
                assert _ticks(pg_url, "w") == 2 * n + 3  # genesis, then intent and observation
                steps[0] = n + 1

            commits = _sweep(cutter, mode, step)
        finally:
            worker.close()
        assert commits >= (4 if store == "world" else 1)
        assert Journal(tmp_path / "provider.db").effects() == {
            operation_id_for(ActivityKey("w", KIND, f"n{n}-0000")): 1 for n in range(steps[0])
        }


@pytest.mark.parametrize("mode", ["drop_commit", "drop_reply"])
def test_every_lost_catalog_commit_of_a_worker_attempt_is_reread_before_any_effect(
    tmp_path: Path, pg_url: str, cutter: CommitCutter, mode: str
) -> None:
    """The k-th catalog COMMIT of `run_next` is cut, for every k: the claim, the bind, the
    renewal of the execute's `ctx.heartbeat()`, the result. Whatever was lost, the worker
    re-reads before acting: the effect happens exactly once, `execute` runs exactly once (a
    lost claim or bind starts nothing, a bind that landed is found), and the result is
    recorded, at once or by the next claim after the lease."""
    clock = ManualClock()
    with _host(tmp_path, pg_url, cutter, "catalog", clock) as host:
        host.create_world("w")
        journal = Journal(tmp_path / "provider.db")
        workers = []
        try:

            def step(n: int, arm: Callable[[], None]) -> None:
                # A worker per step: one whose renewal was cut leaves its next attempt's
                # `ctx.heartbeat()` to its heartbeat thread's fresh connection (a renewal
                # less in that step, at random), and every step makes the same COMMITs.
                worker = host.new_worker(f"w{n}")
                workers.append(worker)
                host.commit_tick("w", intents(1, prefix=f"n{n}"))
                key = ActivityKey("w", KIND, f"n{n}-0000")
                arm()
                worker.run_next()
                cutter.disarm()
                for _ in range(3):  # a claim or bind that did not land: the lease runs out
                    rec = host.get(key)
                    assert rec is not None
                    if rec.result is not None:
                        break
                    clock.advance(host.lease_ms + 1)
                    assert worker.run_next() == key
                rec = host.get(key)
                assert rec is not None and rec.result is not None
                op = operation_id_for(key)
                assert journal.effects()[op] == 1
                assert [o for o, _, _ in journal.calls("execute")].count(op) == 1

            _sweep(cutter, mode, step)
        finally:
            for worker in workers:
                worker.close()


def test_a_session_the_server_ended_while_idle_is_reopened_and_the_call_goes_through(
    pg_url: str,
) -> None:
    """An idle session ended by the server (`pg_terminate_backend`, a restart, an idle-session
    killer) failed the next call as `unreachable` (exit 7 for every command) while the server
    answered. A read is sent again on a fresh session; so is a message the server answered
    had not run at all (ended before its first statement); each once."""
    clock = ManualClock()
    with Catalog.open(pg_url, clock=clock) as cat:
        k, k2 = key(), key(activity_id="second")

        def end_its_session() -> None:
            pid = cat.store.backend_pid  # type: ignore[attr-defined]
            with psycopg.connect(pg_url, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))

        cat.admit(admission(k))
        end_its_session()
        assert cat.get(k) is not None  # a read
        end_its_session()
        assert cat.admit(admission(k2)).key == k2  # one message: BEGIN, the insert, COMMIT
        end_its_session()
        claim = cat.claim("w", 10_000)  # a read, then a write
        assert claim is not None and claim.fence == 1
        end_its_session()
        bound = cat.bind_provider_operation(claim.key, claim.fence, operation_id_for(claim.key))
        assert bound.operation_id == operation_id_for(claim.key)
