"""Writes the example capture `tether replay` replays by default: a recorded AG-UI run of one
pick-and-place task, shipped as package data at python/tether/agui/activity_stream.sse.

The activity events come from `tether.agui.ActivityPublisher` (snapshot first, then diffs);
the rest of the run is built from `ag_ui.core` models; everything is SSE-encoded with
`ag_ui.encoder.EventEncoder`. The clock is fixed, so the output is byte-for-byte repeatable:
`python examples/record_activity_stream.py [OUT]` (OUT defaults to the packaged file).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ag_ui.core import (
    BaseEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)
from ag_ui.encoder import EventEncoder
from tether.agui import ActivityPublisher, encode_sse

START_MS = 1_764_489_600_000  # 2025-11-30T08:00:00Z
TICK_MS = 40
OUT = Path(__file__).resolve().parents[1] / "python" / "tether" / "agui" / "activity_stream.sse"


class Clock:
    """A fixed-step millisecond clock, so the recording never changes."""

    def __init__(self) -> None:
        self.now = START_MS

    def __call__(self) -> int:
        self.now += TICK_MS
        return self.now


def events() -> Iterator[BaseEvent | dict[str, Any]]:
    clock = Clock()
    thread, run = "cell-7", "run-0001"
    yield RunStartedEvent(thread_id=thread, run_id=run, timestamp=clock())
    yield TextMessageStartEvent(message_id="msg-1", role="assistant", timestamp=clock())
    yield TextMessageContentEvent(message_id="msg-1", delta="Picking the red cube from bin A ")
    yield TextMessageContentEvent(message_id="msg-1", delta="and placing it on tray 3.")
    yield TextMessageEndEvent(message_id="msg-1", timestamp=clock())

    steps = ["locate cube", "grasp", "transfer", "place"]
    plan = ActivityPublisher("act-plan", "robot_plan", clock=clock)
    plan_content: dict[str, Any] = {
        "goal": "move red cube: bin A -> tray 3",
        "robot": "so101-left",
        "status": "planning",
        "progress": 0,
        "steps": [{"name": s, "state": "pending"} for s in steps],
    }
    yield plan.update(plan_content, metadata={"tether.world_tick": 1200})  # type: ignore[misc]
    yield StepStartedEvent(step_name="perceive", timestamp=clock())

    yield SubagentStartedEvent(subagent_run_id="vision-1", name="perception", timestamp=clock())
    vision = ActivityPublisher(
        "act-vision", "object_search", subagent_run_id="vision-1", clock=clock
    )
    search: dict[str, Any] = {"query": "red cube", "camera": "wrist", "candidates": []}
    yield vision.update(search)  # type: ignore[misc]
    for i, (x, y, conf) in enumerate([(0.41, -0.12, 0.62), (0.43, -0.11, 0.91)]):
        search["candidates"].append({"id": f"det-{i}", "x_m": x, "y_m": y, "confidence": conf})
        search["best"] = f"det-{i}"
        event = vision.update(search)
        assert event is not None
        yield event
    yield SubagentFinishedEvent(subagent_run_id="vision-1", timestamp=clock())
    yield StepFinishedEvent(step_name="perceive", timestamp=clock())

    plan_content["status"] = "executing"
    plan_content["steps"][0]["state"] = "done"
    plan_content["target"] = {"x_m": 0.43, "y_m": -0.11}
    yield plan.update(plan_content)  # type: ignore[misc]
    yield StepStartedEvent(step_name="execute", timestamp=clock())

    arm = ActivityPublisher("act-arm", "joint_telemetry", clock=clock)
    joints = [0.0, -35.0, 60.0, 0.0, 45.0, 0.0]
    telemetry: dict[str, Any] = {
        "robot": "so101-left",
        "bus": {"port": "/dev/ttyACM0", "protocol": "dynamixel-2.0", "baud": 1_000_000},
        "limits_deg": [[-180, 180], [-90, 90], [-10, 170], [-180, 180], [-100, 100], [-180, 180]],
        "tick": 0,
        "joints_deg": list(joints),
        "gripper_mm": 40.0,
        "status": "moving",
        "faults": 0,
    }
    yield arm.update(telemetry)  # type: ignore[misc]
    phases = [("grasp", 12, 8.0), ("transfer", 16, 8.0), ("place", 10, 40.0)]
    tick = 0
    for step_index, (phase, ticks, grip) in enumerate(phases, start=1):
        for i in range(ticks):
            tick += 1
            telemetry["tick"] = tick
            for k in (tick % 6, (tick + 2) % 6):
                telemetry["joints_deg"][k] = round(telemetry["joints_deg"][k] + 1.5, 1)
            if i == ticks - 1:
                telemetry["gripper_mm"] = grip
            telemetry["status"] = "closing" if phase == "grasp" and i < 3 else "moving"
            event = arm.update(telemetry, metadata={"tether.world_tick": 1200 + tick})
            assert event is not None
            yield event
        plan_content["steps"][step_index]["state"] = "done"
        plan_content["progress"] = round(100 * (step_index + 1) / len(steps))
        yield plan.update(plan_content)  # type: ignore[misc]

    telemetry["status"] = "idle"
    yield arm.update(telemetry, activity_type="joint_telemetry")  # type: ignore[misc]
    plan_content["status"] = "done"
    yield plan.update(plan_content, metadata={"tether.receipt": "tick-1238"})  # type: ignore[misc]
    yield StepFinishedEvent(step_name="execute", timestamp=clock())
    yield TextMessageChunkEvent(message_id="msg-2", delta="Done: the cube is on tray 3.")
    yield RunFinishedEvent(thread_id=thread, run_id=run, timestamp=clock())


def render() -> str:
    encoder = EventEncoder()
    out = [
        ": tether example: a recorded AG-UI run"
        " (regenerate: examples/record_activity_stream.py)\n\n"
    ]
    for e in events():
        out.append(encoder.encode(e) if isinstance(e, BaseEvent) else encode_sse(e))
    return "".join(out)


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else OUT
    path.write_text(render(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
