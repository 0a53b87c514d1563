"""A worker process for the two-process test: claims from a shared catalog (file or server)
and executes each activity's effect by appending to an effect log, as a provider would.

Some attempts stall past their lease after binding (a zombie): they still execute, and their
late result is refused. A replacement claimant is reconcile-only and never executes: it looks
the operation up in the effect log and records the recovered result, or records "unknown" and
retries later. So every activity must end up executed by exactly one attempt.

Usage: python -m tests.activities.claim_worker DB EFFECTS GO_FILE NAME SEED
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

from tether.activities import Catalog, Evidence, ResultRef, operation_id_for
from tether.errors import CatalogRejection

LEASE_MS = 150


def executed(effects: Path, operation_id: str) -> bool:
    try:
        return any(line.split()[0] == operation_id for line in effects.read_text().splitlines())
    except FileNotFoundError:
        return False


def main(argv: list[str]) -> int:
    db, effects, go, name, seed = argv
    rng = random.Random(int(seed))
    effects_path = Path(effects)
    Path(f"{go}.{name}.ready").touch()
    while not Path(go).exists():
        time.sleep(0.001)
    if db.startswith("sqlite://"):
        cat_cm = Catalog.open(db, synchronous="NORMAL")
    else:
        cat_cm = Catalog.open(db)  # PostgreSQL: leases on the server's clock
    with cat_cm as cat:
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < 1.5:
            claim = cat.claim(name, LEASE_MS)
            if claim is None:
                time.sleep(0.005)
                continue
            idle_since = time.monotonic()
            key, fence = claim.key, claim.fence
            op = operation_id_for(key)
            result = ResultRef(f"effect://{op}", "sha256:done", "text/plain", 1)
            try:
                if claim.attempt.may_execute:
                    cat.bind_provider_operation(key, fence, op)
                    if rng.random() < 0.1:
                        time.sleep(LEASE_MS * 2 / 1000)  # stall past the lease: a zombie
                    fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    try:
                        os.write(fd, f"{op} {name} {fence}\n".encode())
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                    cat.record_result(key, fence, result)
                elif executed(effects_path, op):
                    cat.record_result(key, fence, result)
                else:
                    cat.record_unknown(key, fence, Evidence(f"log://{op}", "sha256:none"), 20)
            except CatalogRejection:
                continue  # a newer attempt took over; it will reconcile
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
