"""After a `tether serve` restart its AG-UI run stream (and so the console, which shows it)
starts with every unsettled Activity as the catalog holds it: it used to show none until each
one's attempt reported again, a parked move's a minute later (its next reconcile). Real
`tether serve` processes over the DYNAMIXEL emulator on a pty, grpcio on loopback, the SSE
stream read over HTTP."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _dxl_setup import emulator_process
from _grpc_setup import daemon, grpc_config, parked_mid_move, stub

SERVE = (
    '\n[serve]\nlease_ms = 1500\nsettle_timeout_s = 20\nsse = "127.0.0.1:0"\ngrpc = "127.0.0.1:0"\n'
)


def _late_snapshot(url: str, seconds: float = 10.0) -> list[dict[str, Any]]:
    """The activity messages a late subscriber's `MESSAGES_SNAPSHOT` carries."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=seconds)
    try:
        conn.request("GET", "/events")
        response = conn.getresponse()
        assert response.status == 200
        deadline = time.monotonic() + seconds
        for line in response:
            assert time.monotonic() < deadline, "no MESSAGES_SNAPSHOT"
            if line.startswith(b"data: "):
                event = json.loads(line[len(b"data: ") :])
                if event["type"] == "MESSAGES_SNAPSHOT":
                    return [m for m in event["messages"] if m.get("role") == "activity"]
        raise AssertionError("the stream ended before its MESSAGES_SNAPSHOT")
    finally:
        conn.close()


def test_a_parked_move_is_on_the_run_stream_at_once_after_a_restart(tmp_path: Path) -> None:
    with emulator_process(tmp_path, speed_scale=1.0) as emu:  # real time: stopped mid-move
        config = grpc_config(tmp_path, emu.path, serve=SERVE)
        with daemon(config) as (_, ready):
            channel, control = stub(ready["grpc"])
            try:
                parked = parked_mid_move(control, "held")
            finally:
                channel.close()
        with daemon(config) as (_, ready):
            started = time.monotonic()
            messages = _late_snapshot(ready["sse"])
            waited = time.monotonic() - started
    shown = [m["content"] for m in messages if m["content"].get("state") == "awaiting_decision"]
    assert len(shown) == 1, messages
    (content,) = shown
    assert content["restored"] is True and content["reason"] == parked.evidence.reason, content
    assert content["revision"] == parked.evidence.revision and content["attempt"] >= 1, content
    assert waited < 10.0
