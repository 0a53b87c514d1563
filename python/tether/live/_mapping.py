"""How Tether's Activities appear in the live-event contract: pure functions of catalog records.

The mapping (seed 002 vocabulary on the left, seed 003 on the right):

- ``agentSessionId`` is the world id.
- ``turnId`` is the source tick's receipt: ``receipt:<world>/<run>/<tick>/<token>``, each part
  percent-encoded (``urllib.parse.quote(part, safe="")``) so ``/`` and ``:`` in ids cannot
  collide; `parse_turn_id` reads it back.
- ``messageId`` is ``toolcall:<world>/<kind>/<activity id>`` (same encoding), ``kind``
  ``tool_call``, ``role`` ``tool``. The message's ``payload`` holds ``activity`` (world, kind,
  id), ``attempts``, ``operationId`` and ``result`` once they exist, and ``output.text`` (the
  device trace); ``status`` is ``pending`` (admitted), ``running`` (an attempt holds it),
  ``waiting`` (parked for an operator), ``settling`` (result recorded, not yet observed), then
  ``completed`` or ``failed`` (settled; ``failed`` when the result is a failed one) with
  ``completedAtUnixMs`` the settlement time.
- A parked Activity (awaiting an operator decision on evidence revision N) is an
  ``interaction`` of kind ``approval``, status ``pending``, request id
  ``approval:<world>/<kind>/<activity id>/<N>``; once decided it is ``answered`` and its
  ``output`` holds the decision. Fresh evidence (a re-read: revision N+1, awaiting a decision)
  makes the request of N ``superseded`` (a decision naming N is refused), as a later park or
  an unattended recovery does: every revision but the decided one and the awaited one, the
  latest `SUPERSEDED_SHOWN` of them, also once the Activity was decided (`interactions_for`).
- The turn settles when every Activity its receipt admitted has settled: ``phase`` is
  ``settled``, ``outcome`` ``completed`` (or ``failed`` when a result failed, with an error
  naming the failed messages), ``activeTurnId`` null. Before that the phase is ``waiting``
  (an Activity is parked), ``settling`` (every Activity has a result), ``running`` (one is
  claimed) or ``submitted``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote

from tether.activities import DECISION_WORDS, ActivityKey, ActivityRecord, Receipt

TOOL_ROLE = "tool"
TOOL_CALL_KIND = "tool_call"
TURN_PREFIX = "receipt:"
MESSAGE_PREFIX = "toolcall:"
APPROVAL_PREFIX = "approval:"
#: At most this many superseded approvals of one Activity are kept in its interactions (the
#: latest ones; each is a re-read an operator asked for, or a park, that a later one replaced).
SUPERSEDED_SHOWN = 32


def _join(prefix: str, parts: Iterable[str]) -> str:
    return prefix + "/".join(quote(p, safe="") for p in parts)


def _split(prefix: str, text: str, n: int) -> list[str]:
    if not text.startswith(prefix):
        raise ValueError(f"{text!r} does not start with {prefix!r}")
    parts = text[len(prefix) :].split("/")
    if len(parts) != n or any(p == "" for p in parts):
        raise ValueError(f"{text!r} does not have {n} non-empty parts")
    return [unquote(p) for p in parts]


def agent_session_id_for(world_id: str) -> str:
    """The agent session of a world: the world id itself."""
    return world_id


#: Ids are pure functions of immutable keys, asked for on every sync of every record: the
#: recent ones are kept (percent-encoding them is most of a sync's cost otherwise).
_IDS_CACHED = 1 << 14


@functools.lru_cache(maxsize=_IDS_CACHED)
def turn_id_for(receipt: Receipt) -> str:
    """The turn of a source tick: its receipt as ``receipt:<world>/<run>/<tick>/<token>``."""
    return _join(
        TURN_PREFIX,
        (receipt.world_id, receipt.run_id, str(receipt.tick), receipt.visibility_token),
    )


def parse_turn_id(turn_id: str) -> Receipt:
    """The receipt a turn id names (ValueError when it is not one)."""
    world, run, tick, token = _split(TURN_PREFIX, turn_id, 4)
    if not tick.isdigit():
        raise ValueError(f"{turn_id!r}: tick {tick!r} is not a number")
    return Receipt(world, run, int(tick), token)


@functools.lru_cache(maxsize=_IDS_CACHED)
def message_id_for(key: ActivityKey) -> str:
    """The tool-call message of an Activity: ``toolcall:<world>/<kind>/<activity id>``."""
    return _join(MESSAGE_PREFIX, (key.world_id, key.kind, key.activity_id))


def parse_message_id(message_id: str) -> ActivityKey:
    """The Activity key a message id names (ValueError when it is not one)."""
    world, kind, activity_id = _split(MESSAGE_PREFIX, message_id, 3)
    return ActivityKey(world, kind, activity_id)


def request_id_for(key: ActivityKey, evidence_revision: int) -> str:
    """The approval request for one parked evidence revision of an Activity."""
    return _join(APPROVAL_PREFIX, (key.world_id, key.kind, key.activity_id, str(evidence_revision)))


def tool_call_status(record: ActivityRecord) -> str:
    """The message status of an Activity (see the module docstring)."""
    if record.settlement is not None:
        return "failed" if record.result_failed else "completed"
    if record.result is not None:
        return "settling"
    if record.awaiting_decision:
        return "waiting"
    if record.attempt is not None:
        return "running"
    return "pending"


def tool_call_payload(record: ActivityRecord) -> dict[str, Any]:
    """The message payload of an Activity, without ``output`` (the trace is not a catalog fact)."""
    k = record.key
    payload: dict[str, Any] = {
        "activity": {"worldId": k.world_id, "kind": k.kind, "activityId": k.activity_id},
        "attempts": record.attempt_count,
    }
    if record.operation_id is not None:
        payload["operationId"] = record.operation_id
    if record.result is not None:
        r = record.result
        payload["result"] = {
            "ref": r.ref,
            "digest": r.digest,
            "mediaType": r.media_type,
            "size": r.size,
            "failed": r.failed,
        }
    return payload


def tool_call_message(record: ActivityRecord, *, output_text: str | None = None) -> dict[str, Any]:
    """The canonical record entry of an Activity's tool-call message."""
    payload = tool_call_payload(record)
    if output_text is not None:
        payload["output"] = {"text": output_text}
    message: dict[str, Any] = {
        "turnId": turn_id_for(record.source),
        "role": TOOL_ROLE,
        "kind": TOOL_CALL_KIND,
        "payload": payload,
        "status": tool_call_status(record),
        "startedAtUnixMs": record.admitted_at_ms,
    }
    if record.settlement is not None:
        message["completedAtUnixMs"] = record.settlement.settled_at_ms
    return message


