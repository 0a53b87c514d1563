"""Operator decisions on parked Activities: the Activity catalog is the one control record.

Rules:
- Resolving needs a valid operator credential (checked first, before any state is read or
  written; failures are rate-limited). The operator recorded is the one the credential
  belongs to; a name given beside it is only checked against it.
- A decision names the catalog's evidence revision, the one the operator reviewed. It is
  exactly one catalog `resolve` on that revision; the core refuses a revision it no longer
  holds and a second decision (decisions are single use). Nothing else keeps a revision or a
  decision.
- Before a decision on a family with a device review (robot moves), the adapter reads the
  device again and compares (its `changed_since`): when it changed, a new evidence document is
  made durable in the artifact store and recorded through the core (`refresh_evidence`, a new
  revision), and the decision is refused (`state_changed`) for the operator to review it.
- `done` records a result document carrying the operator's verdict; `reissue` (absolute moves)
  records a retry guard referencing the adapter's proof that no earlier attempt can still act
  (staged writes neutralised and read back, the last ACTION accounted for, the fence floor
  raised), taken while the host owns the port: the decision authorises the use of that proof
  and is never the proof; `abandon` records the core's failed result; `wait` records nothing.
- No decision is durable without its guard or result document (the document is durable
  before `resolve` names it), and no guard is used without its decision (the proof is inert
  in the journal until a decision references it; only the catalog lets an attempt execute).
- Families without a device review (the demo's sim reaches) can be listed, shown and
  abandoned; `done` and `reissue` need the family's own review.
- Doing nothing never moves the robot: a parked Activity has no path to execution but a
  decision.
"""

from __future__ import annotations

import json
import time
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from tether._coded import CodedError
from tether._crash import crash_point
from tether.activities import (
    DECISION_WORDS,
    ActivityKey,
    ActivityRecord,
    Catalog,
    Decision,
    Evidence,
    ResultRef,
    RetryGuard,
)
from tether.activities import REJECTION_CODES as CATALOG_REJECTION_CODES
from tether.errors import CatalogRejection, OperatorRejection, TetherError
from tether.operations import check_operation_id
from tether.runtime import ArtifactStore, Refusal
from tether.serve.views import state_of

DECISIONS = ("done", "reissue", "abandon", "wait")
#: The resolve path's crash points, in order (`TETHER_CRASH_AT`).
RESOLVE_CRASH_POINTS = (
    "resolve.after_read",
    "resolve.after_evidence_document",
    "resolve.after_proof",
    "resolve.after_document",
    "resolve.after_decision",
)
EVIDENCE_MEDIA_TYPE = "application/vnd.tether.evidence+json"

#: Every `.code` an OperatorRejection carries: its own, plus the catalog's rejection codes
#: (each once: `unknown_activity` is both).
REJECTION_CODES: tuple[str, ...] = tuple(
    dict.fromkeys(
        (
            "bad_key",
            "bad_note",
            "credential_ambiguous",
            "credential_missing",
            "credential_rate_limited",
            "credential_refused",
            "operator_mismatch",
            "role_refused",
            "device_not_idle",
            "hardware_error",
            "neutralise_failed",
            "not_parked",
            "not_repeatable",
            "not_supported",
            "robot_latched",
            "operator_required",
            "stale_revision",
            "state_changed",
            "unknown_activity",
            "unknown_decision",
            "bound_elsewhere",
            "catalog_rejected",
            "remote_awaits_operator",
            "remote_ended",
            "remote_unreachable",
            *CATALOG_REJECTION_CODES,
        )
    )
)
#: Device refusals of a re-issue the operator sees under their own code.
_DEVICE_CODES = (
    "hardware_error",
    "device_not_idle",
    "not_repeatable",
    "neutralise_failed",
    "robot_latched",
)


#: The longest note a decision records (the console's and the CLI's alike).
MAX_NOTE_CHARS = 2000


def _check_note(note: object) -> None:
    """A decision's note: text of at most `MAX_NOTE_CHARS`, without control characters but
    newline and tab (a note is shown on operators' terminals, where an escape sequence would
    act: clear the screen, rewrite a line)."""
    if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
        raise rejection("bad_note", f"a note is text of at most {MAX_NOTE_CHARS} characters")
    if any(unicodedata.category(c) == "Cc" and c not in "\n\t" for c in note):  # C0, DEL, C1
        raise rejection("bad_note", "a note holds no control characters (newline and tab are fine)")


