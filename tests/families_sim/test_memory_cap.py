"""A request too large to run (episodes x steps preallocated past the memory cap) is refused
before anything starts, with its reason, and ends as a recorded failure that is never retried."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tether.activities import ActivityKey
from tether.families.sim import EpisodeRequest, SimProvider
from tether.families.sim.adapter import SimEpisodeAdapter, kick_planner, sim_family
from tether.families.sim.errors import InvalidEpisodeRequest, RequestTooLarge
from tether.families.sim.family import (
    KIND,
    MISSION,
    MISSION_ENTITY,
    OBSERVATION,
    REFUSED_MEDIA_TYPE,
    Mission,
)
from tether.families.sim.provider import (
    BYTES_PER_REQUEST,
    BYTES_PER_STEP,
    DEFAULT_MEMORY_CAP_BYTES,
    estimated_memory_bytes,
)
from tether.runtime import Host
from tether.world import ComponentWrite

from tests.demo._support import demo_argv

#: Room for 1000 steps over all episodes.
CAP = BYTES_PER_REQUEST + 1000 * BYTES_PER_STEP


def test_the_estimate_grows_with_episodes_times_steps_and_the_default_is_safe() -> None:
    small = EpisodeRequest.create((0.2, 0.15), seed=1, episodes=2, steps=500)
    assert estimated_memory_bytes(small) == CAP
    big = EpisodeRequest.create((0.2, 0.15), seed=1, episodes=1000, steps=10_000_000)
    assert estimated_memory_bytes(big) > 100 * DEFAULT_MEMORY_CAP_BYTES
    # The demo's defaults and the README's long run fit under the default cap.
    for episodes, steps in ((2, 3000), (2, 100_000)):
        req = EpisodeRequest.create((0.2, 0.15), seed=1, episodes=episodes, steps=steps)
        assert estimated_memory_bytes(req) < DEFAULT_MEMORY_CAP_BYTES


def test_the_provider_refuses_before_binding_anything(tmp_path: Path) -> None:
    provider = SimProvider(tmp_path, memory_cap_bytes=CAP)
    too_big = EpisodeRequest.create((0.2, 0.15), seed=1, episodes=2, steps=501)
    with pytest.raises(RequestTooLarge) as refused:
        provider.execute("op", 1, too_big)
    assert refused.value.code == "request_too_large"
    assert refused.value.details["cap_bytes"] == CAP
    assert "episodes x 501 steps" in refused.value.message
    assert provider.operation("op") is None  # nothing bound, nothing started
    fits = EpisodeRequest.create((0.2, 0.15), seed=1, episodes=2, steps=500)
    assert provider.execute("op", 1, fits).summary["steps"] == 1000
    provider.close()


@pytest.mark.parametrize("cap", [0, 1 << 20, True, "1GiB"])
def test_a_cap_below_the_fixed_cost_or_not_a_number_is_refused(tmp_path: Path, cap: object) -> None:
    with pytest.raises(InvalidEpisodeRequest, match="memory_cap_bytes"):
        SimProvider(tmp_path, memory_cap_bytes=cap)  # type: ignore[arg-type]


def test_an_oversized_reach_ends_as_a_recorded_failure_never_retried(tmp_path: Path) -> None:
    adapter = SimEpisodeAdapter(tmp_path, warm=False, memory_cap_bytes=CAP)
    mission = Mission(targets=1, episodes=2, steps=600)
    key = ActivityKey("w", KIND, "reach-0000")
    with Host(tmp_path, [sim_family(adapter)]) as host:
        host.create_world("w")
        host.commit_tick("w", [ComponentWrite(MISSION_ENTITY, MISSION, mission.to_component())])
        kick_planner(host, "w")
        worker = host.new_worker()
        assert worker.run_once()
        assert not worker.run_once()  # nothing left to claim: it is not retried
        worker.close()
        rec = host.get(key)
        assert rec is not None and rec.result is not None and rec.result.failed
        assert rec.result.media_type == REFUSED_MEDIA_TYPE and rec.attempt_count == 1
        host.observe_once()
        rec = host.get(key)
        assert rec is not None and rec.settlement is not None
        summary = host.snapshot("w").get("reach-0000", OBSERVATION)["summary"]
        assert summary["failed"] is True and "over the cap" in summary["reason"]
    assert adapter.provider.journal.query() == []  # no provider operation was bound
    adapter.close()


def test_the_demo_refuses_an_oversized_mission_before_committing_it(tmp_path: Path) -> None:
    argv = demo_argv(tmp_path, "--episodes", "1000", "--steps", "10000000", "--port", "0")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("tether demo: request_too_large: 1000 episodes x 10000000 steps")
    assert not (tmp_path / "world.db").exists()  # nothing was committed
    capped = demo_argv(tmp_path, "--steps", "400", "--memory-cap-mb", "64", "--port", "0")
    done = subprocess.run(capped, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "request_too_large" in done.stderr
