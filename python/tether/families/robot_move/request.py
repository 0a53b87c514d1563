"""The `physical_ai.robot_move` family: absolute or relative multi-joint moves of a real robot.

A request names a robot and per-joint targets in radians. Its retry class is fixed by its kind:
absolute moves are idempotent (sending the same goals twice ends in the same pose); relative
moves are not repeatable (a second run adds the delta again), so whenever the outcome of a
relative move is ambiguous it goes to an operator.

Reconciliation reaches one of three conclusions (seed "Activities", section 2); they carry
bounded JSON documents that the operation store makes durable:
- `Recovered(result)`: the move provably ran to completion; its read-back is the result.
- `ConfirmedAbsent(guard)`: the move provably never ran, staged writes were neutralised, and
  the guard (port lock + read-back) allows exactly one fresh attempt.
- `Unknown(evidence, retry_after_ms)`: neither can be proved; the move is parked for an
  operator and never executes again by itself.
When the runtime's Contract C types are available these map one to one onto them.

`not_after_ms` (optional, wall-clock ms since the epoch, set by the gRPC service): the move
starts only while the host's clock is before it; past it the adapter records an `expired`
failure instead of a start marker. It is part of the request (and its digest) only when set,
so a move without one keeps the digest it always had.

`session_id` (optional, set by the gRPC service): the move depends on that session's heartbeat
on the host that runs it (the family's session gate, `SessionGate`): it starts only while the
session is live, and a lapse stops the arm mid-motion. Like `not_after_ms` it is part of the
request and its digest only when set.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

FAMILY = "physical_ai.robot_move"
KIND_ABSOLUTE = "physical_ai.robot_move.absolute"
KIND_RELATIVE = "physical_ai.robot_move.relative"
KINDS = (KIND_ABSOLUTE, KIND_RELATIVE)
RESULT_MEDIA_TYPE = "application/vnd.tether.robot-move.result+json"
GUARD_MEDIA_TYPE = "application/vnd.tether.robot-move.guard+json"
EVIDENCE_MEDIA_TYPE = "application/vnd.tether.robot-move.evidence+json"


class RetryClass(Enum):
    ABSOLUTE_IDEMPOTENT = "absolute_idempotent"
    NON_REPEATABLE = "non_repeatable"


class MoveRequestError(ValueError):
    """A move request that is malformed (before any limit or device is looked at); code
    `bad_request`."""

    code = "bad_request"


class MoveConflict(MoveRequestError):
    """Another move already holds the activity id (`admission_conflict`, as the daemon names
    it): an activity id is one request for good."""

    code = "admission_conflict"


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def digest(obj: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(obj)).hexdigest()


def operation_id(kind: str, world_id: str, activity_id: str) -> str:
    """Provider operation id namespaced by family kind and world (seed section 5)."""
    return (
        "robot_move:"
        + hashlib.sha256(canonical_json([kind, world_id, activity_id])).hexdigest()[:32]
    )


@dataclass(frozen=True)
class MoveRequest:
    kind: str
    robot: str
    targets: tuple[tuple[str, float], ...]  # (joint name, radians or delta radians), sorted
    not_after_ms: int | None = None
    session_id: str | None = None
    #: The host that owns `robot` and committed this move (`tether serve`'s `host_name`): the
    #: move is admitted bound to it, whichever host projects it (see `family.project_move`).
    host: str | None = None

    @property
    def relative(self) -> bool:
        return self.kind == KIND_RELATIVE

    @property
    def retry_class(self) -> RetryClass:
        return RetryClass.NON_REPEATABLE if self.relative else RetryClass.ABSOLUTE_IDEMPOTENT

    def as_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "kind": self.kind,
            "robot": self.robot,
            "targets": dict(self.targets),
        }
        if self.not_after_ms is not None:
            doc["not_after_ms"] = self.not_after_ms
        if self.session_id is not None:
            doc["session_id"] = self.session_id
        if self.host is not None:
            doc["host"] = self.host
        return doc

    def expired(self, now_ms: int) -> bool:
        """Whether the move may no longer start at `now_ms` (never without a `not_after_ms`)."""
        return self.not_after_ms is not None and now_ms >= self.not_after_ms

    @property
    def digest(self) -> str:
        return digest(self.as_dict())

    @classmethod
    def from_dict(cls, data: Any) -> MoveRequest:
        if not isinstance(data, dict):
            raise MoveRequestError("a move request is a JSON object")
        kind, robot, targets = data.get("kind"), data.get("robot"), data.get("targets")
        if kind not in KINDS:
            raise MoveRequestError(f"kind must be one of {KINDS}, got {kind!r}")
        if not isinstance(robot, str) or not robot:
            raise MoveRequestError("robot must be a non-empty string")
        if not isinstance(targets, dict) or not targets:
            raise MoveRequestError("targets must map joint names to radians")
        pairs = []
        for name, value in targets.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise MoveRequestError(f"target of joint {name!r} is not a finite number")
            pairs.append((str(name), float(value)))
        not_after = data.get("not_after_ms")
        if not_after is not None and (
            isinstance(not_after, bool) or not isinstance(not_after, int) or not_after <= 0
        ):
            raise MoveRequestError("not_after_ms must be a positive integer (ms since the epoch)")
        session = data.get("session_id")
        if session is not None and (not isinstance(session, str) or not 0 < len(session) <= 256):
            raise MoveRequestError("session_id must be a string of 1..256 characters")
        host = data.get("host")
        if host is not None and (not isinstance(host, str) or not 0 < len(host) <= 256):
            raise MoveRequestError("host must be a string of 1..256 characters")
        return cls(kind, robot, tuple(sorted(pairs)), not_after, session, host)


@dataclass(frozen=True)
class Recovered:
    result: dict[str, Any]


@dataclass(frozen=True)
class ConfirmedAbsent:
    guard: dict[str, Any]


@dataclass(frozen=True)
class Unknown:
    evidence: dict[str, Any]
    retry_after_ms: int = 0


Conclusion = Recovered | ConfirmedAbsent | Unknown
