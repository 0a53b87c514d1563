"""Every rule of the live-event contract, each with a test of its rejection: the code, the JSON
path, and what the reference validator (Python `jsonschema`) says about the same event."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema
import pytest
from tether.errors import LiveEventError, LiveEventInvalid, TetherError
from tether.live import SCHEMA_CODES, TETHER_ONLY_CODES, live_error_codes, validate_live_event

from tests.live.conftest import (
    audit,
    delta,
    encode,
    interaction,
    interaction_update,
    runtime,
    snapshot_event,
    turn,
)

APPEND = {"operation": "append_text", "text": "é", "offsetBytes": 2}


def at(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `obj` with `path` (RFC 6901) set to `value`; `...` deletes it."""
    out = copy.deepcopy(obj)
    *parents, last = path.strip("/").split("/")
    node: Any = out
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if value is ...:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


VALID = [
    delta(toolOutput=APPEND),
    delta(kind="text", content={"operation": "set", "value": {"any": [1, None]}}),
    delta(kind="text", role="assistant", content={"operation": "append_text", "text": ""}),
    delta(payloadSet={"a": 1}, payloadUnset=["b"], status="running", semantics={}),
    delta(startedAtUnixMs=0, completedAtUnixMs=0),
    delta(toolOutput={"operation": "set", "text": ""}, occurredAtUnixMs=1.0),
    turn(),
    turn("settled"),
    turn(
        "settled",
        outcome="failed",
        error={"message": "1 of 1 failed", "code": "activity_failed", "detail": None},
    ),
    interaction_update(),
    interaction_update(status="answered", output={"outcome": "recovered"}, toolName=None),
    snapshot_event(interaction(), interaction(requestId="r2", kind="plan")),
    snapshot_event(),
    runtime(),
    runtime("idle"),
    audit(),
]


@pytest.mark.parametrize("event", VALID, ids=lambda e: e["eventType"])
def test_valid_events_pass_both_validators(
    event: dict[str, Any], reference: jsonschema.Draft202012Validator
) -> None:
    assert reference.is_valid(event)
    parsed = validate_live_event(encode(event))
    assert parsed.event_type == event["eventType"]
    assert validate_live_event(parsed.to_json()) == parsed


D = delta(toolOutput=APPEND)
T = turn()
S = turn("settled")
X = interaction_update()

