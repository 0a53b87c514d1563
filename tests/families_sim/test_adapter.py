"""The sim_episode Family on a real Host: the planner commits every intent; abandon is observed."""

from __future__ import annotations

import os
from pathlib import Path

from tether.activities import ActivityKey, Decision, ResultRef, operation_id_for
from tether.apps.demo.main import final_content
from tether.families.sim import ProcessIdentity
from tether.families.sim.adapter import SimEpisodeAdapter, kick_planner, sim_family, stage
from tether.families.sim.family import (
    INTENT,
    KIND,
    MISSION,
    MISSION_ENTITY,
    OBSERVATION,
    Mission,
    next_target,
)
from tether.runtime import Host, StagedResult
from tether.world import ComponentWrite


def test_the_first_intent_is_committed_by_the_planner_not_by_the_caller(tmp_path: Path) -> None:
    adapter = SimEpisodeAdapter(tmp_path, warm=False)
    mission = Mission(targets=2, episodes=1, steps=10)
    with Host(tmp_path, [sim_family(adapter)]) as host:
        host.create_world("w")
        host.commit_tick("w", [ComponentWrite(MISSION_ENTITY, MISSION, mission.to_component())])
        # Processors run on the pre-tick state: the mission's own tick plans nothing.
        assert list(host.snapshot("w").with_component(INTENT)) == []
        kick_planner(host, "w")
        head = host.head("w")
        intents = list(host.snapshot("w").with_component(INTENT))
        assert [(e, v["index"]) for e, v in intents] == [("reach-0000", 0)]
        assert tuple(intents[0][1]["request"]["target"]) == mission.first_target
        rec = host.get(ActivityKey("w", KIND, "reach-0000"))
        assert rec is not None and rec.source.tick == head.tick  # admitted from that tick
        kick_planner(host, "w")  # an intent exists: no further tick
        assert host.head("w") == head
    adapter.close()


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def test_an_abandoned_reach_is_observed_as_failed_and_the_planner_moves_on(
    tmp_path: Path,
) -> None:
    clock = _Clock()
    adapter = SimEpisodeAdapter(tmp_path, warm=False)
    mission = Mission(targets=2, episodes=1, steps=10)
    key = ActivityKey("w", KIND, "reach-0000")
    with Host(tmp_path, [sim_family(adapter)], clock=clock, lease_ms=1000) as host:
        host.create_world("w")
        host.commit_tick("w", [ComponentWrite(MISSION_ENTITY, MISSION, mission.to_component())])
        kick_planner(host, "w")
        # A run that died after its episode process started, whose process still lives: Unknown.
        claim = host.catalog.claim("ghost", 1000, kinds=[KIND])
        assert claim is not None
        host.catalog.bind_provider_operation(key, claim.attempt.fence, operation_id_for(key))
        op = adapter.provider.entry(operation_id_for(key))
        marker = {"child": ProcessIdentity.of(os.getpid()).to_dict()}
        op.start(1, marker)
        clock.now += 60_000
        worker = host.new_worker()
        assert worker.run_once()
        worker.close()
        rec = host.get(key)
        assert rec is not None and rec.awaiting_decision and rec.result is None
        host.catalog.resolve(
            key, Decision.abandon(evidence_revision=rec.evidence_revision, operator="op")
        )
        [receipt] = host.observe_once()  # staging a failed result must not wedge the world
        rec = host.get(key)
        assert rec is not None and rec.settlement is not None and rec.result is not None
        snap = host.snapshot("w")
        observed = snap.get("reach-0000", OBSERVATION)
        assert observed["summary"]["failed"] is True and observed["summary"]["success"] is False
        assert final_content(key, rec, snap)["state"] == "failed"
        nxt = snap.get("reach-0001", INTENT)  # committed in the same tick, aimed from reach 0
        assert tuple(nxt["request"]["target"]) == next_target(list(mission.first_target), 1)
        assert receipt.tick == host.head("w").tick
    adapter.close()


def test_a_recorded_result_that_is_no_episode_file_is_observed_as_failed() -> None:
    key = ActivityKey("w", KIND, "reach-0000")
    result = ResultRef("inline:bm90IGEgemlw", "sha256:x", "application/json", 9)
    [write] = stage(StagedResult(key, result, b"not a zip"))
    assert write.entity == "reach-0000" and write.component == OBSERVATION
    assert write.value["summary"]["failed"] is True
    assert write.value["summary"]["reason"].startswith("unreadable result")
    assert write.value["result_digest"] == "sha256:x"
