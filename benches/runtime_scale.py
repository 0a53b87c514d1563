"""10,000 admitted Activities through 8 workers in 2 OS processes on one data dir: Activities/s
and the p99 claim latency, against the same work with 1 worker in 1 process.

The Host (this process) commits one tick with 10,000 intents; its projector admits them (one
catalog commit each, timed separately). Then worker processes start together, each with its
threads in a real `WorkerPool` over the data dir's catalog and artifact store, claiming,
binding, executing a zero-work adapter (an inline result, no payload file) and recording the
result, while the Host's observer stages the results, commits observation ticks and settles
each Activity at its exact receipt. Everything is SQLite synchronous=FULL.

Reported per configuration:
- Activities/s: 10,000 / (workers released -> last Activity settled), and the rate at which the
  workers recorded results (released -> last result recorded);
- claim latency: the duration of each successful `Catalog.claim` call in the workers (waiting
  for SQLite's write lock, the core's transition and the durable commit), p50/p99/max; and
  admission -> claim (the record's admission time to the claim's return), which here is mostly
  the backlog's queueing time, since all 10,000 are admitted before any worker starts.

Baselines, in the same run: (1) the same 10,000 with 1 worker in 1 process; (2) the commit floor:
the raw rate of empty `BEGIN IMMEDIATE; UPDATE; COMMIT` transactions (FULL) on the same disk
divided by the 4 catalog commits each Activity needs inside the timed window (claim, bind,
result, settle; admission comes before it). Observation ticks add a few world-ledger commits.

Usage: python benches/runtime_scale.py [--activities N] [--procs P] [--threads T] [--dir PATH]
       (the directory must not be a RAM filesystem; 2 cores shared means noisy numbers)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

from tether.activities import ActivityKey, Catalog, Claim, ResultRef, wall_clock_ms
from tether.runtime import (
    ActivityRequest,
    ArtifactStore,
    AttemptContext,
    Family,
    Host,
    ReconcileOutcome,
    StagedResult,
    WorkerPool,
)
from tether.runtime._wakeup import Wakeup
from tether.world import ComponentWrite, WorldSnapshot, canonical_json

KIND = "bench.scale"
WORLD = "w"
COMMITS_PER_ACTIVITY = 4  # claim, bind, record result, settle (admission is before the window)


class ZeroWork:
    """The adapter: no effect, an inline result (no payload file)."""

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        return ctx.artifacts.put_bytes(canonical_json({"n": request["n"]}), "application/json")

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> ReconcileOutcome:
        raise NotImplementedError  # never reached: no attempt is lost in this benchmark


def project(snapshot: WorldSnapshot) -> list[ActivityRequest]:
    return [ActivityRequest(KIND, e, v) for e, v in snapshot.changed("scale.intent")]


def stage(staged: StagedResult) -> list[ComponentWrite]:
    return [ComponentWrite(staged.key.activity_id, "scale.observed", staged.json())]


def families(_data_dir: Path | None = None) -> list[Family]:
    return [Family("scale", (KIND,), project, ZeroWork(), stage)]


# -- worker process -------------------------------------------------------------------------

CLAIM_S: list[float] = []  # successful claim call durations (list.append is atomic)
WAIT_MS: list[int] = []  # admission -> claim
EMPTY = [0]


class TimedCatalog(Catalog):
    """The real catalog, timing each claim call."""

    def claim(self, owner: str, lease_ms: int, **kw: Any) -> Claim | None:
        start = time.perf_counter()
        claim = super().claim(owner, lease_ms, **kw)
        took = time.perf_counter() - start
        if claim is None:
            EMPTY[0] += 1
        else:
            CLAIM_S.append(took)
            WAIT_MS.append(wall_clock_ms() - claim.record.admitted_at_ms)
        return claim


def child(data_dir: Path, threads: int, go: Path, out: Path) -> int:
    url = "sqlite:///" + str(data_dir / "catalog.db")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    pool = WorkerPool(
        lambda: TimedCatalog.open(url),
        ArtifactStore(data_dir / "artifacts"),
        families(),
        instance=f"proc-{os.getpid()}",
        lease_ms=30_000,
        wakeup=Wakeup(stop, 0.02),
    )
    Path(f"{go}.{os.getpid()}.ready").touch()
    while not go.exists():
        time.sleep(0.001)
    pool.start(threads)
    stop.wait()
    pool.close()
    out.write_text(json.dumps({"claim_s": CLAIM_S, "wait_ms": WAIT_MS, "empty": EMPTY[0]}))
    return 0


# -- the Host and the measurement -----------------------------------------------------------


def raw_commit_rate(directory: Path, transactions: int = 2_000) -> float:
    conn = sqlite3.connect(directory / "raw.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, n INTEGER)")
    conn.execute("INSERT OR IGNORE INTO t VALUES (1, 0)")
    start = time.perf_counter()
    for _ in range(transactions):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE t SET n = n + 1 WHERE id = 1")
        conn.execute("COMMIT")
    took = time.perf_counter() - start
    conn.close()
    return transactions / took


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(directory: Path, n: int, procs: int, threads: int) -> dict[str, Any]:
    data = directory / f"data-{procs}x{threads}-{uuid.uuid4().hex[:6]}"
    go = data / "go"
    with Host(data, families(), workers=0) as host:
        host.create_world(WORLD)
        start = time.perf_counter()
        host.commit_tick(
            WORLD, [ComponentWrite(f"t{i:06d}", "scale.intent", {"n": i}) for i in range(n)]
        )
        admit_s = time.perf_counter() - start
        outs = [data / f"out-{i}.json" for i in range(procs)]
        children = [
            subprocess.Popen(
                [sys.executable, __file__, "--child", str(data), str(threads), str(go), str(out)]
            )
            for out in outs
        ]
        deadline = time.monotonic() + 120
        while len(list(data.glob("go.*.ready"))) < procs:
            assert time.monotonic() < deadline and all(c.poll() is None for c in children)
            time.sleep(0.01)
        host.start()  # the observer loop (no in-process workers)
        released_ms = wall_clock_ms()
        start = time.perf_counter()
        go.touch()
        while host.catalog.has_unsettled(WORLD):
            assert time.monotonic() < deadline + 600, "the benchmark did not finish"
            assert all(c.poll() is None for c in children), "a worker process died"
            time.sleep(0.01)
        took = time.perf_counter() - start
        for c in children:
            c.send_signal(signal.SIGTERM)
        for c in children:
            assert c.wait(timeout=60) == 0
        claim_s: list[float] = []
        wait_ms: list[float] = []
        empty = 0
        for out in outs:
            got = json.loads(out.read_text())
            claim_s += got["claim_s"]
            wait_ms += got["wait_ms"]
            empty += got["empty"]
        records = [host.get(ActivityKey(WORLD, KIND, f"t{i:06d}")) for i in range(n)]
        assert all(r is not None and r.settlement is not None for r in records)
        assert all(r is not None and r.attempt_count == 1 for r in records), "a claim repeated"
        last_result_ms = max(
            r.recorded_result.recorded_at_ms for r in records if r and r.recorded_result
        )
    shutil.rmtree(data, ignore_errors=True)
    assert len(claim_s) == n, f"{len(claim_s)} successful claims for {n} Activities"
    return {
        "procs": procs,
        "threads": threads,
        "admit_s": admit_s,
        "settle_s": took,
        "results_s": (last_result_ms - released_ms) / 1000,
        "claim_s": claim_s,
        "wait_ms": wait_ms,
        "empty": empty,
    }


def report(label: str, n: int, r: dict[str, Any]) -> None:
    c = [s * 1e3 for s in r["claim_s"]]
    w = r["wait_ms"]
    print(
        f"{label}: {n / r['settle_s']:8,.0f} Activities/s admitted->settled "
        f"({r['settle_s']:.1f} s), results recorded at {n / r['results_s']:,.0f}/s; "
        f"admission {n / r['admit_s']:,.0f}/s"
    )
    print(
        f"    claim call ms: p50 {statistics.median(c):6.2f}  p99 {pct(c, 0.99):6.2f}"
        f"  max {max(c):7.2f}   ({r['empty']:,} empty claims)"
    )
    print(
        f"    admission->claim ms (backlog queueing): p50 {statistics.median(w):,.0f}"
        f"  p99 {pct(w, 0.99):,.0f}"
    )


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        data, threads, go, out = argv[1:]
        return child(Path(data), int(threads), Path(go), Path(out))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activities", type=int, default=10_000)
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4, help="worker threads per process")
    parser.add_argument("--dir", type=Path, default=None, help="on-disk directory (not tmpfs)")
    args = parser.parse_args(argv)
    n = args.activities
    directory = Path(tempfile.mkdtemp(prefix="tether-bench-scale-", dir=args.dir or "/var/tmp"))
    try:
        load = os.getloadavg()
        raw = raw_commit_rate(directory)
        scaled = run(directory, n, args.procs, args.threads)
        single = run(directory, n, 1, 1)
        raw_after = raw_commit_rate(directory)
        floor = max(raw, raw_after) / COMMITS_PER_ACTIVITY  # the faster: the stricter floor
        print(f"activities={n:,}  load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        print(
            f"raw BEGIN IMMEDIATE;UPDATE;COMMIT (FULL): {raw:,.0f} then {raw_after:,.0f} txn/s;"
            f" commit floor = raw/{COMMITS_PER_ACTIVITY}: {floor:,.0f} Activities/s"
        )
        report(f"{args.procs} procs x {args.threads} workers", n, scaled)
        report("1 proc  x 1 worker (baseline)", n, single)
        s_rate, b_rate = n / scaled["settle_s"], n / single["settle_s"]
        print(f"ratio {args.procs * args.threads} workers / 1 worker: {s_rate / b_rate:.2f}x")
        print(f"ratio {args.procs * args.threads} workers / commit floor: {s_rate / floor:.2f}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
