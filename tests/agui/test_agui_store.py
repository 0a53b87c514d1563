"""`tether._core.ActivityStore`: the AG-UI consumer rules, driven from Python dicts and bytes."""

from __future__ import annotations

import datetime
import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import ag_ui_validate
import pytest
import tether.agui
from hypothesis import given
from hypothesis import strategies as st
from tether import _core
from tether.errors import (
    AguiAttributionError,
    AguiDecodeError,
    AguiError,
    AguiMalformedError,
    AguiSequenceError,
    TetherError,
)

ActivityStore = _core.ActivityStore


def snap(mid: str, content: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": "ACTIVITY_SNAPSHOT",
        "messageId": mid,
        "activityType": extra.pop("activityType", "t"),
        "content": content,
        **extra,
    }


def delta(mid: str, patch: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": "ACTIVITY_DELTA",
        "messageId": mid,
        "activityType": extra.pop("activityType", "t"),
        "patch": patch,
        **extra,
    }


def _copy_bomb(mid: str, copies: int) -> dict[str, Any]:
    return delta(mid, [{"op": "copy", "from": "", "path": f"/c{i}"} for i in range(copies)])


RUN_STARTED = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}


def started(**options: Any) -> ActivityStore:
    """A store inside a run: RUN_STARTED handled, as the run lifecycle requires."""
    s = ActivityStore(**options)
    assert s.handle_event(RUN_STARTED) == []
    return s


def store_of(*events: dict[str, Any]) -> ActivityStore:
    s = started()
    for e in events:
        s.handle_event(e)
    return s


def test_error_hierarchy() -> None:
    assert issubclass(AguiError, TetherError)
    for cls in (AguiDecodeError, AguiMalformedError, AguiSequenceError):
        assert issubclass(cls, AguiError)
    assert issubclass(AguiAttributionError, AguiMalformedError)
    # The attributes exist on the class (typed in the stub), and every raised error sets them.
    assert (AguiError.code, AguiError.event_type, AguiError.message_id) == (None, None, None)
    with pytest.raises(AguiMalformedError) as info:
        started().handle_event(snap("x", {}, replace=1))
    err = info.value
    assert (err.code, err.event_type, err.message_id) == ("wrong_type", "ACTIVITY_SNAPSHOT", "x")
    assert err.reason is not None and "replace" in err.reason


def test_rule1_snapshot_creates_at_arrival_replaces_and_replace_false_keeps() -> None:
    s = store_of(
        snap("a", {"n": 1}),
        {"type": "TEXT_MESSAGE_START", "messageId": "m"},
        snap("a", {"n": 2}, activityType="u"),
    )
    assert [m["id"] for m in s.messages()] == ["a", "m"]
    assert s.get("a") == {"id": "a", "role": "activity", "activityType": "u", "content": {"n": 2}}
    s.handle_event(snap("a", {"other": True}, activityType="v", replace=False))
    assert s.get("a") == {"id": "a", "role": "activity", "activityType": "u", "content": {"n": 2}}


def test_rule2_metadata_merges_shallowly_and_survives_replacement() -> None:
    s = store_of(
        snap("a", {}, metadata={"k": 1, "deep": {"x": 1}}),
        delta("a", [], metadata={"deep": {"y": 2}}),
        snap("a", {"fresh": 1}, metadata={"z": None}),
        snap("a", {"ignored": 1}, replace=False, metadata={"k": 9}),
    )
    got = s.get("a")
    assert got is not None
    assert got["metadata"] == {"k": 9, "deep": {"y": 2}, "z": None}
    assert got["content"] == {"fresh": 1}


def test_rule3_attribution() -> None:
    s = store_of(snap("a", {"n": 0}, subagentRunId="sub-1"))
    before = s.messages()
    with pytest.raises(AguiAttributionError) as info:
        s.handle_event(delta("a", [{"op": "replace", "path": "/n", "value": 1}], subagentRunId="x"))
    assert info.value.code == "attribution_mismatch"
    assert info.value.message_id == "a"
    assert s.messages() == before
    s.handle_event(delta("a", [{"op": "replace", "path": "/n", "value": 1}]))  # untagged: fine
    s.handle_event(snap("a", {"n": 5}, replace=False, subagentRunId="sub-9"))  # owner stands
    assert s.get("a") == {
        "id": "a",
        "role": "activity",
        "subagentRunId": "sub-1",
        "activityType": "t",
        "content": {"n": 1},
    }
    assert s.warnings == []
    s.handle_event(snap("a", {"n": 6}))  # replacing snapshot re-mints: now the parent's
    got = s.get("a")
    assert got is not None and "subagentRunId" not in got
    with pytest.raises(AguiAttributionError):
        s.handle_event(delta("a", [], subagentRunId="sub-1"))


