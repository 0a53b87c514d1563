"""Benchmark: 100 WebSocket subscribers at 1,000 deltas/s on loopback.

One run, one script: the publisher and its `LiveServer` in this process; the subscribers in
`--procs` client processes (asyncio, `--clients` / `--procs` each), every one a `LiveClient`
that passes each frame through the Rust `LiveSubscriber` and applies it to its `LiveOverlay`.
The publisher appends one tool-output delta every millisecond (``t<wall ns>;`` to one of 20
tool calls' traces) and frames what is queued every `--flush-ms` (the feed's sync period); a
subscriber measures publish-to-apply for every delta of a frame once the frame is applied.

Targets: p99 publish-to-apply <= 50 ms, and no subscriber falls behind: zero 1013 closes, zero
frames lost or re-read, every subscriber at the last seq, and every overlay equal to the
publisher's own record of what it sent.

Run: `make bench` or `.venv/bin/python benches/live_ws.py [--seconds N] [--subscribers 100]`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import subprocess
import sys
import time
from typing import Any

import numpy as np
from tether._core import LivePublisher
from tether.live import Canonical, LiveClient, PublisherSource
from tether.live.ws import CLOSE_TOO_SLOW, LiveCredentials, LiveServer

WS, SESSION, TURN = "ws", "world-1", "receipt:world-1/run/1/tok"
MESSAGES = 20
TOKEN = "bench-token"
STAMP = re.compile(rb"t(\d{19});")
BIN_MS, MAX_MS = 0.1, 2000.0
P99_TARGET_MS = 50.0


def record(texts: dict[str, str]) -> dict[str, Any]:
    return {
        "workspaceId": WS,
        "agentSessionId": SESSION,
        "runtime": None,
        "turns": {},
        "messages": {
            mid: {
                "turnId": TURN,
                "role": "tool",
                "kind": "tool_call",
                "payload": {"output": {"text": t}},
            }
            for mid, t in texts.items()
        },
        "interactions": {},
        "audits": {},
    }


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


# --- the client processes ---


async def subscriber(url: str, epoch: int, lat_ns: list[int], out: dict[str, Any]) -> None:
    def reread() -> Canonical:
        out["rereads"] += 1  # never expected: a subscriber that falls behind fails the bench
        raise RuntimeError("a re-read was needed")

    c = LiveClient(url, reread, workspace_id=WS, agent_session_id=SESSION, token=TOKEN)
    c.apply_canonical(Canonical(epoch, 0, record({})))  # connected before the first frame
    c.rereads = 0
    await c.connect()
    assert c.conn is not None
    recv, handle, stamps, add = c.conn.recv, c.handle, STAMP.findall, lat_ns.extend
    while True:
        try:
            data = await recv(decode=False)
        except Exception as exc:  # the server closing at the end, or a 1013
            code = getattr(getattr(exc, "rcvd", None), "code", None)
            if code == CLOSE_TOO_SLOW:
                out["too_slow"] += 1
            break
        frame = data if isinstance(data, bytes) else data.encode()
        handle(frame)
        now = time.time_ns()
        add([now - int(t) for t in stamps(frame)])
        if c.needs_reread:
            out["needs_reread"] += 1
    out["faults"] += sum(c.faults.values())
    out["last_seqs"].append(c.subscriber.last_seq)
    out["digests"].append(digest(c.snapshot()))


async def clients_main(url: str, epoch: int, n: int) -> None:
    lat_ns: list[int] = []
    out: dict[str, Any] = {
        "rereads": 0, "too_slow": 0, "needs_reread": 0, "faults": 0, "last_seqs": [],
        "digests": [],
    }  # fmt: skip
    await asyncio.gather(*(subscriber(url, epoch, lat_ns, out) for _ in range(n)))
    ms = np.asarray(lat_ns, dtype=np.float64) / 1e6
    hist = np.bincount(np.minimum(ms / BIN_MS, MAX_MS / BIN_MS).astype(np.int64))
    out["hist"] = {str(i): int(v) for i, v in enumerate(hist) if v}
    out["cpu_s"] = time.process_time()
    print(json.dumps(out), flush=True)


# --- the publisher ---


def authorize(creds: LiveCredentials) -> str | None:
    return "bench" if creds.token == TOKEN else None


def run(args: argparse.Namespace) -> bool:
    pub = LivePublisher(WS, SESSION, epoch=int(time.time()))
    source = PublisherSource(pub)
    server = LiveServer(
        source,
        authorize=authorize,
        allowed_origins=[None],
        window=4096,
        buffer_bytes=args.buffer_bytes,
        heartbeat_s=None,
    )
    per = [
        args.subscribers // args.procs + (i < args.subscribers % args.procs)
        for i in range(args.procs)
    ]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--client",
                server.url,
                "--epoch",
                str(pub.epoch),
                "--n",
                str(n),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in per
    ]
    deadline = time.monotonic() + 60
    while server.subscribers < args.subscribers:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {server.subscribers} subscribers connected")
        time.sleep(0.05)
    texts: dict[str, str] = {}
    rate, period = args.rate, args.flush_ms / 1000
    total = int(rate * args.seconds)
    wall0, start = time.time_ns(), time.monotonic()
    sent = 0
    tick = start
    while sent < total:
        due = min(total, int((time.monotonic() - start) * rate) + 1)
        while sent < due:
            # Stamped with the time the delta was due: its wait for the next framing counts.
            due_ns = wall0 + int(sent * 1e9 / rate)
            mid = f"toolcall:{SESSION}/bench/a{sent % MESSAGES}"
            text = f"t{due_ns};"
            source.tool_output(mid, TURN, text, now_ms=due_ns // 1_000_000)
            texts[mid] = texts.get(mid, "") + text
            sent += 1
        source.flush()
        tick += period
        time.sleep(max(0.0, tick - time.monotonic()))
    source.flush()
    elapsed = time.monotonic() - start
    last_seq = source.seq
    time.sleep(1.0)  # the last frames reach every subscriber
    dropped, frames = server.dropped, last_seq
    server.close()
    hist = np.zeros(int(MAX_MS / BIN_MS) + 1, dtype=np.int64)
    totals = {"rereads": 0, "too_slow": 0, "needs_reread": 0, "faults": 0}
    cpu = [time.process_time()]
    last_seqs: list[int] = []
    digests: list[str] = []
    for p in procs:
        stdout, _ = p.communicate(timeout=60)
        out = json.loads(stdout.strip().splitlines()[-1])
        for k in totals:
            totals[k] += out[k]
        last_seqs += out["last_seqs"]
        cpu.append(out["cpu_s"])
        digests += out["digests"]
        for i, v in out["hist"].items():
            hist[int(i)] += v
    expected = digest(record(texts))
    applied = int(hist.sum())
    cum = np.cumsum(hist)

    def pct(q: float) -> float:
        return float(np.searchsorted(cum, q * applied) * BIN_MS + BIN_MS)

    p50, p99, worst = pct(0.50), pct(0.99), float(np.flatnonzero(hist)[-1] * BIN_MS + BIN_MS)
    behind = (
        dropped + totals["too_slow"] + totals["rereads"] + totals["needs_reread"]
        + totals["faults"] + sum(s != last_seq for s in last_seqs)
        + sum(d != expected for d in digests)
    )  # fmt: skip
    ok_latency = p99 <= P99_TARGET_MS
    ok_behind = (
        behind == 0 and len(last_seqs) == args.subscribers and applied == total * args.subscribers
    )
    print(
        f"{args.subscribers} subscribers in {args.procs} processes, {sent} deltas in "
        f"{elapsed:.1f} s ({sent / elapsed:.0f}/s), {frames} frames "
        f"(framed every {args.flush_ms} ms)"
    )
    print(f"deltas applied: {applied} (expected {total * args.subscribers})")
    print("CPU s: publisher+server " + ", clients ".join(f"{c:.1f}" for c in cpu))
    print(f"publish-to-apply: p50 <= {p50:.1f} ms, p99 <= {p99:.1f} ms, max <= {worst:.1f} ms")
    print(
        f"fell behind: 1013 closes {dropped} (server) / {totals['too_slow']} (clients), re-reads "
        f"{totals['rereads']}, faults {totals['faults']}, not at the last seq "
        f"{sum(s != last_seq for s in last_seqs)}, overlay != publisher record "
        f"{sum(d != expected for d in digests)}"
    )
    print(f"p99 {p99:.1f} ms vs target {P99_TARGET_MS:.0f} ms: {'PASS' if ok_latency else 'FAIL'}")
    print(f"no subscriber behind: {'PASS' if ok_behind else 'FAIL'}")
    return ok_latency and ok_behind


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="publishing time (default 10)")
    ap.add_argument("--subscribers", type=int, default=100, help="subscribers (default 100)")
    ap.add_argument("--procs", type=int, default=2, help="client processes (default 2)")
    ap.add_argument("--rate", type=float, default=1000.0, help="deltas per second (default 1000)")
    ap.add_argument("--flush-ms", type=float, default=10.0, help="framing period (default 10)")
    ap.add_argument(
        "--buffer-bytes", type=int, default=4 << 20, help="per subscriber (default 4 MiB)"
    )
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--epoch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        asyncio.run(clients_main(args.client, args.epoch, args.n))
        return
    sys.exit(0 if run(args) else 1)


if __name__ == "__main__":
    main()
