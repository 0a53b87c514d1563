"""Crash-matrix companions: stale workers, duplicate writes, identity isolation, lifecycle."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest
from hosttools import Clock, akey, drain, make_host, world_sql
from journal_provider import (
    KIND,
    DedupAdapter,
    Journal,
    intents,
    make_family,
    projection_for,
    stage_task,
)
from tether.activities import operation_id_for
from tether.errors import CatalogRejection
from tether.runtime import (
    AttemptContext,
    Family,
    ProjectionConflict,
    evidence_entity,
)
from tether.world import (
    UnsettledActivities,
    WorldClosing,
)


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
    with make_host(tmp_path, fam, clock=clock, lease_ms=60_000) as host:
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
        rec = host.get(akey(0))
        assert rec is not None and rec.result is not None
        gate.set()
        t.join(60)
        stale.close()
        fresh.close()
        after = host.get(akey(0))
        assert after == rec  # the stale fence-1 worker's result write was rejected
        assert journal.effects() == {operation_id_for(akey(0)): 1}
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
    with make_host(tmp_path) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        drain(host)
        rec = host.get(akey(0))
        assert rec is not None and rec.result is not None
        fence = rec.fence
        host.catalog.record_result(akey(0), fence, rec.result)  # exact copy: accepted
        other = host.artifacts.put_bytes(b'{"op":"x"}', "application/json")
        with pytest.raises(CatalogRejection):
            host.catalog.record_result(akey(0), fence, other)
        [r2] = host.observe_once()
        rec = host.get(akey(0))
        assert rec is not None and rec.settlement is not None
        host.settler.settle(host.ledger.read_at(r2))  # re-running settlement: exact copy, no-op
        assert host.get(akey(0)) == rec
        host.commit_tick("w", [])
        later = host.head("w")
        with pytest.raises(CatalogRejection):
            host.catalog.settle(
                akey(0), dataclasses.replace(rec.settlement.receipt, tick=later.tick), "sha256:x"
            )
        assert host.get(akey(0)) == rec


def test_equal_activity_ids_in_two_worlds_and_two_kinds_stay_isolated(tmp_path: Path) -> None:
    fam_a = make_family(tmp_path, name="fa", kinds=("kind.a",))
    fam_b = make_family(tmp_path, name="fb", kinds=("kind.b",))
    with make_host(tmp_path, fam_a, fam_b) as host:
        for world in ("w1", "w2"):
            host.create_world(world)
            host.commit_tick(world, intents(1, kind="kind.a"))
        keys = [akey(0, w, k) for w in ("w1", "w2") for k in ("kind.a",)]
        assert len({operation_id_for(k) for k in keys}) == len(keys)
        assert drain(host) == 2
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
    with make_host(tmp_path, fam_a, fam_b) as host:
        host.create_world("w")
        # One entity cannot hold two intents, so the second kind's task id repeats on tick 2.
        host.commit_tick("w", intents(1, kind="kind.a"))
        host.commit_tick("w", intents(1, kind="kind.b"))
        keys = [akey(0, "w", "kind.a"), akey(0, "w", "kind.b")]
        assert drain(host) == 2
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
    with make_host(tmp_path) as host:
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
        world_sql(tmp_path, "UPDATE worlds SET close_state = 'open', close_sticky = false")
        drain(host)
        host.restage()
        # Commit the observation but "crash" before its post-commit work: fork must finish it.
        obs = host.stager.observations_for("w")
        writes = [w for o in obs for w in (*o.facts, o.evidence)]
        host.ledger.commit(host.ticker.writer("w"), host.head("w"), writes)
        fork = host.fork_world("w", "w-fork")
        rec = host.get(akey(0))
        assert rec is not None and rec.settlement is not None
        assert host.ledger.read_at(fork).get("task-0000", f"task.observed.{KIND}") is not None
        assert host.get(akey(0, "w-fork")) is None  # a fork inherits no control record
        host.destroy_world("w")
        assert "w" not in host.ledger.worlds()


def test_destroy_reopens_when_the_required_projector_fails(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "provider.db")
    with make_host(tmp_path) as host:
        host.create_world("w")
        writer = host.ledger.acquire_writer("w")
        r1 = host.ledger.commit(writer, host.head("w"), intents(1))
        host.projector.project(host.ledger.read_at(r1))

    def different(snapshot: Any) -> list[Any]:
        from tether.runtime import ActivityRequest

        return [ActivityRequest(KIND, e, {"x": 1}) for e, _ in snapshot.changed("task.intent")]

    changed = Family("crashtest", (KIND,), different, DedupAdapter(journal), stage_task)
    with make_host(tmp_path, changed) as host:
        with pytest.raises(ProjectionConflict):
            host.destroy_world("w")
        assert host.ledger.close_state("w") == ("open", False)


def test_destroy_first_settles_from_the_retained_receipt_then_destroys(tmp_path: Path) -> None:
    with make_host(tmp_path) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1))
        drain(host)
        host.restage()
        obs = host.stager.observations_for("w")
        writes = [w for o in obs for w in (*o.facts, o.evidence)]
        r2 = host.ledger.commit(host.ticker.writer("w"), host.head("w"), writes)  # then "crashed"
        assert host.catalog.has_unsettled("w")
        host.destroy_world("w")  # public destroy: settles from r2 under the lock, then destroys
        rec = host.get(akey(0))
        assert rec is not None and rec.settlement is not None and rec.settlement.receipt == r2
        assert host.ledger.worlds() == []