def test_rule4_deltas_patch_atomically_and_failures_warn() -> None:
    s = store_of(snap("a", {"steps": [], "n": 0, "status": "idle"}))
    w = s.handle_event(
        delta(
            "a",
            [
                {"op": "add", "path": "/steps/-", "value": {"name": "grasp"}},
                {"op": "replace", "path": "/status", "value": "running"},
            ],
            activityType="robot_task",
        )
    )
    assert w == []
    assert s.get("a") == {
        "id": "a",
        "role": "activity",
        "activityType": "robot_task",
        "content": {"steps": [{"name": "grasp"}], "n": 0, "status": "running"},
    }
    w = s.handle_event(
        delta(
            "a",
            [{"op": "replace", "path": "/n", "value": 1}, {"op": "test", "path": "/n", "value": 7}],
            activityType="other",
            metadata={"seen": True},
        )
    )
    assert [x.code for x in w] == ["patch_not_applied"]
    assert w[0].message_id == "a" and w[0].event_type == "ACTIVITY_DELTA"
    got = s.get("a")
    assert got is not None
    assert got["content"]["n"] == 0 and got["activityType"] == "robot_task"
    assert got["metadata"] == {"seen": True}
    w = s.handle_event(delta("a", [{"op": "replace", "path": "", "value": 3}]))
    assert [x.code for x in w] == ["patch_result_not_object"]
    w = s.handle_event(delta("missing", []))
    w += s.handle_event({"type": "TEXT_MESSAGE_START", "messageId": "m"})
    w += s.handle_event(delta("m", []))
    assert [x.code for x in w] == ["delta_target_missing", "delta_target_not_activity"]
    s.handle_event(snap("a", {"resync": True}))
    got = s.get("a")
    assert got is not None and got["content"] == {"resync": True}


DROP = {"op": "frobnicate", "path": "/n"}


@pytest.mark.parametrize("how", ["dict", "ndjson", "sse"])
@pytest.mark.parametrize(
    ("event", "then"),
    [
        (delta("a", [DROP, {"op": "remove", "path": "/missing"}]), "patch_not_applied"),
        (delta("a", [DROP, {"op": "move", "from": "", "path": "/n/x"}]), "patch_not_applied"),
        (delta("a", [DROP, {"op": "replace", "path": "", "value": 1}]), "patch_result_not_object"),
        (delta("missing", [DROP]), "delta_target_missing"),
        (delta("a", [DROP, *_copy_bomb("a", 40)["patch"]]), "content_too_large"),
    ],
    ids=["does-not-apply", "move-into-child", "not-an-object", "missing", "too-large"],
)
def test_rule4_a_dropped_op_warns_first_whatever_happens_to_the_rest(
    how: str, event: dict[str, Any], then: str
) -> None:
    s = store_of(snap("a", {"n": 0}))
    if how == "dict":
        w = s.handle_event(event)
    elif how == "ndjson":
        w = s.feed(json.dumps(event).encode() + b"\n")
    else:
        w = s.feed(b"data: " + json.dumps(event).encode() + b"\n\n")
    assert [x.code for x in w] == ["patch_op_dropped", then]
    assert "frobnicate" in w[0].reason
    got = s.get("a")
    assert got is not None and got["content"] == {"n": 0}


@pytest.mark.parametrize("how", ["dict", "ndjson"])
def test_rule4_a_move_into_its_own_child_is_skipped_not_fatal(how: str) -> None:
    # A well-formed patch that cannot apply: tolerated, even for a missing target.
    s = store_of(snap("a", {"x": {"y": 1}}))
    into_child = [{"op": "move", "from": "/x", "path": "/x/y/z"}]
    for event in (delta("a", into_child), delta("missing", into_child)):
        if how == "dict":
            s.handle_event(event)
        else:
            s.feed(json.dumps(event).encode() + b"\n")
    assert [x.code for x in s.warnings] == ["patch_not_applied", "delta_target_missing"]
    assert "own child" in s.warnings[0].reason
    got = s.get("a")
    assert got is not None and got["content"] == {"x": {"y": 1}}


