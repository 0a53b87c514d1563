"""The AG-UI SSE run stream: live subscribers, late subscribers, validator, store round trip."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from tether._core import ActivityStore
from tether.agui.stream import RunStream, StoreState, StreamServer

KIND = "physical_ai.sim_episode"
VALIDATOR = Path(sys.executable).with_name("ag-ui-validate")


def _snapshot(mid: str, content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "ACTIVITY_SNAPSHOT", "messageId": mid, "activityType": KIND, "content": content}


def _delta(mid: str, steps: int) -> dict[str, Any]:
    patch = [{"op": "replace", "path": "/steps", "value": steps}]
    return {"type": "ACTIVITY_DELTA", "messageId": mid, "activityType": KIND, "patch": patch}


def _read_sse(url: str, method: str = "GET") -> bytes:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.request(method, parts.path, body=b"{}" if method == "POST" else None)
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("Content-Type", "").startswith("text/event-stream")
    body = resp.read()
    conn.close()
    return body


def _events(body: bytes) -> list[str]:
    return [
        json.loads(line[len(b"data: ") :])["type"]
        for line in body.splitlines()
        if line.startswith(b"data: ")
    ]


@pytest.fixture
def served() -> Any:
    stream = RunStream("thread-1", "run-1", StoreState())
    stream.start()
    server = StreamServer(stream)
    yield stream, server
    server.close()


def test_early_and_late_subscribers_end_with_the_same_activities(served: Any) -> None:
    stream, server = served
    bodies: dict[str, bytes] = {}

    def read(name: str) -> None:
        bodies[name] = _read_sse(server.url, "POST" if name == "early" else "GET")

    early = threading.Thread(target=read, args=("early",))
    early.start()
    assert server.wait_for_subscribers(1, timeout=60)
    stream.publish(_snapshot("a-1", {"steps": 0, "attempt": 1}))
    stream.publish(_delta("a-1", 100))
    late = threading.Thread(target=read, args=("late",))
    late.start()
    assert server.wait_for_subscribers(2, timeout=60)
    stream.publish(_delta("a-1", 200))
    stream.publish(_snapshot("a-2", {"steps": 0, "attempt": 1}))
    stream.publish(_snapshot("a-1", {"steps": 200, "attempt": 1, "settled": True}))
    stream.finish()
    early.join()
    late.join()
    assert _events(bodies["early"]) == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "ACTIVITY_SNAPSHOT",
        "ACTIVITY_DELTA",
        "ACTIVITY_DELTA",
        "ACTIVITY_SNAPSHOT",
        "ACTIVITY_SNAPSHOT",
        "RUN_FINISHED",
    ]
    assert _events(bodies["late"]) == [
        "RUN_STARTED",
        "MESSAGES_SNAPSHOT",
        "ACTIVITY_DELTA",
        "ACTIVITY_SNAPSHOT",
        "ACTIVITY_SNAPSHOT",
        "RUN_FINISHED",
    ]
    for body in bodies.values():
        store = ActivityStore()
        assert store.feed(body) == []
        store.finish()
        assert store.activities() == [
            {
                "id": "a-1",
                "role": "activity",
                "activityType": KIND,
                "content": {"steps": 200, "attempt": 1, "settled": True},
            },
            {
                "id": "a-2",
                "role": "activity",
                "activityType": KIND,
                "content": {"steps": 0, "attempt": 1},
            },
        ]
    # After the run a subscriber still gets the whole picture and the end.
    after = _read_sse(server.url)
    assert _events(after) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]


def validate_capture(body: bytes, path: Path) -> dict[str, Any]:
    """Run `ag-ui-validate --json` on a captured SSE body; asserts no errors and no warnings."""
    path.write_bytes(body)
    done = subprocess.run(
        [str(VALIDATOR), "--json", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["summary"]["errors"] == 0 and report["summary"]["warnings"] == 0, report
    return report


def test_the_captured_stream_passes_ag_ui_validate(served: Any, tmp_path: Path) -> None:
    stream, server = served
    stream.publish(_snapshot("a-1", {"steps": 0}))
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(_read_sse(server.url)))
    reader.start()
    assert server.wait_for_subscribers(1, timeout=60)
    stream.publish(_delta("a-1", 10))
    stream.publish(_snapshot("a-1", {"steps": 10, "settled": True}))
    stream.finish()
    reader.join()
    validate_capture(got[0], tmp_path / "run.sse")


def test_unknown_paths_are_404_and_publishing_after_finish_is_refused(served: Any) -> None:
    stream, server = served
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.request("GET", "/nope")
    answer = conn.getresponse()
    # JSON with a stable code, as every refusal of the stream is: never an HTML page.
    assert answer.status == 404 and answer.getheader("Content-Type") == "application/json"
    assert json.loads(answer.read())["code"] == "not_found"
    conn.close()
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.request("PUT", "/events", body=b"{}")
    answer = conn.getresponse()
    assert (answer.status, answer.getheader("Allow")) == (405, "GET, POST")
    assert json.loads(answer.read())["code"] == "method_not_allowed"
    conn.close()
    stream.finish()
    with pytest.raises(RuntimeError):
        stream.publish(_snapshot("a-1", {}))
