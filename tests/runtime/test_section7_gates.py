"""Named tests for the verification gates of seed section 7 owned by the runtime."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest
from hosttools import akey, catalog_dump, drain, make_host, same, take_payload, world_sql
from journal_provider import (
    KIND,
    DedupAdapter,
    Journal,
    intents,
    projection_for,
    stage_task,
)
from tether.runtime import (
    ArtifactMissing,
    AttemptContext,
    Family,
    ProjectionConflict,
)
from tether.world import (
    ComponentWrite,
    ReceiptRejected,
)


def test_gate_family_processors_are_the_only_semantic_transition_authority(
    tmp_path: Path,
) -> None:
    with make_host(tmp_path) as host:
        host.create_world("w")
        r1 = host.commit_tick("w", intents(2))
        rec = host.get(akey(0))
        assert rec is not None and same(r1, rec.source) and rec.result is None
        assert drain(host) == 2
        rec = host.get(akey(0))
        assert rec is not None and rec.result is not None and rec.settlement is None
        # A recorded result changes no component: the head is still the intent tick.
        assert host.head("w") == r1
        assert host.snapshot("w").get("task-0000", f"task.status.{KIND}") is None
        [r2] = host.observe_once()
        snap = host.snapshot("w")
        assert snap.get("task-0000", f"task.status.{KIND}") == "done"  # the processor's write
        assert snap.get("task-0001", f"task.observed.{KIND}")["value"] == 2
        for i in range(2):
            rec = host.get(akey(i))
            assert rec is not None and rec.settlement is not None
            assert same(r2, rec.settlement.receipt)
        assert host.observe_once() == []  # nothing left to observe


def test_gate_projection_is_exact_receipt_bound_deterministic_and_idempotent(
    tmp_path: Path,
) -> None:
    with make_host(tmp_path) as host:
        host.create_world("w")
        r1 = host.commit_tick("w", intents(3))
        before = [host.get(akey(i)) for i in range(3)]
        snap = host.ledger.read_at(r1)
        host.projector.project(snap)  # a replay for the same receipt is a no-op
        assert [host.get(akey(i)) for i in range(3)] == before
        r2 = host.commit_tick("w", [ComponentWrite("other", "x", 1)])
        assert r2.tick == 2 and host.get(akey(0)) == before[0]  # no reprojection of tick 1


def test_gate_a_conflicting_projection_replay_fails_closed(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "provider.db")
    with make_host(tmp_path) as host:
        host.create_world("w")
        writer = host.ledger.acquire_writer("w")
        r1 = host.ledger.commit(writer, host.head("w"), intents(1))
        host.projector.project(
            host.ledger.read_at(r1)
        )  # admitted, then "crashed" before completing

    def different(snapshot: Any) -> list[Any]:
        from tether.runtime import ActivityRequest

        return [
            ActivityRequest(KIND, e, {"changed": True}) for e, _ in snapshot.changed("task.intent")
        ]

    changed = Family("crashtest", (KIND,), different, DedupAdapter(journal), stage_task)
    with make_host(tmp_path, changed) as host:
        with pytest.raises(ProjectionConflict):
            host.recover()
        assert host.ledger.pending_post_commit("w") == r1  # tick 2 stays blocked
        with pytest.raises(ProjectionConflict):
            host.commit_tick("w", [])


def test_gate_tokenless_ambiguous_or_invisible_receipts_neither_admit_nor_settle(
    tmp_path: Path,
) -> None:
    with make_host(tmp_path) as host:
        host.create_world("w")
        writer = host.ledger.acquire_writer("w")
        r1 = host.ledger.commit(writer, host.head("w"), intents(1))
        for bad in (dataclasses.replace(r1, visibility_token=""), host.ledger.head("w")):
            if bad.visibility_token:
                world_sql(
                    tmp_path, "INSERT INTO tick_tokens VALUES ('w', ?, 1, 'vt_sibling')", r1.run_id
                )
            with pytest.raises(ReceiptRejected):
                host.ticker.post_commit(bad)
            assert host.get(akey(0)) is None  # nothing admitted
        world_sql(tmp_path, "DELETE FROM tick_tokens WHERE token = 'vt_sibling'")
        host.recover()
        assert host.get(akey(0)) is not None
        drain(host)
        host.restage()
        # The observation tick commits, then its head gains a sibling token: settlement refuses.
        obs_writer = host.ticker.acquire("w")
        obs = host.stager.observations_for("w")
        writes = [w for o in obs for w in (*o.facts, o.evidence)]
        r2 = host.ledger.commit(obs_writer, r1, writes)
        world_sql(tmp_path, "DELETE FROM visibility WHERE token = ?", r2.visibility_token)
        with pytest.raises(ReceiptRejected):
            host.recover()
        rec = host.get(akey(0))
        assert rec is not None and rec.settlement is None
        world_sql(tmp_path, "INSERT INTO visibility VALUES ('w', ?)", r2.visibility_token)
        host.recover()  # the retained receipt's work is retried and now settles
        rec = host.get(akey(0))
        assert rec is not None and rec.settlement is not None and same(r2, rec.settlement.receipt)


def test_gate_no_provider_io_in_the_projector_or_under_the_world_lock(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "provider.db")
    seen: list[tuple[bool, str]] = []

    class Recording(DedupAdapter):
        def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
            seen.append((host.ledger.holds_lock(), threading.current_thread().name))
            return super().execute(ctx, request)

    fam = Family("crashtest", (KIND,), projection_for((KIND,)), Recording(journal), stage_task)
    with make_host(tmp_path, fam) as host:
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


def test_gate_complete_result_is_durable_before_staging(tmp_path: Path) -> None:
    with make_host(tmp_path, inline_bound=16) as host:
        host.create_world("w")
        host.commit_tick(
            "w", [ComponentWrite("task-0000", "task.intent", {"kind": KIND, "n": 1, "pad": 100})]
        )
        drain(host)
        rec = host.get(akey(0))
        assert rec is not None and rec.result is not None
        assert rec.result.ref.startswith("artifact:sha256/") and rec.result.size > 100
        put_back = take_payload(tmp_path, rec.result.digest[7:])
        head = host.head("w")
        with pytest.raises(ArtifactMissing):
            host.artifacts.get(rec.result)
        assert host.observe_once() == []
        assert host.head("w") == head  # nothing staged, nothing committed
        assert host.get(akey(0)).settlement is None  # type: ignore[union-attr]
        put_back()
        host.observe_once()
        rec = host.get(akey(0))
        assert rec is not None and rec.settlement is not None


def test_gate_large_outputs_reach_the_catalog_only_by_bounded_reference(tmp_path: Path) -> None:
    pad = 50_000
    with make_host(tmp_path, inline_bound=256) as host:
        host.create_world("w")
        host.commit_tick("w", intents(1, pad=pad))
        drain(host)
        rec = host.get(akey(0))
        assert rec is not None and rec.result is not None and rec.result.size > pad
        assert rec.result.ref.startswith("artifact:sha256/") and len(rec.result.ref) < 100
        assert len(host.artifacts.get(rec.result)) == rec.result.size
    dump = catalog_dump(tmp_path)
    assert rec.result.digest in dump  # the dump holds the catalog's rows
    assert "x" * 1000 not in dump  # the payload never entered the catalog


def test_gate_restart_restages_every_completed_unobserved_result(tmp_path: Path) -> None:
    n = 30
    with make_host(tmp_path) as host:
        host.create_world("w")
        r1 = host.commit_tick("w", intents(n))
        assert drain(host) == n
    for _ in range(2):  # restaging is repeatable until a tick commits the observation
        with make_host(tmp_path) as host:
            host.recover()
            assert len(host.stager.staged()) == n
    with make_host(tmp_path) as host:
        [r2] = host.observe_once()
        assert r2.run_id == r1.run_id and r2.tick == 2  # resumed the same run at its head
        assert all(host.get(akey(i)).settlement is not None for i in range(n))  # type: ignore[union-attr]


def test_gate_restage_pages_the_pending_set_to_exhaustion(tmp_path: Path) -> None:
    with make_host(tmp_path, page_size=3) as host:
        host.create_world("w")
        host.commit_tick("w", intents(10))
        assert drain(host) == 10
        assert host.restage() == 10
        host.observe_once()
        assert all(host.get(akey(i)).settlement is not None for i in range(10))  # type: ignore[union-attr]


def test_gate_later_head_wrong_world_or_run_receipts_neither_admit_nor_settle(
    tmp_path: Path,
) -> None:
    from tether.errors import TokenlessReceipt

    with make_host(tmp_path) as host:
        host.create_world("w")
        host.create_world("v")
        r1 = host.ledger.commit(host.ledger.acquire_writer("w"), host.head("w"), intents(1))
        bad = {
            "not_head": dataclasses.replace(r1, tick=0),
            "wrong_run": dataclasses.replace(r1, run_id="run_other"),
            "wrong_world": dataclasses.replace(r1, world_id="v"),
        }
        for what, receipt in bad.items():
            with pytest.raises(ReceiptRejected) as err:
                host.ticker.post_commit(receipt)
            assert err.value.code == ("wrong_run" if what == "wrong_world" else what)
        assert host.get(akey(0)) is None  # none of them admitted anything
        host.recover()  # the exact head admits
        drain(host)
        rec = host.get(akey(0))
        assert rec is not None and rec.result is not None
        with pytest.raises(TokenlessReceipt):  # the catalog refuses tokenless settlement too
            host.catalog.settle(akey(0), dataclasses.replace(r1, tick=2, visibility_token=""), "x")
        [r2] = host.observe_once()
        host.commit_tick("w", [])
        with pytest.raises(ReceiptRejected) as err:
            host.ticker.post_commit(r2)  # a later head exists: r2 can no longer settle anything
        assert err.value.code == "not_head"