# (event, code, path): rules the schema expresses; `jsonschema` must reject each too.
SCHEMA_RULES: list[tuple[Any, str, str]] = [
    ([], "wrong_type", ""),
    (at(D, "/eventType", ...), "missing_field", "/eventType"),
    (at(D, "/eventType", "message_update"), "unknown_event_type", "/eventType"),
    (at(D, "/eventType", 3), "unknown_event_type", "/eventType"),
    (at(D, "/data", ...), "missing_field", "/data"),
    (at(D, "/extra", 1), "unknown_field", "/extra"),
    (at(D, "/workspaceId", ""), "empty_string", "/workspaceId"),
    (at(D, "/agentSessionId", 7), "wrong_type", "/agentSessionId"),
    (at(D, "/data", []), "wrong_type", "/data"),
    (at(D, "/data/messageId", ...), "missing_field", "/data/messageId"),
    (at(D, "/data/extra", True), "unknown_field", "/data/extra"),
    (at(D, "/data/eventType", "message_delta"), "unknown_field", "/data/eventType"),
    (at(D, "/data/turnId", ""), "empty_string", "/data/turnId"),
    (at(D, "/data/role", None), "wrong_type", "/data/role"),
    (at(D, "/data/occurredAtUnixMs", 0), "below_minimum", "/data/occurredAtUnixMs"),
    (at(D, "/data/occurredAtUnixMs", -(2**70)), "below_minimum", "/data/occurredAtUnixMs"),
    (at(D, "/data/occurredAtUnixMs", 1.5), "wrong_type", "/data/occurredAtUnixMs"),
    (at(D, "/data/occurredAtUnixMs", True), "wrong_type", "/data/occurredAtUnixMs"),
    (at(D, "/data/occurredAtUnixMs", "5"), "wrong_type", "/data/occurredAtUnixMs"),
    (at(D, "/data/toolOutput", ...), "no_change", "/data"),
    (at(D, "/data/toolOutput", "x"), "wrong_type", "/data/toolOutput"),
    (
        at(D, "/data/toolOutput/operation", "patch"),
        "unknown_operation",
        "/data/toolOutput/operation",
    ),
    (at(D, "/data/toolOutput/operation", ...), "missing_field", "/data/toolOutput/operation"),
    (at(D, "/data/toolOutput/text", ""), "empty_string", "/data/toolOutput/text"),
    (at(D, "/data/toolOutput/offsetBytes", ...), "missing_field", "/data/toolOutput/offsetBytes"),
    (at(D, "/data/toolOutput/offsetBytes", -1), "below_minimum", "/data/toolOutput/offsetBytes"),
    (at(D, "/data/toolOutput/extra", 1), "unknown_field", "/data/toolOutput/extra"),
    (
        at(D, "/data/toolOutput", {"operation": "set", "text": "x", "offsetBytes": 0}),
        "unknown_field",
        "/data/toolOutput/offsetBytes",
    ),
    (
        at(D, "/data/content", {"operation": "set", "text": "x"}),
        "missing_field",
        "/data/content/value",
    ),
    (
        at(D, "/data/content", {"operation": "append_text", "text": 3}),
        "wrong_type",
        "/data/content/text",
    ),
    (
        at(D, "/data/content", {"operation": "insert"}),
        "unknown_operation",
        "/data/content/operation",
    ),
    (at(D, "/data/payloadSet", {}), "empty_object", "/data/payloadSet"),
    (at(D, "/data/payloadSet", {"": 1}), "empty_property_name", "/data/payloadSet/"),
    (at(D, "/data/payloadSet", [1]), "wrong_type", "/data/payloadSet"),
    (at(D, "/data/payloadUnset", []), "empty_array", "/data/payloadUnset"),
    (at(D, "/data/payloadUnset", ["a", "a"]), "duplicate_item", "/data/payloadUnset/1"),
    (at(D, "/data/payloadUnset", ["a", ""]), "empty_string", "/data/payloadUnset/1"),
    (at(D, "/data/payloadUnset", ["a", 1]), "wrong_type", "/data/payloadUnset/1"),
    (at(D, "/data/status", 1), "wrong_type", "/data/status"),
    (at(D, "/data/semantics", "x"), "wrong_type", "/data/semantics"),
    (at(D, "/data/startedAtUnixMs", -1), "below_minimum", "/data/startedAtUnixMs"),
    (at(D, "/data/completedAtUnixMs", 0.5), "wrong_type", "/data/completedAtUnixMs"),
    (at(T, "/data/eventType", "interaction_update"), "const_mismatch", "/data/eventType"),
    (at(T, "/data/eventType", ...), "missing_field", "/data/eventType"),
    (at(T, "/data/activeTurnId", ""), "empty_string", "/data/activeTurnId"),
    (at(T, "/data/activeTurnId", 5), "wrong_type", "/data/activeTurnId"),
    (at(T, "/data/turn/phase", "done"), "not_in_enum", "/data/turn/phase"),
    (at(T, "/data/turn/outcome", "ok"), "not_in_enum", "/data/turn/outcome"),
    (at(T, "/data/turn/error", "boom"), "wrong_type", "/data/turn/error"),
    (at(S, "/data/turn/error", {"message": "m"}), "missing_field", "/data/turn/error/detail"),
    (
        at(S, "/data/turn/error", {"message": "", "detail": 1}),
        "empty_string",
        "/data/turn/error/message",
    ),
    (
        at(S, "/data/turn/error", {"message": "m", "detail": 1, "x": 1}),
        "unknown_field",
        "/data/turn/error/x",
    ),
    (at(T, "/data/turn/settledAtUnixMs", -1), "below_minimum", "/data/turn/settledAtUnixMs"),
    (at(T, "/data/turn/fileChanges", []), "unknown_field", "/data/turn/fileChanges"),
    (at(T, "/data/turn/turnId", ...), "missing_field", "/data/turn/turnId"),
    (at(X, "/data/interaction/kind", "vote"), "not_in_enum", "/data/interaction/kind"),
    (at(X, "/data/interaction/status", "open"), "not_in_enum", "/data/interaction/status"),
    (at(X, "/data/interaction/input", []), "wrong_type", "/data/interaction/input"),
    (at(X, "/data/interaction/toolName", 1), "wrong_type", "/data/interaction/toolName"),
    (at(X, "/data/interaction/metadata", ...), "missing_field", "/data/interaction/metadata"),
    (at(X, "/data/occurredAtUnixMs", 0), "below_minimum", "/data/occurredAtUnixMs"),
    (
        at(snapshot_event(interaction()), "/data/interactions/0/kind", "x"),
        "not_in_enum",
        "/data/interactions/0/kind",
    ),
    (at(snapshot_event(), "/data/interactions", {}), "wrong_type", "/data/interactions"),
    (at(snapshot_event(), "/data/rootTurnId", ...), "missing_field", "/data/rootTurnId"),
    (at(runtime(), "/data/state", "busy"), "not_in_enum", "/data/state"),
    (at(audit(), "/data/audit/version", 0), "below_minimum", "/data/audit/version"),
    (at(audit(), "/data/audit/payload", None), "wrong_type", "/data/audit/payload"),
    (at(audit(), "/data/audit/extra", 0), "unknown_field", "/data/audit/extra"),
]


