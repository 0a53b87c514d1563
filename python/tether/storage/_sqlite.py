"""SQLite catalog store: one file, WAL, BEGIN IMMEDIATE, compare-and-swap on `version`.

Every write is one transaction that reads the row, hands it to the Rust core's transition and
writes back only the columns that changed, guarded by the version it read. The core raises
the version on every change, so a store that already holds the row's last version (it read or
wrote it last) skips the read: the version guard proves the row is unchanged, and when it
does not match, the same transaction reads the stored row and decides again
(`_apply_known`). Anything that rewrites a row outside the core must raise its version too.
The store is shared safely by threads (it serialises writes on one connection; `get` reads on
a second one, so a read never waits for a write's sync); separate
processes coordinate through SQLite's write lock, taken up front by BEGIN IMMEDIATE so no two
transitions interleave.

SQL here never decides a rule. The one comparison it makes is the core's definition of
claimable (`claimable_from_ms <= now` on the lease clock, a value only the core computes, all
on one boot's clock once `align_clock` ran); the other filters select flags the core computed
(`pending_observation`, `unsettled`, `awaiting_decision`) to pick rows of a partial index
(results pending observation are the `pending_observation = 1` range of the unsettled index).
Compaction (retention) walks the core's `compactable_from_ms` column up to a cutoff, the same
kind of comparison; the core decides each row it is handed (`compact`).

After a commit, outside the lock, the store rings its `Doorbell` with the topics that row's
core-computed columns changed (`changed_topics`): that is how idle workers, the observer and
`wait_settled`, in this process and in others, learn of it without polling.

What a read costs (leased rows sit beyond `now` in the claimable index, finished rows are not
in it, so none of these grows with the number of leased or finished activities):
- a claim probes the claimable index once per kind (every kind ever admitted when `kinds` is
  None), so it grows with the number of kinds; within a kind it steps over the rows claimable
  now that are bound to other hosts (`bound_host` is in the index, so their rows are not read);
- a claim filtered by `world_id` walks, per kind, that kind's rows claimable now in other
  worlds until it meets one of this world (the index orders by kind and claimable time, not
  world); a world-partitioned index would cost a page on every write;
- `next_claimable` is one step into the claimable index per kind (a walk of the kind's
  entries when filtered by `world_id`);
- `has_unsettled` is one probe of the world's entries in each range of the unsettled index
  (not pending observation, pending observation); a pending-observation scan is the second
  range, so neither grows with the number of claimable or leased activities;
- `align_clock` is one read of `catalog_clock` unless the boot changed; then it walks the
  claimable index once (every row holding lease-clock values).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence
from itertools import compress
from operator import ne
from pathlib import Path
from typing import Any, NoReturn

from tether._core import (
    CatalogConfigError,
    CatalogRejection,
    CatalogStorageError,
    catalog_columns,
)
from tether._sqlite_files import hold_sqlite_file
from tether.storage._doorbell import Doorbell, changed_topics
from tether.storage._errors import with_code
from tether.storage._port import (
    ClaimTransition,
    CompactTransition,
    KeyTuple,
    NotTaken,
    Row,
    Transition,
    View,
)
from tether.storage._schema import migrate
from tether.storage._urls import sqlite_url

COLUMNS: tuple[str, ...] = tuple(catalog_columns())
VERSION = COLUMNS.index("version")
SYNCHRONOUS = ("FULL", "NORMAL")
# WAL frames between automatic checkpoints, per synchronous mode. A transition writes a few
# pages (row plus its partial indexes), mostly the same hot pages again and again.
# - NORMAL: commits do not sync, a checkpoint does (the WAL, then the main file), so
#   checkpointing every 10,000 frames instead of SQLite's 1,000 syncs and copies each hot page
#   back far less often, for a WAL of up to ~40 MB.
# - FULL: every commit syncs the WAL. While the WAL grows, each of those syncs also writes the
#   file's new size and block allocation (measured on ext4: 0.19-0.25 ms a commit against
#   0.13 ms once the WAL restarts at its head after a checkpoint and overwrites blocks it
#   already has). SQLite's 1,000 frames keep that growth to the first ~80 zero-work activities
#   after an open (10,000: ~800), for two more syncs per ~1,000 frames.
WAL_AUTOCHECKPOINT_PAGES: dict[str, int] = {"FULL": 1000, "NORMAL": 10_000}
BUSY_TIMEOUT_S = 30.0
# How many rows a store remembers (see `_apply_known`); then it forgets them all.
KNOWN_ROWS = 4096

_N = len(COLUMNS)
_POSITIONS = range(_N)
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM activities"
_BY_KEY = f"{_SELECT} WHERE world_id = ? AND kind = ? AND activity_id = ?"
_INSERT = f"INSERT INTO activities ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * _N)})"
_INSERT_NEW = f"{_INSERT} ON CONFLICT DO NOTHING"
_CLAIMABLE = "claimable_from_ms IS NOT NULL AND claimable_from_ms <= ?"
# Claims and the claimable scan name their index: the planner would otherwise walk a world's
# primary-key range, whose cost grows with that world's finished rows. Leased rows sit beyond
# `now` in the index and finished rows are not in it, so a claim only touches claimable rows.
_BY_KIND = f"{_SELECT} INDEXED BY activities_claimable WHERE kind = ? AND {_CLAIMABLE}"
# The rows a claim on a host may take: unbound, or bound to that host (`_scope`). The index
# holds `bound_host`, so rows bound to other hosts are skipped without reading them.
_ON_HOST = "bound_host IN (?, ?)"
_CLAIM_KIND = f"{_BY_KIND} AND {_ON_HOST} ORDER BY claimable_from_ms LIMIT 1"
_CLAIM_KIND_WORLD = f"{_BY_KIND} AND {_ON_HOST} AND world_id = ? ORDER BY claimable_from_ms LIMIT 1"
# The earliest claimable time of a kind: one step into the claimable index.
_NEXT_KIND = (
    "SELECT MIN(claimable_from_ms) FROM activities INDEXED BY activities_claimable"
    f" WHERE kind = ? AND claimable_from_ms IS NOT NULL AND {_ON_HOST}"
)
_NEXT_KIND_WORLD = f"{_NEXT_KIND} AND world_id = ?"
_KINDS = "SELECT kind FROM activity_kinds"
_ADD_KIND = "INSERT OR IGNORE INTO activity_kinds (kind) VALUES (?)"
_HAS_UNSETTLED = (
    "SELECT 1 FROM activities INDEXED BY activities_unsettled"
    " WHERE unsettled = 1 AND pending_observation IN (0, 1) AND world_id = ? LIMIT 1"
)
_CLOCK_BOOT = "SELECT boot_id FROM catalog_clock WHERE id = 1"
_SET_CLOCK_BOOT = "UPDATE catalog_clock SET boot_id = ? WHERE id = 1"
# Rows holding lease-clock values (a claimable_from_ms) of another boot, one kind at a time.
_OTHER_BOOT = (
    f"{_SELECT} INDEXED BY activities_claimable"
    " WHERE kind = ? AND claimable_from_ms IS NOT NULL AND lease_boot_id != ?"
)
_CLAIM_ORDER = tuple(
    COLUMNS.index(c) for c in ("claimable_from_ms", "kind", "world_id", "activity_id")
)

_COMPACTABLE = "compactable_from_ms IS NOT NULL AND compactable_from_ms <= ?"

# Per view: its partial index, the filter matching that index (a `?` takes the view's time:
# the lease-clock `now` for claimable, the wall-clock cutoff for compactable), and the keyset
# order.
_VIEWS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "claimable": (
        "activities_claimable",
        _CLAIMABLE,
        ("claimable_from_ms", "kind", "world_id", "activity_id"),
    ),
    "pending_observation": (
        "activities_unsettled",
        "unsettled = 1 AND pending_observation = 1",
        ("pending_observation", "world_id", "kind", "activity_id"),
    ),
    "awaiting_decision": (
        "activities_awaiting_decision",
        "awaiting_decision = 1",
        ("world_id", "kind", "activity_id"),
    ),
    "compactable": (
        "activities_compactable",
        _COMPACTABLE,
        ("compactable_from_ms", "world_id", "kind", "activity_id"),
    ),
}
_VIEW_INDEX = {name: tuple(COLUMNS.index(c) for c in v[2]) for name, v in _VIEWS.items()}


#: One lock per catalog file in this process, shared by every store open on it (see
#: `SqliteCatalogStore`).
_FILE_LOCKS: dict[str, threading.Lock] = {}
_FILE_LOCKS_GUARD = threading.Lock()


def _file_lock(path: str) -> threading.Lock:
    """The process's lock of the catalog file at `path`."""
    name = os.path.realpath(path)
    with _FILE_LOCKS_GUARD:
        return _FILE_LOCKS.setdefault(name, threading.Lock())


