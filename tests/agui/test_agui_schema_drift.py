"""Every `ag_ui.core` event type, with every optional field populated, is consumed without a
warning or an error: the store's closed shapes describe exactly what the package can send."""

from __future__ import annotations

import inspect
from typing import Any

import ag_ui.core
import pytest
from ag_ui.core import BaseEvent, EventType
from tether import _core

ENVELOPE = {"timestamp": 1_700_000_000_000, "rawEvent": {"vendor": 1}, "metadata": {"k": 1}}
SUB = {"subagentRunId": "sub-1"}
USAGE = [{"provider": "p", "model": "m", "inputTokens": 3, "outputTokens": 4, "totalTokens": 7}]

# One fully populated instance per event type, in an order the run lifecycle accepts.
FULL: list[dict[str, Any]] = [
    {
        "type": "RUN_STARTED",
        "threadId": "t",
        "runId": "r",
        "protocolVersion": "1",
        "parentRunId": "p",
        "input": {"threadId": "t", "runId": "r", "messages": [], "state": {}, "tools": []},
    },
    {"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant", "name": "n", **SUB},
    {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "hi", **SUB},
    {"type": "TEXT_MESSAGE_END", "messageId": "m1", **SUB},
    {
        "type": "TEXT_MESSAGE_CHUNK",
        "messageId": "m2",
        "role": "user",
        "delta": "x",
        "name": "n",
        **SUB,
    },
    {
        "type": "TOOL_CALL_START",
        "toolCallId": "c",
        "toolCallName": "f",
        "parentMessageId": "m1",
        **SUB,
    },
    {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{}", **SUB},
    {"type": "TOOL_CALL_END", "toolCallId": "c", **SUB},
    {
        "type": "TOOL_CALL_CHUNK",
        "toolCallId": "c2",
        "toolCallName": "g",
        "parentMessageId": "m1",
        "delta": "{}",
        **SUB,
    },
    {
        "type": "TOOL_CALL_RESULT",
        "messageId": "t1",
        "toolCallId": "c",
        "content": "ok",
        "role": "tool",
        **SUB,
    },
    {"type": "STATE_SNAPSHOT", "snapshot": {"s": 1}, **SUB},
    {"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/s", "value": 2}], **SUB},
    {
        "type": "ACTIVITY_SNAPSHOT",
        "messageId": "a",
        "activityType": "t",
        "content": {"n": 0},
        "replace": True,
        **SUB,
    },
    {
        "type": "ACTIVITY_DELTA",
        "messageId": "a",
        "activityType": "t",
        "patch": [{"op": "replace", "path": "/n", "value": 1}],
        **SUB,
    },
    {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "m1", "role": "assistant", "content": "hi"}]},
    {"type": "RAW", "event": {"any": 1}, "source": "s", **SUB},
    {"type": "CUSTOM", "name": "c", "value": [1], **SUB},
    {"type": "STEP_STARTED", "stepName": "s", **SUB},
    {"type": "STEP_FINISHED", "stepName": "s", **SUB},
    {"type": "REASONING_START", "messageId": "r", **SUB},
    {"type": "REASONING_MESSAGE_START", "messageId": "r", "role": "reasoning", **SUB},
    {"type": "REASONING_MESSAGE_CONTENT", "messageId": "r", "delta": "hm", **SUB},
    {"type": "REASONING_MESSAGE_END", "messageId": "r", **SUB},
    {"type": "REASONING_MESSAGE_CHUNK", "messageId": "r", "delta": "hm", **SUB},
    {"type": "REASONING_END", "messageId": "r", **SUB},
    {
        "type": "REASONING_ENCRYPTED_VALUE",
        "subtype": "message",
        "entityId": "r",
        "encryptedValue": "x",
        **SUB,
    },
    {
        "type": "SUBAGENT_STARTED",
        "subagentRunId": "sub-1",
        "name": "vision",
        "description": "d",
        "parentSubagentRunId": "sub-0",
        "parentToolCallId": "c",
        "parentMessageId": "m1",
    },
    {"type": "SUBAGENT_ERROR", "subagentRunId": "sub-2", "message": "boom", "code": "E"},
    {
        "type": "SUBAGENT_FINISHED",
        "subagentRunId": "sub-1",
        "result": {"r": 1},
        "outcome": {"type": "success"},
    },
    {
        "type": "RUN_FINISHED",
        "threadId": "t",
        "runId": "r",
        "result": {"done": True},
        "outcome": {"type": "success", "pendingToolCallIds": []},
        "usage": USAGE,
    },
    {"type": "RUN_ERROR", "message": "late", "code": "E", "usage": USAGE},
]

