"""The Host end to end, in-process and deterministic: projector, workers, staging, settlement.

Workers are driven with `run_once` and the catalog with a manual clock, so every test picks
the exact interleaving it is about. Real SQLite files and a real provider journal throughout.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
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
from tether.activities import ActivityKey, operation_id_for
from tether.errors import CatalogRejection
from tether.runtime import (
    ArtifactMissing,
    AttemptContext,
    Family,
    Host,
    LeaseLost,
    ProgressEvent,
    ProjectionConflict,
    evidence_entity,
)
from tether.world import (
    CommittedTickReceipt,
    ComponentWrite,
    ReceiptRejected,
    UnsettledActivities,
    WorldClosing,
)


class Clock:
    """A manual millisecond clock for leases and retry delays."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _host(tmp_path: Path, *families: Family, clock: Clock | None = None, **kw: Any) -> Host:
    fams = families or (make_family(tmp_path),)
    return Host(tmp_path, fams, workers=0, observe=False, clock=clock or Clock(), **kw)


def _key(i: int, world: str = "w", kind: str = KIND) -> ActivityKey:
    return ActivityKey(world_id=world, kind=kind, activity_id=f"task-{i:04d}")


def _drain(host: Host) -> int:
    worker = host.new_worker()
    n = 0
    while worker.run_once():
        n += 1
    worker.close()
    return n


def _same(receipt: CommittedTickReceipt, other: Any) -> bool:
    return (receipt.world_id, receipt.run_id, receipt.tick, receipt.visibility_token) == (
        other.world_id,
        other.run_id,
        other.tick,
        other.visibility_token,
    )


def test_activity_runs_end_to_end_and_only_a_processor_tick_changes_components(
    tmp_path: Path,
) -> None:
    with _host(tmp_path) as host:
        host.create_world("w")
        r1 = host.commit_tick("w", intents(2))
        rec = host.get(_key(0))
        assert rec is not None and _same(r1, rec.source) and rec.result is None
        assert _drain(host) == 2
        rec = host.get(_key(0))
        assert rec is not None and rec.result is not None and rec.settlement is None
        # A recorded result changes no component: the head is still the intent tick.
        assert host.head("w") == r1
        assert host.snapshot("w").get("task-0000", f"task.status.{KIND}") is None
        [r2] = host.observe_once()
        snap = host.snapshot("w")
        assert snap.get("task-0000", f"task.status.{KIND}") == "done"  # the processor's write
        assert snap.get("task-0001", f"task.observed.{KIND}")["value"] == 2
        for i in range(2):
            rec = host.get(_key(i))
            assert rec is not None and rec.settlement is not None
            assert _same(r2, rec.settlement.receipt)
        assert host.observe_once() == []  # nothing left to observe


def test_projection_is_exact_receipt_bound_deterministic_and_idempotent(tmp_path: Path) -> None:
    with _host(tmp_path) as host:
        host.create_world("w")
        r1 = host.commit_tick("w", intents(3))
        before = [host.get(_key(i)) for i in range(3)]
        snap = host.ledger.read_at(r1)
        host._project(snap)  # a replay for the same receipt is a no-op
        assert [host.get(_key(i)) for i in range(3)] == before
        r2 = host.commit_tick("w", [ComponentWrite("other", "x", 1)])
        assert r2.tick == 2 and host.get(_key(0)) == before[0]  # no reprojection of tick 1


def test_a_conflicting_projection_replay_fails_closed(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "provider.db")
    with _host(tmp_path) as host:
        host.create_world("w")
        writer = host.ledger.acquire_writer("w")
        r1 = host.ledger.commit(writer, host.head("w"), intents(1))
        host._project(host.ledger.read_at(r1))  # admitted, then "crashed" before completing

    def different(snapshot: Any) -> list[Any]:
        from tether.runtime import ActivityRequest

        return [
            ActivityRequest(KIND, e, {"changed": True}) for e, _ in snapshot.changed("task.intent")
        ]

    changed = Family("crashtest", (KIND,), different, DedupAdapter(journal), stage_task)
    with _host(tmp_path, changed) as host:
        with pytest.raises(ProjectionConflict):
            host.recover()
        assert host.ledger.pending_post_commit("w") == r1  # tick 2 stays blocked
        with pytest.raises(ProjectionConflict):
            host.commit_tick("w", [])