@pytest.mark.parametrize(
    ("event", "code"),
    [
        (snap("a", [1]), "wrong_type"),  # type: ignore[arg-type]
        (snap("a", {}, replace="yes"), "wrong_type"),
        (snap("a", {}, replace=None), "null_value"),
        (snap("a", {}, subagentRunId=None), "null_value"),
        (snap("a", {}, metadata=None), "null_value"),
        (snap("a", {}, timestamp=1.5), "fractional_timestamp"),
        (snap("a", {}, timestamp=2**60), "timestamp_out_of_range"),
        (delta("a", [{"op": "add", "path": "/x~2", "value": 1}]), "malformed_patch"),
        (delta("a", [{"op": "add", "path": "/x"}]), "malformed_patch"),
        (delta("a", {"op": "add"}), "wrong_type"),  # type: ignore[arg-type]
        ({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "content": {}}, "missing_field"),
        ({"messageId": "a"}, "missing_type"),
        ({"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "x"}]}, "missing_field"),
    ],
)
def test_rule5_malformed_known_values_are_fatal_and_change_nothing(
    event: dict[str, Any], code: str
) -> None:
    s = store_of(snap("a", {"n": 0}, metadata={"m": 1}))
    before, warnings_before = s.to_json(), s.warnings
    with pytest.raises(AguiMalformedError) as info:
        s.handle_event(event)
    assert info.value.code == code
    assert s.to_json() == before
    assert s.warnings == warnings_before


BEFORE_EXPIRY = datetime.date(2027, 9, 7)
ON_EXPIRY = datetime.date(2027, 9, 8)


def test_raw_event_null_expires_on_2027_09_08() -> None:
    assert tether.agui.RAW_EVENT_NULL_EXPIRES == ON_EXPIRY == _core.AGUI_RAW_EVENT_NULL_EXPIRES


@pytest.mark.parametrize("how", ["dict", "ndjson", "sse"])
def test_raw_event_null_is_absent_with_a_warning_per_occurrence_before_expiry(how: str) -> None:
    s = started(today=BEFORE_EXPIRY)
    assert s.today == BEFORE_EXPIRY
    events = [
        snap("a", {"n": 0}, rawEvent=None),
        delta("a", [{"op": "replace", "path": "/n", "value": 1}], rawEvent=None),
        {"type": "TEXT_MESSAGE_START", "messageId": "m", "rawEvent": None},
        snap("b", {}, rawEvent={"vendor": "kept as any JSON"}),
    ]
    for event in events:
        if how == "dict":
            s.handle_event(event)
        elif how == "ndjson":
            s.feed(json.dumps(event).encode() + b"\n")
        else:
            s.feed(b"data: " + json.dumps(event).encode() + b"\n\n")
    assert [(w.code, w.event_type) for w in s.warnings] == [
        ("raw_event_null", "ACTIVITY_SNAPSHOT"),
        ("raw_event_null", "ACTIVITY_DELTA"),
        ("raw_event_null", "TEXT_MESSAGE_START"),
    ]
    assert "2027-09-08" in s.warnings[0].reason
    got = s.get("a")
    assert got is not None and got["content"] == {"n": 1}
    assert len(s) == 3


@pytest.mark.parametrize("today", [ON_EXPIRY, datetime.date(2030, 1, 1), None], ids=str)
@pytest.mark.parametrize("how", ["dict", "ndjson"])
def test_raw_event_null_is_fatal_on_and_after_expiry(today: datetime.date | None, how: str) -> None:
    s = _core.ActivityStore(today=today)
    s.handle_event(RUN_STARTED)
    for event in (
        snap("a", {}, rawEvent=None),
        delta("a", [], rawEvent=None),
        {"type": "SOMETHING_NEW", "rawEvent": None},
    ):
        with pytest.raises(AguiMalformedError) as info:
            if how == "dict":
                s.handle_event(event)
            else:
                s.feed(json.dumps(event).encode() + b"\n")
        assert info.value.code == "null_value" and "rawEvent" in (info.value.reason or "")
    assert len(s) == 0 and s.warnings == []


def test_python_stores_are_judged_by_the_local_date() -> None:
    assert tether.agui.ActivityStore().today == datetime.date.today()
    assert isinstance(tether.agui.ActivityStore(), _core.ActivityStore)
    assert tether.agui.ActivityStore(today=ON_EXPIRY).today == ON_EXPIRY
    assert _core.ActivityStore().today is None  # the core itself reads no clock
    with pytest.raises(TypeError, match=r"datetime\.date"):
        _core.ActivityStore(today="2027-09-08")  # type: ignore[arg-type]


CLEAN_DELTA = '"type": "ACTIVITY_DELTA", "messageId": "a", "activityType": "t"'
CLEAN_SNAPSHOT = '"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t"'
GOOD_PATCH = '"patch": [{"op": "replace", "path": "/n", "value": 1}]'

# Each malformed known value of rule 5, as JSON text: (event members, expected code).
FATAL_TEXT = [
    (f'{CLEAN_SNAPSHOT}, "content": [1]', "wrong_type"),
    (f'{CLEAN_SNAPSHOT}, "content": "text"', "wrong_type"),
    (f'{CLEAN_SNAPSHOT}, "content": {{}}, "replace": "false"', "wrong_type"),
    (f'{CLEAN_SNAPSHOT}, "content": {{}}, "replace": 0', "wrong_type"),
    (f'{CLEAN_SNAPSHOT}, "content": {{}}, "replace": null', "null_value"),
    (f'{CLEAN_SNAPSHOT}, "content": {{}}, "subagentRunId": null', "null_value"),
    (f'{CLEAN_SNAPSHOT}, "content": {{}}, "metadata": null', "null_value"),
    (f'{CLEAN_SNAPSHOT}, "content": {{}}, "timestamp": 1.5', "fractional_timestamp"),
    (f'{CLEAN_DELTA}, {GOOD_PATCH}, "subagentRunId": null', "null_value"),
    (f'{CLEAN_DELTA}, {GOOD_PATCH}, "metadata": null', "null_value"),
    (f'{CLEAN_DELTA}, {GOOD_PATCH}, "timestamp": 1.5', "fractional_timestamp"),
    (f'{CLEAN_DELTA}, {GOOD_PATCH}, "timestamp": -2.25', "fractional_timestamp"),
    (f'{CLEAN_DELTA}, "patch": [{{"op": "add", "path": "n", "value": 1}}]', "malformed_patch"),
    (f'{CLEAN_DELTA}, "patch": [{{"op": "add", "path": "/~2", "value": 1}}]', "malformed_patch"),
    (f'{CLEAN_DELTA}, "patch": [{{"op": "copy", "from": "/a~", "path": "/b"}}]', "malformed_patch"),
    (f'{CLEAN_DELTA}, "patch": [{{"op": "replace", "path": "/n"}}]', "malformed_patch"),
    (f'{CLEAN_DELTA}, "patch": null', "null_value"),
    (
        '"type": "ACTIVITY_DELTA", "messageId": "a", "activityType": null, ' + GOOD_PATCH,
        "null_value",
    ),
]

# Fractions an f64 would round to an integer: only JSON text can carry them exactly.
FATAL_TEXT_ONLY = [
    (f'{CLEAN_DELTA}, {GOOD_PATCH}, "timestamp": 1700000000000.00001', "fractional_timestamp"),
    (f'{CLEAN_DELTA}, {GOOD_PATCH}, "timestamp": 1e-400', "fractional_timestamp"),
    (f'{CLEAN_SNAPSHOT}, "content": {{}}, "timestamp": 1e-400', "fractional_timestamp"),
]


def _seeded() -> ActivityStore:
    return store_of(
        snap("a", {"n": 0, "steps": [1]}, metadata={"m": 1}, subagentRunId="sub-1"),
        {"type": "TEXT_MESSAGE_START", "messageId": "m"},
    )


FATAL_CASES = [
    *((how, m, c) for m, c in FATAL_TEXT for how in ("dict", "ndjson", "sse")),
    *((how, m, c) for m, c in FATAL_TEXT_ONLY for how in ("ndjson", "sse")),
]


@pytest.mark.parametrize(("how", "members", "code"), FATAL_CASES)
def test_rule5_fatal_values_leave_the_store_exactly_as_before(
    how: str, members: str, code: str
) -> None:
    text = "{" + members + "}"
    s = _seeded()
    before, warnings_before, handled = s.to_json(), s.warnings, s.events_handled
    with pytest.raises(AguiMalformedError) as info:
        if how == "dict":
            s.handle_event(json.loads(text))
        elif how == "ndjson":
            s.feed(text.encode() + b"\n")
        else:
            s.feed(b"data: " + text.encode() + b"\n\n")
    assert info.value.code == code
    assert s.to_json() == before
    assert s.warnings == warnings_before and s.events_handled == handled
    # The fatal event is consumed; the store goes on with the next one.
    s.handle_event(delta("a", [{"op": "replace", "path": "/n", "value": 2}]))
    got = s.get("a")
    assert got is not None and got["content"]["n"] == 2


def test_rule5_unknown_material_is_dropped_or_stripped_with_warnings() -> None:
    s = started()
    w = s.handle_event({"type": "SOMETHING_NEW", "payload": 1})
    assert [(x.code, x.event_type) for x in w] == [("unknown_event_type", "SOMETHING_NEW")]
    w = s.handle_event(
        snap(
            "a",
            {"open": {"nested": [1]}},
            metadata={"vendor.key": 1},
            futureField=True,
        )
    )
    assert [x.code for x in w] == ["unknown_property"]
    assert "futureField" in w[0].reason
    s.handle_event(
        delta("a", [{"op": "add", "path": "/x", "value": 1, "note": "kept"}, {"op": "nope"}])
    )
    got = s.get("a")
    assert got is not None
    assert got["content"] == {"open": {"nested": [1]}, "x": 1}
    assert got["metadata"] == {"vendor.key": 1}
    assert [x.code for x in s.warnings][-1] == "patch_op_dropped"


def test_rule6_messages_snapshot() -> None:
    s = store_of(
        {"type": "TEXT_MESSAGE_START", "messageId": "u1", "role": "user"},
        snap("act", {"n": 1}),
        {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "draft"},
        {"type": "TEXT_MESSAGE_START", "messageId": "dropped"},
    )
    s.handle_event(
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [
                {"id": "n1", "role": "user", "content": "new"},
                {"id": "m1", "role": "assistant", "content": "final"},
                {"id": "u1", "role": "user", "content": "hello"},
                {"id": "r1", "role": "reasoning", "content": "thinking"},
            ],
        }
    )
    assert [m["id"] for m in s.messages()] == ["u1", "act", "m1", "n1", "r1"]
    assert s.run_input_messages() == [m for m in s.messages() if m["role"] != "activity"]
    s.handle_event(
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [{"id": "a2", "role": "activity", "activityType": "t", "content": {}}],
        }
    )
    # The snapshot carries an activity, so held activities it omits go; it carries no
    # reasoning message, so the held one survives.
    assert [m["id"] for m in s.messages()] == ["r1", "a2"]


