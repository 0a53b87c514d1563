"""The demo's AG-UI stream passes ag-ui-validate (live URL and capture) and rebuilds the run.

The validator's URL mode (it POSTs a RunAgentInput, needs httpx) also runs the transport rules
that a capture skips; feeding the stream to ActivityStore gives exactly the final activity
contents derived from the world state and the catalog.
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tether._core import ActivityStore
from tether.activities import ActivityKey, Catalog
from tether.apps.demo.main import final_content, message_id
from tether.families.sim.family import INTENT, KIND
from tether.world import SqliteLedger

from tests.demo._support import demo_argv

VALIDATOR = Path(sys.executable).with_name("ag-ui-validate")


def _read_sse(url: str) -> bytes:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    conn.request("GET", parts.path)
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("Content-Type", "").startswith("text/event-stream")
    body = resp.read()
    conn.close()
    return body


def _validate(target: str) -> dict[str, Any]:
    """`ag-ui-validate --json` on a live URL (it POSTs a RunAgentInput) or a captured file."""
    done = subprocess.run(
        [str(VALIDATOR), "--json", "--timeout", "120000", target],
        capture_output=True,
        text=True,
        check=False,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["summary"]["errors"] == 0, report
    return report


def _expected(data: Path) -> list[dict[str, Any]]:
    """The activity messages the world state and the catalog say the run ended with."""
    ledger = SqliteLedger.open(data / "world.db")
    snap = ledger.read_at(ledger.head("demo"))
    catalog = Catalog.open("sqlite:///" + str(data / "catalog.db"))
    out = []
    for entity, _ in snap.with_component(INTENT):
        key = ActivityKey("demo", KIND, entity)
        rec = catalog.get(key)
        assert rec is not None
        content = final_content(key, rec, snap)
        out.append(
            {"id": message_id(key), "role": "activity", "activityType": KIND, "content": content}
        )
    catalog.close()
    ledger.close()
    return out


def _types(body: bytes) -> list[str]:
    return [
        json.loads(line[len(b"data: ") :])["type"]
        for line in body.splitlines()
        if line.startswith(b"data: ")
    ]


def test_the_demo_stream_validates_and_rebuilds_the_final_activities(tmp_path: Path) -> None:
    data = tmp_path / "data"
    cmd = demo_argv(
        data,
        "--targets",
        "2",
        "--episodes",
        "1",
        "--steps",
        "1000",
        "--port",
        "0",
        "--wait-subscribers",
        "2",
        "--linger",
        "60",
    )
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as demo:
        assert demo.stdout is not None
        url = ""
        for line in demo.stdout:
            if line.startswith("AG-UI stream (SSE): "):
                url = line.split(": ", 1)[1].strip()
                break
        assert url.startswith("http://127.0.0.1:")
        # Two subscribers from the start: the validator on the live endpoint, and a capture.
        live: list[bytes] = []
        reports: list[dict[str, Any]] = []
        reader = threading.Thread(target=lambda: live.append(_read_sse(url)))
        validator = threading.Thread(target=lambda: reports.append(_validate(url)))
        reader.start()
        validator.start()
        reader.join()
        validator.join()
        for line in demo.stdout:
            if line.startswith("mission: "):
                break
        late = _read_sse(url)  # the run has finished; the demo still serves (--linger)
        late_report = _validate(url)
        demo.send_signal(signal.SIGTERM)
        demo.stdout.read()

    expected = _expected(data)
    assert [m["content"]["state"] for m in expected] == ["settled", "settled"]
    types = _types(live[0])
    assert types[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"] and types[-1] == "RUN_FINISHED"
    assert "ACTIVITY_DELTA" in types
    assert _types(late) == ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    # The live endpoint passes every rule, transport ones included (content type, framing,
    # chunking, keepalive), with no warning either.
    transport = {"AGUI505", "AGUI506", "AGUI507", "AGUI508"}
    for report, events in ((reports[0], len(types)), (late_report, 3)):
        assert report["eventCount"] == events, report
        assert not transport & {s["rule"] for s in report["skipped"]}, report
        assert report["summary"]["warnings"] == 0, report
    for name, body in (("live", live[0]), ("late", late)):
        (tmp_path / f"{name}.sse").write_bytes(body)
        capture = _validate(str(tmp_path / f"{name}.sse"))
        assert capture["summary"]["warnings"] == 0, capture
        store = ActivityStore()
        assert store.feed(body) == []
        store.finish()
        assert store.activities() == expected, name
