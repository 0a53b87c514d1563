"""`WorldLifecycle` alone: the real ledger, the catalog's unsettled oracle and a Ticker."""

from __future__ import annotations

from pathlib import Path

import pytest
from hosttools import make_env
from journal_provider import KIND, intents, make_family
from tether.activities import ActivityKey
from tether.runtime import ObservationStager, Projector, Settler, Ticker, WorldLifecycle
from tether.testing import ActivityEnvironment
from tether.world import ComponentWrite, UnsettledActivities


def _lifecycle(env: ActivityEnvironment) -> WorldLifecycle:
    stager = ObservationStager(env.families, env.catalog, env.artifacts, env.ledger)
    projector = Projector(env.families, env.catalog, env.artifacts, env.ledger)
    ticker = Ticker(env.ledger, env.families, stager, projector, Settler(env.catalog, env.ledger))
    return WorldLifecycle(env.ledger, env.catalog, ticker)


def _settle_all(env: ActivityEnvironment, life: WorldLifecycle, world: str) -> None:
    env.drain()
    life.ticker.stager.restage()
    life.ticker.commit(world)
    assert not env.catalog.has_unsettled(world)


def test_fork_is_refused_while_unsettled_and_then_inherits_no_control_record(
    tmp_path: Path,
) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        life = _lifecycle(env)
        life.create("w")
        life.ticker.commit("w", intents(1))
        with pytest.raises(UnsettledActivities):
            life.fork("w", "f")
        assert env.ledger.worlds() == ["w"]
        _settle_all(env, life, "w")
        fork = life.fork("w", "f")
        assert env.ledger.worlds() == ["f", "w"]
        assert env.snapshot("f").get("task-0000", f"task.status.{KIND}") == "done"  # lineage
        assert env.get(ActivityKey("f", KIND, "task-0000")) is None  # no control record
        assert not env.catalog.has_unsettled("f")
        r = life.ticker.commit("f", [ComponentWrite("x", "y", 1)])  # this process writes it
        assert r.world_id == "f" and r.tick == fork.tick + 1


def test_fork_first_finishes_the_retained_heads_admissions(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        life = _lifecycle(env)
        life.create("w")
        env.ledger.commit(life.ticker.writer("w"), env.head("w"), intents(1))  # "crashed"
        assert not env.catalog.has_unsettled("w")  # nothing admitted yet...
        with pytest.raises(UnsettledActivities):
            life.fork("w", "f")  # ...but the retained receipt admits before the gate
        assert env.get(ActivityKey("w", KIND, "task-0000")) is not None


def test_a_refused_public_destroy_rolls_back_only_its_provisional_close(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        life = _lifecycle(env)
        life.create("w")
        life.ticker.commit("w", intents(1))
        with pytest.raises(UnsettledActivities):
            life.destroy("w")
        assert env.ledger.close_state("w") == ("open", False)  # workers can still observe
        with pytest.raises(UnsettledActivities):
            life.destroy("w", sticky=True)
        assert env.ledger.close_state("w") == ("closing", True)  # cleanup authority stays


def test_destroy_once_settled_removes_the_world_and_its_writer(tmp_path: Path) -> None:
    with make_env([make_family(tmp_path)], data_dir=tmp_path / "d") as env:
        life = _lifecycle(env)
        life.create("w")
        life.ticker.commit("w", intents(1))
        _settle_all(env, life, "w")
        life.destroy("w")
        assert env.ledger.worlds() == []
        assert env.ledger.close_state("w")[0] == "destroyed"
