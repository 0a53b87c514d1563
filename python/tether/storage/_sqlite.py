"""SQLite catalog store: one file, WAL, BEGIN IMMEDIATE, compare-and-swap on `version`.

Every write is one transaction that reads the row, hands it to the Rust core's transition and
writes back only the columns that changed, guarded by the version it read. The store is shared
safely by threads (it serialises them on one connection); separate processes coordinate through
SQLite's write lock, taken up front by BEGIN IMMEDIATE so no two transitions interleave.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tether._core import (
    CatalogConfigError,
    CatalogStorageError,
    OperationConflict,
    catalog_columns,
)
from tether.storage._port import ClaimTransition, KeyTuple, Row, Transition, View
from tether.storage._schema import migrate

COLUMNS: tuple[str, ...] = tuple(catalog_columns())
VERSION = COLUMNS.index("version")
SYNCHRONOUS = ("FULL", "NORMAL")
BUSY_TIMEOUT_S = 30.0

_N = len(COLUMNS)
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM activities"
_BY_KEY = f"{_SELECT} WHERE world_id = ? AND kind = ? AND activity_id = ?"
_INSERT = f"INSERT INTO activities ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * _N)})"
_CLAIMABLE = "claimable_from_ms IS NOT NULL AND claimable_from_ms <= ?"
# Claims name their index: the planner would otherwise walk a world's primary-key range, whose
# cost grows with that world's finished rows. Leased rows sit beyond `now` in these indexes and
# finished rows are not in them at all, so a claim only ever touches claimable rows.
_BY_FROM = f"{_SELECT} INDEXED BY activities_claimable WHERE {_CLAIMABLE}"
_BY_KIND = f"{_SELECT} INDEXED BY activities_claimable_kind WHERE kind = ? AND {_CLAIMABLE}"
_CLAIM_ANY = f"{_BY_FROM} ORDER BY claimable_from_ms LIMIT 1"
_CLAIM_WORLD = f"{_BY_FROM} AND world_id = ? ORDER BY claimable_from_ms LIMIT 1"
_CLAIM_KIND = f"{_BY_KIND} ORDER BY claimable_from_ms LIMIT 1"
_CLAIM_KIND_WORLD = f"{_BY_KIND} AND world_id = ? ORDER BY claimable_from_ms LIMIT 1"
_HAS_UNSETTLED = (
    "SELECT 1 FROM activities INDEXED BY activities_unsettled"
    " WHERE world_id = ? AND settled_tick IS NULL LIMIT 1"
)
_I_CLAIMABLE_FROM = COLUMNS.index("claimable_from_ms")

# Per view: its partial index, the filter matching that index, and the keyset order.
_VIEWS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "claimable": (
        "activities_claimable",
        _CLAIMABLE,
        ("claimable_from_ms", "world_id", "kind", "activity_id"),
    ),
    "pending_observation": (
        "activities_pending_observation",
        "result_ref IS NOT NULL AND settled_tick IS NULL",
        ("world_id", "kind", "activity_id"),
    ),
    "awaiting_decision": (
        "activities_awaiting_decision",
        "awaiting_decision = 1",
        ("world_id", "kind", "activity_id"),
    ),
}
_VIEW_INDEX = {name: tuple(COLUMNS.index(c) for c in v[2]) for name, v in _VIEWS.items()}


class SqliteCatalogStore:
    """The local SQLite implementation of `CatalogStore` (thread-safe, one connection)."""

    def __init__(self, path: str, *, synchronous: str = "FULL") -> None:
        if synchronous not in SYNCHRONOUS:
            raise CatalogConfigError(
                f"synchronous must be one of {SYNCHRONOUS}, not {synchronous!r}"
            )
        self.path = path
        self.synchronous = synchronous
        self._lock = threading.Lock()
        self._updates: dict[tuple[int, ...], str] = {}
        try:
            conn = sqlite3.connect(
                path,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_S,
                cached_statements=256,
            )
        except sqlite3.Error as e:
            raise CatalogStorageError(f"cannot open catalog database {path!r}: {e}") from e
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise CatalogStorageError(f"catalog database {path!r} cannot use WAL ({mode})")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
            migrate(conn)
        except sqlite3.Error as e:
            conn.close()
            raise CatalogStorageError(f"cannot prepare catalog database {path!r}: {e}") from e
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise CatalogStorageError("the catalog is closed")
        return self._conn

    def _write(self, conn: sqlite3.Connection, old: Row, new: Row) -> None:
        changed = tuple(i for i in range(_N) if old[i] != new[i])
        sql = self._updates.get(changed)
        if sql is None:
            sets = ", ".join(f"{COLUMNS[i]} = ?" for i in changed)
            sql = (
                f"UPDATE activities SET {sets}"
                " WHERE world_id = ? AND kind = ? AND activity_id = ? AND version = ?"
            )
            self._updates[changed] = sql
        params = [new[i] for i in changed]
        params += (old[0], old[1], old[2], old[VERSION])
        if conn.execute(sql, params).rowcount != 1:
            raise CatalogStorageError("the activity changed under the transaction (version)")

    def _transact(self, body: Callable[[sqlite3.Connection], Row | None]) -> Row | None:
        with self._lock:
            conn = self._db()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise CatalogStorageError(f"cannot start a catalog transaction: {e}") from e
            try:
                out = body(conn)
                conn.execute("COMMIT")
                return out
            except sqlite3.IntegrityError as e:
                conn.execute("ROLLBACK")
                if "operation_id" in str(e):
                    raise OperationConflict(
                        "the provider operation id is bound to another activity"
                    ) from e
                raise CatalogStorageError(f"catalog write refused: {e}") from e
            except sqlite3.Error as e:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise CatalogStorageError(f"catalog transaction failed: {e}") from e
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def apply(self, key: KeyTuple, transition: Transition) -> Row:
        def body(conn: sqlite3.Connection) -> Row:
            old = conn.execute(_BY_KEY, key).fetchone()
            new = transition(old)
            if old is None:
                conn.execute(_INSERT, new)
            elif new[VERSION] != old[VERSION]:
                self._write(conn, old, new)
            return new

        out = self._transact(body)
        assert out is not None
        return out

    def claim(
        self,
        now_ms: int,
        transition: ClaimTransition,
        kinds: Sequence[str] | None,
        world_id: str | None,
    ) -> Row | None:
        def body(conn: sqlite3.Connection) -> Row | None:
            old = self._next_claimable(conn, now_ms, kinds, world_id)
            if old is None:
                return None
            new = transition(old)
            self._write(conn, old, new)
            return new

        return self._transact(body)

    @staticmethod
    def _next_claimable(
        conn: sqlite3.Connection, now_ms: int, kinds: Sequence[str] | None, world_id: str | None
    ) -> Row | None:
        if kinds is None:
            if world_id is None:
                row: Row | None = conn.execute(_CLAIM_ANY, (now_ms,)).fetchone()
                return row
            row = conn.execute(_CLAIM_WORLD, (now_ms, world_id)).fetchone()
            return row
        # One indexed probe per kind; the earliest claimable row among them wins.
        best: Row | None = None
        for kind in dict.fromkeys(kinds):
            if world_id is None:
                row = conn.execute(_CLAIM_KIND, (kind, now_ms)).fetchone()
            else:
                row = conn.execute(_CLAIM_KIND_WORLD, (kind, now_ms, world_id)).fetchone()
            if row is not None and (
                best is None or row[_I_CLAIMABLE_FROM] < best[_I_CLAIMABLE_FROM]
            ):
                best = row
        return best

    def get(self, key: KeyTuple) -> Row | None:
        with self._lock:
            try:
                row: Row | None = self._db().execute(_BY_KEY, key).fetchone()
            except sqlite3.Error as e:
                raise CatalogStorageError(f"catalog read failed: {e}") from e
            return row

    def page(
        self,
        view: View,
        now_ms: int,
        kinds: Sequence[str] | None,
        world_id: str | None,
        after: tuple[Any, ...] | None,
        limit: int,
    ) -> list[Row]:
        index, condition, order = _VIEWS[view]
        where = [condition]
        params: list[Any] = [now_ms] if view == "claimable" else []
        if world_id is not None:
            where.append("world_id = ?")
            params.append(world_id)
        if kinds is not None:
            kinds = list(dict.fromkeys(kinds))
            if not kinds:
                return []
            where.append(f"kind IN ({', '.join('?' * len(kinds))})")
            params.extend(kinds)
        if after is not None:
            where.append(f"({', '.join(order)}) > ({', '.join('?' * len(order))})")
            params.extend(after)
        sql = (
            f"{_SELECT} INDEXED BY {index} WHERE {' AND '.join(where)}"
            f" ORDER BY {', '.join(order)} LIMIT ?"
        )
        params.append(limit)
        with self._lock:
            try:
                return self._db().execute(sql, params).fetchall()
            except sqlite3.Error as e:
                raise CatalogStorageError(f"catalog scan failed: {e}") from e

    def cursor(self, view: View, row: Row) -> tuple[Any, ...]:
        return tuple(row[i] for i in _VIEW_INDEX[view])

    def has_unsettled(self, world_id: str) -> bool:
        with self._lock:
            try:
                row = (
                    self._db()
                    .execute(
                        _HAS_UNSETTLED,
                        (world_id,),
                    )
                    .fetchone()
                )
            except sqlite3.Error as e:
                raise CatalogStorageError(f"catalog read failed: {e}") from e
            return row is not None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
