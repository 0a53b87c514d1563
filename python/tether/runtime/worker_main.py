"""`tether worker`: run Activity worker threads in their own process over a data directory.

Usage: tether worker DATA_DIR --families module:factory [--workers N] [--lease-ms MS]
`factory(data_dir: Path) -> Sequence[Family]` builds the families (and their adapters) in this
process. Workers share the catalog and artifact store with the Host through the data
directory; they never open the world ledger. SIGINT/SIGTERM stop them cleanly.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import cast

from tether.activities import Catalog
from tether.errors import TetherError
from tether.runtime._artifacts import DEFAULT_INLINE_BOUND, ArtifactStore
from tether.runtime._errors import FamilyError
from tether.runtime._family import Family
from tether.runtime._worker import Worker

FamiliesFactory = Callable[[Path], Sequence[Family]]


def load_factory(spec: str) -> FamiliesFactory:
    """Import `module:function`."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise FamilyError(f"--families must look like module:function, not {spec!r}")
    factory = getattr(importlib.import_module(module_name), attr, None)
    if not callable(factory):
        raise FamilyError(f"{spec!r} is not a callable")
    return cast(FamiliesFactory, factory)


def run_workers(
    data_dir: Path,
    families: Sequence[Family],
    *,
    workers: int = 1,
    lease_ms: int = 30_000,
    poll_interval_s: float = 0.02,
    inline_bound: int = DEFAULT_INLINE_BOUND,
    stop: threading.Event | None = None,
) -> None:
    """Run `workers` worker threads until `stop` is set; return after they finish."""
    data_dir = data_dir.resolve()
    url = "sqlite:///" + str(data_dir / "catalog.db")
    artifacts = ArtifactStore(data_dir / "artifacts", inline_bound=inline_bound)
    stop = stop or threading.Event()
    instance = uuid.uuid4().hex[:8]
    pool = [
        Worker(
            open_catalog=lambda: Catalog.open(url),
            artifacts=artifacts,
            families=families,
            owner=f"proc-{instance}/w{i}",
            lease_ms=lease_ms,
            stop=stop,
        )
        for i in range(workers)
    ]
    threads = [threading.Thread(target=w.run, args=(poll_interval_s,)) for w in pool]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in pool:
        w.close()


def main(argv: list[str]) -> int:
    """Entry point of `tether worker`."""
    p = argparse.ArgumentParser(prog="tether worker", description=__doc__)
    p.add_argument("data_dir", type=Path)
    p.add_argument("--families", required=True, help="module:function returning the families")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--lease-ms", type=int, default=30_000)
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error("--workers must be >= 1")
    try:
        families = list(load_factory(args.families)(args.data_dir))
        if not families or not all(isinstance(f, Family) for f in families):
            raise FamilyError(f"{args.families} must return a non-empty list of Family")
    except (ImportError, TetherError) as e:
        print(f"tether worker: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    run_workers(args.data_dir, families, workers=args.workers, lease_ms=args.lease_ms, stop=stop)
    return 0
