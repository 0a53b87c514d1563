"""Shared builders for catalog tests: a settable clock and small record builders."""

from __future__ import annotations

from tether.activities import (
    ActivityKey,
    Admission,
    Receipt,
    ResultRef,
    settlement_evidence_digest,
)


class ManualClock:
    """A clock the test sets: the catalog's injectable time source, advanced explicitly."""

    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def key(activity_id: str = "a1", *, world: str = "w1", kind: str = "sim.rollout") -> ActivityKey:
    return ActivityKey(world, kind, activity_id)


def receipt(
    tick: int, *, world: str = "w1", run: str = "run-1", token: str | None = None
) -> Receipt:
    return Receipt(world, run, tick, f"tok-{tick}" if token is None else token)


def admission(k: ActivityKey, *, tick: int = 3, input_digest: str = "sha256:in") -> Admission:
    return Admission(k, receipt(tick, world=k.world_id), f"input://{k.activity_id}", input_digest)


def result(name: str = "r1") -> ResultRef:
    return ResultRef(f"artifact://{name}", f"sha256:{name}", "application/json", 42)


def evidence_for(k: ActivityKey, res: ResultRef) -> str:
    return settlement_evidence_digest(k, res)