def _scope(host: str | None) -> tuple[str, str]:
    """The `bound_host` values a claim on ``host`` may take (None: unbound rows only)."""
    return ("", host or "")


def _no_claim(row: Row) -> Row:
    raise AssertionError("apply_many claims nothing")


def _claim_order(row: Row) -> tuple[Any, ...]:
    return tuple(row[i] for i in _CLAIM_ORDER)


class SqliteCatalogStore:
    """The local SQLite implementation of `CatalogStore` (thread-safe, one connection)."""

    def __init__(self, path: str, *, synchronous: str = "FULL", upgrade: bool = False) -> None:
        if synchronous not in SYNCHRONOUS:
            raise CatalogConfigError(
                f"synchronous must be one of {SYNCHRONOUS}, not {synchronous!r}"
            )
        self.path = path
        self.synchronous = synchronous
        #: This process's doorbell of the file: commits ring it (see `changed_topics`).
        self._doorbell = Doorbell.for_catalog(path)
        #: Write transactions this store committed (each one WAL sync when FULL).
        self.commits = 0
        # Shared by every store of this file in the process: their transactions queue here
        # and start as soon as the previous one ends, instead of meeting SQLite's lock, whose
        # busy handler sleeps (1, 2, 5, 10 ms...) between tries. Other processes still meet it.
        self._lock = _file_lock(path)
        self._updates: dict[tuple[int, ...], str] = {}
        self._kinds_seen: set[str] = set()  # committed to `activity_kinds` (never removed)
        self._known: dict[KeyTuple, Row] = {}  # the last row read or written, per key
        # A file cut short or not a database is refused before SQLite could take it for an
        # empty one; a new file is created complete (never a 0-byte store).
        # Held (never read again by this process) until `close`: see tether._sqlite_files.
        self._hold = hold_sqlite_file(path, what="the Activity catalog")
        try:
            conn = sqlite3.connect(
                path,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_S,
                cached_statements=256,
            )
        except sqlite3.Error as e:
            self._hold.release()
            raise CatalogStorageError(f"cannot open catalog database {path!r}: {e}") from e
        except BaseException:
            self._hold.release()
            raise
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise CatalogStorageError(f"catalog database {path!r} cannot use WAL ({mode})")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES[synchronous]}")
            conn.execute("PRAGMA foreign_keys=ON")
            migrate(conn, upgrade=upgrade, where=sqlite_url(path))
        except sqlite3.Error as e:
            conn.close()
            self._hold.release()
            raise CatalogStorageError(f"cannot prepare catalog database {path!r}: {e}") from e
        except BaseException:
            conn.close()
            self._hold.release()
            raise
        self._conn: sqlite3.Connection | None = conn
        # `get` reads on a connection of its own (WAL: it sees every committed transaction),
        # so a read never waits for a write's sync; opened on first use.
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise with_code(CatalogStorageError("the catalog is closed"), "catalog_closed")
        return self._conn

    def _begin(self) -> sqlite3.Cursor:
        cur = self._db().cursor()
        try:
            cur.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise CatalogStorageError(f"cannot start a catalog transaction: {e}") from e
        return cur

    def _abort(self, error: BaseException) -> NoReturn:
        """Roll back the open transaction and raise the typed form of ``error``."""
        conn = self._db()
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error as e:
                raise CatalogStorageError(f"catalog rollback failed: {e}") from error
        if isinstance(error, sqlite3.Error):
            raise CatalogStorageError(f"catalog transaction failed: {error}") from error
        raise error

    def _write(self, cur: sqlite3.Cursor, old: Row, new: Row) -> None:
        """Compare-and-swap the changed columns of ``old`` to ``new`` on its version."""
        if not self._swap(cur, old, new):
            raise CatalogStorageError("the activity changed under the transaction (version)")

    def _swap(self, cur: sqlite3.Cursor, old: Row, new: Row) -> bool:
        """Write the changed columns of ``old`` to ``new`` if the stored version is old's."""
        changed = tuple(compress(_POSITIONS, map(ne, old, new)))
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
        return bool(cur.execute(sql, params).rowcount == 1)

    def apply(self, key: KeyTuple, transition: Transition) -> Row:
        with self._lock:
            cur = self._begin()
            try:
                old, new = self._decide(cur, key, transition)
                cur.execute("COMMIT")
            except BaseException as e:
                self._known.pop(key, None)
                self._abort(e)
            wrote = self._committed(key, old, new)
            self.commits += wrote
        if wrote:
            self._ring(old, new)
        return new

    def _decide(
        self, cur: sqlite3.Cursor, key: KeyTuple, transition: Transition
    ) -> tuple[Row | None, Row]:
        """Run `transition` on the stored row of `key` inside the open transaction and write
        what it changed; (the row before, the row after)."""
        old, new = self._apply_known(cur, key, transition)
        if new is None and key not in self._known:
            new = self._insert_new(cur, transition)
        if new is None:
            old = cur.execute(_BY_KEY, key).fetchone()
            new = transition(old)
            if old is None:
                if new[1] not in self._kinds_seen:  # kinds are only ever added
                    cur.execute(_ADD_KIND, (new[1],))
                cur.execute(_INSERT, new)
            elif new[VERSION] != old[VERSION]:
                self._write(cur, old, new)
        return old, new

    def _committed(self, key: KeyTuple, old: Row | None, new: Row) -> bool:
        """Remember a committed row; whether the transaction changed it."""
        if old is None:
            self._kinds_seen.add(new[1])
        self._remember(key, new)
        return old is None or new[VERSION] != old[VERSION]

    def _apply_known(
        self, cur: sqlite3.Cursor, key: KeyTuple, transition: Transition
    ) -> tuple[Row | None, Row | None]:
        """Run the transition on the row this store last read or wrote and swap the result in
        on that row's version: one statement instead of two while nobody else changed the row.
        Every write raises the version (the core's rule), so a swap that matches proves the
        known row was the stored one. (None, None) when it cannot tell: no known row, a
        rejection or a no-op (both may come from a stale row), or a version that moved; the
        caller then decides on the stored row, in the same transaction."""
        old = self._known.get(key)
        if old is None:
            return None, None
        try:
            new = transition(old)
        except Exception:
            return None, None
        if new[VERSION] == old[VERSION] or not self._swap(cur, old, new):
            return None, None
        return old, new

    def _insert_new(self, cur: sqlite3.Cursor, transition: Transition) -> Row | None:
        """For a key this store does not know: if the transition creates a row from nothing
        (an admission), insert it unless a row exists; the row created, or None (the key
        exists, or the transition needs a stored row: the caller reads it and decides)."""
        try:
            new = transition(None)
        except Exception:
            return None
        if new[1] not in self._kinds_seen:  # kinds are only ever added
            cur.execute(_ADD_KIND, (new[1],))
        if cur.execute(_INSERT_NEW, new).rowcount != 1:
            return None
        return new

    def _remember(self, key: KeyTuple, row: Row) -> None:
        if len(self._known) >= KNOWN_ROWS and key not in self._known:
            self._known.clear()
        self._known[key] = row

    def claim(
        self,
        now_ms: int,
        transition: ClaimTransition,
        kinds: Sequence[str] | None,
        world_id: str | None,
        *,
        host: str | None = None,
    ) -> Row | None:
        with self._lock:
            cur = self._begin()
            try:
                old = self._next_claimable(cur, now_ms, kinds, world_id, host)
                new = None if old is None else transition(old)
                if old is not None and new is not None:
                    self._write(cur, old, new)
                cur.execute("COMMIT")
            except BaseException as e:
                self._known.clear()
                self._abort(e)
            if new is not None:
                self._remember((new[0], new[1], new[2]), new)
            self.commits += new is not None
        if new is not None:
            self._ring(old, new)
        return new

    def apply_many(self, items: Sequence[tuple[KeyTuple, Transition]]) -> list[Row | Exception]:
        """`apply` of each item in one transaction (one WAL sync when FULL): each decided by
        the core on the row as the transaction sees it (an earlier item's write included); a
        rejection takes its item's place and writes nothing; a storage error rolls back all."""
        return self.apply_and_claim(items, 0, _no_claim, None, None, 0)[0]

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
        """In one transaction (one WAL sync): each row chosen as `claim` chooses it, on the
        rows as the transaction sees them (a row claimed earlier in it holds a live lease, so
        it is not chosen again). The first row is chosen as `claim` chooses it; the rest are
        read in claim order past it, a page at a time, and a row whose transition raises (the
        core refused it, its host among them, or the caller's `take` did) is left unchanged
        and skipped."""
        return self.apply_and_claim((), now_ms, transition, kinds, world_id, limit, host=host)[1]

    def apply_and_claim(
        self,
        items: Sequence[tuple[KeyTuple, Transition]],
        now_ms: int,
        transition: ClaimTransition,
        kinds: Sequence[str] | None,
        world_id: str | None,
        limit: int,
        *,
        host: str | None = None,
    ) -> tuple[list[Row | Exception], list[Row]]:
        """`apply_many` of ``items`` then `claim_many`, in one transaction (one WAL sync): the
        items are decided first (as `apply_many` decides them); the claims then choose on the
        rows as the transaction sees them, leaving an item's row unclaimed."""
        out: list[Row | Exception] = []
        done: list[tuple[KeyTuple, Row | None, Row]] = []
        claimed: list[tuple[Row, Row]] = []
        with self._lock:
            cur = self._begin()
            try:
                for key, step in items:
                    try:
                        old, new = self._decide(cur, key, step)
                    except CatalogRejection as e:  # the core refused it: it changes nothing
                        out.append(e)
                        continue
                    # Later items of this key see this write (the version guard holds it).
                    self._known[key] = new
                    done.append((key, old, new))
                    out.append(new)
                mine = {key for key, _ in items}
                first = self._next_claimable(cur, now_ms, kinds, world_id, host) if limit else None
                page = [] if first is None else [first]
                while page and len(claimed) < limit:
                    for old in page:
                        if (old[0], old[1], old[2]) in mine:
                            continue  # an item's row: decided above, claimable again later
                        try:
                            new = transition(old)
                        except (CatalogRejection, NotTaken):  # refused: left as it is
                            continue
                        self._write(cur, old, new)
                        claimed.append((old, new))
                        if len(claimed) == limit:
                            break
                    after = _claim_order(page[-1])
                    page = self._page_claimable(cur, now_ms, kinds, world_id, after, limit)
                cur.execute("COMMIT")
            except BaseException as e:
                self._known.clear()  # rolled back: what this transaction wrote never was
                self._abort(e)
            first_of: dict[KeyTuple, Row | None] = {}
            for key, old, _ in done:
                first_of.setdefault(key, old)
            last = {key: new for key, _, new in done}
            changed = [
                (first_of[k], n) for k, n in last.items() if self._committed(k, first_of[k], n)
            ]
            for _, new in claimed:
                self._remember((new[0], new[1], new[2]), new)
            changed += claimed
            self.commits += bool(changed)
        rung: dict[int, list[tuple[Row | None, Row]]] = {}  # one ring per set of topics
        for old, new in changed:
            rung.setdefault(changed_topics(old, new), []).append((old, new))
        for (old, new), *others in rung.values():
            self._ring(old, new, *(row for _, row in others))
        return out, [new for _, new in claimed]

    def _ring(self, old: Row | None, new: Row, *alike: Row) -> None:
        # After the commit and outside the lock: a waiter woken now finds the change. `alike`:
        # other rows of the transaction whose change rings the same topics (one ring names
        # every key).
        topics = changed_topics(old, new)
        if topics:
            self._doorbell.ring(topics, [(r[0], r[1], r[2]) for r in (new, *alike)])

    def doorbell(self) -> Doorbell:
        """This process's doorbell of the file (datagram sockets beside it)."""
        return self._doorbell

    def next_claimable(
        self, kinds: Sequence[str] | None, world_id: str | None, *, host: str | None = None
    ) -> int | None:
        scope = _scope(host)
        with self._lock:
            try:
                cur = self._db().cursor()
                times = []
                for kind in self._kinds(cur, kinds):
                    if world_id is None:
                        row = cur.execute(_NEXT_KIND, (kind, *scope)).fetchone()
                    else:
                        row = cur.execute(_NEXT_KIND_WORLD, (kind, *scope, world_id)).fetchone()
                    if row is not None and row[0] is not None:
                        times.append(int(row[0]))
            except sqlite3.Error as e:
                raise CatalogStorageError(f"catalog read failed: {e}") from e
        return min(times, default=None)

    def align_clock(self, boot_id: str, rebase: ClaimTransition) -> int:
        with self._lock:
            try:
                # The usual case, without the write lock: already on this boot.
                if self._db().execute(_CLOCK_BOOT).fetchone()[0] == boot_id:
                    return 0
            except sqlite3.Error as e:
                raise CatalogStorageError(f"catalog read failed: {e}") from e
            cur = self._begin()
            try:
                rebased = 0
                if cur.execute(_CLOCK_BOOT).fetchone()[0] != boot_id:
                    for kind in self._kinds(cur, None):
                        for old in cur.execute(_OTHER_BOOT, (kind, boot_id)).fetchall():
                            self._write(cur, old, rebase(old))
                            rebased += 1
                    cur.execute(_SET_CLOCK_BOOT, (boot_id,))
                cur.execute("COMMIT")
                self._known.clear()
            except BaseException as e:
                self._abort(e)
            return rebased

    @staticmethod
    def _kinds(cur: sqlite3.Cursor, kinds: Sequence[str] | None) -> list[str]:
        if kinds is None:
            return [k for (k,) in cur.execute(_KINDS).fetchall()]
        return list(dict.fromkeys(kinds))

    def _next_claimable(
        self,
        cur: sqlite3.Cursor,
        now_ms: int,
        kinds: Sequence[str] | None,
        world_id: str | None,
        host: str | None,
    ) -> Row | None:
        # One indexed probe per kind; the earliest claimable row among them wins.
        best: Row | None = None
        scope = _scope(host)
        for kind in self._kinds(cur, kinds):
            if world_id is None:
                row = cur.execute(_CLAIM_KIND, (kind, now_ms, *scope)).fetchone()
            else:
                row = cur.execute(_CLAIM_KIND_WORLD, (kind, now_ms, *scope, world_id)).fetchone()
            if row is not None and (best is None or _claim_order(row) < _claim_order(best)):
                best = row
        return best

    def _page_claimable(
        self,
        cur: sqlite3.Cursor,
        now_ms: int,
        kinds: Sequence[str] | None,
        world_id: str | None,
        after: tuple[Any, ...] | None,
        limit: int,
    ) -> list[Row]:
        """Keyset page in (claimable_from_ms, kind, world_id, activity_id) order: one range
        per kind starting just after the cursor, merged."""
        rows: list[Row] = []
        for kind in self._kinds(cur, kinds):
            where = ["kind = ?", _CLAIMABLE]
            params: list[Any] = [kind, now_ms]
            if world_id is not None:
                where.append("world_id = ?")
                params.append(world_id)
            if after is not None:
                at, after_kind, after_world, after_id = after
                if kind > after_kind:
                    where.append("claimable_from_ms >= ?")
                    params.append(at)
                elif kind < after_kind:
                    where.append("claimable_from_ms > ?")
                    params.append(at)
                else:
                    where.append("(claimable_from_ms, world_id, activity_id) > (?, ?, ?)")
                    params += (at, after_world, after_id)
            sql = (
                f"{_SELECT} INDEXED BY activities_claimable WHERE {' AND '.join(where)}"
                " ORDER BY claimable_from_ms, world_id, activity_id LIMIT ?"
            )
            rows += cur.execute(sql, [*params, limit]).fetchall()
        rows.sort(key=_claim_order)
        return rows[:limit]

    def get(self, key: KeyTuple) -> Row | None:
        """The stored row of `key`, read on the reader connection: the last committed row
        (never one of an open transaction), without waiting for a write in progress. It is
        not remembered for `_apply_known` (a write may commit while it is read)."""
        with self._read_lock:
            try:
                return self._read().execute(_BY_KEY, key).fetchone()  # type: ignore[no-any-return]
            except sqlite3.Error as e:
                raise CatalogStorageError(f"catalog read failed: {e}") from e

    def _read(self) -> sqlite3.Connection:
        self._db()  # a closed store reads nothing
        if self._reader is None:
            reader = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_S,
                cached_statements=64,
            )
            reader.execute("PRAGMA query_only=ON")
            self._reader = reader
        return self._reader

    def page(
        self,
        view: View,
        now_ms: int,
        kinds: Sequence[str] | None,
        world_id: str | None,
        after: tuple[Any, ...] | None,
        limit: int,
    ) -> list[Row]:
        if view == "claimable":
            with self._lock:
                try:
                    return self._page_claimable(
                        self._db().cursor(), now_ms, kinds, world_id, after, limit
                    )
                except sqlite3.Error as e:
                    raise CatalogStorageError(f"catalog scan failed: {e}") from e
        index, condition, order = _VIEWS[view]
        where = [condition]
        params: list[Any] = [now_ms] if "?" in condition else []
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

    def compact(
        self,
        cutoff_ms: int,
        transition: CompactTransition,
        after: tuple[Any, ...] | None,
        limit: int,
    ) -> tuple[list[tuple[Row, Row]], tuple[Any, ...] | None]:
        with self._lock:
            cur = self._begin()
            try:
                rows = self._page_compactable(cur, cutoff_ms, after, limit)
                changed: list[tuple[Row, Row]] = []
                for old in rows:
                    new = transition(old)
                    if new is not None and new[VERSION] != old[VERSION]:
                        self._write(cur, old, new)
                        changed.append((old, new))
                cur.execute("COMMIT")
            except BaseException as e:
                self._abort(e)
        more = len(rows) == limit
        return changed, self.cursor("compactable", rows[-1]) if more else None

    @staticmethod
    def _page_compactable(
        cur: sqlite3.Cursor, cutoff_ms: int, after: tuple[Any, ...] | None, limit: int
    ) -> list[Row]:
        _index, condition, order = _VIEWS["compactable"]
        where, params = [condition], [cutoff_ms]
        if after is not None:
            where.append(f"({', '.join(order)}) > (?, ?, ?, ?)")
            params.extend(after)
        sql = (
            f"{_SELECT} INDEXED BY activities_compactable WHERE {' AND '.join(where)}"
            f" ORDER BY {', '.join(order)} LIMIT ?"
        )
        rows: list[Row] = cur.execute(sql, [*params, limit]).fetchall()
        return rows

    def space(self) -> dict[str, int]:
        """The catalog file's bytes (main file, WAL) and the bytes of its free pages."""
        with self._lock:
            try:
                conn = self._db()
                page = int(conn.execute("PRAGMA page_size").fetchone()[0])
                free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
            except sqlite3.Error as e:
                raise CatalogStorageError(f"catalog read failed: {e}") from e
        wal = Path(f"{self.path}-wal")
        return {
            "file_bytes": Path(self.path).stat().st_size,
            "wal_bytes": wal.stat().st_size if wal.exists() else 0,
            "free_bytes": page * free,
        }

    def checkpoint(self) -> bool:
        """Copy the WAL into the main file and truncate it; False when another connection's
        open read or write kept part of it (nothing is lost either way)."""
        with self._lock:
            try:
                busy = self._db().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.Error as e:
                raise CatalogStorageError(f"catalog checkpoint failed: {e}") from e
        return not busy

    def vacuum(self) -> None:
        """Rewrite the file without its free pages (holds the write lock while it runs)."""
        with self._lock:
            try:
                self._db().execute("VACUUM")
            except sqlite3.Error as e:
                raise CatalogStorageError(f"catalog vacuum failed: {e}") from e

    def cursor(self, view: View, row: Row) -> tuple[Any, ...]:
        return tuple(row[i] for i in _VIEW_INDEX[view])

    def has_unsettled(self, world_id: str) -> bool:
        with self._lock:
            try:
                return self._db().execute(_HAS_UNSETTLED, (world_id,)).fetchone() is not None
            except sqlite3.Error as e:
                raise CatalogStorageError(f"catalog read failed: {e}") from e

    def close(self) -> None:
        with self._lock, self._read_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._hold.release()