def test_tokenless_or_ambiguous_receipts_neither_admit_nor_settle(tmp_path: Path) -> None:
    with _host(tmp_path) as host:
        host.create_world("w")
        writer = host.ledger.acquire_writer("w")
        r1 = host.ledger.commit(writer, host.head("w"), intents(1))
        for bad in (dataclasses.replace(r1, visibility_token=""), host.ledger.head("w")):
            if bad.visibility_token:
                raw = sqlite3.connect(tmp_path / "world.db")
                raw.execute(
                    "INSERT INTO tick_tokens VALUES ('w', ?, 1, 'vt_sibling')", (r1.run_id,)
                )
                raw.commit()
                raw.close()
            with pytest.raises(ReceiptRejected):
                host._post_commit(bad)
            assert host.get(_key(0)) is None  # nothing admitted
        raw = sqlite3.connect(tmp_path / "world.db")
        raw.execute("DELETE FROM tick_tokens WHERE token = 'vt_sibling'")
        raw.commit()
        raw.close()
        host.recover()
        assert host.get(_key(0)) is not None
        _drain(host)
        host.restage()
        # The observation tick commits, then its head gains a sibling token: settlement refuses.
        obs_writer = host.ledger.acquire_writer("w")
        host._writers["w"] = obs_writer
        obs = host._observations_for("w")
        writes = [w for o in obs for w in (*o.facts, o.evidence)]
        r2 = host.ledger.commit(obs_writer, r1, writes)
        raw = sqlite3.connect(tmp_path / "world.db")
        raw.execute("DELETE FROM visibility WHERE token = ?", (r2.visibility_token,))
        raw.commit()
        raw.close()
        with pytest.raises(ReceiptRejected):
            host.recover()
        rec = host.get(_key(0))
        assert rec is not None and rec.settlement is None
        raw = sqlite3.connect(tmp_path / "world.db")
        raw.execute("INSERT INTO visibility VALUES ('w', ?)", (r2.visibility_token,))
        raw.commit()
        raw.close()
        host.recover()  # the retained receipt's work is retried and now settles
        rec = host.get(_key(0))
        assert rec is not None and rec.settlement is not None and _same(r2, rec.settlement.receipt)


def test_no_provider_io_in_the_projector_or_under_the_world_lock(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "provider.db")
    seen: list[tuple[bool, str]] = []

    class Recording(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            seen.append((host.ledger.holds_lock(), threading.current_thread().name))
            return super().execute(ctx, request)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Recording(journal), stage_task)
    with _host(tmp_path, fam) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))  # projection ran; the provider saw nothing
        assert journal.calls() == []
        done = threading.Event()
        worker = host.new_worker()
        with host.ledger.lock("w"):  # the world lock is held the whole time the worker runs
            t = threading.Thread(target=lambda: (worker.run_once(), done.set()), name="wk")
            t.start()
            t.join(timeout=60)
            assert done.is_set()  # claim and execute never waited for the world lock
        worker.close()
        assert seen == [(False, "wk")]


def test_stale_worker_returning_after_a_newer_claim_is_rejected(tmp_path: Path) -> None:
    clock = Clock()
    journal = Journal(tmp_path / "provider.db")
    gate, entered = threading.Event(), threading.Event()

    class Slow(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            if ctx.fence == 1:
                entered.set()
                gate.wait(60)
            return super().execute(ctx, request)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Slow(journal), stage_task)
    with _host(tmp_path, fam, clock=clock, lease_ms=60_000) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        stale = host.new_worker("stale")
        t = threading.Thread(target=stale.run_once)
        t.start()
        assert entered.wait(60)
        clock.now += 120_000  # the stale worker's lease expires
        fresh = host.new_worker("fresh")
        assert fresh.run_once()  # fence 2: bound -> reconcile only -> confirmed absent
        assert fresh.run_once()  # fence 3: the guard authorises one execution
        rec = host.get(_key(0))
        assert rec is not None and rec.result is not None
        gate.set()
        t.join(60)
        stale.close()
        fresh.close()
        after = host.get(_key(0))
        assert after == rec  # the stale fence-1 worker's result write was rejected
        assert journal.effects() == {operation_id_for(_key(0)): 1}
        assert [(m, f) for _, m, f in journal.calls()] == [
            ("execute", 1),
            ("reconcile", 2),
            ("execute", 3),
        ] or [(m, f) for _, m, f in journal.calls()] == [
            ("reconcile", 2),
            ("execute", 3),
            ("execute", 1),
        ]


