"""`Ticker` alone: built from the real ledger of `tether.testing` and its own parts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hosttools import make_env
from journal_provider import KIND, intents, make_family
from tether.activities import ActivityKey, ActivityRecord
from tether.runtime import FamilyError, ObservationStager, Projector, Settler, Ticker
from tether.runtime._ticker import OBSERVATIONS_PER_TICK
from tether.testing import ActivityEnvironment
from tether.world import ComponentWrite, ReceiptRejected, StaleWriter


def _key(i: int) -> ActivityKey:
    return ActivityKey("w", KIND, f"task-{i:04d}")


def _ticker(env: ActivityEnvironment) -> Ticker:
    stager = ObservationStager(env.families, env.catalog, env.artifacts, env.ledger)
    projector = Projector(env.families, env.catalog, env.artifacts, env.ledger)
    settler = Settler(env.catalog, env.ledger)
    return Ticker(env.ledger, env.families, stager, projector, settler)


def test_a_tick_reports_the_records_its_projection_admitted(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.ledger.create_world("w")
        ticker = _ticker(env)
        admitted: list[ActivityRecord] = []
        r1 = ticker.commit("w", intents(3), admitted=admitted)
        assert sorted((r.key for r in admitted), key=str) == [_key(i) for i in range(3)]
        assert all(r == env.get(r.key) and r.source == r1 for r in admitted)
        again: list[ActivityRecord] = []
        ticker.commit("w", admitted=again)  # nothing new to admit
        assert again == []


def test_a_tick_commits_at_most_its_share_of_staged_observations(tmp_path: Path) -> None:
    n = OBSERVATIONS_PER_TICK + 5
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.ledger.create_world("w")
        ticker = _ticker(env)
        ticker.commit("w", intents(n))
        assert env.drain() == n
        assert ticker.stager.restage() == n
        r2 = ticker.commit("w")
        settled = [i for i in range(n) if env.get(_key(i)).settlement is not None]  # type: ignore[union-attr]
        assert len(settled) == OBSERVATIONS_PER_TICK
        assert len(ticker.stager.staged()) == 5  # the rest wait for the next tick
        r3 = ticker.commit("w")
        assert all(env.get(_key(i)).settlement is not None for i in range(n))  # type: ignore[union-attr]
        assert {env.get(_key(i)).settlement.receipt for i in range(n)} == {r2, r3}  # type: ignore[union-attr]


def test_an_intent_tick_admits_and_an_observation_tick_runs_processors_and_settles(
    tmp_path: Path,
) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.ledger.create_world("w")
        ticker = _ticker(env)
        r1 = ticker.commit("w", intents(2))
        assert env.ledger.pending_post_commit("w") is None  # its post-commit work ran
        assert all(env.get(_key(i)).source == r1 for i in range(2))  # type: ignore[union-attr]
        assert env.drain() == 2
        assert ticker.stager.restage() == 2
        r2 = ticker.commit("w")
        snap = env.snapshot("w", r2)
        for i in range(2):
            assert snap.get(f"task-{i:04d}", f"task.status.{KIND}") == "done"  # the processor
            assert snap.get(f"task-{i:04d}", f"task.observed.{KIND}")["value"] == 2 * i
            rec = env.get(_key(i))
            assert rec is not None and rec.settlement is not None
            assert rec.settlement.receipt == r2
        assert ticker.stager.staged() == []  # committed observations are forgotten


def test_a_tick_writing_one_component_twice_commits_nothing(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        r0 = env.ledger.create_world("w")
        ticker = _ticker(env)
        with pytest.raises(FamilyError):
            ticker.commit("w", [ComponentWrite("e", "c", 1), ComponentWrite("e", "c", 2)])
        assert env.head("w") == r0


def test_the_heads_owed_post_commit_work_is_finished_before_the_next_tick(
    tmp_path: Path,
) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.ledger.create_world("w")
        ticker = _ticker(env)
        r1 = env.ledger.commit(ticker.writer("w"), env.head("w"), intents(1))  # "crashed"
        assert env.get(_key(0)) is None
        r2 = ticker.commit("w")
        rec = env.get(_key(0))
        assert rec is not None and rec.source == r1 and r2.tick == 2


def test_post_commit_fails_closed_on_a_bad_receipt_and_keeps_the_head_blocked(
    tmp_path: Path,
) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.ledger.create_world("w")
        ticker = _ticker(env)
        r1 = env.ledger.commit(ticker.writer("w"), env.head("w"), intents(1))
        with pytest.raises(ReceiptRejected):
            ticker.post_commit(dataclasses.replace(r1, visibility_token="vt_sibling"))
        assert env.get(_key(0)) is None
        assert env.ledger.pending_post_commit("w") == r1
        ticker.recover("w")  # the exact receipt then does the work
        assert env.get(_key(0)) is not None and env.ledger.pending_post_commit("w") is None


def test_a_newer_ticker_fences_the_older_one(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        env.ledger.create_world("w")
        old, new = _ticker(env), _ticker(env)
        old.acquire("w")
        old.commit("w", [ComponentWrite("x", "y", 1)])
        new.recover("w")  # a restarted process takes over
        with pytest.raises(StaleWriter):
            old.commit("w", [ComponentWrite("x", "y", 2)])
        r = new.commit("w", [ComponentWrite("x", "y", 3)])
        assert r.tick == 2 and env.snapshot("w").get("x", "y") == 3
