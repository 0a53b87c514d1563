"""`tether worker --sse-port`: a worker process running the robot_move family over the DYNAMIXEL
emulator serves the move's live progress (Present Position, Moving) as an AG-UI SSE run."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from _dxl_setup import TARGETS, write_config
from tether._core import ActivityStore
from tether.activities import ActivityKey
from tether.adapters.dynamixel.config import load_config
from tether.agui import message_id
from tether.emulators.dynamixel import DynamixelEmulator
from tether.families.robot_move.family import CONFIG_ENV, intent, robot_move_family
from tether.families.robot_move.request import KIND_ABSOLUTE, MoveRequest
from tether.runtime import Host

KEY = ActivityKey("w", KIND_ABSOLUTE, "move-1")
VALIDATOR = Path(sys.executable).with_name("ag-ui-validate")


@pytest.fixture
def emulator() -> Iterator[DynamixelEmulator]:
    # Slow enough (about a second per move) that the read-back sees the arm in motion.
    with DynamixelEmulator([1, 2], speed_scale=2.0) as emu:
        yield emu


class Subscriber:
    """Reads one SSE response in a thread, keeping every byte and the decoded events."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        self._conn.request("GET", parts.path)
        self._resp = self._conn.getresponse()
        assert self._resp.status == 200
        assert self._resp.getheader("Content-Type", "").startswith("text/event-stream")
        self.body = b""
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read)
        self._thread.start()

    def _read(self) -> None:
        for line in self._resp:
            with self._lock:
                self.body += line
                if line.startswith(b"data: "):
                    self.events.append(json.loads(line[len(b"data: ") :]))
        self._conn.close()

    def seen(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def join(self) -> bytes:
        self._thread.join(timeout=120)
        assert not self._thread.is_alive()
        return self.body


def wait_for(check: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.02)


def validate(body: bytes, path: Path) -> None:
    path.write_bytes(body)
    done = subprocess.run(
        [str(VALIDATOR), "--json", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["summary"]["errors"] == 0 and report["summary"]["warnings"] == 0, report


def final_message(body: bytes) -> dict[str, Any]:
    store = ActivityStore()
    assert store.feed(body) == []
    store.finish()
    messages = {m["id"]: m for m in store.activities()}
    assert set(messages) == {message_id(KEY)}
    message: dict[str, Any] = messages[message_id(KEY)]
    assert message["activityType"] == KIND_ABSOLUTE
    return message


def test_worker_streams_the_moves_read_back_as_agui_activity(
    emulator: DynamixelEmulator, tmp_path: Path
) -> None:
    config_path = write_config(tmp_path, emulator.path)
    data = tmp_path / "data"
    family = robot_move_family(load_config(config_path), data / "robot_move")
    request = MoveRequest.from_dict({"kind": KIND_ABSOLUTE, "robot": "arm", "targets": TARGETS})
    env = {k: v for k, v in os.environ.items() if k != "TETHER_CRASH_AT"}
    env[CONFIG_ENV] = str(config_path)
    argv = [
        "worker",
        str(data),
        "--families",
        "tether.families.robot_move.family:families_from_env",
    ]
    argv += ["--lease-ms", "3000", "--sse-port", "0"]
    with Host(data, [family], workers=0, observe=False) as host:
        host.create_world("w")
        with subprocess.Popen(
            [sys.executable, "-m", "tether", *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ) as worker:
            try:
                assert worker.stdout is not None
                line = worker.stdout.readline()
                assert line.startswith("AG-UI stream (SSE): "), line
                url = line.split(": ", 1)[1].strip()
                assert url.startswith("http://127.0.0.1:") and url.endswith("/events")
                live = Subscriber(url)  # subscribed before the move exists: sees every event
                wait_for(lambda: len(live.seen()) >= 2)  # RUN_STARTED, MESSAGES_SNAPSHOT
                host.commit_tick("w", [intent("move-1", request)])
                wait_for(lambda: (r := host.get(KEY)) is not None and r.result is not None)
                # The conclusion is published before the catalog records the result.
                wait_for(lambda: any(_state(e) == "result" for e in live.seen()))
                late = Subscriber(url)
                wait_for(lambda: len(late.seen()) >= 2)
            finally:
                worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=60) == 0
        record = host.get(KEY)
    assert record is not None and record.result is not None
    body = live.join()
    types = [e["type"] for e in live.events]
    assert types[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"] and types[-1] == "RUN_FINISHED"
    assert live.events[1]["messages"] == []
    mine = [e for e in live.events if e.get("messageId") == message_id(KEY)]
    assert mine[0]["type"] == "ACTIVITY_SNAPSHOT" and mine[0]["activityType"] == KIND_ABSOLUTE
    assert mine[0]["content"]["state"] == "executing"
    # Read-back progress arrives as deltas carrying Present Position and Moving.
    paths = [op["path"] for e in mine if e["type"] == "ACTIVITY_DELTA" for op in e["patch"]]
    assert any(p.startswith("/joints") for p in paths), paths
    joint_ops = [
        op
        for e in mine
        if e["type"] == "ACTIVITY_DELTA"
        for op in e["patch"]
        if op["path"].startswith("/joints/")
    ]
    assert any(op["path"].endswith("/present_rad") for op in joint_ops), joint_ops
    assert any(op["path"].endswith("/moving") for op in joint_ops), joint_ops
    validate(body, tmp_path / "live.sse")
    final = final_message(body)["content"]
    assert final["state"] == "result" and final["attempt"] == 1
    assert final["result"] == {
        "digest": record.result.digest,
        "media_type": record.result.media_type,
        "failed": False,
    }
    assert final["robot"] == "arm" and final["activity"] == "move-1" and final["world"] == "w"
    for name, target in TARGETS.items():  # in radians, by joint name
        joint = final["joints"][name]
        assert abs(joint["goal_rad"] - target) < 0.002 and joint["moving"] is False
        assert abs(joint["present_rad"] - target) <= 0.004, joint
    # A late subscriber: RUN_STARTED, the messages as they stood, then the end of the run.
    late_body = late.join()
    assert [e["type"] for e in late.events] == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    validate(late_body, tmp_path / "late.sse")
    assert final_message(late_body)["content"] == final


def _state(event: dict[str, Any]) -> str | None:
    if event.get("messageId") != message_id(KEY):
        return None
    if event["type"] == "ACTIVITY_SNAPSHOT":
        state = event["content"].get("state")
        return state if isinstance(state, str) else None
    for op in event.get("patch", []):
        if op["path"] == "/state" and isinstance(op.get("value"), str):
            return str(op["value"])
    return None


def test_worker_refuses_a_bad_sse_port(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether",
            "worker",
            str(tmp_path),
            "--families",
            "tether.families.robot_move.family:families_from_env",
            "--sse-port",
            "70000",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, CONFIG_ENV: str(tmp_path / "none.toml")},
    )
    assert done.returncode == 2 and "--sse-port must be in [0, 65535]" in done.stderr
