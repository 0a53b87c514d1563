"""Child process for the crash tests: records a result and SIGKILLs itself at a named point.

Points: ``in_transaction`` (the row was read and the core decided, nothing written yet),
``before_commit`` (the UPDATE ran, COMMIT is about to start) and ``after_commit``.

Usage: python -m tests.activities.crash_child DB WORLD KIND ACTIVITY FENCE POINT
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from tether import _core
from tether.activities import Catalog, ResultRef
from tether.storage import SqliteCatalogStore


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    db, world, kind, activity, fence_text, point = argv
    fence = int(fence_text)
    result = ResultRef("artifact://crash", "sha256:crash", "application/json", 1)
    with Catalog.open(f"sqlite://{db}") as cat:
        store = cat.store
        assert isinstance(store, SqliteCatalogStore)
        if point == "before_commit":
            store._db().set_trace_callback(lambda sql: die() if sql == "COMMIT" else None)

        def transition(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
            assert row is not None
            new = _core.catalog_record_result(row, fence, result, cat.now())
            if point == "in_transaction":
                die()
            return new

        store.apply((world, kind, activity), transition)
        if point == "after_commit":
            die()
    return 1  # not reached when a point was hit


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
