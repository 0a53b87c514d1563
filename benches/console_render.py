"""The console page with 1,000 Activities and 50 parked decisions: first render and one update
applied, each against a baseline measured in the same run.

A `tether serve` daemon (in this process, over an in-process DYNAMIXEL emulator on a pty) with
the console on holds 1,000 live Activities (published through its own `LiveActivities`, so its
Rust store materialises them) and 50 Activities parked in its catalog, each with a robot-move
evidence document in its artifact store. Headless Chromium (Debian packages, Selenium) opens
the page:

- first render: from navigation until the page holds all 1,000 Activities and all 50 decision
  cards (the page's own marks, `performance.now()`), median of `--loads`. Baseline: the same
  browser loading a static file with the same 1,000 messages and 50 decision documents already
  laid out as text (the floor of putting that much text in a DOM).
- one update applied: one Activity's content changes in the daemon; the time until the page's
  card shows it (a MutationObserver's wall clock; same machine), median of `--updates`.
  Baseline: a raw SSE subscriber of the daemon's AG-UI stream (httpx, another thread) receiving
  the same event.

    .venv/bin/python benches/console_render.py [--activities 1000] [--parked 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "adapters"), str(ROOT / "tests" / "console")]

import httpx  # noqa: E402
from _browser import chromium, wait_for  # noqa: E402
from _dxl_setup import write_config  # noqa: E402
from tether.activities import (  # noqa: E402
    ActivityKey,
    Admission,
    Evidence,
    Receipt,
    operation_id_for,
)
from tether.emulators.dynamixel import DynamixelEmulator  # noqa: E402
from tether.serve.daemon import Daemon  # noqa: E402

SERVE = '\n[serve]\nsse = "127.0.0.1:0"\nconsole = "127.0.0.1:0"\nlease_ms = 30000\n'


def evidence(i: int) -> dict[str, Any]:
    now = int(time.time() * 1000)
    joints = {
        name: {
            "id": n + 1,
            "position_rad": 0.1 * n + i * 1e-3,
            "goal_rad": 0.1 * n,
            "velocity_rad_s": None,
            "moving": False,
            "torque_on": False,
            "staged_write": False,
            "hardware_errors": [],
        }
        for n, name in enumerate(("a", "b"))
    }
    sent = [
        {"attempt": 1, "t_ms": now - 900 + k, "instruction": ins, "joint": j, "id": 1}
        for k, (ins, j) in enumerate(
            [("profile_velocity", "a"), ("torque_enable", "a"), ("reg_write", "a")] * 3
        )
    ]
    return {
        "reason": "device_state_lost_or_moved",
        "read_back": {"robot": "arm", "read_at_ms": now, "joints": joints},
        "staged": {"a": 1.0, "b": -1.0},
        "command": {"robot": "arm", "targets": {"a": 1.0, "b": -1.0}},
        "sent": sent,
        "hardware_errors": {},
        "commanded_vs_present": {
            n: {"commanded_rad": t, "goal_rad": 0.0, "present_rad": 0.0}
            for n, t in (("a", 1.0), ("b", -1.0))
        },
    }


def park(daemon: Daemon, count: int) -> None:
    runtime = daemon.host()
    catalog, artifacts = runtime.catalog, runtime.artifacts
    keys = [ActivityKey("bench", "bench.parked", f"p{i}") for i in range(count)]
    for key in keys:
        catalog.admit(Admission(key, Receipt("bench", "run", 1, "t"), f"in://{key}", "sha256:x"))
        claim = catalog.claim_key(key, "bench", 50)
        catalog.bind_provider_operation(key, claim.fence, operation_id_for(key))
    time.sleep(0.1)  # the execute leases expire: a reconcile attempt concludes Unknown
    for i, key in enumerate(keys):
        claim = catalog.claim_key(key, "bench", 60_000)
        data = json.dumps(evidence(i)).encode()
        ref = artifacts.put_bytes(data, "application/vnd.tether.evidence+json")
        catalog.record_unknown(key, claim.fence, Evidence(ref.ref, ref.digest), 7 * 86_400_000)


def content(i: int, fraction: float) -> dict[str, Any]:
    return {
        "state": "running",
        "robot": "arm",
        "fraction": fraction,
        "joints": {
            "a": {"present_rad": round(fraction, 4), "goal_rad": 1.0, "moving": True},
            "b": {"present_rad": round(-fraction, 4), "goal_rad": -1.0, "moving": True},
        },
        "n": i,
    }


def floor_page(path: Path, messages: list[dict[str, Any]], parked: list[dict[str, Any]]) -> str:
    parts = ["<!doctype html><html><body><div id=d>"]
    for d in parked:
        parts.append(f"<div><h3>{d['key']}</h3><pre>{json.dumps(d, indent=1)}</pre></div>")
    parts.append("</div><div id=a>")
    for m in messages:
        body = json.dumps(m["content"], indent=1)
        parts.append(f"<div><h3>{m['id']}</h3><p>{m['activityType']}</p><pre>{body}</pre></div>")
    parts.append("</div></body></html>")
    path.write_text("".join(parts).replace("&", "&amp;"))
    return path.as_uri()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activities", type=int, default=1000)
    parser.add_argument("--parked", type=int, default=50)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--updates", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, DynamixelEmulator([1, 2]) as emu:
        config = write_config(Path(tmp), emu.path)
        config.write_text(config.read_text() + SERVE)
        daemon = Daemon.from_path(config).start()
        try:
            live = daemon._live
            assert live is not None
            keys = [ActivityKey("bench", "bench.live", f"a{i:04d}") for i in range(args.activities)]
            for i, key in enumerate(keys):
                live.merge(key, content(i, 0.25))
            park(daemon, args.parked)
            console = daemon.console
            assert console is not None
            with httpx.Client(base_url=console.url, timeout=60) as http:
                messages = http.get("/api/activities").json()["activities"]
                parked = http.get("/api/decisions").json()["decisions"]
            assert len(messages) == args.activities and len(parked) == args.parked
            floor = floor_page(Path(tmp) / "floor.html", messages, parked)
            with chromium() as page:
                firsts, floors = [], []
                for _ in range(args.loads):
                    page.get(console.url)
                    done = wait_for(
                        lambda: page.execute_script(
                            "const r = window.tetherRendered, d = window.tetherDecisions;"
                            f"return r && d && r.activities === {args.activities} && "
                            f"d.count === {args.parked} && Math.max(r.at, d.at);"
                        ),
                        timeout=60,
                        what="the first render",
                    )
                    firsts.append(float(done))
                    page.get(floor)
                    floors.append(
                        page.execute_script(
                            "return performance.getEntriesByType('navigation')[0].loadEventEnd"
                        )
                    )
                page.get(console.url)
                wait_for(
                    lambda: page.execute_script(
                        f"return (window.tetherRendered||{{}}).activities === {args.activities}"
                    ),
                    timeout=60,
                )
                target = keys[len(keys) // 2]
                selector = (
                    f'div.activity[data-id="{target.world_id}/{target.kind}/{target.activity_id}"]'
                )
                page_ms, raw_ms = [], []
                assert daemon.sse_url is not None
                for n in range(args.updates):
                    fraction = 0.5 + n / 1000
                    marker = f'"fraction": {fraction}'
                    page.execute_script(
                        "const node = document.querySelector(arguments[0]);"
                        "window.__seen = null;"
                        "const obs = new MutationObserver(() => {"
                        " if (node.textContent.includes(arguments[1])) {"
                        "  window.__seen = Date.now(); obs.disconnect(); } });"
                        "obs.observe(node, {childList: true, characterData: true, subtree: true});",
                        selector,
                        marker,
                    )
                    got: dict[str, float] = {}
                    ready = threading.Event()

                    def subscriber(
                        url: str = daemon.sse_url,
                        want: str = str(fraction),
                        got: dict[str, float] = got,
                        ready: threading.Event = ready,
                    ) -> None:
                        with httpx.Client(timeout=30) as raw, raw.stream("GET", url) as events:
                            for line in events.iter_lines():
                                if line.startswith(": ") or not line:
                                    continue
                                if line.startswith("data:") and "MESSAGES_SNAPSHOT" in line:
                                    ready.set()
                                if line.startswith("data:") and want in line and "DELTA" in line:
                                    got["raw"] = time.time() * 1000
                                    return

                    thread = threading.Thread(target=subscriber, daemon=True)
                    thread.start()
                    ready.wait(30)
                    time.sleep(0.1)
                    published = time.time() * 1000
                    live.merge(target, {"fraction": fraction})
                    thread.join(30)
                    seen = wait_for(lambda: page.execute_script("return window.__seen"), 30)
                    page_ms.append(float(seen) - published)
                    raw_ms.append(got["raw"] - published)
        finally:
            daemon.close()
    f, b = statistics.median(firsts), statistics.median(floors)
    u, r = statistics.median(page_ms), statistics.median(raw_ms)
    print(
        f"first render, {args.activities} Activities + {args.parked} decisions: median {f:.0f} ms "
        f"(static floor {b:.0f} ms, {f / b:.2f}x) over {args.loads} loads"
    )
    print(
        f"one update applied on the page: median {u:.1f} ms, max {max(page_ms):.1f} ms "
        f"(raw SSE subscriber {r:.1f} ms; +{u - r:.1f} ms) over {args.updates}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
