"""The `physical_ai.sim_episode` family: its components, planner, projection and staging.

Everything here is pure: functions of a committed `WorldSnapshot` (or of a result summary) that
return component writes or activity requests; no simulator, file or clock is touched.

Components (entity -> component):
    mission  physical_ai.mission           the mission: how many targets, episodes, steps, seed
    reach-N  physical_ai.sim_episode.intent       the Nth reach: index and the episode request
    reach-N  physical_ai.sim_episode.observation  the factual result: summary, result ref, evidence
                                                  (a failure summary if an operator abandoned it)
    mission  physical_ai.mission.done      written once every target was observed

Rules: the planner commits reach N+1 in the tick that commits reach N's observation, choosing
its target from that observation (the fingertip's final position); projection asks for one
activity per intent without an observation; the observation is the result summary plus the
result digest (the runtime adds the completion evidence that settlement checks).

Admission: a request that can never run is refused at admission (`admission_check`, run by the
required projector before it admits): one whose preallocated arrays (episodes x steps x
`BYTES_PER_STEP`, plus the fixed cost) exceed the memory cap the family was built with
(`request_too_large`, the numbers in its details), or one that does not validate
(`invalid_episode_request`). It is admitted already failed and observed as a failed reach
with the refusal's reason; the planner moves on as after any failed reach.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.families.sim._episode import MAX_REACH, MIN_REACH, ControllerParams, EpisodeRequest
from tether.families.sim._memory import check_cap, check_memory
from tether.families.sim._model import DEFAULT_MODEL, load_model_file
from tether.families.sim.errors import InvalidEpisodeRequest, RequestTooLarge
from tether.runtime import ActivityRequest, AdmissionCheck, Refusal
from tether.world import ComponentWrite, WorldSnapshot

KIND = "physical_ai.sim_episode"
MISSION_ENTITY = "mission"
MISSION = "physical_ai.mission"
DONE = "physical_ai.mission.done"
INTENT = "physical_ai.sim_episode.intent"
OBSERVATION = "physical_ai.sim_episode.observation"
MAX_TARGETS = 10_000
#: The failed result the adapter recorded, before refusal at admission, for a request over the
#: memory cap (`{code, reason, **details}`): still staged from an older data directory.
REFUSED_MEDIA_TYPE = "application/vnd.tether.sim-episode.refused+json"
#: The result an operator's `done` records: the verified episode result's reference and summary.
OPERATOR_DONE_MEDIA_TYPE = "application/vnd.tether.sim-episode.operator-done+json"
#: The retry guard an operator's `reissue` records: the provider's proof of absence.
REISSUE_GUARD_MEDIA_TYPE = "application/vnd.tether.sim-episode.reissue-proof+json"
# Each next target turns this far (rad) around the shoulder from where the fingertip ended.
_TURN = 0.7
_NEAR, _FAR = 0.18, 0.3


@dataclass(frozen=True)
class Mission:
    """A reaching mission: `targets` reaches, each an activity of `episodes` x `steps`."""

    targets: int
    episodes: int
    steps: int
    seed: int = 0
    first_target: tuple[float, float] = (0.25, 0.1)
    controller: ControllerParams = field(default_factory=ControllerParams)
    model: str = DEFAULT_MODEL

    def to_component(self) -> dict[str, Any]:
        """The `physical_ai.mission` component value (validated by building reach 0)."""
        if isinstance(self.targets, bool) or not isinstance(self.targets, int):
            raise InvalidEpisodeRequest(f"targets must be an integer, got {self.targets!r}")
        if not 1 <= self.targets <= MAX_TARGETS:
            raise InvalidEpisodeRequest(
                f"targets must be in [1, {MAX_TARGETS}], got {self.targets}"
            )
        value = {
            "targets": self.targets,
            "episodes": self.episodes,
            "steps": self.steps,
            "seed": self.seed,
            "first_target": list(self.first_target),
            "controller": self.controller.to_dict(),
            "model": self.model,
            "model_digest": load_model_file(self.model).digest,
        }
        _request(value, 0, self.first_target)
        return value


def reach_entity(index: int) -> str:
    """Entity name of the `index`th reach (zero-padded so names sort in mission order)."""
    return f"reach-{index:04d}"


def _request(mission: dict[str, Any], index: int, target: tuple[float, float]) -> dict[str, Any]:
    return EpisodeRequest.from_dict(
        {
            "model": mission["model"],
            "model_digest": mission["model_digest"],
            "seed": mission["seed"] + index,
            "episodes": mission["episodes"],
            "steps": mission["steps"],
            "target": [target[0], target[1]],
            "controller": mission["controller"],
        }
    ).to_dict()


def next_target(final_tip: list[float], index: int) -> tuple[float, float]:
    """The target after one that ended at `final_tip`: turned on, alternating near and far."""
    angle = math.atan2(final_tip[1], final_tip[0]) + _TURN
    radius = _FAR if index % 2 else _NEAR
    radius = min(max(radius, MIN_REACH), MAX_REACH)
    return (round(radius * math.cos(angle), 4), round(radius * math.sin(angle), 4))


def intent_write(
    mission: dict[str, Any], index: int, target: tuple[float, float]
) -> ComponentWrite:
    """The intent component of reach `index` at `target`."""
    value = {"index": index, "request": _request(mission, index, target)}
    return ComponentWrite(reach_entity(index), INTENT, value)


def plan(snapshot: WorldSnapshot) -> list[ComponentWrite]:
    """The planner's next semantic step from committed state only."""
    return plan_with(snapshot, {})


