"""Benchmark: the AG-UI activity store on the live-progress workload.

100,000 ACTIVITY_DELTA events against 100 long-lived activities (counters replaced, steps
appended with `/-`, status strings replaced), timed three ways in one process:

- Tether: the NDJSON bytes fed to `tether._core.ActivityStore.feed` in 64 KiB chunks
  (framing, JSON parsing, event checks and AG-UI patching, all in Rust);
- baseline: `jsonpatch.apply_patch(doc, patch, in_place=True)` over the same patches, from
  dicts parsed before the clock starts;
- limit: `tether._core.ParseOnlyStream.feed` on the same chunks: `serde_json::Value`s parsed
  from the same NDJSON buffer and framed the same way, with no patching.

Targets: Tether >= 10x jsonpatch, and >= 0.5x the parse-only rate.
Run: `make bench` or `.venv/bin/python benches/agui_store.py [--events N] [--repeat R]`.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import jsonpatch
from tether import _core

ACTIVITIES = 100
CHUNK = 64 * 1024
STATUSES = ["idle", "approaching", "grasping", "lifting", "placing", "retracting"]


def snapshot(i: int) -> dict[str, Any]:
    return {
        "type": "ACTIVITY_SNAPSHOT",
        "messageId": f"act-{i}",
        "activityType": "robot_task",
        "content": {
            "title": f"pick-and-place #{i}",
            "counters": {"ticks": 0, "frames": 0, "retries": 0},
            "status": "idle",
            "progress": 0,
            "steps": [],
        },
    }


def delta(n: int) -> dict[str, Any]:
    """The n-th delta: round robin over the activities, a few ops each."""
    act, k = n % ACTIVITIES, n // ACTIVITIES + 1
    patch: list[dict[str, Any]] = [
        {"op": "replace", "path": "/counters/ticks", "value": k},
        {"op": "replace", "path": "/counters/frames", "value": k * 3},
    ]
    if k % 4 == 0:
        patch.append({"op": "replace", "path": "/status", "value": STATUSES[k % len(STATUSES)]})
    if k % 10 == 0:
        patch.append(
            {"op": "add", "path": "/steps/-", "value": {"name": f"waypoint-{k}", "ok": True}}
        )
        patch.append({"op": "replace", "path": "/progress", "value": k // 10})
    return {
        "type": "ACTIVITY_DELTA",
        "timestamp": 1_764_480_000_000 + n,
        "messageId": f"act-{act}",
        "activityType": "robot_task",
        "patch": patch,
    }


def ndjson(events: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in events)


def chunks(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def best_of(repeat: int, setup: Callable[[], Any], run: Callable[[Any], None]) -> float:
    best = float("inf")
    for _ in range(repeat):
        state = setup()
        t0 = time.perf_counter()
        run(state)
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    snapshots = [snapshot(i) for i in range(ACTIVITIES)]
    deltas = [delta(n) for n in range(args.events)]
    # The stream opens the run first, as the store's run lifecycle requires.
    run_started = {"type": "RUN_STARTED", "threadId": "bench", "runId": "run-1"}
    snap_bytes = ndjson([run_started, *snapshots])
    delta_chunks = chunks(ndjson(deltas))
    parsed_deltas = json.loads("[" + ",".join(json.dumps(d) for d in deltas) + "]")

    def tether_setup() -> _core.ActivityStore:
        store = _core.ActivityStore()
        store.feed(snap_bytes)
        return store

    def tether_run(store: _core.ActivityStore) -> None:
        for c in delta_chunks:
            store.feed(c)

    def jsonpatch_setup() -> dict[str, dict[str, Any]]:
        return {s["messageId"]: json.loads(json.dumps(s["content"])) for s in snapshots}

    def jsonpatch_run(docs: dict[str, dict[str, Any]]) -> None:
        for ev in parsed_deltas:
            jsonpatch.apply_patch(docs[ev["messageId"]], ev["patch"], in_place=True)

    def parse_setup() -> _core.ParseOnlyStream:
        stream = _core.ParseOnlyStream()
        stream.feed(snap_bytes)
        return stream

    def parse_run(stream: _core.ParseOnlyStream) -> None:
        for c in delta_chunks:
            stream.feed(c)

    # Same result first: the store and jsonpatch must agree on every activity.
    store = tether_setup()
    tether_run(store)
    docs = jsonpatch_setup()
    jsonpatch_run(docs)
    assert store.warnings == [], store.warnings[:3]
    assert {m["id"]: m["content"] for m in store.activities()} == docs, "results differ"

    t_tether = best_of(args.repeat, tether_setup, tether_run)
    t_jsonpatch = best_of(args.repeat, jsonpatch_setup, jsonpatch_run)
    t_parse = best_of(args.repeat, parse_setup, parse_run)

    n = args.events
    mib = sum(len(c) for c in delta_chunks) / 2**20
    print(f"AG-UI activity store: {n} ACTIVITY_DELTA events, {ACTIVITIES} activities, ")
    print(f"  {mib:.1f} MiB NDJSON in {CHUNK // 1024} KiB chunks, best of {args.repeat}")
    for name, t in (
        ("tether ActivityStore.feed (bytes)", t_tether),
        ("jsonpatch.apply_patch in_place (dicts)", t_jsonpatch),
        ("parse-only serde_json::Value (limit)", t_parse),
    ):
        print(f"  {name:<40} {t * 1e3:9.1f} ms  {n / t / 1e6:6.2f} M events/s")
    vs_jsonpatch = t_jsonpatch / t_tether
    vs_parse = t_parse / t_tether
    print(f"  tether vs jsonpatch in place: {vs_jsonpatch:6.1f}x  (target >= 10x)")
    print(f"  tether / parse-only rate:     {vs_parse:6.2f}   (target >= 0.5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
