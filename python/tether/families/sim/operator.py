"""The sim family's side of an operator decision (`tether.operator.decisions`'s `DeviceReview`)
on a parked `physical_ai.sim_episode` reach: a fresh read of the provider's journal and /proc,
the comparison with the evidence, and the proofs behind `done` and `reissue`.

- `read`: the operation's provider state now (each started attempt: its episode process alive,
  gone or undecidable, fenced out or not; the published result; staged results).
- `changed_since`: what differs from the evidence's provider state (a process gone, a new
  attempt, a fence, a result published or staged); nothing that only reads differently.
- `done` needs a verified durable result: the published one (decoded and its digests checked),
  or a staged one whose process is gone and whose attempt was not fenced out (verified, then
  published). The recorded result is a document naming that result file and its summary, so
  the reach observes the episodes that ran.
- `reissue` runs on the provider's proof that no earlier attempt can still act: every attempt
  the catalog handed out is fenced out (its process, if it starts late, refuses to run), every
  recorded episode process is provably gone, and what a fenced-out attempt left staged is
  removed; the proof is recorded in the journal (`proof-reissue-<n>`) and the decision's retry
  guard references it. A published result refuses a re-issue (it is reused, never recomputed).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tether.activities import ActivityRecord, operation_id_for
from tether.errors import OperatorRejection
from tether.families.sim.errors import ResultCorrupt
from tether.families.sim.family import (
    KIND,
    OPERATOR_DONE_MEDIA_TYPE,
    REISSUE_GUARD_MEDIA_TYPE,
)
from tether.families.sim.provider import (
    SimProvider,
    observe_children,
    provider_state,
    result_pointer,
    verified,
)
from tether.runtime import ArtifactStore


def _now_ms() -> int:
    return int(time.time() * 1000)


def _facts(state: dict[str, Any]) -> dict[str, Any]:
    """The parts of a provider state a decision depends on (not how a process was observed)."""
    attempts = state.get("attempts") or {}
    return {
        "attempts": {str(k): (a.get("alive"), bool(a.get("fenced"))) for k, a in attempts.items()},
        "result_digest": state.get("result_digest"),
        "pending": sorted(state.get("pending") or []),
    }


class SimReview:
    """Reads, compares and proves for parked sim reaches of one data directory."""

    result_media_type = OPERATOR_DONE_MEDIA_TYPE
    guard_media_type = REISSUE_GUARD_MEDIA_TYPE
    kind = KIND

    def __init__(self, data_dir: Path | str, artifacts: ArtifactStore | None = None) -> None:
        data = Path(data_dir)
        self.artifacts = artifacts or ArtifactStore(data / "artifacts")
        self.provider = SimProvider(data, artifacts=self.artifacts)

    def for_record(self, record: ActivityRecord) -> SimReview | None:
        return self if record.key.kind == KIND else None

    @staticmethod
    def _operation_id(record: ActivityRecord) -> str:
        return record.operation_id or operation_id_for(record.key)

    def read(self, record: ActivityRecord, evidence: dict[str, Any]) -> dict[str, Any]:
        state = self.provider.state(self._operation_id(record))
        return {**state, "read_at_ms": _now_ms()}

    def changed_since(self, evidence: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
        before_state = evidence.get("provider_state")
        if not isinstance(before_state, dict):
            return ["the evidence holds no provider state; it was read now"]
        before, now = _facts(before_state), _facts(fresh)
        changes = []
        for k in sorted(set(before["attempts"]) | set(now["attempts"]), key=int):
            was, is_ = before["attempts"].get(k), now["attempts"].get(k)
            if was is None:
                changes.append(f"attempt {k} started")
            elif is_ is not None and was[0] != is_[0]:
                what = {True: "running", False: "gone", None: "undecidable"}
                changes.append(
                    f"attempt {k}'s episode process is {what[is_[0]]} (was {what[was[0]]})"
                )
            if is_ is not None and is_[1] and not (was or (None, False))[1]:
                changes.append(f"attempt {k} was fenced out")
        if before["result_digest"] != now["result_digest"]:
            changes.append(f"a result was published ({now['result_digest']})")
        if before["pending"] != now["pending"]:
            changes.append(f"staged results are now {now['pending']} (were {before['pending']})")
        return changes

    def refreshed(
        self, evidence: dict[str, Any], fresh: dict[str, Any], changes: list[str]
    ) -> dict[str, Any]:
        return {**evidence, "provider_state": fresh, "changes": changes}

    def done_result(
        self, record: ActivityRecord, fresh: dict[str, Any], verdict: dict[str, Any]
    ) -> dict[str, Any]:
        operation_id = self._operation_id(record)
        outcome = self.provider.find_result(operation_id)  # decoded: digests checked
        if outcome is None:
            outcome = self._publish_staged(operation_id)
        if outcome is None:
            raise OperatorRejection(
                "not_supported",
                f"operation {operation_id} has no verified durable result: `done` needs one "
                "(reissue on the provider's proof, or abandon)",
            )
        return {
            "operation_id": operation_id,
            "outcome": "operator_done",
            "verdict": verdict,
            "result": result_pointer(outcome.result),
            "summary": outcome.run.summary,
            "provider_state": fresh,
        }

    def _publish_staged(self, operation_id: str) -> Any:
        op = self.provider.operation(operation_id)
        if op is None:
            return None
        gone = {o["attempt"] for o in observe_children(op) if o["alive"] is False}
        for k in sorted(op.pending()):
            if k in gone and op.publish_pending(k, verified(self.artifacts, op.id, k)):
                return self.provider.find_result(operation_id)
        return None

    def prove(
        self, record: ActivityRecord, evidence: dict[str, Any], fresh: dict[str, Any]
    ) -> dict[str, Any]:
        operation_id = self._operation_id(record)
        op = self.provider.entry(operation_id)
        try:
            if self.provider.find_result(operation_id) is not None:
                raise OperatorRejection(
                    "not_repeatable",
                    f"operation {operation_id} has a published result: mark it done (the "
                    "first durable result is reused, never recomputed)",
                )
        except ResultCorrupt:
            pass  # a published result that does not verify is no result to reuse
        # The decision's attempt is the next the catalog hands out: fence every one before it.
        next_attempt = record.attempt_count + 1
        handed_out = sorted(set(range(1, next_attempt)) | set(op.attempts()))
        for k in handed_out:
            if k < next_attempt:
                op.fence(k, {"fenced_by": "operator_reissue", "for_attempt": next_attempt})
        children = observe_children(op)
        alive = [o for o in children if o["alive"] is not False]
        if alive:
            raise OperatorRejection(
                "device_not_idle",
                "a re-issue needs every earlier episode process gone: "
                + "; ".join(f"attempt {o['attempt']}: {o['observed']}" for o in alive),
            )
        discarded = []
        for k, pointer in sorted(op.pending().items()):
            if op.fenced(k):
                op.discard_pending(k)
                discarded.append({"attempt": k, "digest": pointer.get("digest")})
        name = f"reissue-{next_attempt}"
        existing = op.proof(name)  # a repeated decision after a crash: the first proof stands
        if existing is not None:
            return existing
        proof = {
            "operation_id": operation_id,
            "for_attempt": next_attempt,
            "fenced_attempts": [k for k in handed_out if k < next_attempt],
            "children_gone": children,
            "discarded_pending": discarded,
            "provider_state": provider_state(op),
        }
        return op.record_proof(name, proof)


def review_factory(
    config: object, data_dir: Path, *, artifacts: ArtifactStore | None = None
) -> SimReview:
    """`tether operator`'s review of sim reaches in `data_dir` (no host configuration needed:
    the provider's state is the data directory's operations journal); its results are read
    from `artifacts` (the Host's store: on a shared catalog, its table), else the data dir's."""
    return SimReview(data_dir, artifacts)