def test_duplicate_results_and_settlements_accept_copies_and_reject_conflicts(
    tmp_path: Path,
) -> None:
    with _host(tmp_path) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        _drain(host)
        rec = host.get(_key(0))
        assert rec is not None and rec.result is not None
        fence = rec.fence
        host.catalog.record_result(_key(0), fence, rec.result)  # exact copy: accepted
        other = host.artifacts.put_bytes(b'{"op":"x"}', "application/json")
        with pytest.raises(CatalogRejection):
            host.catalog.record_result(_key(0), fence, other)
        [r2] = host.observe_once()
        rec = host.get(_key(0))
        assert rec is not None and rec.settlement is not None
        host._settle(host.ledger.read_at(r2))  # re-running settlement: exact copy, no-op
        assert host.get(_key(0)) == rec
        host.commit_tick("w", [])
        later = host.head("w")
        with pytest.raises(CatalogRejection):
            host.catalog.settle(
                _key(0), dataclasses.replace(rec.settlement.receipt, tick=later.tick), "sha256:x"
            )
        assert host.get(_key(0)) == rec


def test_equal_activity_ids_in_two_worlds_and_two_kinds_stay_isolated(tmp_path: Path) -> None:
    fam_a = make_family(tmp_path, name="fa", kinds=("kind.a",))
    fam_b = make_family(tmp_path, name="fb", kinds=("kind.b",))
    with _host(tmp_path, fam_a, fam_b) as host:
        for world in ("w1", "w2"):
            host.create_world(world)
            host.commit_tick(world, intents(1, kind="kind.a"))
        keys = [_key(0, w, k) for w in ("w1", "w2") for k in ("kind.a",)]
        assert len({operation_id_for(k) for k in keys}) == len(keys)
        assert _drain(host) == 2
        host.observe_once()
        for k in keys:
            rec = host.get(k)
            assert rec is not None and rec.settlement is not None
            assert rec.settlement.receipt.world_id == k.world_id
        effects = Journal(tmp_path / "provider.db").effects()
        assert effects == {operation_id_for(k): 1 for k in keys}


def test_equal_activity_ids_in_two_kinds_of_one_world_stay_isolated(tmp_path: Path) -> None:
    fam_a = make_family(tmp_path, name="fa", kinds=("kind.a",))
    fam_b = make_family(tmp_path, name="fb", kinds=("kind.b",))
    with _host(tmp_path, fam_a, fam_b) as host:
        host.create_world("w")
        # One entity cannot hold two intents, so the second kind's task id repeats on tick 2.
        host.commit_tick("w", intents(1, kind="kind.a"))
        host.commit_tick("w", intents(1, kind="kind.b"))
        keys = [_key(0, "w", "kind.a"), _key(0, "w", "kind.b")]
        assert _drain(host) == 2
        host.observe_once()
        snap = host.snapshot("w")
        for k in keys:
            rec = host.get(k)
            assert rec is not None and rec.settlement is not None
            assert snap.get("task-0000", f"task.status.{k.kind}") == "done"
        assert evidence_entity("kind.a", "task-0000") != evidence_entity("kind.b", "task-0000")
        effects = Journal(tmp_path / "provider.db").effects()
        assert effects == {operation_id_for(k): 1 for k in keys}


def test_fork_and_destroy_are_refused_while_unsettled(tmp_path: Path) -> None:
    with _host(tmp_path) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        with pytest.raises(UnsettledActivities):
            host.fork_world("w", "w-fork")
        with pytest.raises(UnsettledActivities):
            host.destroy_world("w")
        assert host.ledger.close_state("w") == ("open", False)  # provisional close rolled back
        with pytest.raises(UnsettledActivities):
            host.destroy_world("w", sticky=True)
        assert host.ledger.close_state("w") == ("closing", True)  # cleanup lease stays sticky
        with pytest.raises(WorldClosing):
            host.commit_tick("w", [])
        host.ledger._db.execute("UPDATE worlds SET close_state='open', close_sticky=0")
        _drain(host)
        host.restage()
        # Commit the observation but "crash" before its post-commit work: fork must finish it.
        obs = host._observations_for("w")
        writes = [w for o in obs for w in (*o.facts, o.evidence)]
        host.ledger.commit(host._writer("w"), host.head("w"), writes)
        fork = host.fork_world("w", "w-fork")
        rec = host.get(_key(0))
        assert rec is not None and rec.settlement is not None
        assert host.ledger.read_at(fork).get("task-0000", f"task.observed.{KIND}") is not None
        assert host.get(_key(0, "w-fork")) is None  # a fork inherits no control record
        host.destroy_world("w")
        assert "w" not in host.ledger.worlds()


