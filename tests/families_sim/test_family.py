"""The sim_episode family's planner, projection and staging over a real SQLite world."""

from __future__ import annotations

from pathlib import Path

import pytest
from tether.families.sim import SimProvider
from tether.families.sim.errors import InvalidEpisodeRequest
from tether.families.sim.family import (
    INTENT,
    OBSERVATION,
    Mission,
    mission_done,
    next_target,
    observation_write,
    pending,
    plan,
)
from tether.world import CommittedTickReceipt, ComponentWrite, SqliteLedger


def _commit(ledger: SqliteLedger, writes: list[ComponentWrite]) -> CommittedTickReceipt:
    writer = ledger.acquire_writer("w")
    receipt = ledger.commit(writer, ledger.head("w"), writes)
    ledger.complete_post_commit(receipt)
    return receipt


def test_a_mission_runs_to_done_each_target_chosen_from_the_last_observation(
    tmp_path: Path,
) -> None:
    ledger = SqliteLedger.open(tmp_path / "world.db")
    ledger.create_world("w")
    mission = Mission(targets=3, episodes=1, steps=600, seed=4)
    receipt = _commit(
        ledger, [ComponentWrite("mission", "physical_ai.mission", mission.to_component())]
    )
    provider = SimProvider(tmp_path / "sim")
    staged: list[tuple[str, str]] = []
    for _ in range(20):
        snap = ledger.read_at(receipt)
        if mission_done(snap):
            break
        writes = plan(snap)
        for activity_id, request in pending(snap):
            outcome = provider.execute(activity_id, 1, request)
            writes.append(observation_write(activity_id, outcome.digest, outcome.summary))
            staged.append((activity_id, outcome.digest))
        assert writes, "the mission stalled"
        receipt = _commit(ledger, writes)
    snap = ledger.read_at(receipt)
    assert mission_done(snap)
    intents = list(snap.with_component(INTENT))
    assert [e for e, _ in intents] == ["reach-0000", "reach-0001", "reach-0002"]
    for (_, intent), (prev_entity, _) in zip(intents[1:], intents[:-1], strict=True):
        tip = snap.get(prev_entity, OBSERVATION)["summary"]["final_tip"]
        assert tuple(intent["request"]["target"]) == next_target(tip, intent["index"])
    assert all(snap.get(a, OBSERVATION)["result_digest"] == d for a, d in staged)
    assert pending(snap) == [] and plan(snap) == []
    assert snap.get("mission", "physical_ai.mission.done")["targets"] == 3


def test_projection_is_pure_and_repeats_for_the_same_snapshot(tmp_path: Path) -> None:
    ledger = SqliteLedger.open(tmp_path / "world.db")
    ledger.create_world("w")
    mission = Mission(targets=1, episodes=1, steps=10)
    r1 = _commit(ledger, [ComponentWrite("mission", "physical_ai.mission", mission.to_component())])
    r2 = _commit(ledger, plan(ledger.read_at(r1)))
    snap = ledger.read_at(r2)
    assert pending(snap) == pending(ledger.read_at(r2))
    assert [a for a, _ in pending(snap)] == ["reach-0000"]
    assert plan(snap) == []  # waiting for the observation


def test_a_bad_mission_is_a_typed_error() -> None:
    with pytest.raises(InvalidEpisodeRequest):
        Mission(targets=1, episodes=0, steps=10).to_component()
    with pytest.raises(InvalidEpisodeRequest):
        Mission(targets=1, episodes=1, steps=10, first_target=(2.0, 0.0)).to_component()
    with pytest.raises(InvalidEpisodeRequest, match="targets"):
        Mission(targets=0, episodes=1, steps=10).to_component()
