"""What the daemon answers about an Activity: its record's state in words, read from the catalog
(the one control record) and the documents it references.

States: `pending` (admitted, no live attempt), `running` (an attempt holds a lease),
`awaiting_decision` (parked for an operator), `done` (a result), `failed` (a failed result:
refused or abandoned), also once retention compacted the record (`compacted`: its result
dropped, whether it failed kept); `settled` says whether a later tick observed it. A view is
`final` once settled or parked: a watch ends there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from tether.activities import (
    ABANDONED_MEDIA_TYPE,
    ActivityKey,
    ActivityRecord,
    OperatorDecision,
)
from tether.errors import TetherError
from tether.runtime import ArtifactStore, Family, Host
from tether.runtime._errors import owned_by

STATES = ("pending", "running", "awaiting_decision", "done", "failed")
#: The largest result document a view reads to say its outcome (a JSON one only).
VIEW_DOC_MAX_BYTES = 1 << 20


def key_text(key: ActivityKey) -> str:
    return f"{key.world_id}/{key.kind}/{key.activity_id}"


def _doc(artifacts: ArtifactStore, ref: str, digest: str) -> dict[str, Any]:
    try:
        doc = json.loads(artifacts.get_bytes(ref, digest))
    except (TetherError, ValueError, OSError):
        return {}
    return doc if isinstance(doc, dict) else {}


def abandoned_words(decision: OperatorDecision) -> str:
    """What an operator's abandon of an Activity says of it: by whom, on which evidence
    revision, with the operator's note."""
    note = f": {decision.note}" if decision.note else ""
    return (
        f"abandoned by operator {decision.operator} on evidence revision"
        f" {decision.evidence_revision}{note}"
    )


def state_of(record: ActivityRecord) -> str:
    if record.result is not None or record.compacted:  # compaction keeps whether it failed
        return "failed" if record.result_failed else "done"
    if record.awaiting_decision:
        return "awaiting_decision"
    if record.attempt is not None:
        return "running"
    return "pending"


def view(
    key: ActivityKey,
    record: ActivityRecord | None,
    artifacts: ArtifactStore,
    progress: dict[str, Any] | None,
) -> dict[str, Any]:
    """One Activity's record in words (see the module doc), with its latest progress."""
    doc: dict[str, Any] = {
        "key": key_text(key),
        "world": key.world_id,
        "kind": key.kind,
        "activity": key.activity_id,
    }
    if record is None:
        return {**doc, "state": "unknown", "attempts": 0, "settled": False, "final": False}
    state = state_of(record)
    settled = record.settlement is not None
    doc.update(
        state=state,
        settled=settled,
        final=settled or state == "awaiting_decision",
        attempts=record.attempt_count,
        operation_id=record.operation_id,
        revision=record.evidence_revision,
        progress=progress,
    )
    if record.compacted:  # retention dropped its result and evidence (`tether db prune`)
        doc["compacted"] = True
    if record.result is not None:
        ref = record.result
        # Read only a small JSON document: a sim reach's result is a zip of its trajectories
        # (hundreds of MB), which every `get` and `watch` read whole into the daemon only to
        # find it was no JSON.
        small = ref.size <= VIEW_DOC_MAX_BYTES and (
            ref.media_type == "application/json" or ref.media_type.endswith("+json")
        )
        result = _doc(artifacts, ref.ref, ref.digest) if small else {}
        doc["result_ref"] = {
            "ref": ref.ref,
            "digest": ref.digest,
            "media_type": ref.media_type,
            "size": ref.size,
            "failed": ref.failed,
        }
        decision = record.decision
        if record.result.media_type == ABANDONED_MEDIA_TYPE and decision is not None:
            # Its reference names the operator's decision, not a document: said as one.
            words = abandoned_words(decision)
            result = {"outcome": "abandoned", "code": "abandoned", "error": words}
        doc["result"] = {k: result.get(k) for k in ("outcome", "code", "error") if k in result}
    if record.awaiting_decision and record.evidence is not None:
        evidence = _doc(artifacts, record.evidence.evidence.ref, record.evidence.evidence.digest)
        doc["reason"] = evidence.get("reason")
    return doc


def unsettled(host: Host, families: Sequence[Family]) -> Iterator[ActivityRecord]:
    """The admitted, unsettled Activities: each world's unobserved intents (each family's
    projection) that the catalog holds unsettled; of this host's worlds only, on a world
    ledger hosts share (`owned_by`)."""
    owner = host.ticker.owner
    seen: set[ActivityKey] = set()
    for world in host.ledger.worlds():
        if not owned_by(world, owner):
            continue
        try:
            snapshot = host.snapshot(world)
        except TetherError:
            continue
        for family in families:
            for request in family.project(snapshot):
                key = ActivityKey(world, request.kind, request.activity_id)
                if key in seen:
                    continue
                seen.add(key)
                record = host.get(key)
                if record is not None and record.settlement is None:
                    yield record


def counts(host: Host, families: Sequence[Family]) -> dict[str, int]:
    """Activities by state: the unsettled ones (`unsettled`), the settled ones from the
    catalog; of this host's worlds only, on a world ledger hosts share (`owned_by`)."""
    owner = host.ticker.owner
    out = dict.fromkeys((*STATES, "settled"), 0)
    for record in unsettled(host, families):
        out[state_of(record)] += 1
    for record in host.catalog.iter_compactable(0):
        out["settled"] += owned_by(record.key.world_id, owner)
    return out


def restored(record: ActivityRecord, artifacts: ArtifactStore) -> dict[str, Any]:
    """An unsettled Activity's live content as its record says it, for a stream that starts
    after its last report (a daemon restarted): its state in this module's words, its attempt
    and, parked, its reason; `restored` marks it read from the catalog, not reported."""
    content: dict[str, Any] = {
        "state": state_of(record),
        "attempt": record.attempt_count,
        "restored": True,
    }
    if record.awaiting_decision and record.evidence is not None:
        evidence = _doc(artifacts, record.evidence.evidence.ref, record.evidence.evidence.digest)
        content["reason"] = evidence.get("reason")
        content["revision"] = record.evidence_revision
    return content


__all__ = ["STATES", "counts", "key_text", "restored", "state_of", "unsettled", "view"]
