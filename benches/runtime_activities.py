"""Per-Activity cost and latency of Tether's durable pipeline against the floor of its commits.

Floor: one Activity needs 7 durable commits (intent tick, admission, claim, bind, result,
observation tick, settlement), so the floor is 7 x the raw commit time measured in this run:
a one-row `BEGIN IMMEDIATE; UPDATE; COMMIT` in WAL mode with synchronous=FULL on a fresh file
in the same directory as Tether's data directory (same filesystem, same fresh-WAL state),
timed in chunks that alternate with Tether's chunks so both see the same disk and CPU load.

Measured (Tether on SQLite FULL, zero-work Activities: the adapter returns an inline result):
- cost, one Activity per tick: commit the intent tick, run one attempt, commit the observation
  tick; per-Activity time / floor (target <= 2);
- latency admission -> settlement with a started Host (one worker thread, the observer), one
  process, and with the Host (observer only) beside a `tether worker` process; both sides'
  fallback poll is 60 s, so only the wakeups explain the latency. Timestamps are taken in the
  Host right after the admission and the settlement commit; median / floor (target <= 4);
- fsyncs per Activity: counted by the storage layer (ledger commits that synced, catalog
  commits, artifact fsyncs) and, when strace is installed, counted for real with
  `strace -f -c -e trace=fsync,fdatasync` over two cost runs of different sizes (the
  difference divided by the difference in Activities, so setup is excluded);
- idle CPU: a started Host (2 workers, observer) with nothing to do, process CPU time over an
  idle interval (target < 2% of one core);
- batch (the measurement this script made before): all intents in one tick, each Activity
  performing a durable effect, against that durable effect alone.

Usage: python benches/runtime_activities.py [--activities N] [--latency N] [--rounds R]
       [--dir PATH] [--skip-strace]   (the directory must not be a RAM filesystem)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _raw import RawTransactions
from tether.activities import ActivityKey, ActivityRecord, Admission, ResultRef
from tether.runtime import (
    ActivityRequest,
    AttemptContext,
    Family,
    Host,
    ReconcileOutcome,
    StagedResult,
    Worker,
)
from tether.world import CommittedTickReceipt, ComponentWrite, WorldSnapshot, canonical_json

HERE = Path(__file__).resolve().parent
KIND = "bench"
FLOOR_COMMITS = 7
IDLE_FALLBACK_S = 60.0  # latency runs: only a wakeup can explain a latency under a minute


# -- the zero-work family ---------------------------------------------------------------


class ZeroWork:
    """Executes nothing: the result is a small inline payload (no artifact fsync)."""

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        return ctx.artifacts.put_bytes(canonical_json({"v": request["n"]}), "application/json")

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> ReconcileOutcome:
        raise NotImplementedError  # never reached: the benchmark does not crash


def project(snapshot: WorldSnapshot) -> list[ActivityRequest]:
    return [ActivityRequest(KIND, e, v) for e, v in snapshot.changed("intent")]


def stage(staged: StagedResult) -> list[ComponentWrite]:
    return [ComponentWrite(staged.key.activity_id, "observed", staged.json())]


def families(data_dir: Path) -> list[Family]:
    """The `tether worker --families runtime_activities:families` factory."""
    return [Family(KIND, (KIND,), project, ZeroWork(), stage)]


def intent(i: int) -> ComponentWrite:
    return ComponentWrite(f"t{i:06d}", "intent", {"n": i})


# -- the raw commit ---------------------------------------------------------------------


# -- cost, one Activity per tick ----------------------------------------------------------


def one_per_tick(host: Host, worker: Worker, start: int, count: int) -> float:
    """Seconds for ``count`` Activities, each admitted by its own tick and settled by the
    next observation tick, sequentially."""
    begin = time.perf_counter()
    for i in range(start, start + count):
        host.commit_tick("w", [intent(i)])
        if not worker.run_once():
            raise SystemExit(f"activity {i} was not claimable after its tick")
        if len(host.observe_once()) != 1:
            raise SystemExit(f"activity {i} was not observed")
    return time.perf_counter() - begin


def counted_commits(host: Host, worker: Worker) -> tuple[int, int, int]:
    """(ledger commits that synced, catalog commits, artifact fsyncs) so far."""
    ledger = getattr(host.ledger, "synced_commits", 0)
    catalog = host.catalog.store.commits + worker.catalog.store.commits  # type: ignore[attr-defined]
    return ledger, catalog, host.artifacts.fsyncs


def bench_cost(root: Path, activities: int, chunk: int) -> dict[str, float]:
    """Per-Activity cost and raw commit time, in alternating chunks; plus counted fsyncs."""
    raw = RawTransactions(root / "raw-cost.db")
    with Host(root / "cost", families(root), workers=0, observe=False) as host:
        host.create_world("w")
        worker = host.new_worker("bench")
        before = counted_commits(host, worker)
        tether_s = raw_s = 0.0
        for start in range(0, activities, chunk):
            count = min(chunk, activities - start)
            tether_s += one_per_tick(host, worker, start, count)
            raw_s += raw.run(FLOOR_COMMITS * count)
        after = counted_commits(host, worker)
        worker.close()
        if host.catalog.has_unsettled("w"):
            raise SystemExit("every activity must be settled")
    raw.close()
    ledger, catalog, artifacts = (a - b for a, b in zip(after, before, strict=True))
    return {
        "raw_ms": raw_s / (FLOOR_COMMITS * activities) * 1e3,
        "cost_ms": tether_s / activities * 1e3,
        "ledger": ledger / activities,
        "catalog": catalog / activities,
        "artifacts": artifacts / activities,
    }


# -- latency ------------------------------------------------------------------------------


class Timed:
    """A catalog port that notes when each admission and settlement committed (Host side)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.admitted: dict[ActivityKey, float] = {}
        self.settled: dict[ActivityKey, float] = {}

    def admit(self, admission: Admission) -> ActivityRecord:
        rec: ActivityRecord = self.inner.admit(admission)
        self.admitted.setdefault(admission.key, time.perf_counter())
        return rec

    def settle(
        self, key: ActivityKey, receipt: CommittedTickReceipt, evidence_digest: str
    ) -> ActivityRecord:
        rec: ActivityRecord = self.inner.settle(key, receipt, evidence_digest)
        self.settled.setdefault(key, time.perf_counter())
        return rec

    def get(self, key: ActivityKey) -> ActivityRecord | None:
        rec: ActivityRecord | None = self.inner.get(key)
        return rec


