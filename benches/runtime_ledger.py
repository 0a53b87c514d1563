"""Tick commit cost of the SQLite world ledger vs its baseline: a bare SQLite transaction.

The baseline inserts the same component rows in one `BEGIN IMMEDIATE` transaction on an
equally durable database (WAL, synchronous=FULL) with no head CAS, token or writer epoch, so
the ratio is what Tether's tick protocol adds. Run: `.venv/bin/python benches/runtime_ledger.py`.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import time
from pathlib import Path

from tether.world import ComponentWrite, SqliteLedger

TICKS = 300
WRITES_PER_TICK = 20
ROUNDS = 3


def _writes(t: int) -> list[ComponentWrite]:
    return [
        ComponentWrite(f"entity-{i}", "pose", {"x": t * 0.1, "y": i, "q": [1.0, 0.0, 0.0, 0.0]})
        for i in range(WRITES_PER_TICK)
    ]


def bench_tether(root: Path) -> float:
    ledger = SqliteLedger.open(root / "world.db")
    ledger.create_world("w")
    writer = ledger.acquire_writer("w")
    head = ledger.head("w")
    start = time.perf_counter()
    for t in range(TICKS):
        head = ledger.commit(writer, head, _writes(t))
        ledger.complete_post_commit(head)
    elapsed = time.perf_counter() - start
    ledger.close()
    return elapsed


def bench_baseline(root: Path) -> float:
    db = sqlite3.connect(root / "base.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(
        "CREATE TABLE c (entity TEXT, component TEXT, tick INTEGER, value TEXT,"
        " PRIMARY KEY (entity, component, tick))"
    )
    start = time.perf_counter()
    for t in range(TICKS):
        rows = [(w.entity, w.component, t, json.dumps(w.value, sort_keys=True)) for w in _writes(t)]
        db.execute("BEGIN IMMEDIATE")
        db.executemany("INSERT INTO c VALUES (?, ?, ?, ?)", rows)
        db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed


def main() -> None:
    # Alternate the two sides and keep each one's best round: the machine is shared and
    # fsync latency drifts, so a single pair of runs can invert the ratio.
    base, tether = float("inf"), float("inf")
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory() as d:
            base = min(base, bench_baseline(Path(d)))
        with tempfile.TemporaryDirectory() as d:
            tether = min(tether, bench_tether(Path(d)))
    per = lambda s: s / TICKS * 1e6  # noqa: E731
    print(f"ticks={TICKS} writes/tick={WRITES_PER_TICK} best of {ROUNDS} alternating rounds")
    print(f"baseline (bare SQLite tx): {per(base):9.1f} us/tick")
    print(f"tether ledger commit:      {per(tether):9.1f} us/tick (+ post-commit mark)")
    print(f"ratio tether/baseline:     {tether / base:9.2f}x")


if __name__ == "__main__":
    main()
