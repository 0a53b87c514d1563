"""The Host end to end, in-process and deterministic: projector, workers, staging, settlement.

Workers are driven with `run_once` and the catalog with a manual clock, so every test picks
the exact interleaving it is about. Real SQLite files and a real provider journal throughout.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hosttools import Clock, akey, drain, make_host, same, store_kw
from journal_provider import (
    BLIND_KIND,
    KIND,
    DedupAdapter,
    Journal,
    intents,
    make_blind_family,
    make_family,
    projection_for,
    stage_task,
)
from tether._coded import CodedError
from tether.activities import ActivityKey, operation_id_for
from tether.runtime import (
    AttemptContext,
    Family,
    Host,
    LeaseLost,
    ProgressEvent,
)
from tether.runtime._worker import RENEW_RETRY_S
from tether.world import ComponentWrite

from tests.backends import BACKENDS


def test_non_durable_adapter_result_is_never_recorded(tmp_path: Path) -> None:
    clock = Clock()
    journal = Journal(tmp_path / "provider.db")

    class Liar(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            real = super().execute(ctx, request)
            return dataclasses.replace(real, ref="artifact:sha256/" + "0" * 64)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Liar(journal), stage_task)
    with make_host(tmp_path, fam, clock=clock) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        worker = host.new_worker()
        assert worker.run_once()
        rec = host.get(akey(0))
        assert rec is not None and rec.result is None and rec.attempt is not None
        clock.now += 120_000  # the lease runs out; the next attempt may only reconcile
        assert worker.run_once()
        worker.close()
        rec = host.get(akey(0))
        assert rec is not None and rec.result is not None
        assert host.artifacts.is_durable(rec.result)
        assert [m for _, m, _ in journal.calls()] == ["execute", "reconcile"]
        assert journal.effects() == {operation_id_for(akey(0)): 1}


@pytest.mark.parametrize("typed", [True, False], ids=["typed", "bug"])
def test_an_execute_that_raises_is_logged_by_kind_and_left_to_reconcile(
    tmp_path: Path, typed: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A typed error (a latched robot, a device error) is one warning with its code and no
    traceback; anything else is an error with its traceback. Either way nothing is recorded
    and the next attempt only reconciles."""
    clock = Clock()
    journal = Journal(tmp_path / "provider.db")

    class Refuses(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            journal.log_call(ctx.operation_id, "execute", ctx.fence)
            if typed:
                raise CodedError("stopped_by_operator", "robot arm was stopped by an operator")
            raise KeyError("a bug")

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Refuses(journal), stage_task)
    with make_host(tmp_path, fam, clock=clock) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        worker = host.new_worker()
        with caplog.at_level("DEBUG", logger="tether.runtime.worker"):
            assert worker.run_once()
        rec = host.get(akey(0))
        assert rec is not None and rec.result is None
        [line] = [r for r in caplog.records if "leaving it to reconcile" in r.getMessage()]
        # The Activity is named as every command names it, not by its Python repr.
        k = akey(0)
        said = line.getMessage()
        assert f"{k.world_id}/{k.kind}/{k.activity_id}" in said and "ActivityKey(" not in said
        if typed:
            assert line.levelname == "WARNING" and line.exc_info is None
            assert "stopped_by_operator: robot arm was stopped" in line.getMessage()
        else:
            assert line.levelname == "ERROR" and line.exc_info is not None
        clock.now += 120_000  # the lease runs out; the next attempt may only reconcile
        assert worker.run_once()
        worker.close()
        assert [m for _, m, _ in journal.calls()] == ["execute", "reconcile"]


def test_progress_reaches_the_host_listener(tmp_path: Path) -> None:
    events: list[ProgressEvent] = []
    with make_host(tmp_path, progress_listener=events.append) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        drain(host)
    assert [e.content["phase"] for e in events] == ["executing"]
    assert events[0].key == akey(0) and events[0].operation_id == operation_id_for(akey(0))


def test_blind_provider_unknown_parks_and_reconcile_never_executes(tmp_path: Path) -> None:
    clock = Clock()
    journal = Journal(tmp_path / "provider.db")
    with make_host(tmp_path, make_blind_family(tmp_path), clock=clock, lease_ms=1000) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1, kind=BLIND_KIND))
        key = akey(0, kind=BLIND_KIND)
        worker = host.new_worker()
        claim = host.catalog.claim("ghost", 1000, kinds=[BLIND_KIND])  # a worker that dies bound
        assert claim is not None
        host.catalog.bind_provider_operation(key, claim.attempt.fence, operation_id_for(key))
        journal.perform_blind(operation_id_for(key), {})
        for _ in range(3):
            clock.now += 120_000
            assert worker.run_once()
            rec = host.get(key)
            assert rec is not None and rec.awaiting_decision and rec.result is None
        worker.close()
        assert [m for _, m, _ in journal.calls()] == ["reconcile"] * 3
        assert journal.effects() == {operation_id_for(key): 1}


