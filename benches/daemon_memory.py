"""The daemon's memory over a long run: RSS while 1,000,000 progress events stream over AG-UI SSE.

One process plays the daemon's streaming half as the runtime drives it: a `RunStream` over the
AG-UI store, a `StreamServer` on loopback and `LiveActivities`, fed by `progress(ProgressEvent)`
for `--live` concurrent Activities (each gets `--per-activity` reports, then settles and a new
one starts), so the run exercises deltas, settlement snapshots and the settled-retention bound.
Subscribers are separate processes that read the SSE stream over HTTP: the first reads as fast
as it can; the others pause `--pause-s` every `--pause-every` frames, so they fall behind, are
dropped, and reconnect with Last-Event-ID (resumed from the window, or resynced). Every
subscriber feeds what it reads to the AG-UI store, reconnections included, and at the end checks
that the messages it holds agree with a fresh subscriber's snapshot.

Printed: the publisher process's VmRSS (/proc/self/status) every `--every` events, the replay
window and the live subscribers' backlog; then the growth ratio last / first sample after
`--warmup` events. Baseline, in the same run: the RSS before the first event.
Target: growth <= 1.1x after warmup (flat), whatever the event count.

Usage: python benches/daemon_memory.py [--events N] [--subscribers S] [--live L]
       (1,000,000 events take about two to three minutes on 2 shared cores)
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from tether._core import ActivityStore
from tether.activities import ActivityKey
from tether.agui import LiveActivities, RunStream, StoreState, StreamServer
from tether.runtime import ProgressEvent

RESYNC = b": resync:"


def rss_kib() -> int:
    """This process's resident set size in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


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


def subscribe(url: str, pause_every: int, pause_s: float) -> dict[str, Any]:
    """Read the stream to its end, reconnecting with Last-Event-ID after a drop."""
    parts = urlsplit(url)
    store = ActivityStore(lifecycle="partial")
    frames = connections = dropped = resyncs = 0
    last: str | None = None
    next_pause = pause_every
    finished = False
    while not finished:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        conn.request("GET", parts.path, headers={} if last is None else {"Last-Event-ID": last})
        resp = conn.getresponse()
        connections += 1
        if resp.status == 204:
            break
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
            if b'"type":"RUN_FINISHED"' in tail or b'"type":"RUN_ERROR"' in tail:
                finished = True
            if pause_every and frames >= next_pause:
                next_pause += pause_every
                time.sleep(pause_s)
        if tail.endswith(b"\n\n") and RESYNC in tail[-200:]:
            dropped += 1
        conn.close()
    store.finish()
    # A fresh subscriber's snapshot: the messages the daemon still holds.
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    conn.request("GET", parts.path)
    fresh = ActivityStore()
    fresh.feed(conn.getresponse().read())
    conn.close()
    held = {m["id"]: m for m in store.activities()}
    agree = all(held.get(m["id"]) == m for m in fresh.activities())
    return {
        "frames": frames,
        "connections": connections,
        "dropped": dropped,
        "resyncs": resyncs,
        "agree": agree,
        "snapshot_messages": len(fresh.activities()),
    }


# --- the daemon side ---


def _content(step: int, of: int) -> dict[str, Any]:
    return {"steps": step, "of": of, "error_rad": round(0.5 / (1 + step), 6), "phase": "running"}


def run(args: argparse.Namespace) -> int:
    """Publish the events, sample RSS, collect the subscribers' reports."""
    stream = RunStream("bench", "run-memory", StoreState())
    server = StreamServer(stream)
    stream.start()
    live = LiveActivities(stream)
    children = []
    for i in range(args.subscribers):
        pause_every = 0 if i == 0 else args.pause_every
        cmd = [sys.executable, __file__, "--subscribe", server.url, "--pause-every"]
        cmd += [str(pause_every), "--pause-s", str(args.pause_s)]
        children.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    if not server.wait_for_subscribers(args.subscribers, timeout=60):
        print("subscribers did not connect", file=sys.stderr)
        return 1
    base = rss_kib()
    print(f"events {args.events:,}, live Activities {args.live}, {args.per_activity} reports each")
    print(f"subscribers {args.subscribers} (1 fast, {args.subscribers - 1} pausing)")
    print(f"RSS before the first event: {base / 1024:.1f} MiB")
    print(f"{'events':>10}  {'RSS MiB':>8}  {'window':>14}  {'backlog frames':>14}  dropped  s")
    started = time.monotonic()
    samples: list[tuple[int, int]] = []
    slots = [0] * args.live
    serial = [0] * args.live
    for n in range(1, args.events + 1):
        i = n % args.live
        key = ActivityKey("bench", "physical_ai.sim_episode", f"reach-{i}-{serial[i]}")
        slots[i] += 1
        if slots[i] < args.per_activity:
            live.progress(
                ProgressEvent(key, f"op-{i}", 1, 1, _content(slots[i], args.per_activity))
            )
        else:
            live.settle(key, {"activity": key.activity_id, "state": "settled", "steps": slots[i]})
            slots[i] = 0
            serial[i] += 1
        if n % args.every == 0:
            rss = rss_kib()
            samples.append((n, rss))
            events, size = stream.window()
            backlog = sum(f for f, _ in stream.backlog())
            elapsed = time.monotonic() - started
            print(
                f"{n:>10,}  {rss / 1024:>8.1f}  {events:>5} {size / 1024:>6.0f} KiB  "
                f"{backlog:>14}  {stream.dropped:>7}  {elapsed:.0f}",
                flush=True,
            )
    stream.finish()
    reports = [json.loads(child.communicate(timeout=600)[0]) for child in children]
    server.close()
    after = [rss for n, rss in samples if n > args.warmup]
    if len(after) < 2:
        print("too few samples after warmup: raise --events or lower --every", file=sys.stderr)
        return 1
    growth = after[-1] / after[0]
    print(
        f"time {time.monotonic() - started:.0f} s; settled-retention keys held {len(live.keys())}"
    )
    for i, report in enumerate(reports):
        print(f"subscriber {i}: {report}")
    print(
        f"RSS after warmup ({args.warmup:,} events): first {after[0] / 1024:.1f} MiB, "
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
    parser.add_argument("--live", type=int, default=8, help="concurrent Activities")
    parser.add_argument("--per-activity", type=int, default=1000, help="reports per Activity")
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