def test_complete_result_is_durable_before_staging(tmp_path: Path) -> None:
    with _host(tmp_path, inline_bound=16) as host:
        host.create_world("w")
        host.commit_tick(
            "w", [ComponentWrite("task-0000", "task.intent", {"kind": KIND, "n": 1, "pad": 100})]
        )
        _drain(host)
        rec = host.get(_key(0))
        assert rec is not None and rec.result is not None
        assert rec.result.ref.startswith("artifact:sha256/") and rec.result.size > 100
        path = tmp_path / "artifacts" / "sha256" / rec.result.digest[7:9] / rec.result.digest[7:]
        data = path.read_bytes()
        path.unlink()
        head = host.head("w")
        with pytest.raises(ArtifactMissing):
            host.artifacts.get(rec.result)
        assert host.observe_once() == []
        assert host.head("w") == head  # nothing staged, nothing committed
        assert host.get(_key(0)).settlement is None  # type: ignore[union-attr]
        path.write_bytes(data)
        host.observe_once()
        rec = host.get(_key(0))
        assert rec is not None and rec.settlement is not None


def test_non_durable_adapter_result_is_never_recorded(tmp_path: Path) -> None:
    clock = Clock()
    journal = Journal(tmp_path / "provider.db")

    class Liar(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            real = super().execute(ctx, request)
            return dataclasses.replace(real, ref="artifact:sha256/" + "0" * 64)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Liar(journal), stage_task)
    with _host(tmp_path, fam, clock=clock) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        worker = host.new_worker()
        assert worker.run_once()
        rec = host.get(_key(0))
        assert rec is not None and rec.result is None and rec.attempt is not None
        clock.now += 120_000  # the lease runs out; the next attempt may only reconcile
        assert worker.run_once()
        worker.close()
        rec = host.get(_key(0))
        assert rec is not None and rec.result is not None
        assert host.artifacts.is_durable(rec.result)
        assert [m for _, m, _ in journal.calls()] == ["execute", "reconcile"]
        assert journal.effects() == {operation_id_for(_key(0)): 1}


def test_restart_restages_every_completed_unobserved_result(tmp_path: Path) -> None:
    n = 120
    with _host(tmp_path) as host:
        host.create_world("w")
        r1 = host.commit_tick("w", intents(n))
        assert _drain(host) == n
    for _ in range(2):  # restaging is repeatable until a tick commits the observation
        with _host(tmp_path) as host:
            host.recover()
            assert len(host._staged) == n
    with _host(tmp_path) as host:
        [r2] = host.observe_once()
        assert r2.run_id == r1.run_id and r2.tick == 2  # resumed the same run at its head
        assert all(host.get(_key(i)).settlement is not None for i in range(n))  # type: ignore[union-attr]


def test_progress_reaches_the_host_listener(tmp_path: Path) -> None:
    events: list[ProgressEvent] = []
    with _host(tmp_path, progress_listener=events.append) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        _drain(host)
    assert [e.content["phase"] for e in events] == ["executing"]
    assert events[0].key == _key(0) and events[0].operation_id == operation_id_for(_key(0))


def test_blind_provider_unknown_parks_and_reconcile_never_executes(tmp_path: Path) -> None:
    clock = Clock()
    journal = Journal(tmp_path / "provider.db")
    with _host(tmp_path, make_blind_family(tmp_path), clock=clock, lease_ms=1000) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1, kind=BLIND_KIND))
        key = _key(0, kind=BLIND_KIND)
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
    host = Host(tmp_path, [make_family(tmp_path)], workers=2, poll_interval_s=0.005)
    host.create_world("w")
    host.commit_tick("w", intents(6))
    host.start()
    try:
        import time

        for _ in range(2000):
            if all((r := host.get(_key(i))) is not None and r.settlement for i in range(6)):
                break
            time.sleep(0.01)
    finally:
        host.close()
    host.close()  # idempotent
    again = _host(tmp_path)
    try:
        assert all(again.get(_key(i)).settlement is not None for i in range(6))  # type: ignore[union-attr]
    finally:
        again.close()