def test_rule6_reasoning_and_activity_are_kept_only_when_the_snapshot_carries_none() -> None:
    s = started()
    s.handle_event(
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [
                {"id": "u1", "role": "user", "content": "go"},
                {"id": "r1", "role": "reasoning", "content": "first thought"},
                {"id": "a1", "role": "activity", "activityType": "t", "content": {"n": 1}},
            ],
        }
    )
    s.handle_event(snap("a2", {"n": 2}))
    # No reasoning and no activity message in this snapshot: both kinds survive, in place;
    # the user message it omits goes.
    s.handle_event(
        {"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "u2", "role": "user", "content": "x"}]}
    )
    assert [m["id"] for m in s.messages()] == ["r1", "a1", "a2", "u2"]
    # A reasoning message in the snapshot: held reasoning messages it omits go, activities stay.
    s.handle_event(
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [
                {"id": "u2", "role": "user", "content": "x"},
                {"id": "r2", "role": "reasoning", "content": "second thought"},
            ],
        }
    )
    assert [m["id"] for m in s.messages()] == ["a1", "a2", "u2", "r2"]
    # An activity in the snapshot replaces the held one by id, in place; other held
    # activities it omits go.
    s.handle_event(
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [
                {"id": "r2", "role": "reasoning", "content": "second thought"},
                {"id": "a2", "role": "activity", "activityType": "u", "content": {"n": 3}},
                {"id": "u2", "role": "user", "content": "x"},
            ],
        }
    )
    assert [m["id"] for m in s.messages()] == ["a2", "u2", "r2"]
    assert s.get("a2") == {"id": "a2", "role": "activity", "activityType": "u", "content": {"n": 3}}
    # The replaced activity is a live activity again: deltas apply to it.
    s.handle_event(delta("a2", [{"op": "replace", "path": "/n", "value": 4}], activityType="u"))
    got = s.get("a2")
    assert got is not None and got["content"] == {"n": 4}
    assert s.run_input_messages() == [
        {"id": "u2", "role": "user", "content": "x"},
        {"id": "r2", "role": "reasoning", "content": "second thought"},
    ]
    assert s.warnings == []