def tool_call_delta(
    record: ActivityRecord,
    *,
    workspace_id: str,
    now_ms: int,
    previous: ActivityRecord | None = None,
) -> dict[str, Any]:
    """The message_delta that brings a GUI from ``previous``'s message to ``record``'s."""
    payload = tool_call_payload(record)
    data: dict[str, Any] = {
        "workspaceId": workspace_id,
        "agentSessionId": agent_session_id_for(record.key.world_id),
        "messageId": message_id_for(record.key),
        "turnId": turn_id_for(record.source),
        "role": TOOL_ROLE,
        "kind": TOOL_CALL_KIND,
        "occurredAtUnixMs": now_ms,
        "payloadSet": payload,
        "status": tool_call_status(record),
        "startedAtUnixMs": record.admitted_at_ms,
    }
    if previous is not None:
        gone = sorted(set(tool_call_payload(previous)) - set(payload))
        if gone:
            data["payloadUnset"] = gone
    if record.settlement is not None:
        data["completedAtUnixMs"] = record.settlement.settled_at_ms
    return _envelope("message_delta", workspace_id, record.key.world_id, data)


def _envelope(
    event_type: str, workspace_id: str, world_id: str, data: dict[str, Any]
) -> dict[str, Any]:
    return {
        "workspaceId": workspace_id,
        "agentSessionId": agent_session_id_for(world_id),
        "eventType": event_type,
        "data": data,
    }


