"""Typed errors of the simulation family, all rooted at `tether.errors.TetherError`."""

from __future__ import annotations

from tether._coded import CodedError
from tether.errors import TetherError


class SimError(TetherError):
    """Base class for errors raised by the `physical_ai.sim_episode` family."""


class InvalidEpisodeRequest(SimError, ValueError):
    """The episode request is malformed: a missing field, a wrong type or an out-of-range value."""


class UnknownModel(InvalidEpisodeRequest):
    """The request names a model that is not shipped in `tether/families/sim/models/`."""


class ModelDigestMismatch(InvalidEpisodeRequest):
    """The request's model digest is not the digest of the shipped model file."""


class AttemptAlreadyStarted(SimError):
    """A start marker for this operation id and attempt already exists; it may not start twice."""


class AttemptFenced(SimError):
    """A later attempt fenced this one off (its retry guard exists), so it must not run."""


class StaleAttemptAlive(SimError):
    """An earlier attempt's episode child is still alive, so a fresh attempt may not start."""


class AttemptExpired(SimError):
    """The request's `not_after_ms` passed on the host's clock before the attempt started: it
    never starts (no start marker is written). `proof` is the journal's `expired` record."""

    def __init__(self, message: str, proof: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.proof = dict(proof or {})


class SimReachRefused(CodedError, InvalidEpisodeRequest):
    """A submitted reach (`family.submit_intent`) is refused before anything is committed
    (`code` ``invalid_sim_reach``); `field` names the request field at fault (`seed`,
    `target`, `target[0]`, `target[1]`, `episodes`, `steps`, `not_after_ms`, ...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__("invalid_sim_reach", f"{field}: {message}", details={"field": field})
        self.field = field
        self.reason = message


class EpisodeFailed(SimError):
    """The episode child exited without a complete result (crashed, killed or rejected)."""


class RequestTooLarge(CodedError, SimError):
    """The request's preallocated arrays (episodes x steps) would exceed the provider's memory
    cap (`code` ``request_too_large``; `details`: episodes, steps, estimated and cap bytes).
    It can never run, so it is refused before anything starts and never retried."""


class ResultCorrupt(SimError):
    """A published result file does not verify (bad archive, summary or trajectory digest)."""


__all__ = [
    "AttemptAlreadyStarted",
    "AttemptExpired",
    "AttemptFenced",
    "EpisodeFailed",
    "InvalidEpisodeRequest",
    "ModelDigestMismatch",
    "RequestTooLarge",
    "ResultCorrupt",
    "SimError",
    "SimReachRefused",
    "StaleAttemptAlive",
    "UnknownModel",
]
