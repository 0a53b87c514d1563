"""PostgreSQL catalog store: row locks, `FOR UPDATE SKIP LOCKED` claims, compare-and-swap on
`version`, and a lease clock read on the server.

Every write is one READ COMMITTED transaction: lock the row (`SELECT ... FOR UPDATE`), hand it
to the Rust core's transition, write back only the changed columns guarded by the version read,
and, when the core's columns say a waiter should wake, `NOTIFY` in the same transaction (so a
wake is delivered exactly when the commit lands). A claim picks the earliest claimable row with
`FOR UPDATE SKIP LOCKED` on the claimable index: claimants on many hosts never wait on each
other's rows. SQL here never decides a rule: the one comparison is the core's definition of
claimable (`claimable_from_ms <= now` on the lease clock), and retention's is the same kind of
comparison on the core's `compactable_from_ms` up to a wall-clock cutoff (the core decides each
row it is handed, `compact`); the other filters select flags the core computed.

A COMMIT whose reply is lost raises `CommitUnknown` with the row the transaction wrote; the
caller re-reads (`Catalog.committed`) before any effect. Any other failure rolls back.

What a read costs: a claim walks the claimable index from its start, skipping rows locked by
other claimants and claimable rows of kinds, worlds or hosts it does not serve (a claim
filtered to a few kinds among many claimable ones walks past the others; `bound_host` is in the
index, so rows bound to other hosts are skipped off the index entries); leased and finished
rows are never visited. `has_unsettled` is one probe of the unsettled index. Scans page by keyset.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from itertools import compress
from operator import ne
from typing import Any

from tether._core import CatalogStorageError, catalog_columns
from tether.activities._clock import Now
from tether.storage._errors import CommitUnknown
from tether.storage._pg import Session
from tether.storage._pg_doorbell import PostgresDoorbell, channel_for
from tether.storage._pg_schema import ensure
from tether.storage._port import (
    ClaimTransition,
    CompactTransition,
    KeyTuple,
    Row,
    Transition,
    View,
)

COLUMNS: tuple[str, ...] = tuple(catalog_columns())
VERSION = COLUMNS.index("version")
_AT = {c: i for i, c in enumerate(COLUMNS)}
_N = len(COLUMNS)
_POSITIONS = range(_N)
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM activities"
_BY_KEY = f"{_SELECT} WHERE world_id = %s AND kind = %s AND activity_id = %s"
_INSERT = (
    f"INSERT INTO activities ({', '.join(COLUMNS)}) VALUES ({', '.join(['%s'] * _N)})"
    " ON CONFLICT DO NOTHING"
)
_CLAIM_ORDER = ("claimable_from_ms", "kind", "world_id", "activity_id")
_CLAIMABLE = "claimable_from_ms IS NOT NULL AND claimable_from_ms <= %s"
_ON_HOST = "bound_host IN (%s, %s)"
_COMPACTABLE = "compactable_from_ms IS NOT NULL AND compactable_from_ms <= %s"
_COMPACT_ORDER = ("compactable_from_ms", "world_id", "kind", "activity_id")

#: Topic bits of the NOTIFY payload, the same as the data-dir doorbell's.
CLAIMABLE, RESULT, SETTLED = 1, 2, 4

_VIEWS: dict[str, tuple[str, tuple[str, ...]]] = {
    "claimable": (_CLAIMABLE, _CLAIM_ORDER),
    "pending_observation": ("pending_observation = 1", ("world_id", "kind", "activity_id")),
    "awaiting_decision": ("awaiting_decision = 1", ("world_id", "kind", "activity_id")),
    "compactable": (_COMPACTABLE, _COMPACT_ORDER),
}
_VIEW_INDEX = {name: tuple(_AT[c] for c in v[1]) for name, v in _VIEWS.items()}


def wake_topics(old: Row | None, new: Row) -> int:
    """Which waiters a write should wake, read off the core's columns: workers when a row
    became claimable or claimable earlier, the observer when a result became pending, settle
    waiters when a row stopped being unsettled. A hint only: waiters re-read."""
    topics = 0
    at, po, un = _AT["claimable_from_ms"], _AT["pending_observation"], _AT["unsettled"]
    c = new[at]
    if c is not None and (old is None or old[at] is None or c < old[at]):
        topics |= CLAIMABLE
    if new[po] == 1 and (old is None or old[po] != 1):
        topics |= RESULT
    if old is not None and old[un] == 1 and new[un] != 1:
        topics |= SETTLED
    return topics


class PostgresClock:
    """The catalog clock read on the PostgreSQL server, so every host compares one clock.

    Two modes, chosen at construction:
    - ``kernel`` (the role may read server files: superuser or `pg_read_server_files`): the
      lease clock is the server kernel's CLOCK_BOOTTIME (`/proc/uptime`, 10 ms resolution),
      on the server kernel's boot id. It never steps; a server reboot is a new boot.
    - ``wall`` (any role): the lease clock is `clock_timestamp()` minus the postmaster's start
      time, on a boot named by the cluster's system identifier and that start time, so a
      server restart is a new boot (every lease of the old one has expired). Its limit:
      `clock_timestamp()` is the server's wall clock, so a wall-clock step on the server moves
      every lease and backoff by the step: a step forward expires leases early (a worker loses
      its attempt, which is then reclaimed if unbound or reconciled if bound: fences still
      hold, nothing is replayed), a step back lengthens them (work waits longer). Keep the
      server on NTP slewing, not stepping.

    Record times (``wall_ms``) are the server's `clock_timestamp()` in both modes. One reading
    is one round trip on the store's connection.
    """

    _KERNEL = (
        "SELECT pg_read_file('/proc/sys/kernel/random/boot_id'), pg_read_file('/proc/uptime'),"
        " (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    )
    _WALL = (
        "SELECT (SELECT system_identifier FROM pg_control_system())::text || ':' ||"
        " (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint::text,"
        " GREATEST(0, floor(extract(epoch FROM clock_timestamp() - pg_postmaster_start_time())"
        " * 1000))::bigint,"
        " (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    )

    def __init__(self, store: PostgresCatalogStore, *, mode: str | None = None) -> None:
        self._store = store
        if mode is None:
            mode = "kernel" if store._can_read_server_files() else "wall"
        if mode not in ("kernel", "wall"):
            raise CatalogStorageError(f"PostgresClock mode must be kernel or wall, not {mode!r}")
        self.mode = mode

    def now(self) -> Now:
        if self.mode == "kernel":
            boot, uptime, wall = self._store._read_one("the server clock", self._KERNEL)
            seconds, _, hundredths = str(uptime).split()[0].partition(".")
            boot_ms = int(seconds) * 1000 + int((hundredths + "00")[:3])
            return Now("pg-kernel:" + str(boot).strip(), boot_ms, int(wall))
        boot_id, boot_ms, wall = self._store._read_one("the server clock", self._WALL)
        return Now("pg:" + str(boot_id), int(boot_ms), int(wall))


class PostgresCatalogStore:
    """The PostgreSQL implementation of `CatalogStore` (thread-safe, one connection).

    Args:
        conninfo: a libpq URL (``postgresql://host:port/db?options=-csearch_path%3Dschema``);
            credentials from the environment or a password file, never the URL.
        upgrade: apply pending schema migrations instead of refusing an older schema (the
            `tether db upgrade` path).
    """

    def __init__(self, conninfo: str, *, upgrade: bool = False) -> None:
        self._lock = threading.Lock()
        self._updates: dict[tuple[int, ...], str] = {}
        self._session = Session(
            conninfo, CatalogStorageError, CommitUnknown, application="tether-catalog"
        )
        self.where = self._session.where
        try:
            with self._session.transaction("catalog schema") as cur:
                self.schema_found = ensure(cur, "catalog", self.where, upgrade=upgrade)
            #: The wake channel (`PostgresDoorbell`): one per schema.
            self.channel = channel_for(self._session.conn())
        except BaseException:
            self._session.close()
            raise
        self.conninfo = conninfo
        self._clock: PostgresClock | None = None

    # -- clock --------------------------------------------------------------------------

    def server_clock(self) -> PostgresClock:
        """The catalog clock on this server (see `PostgresClock`), one per store."""
        if self._clock is None:
            self._clock = PostgresClock(self)
        return self._clock

    def _can_read_server_files(self) -> bool:
        (ok,) = self._read_one(
            "a role check",
            "SELECT rolsuper OR pg_has_role(current_user, 'pg_read_server_files', 'MEMBER')"
            " FROM pg_roles WHERE rolname = current_user",
        )
        return bool(ok)

    def _read_one(self, what: str, sql: str) -> tuple[Any, ...]:
        with self._lock:
            rows = self._session.read(what, sql)
        if not rows:
            raise CatalogStorageError(f"{what} returned nothing at {self.where}")
        return rows[0]

    @property
    def backend_pid(self) -> int | None:
        """The server process of this store's connection (for tests that cut it)."""
        return self._session.backend_pid

    # -- writes -------------------------------------------------------------------------

    def _write(self, cur: Any, old: Row, new: Row) -> None:
        changed = tuple(compress(_POSITIONS, map(ne, old, new)))
        sql = self._updates.get(changed)
        if sql is None:
            sets = ", ".join(f"{COLUMNS[i]} = %s" for i in changed)
            sql = (
                f"UPDATE activities SET {sets} WHERE world_id = %s AND kind = %s"
                " AND activity_id = %s AND version = %s"
            )
            self._updates[changed] = sql
        params = [new[i] for i in changed]
        params += (old[0], old[1], old[2], old[VERSION])
        cur.execute(sql, params)
        if cur.rowcount != 1:
            raise CatalogStorageError("the activity changed under the transaction (version)")

    def _notify(self, cur: Any, old: Row | None, new: Row) -> None:
        topics = wake_topics(old, new)
        if topics:  # delivered at COMMIT, and only if it lands
            cur.execute("SELECT pg_notify(%s, %s)", (self.channel, str(topics)))

    def doorbell(self) -> PostgresDoorbell:
        """This process's doorbell of this catalog (LISTEN/NOTIFY on `channel`)."""
        return PostgresDoorbell.for_url(self.conninfo)

    def _unknown(self, e: CommitUnknown, key: KeyTuple, new: Row | None) -> CommitUnknown:
        return CommitUnknown(str(e), key, new)

    def apply(self, key: KeyTuple, transition: Transition) -> Row:
        with self._lock:
            for _ in range(2):  # a second pass only after a concurrent first insert
                new: Row | None = None
                try:
                    with self._session.transaction("catalog write") as cur:
                        old = cur.execute(_BY_KEY + " FOR UPDATE", key).fetchone()
                        new = transition(old)
                        if old is None:
                            cur.execute(_INSERT, new)
                            if cur.rowcount != 1:
                                raise _Inserted
                        elif new[VERSION] != old[VERSION]:
                            self._write(cur, old, new)
                        else:
                            return new  # a no-op: the rollback on exit changes nothing
                        self._notify(cur, old, new)
                except _Inserted:
                    continue
                except CommitUnknown as e:
                    raise self._unknown(e, key, new) from e
                return new
            raise CatalogStorageError("the activity was inserted twice concurrently")

    def claim(
        self,
        now_ms: int,
        transition: ClaimTransition,
        kinds: Sequence[str] | None,
        world_id: str | None,
        *,
        host: str | None = None,
    ) -> Row | None:
        # The rows a claim on `host` may take: unbound or bound to it (the core decides).
        where = [_CLAIMABLE, _ON_HOST]
        params: list[Any] = [now_ms, "", host or ""]
        if kinds is not None:
            kinds = list(dict.fromkeys(kinds))
            if not kinds:
                return None
            where.append("kind = ANY(%s)")
            params.append(kinds)
        if world_id is not None:
            where.append("world_id = %s")
            params.append(world_id)
        sql = (
            f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY {', '.join(_CLAIM_ORDER)}"
            " LIMIT 1 FOR UPDATE SKIP LOCKED"
        )
        with self._lock:
            new: Row | None = None
            key: KeyTuple | None = None
            try:
                with self._session.transaction("catalog claim") as cur:
                    old = cur.execute(sql, params).fetchone()
                    if old is None:
                        return None
                    key = (old[0], old[1], old[2])
                    new = transition(old)
                    self._write(cur, old, new)
                    self._notify(cur, old, new)
            except CommitUnknown as e:
                raise CommitUnknown(str(e), key, new) from e
            return new

    def apply_many(self, items: Sequence[tuple[KeyTuple, Transition]]) -> list[Row | Exception]:
        # Rows are locked in key order, so two batches never deadlock on each other.
        order = sorted(range(len(items)), key=lambda i: items[i][0])
        out: list[Row | Exception | None] = [None] * len(items)
        with self._lock:
            try:
                with self._session.transaction("catalog batch write") as cur:
                    for i in order:
                        key, transition = items[i]
                        old = cur.execute(_BY_KEY + " FOR UPDATE", key).fetchone()
                        try:
                            new = transition(old)
                        except CatalogStorageError:
                            raise
                        except Exception as e:  # the core's rejection of this item
                            out[i] = e
                            continue
                        if old is None:
                            cur.execute(_INSERT, new)
                            if cur.rowcount != 1:
                                raise CatalogStorageError(
                                    "the activity was inserted concurrently; retry the batch"
                                )
                        elif new[VERSION] != old[VERSION]:
                            self._write(cur, old, new)
                        else:
                            out[i] = new
                            continue
                        self._notify(cur, old, new)
                        out[i] = new
            except CommitUnknown as e:
                raise CommitUnknown(str(e)) from e
        return [r for r in out if r is not None]

    def claim_many(
        self,
        now_ms: int,
        transition: ClaimTransition,
        kinds: Sequence[str] | None,
        world_id: str | None,
        limit: int,
        *,
        host: str | None = None,
    ) -> list[Row]:
        where = [_CLAIMABLE, _ON_HOST]
        params: list[Any] = [now_ms, "", host or ""]
        if kinds is not None:
            kinds = list(dict.fromkeys(kinds))
            if not kinds:
                return []
            where.append("kind = ANY(%s)")
            params.append(kinds)
        if world_id is not None:
            where.append("world_id = %s")
            params.append(world_id)
        sql = (
            f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY {', '.join(_CLAIM_ORDER)}"
            " LIMIT %s FOR UPDATE SKIP LOCKED"
        )
        out: list[Row] = []
        with self._lock:
            try:
                with self._session.transaction("catalog batch claim") as cur:
                    rows = cur.execute(sql, [*params, limit]).fetchall()
                    notify = 0
                    for old in rows:
                        try:
                            new = transition(old)
                        except CatalogStorageError:
                            raise
                        except Exception:  # the core refused this row: leave it
                            continue
                        self._write(cur, old, new)
                        notify |= wake_topics(old, new)
                        out.append(new)
                    if notify:
                        cur.execute("SELECT pg_notify(%s, %s)", (self.channel, str(notify)))
            except CommitUnknown as e:
                raise CommitUnknown(str(e)) from e
        return out

    def next_claimable(
        self, kinds: Sequence[str] | None, world_id: str | None, *, host: str | None = None
    ) -> int | None:
        # The smallest core-computed time, read off the claimable index; no rule here.
        where = ["claimable_from_ms IS NOT NULL", _ON_HOST]
        params: list[Any] = ["", host or ""]
        if kinds is not None:
            kinds = list(dict.fromkeys(kinds))
            if not kinds:
                return None
            where.append("kind = ANY(%s)")
            params.append(kinds)
        if world_id is not None:
            where.append("world_id = %s")
            params.append(world_id)
        sql = f"SELECT min(claimable_from_ms) FROM activities WHERE {' AND '.join(where)}"
        with self._lock:
            rows = self._session.read("catalog read", sql, params)
        return None if not rows or rows[0][0] is None else int(rows[0][0])

    def align_clock(self, boot_id: str, rebase: ClaimTransition) -> int:
        with self._lock:
            rows = self._session.read("catalog read", "SELECT boot_id FROM catalog_clock")
            if rows and rows[0][0] == boot_id:
                return 0
            rebased = 0
            with self._session.transaction("catalog clock alignment") as cur:
                row = cur.execute("SELECT boot_id FROM catalog_clock FOR UPDATE").fetchone()
                if row is None or row[0] != boot_id:
                    others = cur.execute(
                        f"{_SELECT} WHERE claimable_from_ms IS NOT NULL AND lease_boot_id != %s"
                        " FOR UPDATE",
                        (boot_id,),
                    ).fetchall()
                    for old in others:
                        new = rebase(old)
                        self._write(cur, old, new)
                        self._notify(cur, old, new)
                        rebased += 1
                    cur.execute("UPDATE catalog_clock SET boot_id = %s", (boot_id,))
            return rebased

    def compact(
        self,
        cutoff_ms: int,
        transition: CompactTransition,
        after: tuple[Any, ...] | None,
        limit: int,
    ) -> tuple[list[tuple[Row, Row]], tuple[Any, ...] | None]:
        where, params = [_COMPACTABLE], [cutoff_ms]
        if after is not None:
            where.append(f"({', '.join(_COMPACT_ORDER)}) > (%s, %s, %s, %s)")
            params.extend(after)
        # Every row up to the cutoff is handed to the core (a row another transaction holds
        # is waited for, never skipped); a batch is one short transaction.
        sql = (
            f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY {', '.join(_COMPACT_ORDER)}"
            " LIMIT %s FOR UPDATE"
        )
        with self._lock:
            changed: list[tuple[Row, Row]] = []
            with self._session.transaction("catalog compaction") as cur:
                rows = cur.execute(sql, [*params, limit]).fetchall()
                for old in rows:
                    new = transition(tuple(old))
                    if new is not None and new[VERSION] != old[VERSION]:
                        self._write(cur, old, new)
                        changed.append((tuple(old), new))
        more = len(rows) == limit
        return changed, self.cursor("compactable", rows[-1]) if more else None

    # -- reads --------------------------------------------------------------------------

    def get(self, key: KeyTuple) -> Row | None:
        with self._lock:
            rows = self._session.read("catalog read", _BY_KEY, key)
        return rows[0] if rows else None

    def page(
        self,
        view: View,
        now_ms: int,
        kinds: Sequence[str] | None,
        world_id: str | None,
        after: tuple[Any, ...] | None,
        limit: int,
    ) -> list[Row]:
        condition, order = _VIEWS[view]
        where = [condition]
        params: list[Any] = [now_ms] if view in ("claimable", "compactable") else []
        if world_id is not None:
            where.append("world_id = %s")
            params.append(world_id)
        if kinds is not None:
            kinds = list(dict.fromkeys(kinds))
            if not kinds:
                return []
            where.append("kind = ANY(%s)")
            params.append(kinds)
        if after is not None:
            where.append(f"({', '.join(order)}) > ({', '.join(['%s'] * len(order))})")
            params.extend(after)
        sql = f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY {', '.join(order)} LIMIT %s"
        params.append(limit)
        with self._lock:
            return self._session.read("catalog scan", sql, params)

    def cursor(self, view: View, row: Row) -> tuple[Any, ...]:
        return tuple(row[i] for i in _VIEW_INDEX[view])

    def has_unsettled(self, world_id: str) -> bool:
        with self._lock:
            rows = self._session.read(
                "catalog read",
                "SELECT 1 FROM activities WHERE world_id = %s AND unsettled = 1 LIMIT 1",
                (world_id,),
            )
        return bool(rows)

    def close(self) -> None:
        with self._lock:
            self._session.close()


class _Inserted(Exception):
    """Another transaction inserted the same key first: re-read it under its lock."""