def test_rule6_unknown_roles_and_duplicates() -> None:
    s = store_of(snap("a", {}))
    w = s.handle_event(
        {
            "type": "MESSAGES_SNAPSHOT",
            "messages": [
                {"id": "f", "role": "future_role", "content": 1},
                {"id": "u", "role": "user", "content": "x"},
            ],
        }
    )
    assert [(x.code, x.message_id) for x in w] == [("unknown_message_role", "f")]
    assert [m["id"] for m in s.messages()] == ["a", "u"]
    before = s.to_json()
    with pytest.raises(AguiMalformedError) as info:
        s.handle_event(
            {
                "type": "MESSAGES_SNAPSHOT",
                "messages": [
                    {"id": "u", "role": "user", "content": "x"},
                    {"id": "u", "role": "user", "content": "y"},
                ],
            }
        )
    assert info.value.code == "duplicate_message_id"
    assert s.to_json() == before


def test_rule4_metadata_merges_when_the_result_is_not_an_object() -> None:
    s = store_of(snap("a", {"n": 0}, metadata={"k": 1}))
    w = s.handle_event(
        delta(
            "a", [{"op": "replace", "path": "", "value": [1]}], activityType="u", metadata={"j": 2}
        )
    )
    assert [x.code for x in w] == ["patch_result_not_object"]
    assert s.get("a") == {
        "id": "a",
        "role": "activity",
        "activityType": "t",
        "content": {"n": 0},
        "metadata": {"k": 1, "j": 2},
    }


def test_rule1_replace_false_creates_an_unseen_activity_with_its_own_values() -> None:
    s = store_of(snap("a", {"n": 1}, replace=False, subagentRunId="sub-1", metadata={"k": 1}))
    assert s.get("a") == {
        "id": "a",
        "role": "activity",
        "subagentRunId": "sub-1",
        "activityType": "t",
        "content": {"n": 1},
        "metadata": {"k": 1},
    }
    # replace: false is not a merge: members the held content lacks are not added.
    s.handle_event(snap("a", {"n": 1, "extra": True}, replace=False))
    got = s.get("a")
    assert got is not None and got["content"] == {"n": 1}


def test_text_message_chunks() -> None:
    s = started()
    w = s.handle_event({"type": "TEXT_MESSAGE_CHUNK", "delta": "orphan"})
    assert [x.code for x in w] == ["text_message_missing"]
    s.handle_event({"type": "TEXT_MESSAGE_CHUNK", "messageId": "c1", "delta": "Hel"})
    s.handle_event(snap("a", {}))
    s.handle_event({"type": "TEXT_MESSAGE_CHUNK", "delta": "lo"})  # continues c1
    s.handle_event({"type": "TEXT_MESSAGE_CHUNK", "messageId": "c2", "role": "user", "delta": "A"})
    s.handle_event({"type": "TEXT_MESSAGE_CHUNK", "delta": "B"})  # continues c2
    s.handle_event({"type": "TEXT_MESSAGE_END", "messageId": "c2"})
    w = s.handle_event({"type": "TEXT_MESSAGE_CHUNK", "delta": "late"})  # nothing open
    assert [x.code for x in w] == ["text_message_missing"]
    assert s.messages() == [
        {"id": "c1", "role": "assistant", "content": "Hello"},
        {"id": "a", "role": "activity", "activityType": "t", "content": {}},
        {"id": "c2", "role": "user", "content": "AB"},
    ]
    # A text event naming an activity is skipped; the activity is untouched.
    w = s.handle_event({"type": "TEXT_MESSAGE_CONTENT", "messageId": "a", "delta": "x"})
    assert [x.code for x in w] == ["text_message_conflict"]
    assert s.get("a") == {"id": "a", "role": "activity", "activityType": "t", "content": {}}