@pytest.mark.parametrize(("event", "code", "path"), SCHEMA_RULES)
def test_schema_rule_rejections(
    event: Any, code: str, path: str, reference: jsonschema.Draft202012Validator
) -> None:
    assert code in SCHEMA_CODES
    assert not reference.is_valid(event)
    with pytest.raises(LiveEventInvalid) as info:
        validate_live_event(encode(event))
    assert (info.value.code, info.value.path) == (code, path)
    assert isinstance(info.value, LiveEventError) and isinstance(info.value, TetherError)
    assert path in str(info.value) or path == ""


# Rules no JSON Schema can state: `jsonschema` accepts each event, Tether refuses it.
TETHER_RULES: list[tuple[Any, str, str]] = [
    (at(D, "/data/workspaceId", "ws-2"), "identity_mismatch", "/data/workspaceId"),
    (at(D, "/data/agentSessionId", "world-2"), "identity_mismatch", "/data/agentSessionId"),
    (at(T, "/data/turn/agentSessionId", "w2"), "identity_mismatch", "/data/turn/agentSessionId"),
    (
        at(X, "/data/interaction/agentSessionId", "w2"),
        "identity_mismatch",
        "/data/interaction/agentSessionId",
    ),
    (
        snapshot_event(interaction(), interaction(requestId="r", agentSessionId="w2")),
        "identity_mismatch",
        "/data/interactions/1/agentSessionId",
    ),
    (at(runtime(), "/data/workspaceId", "w"), "identity_mismatch", "/data/workspaceId"),
    (at(D, "/data/kind", "text"), "tool_output_not_tool_call", "/data/toolOutput"),
    (at(T, "/data/activeTurnId", None), "turn_inconsistent", "/data/activeTurnId"),
    (at(T, "/data/activeTurnId", "another"), "turn_inconsistent", "/data/activeTurnId"),
    (at(S, "/data/activeTurnId", "receipt:x"), "turn_inconsistent", "/data/activeTurnId"),
    (at(S, "/data/turn/outcome", None), "turn_inconsistent", "/data/turn/outcome"),
    (at(T, "/data/turn/outcome", "completed"), "turn_inconsistent", "/data/turn/outcome"),
    (at(S, "/data/turn/settledAtUnixMs", None), "turn_inconsistent", "/data/turn/settledAtUnixMs"),
    (at(T, "/data/turn/settledAtUnixMs", 3), "turn_inconsistent", "/data/turn/settledAtUnixMs"),
    (
        at(S, "/data/turn/error", {"message": "m", "detail": None}),
        "turn_inconsistent",
        "/data/turn/error",
    ),
    (
        at(T, "/data/turn/error", {"message": "m", "detail": None}),
        "turn_inconsistent",
        "/data/turn/error",
    ),
    (at(S, "/data/turn/startedAtUnixMs", 9), "turn_inconsistent", "/data/turn/settledAtUnixMs"),
    (at(S, "/data/turn/updatedAtUnixMs", 4), "turn_inconsistent", "/data/turn/updatedAtUnixMs"),
    (at(T, "/data/turn/updatedAtUnixMs", 0), "turn_inconsistent", "/data/turn/updatedAtUnixMs"),
    (at(D, "/data/occurredAtUnixMs", 2**53), "unsafe_integer", "/data/occurredAtUnixMs"),
    (
        at(D, "/data/toolOutput/offsetBytes", 10**30),
        "unsafe_integer",
        "/data/toolOutput/offsetBytes",
    ),
]


