"""Differential test: Python `jsonschema` (draft 2020-12, over the seed's schema and Tether's
definitions) and Tether's validator judge generated valid and mutated events.

They must agree on every rule the schema expresses: whatever `jsonschema` refuses Tether
refuses, and a refusal under a schema code is one `jsonschema` makes too. Where `jsonschema`
accepts and Tether refuses, the code is one of the rules no schema can state.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tether.live import SCHEMA_CODES, TETHER_ONLY_CODES, LiveEventInvalid, validate_live_event

from tests.live.conftest import reference_validator

REFERENCE = reference_validator()
WS, SESSION = "ws", "world-1"

ids = st.text(min_size=1, max_size=6)
texts = st.text(max_size=8)
ms = st.integers(1, 2**53 - 1)
ms0 = st.integers(0, 2**53 - 1)
scalars = st.none() | st.booleans() | st.integers(-(2**60), 2**60) | texts
scalars = scalars | st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
objects = st.dictionaries(texts, json_values, max_size=3)


def _env(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"workspaceId": WS, "agentSessionId": SESSION, "eventType": event_type, "data": data}


def _base(event_type: str) -> dict[str, Any]:
    return {"workspaceId": WS, "agentSessionId": SESSION, "eventType": event_type}


@st.composite
def message_deltas(draw: st.DrawFn) -> dict[str, Any]:
    optional = {
        "content": st.one_of(
            st.fixed_dictionaries({"operation": st.just("append_text"), "text": texts}),
            st.fixed_dictionaries({"operation": st.just("set"), "value": json_values}),
        ),
        "toolOutput": st.one_of(
            st.fixed_dictionaries({"operation": st.just("set"), "text": texts}),
            st.fixed_dictionaries(
                {
                    "operation": st.just("append_text"),
                    "text": st.text(min_size=1, max_size=8),
                    "offsetBytes": ms0,
                }
            ),
        ),
        "payloadSet": st.dictionaries(ids, json_values, min_size=1, max_size=3),
        "payloadUnset": st.lists(ids, min_size=1, max_size=3, unique=True),
        "status": texts,
        "semantics": objects,
        "startedAtUnixMs": ms0,
        "completedAtUnixMs": ms0,
    }
    chosen = draw(st.lists(st.sampled_from(sorted(optional)), min_size=1, unique=True))
    data: dict[str, Any] = {
        "workspaceId": WS,
        "agentSessionId": SESSION,
        "messageId": draw(ids),
        "turnId": draw(ids),
        "role": draw(ids),
        "kind": "tool_call" if "toolOutput" in chosen else draw(ids),
        "occurredAtUnixMs": draw(ms),
    }
    for k in chosen:
        data[k] = draw(optional[k])
    return _env("message_delta", data)


@st.composite
def turns(draw: st.DrawFn) -> dict[str, Any]:
    phase = draw(st.sampled_from(["submitted", "running", "waiting", "settling", "settled"]))
    settled = phase == "settled"
    started = draw(st.integers(0, 10**12))
    settled_at = started + draw(st.integers(0, 10**6)) if settled else None
    updated = (settled_at or started) + draw(st.integers(0, 10**6))
    outcome = draw(st.sampled_from(["completed", "failed", "canceled", "interrupted"]))
    error = None
    if settled and outcome != "completed" and draw(st.booleans()):
        error = {"message": draw(ids), "detail": draw(json_values)}
        if draw(st.booleans()):
            error["code"] = draw(ids)
    turn_id = draw(ids)
    return _env(
        "turn_update",
        {
            **_base("turn_update"),
            "occurredAtUnixMs": draw(ms),
            "activeTurnId": None if settled else turn_id,
            "turn": {
                "turnId": turn_id,
                "agentSessionId": SESSION,
                "phase": phase,
                "outcome": outcome if settled else None,
                "error": error,
                "startedAtUnixMs": started,
                "settledAtUnixMs": settled_at,
                "updatedAtUnixMs": updated,
            },
        },
    )


interactions = st.fixed_dictionaries(
    {
        "requestId": ids,
        "agentSessionId": st.just(SESSION),
        "turnId": ids,
        "kind": st.sampled_from(["approval", "question", "plan"]),
        "status": st.sampled_from(["pending", "answered", "superseded"]),
        "toolName": st.none() | texts,
        "input": st.none() | objects,
        "output": st.none() | objects,
        "metadata": st.none() | objects,
        "createdAtUnixMs": ms0,
        "updatedAtUnixMs": ms0,
    }
)


@st.composite
def others(draw: st.DrawFn) -> dict[str, Any]:
    which = draw(st.sampled_from(["interaction", "snapshot", "runtime", "audit"]))
    if which == "interaction":
        data = {**_base("interaction_update"), "occurredAtUnixMs": draw(ms)}
        data["interaction"] = draw(interactions)
        return _env("interaction_update", data)
    if which == "snapshot":
        data = {**_base("interaction_snapshot"), "occurredAtUnixMs": draw(ms0)}
        data["rootTurnId"] = draw(ids)
        data["interactions"] = draw(st.lists(interactions, max_size=3))
        return _env("interaction_snapshot", data)
    if which == "runtime":
        data = {**_base("runtime_activity_update"), "occurredAtUnixMs": draw(ms)}
        data["state"] = draw(st.sampled_from(["idle", "running"]))
        return _env("runtime_activity_update", data)
    audit = {
        "auditId": draw(ids),
        "role": draw(ids),
        "payload": draw(objects),
        "version": draw(st.integers(1, 2**53 - 1)),
    }
    data = {**_base("session_audit"), "occurredAtUnixMs": draw(ms), "audit": audit}
    return _env("session_audit", data)


valid_events = st.one_of(message_deltas(), turns(), others())

# Values that break a member's type, bounds or closed vocabulary.
breaking = st.sampled_from(
    [None, True, 0, -1, 1.5, 2**53, "", "x", [], [1], {}, {"": 1}, "settled", "tool_call"]
)


def _nodes(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _nodes(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _nodes(v, (*path, i))
    return out


def _get(node: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        node = node[p]
    return node


@st.composite
def mutated_events(draw: st.DrawFn) -> dict[str, Any]:
    event = copy.deepcopy(draw(valid_events))
    for _ in range(draw(st.integers(1, 2))):
        paths = _nodes(event)
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["replace", "delete", "add", "copy_identity", "strip"]))
        if not path and kind != "add":
            event = copy.deepcopy(draw(breaking))  # a strategy may hand out one object twice
            return event  # type: ignore[no-any-return]
        parent = _get(event, path[:-1]) if path else None
        if kind == "replace" and parent is not None:
            parent[path[-1]] = copy.deepcopy(draw(breaking | json_values))  # never a cycle
        elif kind == "delete" and parent is not None:
            del parent[path[-1]]
        elif kind == "add":
            target = _get(event, path)
            if isinstance(target, dict):
                key = draw(st.sampled_from(["extra", "toolOutput", "status", "x"]))
                target[key] = copy.deepcopy(draw(json_values))
        elif kind == "copy_identity" and isinstance(event, dict):
            data = event.get("data")
            if isinstance(data, dict):
                data[draw(st.sampled_from(["workspaceId", "agentSessionId", "kind"]))] = draw(ids)
        elif kind == "strip" and isinstance(event, dict):
            data = event.get("data")
            if isinstance(data, dict):
                for k in ("content", "toolOutput", "payloadSet", "status", "activeTurnId"):
                    data.pop(k, None)
    return event


def _verdicts(event: Any) -> tuple[bool, str | None]:
    reference_ok = REFERENCE.is_valid(event)
    try:
        validate_live_event(json.dumps(event, ensure_ascii=False, allow_nan=False).encode())
    except LiveEventInvalid as e:
        assert e.code is not None
        return reference_ok, e.code
    return reference_ok, None


def _agree(event: Any) -> str:
    reference_ok, code = _verdicts(event)
    if not reference_ok:
        assert code is not None, f"jsonschema refuses, Tether accepts: {event!r}"
        return "both_refuse"
    if code is None:
        return "both_accept"
    assert code in TETHER_ONLY_CODES, f"Tether refuses {code} where jsonschema accepts: {event!r}"
    return "tether_only"


@given(valid_events)
def test_generated_valid_events_pass_both(event: dict[str, Any]) -> None:
    assert _verdicts(event) == (True, None)


@given(mutated_events())
def test_mutated_events_get_the_same_verdict(event: Any) -> None:
    reference_ok, code = _verdicts(event)
    _agree(event)
    if code in SCHEMA_CODES:
        assert not reference_ok


@settings(max_examples=600, database=None, derandomize=True)
@given(mutated_events())
def test_mutations_exercise_both_sides(event: Any) -> None:
    VERDICTS[_agree(event)] += 1


VERDICTS: Counter[str] = Counter()


def test_the_mutation_mix_is_not_degenerate() -> None:
    # Runs after test_mutations_exercise_both_sides in file order; alone it runs that first.
    if not VERDICTS:
        test_mutations_exercise_both_sides()
    assert VERDICTS["both_refuse"] > 100
    assert VERDICTS["both_accept"] > 10
    assert VERDICTS["tether_only"] > 5
