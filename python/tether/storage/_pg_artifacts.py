"""Artifacts on a shared PostgreSQL catalog: the payloads every host must read.

On one host the artifact store is files in the data dir (`tether.runtime._artifacts`). Hosts
that share a PostgreSQL catalog run each other's unbound work (simulation, remote moves): a
worker on one host reads an input the admitting host stored, and the host that settles a world
reads the results other hosts recorded. So with a PostgreSQL catalog every payload above the
inline bound goes to the catalog's `artifacts` table (catalog schema version 4), which all of
them reach.

Rules:
- Content-addressed and write-once: a row is keyed by the SHA-256 of its bytes, inserted with
  ON CONFLICT DO NOTHING, so writing the same payload again (a retry, another host) is a no-op.
- Durable before its reference exists: the insert commits (`synchronous_commit` on, the
  session settings of `tether.storage._pg`) before `put` returns. A commit whose reply was
  lost is sent again on a fresh connection (the insert is idempotent); its success is the
  proof the row is there.
- A reader checks the bytes against the digest its reference names (the caller's store does).
- One connection, reopened after it breaks, shared by a store's threads under a lock.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import psycopg

from tether._core import CatalogStorageError
from tether.storage._pg import connect, one_line, where

#: How many times a statement is tried on a fresh connection after the connection broke.
ATTEMPTS: Final = 3


class PgArtifacts:
    """The `artifacts` table of the catalog at `conninfo` (thread-safe)."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._closed = False

    def _run(self, statement: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """Run one statement (autocommit: its own durable transaction) and return its row."""
        error: psycopg.Error | None = None
        with self._lock:
            if self._closed:
                raise CatalogStorageError("the artifact store is closed")
            for _ in range(ATTEMPTS):
                if self._conn is None or self._conn.closed:
                    self._conn = connect(
                        self.conninfo, CatalogStorageError, application="tether-artifacts"
                    )
                try:
                    cur = self._conn.execute(statement, params)
                    return cur.fetchone() if cur.description is not None else None
                except psycopg.OperationalError as exc:
                    if not self._conn.broken:  # a timeout, not a lost connection: no retry
                        raise CatalogStorageError(
                            f"artifact store on PostgreSQL at {where(self.conninfo)}:"
                            f" {one_line(exc)}"
                        ) from None
                    error = exc  # the connection broke: again on a new one
                    self._conn.close()
                    self._conn = None
                except psycopg.Error as exc:
                    raise CatalogStorageError(
                        f"artifact store on PostgreSQL at {where(self.conninfo)}: {one_line(exc)}"
                    ) from None
        assert error is not None
        raise CatalogStorageError(
            f"artifact store on PostgreSQL at {where(self.conninfo)}: {one_line(error)}"
        )

    def put(self, hexdigest: str, data: bytes) -> None:
        """Store `data` under `hexdigest` (its SHA-256), durably; a no-op when it is there."""
        self._run(
            "INSERT INTO artifacts (hexdigest, size, data) VALUES (%s, %s, %s)"
            " ON CONFLICT (hexdigest) DO NOTHING",
            (hexdigest, len(data), data),
        )

    def get(self, hexdigest: str) -> bytes | None:
        """The bytes stored under `hexdigest`, or None."""
        row = self._run("SELECT data FROM artifacts WHERE hexdigest = %s", (hexdigest,))
        return None if row is None else bytes(row[0])

    def close(self) -> None:
        """Close its connection; a later use is refused (never a connection reopened)."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


__all__ = ["ATTEMPTS", "PgArtifacts"]
