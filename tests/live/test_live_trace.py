"""The device trace from the operations journal and the catalog: a real robot move on the
DYNAMIXEL emulator (a real pty, the real wire protocol) through the runtime on SQLite files,
published by `LiveFeed` through the Rust framer, carried by `LiveServer` to a `LiveClient` and
applied to its overlay; an Unknown parked for an operator and decided shows in the trace too."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from tether.activities import ActivityKey, ActivityRecord, Decision
from tether.emulators.dynamixel import DynamixelEmulator, Fault
from tether.families.robot_move.family import intent
from tether.families.robot_move.request import KIND_ABSOLUTE, MoveRequest
from tether.live import (
    LiveClient,
    LiveFeed,
    LiveOverlay,
    LiveSubscriber,
    TraceLog,
    message_id_for,
)
from tether.live._trace import TraceLine, render_fields
from tether.live.ws import LiveServer
from tether.operations import Journal, Operation
from tether.runtime import Family, Host

from tests._hosts import drain

sys.path.insert(0, str(Path(__file__).parents[1] / "adapters"))
import _dxl_fixtures
from _dxl_setup import GOALS, TARGETS
from tether.adapters.dynamixel import tables

# The DYNAMIXEL fixtures of tests/adapters (an emulator on a real pty, its host config, the
# robot_move family), as fixtures of this module.
emulator = _dxl_fixtures.emulator
config = _dxl_fixtures.config
family = _dxl_fixtures.family

KEY = ActivityKey("w", KIND_ABSOLUTE, "move-1")
REQUEST = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS})


def feed_for(host: Host, tmp_path: Path, **kw: Any) -> LiveFeed:
    journal = Journal(tmp_path / "data" / "robot_move")

    def records() -> list[ActivityRecord]:
        r = host.get(KEY)
        return [] if r is None else [r]

    def operation(r: ActivityRecord) -> Operation | None:
        return None if r.operation_id is None else journal.get(r.operation_id)

    return LiveFeed("ws", "w", records, operation, **kw)


def test_a_real_move_traces_its_commands_in_order_and_round_trips(
    family: Family, tmp_path: Path
) -> None:
    frames: list[bytes] = []
    with Host(tmp_path / "data", [family], workers=0, observe=False) as host:
        feed = feed_for(host, tmp_path, max_chunk_bytes=64)  # many chunks per sync
        feed.attach(lambda frame, seq: frames.append(frame))
        host.create_world("w")
        host.commit_tick("w", [intent("move-1", REQUEST)])
        feed.sync()
        assert drain(host) == 1
        feed.sync()
        host.observe_once()
        feed.sync()
        record = host.get(KEY)
        assert record is not None and record.settlement is not None
        op = Journal(tmp_path / "data" / "robot_move").get(str(record.operation_id))
        assert op is not None
        canon = feed.canonical()
    text = feed.trace(KEY)
    lines = text.splitlines()
    # Every command of the sent log, in its order, one line each, in radians.
    sent = [ln for ln in lines if " sent " in ln]
    assert [re.search(r"sent ([a-z_]+)", ln).group(1) for ln in sent] == [  # type: ignore[union-attr]
        s["instruction"] for s in op.sent()
    ]
    assert [s["instruction"] for s in op.sent()][-1] == "action"
    goal_lines = [ln for ln in sent if "reg_write" in ln]
    rad = {i: f"{round(tables.ticks_to_radians(t), 6):.6g}" for i, t in GOALS.items()}
    assert goal_lines == [
        f"attempt 1 sent reg_write: goal={rad[1]} rad id=1 joint=a",
        f"attempt 1 sent reg_write: goal={rad[2]} rad id=2 joint=b",
    ]
    assert lines[0] == "admitted by tick 1 of run " + record.source.run_id
    # The catalog's attempts (every claim) and the journal's (every start) are told apart: the
    # start names the catalog attempt and the fence that ran it.
    assert "attempt 1 started: catalog_attempt=1 fence=1" in lines
    assert any(ln.startswith("result recorded by catalog attempt 1: ") for ln in lines)
    assert "move arm to a=0.5 rad b=-0.3 rad" in lines
    assert any(
        ln.startswith("attempt 1 read back its pre-image: first_motion=true") for ln in lines
    )
    done = f"attempt 1 result completed: goals a={rad[1]} rad b={rad[2]} rad; final a="
    assert any(ln.startswith(done) for ln in lines)
    assert lines[-1].startswith("settled, observed by tick 2")
    # Never a raw register value (ticks) in a line.
    for ticks in GOALS.values():
        assert str(ticks) not in text
    # The frames: the first chunk a set, every later one an append at the bytes emitted so far;
    # applied in order they rebuild the canonical record exactly.
    outputs = [
        d["payload"]["data"]["toolOutput"]
        for f in frames
        for d in json.loads(f)["deliveries"]
        if "toolOutput" in d["payload"].get("data", {})
    ]
    assert outputs[0]["operation"] == "set"
    offset = len(outputs[0]["text"].encode())
    for o in outputs[1:]:
        assert o["operation"] == "append_text" and o["offsetBytes"] == offset
        assert len(o["text"].encode()) <= 64
        offset += len(o["text"].encode())
    assert offset == len(text.encode())
    sub, view = LiveSubscriber(epoch=canon.epoch, seq=0), LiveOverlay("ws", "w")
    for f in frames:
        outcome = sub.handle_frame(f)
        assert outcome.fault is None and not outcome.reread
        assert "applied" in view.apply_outcome(outcome) or not outcome.deliveries
    assert not view.needs_reconciliation
    assert view.snapshot() == canon.record
    message = canon.record["messages"][message_id_for(KEY)]
    assert message["payload"]["output"]["text"] == text and message["status"] == "completed"
    (turn,) = canon.record["turns"].values()
    assert turn["phase"] == "settled" and turn["outcome"] == "completed"


def status(c: LiveClient) -> str | None:
    m = c.overlay.message(message_id_for(KEY))
    return None if m is None else m.get("status")


def test_a_parked_move_and_the_operator_decision_reach_a_websocket_client(
    emulator: DynamixelEmulator, family: Family, tmp_path: Path
) -> None:
    class Clock:
        now = 1_000_000

        def __call__(self) -> int:
            return self.now

    clock = Clock()
    with Host(
        tmp_path / "data", [family], workers=0, observe=False, clock=clock, lease_ms=5_000
    ) as host:
        feed = feed_for(host, tmp_path)
        with LiveServer(
            feed,
            authorize=lambda c: "t" if c.token == "tok" else None,
            allowed_origins=[None],
            heartbeat_s=0.5,
            sync_s=0.02,
        ) as srv:  # fmt: skip  (the server's pump syncs the feed from the catalog)

            async def main() -> LiveClient:
                c = LiveClient(
                    srv.url, feed.canonical, workspace_id="ws", agent_session_id="w", token="tok"
                )
                await c.connect()
                for _ in range(200):
                    if srv.subscribers:
                        break
                    await asyncio.sleep(0.01)
                host.create_world("w")
                emulator.inject(Fault("alert", id=2, value=0x20, instruction="action"))
                host.commit_tick("w", [intent("move-1", REQUEST)])
                await asyncio.to_thread(drain, host)
                clock.now += 10_000
                await asyncio.to_thread(drain, host)  # reconcile-only: Unknown, parked
                while c.needs_reread or status(c) != "waiting":
                    await c.receive(5)
                parked = host.get(KEY)
                assert parked is not None and parked.awaiting_decision
                host.catalog.resolve(
                    KEY,
                    Decision.abandon(
                        evidence_revision=parked.evidence_revision, operator="alice", note="hw"
                    ),
                )
                while c.needs_reread or status(c) != "settling":  # a failed result, not observed
                    await c.receive(5)
                await c.close()
                return c

            c = asyncio.run(main())
        canon = feed.canonical()
    text = feed.trace(KEY)
    assert "reconciled: outcome unknown, evidence revision 1" in text
    assert "operator alice decided abandon on evidence revision 1 (hw)" in text
    assert "failed result recorded by an operator decision" in text
    assert not c.needs_reread
    assert c.snapshot() == canon.record
    (x,) = [i for i in canon.record["interactions"].values()]
    assert x["kind"] == "approval" and x["status"] == "answered"


def test_trace_log_appends_only_new_facts_and_units_are_si() -> None:
    log = TraceLog()
    a, b, c = (TraceLine(k, t, f"line {k}") for k, t in (("a", 1), ("b", 2), ("c", 3)))
    assert log.update([a, b]) == "line a\nline b\n"
    assert log.update([c, a, b]) == "line c\n"  # a later read may order them otherwise
    assert log.update([a]) == "" and log.text == "line a\nline b\nline c\n" and log.lines == 3
    fields = render_fields(
        {"speed_rad_s": 0.5, "goal_rad": 1.25, "present_position": 2048, "id": 3, "ok": True,
         "t_ms": 99, "state": {"joints": {"1": {"goal_position": 2100}}}, "note": "a\nb"}
    )  # fmt: skip
    assert fields == "speed=0.5 rad/s goal=1.25 rad id=3 ok=true note=a b"


def test_a_pre_image_read_after_some_commands_is_traced_where_it_was_read(
    tmp_path: Path,
) -> None:
    """The robot move turns torque on, then reads its pre-image: a rebuilt trace puts that
    read between those commands and the staged goal, as a live poll saw them happen."""
    from tether.live._trace import journal_lines

    op = Journal(tmp_path / "j").bind("op-1", {"robot": "arm"})
    op.start(1, {"started_at_ms": 1})
    op.log_sent({"attempt": 1, "instruction": "profile_velocity", "t_ms": 2})
    op.log_sent({"attempt": 1, "instruction": "torque_enable", "t_ms": 2})
    assert op.record_preimage(1, {"state": {"a": 1}}) == {"state": {"a": 1}}
    op.log_sent({"attempt": 1, "instruction": "reg_write", "t_ms": 2})
    keys = [line.key for line in journal_lines(op)]
    assert keys == ["bound", "start:1", "sent:0", "sent:1", "preimage:1", "sent:2"]
    assert op.preimage(1) == {"state": {"a": 1}} and op.preimage_position(1) == 2
    with pytest.raises(ValueError):
        op.record_preimage(2, {"journal_sent_before": 0})


def test_a_moves_first_unknown_conclusion_is_worded_with_the_stops_that_cut_it() -> None:
    """`concluded-N` (when a reconcile first concluded the attempt Unknown, and which stops
    counted then) reads as what it is, never as a retry guard's proof."""
    from tether.live import Fact
    from tether.live._wordings import robot_move_wording

    doc = {
        "proof": "concluded-2",
        "for_attempt": 2,
        "recorded_at_ms": 1,
        "reason": "hardware_error",
        "operator_stop": True,
        "shutdown_stop": False,
    }
    assert robot_move_wording(Fact("proof", 2, doc)) == (
        "attempt 2 first reconciled: outcome unknown (hardware_error), cut short by an"
        " operator's stop"
    )
    plain = {**doc, "operator_stop": False, "reason": "device_state_lost_or_moved"}
    assert robot_move_wording(Fact("proof", 2, plain)) == (
        "attempt 2 first reconciled: outcome unknown (device_state_lost_or_moved)"
    )
    assert robot_move_wording(Fact("proof", 1, {"proof": "parked-1", "reason": "x"})) is None