def plan_with(snapshot: WorldSnapshot, fresh: Mapping[str, Any]) -> list[ComponentWrite]:
    """The planner's next step, seeing `fresh` observations (entity -> value) on top of state."""

    def observation(entity: str) -> Any:
        return fresh[entity] if entity in fresh else snapshot.get(entity, OBSERVATION)

    mission = snapshot.get(MISSION_ENTITY, MISSION)
    if mission is None or snapshot.get(MISSION_ENTITY, DONE) is not None:
        return []
    intents = list(snapshot.with_component(INTENT))
    if not intents:
        return [intent_write(mission, 0, tuple(mission["first_target"]))]
    entity, last = intents[-1]
    latest = observation(entity)
    if latest is None:
        return []
    index = int(last["index"]) + 1
    if index < int(mission["targets"]):
        # An abandoned reach has no final tip: the next target turns on from where it aimed.
        tip = latest["summary"].get("final_tip") or last["request"]["target"]
        target = next_target(tip, index)
        return [intent_write(mission, index, target)]
    observations = [observation(e) for e, _ in intents]
    if any(o is None for o in observations):
        return []
    succeeded = sum(1 for o in observations if o["summary"]["success"])
    return [ComponentWrite(MISSION_ENTITY, DONE, {"targets": len(intents), "succeeded": succeeded})]


def mission_done(snapshot: WorldSnapshot) -> bool:
    """Whether the planner has declared the mission complete."""
    return snapshot.get(MISSION_ENTITY, DONE) is not None


def pending(snapshot: WorldSnapshot) -> list[tuple[str, dict[str, Any]]]:
    """Projection: (activity id, episode request) for each intent not yet observed."""
    return [
        (entity, intent["request"])
        for entity, intent in snapshot.with_component(INTENT)
        if snapshot.get(entity, OBSERVATION) is None
    ]


def refusal_for(request: Any, cap_bytes: int) -> Refusal | None:
    """Why the episode request `request` can never run under the memory cap `cap_bytes`, or
    None: past the cap (`request_too_large`), or not a valid request."""
    try:
        check_memory(EpisodeRequest.from_dict(request), cap_bytes)
    except RequestTooLarge as exc:
        return Refusal(exc.code, exc.message, dict(exc.details))
    except InvalidEpisodeRequest as exc:
        return Refusal("invalid_episode_request", str(exc).splitlines()[0] or "invalid request")
    return None


def admission_check(memory_cap_bytes: int) -> AdmissionCheck:
    """The family's pure admission check under `memory_cap_bytes` (validated here): it closes
    over the cap alone, plain data from configuration."""
    cap = check_cap(memory_cap_bytes)

    def check(request: ActivityRequest) -> Refusal | None:
        return refusal_for(request.input, cap)

    return check


def failed_summary(reason: str, code: str | None = None) -> dict[str, Any]:
    """The summary observed for a reach that ended without episodes: refused at admission
    (with the refusal's `code`), or abandoned by an operator."""
    summary: dict[str, Any] = {"failed": True, "success": False, "reason": reason}
    if code is not None:
        summary["code"] = code
    return summary


def observation_write(
    activity_id: str, result_digest: str, summary: dict[str, Any]
) -> ComponentWrite:
    """Staging: the complete result-derived fact set of one reach (its summary)."""
    return ComponentWrite(
        activity_id, OBSERVATION, {"summary": summary, "result_digest": result_digest}
    )
