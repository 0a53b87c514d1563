"""`tether.agui.ActivityPublisher`: the producer rules, checked against the store, the
`ag_ui.core` models and the independent `ag_ui_validate` conformance validator."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ag_ui.core import ActivityDeltaEvent, ActivitySnapshotEvent
from ag_ui_validate import create_validator
from hypothesis import given
from hypothesis import strategies as st
from tether.agui import ActivityPublisher, ActivityStore, encode_sse, to_model


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        self.now += 10
        return self.now


def big(n: int) -> dict[str, Any]:
    return {"robot": "so101", "limits": list(range(40)), "tick": n, "status": "moving", "log": []}


def test_first_snapshot_then_deltas() -> None:
    pub = ActivityPublisher("act-1", "joint_telemetry", clock=Clock())
    first = pub.update(big(0))
    assert first == {
        "type": "ACTIVITY_SNAPSHOT",
        "timestamp": 1_010,
        "messageId": "act-1",
        "activityType": "joint_telemetry",
        "content": big(0),
    }
    second = pub.update({**big(1), "log": ["started"]})
    assert second is not None
    assert second["type"] == "ACTIVITY_DELTA" and second["timestamp"] == 1_020
    assert second["activityType"] == "joint_telemetry"
    assert sorted(op["path"] for op in second["patch"]) == ["/log/-", "/tick"]
    assert "subagentRunId" not in second and "content" not in second
    assert pub.update({**big(1), "log": ["started"]}) is None  # nothing changed


def test_snapshot_when_the_delta_would_be_larger() -> None:
    pub = ActivityPublisher("a", "t", clock=Clock())
    pub.update({"x": 1})
    event = pub.update({"y": [1, 2, 3]})
    assert event is not None and event["type"] == "ACTIVITY_SNAPSHOT"
    assert event["content"] == {"y": [1, 2, 3]}


def test_retype_metadata_and_attribution() -> None:
    pub = ActivityPublisher("a", "t", subagent_run_id="sub-1", clock=Clock())
    pub.update(big(0))
    event = pub.update(big(0), activity_type="u", metadata={"k": 1})
    assert event is not None
    assert event["type"] == "ACTIVITY_DELTA" and event["patch"] == []
    assert event["activityType"] == "u" and event["metadata"] == {"k": 1}
    assert event["subagentRunId"] == "sub-1"
    assert pub.activity_type == "u"
    resync = pub.snapshot(now_ms=5)
    assert resync["type"] == "ACTIVITY_SNAPSHOT" and resync["timestamp"] == 5
    assert resync["content"] == big(0) and resync["activityType"] == "u"


def test_caller_mutation_does_not_leak_into_the_publisher() -> None:
    pub = ActivityPublisher("a", "t", clock=Clock())
    content = big(0)
    first = pub.update(content)
    content["log"].append("later")
    assert first is not None and first["content"]["log"] == []
    assert pub.content == big(0)


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ([1], TypeError),
        ("s", TypeError),
        ({"x": {1, 2}}, ValueError),
        ({"f": float("nan")}, ValueError),
        ({"f": [float("inf")]}, ValueError),
        ({1: "int key"}, ValueError),
        ({"nested": {True: 1}}, ValueError),
        ({"t": (1, 2)}, ValueError),
        ({"b": b"bytes"}, ValueError),
    ],
)
def test_content_must_be_a_json_object(content: Any, error: type[Exception]) -> None:
    pub = ActivityPublisher("a", "t")
    with pytest.raises(error):
        pub.update(content)
    assert pub.content is None


def test_bad_arguments() -> None:
    with pytest.raises(TypeError):
        ActivityPublisher("", "t")
    with pytest.raises(TypeError):
        ActivityPublisher("a", "t", subagent_run_id=3)  # type: ignore[arg-type]
    pub = ActivityPublisher("a", "t", clock=lambda: 1.5)  # type: ignore[arg-type, return-value]
    with pytest.raises(TypeError):
        pub.update({})
    with pytest.raises(TypeError):
        ActivityPublisher("a", "t").update({}, now_ms=True)
    with pytest.raises(RuntimeError):
        ActivityPublisher("a", "t").snapshot()
    for out_of_range in (2**53, -(2**53)):
        with pytest.raises(ValueError, match="2\\^53"):
            ActivityPublisher("a", "t").update({}, now_ms=out_of_range)
    edge = ActivityPublisher("a", "t").update({}, now_ms=2**53 - 1)
    assert edge is not None and edge["timestamp"] == 2**53 - 1
    store = ActivityStore()
    store.handle_event({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    assert store.handle_event(edge) == []


def test_deep_or_cyclic_content_is_a_clear_error() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    deep: Any = []
    for _ in range(2000):
        deep = [deep]
    for content in (cyclic, {"deep": deep}):
        pub = ActivityPublisher("a", "t")
        with pytest.raises(ValueError, match="deeper"):
            pub.update(content)
        assert pub.content is None


def test_events_are_ag_ui_models_and_sse_encodable() -> None:
    pub = ActivityPublisher("a", "t", clock=Clock())
    snap = pub.update(big(0))
    delta = pub.update(big(1))
    assert snap is not None and delta is not None
    assert isinstance(to_model(snap), ActivitySnapshotEvent)
    assert isinstance(to_model(delta), ActivityDeltaEvent)
    for event in (snap, delta):
        frame = encode_sse(event)
        assert frame.startswith("data: ") and frame.endswith("\n\n")
        assert json.loads(frame[len("data: ") :]) == event
    with pytest.raises(ValueError):
        to_model({"type": "RUN_STARTED"})


json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=4)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", "~", "/", "a/b~"]), inner, max_size=4)
    ),
    max_leaves=12,
)
contents = st.dictionaries(
    st.sampled_from(["n", "steps", "s", "x/y", "~0"]), json_values, max_size=5
)


@given(st.lists(contents, min_size=1, max_size=8))
def test_store_follows_the_publisher(sequence: list[dict[str, Any]]) -> None:
    pub = ActivityPublisher("act", "t", clock=Clock())
    by_bytes, by_dicts = ActivityStore(), ActivityStore()
    validator = create_validator()
    run_started = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}
    validator.feed(run_started)
    by_bytes.handle_event(run_started)
    by_dicts.handle_event(run_started)
    for content in sequence:
        event = pub.update(content)
        if event is None:
            continue
        validator.feed(event)
        assert by_bytes.feed(encode_sse(event).encode()) == []
        assert by_dicts.handle_event(event) == []
        for store in (by_bytes, by_dicts):
            held = store.get("act")
            assert held is not None and held["content"] == content
            # Types member by member (True is not 1); a diff may leave members in another order.
            assert {k: type(v) for k, v in held["content"].items()} == {
                k: type(v) for k, v in content.items()
            }
    validator.feed({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"})
    validator.finalize()
    report = validator.report()
    assert report.summary.errors == 0, [d.message for d in report.diagnostics]