def rejection(code: str, message: str) -> OperatorRejection:
    if code not in REJECTION_CODES:
        raise ValueError(f"unlisted operator rejection code {code!r}")
    return OperatorRejection(code, message)


class DeviceReview(Protocol):
    """What a family brings to an operator decision on its parked Activities (the device side).
    Every method may raise a `TetherError` (an unreachable device), which refuses the decision
    with nothing recorded."""

    result_media_type: str
    guard_media_type: str

    def read(self, record: ActivityRecord, evidence: dict[str, Any]) -> dict[str, Any]:
        """A fresh read of the device the evidence is about."""
        ...

    def changed_since(self, evidence: dict[str, Any], fresh: dict[str, Any]) -> list[str]:
        """What changed since the evidence was taken (empty: nothing that matters)."""
        ...

    def refreshed(
        self, evidence: dict[str, Any], fresh: dict[str, Any], changes: list[str]
    ) -> dict[str, Any]:
        """The new evidence document for a changed device."""
        ...

    def done_result(
        self, record: ActivityRecord, fresh: dict[str, Any], verdict: dict[str, Any]
    ) -> dict[str, Any]:
        """The result document of a `done` verdict."""
        ...

    def prove(
        self, record: ActivityRecord, evidence: dict[str, Any], fresh: dict[str, Any]
    ) -> dict[str, Any]:
        """The adapter's proof that no earlier attempt can still act (a re-issue's guard)."""
        ...


def parse_key(text: str) -> ActivityKey:
    """`world_id/kind/activity_id` -> ActivityKey."""
    parts = text.split("/", 2)
    if len(parts) != 3 or not all(parts):
        raise rejection("bad_key", f"{text!r} is not world_id/kind/activity_id")
    return ActivityKey(parts[0], parts[1], parts[2])


def format_key(key: ActivityKey) -> str:
    return f"{key.world_id}/{key.kind}/{key.activity_id}"


def find(catalog: Catalog, text: str) -> ActivityRecord:
    """The Activity named by a key (`world/kind/id`) or by its provider operation id."""
    if text.count("/") >= 2:
        record = catalog.get(parse_key(text))
        if record is None:
            raise rejection("unknown_activity", f"no activity {text}")
        return record
    check_operation_id(text)  # an id that is no operation id names nothing
    for record in catalog.iter_awaiting_decision():
        if record.operation_id == text:
            return record
    raise rejection("unknown_activity", f"no parked activity with operation id {text!r}")


def evidence_document(artifacts: ArtifactStore, record: ActivityRecord) -> dict[str, Any] | None:
    """The evidence document the catalog's current revision references (verified by digest)."""
    if record.evidence is None:
        return None
    data = artifacts.get_bytes(record.evidence.evidence.ref, record.evidence.evidence.digest)
    try:
        doc = json.loads(data)
    except ValueError:
        return {"text": data.decode("utf-8", "replace")}
    return doc if isinstance(doc, dict) else {"document": doc}


def _now_ms() -> int:
    return int(time.time() * 1000)


def summary(record: ActivityRecord, evidence: Mapping[str, Any] | None) -> dict[str, Any]:
    """One parked Activity as `tether operator list` shows it."""
    recorded = record.evidence.recorded_at_ms if record.evidence else None
    return {
        "key": format_key(record.key),
        "kind": record.key.kind,
        "operation_id": record.operation_id,
        "awaiting_decision": record.awaiting_decision,
        "revision": record.evidence_revision,
        "reason": (evidence or {}).get("reason"),
        "evidence_age_ms": None if recorded is None else max(0, _now_ms() - recorded),
        # The host whose device the Activity is bound to (None: any host's), which decides it.
        "host": record.bound_host or None,
    }


def listing(
    catalog: Catalog, artifacts: ArtifactStore, *, kinds: list[str] | None = None
) -> list[dict[str, Any]]:
    """Every Activity awaiting a decision, of every family (or of `kinds`)."""
    out = []
    for record in catalog.iter_awaiting_decision(kinds=kinds):
        out.append(summary(record, _evidence_or_none(artifacts, record)))
    return out


def _evidence_or_none(artifacts: ArtifactStore, record: ActivityRecord) -> dict[str, Any] | None:
    try:
        return evidence_document(artifacts, record)
    except TetherError:
        return None


