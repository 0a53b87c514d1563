"""Shared helpers for the live-event tests: a jsonschema validator over Tether's registry and
builders of valid events."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from tether.live import event_schema, schema_registry

WS, SESSION, TURN, MSG = (
    "ws-1",
    "world-1",
    "receipt:world-1/run-1/3/tok-3",
    "toolcall:world-1/sim/a1",
)


def reference_validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(event_schema(), registry=schema_registry())


@pytest.fixture(scope="session")
def reference() -> jsonschema.Draft202012Validator:
    return reference_validator()


def encode(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False).encode()


def envelope(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"workspaceId": WS, "agentSessionId": SESSION, "eventType": event_type, "data": data}


def delta(**fields: Any) -> dict[str, Any]:
    data = {
        "workspaceId": WS,
        "agentSessionId": SESSION,
        "messageId": MSG,
        "turnId": TURN,
        "role": "tool",
        "kind": "tool_call",
        "occurredAtUnixMs": 10,
    }
    data.update(fields)
    return envelope("message_delta", data)


def turn(phase: str = "running", **fields: Any) -> dict[str, Any]:
    settled = phase == "settled"
    t = {
        "turnId": TURN,
        "agentSessionId": SESSION,
        "phase": phase,
        "outcome": "completed" if settled else None,
        "error": None,
        "startedAtUnixMs": 1,
        "settledAtUnixMs": 5 if settled else None,
        "updatedAtUnixMs": 6,
    }
    t.update(fields)
    return envelope(
        "turn_update",
        {
            "workspaceId": WS,
            "agentSessionId": SESSION,
            "eventType": "turn_update",
            "occurredAtUnixMs": 7,
            "activeTurnId": None if settled else TURN,
            "turn": t,
        },
    )


def interaction(**fields: Any) -> dict[str, Any]:
    x = {
        "requestId": "approval:world-1/sim/a1/1",
        "agentSessionId": SESSION,
        "turnId": TURN,
        "kind": "approval",
        "status": "pending",
        "toolName": "sim",
        "input": {"activityId": "a1"},
        "output": None,
        "metadata": None,
        "createdAtUnixMs": 1,
        "updatedAtUnixMs": 1,
    }
    x.update(fields)
    return x


def interaction_update(**fields: Any) -> dict[str, Any]:
    return envelope(
        "interaction_update",
        {
            "workspaceId": WS,
            "agentSessionId": SESSION,
            "eventType": "interaction_update",
            "occurredAtUnixMs": 3,
            "interaction": interaction(**fields),
        },
    )


def snapshot_event(*items: dict[str, Any]) -> dict[str, Any]:
    return envelope(
        "interaction_snapshot",
        {
            "workspaceId": WS,
            "agentSessionId": SESSION,
            "eventType": "interaction_snapshot",
            "occurredAtUnixMs": 0,
            "rootTurnId": TURN,
            "interactions": list(items),
        },
    )


def runtime(state: str = "running") -> dict[str, Any]:
    return envelope(
        "runtime_activity_update",
        {
            "workspaceId": WS,
            "agentSessionId": SESSION,
            "eventType": "runtime_activity_update",
            "state": state,
            "occurredAtUnixMs": 2,
        },
    )


def audit(version: int = 1) -> dict[str, Any]:
    return envelope(
        "session_audit",
        {
            "workspaceId": WS,
            "agentSessionId": SESSION,
            "eventType": "session_audit",
            "occurredAtUnixMs": 4,
            "audit": {
                "auditId": "au-1",
                "role": "operator",
                "payload": {"k": 1},
                "version": version,
            },
        },
    )
