"""Operator decisions on parked robot moves.

Rules:
- Resolving needs the operator credential from the host configuration (checked first, before
  any state is read or written) and a named operator.
- A decision names the evidence revision it saw. It is refused when a newer revision exists,
  when that revision was already decided (decisions are single use), or when a fresh read-back
  shows the device changed since the evidence was taken; in that last case a new revision with
  the fresh state is recorded for the operator to review.
- `done` records a result carrying the operator's verdict; `reissue` (absolute moves only, and
  only when every joint is idle) records a retry guard carrying the operator's identity and the
  fresh read-back, so the next worker run executes one new attempt, first motion speed-limited;
  `abandon` records a failed result; `wait` records nothing durable and leaves the move parked.
- Doing nothing never moves the robot: a parked move has no path to execution but a decision.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from tether.activities import REJECTION_CODES as CATALOG_REJECTION_CODES
from tether.activities import ActivityKey, Catalog, Decision, RetryGuard
from tether.adapters.dynamixel.config import HostConfig
from tether.errors import CatalogRejection, OperatorRejection
from tether.physical.robot_move import (
    GUARD_MEDIA_TYPE,
    KINDS,
    RESULT_MEDIA_TYPE,
    canonical_json,
)
from tether.physical.robot_move_store import MoveStore, Operation, StoreConflict, now_ms
from tether.runtime import ArtifactStore

DECISIONS = ("done", "reissue", "abandon", "wait")
StateReader = Callable[[str], dict[str, Any]]


#: Every `.code` an OperatorRejection carries: its own, plus the catalog's rejection codes.
REJECTION_CODES: tuple[str, ...] = (
    "already_decided",
    "already_final",
    "bad_key",
    "credential_refused",
    "device_not_idle",
    "not_parked",
    "not_repeatable",
    "operator_required",
    "stale_revision",
    "state_changed",
    "unknown_activity",
    "unknown_decision",
    "unknown_operation",
    "catalog_rejected",
    *CATALOG_REJECTION_CODES,
)


def rejection(code: str, message: str) -> OperatorRejection:
    if code not in REJECTION_CODES:
        raise ValueError(f"unlisted operator rejection code {code!r}")
    return OperatorRejection(code, message)


def state_changed(before: dict[str, Any], after: dict[str, Any], tolerance: int) -> list[str]:
    """Differences that matter between two read-backs (empty when the device is as it was)."""
    diffs: list[str] = []
    for dxl_id, old in before.get("joints", {}).items():
        new = after.get("joints", {}).get(dxl_id)
        if new is None:
            diffs.append(f"id {dxl_id} missing")
            continue
        for name in (
            "goal_position",
            "registered_instruction",
            "torque_enable",
            "hardware_error_status",
            "moving",
        ):
            if old.get(name) != new.get(name):
                diffs.append(f"id {dxl_id} {name} {old.get(name)} -> {new.get(name)}")
        if (
            abs(int(old.get("present_position", 0)) - int(new.get("present_position", 0)))
            > tolerance
        ):
            moved = f"{old.get('present_position')} -> {new.get('present_position')}"
            diffs.append(f"id {dxl_id} present_position {moved}")
    return diffs


def apply_decision(op: Operation, revision: int) -> dict[str, Any] | None:
    """Make a recorded decision's effect durable (idempotent; also run after a crash).

    Returns the durable document the effect produced: the result (`done`), the failed result
    (`abandon`) or the retry guard of the next attempt (`reissue`); None for no decision."""
    decision = op.decision(revision)
    if decision is None:
        return None
    verdict = {
        k: decision[k] for k in ("decision", "revision", "operator", "note", "decided_at_ms")
    }
    if decision["decision"] == "done":
        if op.failed() is None:
            return op.record_result(
                {
                    "operation_id": op.id,
                    "outcome": "operator_done",
                    "verdict": verdict,
                    "read_back": decision["read_back"],
                }
            )
        return None
    if decision["decision"] == "abandon":
        if op.result() is None:
            op.record_failed({"operation_id": op.id, "outcome": "abandoned", "verdict": verdict})
        return op.failed()
    # reissue: the guard of the attempt that was next when the decision was made, never of a
    # later one (replaying the decision after that attempt crashed must not let a further
    # attempt skip its reconciliation)
    number = int(decision["for_attempt"])
    existing = op.guard(number)
    if existing is not None or op.terminal or number in op.attempts():
        return existing
    return op.record_guard(
        number,
        {
            "reason": "operator_reissue",
            "operator": decision["operator"],
            "decision_revision": revision,
            "read_back": decision["read_back"],
        },
    )


def _check_caller(config: HostConfig, credential: str | None, operator: str, decision: str) -> None:
    """Credential first, before any state is read or written; then the operator and decision."""
    if not config.verify_operator(credential):
        raise rejection("credential_refused", "a valid operator credential is required")
    if not operator.strip():
        raise rejection("operator_required", "name the operator making the decision")
    if decision not in DECISIONS:
        raise rejection("unknown_decision", f"decision must be one of {DECISIONS}")


def _decide(
    config: HostConfig,
    op: Operation,
    *,
    decision: str,
    revision: int,
    operator: str,
    note: str,
    read_state: StateReader,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The decision rules both modes share, on the operation's device evidence revisions.

    Returns (the decision record, the document its effect made durable; None for `wait`)."""
    revisions = op.evidence_revisions()
    if not revisions:
        raise rejection("not_parked", f"operation {op.id} has no evidence to decide on")
    if revision != revisions[-1]:
        raise rejection(
            "stale_revision", f"revision {revision} is not the latest ({revisions[-1]})"
        )
    request = op.request
    if decision == "reissue" and request.relative:
        raise rejection(
            "not_repeatable", "a relative move cannot be re-issued; mark it done or abandon it"
        )
    made = {
        "decision": decision,
        "revision": revision,
        "operator": operator,
        "note": note,
        "decided_at_ms": now_ms(),
        "pid": os.getpid(),
    }
    earlier = op.decision(revision)
    if earlier is not None:
        if earlier["decision"] != decision:
            raise rejection("already_decided", f"revision {revision} was already decided")
        # The same decision again: its effect may have been cut short by a crash; finish it.
        return earlier, apply_decision(op, revision)
    if decision == "wait":
        with open(op.path / "waits.jsonl", "a", encoding="utf-8") as log:
            log.write(json.dumps(made) + "\n")
        return made, None
    evidence = op.evidence(revision) or {}
    fresh = read_state(request.robot)
    robot = config.robot(request.robot)
    diffs = state_changed(evidence.get("device_state", {}), fresh, robot.tolerance_ticks)
    if diffs:
        new = op.record_evidence(
            {**evidence, "device_state": fresh, "supersedes": revision, "changes": diffs}
        )
        raise rejection(
            "state_changed",
            f"device changed since revision {revision} ({'; '.join(diffs)}); review revision {new}",
        )
    if decision == "reissue" and any(j.get("moving") for j in fresh.get("joints", {}).values()):
        raise rejection("device_not_idle", "the arm is moving; re-issue needs it idle")
    try:
        op.record_decision(revision, {**made, "read_back": fresh, "for_attempt": op.next_attempt()})
    except StoreConflict as exc:
        raise rejection("already_decided", str(exc)) from exc
    return made, apply_decision(op, revision)


