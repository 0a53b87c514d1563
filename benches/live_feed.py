"""Benchmark: a world's `LiveFeed` sync with many settled Activities, against a full rebuild.

A real Host (SQLite files, a zero-work echo family) settles N Activities, 100 per tick. Then,
over the same records:
- baseline, a full rebuild: a fresh `LiveFeed`'s first sync (every record mapped and
  published) plus its canonical record, what every sync cost before syncs became incremental;
- Tether: an open feed's steady sync (the pump's 0.1 s work when nothing changed) and one
  `canonical()` read.
Prints the medians (ms) and the steady sync as a share of the rebuild. Target: the steady sync
at most 1/10 of the rebuild at N = 1,000 (the feed's bound: a feed keeps its latest 1,000
settled Activities).

Run: `.venv/bin/python benches/live_feed.py [--activities 1000 5000] [--rounds 20]`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tether.activities import ActivityKey, ActivityRecord
from tether.live import LiveFeed
from tether.runtime import ActivityRequest, AttemptContext, Family, Host
from tether.world import ComponentWrite, canonical_json

KIND = "bench.echo"
#: The steady sync must cost at most this share of a full rebuild at 1,000 settled.
TARGET_SHARE = 0.1


def _project(snapshot: Any) -> list[ActivityRequest]:
    return [ActivityRequest(KIND, e, v) for e, v in snapshot.changed("echo.intent")]


def _stage(staged: Any) -> list[ComponentWrite]:
    return [ComponentWrite(staged.key.activity_id, "echo.observed", staged.json())]


class Echo:
    def execute(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
        return ctx.artifacts.put_bytes(canonical_json(request), "application/json")

    def reconcile(self, ctx: AttemptContext, request: dict[str, Any]) -> Any:
        return self.execute(ctx, request)


def settled_records(directory: Path, n: int) -> list[ActivityRecord]:
    family = Family("bench", (KIND,), _project, Echo(), _stage)
    with Host(directory, [family], workers=0, observe=False) as host:
        host.create_world("w")
        for start in range(0, n, 100):
            ids = range(start, min(n, start + 100))
            host.commit_tick("w", [ComponentWrite(f"a{i}", "echo.intent", {"i": i}) for i in ids])
            worker = host.new_worker()
            while worker.run_once():
                pass
            worker.close()
            while host.observe_once():
                pass
        records = [host.get(ActivityKey("w", KIND, f"a{i}")) for i in range(n)]
    out = [r for r in records if r is not None and r.settlement is not None]
    assert len(out) == n, f"{len(out)} of {n} settled"
    return out


def ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def measure(records: list[ActivityRecord], rounds: int) -> dict[str, float]:
    rebuild = []
    for _ in range(max(3, rounds // 4)):
        fresh = LiveFeed("ws", "w", lambda: records)
        t = time.perf_counter()
        fresh.sync()
        fresh.canonical()
        rebuild.append(time.perf_counter() - t)
    feed = LiveFeed("ws", "w", lambda: records)
    feed.sync()
    steady, canonical = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        feed.sync()
        steady.append(time.perf_counter() - t)
    for _ in range(max(3, rounds // 4)):
        t = time.perf_counter()
        feed.canonical()
        canonical.append(time.perf_counter() - t)
    return {"rebuild": ms(rebuild), "steady": ms(steady), "canonical": ms(canonical)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--activities", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    verdict = 0
    print(f"{'settled':>8} {'rebuild ms':>11} {'steady sync ms':>15} {'canonical ms':>13} share")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.activities:
            records = settled_records(Path(tmp) / f"n{n}", n)
            m = measure(records, args.rounds)
            share = m["steady"] / m["rebuild"]
            print(
                f"{n:>8} {m['rebuild']:>11.2f} {m['steady']:>15.3f} {m['canonical']:>13.2f}"
                f" {share:.3f}"
            )
            if n == 1000:
                ok = share <= TARGET_SHARE
                verdict |= 0 if ok else 1
                print(
                    f"target: steady sync <= {TARGET_SHARE}x the rebuild at 1,000 settled: "
                    f"{share:.3f}x {'PASS' if ok else 'FAIL'}"
                )
    return verdict


if __name__ == "__main__":
    raise SystemExit(main())
