"""Per-Activity cost of Tether's durable pipeline vs its baseline: the bare durable effect.

Baseline: the provider effect alone, a durable SQLite create-if-absent keyed by operation id
(what any crash-safe caller pays). Tether: the same effect driven end to end by the Host:
intent tick, projection and admission, fenced claim, operation binding, execute, result
record, staging, the observation tick and settlement at its exact receipt (all SQLite FULL).
Run: `.venv/bin/python benches/runtime_activities.py`.
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from tether.activities import ResultRef
from tether.runtime import (
    ActivityRequest,
    AttemptContext,
    Family,
    Host,
    ReconcileOutcome,
    StagedResult,
)
from tether.world import ComponentWrite, WorldSnapshot, canonical_json

N = 200
ROUNDS = 3


class Effects:
    """A durable effect journal with create-if-absent by operation id."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS e (op TEXT PRIMARY KEY, v INTEGER)")

    def perform(self, op: str, v: int) -> None:
        self.db.execute("INSERT OR IGNORE INTO e VALUES (?, ?)", (op, v))


class Adapter:
    def __init__(self, effects: Effects) -> None:
        self.effects = effects

    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> ResultRef:
        self.effects.perform(ctx.operation_id, int(request["n"]))
        return ctx.artifacts.put_bytes(canonical_json({"v": request["n"]}), "application/json")

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> ReconcileOutcome:
        raise NotImplementedError  # never reached: the benchmark does not crash


def project(snapshot: WorldSnapshot) -> list[ActivityRequest]:
    return [ActivityRequest("bench", e, v) for e, v in snapshot.changed("intent")]


def stage(staged: StagedResult) -> list[ComponentWrite]:
    return [ComponentWrite(staged.key.activity_id, "observed", staged.json())]


def bench_baseline(root: Path) -> float:
    effects = Effects(root / "base.db")
    start = time.perf_counter()
    for i in range(N):
        effects.perform(f"op-{i}", i)
    return time.perf_counter() - start


def bench_tether(root: Path) -> float:
    effects = Effects(root / "effects.db")
    family = Family("bench", ("bench",), project, Adapter(effects), stage)
    with Host(root / "data", [family], workers=0, observe=False) as host:
        host.create_world("w")
        start = time.perf_counter()
        host.commit_tick("w", [ComponentWrite(f"t{i}", "intent", {"n": i}) for i in range(N)])
        worker = host.new_worker()
        while worker.run_once():
            pass
        worker.close()
        host.observe_once()
        elapsed = time.perf_counter() - start
        unsettled = sum(1 for _ in host.catalog.iter_pending_observation())
        assert unsettled == 0, "every activity must be settled"
    return elapsed


def main() -> None:
    # Alternate the two sides and keep each one's best round (shared machine, drifting fsync).
    base, tether = float("inf"), float("inf")
    for _ in range(ROUNDS):
        with tempfile.TemporaryDirectory() as d:
            base = min(base, bench_baseline(Path(d)))
        with tempfile.TemporaryDirectory() as d:
            tether = min(tether, bench_tether(Path(d)))
    print(f"activities={N} best of {ROUNDS} alternating rounds")
    print(f"baseline (durable effect only):   {base / N * 1e3:8.3f} ms/activity")
    print(f"tether (admit..settle, durable):  {tether / N * 1e3:8.3f} ms/activity")
    print(f"ratio tether/baseline:            {tether / base:8.2f}x")


if __name__ == "__main__":
    main()
