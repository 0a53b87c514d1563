"""The publisher's framing and the overlay, through the Python API: offsets, chunking of any
multibyte text, the cap, coalescing, discontinuities, the reasons and reconciliation."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tether.live import (
    LiveEventInvalid,
    LiveOverlay,
    LivePublisher,
    LiveSubscriber,
    LiveUsageError,
    live_mark_reasons,
    validate_live_event,
)

from tests.live.conftest import MSG, SESSION, TURN, WS, delta, encode, turn


def frames(pub: LivePublisher) -> list[dict[str, Any]]:
    out = []
    while (f := pub.poll_frame()) is not None:
        out.append(json.loads(f))
    return out


def tool_outputs(fs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d["payload"]["data"]["toolOutput"]
        for f in fs
        for d in f["deliveries"]
        if d["kind"] == "event" and "toolOutput" in d["payload"]["data"]
    ]


def apply_all(pub: LivePublisher, view: LiveOverlay) -> list[str]:
    sub = LiveSubscriber(epoch=pub.epoch, seq=pub.seq)
    results = []
    while (f := pub.poll_frame()) is not None:
        outcome = sub.handle_frame(f)
        assert outcome.fault is None
        results += view.apply_outcome(outcome)
    return results


@given(
    parts=st.lists(st.text(max_size=50), max_size=12),
    chunk=st.integers(5, 64),
)
def test_every_chunking_of_multibyte_text_round_trips(parts: list[str], chunk: int) -> None:
    pub = LivePublisher(WS, SESSION, epoch=1, max_chunk_bytes=chunk, truncation_marker="<cut>")
    view = LiveOverlay(WS, SESSION)
    for i, p in enumerate(parts):
        pub.tool_output(MSG, TURN, p, now_ms=i + 1)
    fs = frames(pub)
    outs = tool_outputs(fs)
    if parts:
        assert outs[0]["operation"] == "set"
        offset = len(outs[0]["text"].encode())
        for o in outs[1:]:
            assert o["operation"] == "append_text"
            assert o["offsetBytes"] == offset
            offset += len(o["text"].encode())
        assert all(len(o["text"].encode()) <= chunk for o in outs)
        assert "".join(o["text"] for o in outs) == "".join(parts)
    for f in fs:
        sub_view = view.apply_outcome(
            LiveSubscriber(epoch=1, seq=f["seq"] - 1).handle_frame(encode(f))
        )
        assert set(sub_view) == {"applied"}
    message = view.message(MSG)
    text = None if message is None else message["payload"]["output"]["text"]
    assert text == ("".join(parts) if parts else None)


def test_default_chunks_are_128_kib_and_output_caps_at_1_mib() -> None:
    pub = LivePublisher(WS, SESSION, epoch=1)
    line = "ü" * 1000 + "\n"  # 2001 bytes
    for i in range(600):  # 1.2 MB
        pub.tool_output(MSG, TURN, line, now_ms=i + 1)
    outs = tool_outputs(frames(pub))
    sizes = [len(o["text"].encode()) for o in outs]
    assert max(sizes) <= 128 * 1024 and sum(sizes) == pub.emitted_bytes(MSG)
    text = "".join(o["text"] for o in outs)
    assert len(text.encode()) <= 1 << 20
    assert text.endswith("\n[tether: output truncated]\n")
    assert (pub.dropped_bytes(MSG) or 0) > 0
    assert pub.emitted_bytes(MSG) == len(text.encode())


def test_one_big_push_is_cut_on_a_character_boundary() -> None:
    pub = LivePublisher(WS, SESSION, epoch=1)
    pub.tool_output(MSG, TURN, "a" + "ü" * 100_000, now_ms=1)
    sizes = [len(o["text"].encode()) for o in tool_outputs(frames(pub))]
    assert sizes == [128 * 1024 - 1, 200_001 - (128 * 1024 - 1)]


def test_offset_mismatch_marks_the_message_and_changes_nothing() -> None:
    view = LiveOverlay(WS, SESSION)
    assert view.apply(delta(toolOutput={"operation": "set", "text": "ab"})) == "applied"
    wrong = delta(toolOutput={"operation": "append_text", "text": "c", "offsetBytes": 1})
    assert view.apply(wrong) == "offset_mismatch"
    assert view.message(MSG)["payload"]["output"]["text"] == "ab"  # type: ignore[index]
    assert view.marks == [("message", MSG, "offset_mismatch")]
    assert view.needs_reconciliation


def test_each_reason() -> None:
    append = {"operation": "append_text", "text": "x", "offsetBytes": 0}
    view = LiveOverlay(WS, SESSION)
    assert view.apply(delta(toolOutput=append)) == "append_without_anchor"
    view = LiveOverlay(WS, SESSION)
    view.apply(delta(toolOutput={"operation": "set", "text": ""}, status="completed"))
    assert view.apply(delta(toolOutput=append)) == "late_after_terminal"
    view = LiveOverlay(WS, SESSION)
    view.apply(turn("settled"))
    assert view.apply(delta(toolOutput={"operation": "set", "text": ""})) == "late_after_terminal"
    view = LiveOverlay("another-ws", SESSION)
    assert view.apply(delta(status="x")) == "identity_mismatch"
    view = LiveOverlay(WS, SESSION)
    view.apply(delta(status="running"))
    assert view.apply(delta(status="running", role="assistant")) == "identity_mismatch"
    assert sorted(live_mark_reasons()) == sorted(
        ["offset_mismatch", "append_without_anchor", "late_after_terminal", "identity_mismatch"]
    )


def test_payload_set_and_unset_and_content() -> None:
    view = LiveOverlay(WS, SESSION)
    view.apply(delta(payloadSet={"a": 1, "b": [1, 2]}))
    view.apply(delta(payloadUnset=["a"], payloadSet={"c": {"d": None}}))
    view.apply(delta(kind="tool_call", content={"operation": "set", "value": "he"}))
    view.apply(delta(content={"operation": "append_text", "text": "llo"}))
    m = view.message(MSG)
    assert m is not None
    assert m["payload"] == {"b": [1, 2], "c": {"d": None}}
    assert m["content"] == "hello"


def test_adjacent_pure_appends_coalesce_only_when_contiguous() -> None:
    pub = LivePublisher(WS, SESSION, epoch=1)
    for i, piece in enumerate(["a", "b", "c", "d"]):
        pub.tool_output(MSG, TURN, piece, now_ms=i + 1)
    outs = tool_outputs(frames(pub))
    assert outs == [
        {"operation": "set", "text": "a"},
        {"operation": "append_text", "text": "bcd", "offsetBytes": 1},
    ]
    # Explicit appends that leave a hole stay apart; a structured delta between two appends
    # keeps them apart too.
    pub = LivePublisher(WS, SESSION, epoch=1)
    pub.tool_output(MSG, TURN, "0123", now_ms=1)
    pub.publish(delta(toolOutput={"operation": "append_text", "text": "x", "offsetBytes": 4}))
    pub.publish(delta(toolOutput={"operation": "append_text", "text": "y", "offsetBytes": 9}))
    pub.publish(delta(status="running"))
    pub.tool_output(MSG, TURN, "z", now_ms=2)
    outs = tool_outputs(frames(pub))
    assert [o.get("offsetBytes") for o in outs] == [None, 4, 9, 10]


def test_a_delta_after_its_turn_settled_becomes_a_discontinuity() -> None:
    pub = LivePublisher(WS, SESSION, epoch=1)
    view = LiveOverlay(WS, SESSION)
    sub = LiveSubscriber(epoch=1, seq=0)
    pub.tool_output(MSG, TURN, "moving\n", now_ms=1)
    pub.publish(turn("settled"))
    assert pub.is_turn_settled(TURN)
    pub.tool_output(MSG, TURN, "late read-back\n", now_ms=9)
    pub.publish(delta(payloadSet={"late": True}))
    fs = frames(pub)
    last = fs[-1]["deliveries"][-1]
    assert last["kind"] == "discontinuity"
    assert last["payload"] == {
        "reason": "delta_after_settled",
        "reconcileKeys": [
            {
                "kind": "message",
                "workspaceId": WS,
                "agentSessionId": SESSION,
                "turnId": TURN,
                "messageId": MSG,
            }
        ],
    }
    outcome = sub.handle_frame(encode(fs[-1]))
    assert outcome.reread
    assert view.apply_outcome(outcome)[-1] == "late_after_terminal"
    assert outcome.deliveries[-1].reconcile_keys == [("message", MSG)]


def test_reconcile_replaces_state_but_a_terminal_entry_stands() -> None:
    view = LiveOverlay(WS, SESSION)
    view.apply(delta(toolOutput={"operation": "set", "text": "done"}, completedAtUnixMs=9))
    record = view.snapshot()
    lagging = json.loads(json.dumps(record))
    lagging["messages"][MSG] = {
        "turnId": TURN,
        "role": "tool",
        "kind": "tool_call",
        "payload": {"output": {"text": "do"}},
        "status": "running",
    }
    assert view.reconcile(lagging) == [("message", MSG)]
    assert view.snapshot() == record
    caught_up = json.loads(json.dumps(lagging))
    caught_up["messages"][MSG]["status"] = "completed"
    assert view.reconcile(caught_up) == []
    assert view.snapshot() == caught_up


def test_reconcile_refuses_another_session_and_bad_records() -> None:
    view = LiveOverlay(WS, SESSION)
    record = view.snapshot()
    with pytest.raises(LiveUsageError) as info:
        view.reconcile({**record, "agentSessionId": "other"})
    assert info.value.code == "session_mismatch"
    with pytest.raises(LiveEventInvalid) as bad:
        view.reconcile({**record, "messages": {MSG: {"turnId": TURN}}})
    assert (bad.value.code, bad.value.path) == (
        "missing_field",
        "/messages/" + MSG.replace("/", "~1") + "/role",
    )


def test_publisher_misuse_is_a_usage_error() -> None:
    with pytest.raises(LiveUsageError) as info:
        LivePublisher(WS, SESSION, epoch=1, max_chunk_bytes=2)
    assert info.value.code == "invalid_config"
    pub = LivePublisher(WS, SESSION, epoch=1)
    pub.tool_output(MSG, TURN, "x", now_ms=1)
    with pytest.raises(LiveUsageError, match="message_conflict"):
        pub.tool_output(MSG, "receipt:other", "x", now_ms=1)
    with pytest.raises(LiveUsageError, match="session_mismatch"):
        pub.publish(
            validate_live_event(
                encode(
                    {**delta(status="x"), "agentSessionId": "o"}
                    | {"data": {**delta(status="x")["data"], "agentSessionId": "o"}}
                )
            )
        )


def test_a_dict_event_nests_no_deeper_than_its_text_may() -> None:
    """A dict event nested past 64 levels passed validation (its text was refused `too_deep`);
    published, its frame was refused by every subscriber, which then failed for good."""
    nested: Any = 1
    for _ in range(70):
        nested = {"a": nested}
    event = delta(payloadSet={"x": nested})
    with pytest.raises(LiveEventInvalid) as as_text:
        validate_live_event(encode(event))
    with pytest.raises(LiveEventInvalid) as as_dict:
        validate_live_event(event)
    assert as_dict.value.code == as_text.value.code == "too_deep"
    pub = LivePublisher(WS, SESSION, epoch=1)
    with pytest.raises(LiveEventInvalid):
        pub.publish(event)
    assert pub.poll_frame() is None  # nothing was queued


def test_a_publisher_refuses_an_epoch_its_subscribers_cannot_read() -> None:
    """An epoch past 2^53 - 1 was taken, and every frame then refused by the subscriber
    (`unsafe_integer at /epoch`)."""
    with pytest.raises(LiveUsageError) as info:
        LivePublisher(WS, SESSION, epoch=2**53)
    assert info.value.code == "invalid_config"
    last = LivePublisher(WS, SESSION, epoch=2**53 - 1)
    outcome = LiveSubscriber(epoch=2**53 - 1).handle_frame(last.heartbeat())
    assert outcome.fault is None and outcome.epoch == 2**53 - 1