def test_threaded_host_settles_and_shuts_down_cleanly(tmp_path: Path) -> None:
    host = Host(tmp_path, [make_family(tmp_path)], workers=2, **store_kw(tmp_path))
    host.create_world("w")
    host.commit_tick("w", intents(6))
    host.start()
    try:
        import time

        for _ in range(2000):
            if all((r := host.get(akey(i))) is not None and r.settlement for i in range(6)):
                break
            time.sleep(0.01)
    finally:
        host.close()
    host.close()  # idempotent
    again = make_host(tmp_path)
    try:
        assert all(again.get(akey(i)).settlement is not None for i in range(6))  # type: ignore[union-attr]
    finally:
        again.close()


def test_shutdown_releases_only_unbound_claims(tmp_path: Path) -> None:
    with make_host(tmp_path) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        worker = host.new_worker()
        worker.stop.set()
        assert worker.run_once()  # claimed, saw the stop, released: nothing was bound
        worker.close()
        rec = host.get(akey(0))
        assert rec is not None and rec.attempt is None and rec.operation_id is None
        assert Journal(tmp_path / "provider.db").calls() == []


def test_operator_abandon_of_an_unknown_activity_is_observed_and_settled(
    tmp_path: Path,
) -> None:
    from tether.activities import Decision

    clock = Clock()
    with make_host(tmp_path, make_blind_family(tmp_path), clock=clock, lease_ms=1000) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1, kind=BLIND_KIND))
        key = akey(0, kind=BLIND_KIND)
        claim = host.catalog.claim("ghost", 1000, kinds=[BLIND_KIND])
        assert claim is not None
        host.catalog.bind_provider_operation(key, claim.attempt.fence, operation_id_for(key))
        clock.now += 120_000
        worker = host.new_worker()
        assert worker.run_once()  # reconcile -> Unknown: parked awaiting a decision
        worker.close()
        rec = host.get(key)
        assert rec is not None and rec.awaiting_decision
        host.catalog.resolve(
            key, Decision.abandon(evidence_revision=rec.evidence_revision, operator="op")
        )
        [receipt] = host.observe_once()
        rec = host.get(key)
        assert rec is not None and rec.result is not None and rec.result.failed
        assert rec.settlement is not None and same(receipt, rec.settlement.receipt)
        fact = host.snapshot("w").get("task-0000", f"task.observed.{BLIND_KIND}")
        assert fact["failed"] is True


def test_heartbeat_keeps_a_long_attempt_live_and_a_lost_lease_stops_it(tmp_path: Path) -> None:
    clock = Clock()
    journal = Journal(tmp_path / "provider.db")
    other_claims: list[object] = []

    class Long(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            for _ in range(3):  # 3 x 20 s > the 30 s lease, renewed each time
                clock.now += 20_000
                ctx.heartbeat()
                other_claims.append(host.catalog.claim("rival", 30_000, kinds=[KIND]))
            return super().execute(ctx, request)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Long(journal), stage_task)
    with make_host(tmp_path, fam, clock=clock, lease_ms=30_000) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        assert drain(host) == 1
        assert other_claims == [None, None, None]  # never reclaimable while renewed
        rec = host.get(akey(0))
        assert rec is not None and rec.result is not None and rec.fence == 1


def test_heartbeat_raises_lease_lost_once_a_newer_claim_took_over(tmp_path: Path) -> None:
    clock = Clock()
    journal = Journal(tmp_path / "provider.db")
    raised: list[BaseException] = []

    class Sleepy(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            clock.now += 60_000  # the lease lapses while the adapter is away
            try:
                ctx.heartbeat()
            except LeaseLost as e:
                raised.append(e)
                raise
            return super().execute(ctx, request)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Sleepy(journal), stage_task)
    with make_host(tmp_path, fam, clock=clock, lease_ms=30_000) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        worker = host.new_worker()
        assert worker.run_once()
        worker.close()
        assert len(raised) == 1
        rec = host.get(akey(0))
        assert rec is not None and rec.result is None
        assert journal.effects() == {}  # it stopped before the effect


