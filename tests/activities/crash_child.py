"""Child process for the crash tests: records a result and SIGKILLs itself at a named point.

Points: ``in_transaction`` (the row was read and the core decided, nothing written yet),
``before_commit`` (SQLite: the UPDATE ran, COMMIT is about to start; PostgreSQL: the write and
its COMMIT, one message, are about to be sent) and ``after_commit``.

Usage: python -m tests.activities.crash_child URL WORLD KIND ACTIVITY FENCE POINT
(URL: ``sqlite:///path.db`` or ``postgresql://...``: a PostgreSQL COMMIT is intercepted as the
store sends its message).
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
    url, world, kind, activity, fence_text, point = argv
    fence = int(fence_text)
    result = ResultRef("artifact://crash", "sha256:crash", "application/json", 1)
    with Catalog.open(url) as cat:
        store = cat.store
        if point == "before_commit":
            if isinstance(store, SqliteCatalogStore):
                store._db().set_trace_callback(lambda sql: die() if sql == "COMMIT" else None)
            else:
                # PostgreSQL sends a write and its COMMIT as one message: die as it is sent.
                from tether.storage import _pg

                message = _pg._message

                def dying_message(conn: Any, texts: Any) -> Any:
                    if texts and texts[-1].strip().upper() == "COMMIT":
                        die()
                    return message(conn, texts)

                _pg._message = dying_message

        now = cat.now()  # before the write: a server clock reads on the store's connection

        def transition(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
            assert row is not None
            new = _core.catalog_record_result(row, fence, result, now)
            if point == "in_transaction":
                die()
            return new

        store.apply((world, kind, activity), transition)
        if point == "after_commit":
            die()
    return 1  # not reached when a point was hit


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