def show(catalog: Catalog, artifacts: ArtifactStore, text: str) -> dict[str, Any]:
    """The evidence document of one Activity, its revision and its age."""
    record = find(catalog, text)
    evidence = evidence_document(artifacts, record)
    doc = {**summary(record, evidence), "evidence": evidence}
    refusal = _refusal_or_none(artifacts, record)
    if refusal is not None:  # refused at admission: never parked, never run; say why
        doc["refusal"] = {
            "code": refusal.code,
            "reason": refusal.reason,
            "details": refusal.details,
        }
        doc["reason"] = f"refused at admission: {refusal.code}: {refusal.reason}"
    read_at = ((evidence or {}).get("read_back") or {}).get("read_at_ms")
    if not isinstance(read_at, int):
        read_at = ((evidence or {}).get("device_state") or {}).get("read_at_ms")
    doc["device_state_age_ms"] = max(0, _now_ms() - read_at) if isinstance(read_at, int) else None
    # Shown long after: whether it is still parked, and who decided it, on which revision.
    doc["state"] = state_of(record)
    made = record.decision
    if made is not None:
        doc["decision"] = {
            "decision": DECISION_WORDS.get(made.outcome, made.outcome),
            "operator": made.operator,
            "revision": made.evidence_revision,
            "decided_at_ms": made.decided_at_ms,
            "note": made.note,
        }
    return doc


def _refusal_or_none(artifacts: ArtifactStore, record: ActivityRecord) -> Refusal | None:
    if not record.refused_at_admission or record.result is None:
        return None
    try:
        return Refusal.from_document(artifacts.get(record.result))
    except TetherError:
        return None


def _put(artifacts: ArtifactStore, doc: Mapping[str, Any], media_type: str) -> ResultRef:
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return artifacts.put_bytes(data, media_type)


def _catalog_refusal(exc: CatalogRejection) -> OperatorRejection:
    """The catalog's refusal of a decision as the operator's, its code said once: the core's
    `stale_evidence_revision` (a revision written between this decision's check and its
    write, by another decision or a refreshed read-back) is `stale_revision`, and its
    `not_awaiting_decision` (another decision recorded first) is `not_parked`, as the same
    conditions found by the check are."""
    code = str(getattr(exc, "code", None) or "catalog_rejected")
    text = str(exc)
    if text.startswith(code):  # "code (field): message": the code is the rejection's own
        text = text.partition(": ")[2] or text
    if code == "stale_evidence_revision":
        code = "stale_revision"
    elif code == "not_awaiting_decision":  # decided (or ended) by another meanwhile
        code = "not_parked"
    return rejection(code, text)


