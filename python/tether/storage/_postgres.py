"""PostgreSQL catalog store: `FOR UPDATE SKIP LOCKED` claims, compare-and-swap on `version`,
and a lease clock read on the server.

Every write reads its rows (no lock), hands them to the Rust core's transition, and writes back
only the changed columns guarded by the version read, in one READ COMMITTED transaction sent as
one message, and, when the core's columns say a waiter should wake, `NOTIFY` in the same
transaction (so a wake is delivered exactly when the commit lands); a row written meanwhile
fails its guard and the write is decided again. A work step's items whose rows this store
itself last committed are decided on those rows unread (the guard proves them current). An
admission on the server clock is one message that inserts the core's template with the
statement's own reading (`admit_at`), and an idle claim may take an admission its
notification announced in one message (`_claim_announced`). No lock is held across a step of
the client but a claim's (`Session.exchange`). A claim picks the earliest claimable row with
`FOR UPDATE SKIP LOCKED` on the claimable index: claimants on many hosts never wait on each
other's rows. SQL here never decides a rule: the one comparison is the core's definition of
claimable (`claimable_from_ms <= now` on the lease clock), and retention's is the same kind of
comparison on the core's `compactable_from_ms` up to a wall-clock cutoff (the core decides each
row it is handed, `compact`); the other filters select flags the core computed.

A COMMIT whose reply is lost raises `CommitUnknown`, with the row the transaction wrote where
it wrote one known row (a batch, a work step and a stamped admission name none: re-read each
item; an admission is idempotent, so admitting again settles it); the caller re-reads
(`Catalog.committed`) before any effect. Any other failure rolls back.

What a read costs: a claim walks the claimable index from its start, skipping rows locked by
other claimants and claimable rows of kinds, worlds or hosts it does not serve (a claim
filtered to a few kinds among many claimable ones walks past the others; `bound_host` is in the
index, so rows bound to other hosts are skipped off the index entries); leased and finished
rows are never visited. `has_unsettled` is one probe of the unsettled index. Scans page by keyset.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from functools import partial
from itertools import compress
from operator import itemgetter, ne
from typing import Any, cast

import orjson
import psycopg

from tether._core import (
    CatalogRejection,
    CatalogStorageError,
    catalog_admission_stamps,
    catalog_changed_mask,
    catalog_columns,
    catalog_update_rows,
)
from tether.activities._clock import Now
from tether.storage._errors import CommitUnknown, with_code
from tether.storage._pg import Session
from tether.storage._pg_doorbell import PostgresDoorbell, channel_for
from tether.storage._pg_schema import TEXT_COLUMNS, ensure
from tether.storage._port import (
    ClaimTransition,
    ClockBootChanged,
    CompactTransition,
    KeyTuple,
    NotTaken,
    Row,
    TimedClaimTransition,
    TimedTransition,
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
_TYPES = tuple("text" if c in TEXT_COLUMNS else "bigint" for c in COLUMNS)


def _rows_of(columns: Sequence[tuple[str, str]]) -> str:
    """A FROM item of a batch passed as one JSON array of row arrays (one parameter, which
    `_json` builds in native code; arrays per column would cost a Python loop per value): the
    j-th element of each row as the j-th (name, type) of ``columns``."""
    cols = ", ".join(
        f"r->>{j} AS {name}" if kind == "text" else f"(r->>{j})::{kind} AS {name}"
        for j, (name, kind) in enumerate(columns)
    )
    return f"(SELECT {cols} FROM jsonb_array_elements(%s::jsonb) AS r)"


def _typed(positions: Sequence[int]) -> list[tuple[str, str]]:
    return [(COLUMNS[i], _TYPES[i]) for i in positions]


# A batch's rows, read without locking them (their writes are guarded by version).
_READ_MANY = (
    f"SELECT {', '.join('a.' + c for c in COLUMNS)} FROM {_rows_of(_typed((0, 1, 2)))} AS k"
    " JOIN activities AS a ON a.world_id = k.world_id AND a.kind = k.kind"
    " AND a.activity_id = k.activity_id"
)
# A claim walk's condition that skips the keys of a JSON array of keys (a step's items).
_NOT_ITEMS = (
    "(world_id, kind, activity_id) NOT IN (SELECT k.world_id, k.kind, k.activity_id"
    f" FROM {_rows_of(_typed((0, 1, 2)))} AS k)"
)
# No ON CONFLICT: a row inserted concurrently fails the statement (a unique violation), so
# the transaction writes nothing and the store decides again on the row now stored.
_INSERT_MANY = (
    f"INSERT INTO activities ({', '.join(COLUMNS)})"
    f" SELECT * FROM {_rows_of(_typed(_POSITIONS))} AS v"
)
# A stamped admission (`PostgresCatalogStore.admit_at`): the core's templates of new records,
# each stamp column taking the statement's clock reading, inserted where no record exists
# (an admission over an existing record never writes); the reading and the rows inserted.
_STAMPS = {_AT[c]: part for c, part in catalog_admission_stamps()}
_STAMP_OF = {"boot_id": "clock.c_boot", "boot_ms": "clock.c_ms", "wall_ms": "clock.c_wall"}
_UNSTAMPED = tuple(i for i in _POSITIONS if i not in _STAMPS)
_STAMPED_VALUES = ", ".join(
    _STAMP_OF[_STAMPS[i]] if i in _STAMPS else f"v.{COLUMNS[i]}" for i in _POSITIONS
)


@functools.cache
def _stamped_insert(clock: str) -> str:
    """The stamped admission's statement on the clock expressions ``clock``: it inserts every
    row (no ON CONFLICT: a key that holds a record fails the statement, and the transaction
    writes nothing) and returns the reading it stamped them with (each stored row is its
    template with that reading's stamps: the rows need not travel back)."""
    return (
        f"WITH clock (c_boot, c_ms, c_wall) AS MATERIALIZED (SELECT {clock}),"
        f" ins AS (INSERT INTO activities ({', '.join(COLUMNS)})"
        f" SELECT {_STAMPED_VALUES} FROM {_rows_of(_typed(_UNSTAMPED))} AS v, clock"
        " RETURNING 1)"
        " SELECT clock.*, pg_notify(%s, %s || coalesce('|' || clock.c_boot || '|' || clock.c_ms"
        " || '|' || clock.c_wall || '|' || %s, '')) FROM clock WHERE EXISTS (SELECT 1 FROM ins)"
    )


_KEY_OF = itemgetter(0, 1, 2)
_UNSTAMPED_OF = itemgetter(*_UNSTAMPED)

# Where the kind, the world and the bound host sit among an announced record's values.
_U_KIND, _U_WORLD, _U_HOST = (_UNSTAMPED.index(_AT[c]) for c in ("kind", "world_id", "bound_host"))


def _announced_row(values: Sequence[Any], now: Now) -> Row:
    """The record an announced admission stored: its unstamped values, and the stamps of the
    admitting statement's reading ``now``."""
    row: list[Any] = [None] * _N
    for i, value in zip(_UNSTAMPED, values, strict=True):
        row[i] = value
    return _stamped(tuple(row), now)


@functools.cache
def _announced_claim(
    clock: str, kinds: bool, world: bool, cols: tuple[int, ...], notify: int
) -> str:
    """The one statement of a claim of an announced record: the claim's `FOR UPDATE SKIP
    LOCKED` walk takes its first row on the statement's reading, and the decided row (the
    key, the version to write, then ``cols``) is written only if that row is, in every
    column, the announced record the core decided on, on the reading's boot, and that
    record's admission reading is at most the given age on the statement's clock (so
    neither a forged nor a late announcement writes anything). Returns the rows written
    (0 or 1)."""
    where = _claim_where(_CLAIMABLE_NOW, kinds, world)
    every = _rows_of(_typed(_POSITIONS))
    decided = _rows_of([*_typed((0, 1, 2)), *_typed((VERSION, *cols))])
    sets = "".join(f"{COLUMNS[i]} = v.{COLUMNS[i]}, " for i in cols)
    note = ", (SELECT pg_notify(%s, %s) FROM u)" if notify else ""
    stored = ", ".join(f"a.{c}" for c in COLUMNS)
    announced = ", ".join(f"o.{c}" for c in COLUMNS)
    # The walk is LATERAL to the reading, as every claim's: its bound on the clock is then an
    # index condition, so it stops at the first row not yet claimable (leased rows beyond).
    return (
        f"WITH clock (c_boot, c_ms, c_wall) AS MATERIALIZED (SELECT {clock}),"
        " c AS (SELECT f.* FROM clock CROSS JOIN LATERAL (SELECT world_id, kind, activity_id"
        f" FROM activities WHERE {' AND '.join(where)}"
        f" ORDER BY {', '.join(_CLAIM_ORDER)} LIMIT 1 FOR UPDATE SKIP LOCKED) AS f),"
        f" u AS (UPDATE activities AS a SET {sets}version = v.version"
        f" FROM c, {every} AS o, {decided} AS v, clock"
        " WHERE a.world_id = c.world_id AND a.kind = c.kind AND a.activity_id = c.activity_id"
        " AND o.world_id = c.world_id AND o.kind = c.kind AND o.activity_id = c.activity_id"
        " AND v.world_id = c.world_id AND v.kind = c.kind AND v.activity_id = c.activity_id"
        f" AND ({stored}) IS NOT DISTINCT FROM ({announced})"
        " AND clock.c_boot = %s AND clock.c_ms - %s BETWEEN 0 AND %s RETURNING 1)"
        f" SELECT (SELECT count(*) FROM u){note}"
    )


# The stamp positions in order, with the slices of a template around them (`_stamped`).
_STAMP_ORDER = tuple(sorted(_STAMPS))
_BETWEEN = tuple(
    slice(a + 1, b) for a, b in zip((-1, *_STAMP_ORDER), (*_STAMP_ORDER, len(COLUMNS)), strict=True)
)


def _stamped(template: Row, now: Now) -> Row:
    """``template`` with its stamp columns set to ``now``'s parts: the row the stamped
    insert stored (`catalog_admission_stamps`). Built from the template's slices around
    them (an admission's hot path: one row per admitted Activity)."""
    out = template[_BETWEEN[0]]
    for i, between in zip(_STAMP_ORDER, _BETWEEN[1:], strict=True):
        out += (getattr(now, _STAMPS[i]),) + template[between]
    return out


# Never rewritten by an UPDATE's SET list: the key, and the version (its own guarded SET).
_FIXED = frozenset({0, 1, 2, VERSION})
_FIXED_MASK = sum(1 << i for i in _FIXED)
_CLAIM_ORDER = ("claimable_from_ms", "kind", "world_id", "activity_id")
_CLAIMABLE = "claimable_from_ms IS NOT NULL AND claimable_from_ms <= %s"
# The same comparison on the reading of the claim statement's own clock (`PostgresClock`).
_CLAIMABLE_NOW = "claimable_from_ms IS NOT NULL AND claimable_from_ms <= clock.c_ms"
_ON_HOST = "bound_host IN (%s, %s)"
_COMPACTABLE = "compactable_from_ms IS NOT NULL AND compactable_from_ms <= %s"
_COMPACT_ORDER = ("compactable_from_ms", "world_id", "kind", "activity_id")

#: The catalog session's planner settings. Every statement of the catalog walks an index: a
#: claim the claimable index in claim order, a batch's rows (a JSON array, which the planner
#: guesses at 100 rows) the primary key by nested loop, a scan its view's index in keyset order.
#: A queue table's statistics are always stale (rows are admitted, claimed and finished faster
#: than autovacuum analyses them), and on stale statistics the planner took other plans: a
#: claim filtered by kind and host read every claimable row (a sequential scan, or the index
#: with the kind and host as index conditions, which loses its order) and sorted them, so each
#: claim cost grew with the backlog (1,090 jobs/s at 20,000 jobs against 2,380 at 2,000, in
#: `benches/pg_queue.py`); a batch hash-joined the whole table. With sequential scans, sorts,
#: hash and merge joins off, the plan is the index walk whatever the statistics say (an
#: ordered claim reads the rows it takes and the ones it skips, no more), so plans may be
#: cached: statements are prepared once per session and planned once (`force_generic_plan`: in
#: the server's `auto` mode a claim at 1M rows was planned again on every execution, 1.3x its
#: time at 1k rows; with generic plans 1.0x). No JIT: a statement that has to scan a tiny table
#: (`catalog_clock`) costs past the JIT threshold once sequential scans are off, and compiling
#: it took 80 ms (500 ms with 8 sessions starting at once); no catalog statement gains from JIT.
PLANNER = {
    "enable_hashjoin": "off",
    "enable_mergejoin": "off",
    "enable_seqscan": "off",
    "enable_sort": "off",
    "plan_cache_mode": "force_generic_plan",
    "jit": "off",
}

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

    Record times (``wall_ms``) are the server's `clock_timestamp()` in both modes. A reading
    on its own (`now`) is one round trip on the store's connection; the store's transactions
    read the same expressions (`columns`) inside their first statement instead, so the reading
    is taken under the transaction's row locks and costs no round trip of its own.
    """

    # (boot id, lease-clock ms, wall ms): the clocks computed once per statement; the boots
    # are constants of the server's life, so of every session on it, set per session
    # (`BOOTS`, run when the store's session connects: a server reboot or restart ends it).
    _KERNEL = (
        "current_setting('tether.kernel_boot'),"
        " floor(split_part(pg_read_file('/proc/uptime', 0, 64, true), ' ', 1)::numeric"
        " * 1000)::bigint,"
        " (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    )
    _WALL = (
        "current_setting('tether.wall_boot'),"
        " GREATEST(0, floor(extract(epoch FROM clock_timestamp() - pg_postmaster_start_time())"
        " * 1000))::bigint,"
        " (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
    )
    #: Sets both boots on a session: the wall boot always, the kernel's only where the role
    #: may read server files (superuser, or `pg_read_server_files` with EXECUTE on
    #: `pg_read_file`, which PostgreSQL grants nobody by default) and the server has the
    #: file, as Linux does; an empty one otherwise, and the kernel mode, chosen only where it
    #: is set, never reads it. A block, because the server checks EXECUTE on every function a
    #: statement names when it starts, even in a branch it never takes: `pg_read_file` is named
    #: only in a statement a role without the right never runs. Each boot is the
    #: `Now.boot_id` as it is, so a statement may also write it (a stamped admission,
    #: `PostgresCatalogStore.admit_at`). A missing file reads as NULL (`pg_read_file`'s
    #: ``missing_ok``, in the four-argument form PostgreSQL has had since 9.5).
    BOOTS = (
        "DO $tether$ BEGIN"
        " PERFORM set_config('tether.wall_boot', 'pg:' ||"
        " (SELECT system_identifier FROM pg_control_system())::text || ':' ||"
        " (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint::text, false);"
        " PERFORM set_config('tether.kernel_boot', '', false);"
        " IF (SELECT rolsuper OR pg_has_role(current_user, 'pg_read_server_files', 'MEMBER')"
        " FROM pg_roles WHERE rolname = current_user) AND has_function_privilege("
        "'pg_catalog.pg_read_file(text, bigint, bigint, boolean)', 'EXECUTE') THEN"
        " PERFORM set_config('tether.kernel_boot', coalesce('pg-kernel:' || nullif(btrim("
        "pg_read_file('/proc/sys/kernel/random/boot_id', 0, 64, true), E' \\t\\n\\r'), ''),"
        " ''), false);"
        " END IF;"
        " END $tether$"
    )

    def __init__(self, store: PostgresCatalogStore, *, mode: str | None = None) -> None:
        self._store = store
        if mode is None:
            mode = store._clock_mode()
        if mode not in ("kernel", "wall"):
            raise CatalogStorageError(f"PostgresClock mode must be kernel or wall, not {mode!r}")
        self.mode = mode
        #: The reading's three select-list expressions: boot id, lease-clock ms, wall ms.
        self.columns = self._KERNEL if mode == "kernel" else self._WALL

    def reading(self, boot: Any, boot_ms: Any, wall_ms: Any) -> Now:
        """The `Now` of one row of `columns`."""
        return Now(str(boot), int(boot_ms), int(wall_ms))

    def now(self) -> Now:
        return self.reading(*self._store._read_one("the server clock", "SELECT " + self.columns))


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
        #: The rows this store's transactions last committed, by key (`_remember`).
        self._known: dict[KeyTuple, Row] = {}
        self._bell: PostgresDoorbell | None = None
        #: Whether this store's last claim found nothing to claim (`_claim_announced`).
        self._drained = True
        self._session = Session(
            conninfo,
            CatalogStorageError,
            CommitUnknown,
            application="tether-catalog",
            settings=PLANNER,
            on_connect=(PostgresClock.BOOTS,),
            server_prepared=True,
        )
        self.where = self._session.where
        try:
            with self._session.transaction("catalog schema") as cur:
                self.schema_found = ensure(
                    cur, "catalog", self.where, upgrade=upgrade, url=conninfo
                )
            #: The wake channel (`PostgresDoorbell`): one per schema.
            self.channel = channel_for(self._session.conn())
            #: Whether admissions announce their records (`admit_at`): unless the session's
            #: `tether.announce` setting is off (`ALTER DATABASE ... SET tether.announce = off`,
            #: or `options=-ctether.announce%3Doff` in the URL), since every session that
            #: LISTENs on the database sees what an announcement carries.
            self.announce = self._session.read(
                "catalog settings", "SELECT current_setting('tether.announce', true)"
            ) != [("off",)]
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

    def _clock_mode(self) -> str:
        """The clock this catalog's leases run on, one for every host that shares it: the one
        its clock row's boot names (`align_clock` wrote it: ``pg-kernel:`` the kernel's,
        ``pg:`` the wall's), else, a catalog no claim has used yet, the best this role may
        read. A role that may not read the kernel clock a catalog runs on is refused
        (`clock_unavailable`): on the wall clock its leases would be of another boot to the
        other hosts, and each host would expire the other's."""
        (held,) = self._read_one(
            "catalog read", "SELECT coalesce(max(boot_id), '') FROM catalog_clock"
        )
        kernel = self._can_read_server_files()
        if str(held).startswith("pg-kernel:") and not kernel:
            role = self._read_one("a role check", "SELECT current_user")[0]
            raise with_code(
                CatalogStorageError(
                    f"the catalog at {self.where} runs its leases on the"
                    f" server kernel's clock, which role {role} may not read: grant it"
                    " pg_read_server_files and EXECUTE ON FUNCTION pg_read_file(text, bigint,"
                    " bigint, boolean), or connect as the role the other hosts use"
                ),
                "clock_unavailable",
            )
        if str(held).startswith("pg:"):
            return "wall"
        return "kernel" if kernel else "wall"

    def _can_read_server_files(self) -> bool:
        """Whether the kernel clock is there for this session: the role may read server files
        and the server's kernel boot id and uptime exist (`BOOTS` set the boot: Linux)."""
        # `BOOTS` set the kernel boot only where the role may run `pg_read_file`: the read
        # of the uptime is a statement of its own, never sent otherwise (see `BOOTS`).
        (kernel,) = self._read_one(
            "a role check", "SELECT current_setting('tether.kernel_boot', true) <> ''"
        )
        if not kernel:
            return False
        (ok,) = self._read_one(
            "a role check", "SELECT pg_read_file('/proc/uptime', 0, 64, true) IS NOT NULL"
        )
        return bool(ok)

    def _read_one(self, what: str, sql: str) -> tuple[Any, ...]:
        with self._lock:
            rows = self._session.read(what, sql)
        if not rows:
            raise CatalogStorageError(f"{what} returned nothing at {self.where}")
        return rows[0]

    @property
    def commits(self) -> int:
        """Transactions this store sent COMMIT for (a benchmark's count of write transactions;
        claims that found nothing and no-op writes roll back and are not counted)."""
        return self._session.commits

    @property
    def round_trips(self) -> int:
        """Round trips of this store's transactions and reads (for benchmarks)."""
        return self._session.round_trips

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
        bell = self._bell
        if bell is None:
            bell = self._bell = PostgresDoorbell.for_url(self.conninfo)
        return bell

    # -- transactions: one read round trip, one write round trip ------------------------

    def _update_sql(self, changed: tuple[int, ...]) -> str:
        """The UPDATE of a batch of rows (``changed``: the positions written, besides the
        version), one statement whatever the batch size. Each row is guarded by the version
        its transition read: a row whose stored version is another gets a NULL version, which
        the NOT NULL constraint refuses, so the statement fails and the transaction, its
        COMMIT queued behind it, writes nothing."""
        sql = self._updates.get(changed)
        if sql is None:
            sets = "".join(f"{COLUMNS[i]} = v.{COLUMNS[i]}, " for i in changed)
            rows = _rows_of(
                [*_typed((0, 1, 2)), ("read_version", "bigint"), *_typed((VERSION, *changed))]
            )
            sql = (
                f"UPDATE activities AS a SET {sets}"
                "version = CASE WHEN a.version = v.read_version THEN v.version END"
                f" FROM {rows} AS v"
                " WHERE a.world_id = v.world_id AND a.kind = v.kind"
                " AND a.activity_id = v.activity_id"
            )
            self._updates[changed] = sql
        return sql

    def _writes(self, inserts: list[Row], updates: list[tuple[Row, Row]], topics: int) -> _Sql:
        """The statements that store a transaction's decisions, and its NOTIFY (delivered at
        COMMIT, and only if it lands)."""
        out: _Sql = []
        if inserts:  # one parameter: a row's 53 would exceed the driver's query cache
            out.append((_INSERT_MANY, (_json(inserts),)))
        if updates:
            # Per row: the key, the version read (the guard), the version to write, then
            # the columns any row of the batch changes (the core encodes the batch).
            cols, rows = catalog_update_rows(updates, _FIXED_MASK)
            out.append((self._update_sql(tuple(cols)), (rows,)))
        if topics:  # one statement with the last write: a CTE's write runs to completion
            sql, params = out.pop()
            out.append(
                (
                    f"WITH w AS ({sql}) SELECT pg_notify(%s, %s)",
                    (*params, self.channel, str(topics)),
                )
            )
        return out

    def _transact(
        self, what: str, items: Sequence[tuple[KeyTuple, _Step]], timed: bool, *, single: bool
    ) -> list[Row | Exception]:
        """Read the items' rows (one statement, no lock) and the server clock if ``timed``,
        hand each row to its transition (the core), and store the changes in one message:
        ``BEGIN``, one statement per kind of write guarded by the version each row was read
        at, the NOTIFY, ``COMMIT`` (`Session.exchange`). No lock is held while the core decides
        or between the two round trips, so a client stopped anywhere here blocks nobody. A row
        that changed since the read fails the guard, and a row inserted since fails its
        insert: nothing is written and the items are decided again on the rows now stored.

        ``single``: a transition's exception propagates (nothing is written); otherwise a
        core rejection takes its item's place and the others are written. Items naming one
        key run in order, each on the row the previous one left."""
        if not items:
            return []
        keys = sorted({k for k, _ in items})
        read, params = (_BY_KEY, keys[0]) if len(keys) == 1 else (_READ_MANY, (_json(keys),))
        clock = self.server_clock() if timed else None
        if clock is not None:  # the reading in the read statement
            read = _with_clock(clock, read)
        intended: list[Row] = []

        def decide(results: list[list[Row]]) -> tuple[_Sql, list[Row | Exception]]:
            rows = results[0]
            now = None
            if clock is not None:
                now = clock.reading(*rows[0][:3])
                rows = [r[3:] for r in rows if r[3] is not None]
            stored = {(r[0], r[1], r[2]): r for r in rows}
            current: dict[KeyTuple, Row] = {}
            out: list[Row | Exception] = []
            for key, transition in items:
                old = current.get(key) or stored.get(key)
                try:
                    new = transition(old, now)
                except CatalogRejection as e:  # the core refused this item: it changes nothing
                    if single:
                        raise
                    out.append(e)
                    continue
                out.append(new)
                if old is None or new[VERSION] != old[VERSION]:
                    current[key] = new
            inserts: list[Row] = []
            updates: list[tuple[Row, Row]] = []
            topics = 0
            for key, new in sorted(current.items()):  # written in key order: no deadlock
                first = stored.get(key)
                if first is None:
                    inserts.append(new)
                else:
                    updates.append((first, new))
                topics |= wake_topics(first, new)
            intended[:] = list(current.values())
            return self._writes(inserts, updates, topics), out

        for attempt in range(_RETRIES):
            try:
                with self._lock:
                    out = self._session.exchange(what, [(read, params)], decide, lock=False)
            except CommitUnknown as e:
                self._forget(keys, intended)
                if single and len(intended) == 1:
                    raise CommitUnknown(str(e), items[0][0], intended[0]) from e
                raise CommitUnknown(str(e)) from e
            except CatalogStorageError as e:
                self._forget(keys, intended)
                if _concurrent(e) and attempt < _RETRIES - 1:
                    continue  # written concurrently: decide again on the rows now stored
                raise _guard_error(e) from e
            except BaseException:
                self._forget(keys, intended)
                raise
            self._remember(intended)
            return out
        raise AssertionError("unreachable")

    def _claim(
        self,
        transition: _Claim,
        kinds: Sequence[str] | None,
        world_id: str | None,
        limit: int,
        host: str | None,
        *,
        now_ms: int | None,
        check: Callable[[Now], None] | None = None,
        boot_id: str | None = None,
        single: bool,
        items: Sequence[tuple[KeyTuple, _Step]] = (),
    ) -> tuple[list[Row | Exception], list[Row]]:
        """Decide ``items`` (as `_transact` does, on the claim's reading), then claim up to
        ``limit`` claimable rows in claim order (`FOR UPDATE SKIP LOCKED`), in one transaction:
        one read round trip (the claim's rows and the items' rows, the latter unlocked and
        guarded by version as `_transact`'s), one write round trip. With ``now_ms`` None the
        server clock is read in the claim statement itself (the filter and the core see the
        same reading): `ClockBootChanged` if it is on another boot than ``boot_id`` (nothing
        written), and ``check`` (the core's claim arguments check) runs on the reading before
        any write. A claimable row that is also an item's is left for a later claim. Returns
        the items' outcomes (a rejection in its item's place) and the claimed rows."""
        params: list[Any] = [now_ms] if now_ms is not None else []
        params += ["", host or ""]
        if kinds is not None:
            kinds = list(dict.fromkeys(kinds))
            if not kinds:
                limit = 0
            params.append(kinds)
        if world_id is not None:
            params.append(world_id)
        keys = sorted({k for k, _ in items})
        # The items' own rows may be claimable (again, say, once a lease ran out): they are
        # decided as items here, so the walk skips them in the statement, neither locking nor
        # returning them, and takes ``limit`` others.
        if keys and limit:
            params.append(_json(keys))
        params.append(limit)
        clock = None if now_ms is not None else self.server_clock()
        sql = _claim_sql(
            None if clock is None else clock.columns,
            kinds is not None,
            world_id is not None,
            bool(keys and limit),
        )
        if limit == 0 and not items:
            return [], []
        if single and not items and clock is not None:
            took = self._claim_announced(clock, transition, check, kinds, world_id, host, boot_id)
            if took is not None:
                return [], [took]
        mine = set(keys)
        intended: list[Row] = []

        def decide(results: list[list[Row]], known: dict[KeyTuple, Row]) -> tuple[_Sql, _Outcome]:
            rows = results[0]
            now: Now | None = None
            if clock is not None:
                now = clock.reading(*rows[0][:3])
                if now.boot_id != boot_id:
                    raise ClockBootChanged(now)
                if check is not None:
                    check(now)
                rows = [r[3:] for r in rows if r[3] is not None]
            stored = {(r[0], r[1], r[2]): r for r in results[1]} if len(results) > 1 else {}
            stored.update(known)
            current: dict[KeyTuple, Row] = {}
            out: list[Row | Exception] = []
            for key, step in items:
                old = current.get(key) or stored.get(key)
                try:
                    new = step(old, now)
                except CatalogRejection as e:  # the core refused this item: it changes nothing
                    out.append(e)
                    continue
                out.append(new)
                if old is None or new[VERSION] != old[VERSION]:
                    current[key] = new
            # Refused or left unchanged on a known row, which then no write of this transaction
            # guards: that row may be stale, so those are decided again on the stored rows.
            if unguarded := known.keys() - current.keys():
                raise _Unsure(unguarded)
            inserts: list[Row] = []
            updates: list[tuple[Row, Row]] = []
            topics = 0
            for key, new in current.items():
                first = stored.get(key)
                if first is None:
                    inserts.append(new)
                else:
                    updates.append((first, new))
                topics |= wake_topics(first, new)
            claimed: list[Row] = []
            for old in rows:
                if len(claimed) == limit:
                    break
                if (old[0], old[1], old[2]) in mine:
                    continue  # an item's row: decided above, claimable again later
                try:
                    new = transition(old, now)
                except (CatalogRejection, NotTaken):  # the core refused it, or the caller
                    if single:
                        raise
                    continue
                updates.append((old, new))
                claimed.append(new)
                topics |= wake_topics(old, new)
            intended[:] = [*current.values(), *claimed]
            # Written in key order (the claimed rows are locked already; item rows are not,
            # so two stale workers writing each other's items may still wait on each other:
            # the server breaks that, and the step is decided again).
            updates.sort(key=lambda u: (u[0][0], u[0][1], u[0][2]))
            return self._writes(inserts, updates, topics), (out, claimed)

        unsure: set[KeyTuple] = set()
        for attempt in range(_RETRIES):
            # Items are decided on the rows this store last committed where it has them (the
            # write's version guard proves each was still the stored one, or fails it); the
            # others are read in the claim's message, unlocked.
            known = {k: r for k in keys if k not in unsure and (r := self._known.get(k))}
            reads: _Sql = [(sql, params)]
            unread = [k for k in keys if k not in known]
            if unread:
                reads.append(
                    (_BY_KEY, unread[0]) if len(unread) == 1 else (_READ_MANY, (_json(unread),))
                )
            try:
                with self._lock:
                    out, claimed = self._session.exchange(
                        "catalog claim", reads, partial(decide, known=known), lock=True
                    )
            except _Unsure as e:
                unsure.update(e.keys)  # read next time: never unsure twice
                continue
            except CommitUnknown as e:
                self._forget(keys, intended)
                if single and not items and len(intended) == 1:
                    new = intended[0]
                    raise CommitUnknown(str(e), (new[0], new[1], new[2]), new) from e
                raise CommitUnknown(str(e)) from e
            except CatalogStorageError as e:
                self._forget(keys, intended)
                if items and _concurrent(e) and attempt < _RETRIES - 1:
                    unsure.update(keys)
                    continue  # an item's row was written meanwhile: decide all again
                raise _guard_error(e) from e
            except BaseException:
                self._forget(keys, intended)
                raise
            self._remember(intended)
            if limit:
                self._drained = not claimed
            return out, claimed
        raise AssertionError("unreachable")

    def _claim_announced(
        self,
        clock: PostgresClock,
        transition: _Claim,
        check: Callable[[Now], None] | None,
        kinds: Sequence[str] | None,
        world_id: str | None,
        host: str | None,
        boot_id: str | None,
    ) -> Row | None:
        """A claim in one round trip of an admission this process's doorbell just announced
        (`PostgresDoorbell.take_announced`), tried only while this store's last claim found
        nothing to claim (an idle worker woken by it; with a backlog the usual claim is as
        short). The core decides it on the announced record and on its admission's reading
        (a server reading: the claim's lease runs from it, so it is shorter by the
        announcement's age, which the statement bounds by `ANNOUNCED_MAX_AGE_MS` on its own
        clock, never longer), and one message writes it only if the claim's own `FOR UPDATE
        SKIP LOCKED` walk takes that record first now, equal in every column to the one
        announced, on the same boot. An announcement is not trusted: one that is forged,
        malformed, late or stale writes nothing. The claimed row, or None (nothing written:
        the caller claims as usual)."""
        if not self._drained:
            return None
        bell = self.doorbell()
        wanted_kinds = None if kinds is None else set(kinds)
        mine = ("", host or "")

        def wanted(values: list[Any]) -> bool:
            return (
                type(values) is list
                and len(values) == len(_UNSTAMPED)
                and (wanted_kinds is None or values[_U_KIND] in wanted_kinds)
                and (world_id is None or values[_U_WORLD] == world_id)
                and values[_U_HOST] in mine
            )

        got = bell.take_announced(wanted, ANNOUNCED_FRESH_S)
        if got is None:
            return None
        reading, values = got
        try:
            now = clock.reading(*reading)
            if now.boot_id != boot_id:
                return None
            old = _announced_row(values, now)
            if check is not None:
                check(now)
            new = transition(old, now)
        except Exception:  # refused, or not a record at all: the usual claim decides
            return None
        mask = catalog_changed_mask(old, new)
        cols = tuple(i for i in _POSITIONS if mask >> i & 1 and i not in _FIXED)
        params: list[Any] = ["", host or ""]
        if kinds is not None:
            params.append(list(dict.fromkeys(kinds)))
        if world_id is not None:
            params.append(world_id)
        decided = [*old[:3], new[VERSION], *(new[i] for i in cols)]
        params += [_json([old]), _json([decided]), now.boot_id, now.boot_ms, ANNOUNCED_MAX_AGE_MS]
        if topics := wake_topics(old, new):
            params += [self.channel, str(topics)]
        sql = _announced_claim(clock.columns, kinds is not None, world_id is not None, cols, topics)
        key = (old[0], old[1], old[2])
        try:
            with self._lock:
                ((taken, *_),), *_ = self._session.commit_message("catalog claim", [(sql, params)])
        except CommitUnknown as e:
            self._forget([key], [])
            raise CommitUnknown(str(e), key, new) from e
        except BaseException:
            self._forget([key], [])
            raise
        if not taken:
            return None
        self._remember([new])
        self._drained = False
        return new

    def _remember(self, rows: Sequence[Row]) -> None:
        """Keep the rows a committed transaction wrote (the next write of one may be decided
        on it; its version guard proves it still is the stored row). Two threads of one store
        may remember a key out of order; the older row then only costs its next write a
        failed guard and a fresh read."""
        known = self._known
        if len(known) + len(rows) > KNOWN_ROWS:
            known.clear()
        known.update(zip(map(_KEY_OF, rows), rows, strict=True))

    def _forget(self, keys: Sequence[KeyTuple], rows: Sequence[Row]) -> None:
        for k in keys:
            self._known.pop(k, None)
        for row in rows:
            self._known.pop((row[0], row[1], row[2]), None)

    # -- the port: the clock read before the transaction (any `CatalogClock`) ----------

    def apply(self, key: KeyTuple, transition: Transition) -> Row:
        out = self._transact("catalog write", [(key, _untimed(transition))], False, single=True)
        row = out[0]
        assert not isinstance(row, Exception)
        return row

    def apply_many(self, items: Sequence[tuple[KeyTuple, Transition]]) -> list[Row | Exception]:
        steps = [(k, _untimed(t)) for k, t in items]
        return self._transact("catalog batch write", steps, False, single=False)

    def claim(
        self,
        now_ms: int,
        transition: ClaimTransition,
        kinds: Sequence[str] | None,
        world_id: str | None,
        *,
        host: str | None = None,
    ) -> Row | None:
        _, rows = self._claim(
            _untimed_claim(transition), kinds, world_id, 1, host, now_ms=now_ms, single=True
        )
        return rows[0] if rows else None

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
        return self._claim(
            _untimed_claim(transition), kinds, world_id, limit, host, now_ms=now_ms, single=False
        )[1]

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
        return self._claim(
            _untimed_claim(transition),
            kinds,
            world_id,
            limit,
            host,
            now_ms=now_ms,
            single=False,
            items=[(k, _untimed(t)) for k, t in items],
        )

    # -- the server clock read inside the transaction (`ClockInTransaction`) ------------

    def reads_clock(self, clock: object) -> bool:
        """Whether ``clock`` is this store's server clock, which its transactions read."""
        return self._clock is not None and clock is self._clock

    def apply_at(self, key: KeyTuple, transition: TimedTransition) -> Row:
        out = self._transact("catalog write", [(key, _timed(transition))], True, single=True)
        row = out[0]
        assert not isinstance(row, Exception)
        return row

    def apply_many_at(
        self, items: Sequence[tuple[KeyTuple, TimedTransition]]
    ) -> list[Row | Exception]:
        steps = [(k, _timed(t)) for k, t in items]
        return self._transact("catalog batch write", steps, True, single=False)

    def admit_at(
        self,
        items: Sequence[tuple[KeyTuple, Row, TimedTransition]],
    ) -> list[Row | Exception]:
        """Admissions of new records in one round trip: one message inserts each key's first
        template (the core's record of the admission where none exists,
        `catalog_admission_template`), its stamp columns (`catalog_admission_stamps`) set to
        the inserting statement's clock reading, sends the NOTIFY and COMMITs. A later item
        of a key already in the batch is decided by its transition (the core's `admit`) on
        the record the batch inserted. A key that already holds a record fails the insert
        (a unique violation: nothing is written), and then every item is decided on the
        records as stored (`apply_many_at`, a read and a write), the replay of an earlier
        admission among them."""
        if not items:
            return []
        clock = self.server_clock()
        first: dict[KeyTuple, Row] = {}
        for key, template, _ in items:
            first.setdefault(key, template)
        keys = sorted(first)  # inserted in key order, as every batch writes: no deadlock
        rows = [_UNSTAMPED_OF(first[k]) for k in keys]
        values = _json(rows)
        # Announced in the notification (the reading and these values: a woken claim may take
        # one in one round trip), as long as the payload stays within NOTIFY's bound (bytes).
        announced = values if self.announce and len(values.encode()) <= ANNOUNCE_MAX else None
        params = (values, self.channel, str(CLAIMABLE), announced)
        try:
            with self._lock:
                (reading, *_), *_ = self._session.commit_message(
                    "catalog admission", [(_stamped_insert(clock.columns), params)]
                )
        except CommitUnknown as e:
            # The reading it was stamped with is unknown, so no row can be named: an
            # admission is idempotent, so admit again (a landed one comes back as a replay).
            self._forget(keys, [])
            raise CommitUnknown(str(e)) from e
        except CatalogStorageError as e:
            self._forget(keys, [])
            if _concurrent(e):  # a stored key, or a batch racing this one: nothing written
                return self.apply_many_at([(k, step) for k, _, step in items])
            raise
        except BaseException:
            self._forget(keys, [])
            raise
        now = clock.reading(*reading[:3])
        # Not remembered (`_remember`): an admitted row is next written by a claim, which
        # reads it in its own statement; only a claimed row's later steps use what is known.
        current = {key: _stamped(template, now) for key, template in first.items()}
        out: list[Row | Exception] = []
        for key, template, step in items:
            if first.get(key) is template:  # its key's first item: the row inserted
                del first[key]
                out.append(current[key])
                continue
            old = current[key]
            try:
                new = step(old, now)
            except CatalogRejection as e:  # the core refused this item: it changes nothing
                out.append(e)
                continue
            if new[VERSION] != old[VERSION]:  # a write: never an admission's
                return [*out, *self.apply_many_at([(k, s) for k, _, s in items[len(out) :]])]
            current[key] = new
            out.append(new)
        return out

    def claim_at(
        self,
        transition: TimedClaimTransition,
        check: Callable[[Now], None],
        kinds: Sequence[str] | None,
        world_id: str | None,
        limit: int,
        *,
        host: str | None,
        boot_id: str | None,
        single: bool,
    ) -> list[Row]:
        return self._claim(
            _timed_claim(transition),
            kinds,
            world_id,
            limit,
            host,
            now_ms=None,
            check=check,
            boot_id=boot_id,
            single=single,
        )[1]

    def apply_and_claim_at(
        self,
        items: Sequence[tuple[KeyTuple, TimedTransition]],
        transition: TimedClaimTransition,
        check: Callable[[Now], None],
        kinds: Sequence[str] | None,
        world_id: str | None,
        limit: int,
        *,
        host: str | None,
        boot_id: str | None,
    ) -> tuple[list[Row | Exception], list[Row]]:
        return self._claim(
            cast("_Claim", transition),  # the reading is never None
            kinds,
            world_id,
            limit,
            host,
            now_ms=None,
            check=check,
            boot_id=boot_id,
            single=False,
            items=cast("Sequence[tuple[KeyTuple, _Step]]", items),  # the reading is never None
        )

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
            self._known.clear()  # rebased rows are written below, outside the known rows
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
            self._known.clear()  # compacted rows are written below, outside the known rows
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


_Sql = list[tuple[str, Any]]
# A transaction's items' outcomes (a rejection in its item's place) and the rows it claimed.
_Outcome = tuple[list[Row | Exception], list[Row]]
# A transition as the store runs it: the row (None: no such activity) and the transaction's
# clock reading (None where the caller read its clock before the transaction).
_Step = Callable[[Row | None, Now | None], Row]
_Claim = Callable[[Row, Now | None], Row]


@functools.cache
def _claim_sql(clock: str | None, kinds: bool, world: bool, skip: bool = False) -> str:
    """A claim's statement: on the clock expressions ``clock`` (read in the statement), or
    on a lease-clock time passed first (None); filtered by kinds and by world when asked,
    and with ``skip``, past the keys of a JSON array of keys (the parameter after the
    world's)."""
    where = _claim_where(_CLAIMABLE if clock is None else _CLAIMABLE_NOW, kinds, world)
    if skip:
        where.append(_NOT_ITEMS)
    sql = (
        f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY {', '.join(_CLAIM_ORDER)}"
        " LIMIT %s FOR UPDATE SKIP LOCKED"
    )
    return sql if clock is None else _with_columns(clock, sql)


def _claim_where(claimable: str, kinds: bool, world: bool) -> list[str]:
    """A claim walk's conditions: ``claimable``, on this host, of the kinds and of the world
    when asked (their parameters in that order, after the host's two)."""
    where = [claimable, _ON_HOST]
    if kinds:
        where.append("kind = ANY(%s)")
    if world:
        where.append("world_id = %s")
    return where


def _with_clock(clock: PostgresClock, select: str) -> str:
    """``select`` with the clock reading (`clock.columns`, as c_boot, c_ms, c_wall) first in
    each row, taken once for the statement: one row of the reading and NULLs where
    ``select`` returns nothing. ``select`` may compare with ``clock.c_ms``."""
    return _with_columns(clock.columns, select)


@functools.cache
def _with_columns(clock: str, select: str) -> str:
    return (
        f"WITH clock (c_boot, c_ms, c_wall) AS MATERIALIZED (SELECT {clock})"
        f" SELECT clock.*, a.* FROM clock LEFT JOIN LATERAL ({select}) AS a ON true"
    )


def _json(rows: Sequence[Sequence[Any]]) -> str:
    """A batch of rows as one JSON array: text and integers exactly, NULL as null (the
    statement casts each position back to its column's type, so a value of another type
    fails the statement instead of being stored). orjson: the same JSON values as
    `json.dumps`, in an eighth of the time (a 30-row step: 10 us against 87 us), non-ASCII
    text as UTF-8 rather than escapes; rows hold no floats (it writes NaN as null)."""
    return orjson.dumps(rows).decode()


def _untimed(transition: Transition) -> _Step:
    return lambda row, _now: transition(row)


def _untimed_claim(transition: ClaimTransition) -> _Claim:
    return lambda row, _now: transition(row)


def _timed(transition: TimedTransition) -> _Step:
    def step(row: Row | None, now: Now | None) -> Row:
        assert now is not None
        return transition(row, now)

    return step


def _timed_claim(transition: TimedClaimTransition) -> _Claim:
    def step(row: Row, now: Now | None) -> Row:
        assert now is not None
        return transition(row, now)

    return step


#: How many times a write is decided again after another transaction wrote its rows first.
_RETRIES = 8
#: An admission's notification announces its records while their values take at most this
#: many bytes (PostgreSQL refuses a NOTIFY payload of 8000 bytes or more).
ANNOUNCE_MAX = 7000
#: A claim takes an announced admission only within this long of its notification's arrival
#: (by this host's monotonic clock: whether to try; the statement itself checks the age).
ANNOUNCED_FRESH_S = 0.1
#: ... and only while the admission's reading is at most this old on the server's clock (the
#: claim's lease runs from that reading, so it is at most this much shorter).
ANNOUNCED_MAX_AGE_MS = 250
#: At most this many rows are kept as committed by this store (`PostgresCatalogStore._known`).
KNOWN_ROWS = 4096


class _Unsure(Exception):
    """Items the core refused, or left unchanged, on the rows this store last committed:
    those rows may be stale, so the items are decided again on the rows as stored."""

    def __init__(self, keys: set[KeyTuple]) -> None:
        super().__init__(sorted(keys))
        self.keys = keys


def _concurrent(e: CatalogStorageError) -> bool:
    """Whether ``e`` is a transaction that another one's write made fail (nothing written):
    a row inserted first (unique violation), a row changed since it was read (its version
    guard), or two batches waiting on each other (the server's deadlock detection)."""
    cause = e.__cause__
    if isinstance(cause, psycopg.errors.UniqueViolation | psycopg.errors.DeadlockDetected):
        return True
    return isinstance(cause, psycopg.errors.NotNullViolation) and (
        cause.diag.column_name == "version"
    )


def _guard_error(e: CatalogStorageError) -> CatalogStorageError:
    """The storage error of a failed transaction: a version guard that refused a row (the
    NULL version of `_update_sql`) says so; anything else is ``e``."""
    cause = e.__cause__
    if isinstance(cause, psycopg.errors.NotNullViolation) and cause.diag.column_name == "version":
        return CatalogStorageError(f"the activity changed under the transaction (version): {e}")
    return e
