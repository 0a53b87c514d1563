"""One crash-matrix process: run a Host on a data directory until every task settles.

Usage: scenario.py DATA_DIR N [--blind] [--workers K] [--pad BYTES] [--store-url URL]
The first run creates world `w` and commits N intents; later runs on the same directory
resume at the head. `TETHER_CRASH_AT` picks the injection point that SIGKILLs this process.
Exit 0 once every Activity is settled (or, with --blind, parked awaiting a decision).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from journal_provider import BLIND_KIND, KIND, intents, make_blind_family, make_family
from tether.activities import ActivityKey
from tether.runtime import Host

LEASE_MS = 400


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("data_dir")
    p.add_argument("n", type=int)
    p.add_argument("--blind", action="store_true")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--pad", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--store-url", default=None, help="PostgreSQL URL of the catalog and ledger")
    args = p.parse_args(argv)
    data = Path(args.data_dir)
    kind = BLIND_KIND if args.blind else KIND
    family = make_blind_family(data) if args.blind else make_family(data)
    stores = (
        {}
        if args.store_url is None
        else {"catalog_url": args.store_url, "world_url": args.store_url}
    )
    host = Host(data, [family], workers=args.workers, lease_ms=LEASE_MS, **stores)
    try:
        if "w" not in host.ledger.worlds():
            host.create_world("w")
        host.recover()
        if host.head("w").tick == 0:
            host.commit_tick("w", intents(args.n, kind=kind, pad=args.pad))
        host.start()
        keys = [
            ActivityKey(world_id="w", kind=kind, activity_id=f"task-{i:04d}") for i in range(args.n)
        ]
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            records = [host.get(k) for k in keys]
            if args.blind:
                done = all(r is not None and r.awaiting_decision for r in records)
            else:
                done = all(r is not None and r.settlement is not None for r in records)
            if done:
                return 0
            time.sleep(0.02)
        print("scenario timed out", file=sys.stderr)
        return 3
    finally:
        host.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