def interactions_for(record: ActivityRecord) -> list[dict[str, Any]]:
    """The approval interactions of an Activity, one per evidence revision it awaited (every
    revision is made by a park or a re-read, both awaiting a decision): the latest
    `SUPERSEDED_SHOWN` + 1 of them, and the decided one. The decided revision is
    ``answered``; the one it awaits now, undecided, is ``pending``; every other one is
    ``superseded``: no longer awaited (fresher evidence replaced it, a later park did, or it
    recovered unattended), so a decision naming it is refused. An interaction once shown
    stays, ``answered`` or ``superseded`` (terminal statuses), in every later version of the
    record, so the canonical record holds each one the stream published. Only the latest
    decision is kept: an earlier decided revision is ``superseded`` once a later one is
    decided. A compacted record shows none (retention dropped its decision and evidence)."""
    k = record.key
    top = record.evidence_revision
    if record.compacted or top < 1:
        return []
    base = {
        "agentSessionId": agent_session_id_for(k.world_id),
        "turnId": turn_id_for(record.source),
        "kind": "approval",
        "toolName": k.kind,
        "metadata": {"messageId": message_id_for(k)},
    }
    parked_at = record.evidence.recorded_at_ms if record.evidence else record.admitted_at_ms
    d = record.decision
    decided = None if d is None else d.evidence_revision
    out: list[dict[str, Any]] = []
    first = max(1, top - SUPERSEDED_SHOWN)
    shown = list(range(first, top + 1))
    if decided is not None and 1 <= decided < first:  # the decision is always shown
        shown.insert(0, decided)
    for revision in shown:
        if d is not None and revision == decided:
            out.append(
                {
                    **base,
                    "requestId": request_id_for(k, revision),
                    "status": "answered",
                    "input": {"activityId": k.activity_id, "evidenceRevision": revision},
                    "output": {
                        "outcome": d.outcome,
                        "decision": DECISION_WORDS.get(d.outcome, d.outcome),
                        "operator": d.operator,
                        "note": d.note,
                    },
                    "createdAtUnixMs": min(parked_at, d.decided_at_ms),
                    "updatedAtUnixMs": d.decided_at_ms,
                }
            )
        elif revision == top and record.awaiting_decision:
            evidence = record.evidence
            out.append(
                {
                    **base,
                    "requestId": request_id_for(k, revision),
                    "status": "pending",
                    "input": {
                        "activityId": k.activity_id,
                        "evidenceRevision": revision,
                        "evidenceRef": None if evidence is None else evidence.evidence.ref,
                    },
                    "output": None,
                    "createdAtUnixMs": parked_at,
                    "updatedAtUnixMs": parked_at,
                }
            )
        else:
            out.append(
                {
                    **base,
                    "requestId": request_id_for(k, revision),
                    "status": "superseded",
                    "input": {"activityId": k.activity_id, "evidenceRevision": revision},
                    "output": None,
                    "createdAtUnixMs": min(record.admitted_at_ms, parked_at),
                    "updatedAtUnixMs": parked_at,
                }
            )
    return out


def interaction_updates(
    record: ActivityRecord, *, workspace_id: str, now_ms: int
) -> list[dict[str, Any]]:
    """One interaction_update event per interaction of `interactions_for`."""
    return [
        _envelope(
            "interaction_update",
            workspace_id,
            record.key.world_id,
            {
                "workspaceId": workspace_id,
                "agentSessionId": agent_session_id_for(record.key.world_id),
                "eventType": "interaction_update",
                "occurredAtUnixMs": now_ms,
                "interaction": x,
            },
        )
        for x in interactions_for(record)
    ]


def _times(r: ActivityRecord) -> list[int]:
    times = [r.admitted_at_ms]
    for t in (
        r.operation_bound_at_ms,
        r.recorded_result.recorded_at_ms if r.recorded_result else None,
        r.evidence.recorded_at_ms if r.evidence else None,
        r.decision.decided_at_ms if r.decision else None,
        r.settlement.settled_at_ms if r.settlement else None,
    ):
        if t is not None:
            times.append(t)
    return times