def resolve(
    config: HostConfig,
    store: MoveStore,
    op_id: str,
    *,
    decision: str,
    revision: int,
    operator: str,
    credential: str | None,
    note: str = "",
    read_state: StateReader,
) -> dict[str, Any]:
    """Decide on a move parked by `tether move` (the operation store is the control record)."""
    _check_caller(config, credential, operator, decision)
    op = store.get(op_id)
    if op is None:
        raise rejection("unknown_operation", f"no operation {op_id}")
    if op.terminal:
        raise rejection("already_final", f"operation {op_id} is {op.status()}")
    if op.decision(revision) is not None:
        raise rejection("already_decided", f"revision {revision} was already decided")
    made, _ = _decide(
        config,
        op,
        decision=decision,
        revision=revision,
        operator=operator,
        note=note,
        read_state=read_state,
    )
    return {**made, "status": op.status()}


def summary(op: Operation) -> dict[str, Any]:
    evidence = op.evidence()
    return {
        "operation_id": op.id,
        "status": op.status(),
        "robot": op.request.robot,
        "kind": op.request.kind,
        "revision": evidence.get("revision") if evidence else None,
        "reason": evidence.get("reason") if evidence else None,
    }


def show(op: Operation, revision: int | None = None) -> dict[str, Any]:
    evidence = op.evidence(revision)
    doc: dict[str, Any] = {**summary(op), "evidence": evidence}
    if evidence is not None:
        read_at = evidence.get("device_state", {}).get("read_at_ms")
        doc["device_state_age_ms"] = now_ms() - read_at if isinstance(read_at, int) else None
    return doc


# --- runtime mode: the Activity catalog holds the control record and the evidence revision ---