def test_a_context_kept_past_its_attempt_says_the_attempt_ended(tmp_path: Path) -> None:
    """An adapter that leaves a thread running keeps its context: that thread's
    `ctx.heartbeat()` renewed nothing and raised nothing (it went on as if it held the
    lease), and its `ctx.progress()` was shown after the attempt's outcome."""
    journal = Journal(tmp_path / "provider.db")
    kept: list[AttemptContext] = []

    class Leaves(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            kept.append(ctx)
            ctx.heartbeat()  # while it runs: fine
            ctx.progress({"phase": "running"})
            return super().execute(ctx, request)

    events: list[Any] = []
    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Leaves(journal), stage_task)
    with make_host(tmp_path, fam, progress_listener=events.append) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        assert drain(host) == 1
        (ctx,) = kept
        before = host.get(akey(0))
        with pytest.raises(LeaseLost, match="has ended"):
            ctx.heartbeat()
        with pytest.raises(LeaseLost, match="has ended"):
            ctx.progress({"phase": "still moving"})
        assert {"phase": "still moving"} not in [e.content for e in events]
        assert {"phase": "running"} in [e.content for e in events]
        assert host.get(akey(0)) == before  # nothing renewed


def test_a_result_the_catalog_refuses_is_said_as_that_not_as_a_lost_lease(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An adapter's result past the catalog's bounds (a 300-byte media type) was logged as the
    worker having "lost" the Activity, as if another claim took it; its effect ran, and no
    result could be recorded."""
    import logging

    journal = Journal(tmp_path / "provider.db")

    class Odd(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            super().execute(ctx, request)
            return ctx.artifacts.put_bytes(b"{}", "a" * 300)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Odd(journal), stage_task)
    with make_host(tmp_path, fam) as host, caplog.at_level(logging.WARNING):
        host.create_world("w")
        host.commit_tick("w", intents(1))
        worker = host.new_worker()
        try:
            assert worker.run_once()
        finally:
            worker.close()
        rec = host.get(akey(0))
        assert rec is not None and rec.result is None
    said = [r.getMessage() for r in caplog.records]
    assert any("returned a result the catalog refuses" in m for m in said), said
    assert not any(" lost " in m for m in said), said


#: The heartbeat test's lease: renewed about every third of it, with margin for a loaded
#: machine's scheduling and a round trip to the server (a lost lease would re-run an attempt).
LEASE_MS = 1_200


@pytest.mark.parametrize("host_backend", BACKENDS, indirect=True)
def test_background_heartbeat_renews_the_lease_of_each_attempt_of_a_worker(
    tmp_path: Path, host_backend: str
) -> None:
    """On the default clocks: this host's on SQLite, the server's on PostgreSQL."""
    journal = Journal(tmp_path / "provider.db")
    renewed: set[str] = set()

    class Waits(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            first = host.get(ctx.key).attempt.lease_expires_ms  # type: ignore[union-attr]
            for _ in range(6000):  # until the heartbeat thread renews (about 0.4 s)
                now = host.get(ctx.key).attempt.lease_expires_ms  # type: ignore[union-attr]
                if now > first:
                    renewed.add(ctx.key.activity_id)
                    break
                threading.Event().wait(0.005)
            return super().execute(ctx, request)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Waits(journal), stage_task)
    host = Host(tmp_path, [fam], workers=0, observe=False, lease_ms=LEASE_MS, **store_kw(tmp_path))
    with host:
        host.create_world("w")
        host.commit_tick("w", intents(2))
        assert drain(host) == 2  # one worker, one heartbeat thread, two attempts
        for i in range(2):
            rec = host.get(akey(i))
            assert rec is not None and rec.result is not None and rec.attempt_count == 1
    assert renewed == {"task-0000", "task-0001"}


def _drop_newest_catalog_session(url: str) -> None:
    """Terminate the newest catalog session on the server at ``url`` but this one (a
    heartbeat's, just opened by `ctx.heartbeat()`): a server restart or a reset, to it."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        (pid,) = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'tether-catalog' AND pid <> pg_backend_pid()"
            " ORDER BY backend_start DESC LIMIT 1"
        ).fetchone()  # type: ignore[misc]
        admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))


def _renewed_within(host: Host, ctx: AttemptContext, seconds: float) -> float | None:
    """Seconds until the attempt's lease was renewed (`ctx.heartbeat()` meanwhile), or None."""
    first = host.get(ctx.key).attempt.lease_expires_ms  # type: ignore[union-attr]
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        ctx.heartbeat()
        now = host.get(ctx.key).attempt.lease_expires_ms  # type: ignore[union-attr]
        if now > first:
            return time.monotonic() - start
        threading.Event().wait(0.01)
    return None