def spawn_worker(data: Path) -> subprocess.Popen[str]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    )
    argv = [sys.executable, "-m", "tether", "worker", str(data), "--families"]
    argv += ["runtime_activities:families", "--fallback-poll-s", str(IDLE_FALLBACK_S)]
    return subprocess.Popen(argv, env=env, text=True, stderr=subprocess.PIPE)


def bench_latency(root: Path, name: str, samples: int, *, two_processes: bool) -> dict[str, float]:
    """Median admission -> settlement latency over ``samples`` sequential Activities, with the
    raw commit time measured between samples (7 commits after each)."""
    raw = RawTransactions(root / f"raw-{name}.db")
    data = root / name
    host = Host(
        data,
        families(data),
        workers=0 if two_processes else 1,
        fallback_poll_s=IDLE_FALLBACK_S,
    )
    timed = Timed(host.catalog)
    host.projector.catalog = timed
    host.settler.catalog = timed
    proc = None
    try:
        host.create_world("w")
        host.start()
        if two_processes:
            proc = spawn_worker(data)
        spans, raws = [], []
        for i in range(-3, samples):  # three unmeasured ones: the worker process starts
            key = ActivityKey("w", KIND, intent(i + 3).entity)
            host.commit_tick("w", [intent(i + 3)])
            if not host.wait_settled("w", timeout_s=120):
                raise SystemExit(f"{name}: activity {key} did not settle within 120 s")
            while key not in timed.settled:  # the ring comes before the settler returns
                time.sleep(0.0001)
            if i >= 0:
                spans.append(timed.settled[key] - timed.admitted[key])
                raws.append(raw.run(FLOOR_COMMITS) / FLOOR_COMMITS)
    finally:
        if proc is not None:
            proc.terminate()
            _, err = proc.communicate(timeout=60)
            if proc.returncode != 0:
                print(err, file=sys.stderr)
        host.close()
        raw.close()
    return {
        "median_ms": statistics.median(spans) * 1e3,
        "p90_ms": statistics.quantiles(spans, n=10)[-1] * 1e3,
        "raw_ms": statistics.median(raws) * 1e3,
    }