def parse_key(text: str) -> ActivityKey:
    """`world_id/kind/activity_id` -> ActivityKey."""
    parts = text.split("/", 2)
    if len(parts) != 3 or not all(parts):
        raise rejection("bad_key", f"{text!r} is not world_id/kind/activity_id")
    return ActivityKey(parts[0], parts[1], parts[2])


def format_key(key: ActivityKey) -> str:
    return f"{key.world_id}/{key.kind}/{key.activity_id}"


def resolve_activity(
    config: HostConfig,
    catalog: Catalog,
    artifacts: ArtifactStore,
    store: MoveStore,
    key: ActivityKey,
    *,
    decision: str,
    revision: int,
    operator: str,
    credential: str | None,
    note: str = "",
    read_state: StateReader,
) -> dict[str, Any]:
    """Resolve a robot move the runtime parked (catalog `awaiting_decision`).

    The same rules as `resolve` (one code path: `_decide`), on the operation's device evidence
    revisions, which `list`/`show` print: a state change since the revision the operator saw
    records a new revision and refuses the decision. The catalog is then told the outcome
    (naming its own evidence revision) and makes the decision single use for the runtime."""
    _check_caller(config, credential, operator, decision)
    record = catalog.get(key)
    if record is None or not record.awaiting_decision or record.operation_id is None:
        raise rejection("not_parked", f"{format_key(key)} awaits no decision")
    op = store.get(record.operation_id)
    if op is None:
        raise rejection("unknown_operation", f"no device record for {record.operation_id}")
    made, doc = _decide(
        config,
        op,
        decision=decision,
        revision=revision,
        operator=operator,
        note=note,
        read_state=read_state,
    )
    if decision == "wait":
        return {**made, "status": "awaiting_decision"}
    seen = record.evidence_revision
    try:
        if decision == "done":
            if doc is None:
                raise rejection("already_final", f"operation {op.id} is {op.status()}")
            ref = artifacts.put_bytes(canonical_json(doc), RESULT_MEDIA_TYPE)
            catalog.resolve(
                key, Decision.recovered(ref, evidence_revision=seen, operator=operator, note=note)
            )
        elif decision == "abandon":
            catalog.resolve(
                key, Decision.abandon(evidence_revision=seen, operator=operator, note=note)
            )
        else:
            if doc is None:
                raise rejection("already_final", f"operation {op.id} is {op.status()}")
            ref = artifacts.put_bytes(canonical_json(doc), GUARD_MEDIA_TYPE)
            guard = RetryGuard(ref=ref.ref, digest=ref.digest)
            catalog.resolve(
                key,
                Decision.absent(guard, evidence_revision=seen, operator=operator, note=note),
            )
    except CatalogRejection as exc:
        raise rejection(str(getattr(exc, "code", "catalog_rejected")), str(exc)) from exc
    return {**made, "status": "resolved"}


def runtime_listing(catalog: Catalog, store: MoveStore) -> list[dict[str, Any]]:
    out = []
    for record in catalog.iter_awaiting_decision(kinds=list(KINDS)):
        op = store.get(record.operation_id) if record.operation_id else None
        evidence = op.evidence() if op is not None else None
        out.append(
            {
                "key": format_key(record.key),
                "operation_id": record.operation_id,
                "revision": evidence.get("revision") if evidence else None,
                "catalog_revision": record.evidence_revision,
                "reason": evidence.get("reason") if evidence else None,
            }
        )
    return out


def runtime_show(
    catalog: Catalog, artifacts: ArtifactStore, store: MoveStore, key: ActivityKey
) -> dict[str, Any]:
    record = catalog.get(key)
    if record is None:
        raise rejection("unknown_activity", f"no activity {format_key(key)}")
    doc: dict[str, Any] = {
        "key": format_key(key),
        "operation_id": record.operation_id,
        "awaiting_decision": record.awaiting_decision,
        "revision": None,
        "catalog_revision": record.evidence_revision,
        "evidence": None,
    }
    if record.evidence is not None:
        doc["evidence"] = json.loads(
            artifacts.get_bytes(record.evidence.evidence.ref, record.evidence.evidence.digest)
        )
    op = store.get(record.operation_id) if record.operation_id else None
    latest = op.evidence() if op is not None else None
    if latest is not None and latest != doc["evidence"]:
        doc["latest_device_evidence"] = latest  # a fresher read-back (e.g. after state_changed)
    shown = doc.get("latest_device_evidence") or doc["evidence"] or {}
    doc["revision"] = shown.get("revision")  # the revision a decision names
    read_at = shown.get("device_state", {}).get("read_at_ms")
    doc["device_state_age_ms"] = now_ms() - read_at if isinstance(read_at, int) else None
    return doc