def test_rule7_run_input_messages_strip_activity() -> None:
    s = store_of(
        {"type": "TEXT_MESSAGE_START", "messageId": "u", "role": "user"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": "u", "delta": "go"},
        {"type": "TEXT_MESSAGE_END", "messageId": "u"},
        snap("a", {}),
    )
    assert s.run_input_messages() == [{"id": "u", "role": "user", "content": "go"}]
    assert len(s.activities()) == 1 and len(s) == 2


def finished(thread: str = "t", run: str = "r") -> dict[str, Any]:
    return {"type": "RUN_FINISHED", "threadId": thread, "runId": run}


def refused(s: ActivityStore, event: dict[str, Any], how: str = "dict") -> str | None:
    """The code of the AguiSequenceError `event` raises; the store must be unchanged by it."""
    before = (s.to_json(), s.warnings, s.events_handled)
    with pytest.raises(AguiSequenceError) as info:
        if how == "dict":
            s.handle_event(event)
        else:
            s.feed(json.dumps(event).encode() + b"\n")
    assert (s.to_json(), s.warnings, s.events_handled) == before
    return info.value.code


@pytest.mark.parametrize("how", ["dict", "ndjson"])
@pytest.mark.parametrize(
    "first",
    [
        snap("a", {}),
        delta("a", []),
        {"type": "TEXT_MESSAGE_START", "messageId": "m"},
        {"type": "MESSAGES_SNAPSHOT", "messages": []},
        {"type": "SOMETHING_NEW"},
        finished(),
    ],
    ids=lambda e: e["type"],
)
def test_lifecycle_the_first_event_is_run_started_or_run_error(
    first: dict[str, Any], how: str
) -> None:
    s = ActivityStore()
    assert refused(s, first, how) == "run_not_started"
    assert s.handle_event(RUN_STARTED) == []  # the refused event changed nothing
    t = ActivityStore()
    t.handle_event({"type": "RUN_ERROR", "message": "could not start"})
    assert refused(t, snap("a", {})) == "event_after_run_finished"


def test_lifecycle_no_second_run_started_while_a_run_is_open() -> None:
    s = store_of(snap("a", {"n": 0}))
    assert refused(s, RUN_STARTED) == "run_already_started"
    assert refused(s, {**RUN_STARTED, "runId": "r2"}) == "run_already_started"
    s.handle_event(delta("a", [{"op": "replace", "path": "/n", "value": 1}]))  # still open


def test_lifecycle_run_finished_names_the_open_run() -> None:
    s = store_of(snap("a", {}))
    for thread, run in (("t", "r2"), ("t2", "r"), ("x", "y")):
        assert refused(s, finished(thread, run)) == "run_id_mismatch"
    s.handle_event(finished("t", "r"))
    # RUN_ERROR carries no ids in the schema: it ends whichever run is open.
    u = store_of()
    u.handle_event({"type": "RUN_ERROR", "message": "boom"})
    assert refused(u, finished()) == "event_after_run_finished"


@pytest.mark.parametrize("how", ["dict", "ndjson"])
def test_lifecycle_after_run_finished_only_a_new_run_or_a_late_error(how: str) -> None:
    s = store_of(snap("a", {"n": 0}), finished())
    for late in (
        snap("a", {}),
        delta("a", [{"op": "replace", "path": "/n", "value": 1}]),  # the fast path declines
        {"type": "SOMETHING_NEW"},
        finished(),
    ):
        assert refused(s, late, how) == "event_after_run_finished"
    s.handle_event({"type": "RUN_ERROR", "message": "late"})
    s.handle_event({**RUN_STARTED, "runId": "r2"})
    s.handle_event(delta("a", [{"op": "replace", "path": "/n", "value": 2}]))
    s.handle_event(finished("t", "r2"))
    got = s.get("a")
    assert got is not None and got["content"] == {"n": 2}
    assert s.warnings == []


def test_lifecycle_partial_captures_may_begin_mid_run() -> None:
    s = ActivityStore(lifecycle="partial")
    assert s.lifecycle == "partial" and ActivityStore().lifecycle == "strict"
    s.feed(ndjson([snap("a", {"n": 0}), delta("a", [{"op": "replace", "path": "/n", "value": 1}])]))
    s.handle_event(finished("unknown", "ids"))  # the capture's run: ids never seen
    assert refused(s, snap("b", {})) == "event_after_run_finished"
    s.handle_event(RUN_STARTED)
    # From the first run event on, every rule applies.
    assert refused(s, RUN_STARTED) == "run_already_started"
    assert refused(s, finished("t", "other")) == "run_id_mismatch"
    got = s.get("a")
    assert got is not None and got["content"] == {"n": 1}
    with pytest.raises(ValueError, match="lifecycle"):
        ActivityStore(lifecycle="lax")  # type: ignore[arg-type]


AGUI_VALIDATE_FIXTURES = Path(ag_ui_validate.__file__).parent / "spec" / "fixtures" / "invalid"


@pytest.mark.parametrize(
    "fixture",
    sorted(p.name for p in (AGUI_VALIDATE_FIXTURES.parent / "valid").glob("*.jsonl")),
)
def test_lifecycle_accepts_the_ag_ui_validate_valid_streams(fixture: str) -> None:
    s = ActivityStore()
    s.feed((AGUI_VALIDATE_FIXTURES.parent / "valid" / fixture).read_bytes())
    s.finish()
    assert s.warnings == [] and s.events_handled > 2


@pytest.mark.parametrize(
    ("fixture", "code"),
    [
        ("AGUI001-first-event-not-run-started", "run_not_started"),
        ("AGUI002-duplicate-run-started", "run_already_started"),
        ("AGUI004-event-after-terminal", "event_after_run_finished"),
        ("AGUI008-unstable-run-ids", "run_id_mismatch"),
    ],
)
def test_lifecycle_agrees_with_ag_ui_validate_fixtures(fixture: str, code: str) -> None:
    # The independent validator's own invalid streams: each is refused with the typed error.
    stream = (AGUI_VALIDATE_FIXTURES / fixture / "stream.jsonl").read_bytes()
    with pytest.raises(AguiSequenceError) as info:
        ActivityStore().feed(stream)
    assert info.value.code == code


def test_known_event_types_are_accepted_without_warnings() -> None:
    s = store_of(
        {"type": "STEP_STARTED", "stepName": "s"},
        {"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f"},
        {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{}"},
        {"type": "TOOL_CALL_END", "toolCallId": "c"},
        {"type": "STATE_SNAPSHOT", "snapshot": {"x": 1}},
        {"type": "STATE_DELTA", "delta": []},
        {"type": "REASONING_START", "messageId": "r"},
        {"type": "REASONING_END", "messageId": "r"},
        {"type": "CUSTOM", "name": "c", "value": None},
        {"type": "RAW", "event": {"anything": 1}},
        {"type": "STEP_FINISHED", "stepName": "s"},
    )
    assert s.warnings == []
    assert s.events_handled == 12


def test_warnings_are_structured_values() -> None:
    w = started().handle_event(delta("nope", []))[0]
    assert isinstance(w, _core.AguiWarning)
    assert w.to_dict() == {
        "code": "delta_target_missing",
        "eventType": "ACTIVITY_DELTA",
        "messageId": "nope",
        "reason": w.reason,
    }
    assert w == _core.AguiWarning(
        "delta_target_missing", w.reason, event_type="ACTIVITY_DELTA", message_id="nope"
    )
    assert "delta_target_missing" in repr(w)
    assert w.code in _core.agui_warning_codes()


def test_to_json_is_messages_as_bytes() -> None:
    s = store_of(
        snap("a", {"big": 2**70, "f": 1.5, "s": "é"}),
        {"type": "TEXT_MESSAGE_START", "messageId": "m"},
    )
    assert json.loads(s.to_json()) == s.messages()
    assert s.get("a") == {
        "id": "a",
        "role": "activity",
        "activityType": "t",
        "content": {"big": 2**70, "f": 1.5, "s": "é"},
    }


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=repr)
def test_nan_and_infinity_from_python_floats_are_malformed(bad: float) -> None:
    s = store_of(snap("a", {"n": 0}))
    before = s.to_json()
    for event in (
        snap("b", {"f": bad}),
        snap("b", {"f": [1, {"g": bad}]}),
        delta("a", [{"op": "replace", "path": "/n", "value": bad}]),
        snap("b", {}, metadata={"k": bad}),
        snap("b", {}, timestamp=bad),
    ):
        with pytest.raises(AguiMalformedError, match="not a JSON number") as info:
            s.handle_event(event)
        assert info.value.code == "non_finite_number"
    assert s.to_json() == before and s.warnings == []


def test_non_json_python_values_are_type_errors() -> None:
    s = started()
    for bad in (
        snap("a", {"x": {1, 2}}),
        snap("a", {1: "int key"}),
    ):
        with pytest.raises(TypeError):
            s.handle_event(bad)
    for bad in (snap("\ud800", {}), snap("a", {"\udc00": 1})):
        with pytest.raises(TypeError, match="surrogate"):
            s.handle_event(bad)
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(TypeError):
        s.handle_event(snap("a", loop))
    assert len(s) == 0


# ---- bytes: one JSON event, NDJSON, SSE, arbitrary chunk splits ----

EVENTS: list[dict[str, Any]] = [
    {"type": "RUN_STARTED", "threadId": "t", "runId": "r"},
    snap("a", {"steps": [], "label": "grip ✓"}, metadata={"k": 1}),
    delta("a", [{"op": "add", "path": "/steps/-", "value": "x\ny"}]),
    {"type": "TEXT_MESSAGE_CHUNK", "messageId": "m", "delta": "hello"},
    delta("a", [{"op": "add", "path": "/n", "value": 1}]),
    {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"},
]


def reference() -> list[dict[str, Any]]:
    s = ActivityStore()
    for e in EVENTS:  # RUN_STARTED first
        s.handle_event(e)
    return s.messages()


def ndjson(events: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def sse(events: list[dict[str, Any]], newline: bytes = b"\n") -> bytes:
    out = b": capture\n".replace(b"\n", newline)
    for e in events:
        out += b"data: " + json.dumps(e, ensure_ascii=False).encode() + newline + newline
    return out


def feed_chunks(data: bytes, cuts: list[int]) -> ActivityStore:
    s = ActivityStore()
    bounds = [0, *sorted(set(cuts)), len(data)]
    for lo, hi in itertools.pairwise(bounds):
        s.feed(data[lo:hi])
    s.finish()
    return s


@pytest.mark.parametrize(
    "data",
    [ndjson(EVENTS), sse(EVENTS), sse(EVENTS, b"\r\n"), sse(EVENTS, b"\r")],
    ids=["ndjson", "sse-lf", "sse-crlf", "sse-cr"],
)
def test_every_two_way_split_gives_the_same_history(data: bytes) -> None:
    want = reference()
    for cut in range(len(data) + 1):
        assert feed_chunks(data, [cut]).messages() == want


@given(st.data())
def test_random_multi_splits_give_the_same_history(data: st.DataObject) -> None:
    raw = data.draw(st.sampled_from([ndjson(EVENTS), sse(EVENTS), sse(EVENTS, b"\r\n")]))
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=12))
    assert feed_chunks(raw, cuts).messages() == reference()


def pretty(events: list[dict[str, Any]]) -> bytes:
    # Multi-line values, with brackets and escapes inside strings to mislead a bracket scan.
    tricky = snap("z", {"s": 'a}"]\\{[\n', "deep": [[{"k": ["}"]}]]})
    return b"\n".join(json.dumps(e, indent=1).encode() for e in [events[0], tricky, *events[1:]])


@given(st.data())
def test_pretty_printed_events_split_anywhere_give_the_same_history(data: st.DataObject) -> None:
    raw = pretty(EVENTS)
    tricky = {"s": 'a}"]\\{[\n', "deep": [[{"k": ["}"]}]]}
    want = [{"id": "z", "role": "activity", "activityType": "t", "content": tricky}, *reference()]
    size = data.draw(st.integers(1, 64))
    cuts = list(range(size, len(raw), size))
    cuts += data.draw(st.lists(st.integers(0, len(raw)), max_size=6))
    # Every event is handled as soon as its last byte arrives: no finish() needed.
    s = ActivityStore()
    bounds = [0, *sorted(set(cuts)), len(raw)]
    for lo, hi in itertools.pairwise(bounds):
        s.feed(raw[lo:hi])
    assert s.messages() == want and s.pending_bytes == 0


def test_single_json_event_and_pretty_printed() -> None:
    s = started()
    s.feed(json.dumps(snap("a", {"n": 1}), indent=2).encode())
    assert s.get("a") is not None
    s.feed(bytearray(b'{"type": "ACTIVITY_DELTA", "messageId": "a", "activityType": "t",'))
    assert s.pending_bytes > 0
    s.feed(b' "patch": [{"op": "replace", "path": "/n", "value": 2}]}')
    assert s.pending_bytes == 0
    got = s.get("a")
    assert got is not None and got["content"] == {"n": 2}


def test_garbage_bytes_are_decode_errors_and_the_stream_recovers() -> None:
    s = ActivityStore()
    with pytest.raises(AguiDecodeError) as info:
        s.feed(b'{"type": "RUN_STARTED", "threadId": "t", "runId": "r"}\n{not json}\n')
    assert info.value.code == "invalid_json"
    s.feed(ndjson([snap("a", {})]))
    assert s.events_handled == 2 and len(s) == 1
    t = ActivityStore()
    t.feed(b'{"type": "RUN_STARTED", "thr')
    with pytest.raises(AguiDecodeError) as info:
        t.finish()
    assert info.value.code == "truncated_stream"


def test_fatal_event_mid_feed_keeps_earlier_and_buffers_later() -> None:
    s = started()
    data = ndjson([snap("a", {}), snap("b", {}, replace=None), snap("c", {})])
    with pytest.raises(AguiMalformedError):
        s.feed(data)
    assert [m["id"] for m in s.messages()] == ["a"]
    s.feed(b"")
    assert [m["id"] for m in s.messages()] == ["a", "c"]


@given(st.binary(max_size=300))
def test_any_bytes_give_warnings_or_a_typed_error(data: bytes) -> None:
    s = ActivityStore()
    for chunk in (data[: len(data) // 2], data[len(data) // 2 :]):
        try:
            s.feed(chunk)
        except AguiError:
            pass
    try:
        s.finish()
    except AguiError:
        pass


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "type",
                "messageId",
                "activityType",
                "content",
                "patch",
                "replace",
                "metadata",
                "subagentRunId",
                "timestamp",
                "messages",
                "delta",
                "role",
            ]
        ),
        json_values
        | st.sampled_from(["ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA", "MESSAGES_SNAPSHOT", "a"]),
    )
)
def test_any_event_dict_is_applied_warned_or_rejected_atomically(event: dict[str, Any]) -> None:
    s = store_of(snap("a", {"n": [1, 2]}, metadata={"m": 0}))
    before = s.to_json()
    try:
        s.handle_event(event)
    except AguiError:
        assert s.to_json() == before
    for m in s.activities():
        assert isinstance(m["content"], dict)