def test_shutdown_releases_only_unbound_claims(tmp_path: Path) -> None:
    with _host(tmp_path) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        worker = host.new_worker()
        worker.stop.set()
        assert worker.run_once()  # claimed, saw the stop, released: nothing was bound
        worker.close()
        rec = host.get(_key(0))
        assert rec is not None and rec.attempt is None and rec.operation_id is None
        assert Journal(tmp_path / "provider.db").calls() == []


def test_large_outputs_reach_the_catalog_only_by_bounded_reference(tmp_path: Path) -> None:
    pad = 50_000
    with _host(tmp_path, inline_bound=256) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1, pad=pad))
        _drain(host)
        rec = host.get(_key(0))
        assert rec is not None and rec.result is not None and rec.result.size > pad
        assert rec.result.ref.startswith("artifact:sha256/") and len(rec.result.ref) < 100
        assert len(host.artifacts.get(rec.result)) == rec.result.size
    raw = sqlite3.connect(tmp_path / "catalog.db")
    try:
        dump = "\n".join(raw.iterdump())
    finally:
        raw.close()
    assert "x" * 1000 not in dump  # the payload never entered the catalog


def test_operator_abandon_of_an_unknown_activity_is_observed_and_settled(
    tmp_path: Path,
) -> None:
    from tether.activities import Decision

    clock = Clock()
    with _host(tmp_path, make_blind_family(tmp_path), clock=clock, lease_ms=1000) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1, kind=BLIND_KIND))
        key = _key(0, kind=BLIND_KIND)
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
        assert rec.settlement is not None and _same(receipt, rec.settlement.receipt)
        fact = host.snapshot("w").get("task-0000", f"task.observed.{BLIND_KIND}")
        assert fact["failed"] is True


def test_restage_pages_the_pending_set_to_exhaustion(tmp_path: Path) -> None:
    with _host(tmp_path, page_size=3) as host:
        host.create_world("w")
        host.commit_tick("w", intents(10))
        assert _drain(host) == 10
        assert host.restage() == 10
        host.observe_once()
        assert all(host.get(_key(i)).settlement is not None for i in range(10))  # type: ignore[union-attr]


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
    with _host(tmp_path, fam, clock=clock, lease_ms=30_000) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        assert _drain(host) == 1
        assert other_claims == [None, None, None]  # never reclaimable while renewed
        rec = host.get(_key(0))
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
    with _host(tmp_path, fam, clock=clock, lease_ms=30_000) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        worker = host.new_worker()
        assert worker.run_once()
        worker.close()
        assert len(raised) == 1
        rec = host.get(_key(0))
        assert rec is not None and rec.result is None
        assert journal.effects() == {}  # it stopped before the effect


def test_background_heartbeat_renews_the_lease(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "provider.db")
    renewed = threading.Event()

    class Waits(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            first = host.get(ctx.key).attempt.lease_expires_ms  # type: ignore[union-attr]
            for _ in range(6000):  # until the heartbeat thread renews (about 0.1 s)
                now = host.get(ctx.key).attempt.lease_expires_ms  # type: ignore[union-attr]
                if now > first:
                    renewed.set()
                    break
                threading.Event().wait(0.005)
            return super().execute(ctx, request)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Waits(journal), stage_task)
    host = Host(tmp_path, [fam], workers=0, observe=False, lease_ms=300)
    with host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        assert _drain(host) == 1
    assert renewed.is_set()


def test_destroy_reopens_when_the_required_projector_fails(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "provider.db")
    with _host(tmp_path) as host:
        host.create_world("w")
        writer = host.ledger.acquire_writer("w")
        r1 = host.ledger.commit(writer, host.head("w"), intents(1))
        host._project(host.ledger.read_at(r1))

    def different(snapshot: Any) -> list[Any]:
        from tether.runtime import ActivityRequest

        return [ActivityRequest(KIND, e, {"x": 1}) for e, _ in snapshot.changed("task.intent")]

    changed = Family("crashtest", (KIND,), different, DedupAdapter(journal), stage_task)
    with _host(tmp_path, changed) as host:
        with pytest.raises(ProjectionConflict):
            host.destroy_world("w")
        assert host.ledger.close_state("w") == ("open", False)


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
    with _host(tmp_path, fam) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        worker = host.new_worker()
        assert worker.run_once()
        worker.close()
    assert seen == [False, True]