def turn_for(receipt: Receipt, records: Iterable[ActivityRecord]) -> dict[str, Any]:
    """The turn object of a source tick, from every Activity that tick admitted."""
    recs = list(records)
    if not recs:
        raise ValueError("a turn needs at least one admitted Activity")
    for r in recs:
        if r.source != receipt:
            raise ValueError(f"{r.key} was not admitted by {receipt}")
    settled = not any(r.unsettled for r in recs)
    failed = [message_id_for(r.key) for r in recs if r.result_failed]
    if settled:
        phase = "settled"
    elif any(r.awaiting_decision for r in recs):
        phase = "waiting"
    elif all(r.result is not None for r in recs):
        phase = "settling"
    elif any(r.attempt is not None or r.attempt_count > 0 for r in recs):
        phase = "running"
    else:
        phase = "submitted"
    error = None
    if settled and failed:
        error = {
            "message": f"{len(failed)} of {len(recs)} activities failed",
            "code": "activity_failed",
            "detail": {"failed": failed},
        }
    return {
        "turnId": turn_id_for(receipt),
        "agentSessionId": agent_session_id_for(receipt.world_id),
        "phase": phase,
        "outcome": ("failed" if failed else "completed") if settled else None,
        "error": error,
        "startedAtUnixMs": min(r.admitted_at_ms for r in recs),
        "settledAtUnixMs": (
            max(r.settlement.settled_at_ms for r in recs if r.settlement) if settled else None
        ),
        "updatedAtUnixMs": max(t for r in recs for t in _times(r)),
    }


def turn_update(
    receipt: Receipt, records: Iterable[ActivityRecord], *, workspace_id: str, now_ms: int
) -> dict[str, Any]:
    """The turn_update event of a source tick."""
    turn = turn_for(receipt, records)
    return _envelope(
        "turn_update",
        workspace_id,
        receipt.world_id,
        {
            "workspaceId": workspace_id,
            "agentSessionId": agent_session_id_for(receipt.world_id),
            "eventType": "turn_update",
            "occurredAtUnixMs": now_ms,
            "activeTurnId": None if turn["phase"] == "settled" else turn["turnId"],
            "turn": turn,
        },
    )


def runtime_state(records: Iterable[ActivityRecord]) -> str:
    """``running`` while any Activity of the world is unsettled, else ``idle``."""
    return "running" if any(r.unsettled for r in records) else "idle"


def runtime_update(
    world_id: str, records: Iterable[ActivityRecord], *, workspace_id: str, now_ms: int
) -> dict[str, Any]:
    """The runtime_activity_update event of a world."""
    return _envelope(
        "runtime_activity_update",
        workspace_id,
        world_id,
        {
            "workspaceId": workspace_id,
            "agentSessionId": agent_session_id_for(world_id),
            "eventType": "runtime_activity_update",
            "state": runtime_state(records),
            "occurredAtUnixMs": now_ms,
        },
    )


def session_record(
    workspace_id: str,
    world_id: str,
    records: Iterable[ActivityRecord],
    *,
    outputs: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The canonical record of a world's session (the form `LiveOverlay.reconcile` reads).

    ``outputs`` maps message ids to their trace text (read from the operations journal).
    """
    recs = list(records)
    outputs = outputs or {}
    by_receipt: dict[Receipt, list[ActivityRecord]] = {}
    for r in recs:
        if r.key.world_id != world_id:
            raise ValueError(f"{r.key} is not in world {world_id!r}")
        by_receipt.setdefault(r.source, []).append(r)
    messages = {
        message_id_for(r.key): tool_call_message(r, output_text=outputs.get(message_id_for(r.key)))
        for r in recs
    }
    interactions = {x["requestId"]: x for r in recs for x in interactions_for(r)}
    turns = {turn_id_for(rc): turn_for(rc, rs) for rc, rs in by_receipt.items()}
    return {
        "workspaceId": workspace_id,
        "agentSessionId": agent_session_id_for(world_id),
        "runtime": {"state": runtime_state(recs)},
        "turns": turns,
        "messages": messages,
        "interactions": interactions,
        "audits": {},
    }