@pytest.mark.parametrize(("event", "code", "path"), TETHER_RULES)
def test_tether_only_rule_rejections(
    event: Any, code: str, path: str, reference: jsonschema.Draft202012Validator
) -> None:
    assert code in TETHER_ONLY_CODES
    assert reference.is_valid(event), "the schema cannot state this rule"
    with pytest.raises(LiveEventInvalid) as info:
        validate_live_event(encode(event))
    assert (info.value.code, info.value.path) == (code, path)


GOOD = encode(D)

# The JSON text itself (bytes): rules a validator of parsed values never sees.
TEXT_RULES: list[tuple[bytes, str, str]] = [
    (b"", "invalid_json", ""),
    (GOOD[:-1], "invalid_json", ""),
    (GOOD + b" " + GOOD, "trailing_data", ""),
    (GOOD + b"x", "trailing_data", ""),
    (b"\xef\xbb\xbf" + GOOD, "invalid_json", ""),
    (GOOD.replace(b"\xc3\xa9", b"\xc3"), "invalid_utf8", ""),
    (GOOD.replace(b'"\xc3\xa9"', b'"\\ud800"'), "invalid_json", "/data/toolOutput/text"),
    (
        GOOD.replace(b'{"workspaceId"', b'{"workspaceId": "x", "workspaceId"', 1),
        "duplicate_key",
        "/workspaceId",
    ),
    (
        GOOD.replace(b'"role"', b'"r\\u006fle": "tool", "role"'),
        "duplicate_key",
        "/data/role",
    ),
    (
        GOOD.replace(b'"offsetBytes": 2', b'"offsetBytes": NaN'),
        "invalid_json",
        "/data/toolOutput/offsetBytes",
    ),
]


@pytest.mark.parametrize(("data", "code", "path"), TEXT_RULES)
def test_json_text_rule_rejections(data: bytes, code: str, path: str) -> None:
    assert code in TETHER_ONLY_CODES
    with pytest.raises(LiveEventInvalid) as info:
        validate_live_event(data)
    assert (info.value.code, info.value.path) == (code, path)


def test_duplicate_keys_are_invisible_to_a_parsed_value_validator(
    reference: jsonschema.Draft202012Validator,
) -> None:
    data = GOOD.replace(b'"role": "tool"', b'"role": "", "role": "tool"')
    assert reference.is_valid(json.loads(data))
    with pytest.raises(LiveEventInvalid, match="duplicate_key"):
        validate_live_event(data)


def test_nesting_is_bounded_at_64(reference: jsonschema.Draft202012Validator) -> None:
    def nested(depth: int) -> dict[str, Any]:
        # The envelope, data and payloadSet are 3 levels; the rest is the value.
        value: Any = 1
        for _ in range(depth - 3):
            value = [value]
        return delta(payloadSet={"v": value})

    assert validate_live_event(encode(nested(64)))
    deep = nested(65)
    assert reference.is_valid(deep)
    with pytest.raises(LiveEventInvalid) as info:
        validate_live_event(encode(deep))
    assert info.value.code == "too_deep"
    assert info.value.path.startswith("/data/payloadSet/v/0/0")


def test_every_code_is_listed_once_and_classified() -> None:
    codes = live_error_codes()
    assert len(codes) == len(set(codes))
    assert SCHEMA_CODES.isdisjoint(TETHER_ONLY_CODES)
    assert SCHEMA_CODES | TETHER_ONLY_CODES <= set(codes)
    tested = {c for _, c, _ in SCHEMA_RULES} | {c for _, c, _ in TETHER_RULES}
    tested |= {c for _, c, _ in TEXT_RULES} | {"too_deep"}
    assert tested == SCHEMA_CODES | TETHER_ONLY_CODES, "every rule has a rejection test"


def test_inputs_other_than_json_are_type_errors() -> None:
    with pytest.raises(TypeError):
        validate_live_event(12)  # type: ignore[arg-type]
    assert validate_live_event(D).message_id == D["data"]["messageId"]
    assert validate_live_event(GOOD.decode()).turn_id == D["data"]["turnId"]