def test_code_lists_match_the_rust_core() -> None:
    from tether.agui import ERROR_CODES, WARNING_CODES

    assert sorted(WARNING_CODES) == sorted(_core.agui_warning_codes())
    assert sorted(ERROR_CODES) == sorted(_core.agui_error_codes())


def test_numbers_beyond_double_range_read_like_python_json() -> None:
    text = '{"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t", "content": %s}'
    content = '{"big": 1e400, "small": -1e400, "int": 123456789012345678901234567890}'
    s = started()
    s.feed((text % content).encode() + b"\n")
    got = s.get("a")
    assert got is not None and got["content"] == json.loads(content)


# Each delta nests the content one level deeper with operations of constant size.
DEEPEN = (
    b'{"type": "ACTIVITY_DELTA", "messageId": "a", "activityType": "t", "patch": ['
    b'{"op": "add", "path": "/b", "value": {}}, {"op": "move", "from": "/a", "path": "/b/a"},'
    b' {"op": "move", "from": "/b", "path": "/a"}]}\n'
)
DEEP_SNAPSHOT = (
    b'{"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t", "content": {"a": {}}}\n'
)


def _depth(value: Any) -> int:
    depth = 0
    while isinstance(value, dict) and value:
        value, depth = value["a"], depth + 1
    return depth


