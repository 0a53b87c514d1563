"""The benches' raw baseline: one-row write transactions on a SQLite WAL file, on a connection
configured like the catalog's (same `synchronous` and checkpoint interval)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tether.storage._sqlite import WAL_AUTOCHECKPOINT_PAGES


class RawTransactions:
    """`BEGIN IMMEDIATE; UPDATE; COMMIT` on `path` (a fresh file, or the catalog's own)."""

    def __init__(self, path: Path, synchronous: str = "FULL") -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.conn.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES[synchronous]}")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_raw (id INTEGER PRIMARY KEY, n INTEGER)"
        )
        self.conn.execute("INSERT OR IGNORE INTO bench_raw VALUES (1, 0)")

    def run(self, transactions: int) -> float:
        """Seconds taken by ``transactions`` write transactions."""
        execute = self.conn.execute
        start = time.perf_counter()
        for _ in range(transactions):
            execute("BEGIN IMMEDIATE")
            execute("UPDATE bench_raw SET n = n + 1 WHERE id = 1")
            execute("COMMIT")
        return time.perf_counter() - start

    def close(self) -> None:
        self.conn.close()