@pytest.mark.parametrize("host_backend", ["postgres"], indirect=True)
def test_a_renewal_the_store_cannot_take_is_not_a_lost_lease(
    tmp_path: Path, host_backend: str
) -> None:
    """A renewal over a connection the server dropped (a restart, a reset) failed with a
    storage error out of `ctx.heartbeat()`, which stopped the attempt: a robot's move was cut
    and parked for an operator with the server back at once. The lease granted last holds: the
    attempt goes on, and the heartbeat thread renews it over a fresh connection."""
    journal = Journal(tmp_path / "provider.db")
    renewed: list[float] = []

    class Renews(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            ctx.heartbeat()  # opens the heartbeat's own connection (the newest one)
            _drop_newest_catalog_session(str(host.catalog_url))
            ctx.heartbeat()  # over the dropped connection: not a lost lease
            took = _renewed_within(host, ctx, 10)  # the heartbeat thread renews it (about 1 s)
            if took is not None:
                renewed.append(took)
            return super().execute(ctx, request)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Renews(journal), stage_task)
    host = Host(tmp_path, [fam], workers=0, observe=False, lease_ms=30_000, **store_kw(tmp_path))
    with host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        assert drain(host) == 1
        rec = host.get(akey(0))
        assert rec is not None and rec.result is not None and not rec.result.failed
        assert rec.attempt_count == 1  # never stopped, never reconciled
    assert len(renewed) == 1


@pytest.mark.parametrize("host_backend", ["postgres"], indirect=True)
def test_after_a_failed_renewal_the_next_attempt_is_renewed_within_the_retry_bound(
    tmp_path: Path, host_backend: str
) -> None:
    """An attempt whose renewal failed ended before the heartbeat thread renewed over a
    fresh connection. The worker's next attempt had its `ctx.heartbeat()` renew nothing (the
    attempt's own thread never waits to reconnect) and the thread's first renewal a third of
    the lease away (10 s here): now the thread renews it within `RENEW_RETRY_S`."""
    journal = Journal(tmp_path / "provider.db")
    renewed: dict[str, float] = {}

    class Renews(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            if ctx.key == akey(0):  # its renewal fails, and it ends at once
                ctx.heartbeat()  # opens the heartbeat's own connection (the newest one)
                _drop_newest_catalog_session(str(host.catalog_url))
                ctx.heartbeat()  # over the dropped connection: failed, not a lost lease
                return super().execute(ctx, request)
            took = _renewed_within(host, ctx, 5)
            if took is not None:
                renewed[ctx.key.activity_id] = took
            return super().execute(ctx, request)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Renews(journal), stage_task)
    host = Host(tmp_path, [fam], workers=0, observe=False, lease_ms=30_000, **store_kw(tmp_path))
    with host:
        host.create_world("w")
        host.commit_tick("w", intents(2))
        assert drain(host) == 2  # one worker, one heartbeat thread, two attempts
        for i in range(2):
            rec = host.get(akey(i))
            assert rec is not None and rec.result is not None and rec.attempt_count == 1
    assert list(renewed) == ["task-0001"], "the next attempt was not renewed within 5 s"
    assert renewed["task-0001"] < RENEW_RETRY_S + 2


def test_attempt_context_reports_worker_shutdown(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "provider.db")
    seen: list[bool] = []

    class Watch(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            seen.append(ctx.stopping)
            worker.stop.set()
            seen.append(ctx.stopping)
            return super().execute(ctx, request)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Watch(journal), stage_task)
    with make_host(tmp_path, fam) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        worker = host.new_worker()
        assert worker.run_once()
        worker.close()
    assert seen == [False, True]


def test_a_processor_decides_the_next_intent_and_the_projector_admits_it(tmp_path: Path) -> None:
    from journal_provider import mark_done
    from tether.runtime import Observation
    from tether.world import WorldSnapshot

    def next_step(snapshot: WorldSnapshot, observed: Sequence[Observation]) -> list[ComponentWrite]:
        out = []
        for o in observed:
            n = int(o.key.activity_id.split("-")[1])
            if n < 2:
                intent = {"kind": KIND, "n": n + 1, "pad": 0}
                out.append(ComponentWrite(f"task-{n + 1:04d}", "task.intent", intent))
        return out

    journal = Journal(tmp_path / "provider.db")
    fam = Family(
        "crashtest",
        (KIND,),
        projection_for((KIND,)),
        DedupAdapter(journal),
        stage_task,
        processors=(mark_done, next_step),
    )
    with make_host(tmp_path, fam) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        for _ in range(3):
            assert drain(host) == 1
            host.observe_once()
        assert drain(host) == 0
        for i in range(3):
            rec = host.get(akey(i))
            assert rec is not None and rec.settlement is not None
            if i > 0:  # admitted from the very tick that observed its predecessor
                prev = host.get(akey(i - 1))
                assert prev is not None and prev.settlement is not None
                assert rec.source == prev.settlement.receipt
        assert len(journal.effects()) == 3