# -- fsyncs, counted by strace ----------------------------------------------------------------


def strace_child(data: Path, activities: int) -> None:
    """The strace child: a cost run of ``activities`` in ``data``."""
    with Host(data, families(data), workers=0, observe=False) as host:
        host.create_world("w")
        worker = host.new_worker("bench")
        one_per_tick(host, worker, 0, activities)
        worker.close()


def strace_fsyncs(root: Path, small: int, big: int) -> float | None:
    """fsync + fdatasync syscalls per Activity, from two traced runs; None without strace."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    counts = []
    for n in (small, big):
        out = root / f"strace-{n}.txt"
        argv = [strace, "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", str(out)]
        argv += [sys.executable, __file__, "--strace-child", str(root / f"traced-{n}"), str(n)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"strace run failed: {done.stderr.strip()[-500:]}", file=sys.stderr)
            return None
        total = 0
        for line in out.read_text().splitlines():
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)$", line)
            if m:
                total += int(m.group(1))
        counts.append(total)
    return (counts[1] - counts[0]) / (big - small)


# -- idle CPU -----------------------------------------------------------------------------


def bench_idle(root: Path, seconds: float) -> dict[str, float]:
    """CPU share of one core a started, idle Host uses, and its loops' idle waits."""
    data = root / "idle"
    with Host(data, families(data), workers=2) as host:
        host.create_world("w")
        host.start()
        time.sleep(0.5)  # let the loops reach their idle wait
        wakeups = [host.pool.wakeup, host.observer.wakeup]
        waits0 = sum(w.waits for w in wakeups)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        time.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        waits = sum(w.waits for w in wakeups) - waits0
    return {"share": cpu / wall, "waits_per_s": waits / wall, "fallback_s": host.fallback_poll_s}


# -- batch: the earlier measurement -----------------------------------------------------------


