"""Catalog lifecycles per second vs the raw SQLite transaction rate, and claim latency vs size.

Baselines, measured on the same on-disk file in the same run:
- lifecycle rate (admit, claim, bind, record result, settle) against the storage limit: the rate
  of empty `BEGIN IMMEDIATE; UPDATE; COMMIT` transactions divided by five (a lifecycle is five
  such transactions). Targets: >= 1/2 of the limit with synchronous=FULL, >= 0.3 with NORMAL.
  The two alternate in chunks (100 lifecycles, then 500 raw transactions) on the same file, so
  both see the same disk and CPU contention; the same number of transactions runs on each side.
- claim latency with 1,000,000 non-claimable rows (leased or finished, bulk-inserted with SQL)
  against the same with 1,000. Target: within 1.5x. Measured with NORMAL so fsync does not hide
  the query cost.

Usage: python benches/catalog_lifecycle.py [--activities N] [--big-rows N] [--dir PATH]
       [--modes FULL NORMAL] [--skip-claim]   (the directory must not be a RAM filesystem)
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _raw import RawTransactions
from tether.activities import (
    ActivityKey,
    Admission,
    Catalog,
    Receipt,
    ResultRef,
    operation_id_for,
    settlement_evidence_digest,
)


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


def fresh(directory: Path, name: str) -> Path:
    path = directory / name
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return path


def lifecycles(cat: Catalog, start: int, count: int) -> float:
    """Seconds taken by ``count`` full lifecycles through `Catalog`."""
    source = Receipt("bench-world", "run-1", 1, "tok-1")
    later = Receipt("bench-world", "run-1", 2, "tok-2")
    keys = [
        ActivityKey("bench-world", "bench.kind", f"a{i:07d}") for i in range(start, start + count)
    ]
    begin = time.perf_counter()
    for k in keys:
        cat.admit(Admission(k, source, "input://x", "sha256:x"))
        claim = cat.claim("bench-worker", 60_000)
        assert claim is not None and claim.key == k
        cat.bind_provider_operation(k, claim.fence, operation_id_for(k))
        result = ResultRef(f"artifact://{k.activity_id}", "sha256:r", "application/json", 1)
        cat.record_result(k, claim.fence, result)
        cat.settle(k, later, settlement_evidence_digest(k, result))
    return time.perf_counter() - begin


def paired(path: Path, synchronous: str, activities: int, chunk: int) -> tuple[float, float]:
    """(raw transactions/s, lifecycles/s), measured in alternating chunks so both see the same
    background load: ``chunk`` lifecycles, then 5 x ``chunk`` raw transactions, and so on."""
    raw = RawTransactions(path, synchronous)
    raw_s = tether_s = 0.0
    with Catalog.open(f"sqlite://{path}", synchronous=synchronous) as cat:
        for start in range(0, activities, chunk):
            count = min(chunk, activities - start)
            tether_s += lifecycles(cat, start, count)
            raw_s += raw.run(5 * count)
    raw.close()
    return 5 * activities / raw_s, activities / tether_s


# Non-claimable filler: alternately leased far into the future and finished (result recorded),
# on the catalog clock's boot, with the derived columns the core would compute for them.
_FILL = """
WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < :n)
INSERT INTO activities (
    world_id, kind, activity_id, source_run_id, source_tick, source_token, input_ref,
    input_digest, admitted_at_ms, fence, attempt_count, attempt_owner, lease_expires_ms,
    may_execute, retry_authorized, result_ref, result_digest, result_media_type, result_size,
    result_failed, result_attempt, result_fence, result_at_ms, evidence_revision,
    awaiting_decision, claimable_from_ms, lease_boot_id, pending_observation, unsettled,
    version)
SELECT 'fill-world', 'bench.kind', printf('f%08d', i), 'run-1', 1, 'tok-1', 'input://f',
    'sha256:f', 0, 1, 1,
    CASE WHEN i % 2 = 0 THEN 'holder' END, CASE WHEN i % 2 = 0 THEN :far END,
    CASE WHEN i % 2 = 0 THEN 1 END, 0,
    CASE WHEN i % 2 = 1 THEN 'artifact://f' END, CASE WHEN i % 2 = 1 THEN 'sha256:f' END,
    CASE WHEN i % 2 = 1 THEN 'application/json' END, CASE WHEN i % 2 = 1 THEN 1 END,
    CASE WHEN i % 2 = 1 THEN 0 END, CASE WHEN i % 2 = 1 THEN 1 END,
    CASE WHEN i % 2 = 1 THEN 1 END, CASE WHEN i % 2 = 1 THEN 0 END, 0, 0,
    CASE WHEN i % 2 = 0 THEN :far END, :boot, i % 2, 1, 2
