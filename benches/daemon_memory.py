"""The daemon's memory over a long run: `tether serve`'s RSS over 1,000,000 progress events.

A real `tether serve` process (SQLite data dir, no robots) serves a bench-only family
(`benches/_chatty.py`): each Activity reports `--per-activity` progress events through the
runtime's progress listener into the daemon's AG-UI stream, then completes and settles. The
bench is the planner: `--live` threads submit through `tether.client` (the control socket),
watch each Activity until it settles and submit the next, so deltas, settlement snapshots and
the daemon's bounded progress and retention maps all run. Subscribers are separate processes
that read the daemon's SSE stream over HTTP: the first reads as fast as it can; the others
pause `--pause-s` every `--pause-every` frames, so they fall behind, are dropped, and reconnect
with Last-Event-ID (resumed from the window, or resynced). Every subscriber feeds what it reads
to the AG-UI store, reconnections included, and at the end checks that the messages it holds
agree with a fresh subscriber's snapshot.

Printed: the daemon's VmRSS (/proc/PID/status) every `--every` events; then the growth ratio
last / first sample after `--warmup` events. Baseline, in the same run: the daemon's RSS once
it is ready, before the first event.
Target: growth <= 1.1x after warmup (flat), whatever the event count.

Usage: python benches/daemon_memory.py [--events N] [--subscribers S] [--live L]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from _chatty import KIND
from tether._core import ActivityStore
from tether.client import Client

BENCHES = str(Path(__file__).resolve().parent)

RESYNC = b": resync:"


def rss_kib(pid: int) -> int:
    """The resident set size of process `pid` in KiB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


# --- a subscriber process ---


def _last_id(tail: bytes) -> str | None:
    at = tail.rfind(b"\nid: ")
    if at < 0:
        at = 0 if tail.startswith(b"id: ") else -1
        if at < 0:
            return None
    else:
        at += 1
    end = tail.find(b"\n", at)
    return None if end < 0 else tail[at + 4 : end].decode()


class Finish(Exception):
    """Raised in a subscriber by SIGUSR1: the run is over, report what it holds."""


def _finish(signum: int, frame: object) -> None:
    raise Finish


def subscribe(url: str, pause_every: int, pause_s: float) -> dict[str, Any]:
    """Read the stream, reconnecting with Last-Event-ID after a drop, until SIGUSR1."""
    signal.signal(signal.SIGUSR1, _finish)
    parts = urlsplit(url)
    store = ActivityStore(lifecycle="partial")
    frames = connections = dropped = resyncs = 0
    last: str | None = None
    next_pause = pause_every
    try:
        while True:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
            headers = {} if last is None else {"Last-Event-ID": last}
            conn.request("GET", parts.path, headers=headers)
            resp = conn.getresponse()
            connections += 1
            tail = b""
            first = True
            while chunk := resp.read1(65536):
                if first and connections > 1 and b"MESSAGES_SNAPSHOT" in chunk[:200]:
                    resyncs += 1
                first = False
                assert store.feed(chunk) == [], "the store warned"
                frames += (tail[-1:] + chunk).count(b"\n\n")  # a blank line split across reads
                tail = (tail + chunk)[-4096:]
                last = _last_id(tail) or last
                if pause_every and frames >= next_pause:
                    next_pause += pause_every
                    time.sleep(pause_s)
            if tail.endswith(b"\n\n") and RESYNC in tail[-200:]:
                dropped += 1
            conn.close()
    except Finish:
        pass
    return {
        "frames": frames,
        "connections": connections,
        "dropped": dropped,
        "resyncs": resyncs,
        "messages": store.activities(),
    }