class Effects:
    """A durable effect journal with create-if-absent by operation id."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS e (op TEXT PRIMARY KEY, v INTEGER)")

    def perform(self, op: str, v: int) -> None:
        self.db.execute("INSERT OR IGNORE INTO e VALUES (?, ?)", (op, v))


class EffectAdapter:
    def __init__(self, effects: Effects) -> None:
        self.effects = effects

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        self.effects.perform(ctx.operation_id, int(request["n"]))
        return ctx.artifacts.put_bytes(canonical_json({"v": request["n"]}), "application/json")

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> ReconcileOutcome:
        raise NotImplementedError


def bench_batch(root: Path, n: int) -> tuple[float, float]:
    """(seconds of n durable effects alone, seconds of n Activities all in one tick)."""
    effects = Effects(root / "base.db")
    start = time.perf_counter()
    for i in range(n):
        effects.perform(f"op-{i}", i)
    base = time.perf_counter() - start
    effects = Effects(root / "effects.db")
    family = Family(KIND, (KIND,), project, EffectAdapter(effects), stage)
    with Host(root / "batch", [family], workers=0, observe=False) as host:
        host.create_world("w")
        start = time.perf_counter()
        host.commit_tick("w", [intent(i) for i in range(n)])
        worker = host.new_worker()
        while worker.run_once():
            pass
        worker.close()
        host.observe_once()
        tether = time.perf_counter() - start
        if host.catalog.has_unsettled("w"):
            raise SystemExit("every activity must be settled")
    return base, tether


# -- main -----------------------------------------------------------------------------------


def filesystem_type(path: Path) -> str:
    """The type of the filesystem holding ``path``, from /proc/mounts (longest mount prefix)."""
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                _dev, mount, fstype, *_ = line.split()
                if str(path).startswith(mount) and len(mount) > len(best):
                    best, kind = mount, fstype
    except OSError:
        pass
    return kind


def verdict(ok: bool) -> str:
    return "meets" if ok else "MISSES"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activities", type=int, default=300, help="cost run size")
    parser.add_argument("--latency", type=int, default=200, help="latency samples per mode")
    parser.add_argument("--rounds", type=int, default=3, help="cost rounds (best is kept)")
    parser.add_argument("--chunk", type=int, default=20, help="activities per paired chunk")
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=None, help="on-disk directory (not tmpfs)")
    parser.add_argument("--skip-strace", action="store_true")
    parser.add_argument("--strace-child", nargs=2, metavar=("DATA", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.strace_child:
        strace_child(Path(args.strace_child[0]), int(args.strace_child[1]))
        return 0

    parent = args.dir or Path("/var/tmp")
    root = Path(tempfile.mkdtemp(prefix="tether-bench-runtime-", dir=parent))
    fstype = filesystem_type(root)
    load = os.getloadavg()
    print(f"data directory: {root} (filesystem: {fstype}); load average {load[0]:.2f}")
    if fstype in ("tmpfs", "ramfs"):
        print("refusing to benchmark durability on a RAM filesystem; pass --dir", file=sys.stderr)
        return 2
    try:
        n = args.activities
        costs = []
        for r in range(args.rounds):
            round_dir = root / f"round-{r}"
            round_dir.mkdir()
            costs.append(bench_cost(round_dir, n, args.chunk))
        best = min(costs, key=lambda c: c["cost_ms"] / (FLOOR_COMMITS * c["raw_ms"]))
        floor = FLOOR_COMMITS * best["raw_ms"]
        ratio = best["cost_ms"] / floor
        print(f"\n== cost, one zero-work Activity per tick, x {n} (best of {args.rounds} rounds)")
        print(f"raw FULL WAL commit:           {best['raw_ms']:8.3f} ms")
        print(f"floor = 7 x raw commit:        {floor:8.3f} ms/activity")
        print(f"tether (admit..settle):        {best['cost_ms']:8.3f} ms/activity")
        print(f"ratio tether/floor:            {ratio:8.2f}   (target <= 2: {verdict(ratio <= 2)})")
        all_ratios = [c["cost_ms"] / (FLOOR_COMMITS * c["raw_ms"]) for c in costs]
        print(f"ratios of every round:         {', '.join(f'{x:.2f}' for x in all_ratios)}")
        synced = best["ledger"] + best["catalog"] + best["artifacts"]
        print(
            f"fsyncs per activity, counted by the storage layer: {synced:.2f}"
            f" (ledger commits that synced {best['ledger']:.2f}, catalog commits"
            f" {best['catalog']:.2f}, artifact fsyncs {best['artifacts']:.2f});"
            " each FULL commit is one WAL sync, checkpoints not included"
        )
        if not args.skip_strace:
            per = strace_fsyncs(root, 50, 250)
            if per is None:
                print("fsyncs per activity, strace: not measured (strace unavailable or failed)")
            else:
                print(
                    f"fsyncs per activity, strace -f -c (fsync+fdatasync, runs of 250 minus 50,"
                    f" checkpoints included): {per:.2f}"
                )

        print(f"\n== latency admission -> settlement, zero work, {args.latency} sequential")
        for name, two in (("one process", False), ("two processes", True)):
            lat = bench_latency(root, name.replace(" ", "-"), args.latency, two_processes=two)
            lfloor = FLOOR_COMMITS * lat["raw_ms"]
            lratio = lat["median_ms"] / lfloor
            print(
                f"{name:<14} median {lat['median_ms']:7.3f} ms  p90 {lat['p90_ms']:7.3f} ms"
                f"  floor {lfloor:6.3f} ms  median/floor {lratio:5.2f}"
                f"  (target <= 4: {verdict(lratio <= 4)})"
            )

        idle = bench_idle(root, args.idle_s)
        print(f"\n== idle Host (2 workers + observer, fallback poll {idle['fallback_s']:g} s)")
        print(
            f"CPU {100 * idle['share']:.2f}% of one core over {args.idle_s:g} s;"
            f" {idle['waits_per_s']:.2f} idle waits/s across its loops"
            f"  (target < 2%: {verdict(idle['share'] < 0.02)})"
        )

        (root / "batch").mkdir()
        base, tether = bench_batch(root / "batch", args.batch)
        print(f"\n== batch: {args.batch} intents in one tick, each with a durable effect")
        print(f"baseline (durable effect only):   {base / args.batch * 1e3:8.3f} ms/activity")
        print(f"tether (admit..settle, durable):  {tether / args.batch * 1e3:8.3f} ms/activity")
        print(f"ratio tether/baseline:            {tether / base:8.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