def test_a_second_host_on_the_same_data_fences_the_first_writer(tmp_path: Path) -> None:
    from tether.world import StaleWriter

    first = make_host(tmp_path)
    try:
        first.create_world("w")
        r1 = first.commit_tick("w", intents(1))
        with make_host(tmp_path) as second:
            second.recover()  # a restarted process takes the world over at its head
            with pytest.raises(StaleWriter):
                first.commit_tick("w", [ComponentWrite("x", "y", 1)])
            r2 = second.commit_tick("w", [ComponentWrite("x", "y", 2)])
            assert (r2.run_id, r2.tick) == (r1.run_id, 2)  # same run, no fork of history
            drain(second)
            assert (
                first.observe_once() == []
            )  # fenced: it stops observing, without a loop of errors
            assert "w" in first.observer.fenced and first.head("w") == r2
            [r3] = second.observe_once()
            rec = second.get(akey(0))
            assert rec is not None and rec.settlement is not None
            assert rec.settlement.receipt == r3
    finally:
        first.close()


def test_hosts_sharing_a_ledger_write_recover_and_observe_only_their_own_worlds(
    tmp_path: Path,
) -> None:
    """`world_owner`: a Host on a ledger other hosts share takes only the worlds named for it
    (`<id>@<owner>`): its recover never fences another host's writer, a commit to another
    host's world is `WorldOfAnotherHost` (nothing written, nothing fenced), and it never
    observes another host's results."""
    from tether.runtime import WorldOfAnotherHost

    with make_host(tmp_path, world_owner="h1") as one, make_host(tmp_path, world_owner="h2") as two:
        one.create_world("w@h1")
        two.create_world("w@h2")
        with pytest.raises(WorldOfAnotherHost) as refused:
            one.create_world("x@h2")
        assert refused.value.code == "world_of_another_host"
        assert refused.value.details == {"world": "x@h2", "host": "h1"}
        one.recover()  # a restart of host h1: h2's writer stays h2's
        r1 = two.commit_tick("w@h2", intents(1))
        with pytest.raises(WorldOfAnotherHost):
            one.commit_tick("w@h2", [ComponentWrite("x", "y", 1)])
        assert two.head("w@h2") == r1  # nothing written by the refused commit
        drain(two)  # the move runs; its result awaits an observation of its own host
        assert one.observe_once() == []  # h2's result is not h1's to observe
        [observed] = two.observe_once()
        rec = two.get(akey(0, "w@h2"))
        assert rec is not None and rec.settlement is not None
        assert rec.settlement.receipt == observed
        one.commit_tick("w@h1", [ComponentWrite("x", "y", 1)])  # its own world, as before
        assert one.stager.staged_worlds() == []  # h2's results were never held by h1
        with pytest.raises(WorldOfAnotherHost):
            one.destroy_world("w@h2")
        assert two.head("w@h2") is not None
    from tether.runtime import owned_by

    assert owned_by("local@x", "x") and owned_by("anything", None)
    # The owner follows the last "@" (a host name has none: `bad_host_name`).
    assert owned_by("local@lab@x", "x") and not owned_by("local@lab@x", "lab@x")
    assert not owned_by("@x", "x") and not owned_by("local", "x")