def fresh_snapshot(url: str) -> list[dict[str, Any]]:
    """The messages a new subscriber is given now (its MESSAGES_SNAPSHOT)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.request("GET", parts.path)
    resp = conn.getresponse()
    data = b""
    while chunk := resp.read1(65536):
        data += chunk
        at = data.find(b"MESSAGES_SNAPSHOT")
        if at >= 0 and data.find(b"\n\n", at) >= 0:
            break
    conn.close()
    store = ActivityStore(lifecycle="partial")
    store.feed(data[: data.find(b"\n\n", data.find(b"MESSAGES_SNAPSHOT")) + 2])
    messages: list[dict[str, Any]] = store.activities()
    return messages


# --- the daemon side ---


def _config(work: Path, workers: int) -> Path:
    config = work / "host.toml"
    config.write_text(
        f'[host]\nstate_dir = "{work / "state"}"\n\n[serve]\nsse = "127.0.0.1:0"\n'
        f'workers = {workers}\nfamilies = ["_chatty:serve_families"]\nlease_ms = 60000\n'
    )
    return config


def _planner(
    state_dir: Path, activities: Iterator[int], per_activity: int, done: list[int]
) -> None:
    """Submit the next Activity, wait for it to settle, repeat (one of `--live` planners)."""
    client = Client(state_dir)
    for n in activities:
        client.submit("bench", f"chatty-{n}", KIND, {"reports": per_activity})
        for view in client.watch(f"bench/{KIND}/chatty-{n}", timeout=600):
            if view.get("settled"):
                break
        else:  # pragma: no cover - the watch timed out
            raise RuntimeError(f"chatty-{n} did not settle")
        done.append(n)


def run(args: argparse.Namespace) -> int:
    """Run `tether serve` with the chatty family, drive it, sample its RSS, collect the
    subscribers' reports."""
    work = Path(tempfile.mkdtemp(prefix="tether-bench-memory-"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [BENCHES, env.get("PYTHONPATH")]))
    daemon = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--config", str(_config(work, args.live))],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    children: list[subprocess.Popen[str]] = []
    try:
        assert daemon.stdout is not None
        ready = json.loads(daemon.stdout.readline())
        url = str(ready["sse"])
        for i in range(args.subscribers):
            pause_every = 0 if i == 0 else args.pause_every
            cmd = [sys.executable, __file__, "--subscribe", url, "--pause-every"]
            cmd += [str(pause_every), "--pause-s", str(args.pause_s)]
            children.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
        time.sleep(2.0)  # the subscribers connect
        base = rss_kib(daemon.pid)
        total = -(-args.events // args.per_activity)
        print(
            f"tether serve pid {daemon.pid}: {total:,} Activities x {args.per_activity} "
            f"progress reports = {total * args.per_activity:,} events, {args.live} at a time"
        )
        print(f"subscribers {args.subscribers} (1 fast, {args.subscribers - 1} pausing)")
        print(f"daemon RSS before the first event: {base / 1024:.1f} MiB")
        print(f"{'events':>10}  {'RSS MiB':>8}  s")
        numbers = iter(range(total))
        lock = threading.Lock()

        def next_number() -> Iterator[int]:
            while True:
                with lock:
                    n = next(numbers, None)
                if n is None:
                    return
                yield n

        done: list[int] = []
        planners = [
            threading.Thread(
                target=_planner, args=(work / "state", next_number(), args.per_activity, done)
            )
            for _ in range(args.live)
        ]
        started = time.monotonic()
        for t in planners:
            t.start()
        samples: list[tuple[int, int]] = []
        next_sample = args.every
        while any(t.is_alive() for t in planners):
            time.sleep(0.2)
            events = len(done) * args.per_activity
            if events >= next_sample:
                next_sample += args.every
                rss = rss_kib(daemon.pid)
                samples.append((events, rss))
                elapsed = time.monotonic() - started
                print(f"{events:>10,}  {rss / 1024:>8.1f}  {elapsed:.0f}", flush=True)
        for t in planners:
            t.join()
        if len(done) != total:
            print(f"only {len(done)} of {total} Activities settled", file=sys.stderr)
            return 1
        time.sleep(3.0)  # the subscribers read what is left
        fresh = {m["id"]: m for m in fresh_snapshot(url)}
        for child in children:
            child.send_signal(signal.SIGUSR1)
        reports = [json.loads(child.communicate(timeout=600)[0]) for child in children]
        for report in reports:
            held = {m["id"]: m for m in report.pop("messages")}
            report["agree"] = all(held.get(k) == m for k, m in fresh.items())
            report["snapshot_messages"] = len(fresh)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
        shutil.rmtree(work, ignore_errors=True)
    after = [rss for n, rss in samples if n > args.warmup]
    if len(after) < 2:
        print("too few samples after warmup: raise --events or lower --every", file=sys.stderr)
        return 1
    growth = after[-1] / after[0]
    print(f"time {time.monotonic() - started:.0f} s")
    for i, report in enumerate(reports):
        print(f"subscriber {i}: {report}")
    print(
        f"daemon RSS after warmup ({args.warmup:,} events): first {after[0] / 1024:.1f} MiB, "
        f"last {after[-1] / 1024:.1f} MiB, max {max(after) / 1024:.1f} MiB; "
        f"growth last/first {growth:.3f}x (target <= 1.1x)"
    )
    ok = growth <= 1.1 and all(r["agree"] for r in reports)
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


def main() -> int:
    """Parse arguments; `--subscribe URL` runs one subscriber process."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--subscribers", type=int, default=2)
    parser.add_argument("--live", type=int, default=4, help="concurrent Activities (and workers)")
    parser.add_argument("--per-activity", type=int, default=5000, help="reports per Activity")
    parser.add_argument("--every", type=int, default=50_000, help="RSS sample interval")
    parser.add_argument("--warmup", type=int, default=100_000)
    parser.add_argument("--pause-every", type=int, default=200_000)
    parser.add_argument("--pause-s", type=float, default=1.0)
    parser.add_argument("--subscribe", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.subscribe:
        print(json.dumps(subscribe(args.subscribe, args.pause_every, args.pause_s)))
        return 0
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