FROM seq
"""


def claim_latency_us(path: Path, filler: int, claims: int) -> float:
    """Median microseconds per claim with ``filler`` non-claimable rows present."""
    with Catalog.open(f"sqlite://{path}", synchronous="NORMAL") as cat:
        assert cat.claim("bench-worker", 60_000) is None  # the store is on this boot's clock
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT OR IGNORE INTO activity_kinds (kind) VALUES ('bench.kind')")
        conn.execute(_FILL, {"n": filler, "far": 2**62, "boot": cat.now().boot_id})
        conn.execute("COMMIT")
        conn.close()
        source = Receipt("bench-world", "run-1", 1, "tok-1")
        for i in range(claims):
            k = ActivityKey("bench-world", "bench.kind", f"c{i:07d}")
            cat.admit(Admission(k, source, "input://x", "sha256:x"))
        samples = []
        for _ in range(claims):
            start = time.perf_counter()
            claim = cat.claim("bench-worker", 60_000)
            samples.append(time.perf_counter() - start)
            assert claim is not None
        assert cat.claim("bench-worker", 60_000) is None
    return statistics.median(samples) * 1e6


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activities", type=int, default=10_000)
    parser.add_argument("--big-rows", type=int, default=1_000_000)
    parser.add_argument("--small-rows", type=int, default=1_000)
    parser.add_argument("--claims", type=int, default=2_000)
    parser.add_argument("--modes", nargs="+", default=["FULL", "NORMAL"])
    parser.add_argument("--skip-claim", action="store_true", help="lifecycle rates only")
    parser.add_argument("--chunk", type=int, default=100, help="lifecycles per paired chunk")
    parser.add_argument("--dir", type=Path, default=None, help="on-disk directory (not tmpfs)")
    args = parser.parse_args(argv)

    parent = args.dir or Path("/var/tmp")
    directory = Path(tempfile.mkdtemp(prefix="tether-bench-catalog-", dir=parent))
    fstype = filesystem_type(directory)
    print(f"database directory: {directory} (filesystem: {fstype})")
    if fstype in ("tmpfs", "ramfs"):
        print("refusing to benchmark durability on a RAM filesystem; pass --dir", file=sys.stderr)
        return 2
    try:
        n = args.activities
        print(f"\n== lifecycles (admit, claim, bind, record, settle) x {n:,}")
        for mode, target in (("FULL", 0.5), ("NORMAL", 0.3)):
            if mode not in args.modes:
                continue
            raw, tether = paired(fresh(directory, f"lifecycle-{mode}.db"), mode, n, args.chunk)
            limit = raw / 5
            ratio = tether / limit
            verdict = "meets" if ratio >= target else "MISSES"
            print(
                f"synchronous={mode:<6}  raw BEGIN IMMEDIATE;UPDATE;COMMIT: {raw:10,.0f} txn/s"
                f"  limit = raw/5: {limit:9,.1f} lifecycles/s"
            )
            print(
                f"{'':20}tether: {tether:9,.1f} lifecycles/s  ratio vs limit: {ratio:.2f}"
                f"  (target >= {target:.2f}: {verdict})"
            )

        if args.skip_claim:
            return 0
        print(f"\n== claim latency (synchronous=NORMAL, median of {args.claims:,} claims)")
        small = claim_latency_us(fresh(directory, "claim-small.db"), args.small_rows, args.claims)
        big = claim_latency_us(fresh(directory, "claim-big.db"), args.big_rows, args.claims)
        ratio = big / small
        verdict = "meets" if ratio <= 1.5 else "MISSES"
        print(f"{args.small_rows:>9,} non-claimable rows: {small:8.1f} us/claim")
        print(f"{args.big_rows:>9,} non-claimable rows: {big:8.1f} us/claim")
        print(f"ratio big/small: {ratio:.2f}  (target <= 1.50: {verdict})")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
