"""The sim_episode Family on a real Host: the planner processor commits every intent."""

from __future__ import annotations

from pathlib import Path

from tether.activities import ActivityKey
from tether.physical.adapter import SimEpisodeAdapter, kick_planner, sim_family
from tether.physical.family import INTENT, KIND, MISSION, MISSION_ENTITY, Mission
from tether.runtime import Host
from tether.world import ComponentWrite


def test_the_first_intent_is_committed_by_the_planner_not_by_the_caller(tmp_path: Path) -> None:
    adapter = SimEpisodeAdapter(tmp_path / "sim", warm=False)
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