def test_a_refused_commit_runs_no_post_commit_work_of_another_hosts_world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host h2's tick landed but h2 stopped before its post-commit work (the projection that
    admits its intents): h1's refused commit to h2's world runs none of it; h2 does, later."""
    from tether.runtime import WorldOfAnotherHost

    with make_host(tmp_path, world_owner="h1") as one, make_host(tmp_path, world_owner="h2") as two:
        two.create_world("w@h2")

        def stopped(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("h2 stopped before its post-commit work")

        monkeypatch.setattr(two.ticker, "post_commit", stopped)
        with pytest.raises(RuntimeError):
            two.commit_tick("w@h2", intents(1))
        monkeypatch.undo()
        assert two.ledger.pending_post_commit("w@h2") is not None
        with pytest.raises(WorldOfAnotherHost):
            one.commit_tick("w@h2", [ComponentWrite("x", "y", 1)])
        assert two.ledger.pending_post_commit("w@h2") is not None  # still h2's to run
        assert one.get(akey(0, "w@h2")) is None  # nothing admitted by h1
        two.recover()  # h2 back: it runs its own post-commit work
        assert two.ledger.pending_post_commit("w@h2") is None
        assert two.get(akey(0, "w@h2")) is not None


def test_bad_host_input_is_a_typed_error(tmp_path: Path) -> None:
    from tether.runtime import ActivityRuntimeError, FamilyError, HostClosed
    from tether.world import InvalidWrite, WorldNotFound

    fam = make_family(tmp_path)
    with pytest.raises(FamilyError):
        Host(tmp_path / "a", [fam, make_family(tmp_path, name="again")], workers=0)
    with pytest.raises(FamilyError) as contract:
        Host(tmp_path / "b", ["not a family"], workers=0)  # type: ignore[list-item]
    assert contract.value.code == "family_error"
    host = make_host(tmp_path / "c", fam)
    with pytest.raises(WorldNotFound) as missing:
        host.commit_tick("nowhere", [])
    assert missing.value.code == "world_not_found"
    with pytest.raises(InvalidWrite) as bad:
        host.create_world("bad id with spaces")
    assert bad.value.code == "invalid_write"
    host.create_world("w")
    with pytest.raises(InvalidWrite):
        host.commit_tick("w", [ComponentWrite("e", "c", {"x": float("nan")})])
    with pytest.raises(ActivityRuntimeError) as never:  # NaN never timed out
        host.wait_settled("w", float("nan"))
    assert "timeout_s" in str(never.value)
    host.close()
    with pytest.raises(HostClosed) as closed:
        host.commit_tick("w", [])
    assert closed.value.code == "host_closed"
    # Every call on a closed Host says so (a raw sqlite3 error or a live worker, before).
    for call in (
        lambda: host.get(akey(0)),
        lambda: host.head("w"),
        lambda: host.snapshot("w"),
        lambda: host.restage(),
        lambda: host.observe_once(),
        lambda: host.recover(),
        lambda: host.wait_settled("w", 1),
        lambda: host.new_worker(),
    ):
        with pytest.raises(HostClosed):
            call()
    # Loop settings that would kill its threads at start (a sleep past time_t), run nothing
    # (a negative worker count) or fail later with a bare TypeError are refused up front.
    for bad in (
        {"fallback_poll_s": float("inf")},
        {"fallback_poll_s": 1e308},
        {"fallback_poll_s": "2"},
        {"workers": -1},
        {"workers": 1.5},
        {"workers": 10**6},
        {"workers": True},
        {"page_size": 0},
    ):
        with pytest.raises(ActivityRuntimeError) as refused:
            Host(tmp_path / "d", [fam], **bad)  # type: ignore[arg-type]
        assert next(iter(bad)) in str(refused.value), refused.value


def test_worker_command_rejects_bad_factories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether.runtime import worker_main

    assert worker_main.main([str(tmp_path), "--families", "no_colon"]) == 2
    assert worker_main.main([str(tmp_path), "--families", "no_such_module_x:f"]) == 2
    assert worker_main.main([str(tmp_path), "--families", "journal_provider:KIND"]) == 2
    assert "tether worker:" in capsys.readouterr().err
    # `tether serve`'s factories, given to a worker: said as such (the bridge's was an
    # AttributeError of the data dir it was handed).
    for spec in (
        "tether.adapters.grpc.bridge:serve_families",
        "tether.serve.families:sim_families",
    ):
        assert worker_main.main([str(tmp_path), "--families", spec]) == 2
        err = capsys.readouterr().err
        assert "is tether serve's factory" in err and "AttributeError" not in err, err
    # Unbounded, 30,000 threads each opened a catalog: out of files, after "ready".
    with pytest.raises(SystemExit) as info:
        worker_main.main(
            [str(tmp_path), "--families", "journal_provider:families", "--workers", "65"]
        )
    assert info.value.code == 2
    assert "--workers must be in [1, 64]" in capsys.readouterr().err


def test_shutdown_never_releases_a_bound_attempt(tmp_path: Path) -> None:
    """Once the provider operation is bound, only reconciliation may follow: no release."""
    clock = Clock()
    journal = Journal(tmp_path / "provider.db")

    class StopsEarly(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            worker.stop.set()  # the Host shuts down while the attempt is bound
            assert ctx.stopping
            raise RuntimeError("stopping before the effect")

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), StopsEarly(journal), stage_task)
    with make_host(tmp_path, fam, clock=clock, lease_ms=30_000) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        worker = host.new_worker()
        assert worker.run_once()
        worker.close()
        rec = host.get(akey(0))
        assert rec is not None and rec.operation_id == operation_id_for(akey(0))
        assert rec.attempt is not None and rec.attempt.fence == 1  # still leased, not released
        assert host.catalog.claim("rival", 30_000, kinds=[KIND]) is None
        clock.now += 31_000
        claim = host.catalog.claim("rival", 30_000, kinds=[KIND])
        assert claim is not None and not claim.attempt.may_execute  # reconcile-only after expiry


def _level_projection(snapshot: Any) -> list[Any]:
    """Level-triggered: every intent not yet observed, in every tick (as the robot and
    simulation families project)."""
    from tether.runtime import ActivityRequest

    return [
        ActivityRequest(KIND, e, v)
        for e, v in snapshot.with_component("task.intent")
        if snapshot.get(e, f"task.observed.{KIND}") is None
    ]


def test_a_level_triggered_projection_is_admitted_once_across_later_ticks(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path / "provider.db")
    fam = Family("crashtest", (KIND,), _level_projection, DedupAdapter(journal), stage_task)
    with make_host(tmp_path, fam) as host:
        host.create_world("w")
        r1 = host.commit_tick("w", intents(2))
        host.commit_tick("w", [ComponentWrite("other", "x", 1)])  # asks for both again
        rec = host.get(akey(0))
        assert rec is not None and rec.source == r1  # the first admission's source stays
        worker = host.new_worker()
        assert worker.run_once()  # one of the two gets a result; the other stays pending
        worker.close()
        [r3] = host.observe_once()  # its projection still asks for the pending one
        assert host.get(akey(0)).source == r1 and host.get(akey(1)).source == r1  # type: ignore[union-attr]
        assert drain(host) == 1
        host.observe_once()
        for i in range(2):
            rec = host.get(akey(i))
            assert rec is not None and rec.settlement is not None and rec.source == r1
        assert r3.tick == 3 and len(journal.effects()) == 2


def test_a_later_tick_asking_a_different_input_for_an_admitted_id_fails_closed(
    tmp_path: Path,
) -> None:
    from tether.runtime import ProjectionConflict

    journal = Journal(tmp_path / "provider.db")
    fam = Family("crashtest", (KIND,), _level_projection, DedupAdapter(journal), stage_task)
    with make_host(tmp_path, fam) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        changed = {"kind": KIND, "n": 99, "pad": 0}
        with pytest.raises(ProjectionConflict):
            host.commit_tick("w", [ComponentWrite("task-0000", "task.intent", changed)])
        assert host.ledger.pending_post_commit("w") is not None  # fails closed: blocked


def _bound_by_a_dead_worker(host: Host) -> None:
    """One Activity of world "w", claimed and bound by a worker that then died: the next
    claim reconciles it."""
    host.create_world("w")
    host.commit_tick("w", intents(1))
    claim = host.catalog.claim("ghost", 1000, kinds=[KIND])
    assert claim is not None
    host.catalog.bind_provider_operation(akey(0), claim.attempt.fence, operation_id_for(akey(0)))


def test_reconcile_that_raises_or_recovers_a_non_durable_result_concludes_unknown(
    tmp_path: Path,
) -> None:
    """Neither a crashing reconcile nor an unverifiable Recovered may record a result or
    authorise an execution: both park the Activity as Unknown under the live fence."""
    from tether.runtime import Recovered

    clock = Clock()
    journal = Journal(tmp_path / "provider.db")
    mode: list[str] = ["raise"]

    class Unsure(DedupAdapter):
        def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            journal.log_call(ctx.operation_id, "reconcile", ctx.fence)
            if mode[0] == "raise":
                raise RuntimeError("provider unreachable")
            real = ctx.artifacts.put_bytes(b"x" * 400, "application/json")
            return Recovered(dataclasses.replace(real, digest="sha256:" + "0" * 64))

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Unsure(journal), stage_task)
    with make_host(tmp_path, fam, clock=clock, lease_ms=1000) as host:
        _bound_by_a_dead_worker(host)
        worker = host.new_worker()
        revisions = []
        for m in ("raise", "not_durable"):
            mode[0] = m
            clock.now += 120_000
            assert worker.run_once()
            rec = host.get(akey(0))
            assert rec is not None and rec.result is None and rec.awaiting_decision
            revisions.append(rec.evidence_revision)
        worker.close()
        assert revisions[0] < revisions[1]  # each conclusion recorded its own evidence
        assert journal.calls("execute") == [] and journal.effects() == {}


def test_a_reconcile_outcome_that_cannot_be_recorded_parks_for_an_operator(
    tmp_path: Path,
) -> None:
    """A reconcile that returned a conclusion the catalog refuses (a backoff past its bound, a
    bool for one), of the wrong type, or naming evidence or a guard the artifact store does
    not hold was reconciled again every lease, forever (`retry_after_ms=True`: every
    millisecond), and never awaited an operator. Each now parks the Activity as Unknown with
    the adapter's mistake as its evidence; an adapter's SystemExit ends no worker."""
    from tether.activities import Evidence, RetryGuard
    from tether.runtime import ConfirmedAbsent, Recovered, Unknown

    clock = Clock()
    journal = Journal(tmp_path / "provider.db")
    bad: list[Any] = []

    class Mistaken(DedupAdapter):
        def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            journal.log_call(ctx.operation_id, "reconcile", ctx.fence)
            real = ctx.artifacts.put_bytes(b"{}", "application/json")
            make = bad[0]
            if make == "exit":
                raise SystemExit(0)
            return make(Evidence(real.ref, real.digest))

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Mistaken(journal), stage_task)
    outcomes = [
        lambda ev: Unknown(ev, 2**62),
        lambda ev: Unknown(ev, True),
        lambda ev: Unknown(ev, -1),
        lambda ev: Unknown("evidence", 1000),
        lambda ev: Unknown(Evidence("artifact:sha256/" + "1" * 64, "sha256:" + "1" * 64), 1000),
        lambda ev: ConfirmedAbsent("guard"),
        lambda ev: ConfirmedAbsent(RetryGuard("", "")),
        lambda ev: Recovered(None),
        "exit",
    ]
    with make_host(tmp_path, fam, clock=clock, lease_ms=1000) as host:
        _bound_by_a_dead_worker(host)
        worker = host.new_worker()
        revision = 0
        for make in outcomes:
            bad[:] = [make]
            clock.now += 8 * 24 * 3600 * 1000  # past any backoff a conclusion recorded
            assert worker.run_once()
            rec = host.get(akey(0))
            assert rec is not None and rec.result is None and rec.retry_guard is None
            assert rec.awaiting_decision, make
            assert rec.evidence_revision > revision, make  # this conclusion's own evidence
            revision = rec.evidence_revision
            assert rec.evidence is not None
            text = host.artifacts.get_bytes(rec.evidence.evidence.ref, rec.evidence.evidence.digest)
            assert b"FamilyError: reconcile returned" in text or b"SystemExit" in text, text
        worker.close()
        assert journal.calls("execute") == [] and journal.effects() == {}


def test_an_execute_that_raises_system_exit_ends_its_attempt_not_the_worker(
    tmp_path: Path,
) -> None:
    """An adapter's SystemExit out of `execute` ended the worker's thread without a word (the
    pool still counted it): it is an attempt that raised, left to reconcile, and the worker
    goes on to the next Activity."""
    journal = Journal(tmp_path / "provider.db")

    class Exits(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            if ctx.key == akey(0):
                raise SystemExit(0)
            return super().execute(ctx, request)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Exits(journal), stage_task)
    with make_host(tmp_path, fam) as host:
        host.create_world("w")
        host.commit_tick("w", intents(2))
        worker = host.new_worker()
        assert worker.run_once() and worker.run_once()  # neither raised out of the worker
        worker.close()
        first, second = host.get(akey(0)), host.get(akey(1))
        assert first is not None and first.result is None and first.operation_id is not None
        assert second is not None and second.result is not None


def test_a_family_whose_staging_raises_never_stalls_other_observations(tmp_path: Path) -> None:
    broken_kind = "crash.broken"

    def broken_stage(staged: Any) -> list[ComponentWrite]:
        raise RuntimeError("family bug in stage")

    good = make_family(tmp_path)
    broken = Family(
        "brokentest",
        (broken_kind,),
        projection_for((broken_kind,)),
        DedupAdapter(Journal(tmp_path / "provider.db")),
        broken_stage,
    )
    with make_host(tmp_path, good, broken) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1) + intents(1, kind=broken_kind, prefix="bad"))
        drain(host)
        assert host.restage() == 1  # the good result; the broken family's stays pending
        host.observe_once()
        good_rec = host.get(akey(0))
        bad_rec = host.get(ActivityKey("w", broken_kind, "bad-0000"))
        assert good_rec is not None and good_rec.settlement is not None
        assert bad_rec is not None and bad_rec.result is not None and bad_rec.settlement is None
        assert host.restage() == 0  # still pending, retried each pass, never staged


@pytest.mark.parametrize("lease", ["0", str(7 * 24 * 3600 * 1000 + 1)])
def test_worker_command_refuses_a_lease_outside_the_seven_day_cap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lease: str
) -> None:
    from tether.runtime import worker_main

    with pytest.raises(SystemExit) as exit_info:
        worker_main.main([str(tmp_path), "--families", "journal_provider:x", "--lease-ms", lease])
    assert exit_info.value.code == 2
    assert "--lease-ms must be in [1, 604800000] (7 days)" in capsys.readouterr().err


@pytest.mark.parametrize("fallback", ["0.02", "0", "-1", "nan", "inf", "1e308", "86401"])
def test_worker_command_refuses_a_fallback_poll_under_a_second_or_over_a_day(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fallback: str
) -> None:
    from tether.runtime import worker_main

    argv = [str(tmp_path), "--families", "journal_provider:x", "--fallback-poll-s", fallback]
    with pytest.raises(SystemExit) as exit_info:
        worker_main.main(argv)
    assert exit_info.value.code == 2
    assert "--fallback-poll-s must be in [1, 86400] (a day)" in capsys.readouterr().err