def resolve(
    catalog: Catalog,
    artifacts: ArtifactStore,
    text: str,
    *,
    decision: str,
    revision: int,
    operator: str | None = None,
    credential: str | None,
    verify_credential: Callable[[str | None], str | None],
    note: str = "",
    review: Callable[[ActivityRecord], DeviceReview | None] = lambda record: None,
    host: str | None = None,
    before_abandon: Callable[[ActivityRecord], None] | None = None,
) -> dict[str, Any]:
    """Decide on a parked Activity: exactly one catalog `resolve` on the catalog's revision.

    `verify_credential` returns the name of the operator the credential belongs to (None, or a
    `CodedError`, refuses it); that name is the one recorded. `operator`, when given, must be
    that name. `host`: the host deciding (a daemon's `host_name`); an Activity bound to another
    host's device is refused (`bound_elsewhere`): that host's daemon reads its device."""
    try:
        who = verify_credential(credential)
    except CodedError as exc:
        reason = exc.code if exc.code in REJECTION_CODES else "credential_refused"
        raise rejection(reason, exc.message) from None
    if not isinstance(who, str) or not who.strip():
        raise rejection("credential_refused", "a valid operator credential is required")
    if operator is not None and operator != who:
        raise rejection(
            "operator_mismatch",
            f"the credential is not the one of operator {operator!r}: nothing was decided",
        )
    operator = who
    if decision not in DECISIONS:
        raise rejection("unknown_decision", f"decision must be one of {DECISIONS}")
    _check_note(note)
    record = find(catalog, text)
    key = record.key
    if host is not None and record.bound_host not in ("", host):
        raise rejection(
            "bound_elsewhere",
            f"{format_key(key)} is bound to host {record.bound_host!r}, not this one"
            f" ({host!r}): decide it through that host's daemon, which reads its device",
        )
    if not record.awaiting_decision:
        raise rejection("not_parked", f"{format_key(key)} awaits no decision")
    if revision != record.evidence_revision:
        raise rejection(
            "stale_revision",
            f"revision {revision} is not the current one ({record.evidence_revision})",
        )
    made = {"decision": decision, "revision": revision, "operator": operator, "note": note}
    if decision == "wait":
        return {**made, "key": format_key(key), "status": "awaiting_decision"}
    device = review(record)
    if device is None and decision != "abandon":
        raise rejection(
            "not_supported", f"{key.kind} has no device review: only abandon (or wait) applies"
        )
    try:
        if device is not None:
            evidence = evidence_document(artifacts, record) or {}
            fresh = device.read(record, evidence)
            crash_point("resolve.after_read")
            changes = device.changed_since(evidence, fresh)
            if changes:
                new = _put(
                    artifacts, device.refreshed(evidence, fresh, changes), EVIDENCE_MEDIA_TYPE
                )
                crash_point("resolve.after_evidence_document")
                refreshed = catalog.refresh_evidence(
                    key, revision, Evidence(ref=new.ref, digest=new.digest)
                )
                raise rejection(
                    "state_changed",
                    f"the device changed since revision {revision} ({'; '.join(changes)}); "
                    f"review revision {refreshed.evidence_revision}",
                )
        if decision == "abandon":
            if before_abandon is not None:
                # The provider's own say first (a remote move: cancelled there, or the abandon
                # refused while it may still run there); a refusal decides nothing.
                before_abandon(record)
            done = catalog.resolve(
                key, Decision.abandon(evidence_revision=revision, operator=operator, note=note)
            )
        elif decision == "done":
            assert device is not None
            verdict = {**made, "decided_at_ms": _now_ms()}
            ref = _put(
                artifacts, device.done_result(record, fresh, verdict), device.result_media_type
            )
            crash_point("resolve.after_document")
            done = catalog.resolve(
                key,
                Decision.recovered(ref, evidence_revision=revision, operator=operator, note=note),
            )
        else:
            assert device is not None
            proof = device.prove(record, evidence, fresh)
            crash_point("resolve.after_proof")
            ref = _put(artifacts, proof, device.guard_media_type)
            crash_point("resolve.after_document")
            guard = RetryGuard(ref=ref.ref, digest=ref.digest)
            done = catalog.resolve(
                key,
                Decision.absent(guard, evidence_revision=revision, operator=operator, note=note),
            )
        crash_point("resolve.after_decision")
    except CatalogRejection as exc:
        raise _catalog_refusal(exc) from exc
    except OperatorRejection:
        raise
    except TetherError as exc:
        code = getattr(exc, "code", None)
        details = getattr(exc, "details", {}) or {}
        code = details.get("device_code") or code
        if code in _DEVICE_CODES:
            raise rejection(str(code), getattr(exc, "message", str(exc))) from exc
        raise
    return {
        **made,
        "key": format_key(key),
        "status": "resolved",
        "decided_at_ms": done.decision.decided_at_ms if done.decision else None,
    }


def refresh_for_robot(
    catalog: Catalog,
    artifacts: ArtifactStore,
    robot: str,
    fresh: dict[str, Any],
    change: str,
    *,
    review: Callable[[ActivityRecord], DeviceReview | None],
    only: ActivityKey | None = None,
    if_changed: bool = False,
) -> list[dict[str, Any]]:
    """After an operator's act on a device (a reboot): a new evidence revision, through the
    core's `refresh_evidence`, for every parked Activity whose evidence is about `robot`
    (`only` that one: a planner's read-back of its own operation, which must not move the
    revision another principal's operator is deciding on). With `if_changed` (a read-back
    that is no act: a planner's `Reconcile`), only where the device changed since the
    evidence (the review's `changed_since`): a planner polling it never makes the revision an
    operator is deciding on stale while nothing changed."""
    out: list[dict[str, Any]] = []
    for record in catalog.iter_awaiting_decision():
        if only is not None and record.key != only:
            continue
        device = review(record)
        if device is None:
            continue
        evidence = evidence_document(artifacts, record) or {}
        if ((evidence.get("command") or {}).get("robot") or evidence.get("robot")) != robot:
            continue
        changed = device.changed_since(evidence, fresh)
        if if_changed and not changed:
            continue
        changes = [change, *changed]
        new = _put(artifacts, device.refreshed(evidence, fresh, changes), EVIDENCE_MEDIA_TYPE)
        refreshed = catalog.refresh_evidence(
            record.key, record.evidence_revision, Evidence(ref=new.ref, digest=new.digest)
        )
        out.append(
            {
                "key": format_key(record.key),
                "revision": refreshed.evidence_revision,
                "changes": changes,
            }
        )
    return out
