"""Interop with the `ag-ui-protocol` package: its models and SSE encoder feed the store, and
every activity message the store returns validates as `ag_ui.core.ActivityMessage`."""

from __future__ import annotations

import json
from typing import Any

from ag_ui.core import (
    ActivityDeltaEvent,
    ActivityMessage,
    ActivitySnapshotEvent,
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    MessagesSnapshotEvent,
    ReasoningMessage,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from tether import _core


def stream() -> list[BaseEvent]:
    return [
        RunStartedEvent(thread_id="thread-1", run_id="run-1", timestamp=1_700_000_000_000),
        TextMessageStartEvent(message_id="m1", role="assistant"),
        TextMessageContentEvent(message_id="m1", delta="Moving the arm "),
        TextMessageContentEvent(message_id="m1", delta="to the bin."),
        TextMessageEndEvent(message_id="m1", metadata={"tokens": 7}),
        ActivitySnapshotEvent(
            message_id="act-1",
            activity_type="robot_task",
            content={"steps": [], "progress": 0, "status": "planning"},
            metadata={"tether.tick": 1},
        ),
        StepStartedEvent(step_name="approach"),
        ActivityDeltaEvent(
            message_id="act-1",
            activity_type="robot_task",
            patch=[
                {"op": "add", "path": "/steps/-", "value": {"name": "approach", "ok": True}},
                {"op": "replace", "path": "/progress", "value": 25},
                {"op": "replace", "path": "/status", "value": "moving"},
            ],
            metadata={"tether.tick": 2},
        ),
        ActivitySnapshotEvent(
            message_id="act-2",
            activity_type="object_search",
            content={"query": "red cube", "found": 0},
            subagent_run_id="vision-1",
        ),
        ActivityDeltaEvent(
            message_id="act-2",
            activity_type="object_search",
            subagent_run_id="vision-1",
            patch=[{"op": "replace", "path": "/found", "value": 1}],
        ),
        ActivitySnapshotEvent(
            message_id="act-2",
            activity_type="ignored",
            content={"ignored": True},
            replace=False,
            subagent_run_id="vision-1",
            metadata={"done": True},
        ),
        StepFinishedEvent(step_name="approach"),
        CustomEvent(name="tether.note", value={"x": [1, 2]}),
        RunFinishedEvent(thread_id="thread-1", run_id="run-1"),
    ]


def expected_activities() -> list[dict[str, Any]]:
    return [
        {
            "id": "act-1",
            "role": "activity",
            "activityType": "robot_task",
            "content": {
                "steps": [{"name": "approach", "ok": True}],
                "progress": 25,
                "status": "moving",
            },
            "metadata": {"tether.tick": 2},
        },
        {
            "id": "act-2",
            "role": "activity",
            "subagentRunId": "vision-1",
            "activityType": "object_search",
            "content": {"query": "red cube", "found": 1},
            "metadata": {"done": True},
        },
    ]


def assert_valid_activity_messages(store: _core.ActivityStore) -> None:
    for msg in store.activities():
        model = ActivityMessage.model_validate(msg)
        assert not model.model_extra, f"unexpected members {model.model_extra}"
        assert model.model_dump(by_alias=True, mode="json") == msg


def test_encoder_sse_stream_is_consumed() -> None:
    encoder = EventEncoder()
    sse = "".join(encoder.encode(e) for e in stream()).encode()
    store = _core.ActivityStore()
    assert store.feed(sse) == []
    store.finish()
    assert store.activities() == expected_activities()
    assert store.get("m1") == {
        "id": "m1",
        "role": "assistant",
        "content": "Moving the arm to the bin.",
        "metadata": {"tokens": 7},
    }
    assert_valid_activity_messages(store)
    AssistantMessage.model_validate(store.get("m1"))


def test_sse_split_into_small_chunks() -> None:
    sse = "".join(EventEncoder().encode(e) for e in stream()).encode()
    store = _core.ActivityStore()
    for i in range(0, len(sse), 7):
        store.feed(sse[i : i + 7])
    store.finish()
    assert store.activities() == expected_activities()


def test_model_dumps_as_dicts_and_as_ndjson() -> None:
    dicts = [e.model_dump(by_alias=True, mode="json") for e in stream()]
    by_dict = _core.ActivityStore()
    for d in dicts:
        assert by_dict.handle_event(d) == []
    ndjson = b"".join(e.model_dump_json(by_alias=True).encode() + b"\n" for e in stream())
    by_bytes = _core.ActivityStore()
    by_bytes.feed(ndjson)
    assert by_dict.messages() == by_bytes.messages()
    assert by_dict.activities() == expected_activities()


def test_messages_snapshot_built_with_models() -> None:
    store = _core.ActivityStore()
    for e in stream()[:-1]:
        store.handle_event(e.model_dump(by_alias=True, mode="json"))
    snapshot = MessagesSnapshotEvent(
        messages=[
            UserMessage(id="u0", content="pick the red cube"),
            AssistantMessage(id="m1", content="Done."),
            ReasoningMessage(id="r1", content="the cube is left of the bin"),
        ]
    )
    store.feed(EventEncoder().encode(snapshot).encode())
    assert [m["id"] for m in store.messages()] == ["m1", "act-1", "act-2", "u0", "r1"]
    assert [m["role"] for m in store.run_input_messages()] == ["assistant", "user", "reasoning"]
    assert_valid_activity_messages(store)
    for wire in store.run_input_messages():
        assert "activity" != wire["role"]
    assert json.loads(store.to_json()) == store.messages()


def test_python_mode_model_dumps_are_accepted() -> None:
    """`model_dump(by_alias=True)` without mode="json" keeps `EventType` enum members."""
    store = _core.ActivityStore()
    for e in stream():
        store.handle_event(e.model_dump(by_alias=True))
    assert store.activities() == expected_activities()
    assert all(type(m["role"]) is str for m in store.messages())
