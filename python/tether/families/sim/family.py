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

Submitted reaches (`submit_intent`, what `tether serve` commits for a served sim: its control
socket's `submit` and gRPC's `Execute` on the simulated arm): one reach named by its activity
id, checked field by field before anything is committed (`SimReachRefused` naming the field:
seed, target, episodes, steps, not_after_ms, controller, model), committed as the same intent
the planner writes (`{"index": 0, "request": ...}` on the activity's entity), so the projection,
the admission check (its memory cap: a request past it is admitted already failed, a recorded
failure) and staging are the mission's. Its `not_after_ms` is part of the episode request: the
adapter records an `expired` failure in place of the start once the host's clock passes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.families.sim._episode import (
    MAX_EPISODES,
    MAX_REACH,
    MAX_STEPS,
    MIN_REACH,
    ControllerParams,
    EpisodeRequest,
    finite_number,
    shown_number,
)
from tether.families.sim._memory import check_cap, check_memory
from tether.families.sim._model import DEFAULT_MODEL, load_model_file
from tether.families.sim.errors import InvalidEpisodeRequest, RequestTooLarge, SimReachRefused
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
#: The failed result of a reach whose `not_after_ms` passed before it started.
EXPIRED_MEDIA_TYPE = "application/vnd.tether.sim-episode.expired+json"
#: A reference to an episode result file with its summary (`result_reference`): what a remote
#: client is answered in place of the (large) file itself.
REFERENCE_MEDIA_TYPE = "application/vnd.tether.sim-episode.reference+json"
REFERENCE_SCHEMA = "tether.families.sim.sim_episode.reference/1"
#: The fields of a submitted reach (`submit_intent`); the first four are required.
SUBMIT_FIELDS = ("seed", "target", "episodes", "steps", "not_after_ms", "controller", "model")
MAX_SEED = 2**63 - 1
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


def _integer(body: Mapping[str, Any], name: str, lo: int, hi: int) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SimReachRefused(name, f"must be an integer in [{lo}, {hi}], got {value!r}")
    if not lo <= value <= hi:
        raise SimReachRefused(name, f"must be in [{lo}, {hi}], got {value}")
    return value


def reach_request(body: Any) -> dict[str, Any]:
    """The episode request of a submitted reach `body` (seed, target [x, y], episodes, steps;
    optional not_after_ms, controller, model), checked field by field: `SimReachRefused` names
    the first field at fault. Pure; the memory cap is the admission check's (not refused here:
    a request past it is a recorded failure)."""
    if not isinstance(body, Mapping):
        raise SimReachRefused("request", f"must be an object, got {type(body).__name__}")
    for name in sorted(body):
        if name not in SUBMIT_FIELDS:
            raise SimReachRefused(str(name), f"unknown field (known: {', '.join(SUBMIT_FIELDS)})")
    for name in SUBMIT_FIELDS[:4]:
        if name not in body:
            raise SimReachRefused(name, "required")
    seed = _integer(body, "seed", 0, MAX_SEED)
    episodes = _integer(body, "episodes", 1, MAX_EPISODES)
    steps = _integer(body, "steps", 1, MAX_STEPS)
    target = body["target"]
    if not isinstance(target, list | tuple) or len(target) != 2:
        raise SimReachRefused("target", "must be two numbers [x, y] in metres")
    for i, v in enumerate(target):
        if not finite_number(v):
            raise SimReachRefused(
                f"target[{i}]", f"must be a finite number of metres, got {shown_number(v)}"
            )
    x, y = float(target[0]), float(target[1])
    reach = math.hypot(x, y)
    if not MIN_REACH <= reach <= MAX_REACH:
        raise SimReachRefused(
            "target",
            f"({x}, {y}) is {reach:.3f} m from the shoulder; the reachable ring is "
            f"[{MIN_REACH}, {MAX_REACH}] m",
        )
    raw: dict[str, Any] = {
        "seed": seed,
        "episodes": episodes,
        "steps": steps,
        "target": [x, y],
        "controller": ControllerParams().to_dict(),
    }
    if body.get("not_after_ms") is not None:
        raw["not_after_ms"] = _integer(body, "not_after_ms", 1, 2**63 - 1)
    if body.get("controller") is not None:
        raw["controller"] = body["controller"]
    model = body.get("model", DEFAULT_MODEL)
    if not isinstance(model, str):
        raise SimReachRefused("model", f"must be a shipped model's name, got {model!r}")
    try:
        raw["model"], raw["model_digest"] = model, load_model_file(model).digest
    except InvalidEpisodeRequest as exc:
        raise SimReachRefused("model", str(exc).splitlines()[0]) from None
    try:
        return EpisodeRequest.from_dict(raw).to_dict()
    except InvalidEpisodeRequest as exc:  # only the controller is left unchecked above
        raise SimReachRefused("controller", str(exc).splitlines()[0]) from None


def submit_intent() -> Any:
    """`tether serve`'s admission of a submitted reach (`(activity_id, kind, body)` -> the
    intent write): `reach_request`'s checks before anything is committed, then the intent the
    projection reads, on the activity's own entity."""

    def build(activity_id: str, kind: str, body: dict[str, Any]) -> ComponentWrite:
        if kind != KIND:
            raise SimReachRefused("kind", f"must be {KIND}, got {kind!r}")
        return ComponentWrite(activity_id, INTENT, {"index": 0, "request": reach_request(body)})

    return build


def result_reference(
    ref: str, digest: str, media_type: str, size: int, summary: dict[str, Any]
) -> dict[str, Any]:
    """The reference document of an episode result file (`REFERENCE_MEDIA_TYPE`): where it is,
    its digest and its summary (the trajectory digest among it), without the arrays."""
    return {
        "schema": REFERENCE_SCHEMA,
        "result": {"ref": ref, "digest": digest, "media_type": media_type, "size": size},
        "summary": summary,
    }