MODELS: dict[str, type[BaseEvent]] = {
    cls.model_fields["type"].default.value: cls
    for _, cls in inspect.getmembers(ag_ui.core, inspect.isclass)
    if issubclass(cls, BaseEvent) and cls is not BaseEvent
}


def test_every_event_type_is_covered() -> None:
    assert {e["type"] for e in FULL} == {t.value for t in EventType} == set(MODELS)


@pytest.mark.parametrize("event", FULL, ids=[e["type"] for e in FULL])
def test_every_field_of_the_model_is_populated(event: dict[str, Any]) -> None:
    model = MODELS[event["type"]]
    wire = model.model_validate({**ENVELOPE, **event}).model_dump(by_alias=True, exclude_none=True)
    fields = {f.alias or name for name, f in model.model_fields.items()}
    assert set(wire) == fields, f"not populated: {sorted(fields - set(wire))}"


def test_the_store_takes_every_fully_populated_event_without_a_warning() -> None:
    store = _core.ActivityStore()
    for event in FULL:
        model = MODELS[event["type"]]
        wire = model.model_validate({**ENVELOPE, **event}).model_dump(
            by_alias=True, exclude_none=True, mode="json"
        )
        assert store.handle_event(wire) == [], wire["type"]
    assert store.events_handled == len(FULL)
    activity = store.get("a")
    assert activity is not None and activity["content"] == {"n": 1}


MESSAGE_COMMON = {"subagentRunId": "sub-1", "metadata": {"k": 1}}
TOOL_CALL = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}

# One fully populated message per role.
FULL_MESSAGES: list[dict[str, Any]] = [
    {"id": "d", "role": "developer", "content": "c", "name": "n", "encryptedValue": "e"},
    {"id": "s", "role": "system", "content": "c", "name": "n", "encryptedValue": "e"},
    {
        "id": "a",
        "role": "assistant",
        "content": "c",
        "name": "n",
        "encryptedValue": "e",
        "toolCalls": [TOOL_CALL],
    },
    {
        "id": "u",
        "role": "user",
        "content": [{"type": "text", "text": "hi"}],
        "name": "n",
        "encryptedValue": "e",
    },
    {
        "id": "t",
        "role": "tool",
        "content": "ok",
        "toolCallId": "c",
        "error": "x",
        "encryptedValue": "e",
    },
    {"id": "act", "role": "activity", "activityType": "t", "content": {"n": 1}},
    {"id": "r", "role": "reasoning", "content": "c", "encryptedValue": "e"},
]

MESSAGE_MODELS = {
    "developer": ag_ui.core.DeveloperMessage,
    "system": ag_ui.core.SystemMessage,
    "assistant": ag_ui.core.AssistantMessage,
    "user": ag_ui.core.UserMessage,
    "tool": ag_ui.core.ToolMessage,
    "activity": ag_ui.core.ActivityMessage,
    "reasoning": ag_ui.core.ReasoningMessage,
}


def test_every_message_role_fully_populated_is_held_as_sent() -> None:
    wires = []
    for message in FULL_MESSAGES:
        model = MESSAGE_MODELS[message["role"]]
        wire = model.model_validate({**MESSAGE_COMMON, **message}).model_dump(
            by_alias=True, exclude_none=True, mode="json"
        )
        assert set(wire) == {f.alias or n for n, f in model.model_fields.items()}, model
        wires.append(wire)
    store = _core.ActivityStore()
    store.handle_event({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    assert store.handle_event({"type": "MESSAGES_SNAPSHOT", "messages": wires}) == []
    assert store.messages() == wires
    assert store.run_input_messages() == [w for w in wires if w["role"] != "activity"]