def test_content_never_nests_past_the_limit() -> None:
    s = started()
    s.feed(DEEP_SNAPSHOT)
    w = s.feed(DEEPEN * 2000)
    assert {x.code for x in w} == {"content_too_deep"}
    got = s.get("a")
    assert got is not None
    assert _depth(got["content"]) == 511  # 512 levels of objects, the innermost empty
    assert json.loads(s.to_json())[0]["content"] == got["content"]
    # The skipped deltas change nothing else, and a snapshot resets the activity.
    s.handle_event(snap("a", {"a": {"fresh": True}}))
    assert s.feed(DEEPEN) == []
    got = s.get("a")
    assert got is not None and got["content"] == {"a": {"a": {"fresh": True}}}


@pytest.mark.slow
def test_a_flood_of_deepening_deltas_does_not_crash_the_process() -> None:
    # Without the depth bound, 200k such deltas (30 MB) overflow the native stack on drop.
    code = (
        "from tether import _core\n"
        f"s = _core.ActivityStore(); s.handle_event({RUN_STARTED!r}); s.feed({DEEP_SNAPSHOT!r})\n"
        f"for _ in range(200): s.feed({DEEPEN!r} * 1000)\n"
        "s.messages(); s.to_json(); del s\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("how", ["dict", "ndjson"])
def test_copy_bombs_are_skipped_not_applied(how: str) -> None:
    # 40 copies of the root would need 2^40 times the content; nothing is tried out.
    s = store_of(snap("a", {"s": "x" * 100}))
    bomb = _copy_bomb("a", 40)
    missing = _copy_bomb("missing", 40)
    for event in (bomb, missing):
        w = s.handle_event(event) if how == "dict" else s.feed(json.dumps(event).encode() + b"\n")
        assert len(w) == 1
    assert [x.code for x in s.warnings] == ["content_too_large", "delta_target_missing"]
    assert s.get("a") == {
        "id": "a",
        "role": "activity",
        "activityType": "t",
        "content": {"s": "x" * 100},
    }
