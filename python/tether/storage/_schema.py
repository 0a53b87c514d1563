"""The SQLite catalog schema and its forward-only migrations.

Version 1 creates the flat `activities` table with the Rust core's columns (its kinds listed
in `activity_kinds`, referenced by foreign key), plus partial indexes for exactly the views the
catalog scans: claimable (per kind, by `claimable_from_ms`, which the core computes), results
pending observation, and activities awaiting a decision. Finished and leased rows are outside
the claimable range or the partial indexes, so a claim costs the same however many of them
exist. Every index costs a page per write, and only when a write changes one of its columns.

Version 2 adds the columns the core derives instead of SQL: `pending_observation` and
`unsettled` (each with its partial index, the world-scoped lifecycle gate's), and
`lease_boot_id`, the boot whose lease clock a row's `claimable_from_ms` and lease are on, with
`catalog_clock` recording the boot the claimable index is on. Existing rows get the derived
columns from the core (`catalog_derive_row`), never from an SQL copy of the rule; their lease
values were wall-clock times and are marked as of no boot (''), so the core treats their leases
as expired and their backoff as elapsed once a clock reads the catalog (stop every Tether
process before upgrading: their leases are gone with them).

Version 3 adds retention: `compacted_at_ms` (a fact: when the core compacted the record) and
`compactable_from_ms` (derived by the core: a settled, whole record's settlement time), with a
partial index over the settled records not yet compacted, which `tether db prune` walks in
`compactable_from_ms` order. Compacted and unsettled records are not in it.

Version 4 replaces the pending-observation index and the unsettled index by one index of the
unsettled records ordered by (`pending_observation`, `world_id`, `kind`, `activity_id`): the
results pending observation are its `pending_observation = 1` range (the core's pending
observation is a recorded result not yet settled, so it is always unsettled), and the
lifecycle gate probes a world in both ranges. A result moves the record within that one index
and a settlement removes it once, where they wrote two indexes before: one page fewer per
lifecycle (a page per index a commit touches is what a transition costs in WAL frames). The
upgrade only swaps the indexes; no row changes.

Version 5 adds `bound_host`, the host that owns the device an Activity drives (a fact of its
immutable admission; '' for work any host may claim), and rebuilds the claimable index as
(`kind`, `claimable_from_ms`, `bound_host`): a claim on a host selects the rows bound to no host
or to it off the index entries. Existing rows were admitted before any binding: '' (any host).
"""

from __future__ import annotations

import sqlite3
from itertools import compress
from operator import ne

from tether._core import CatalogStorageError, catalog_columns, catalog_derive_row
from tether.storage._errors import SchemaOutdated, StoreDamaged, damage_of, other_store

COLUMNS: tuple[str, ...] = tuple(catalog_columns())
_PK = ("world_id", "kind", "activity_id")
_PK_AT = tuple(COLUMNS.index(c) for c in _PK)
REDERIVE_PAGE = 1000

_ACTIVITIES_V1 = """
CREATE TABLE activities (
    world_id TEXT NOT NULL,
    kind TEXT NOT NULL REFERENCES activity_kinds (kind),
    activity_id TEXT NOT NULL,
    source_run_id TEXT NOT NULL,
    source_tick INTEGER NOT NULL,
    source_token TEXT NOT NULL,
    input_ref TEXT NOT NULL,
    input_digest TEXT NOT NULL,
    admitted_at_ms INTEGER NOT NULL,
    fence INTEGER NOT NULL,
    attempt_count INTEGER NOT NULL,
    attempt_owner TEXT,
    lease_expires_ms INTEGER,
    may_execute INTEGER,
    operation_id TEXT,
    operation_fence INTEGER,
    bound_at_ms INTEGER,
    guard_ref TEXT,
    guard_digest TEXT,
    guard_fence INTEGER,
    guard_at_ms INTEGER,
    retry_authorized INTEGER NOT NULL,
    result_ref TEXT,
    result_digest TEXT,
    result_media_type TEXT,
    result_size INTEGER,
    result_failed INTEGER,
    result_attempt INTEGER,
    result_fence INTEGER,
    result_at_ms INTEGER,
    evidence_ref TEXT,
    evidence_digest TEXT,
    evidence_revision INTEGER NOT NULL,
    evidence_at_ms INTEGER,
    awaiting_decision INTEGER NOT NULL,
    decision_outcome TEXT,
    decision_revision INTEGER,
    decision_operator TEXT,
    decision_at_ms INTEGER,
    decision_note TEXT,
    settled_run_id TEXT,
    settled_tick INTEGER,
    settled_token TEXT,
    settlement_evidence_digest TEXT,
    settled_at_ms INTEGER,
    claimable_from_ms INTEGER,
    version INTEGER NOT NULL,
    PRIMARY KEY (world_id, kind, activity_id)
) STRICT, WITHOUT ROWID
"""


def rederive(conn: sqlite3.Connection) -> int:
    """Recompute every row's derived columns through the core; return how many changed.

    Pages by primary key, so rows are never read while the page being written is scanned.
    """
    select = (
        f"SELECT {', '.join(COLUMNS)} FROM activities WHERE ({', '.join(_PK)}) > (?, ?, ?)"
        f" ORDER BY {', '.join(_PK)} LIMIT {REDERIVE_PAGE}"
    )
    after: tuple[str, str, str] = ("", "", "")
    changed = 0
    while True:
        rows = conn.execute(select, after).fetchall()
        for row in rows:
            try:
                new = catalog_derive_row(row)
            except CatalogStorageError as e:
                key = tuple(row[i] for i in _PK_AT)
                raise CatalogStorageError(f"cannot migrate catalog row {key}: {e}") from e
            cols = [COLUMNS[i] for i in compress(range(len(COLUMNS)), map(ne, row, new))]
            if cols:
                conn.execute(
                    f"UPDATE activities SET {', '.join(f'{c} = ?' for c in cols)}"
                    " WHERE world_id = ? AND kind = ? AND activity_id = ?",
                    [new[COLUMNS.index(c)] for c in cols] + [row[i] for i in _PK_AT],
                )
                changed += 1
        if len(rows) < REDERIVE_PAGE:
            return changed
        last = rows[-1]
        after = (last[_PK_AT[0]], last[_PK_AT[1]], last[_PK_AT[2]])


# (version, statements, then-rederive). Append only: a released migration never changes. A
# migration that adds derived columns asks for one `rederive` pass, run after every statement
# of every pending version (the core decodes exactly the latest layout).
Migration = tuple[int, tuple[str, ...], bool]
MIGRATIONS: tuple[Migration, ...] = (
    (
        1,
        (
            "CREATE TABLE activity_kinds (kind TEXT PRIMARY KEY) STRICT, WITHOUT ROWID",
            _ACTIVITIES_V1,
            # The one claimable index is per kind (the primary key completes each entry, so it
            # orders by kind, claimable_from_ms, world_id, activity_id); claims across kinds
            # probe each kind listed in activity_kinds, which costs one page less per write
            # than keeping a second, global claimable index.
            "CREATE INDEX activities_claimable ON activities (kind, claimable_from_ms)"
            " WHERE claimable_from_ms IS NOT NULL",
            "CREATE INDEX activities_pending_observation ON activities"
            " (world_id, kind, activity_id)"
            " WHERE result_ref IS NOT NULL AND settled_tick IS NULL",
            "CREATE INDEX activities_awaiting_decision ON activities"
            " (world_id, kind, activity_id) WHERE awaiting_decision = 1",
        ),
        False,
    ),
    (
        2,
        (
            "ALTER TABLE activities ADD COLUMN lease_boot_id TEXT NOT NULL DEFAULT ''",
            "ALTER TABLE activities ADD COLUMN pending_observation INTEGER NOT NULL DEFAULT 0",
            "ALTER TABLE activities ADD COLUMN unsettled INTEGER NOT NULL DEFAULT 0",
            "DROP INDEX activities_pending_observation",
            "CREATE INDEX activities_pending_observation ON activities"
            " (world_id, kind, activity_id) WHERE pending_observation = 1",
            # The lifecycle gate: one probe per world, whatever the number of kinds.
            "CREATE INDEX activities_unsettled ON activities (world_id) WHERE unsettled = 1",
            "CREATE TABLE catalog_clock"
            " (id INTEGER PRIMARY KEY CHECK (id = 1), boot_id TEXT NOT NULL) STRICT",
            "INSERT INTO catalog_clock (id, boot_id) VALUES (1, '')",
        ),
        True,
    ),
    (
        3,
        (
            "ALTER TABLE activities ADD COLUMN compacted_at_ms INTEGER",
            "ALTER TABLE activities ADD COLUMN compactable_from_ms INTEGER",
            "CREATE INDEX activities_compactable ON activities (compactable_from_ms)"
            " WHERE compactable_from_ms IS NOT NULL",
        ),
        True,
    ),
    (
        4,
        (
            # One index of the unsettled records, pending observation ones first in their own
            # range: a result and a settlement each touch one index page fewer than with a
            # separate pending-observation index (the core's pending implies unsettled).
            "DROP INDEX activities_pending_observation",
            "DROP INDEX activities_unsettled",
            "CREATE INDEX activities_unsettled ON activities"
            " (pending_observation, world_id, kind, activity_id) WHERE unsettled = 1",
        ),
        False,
    ),
    (
        5,
        (
            "ALTER TABLE activities ADD COLUMN bound_host TEXT NOT NULL DEFAULT ''",
            "DROP INDEX activities_claimable",
            "CREATE INDEX activities_claimable ON activities"
            " (kind, claimable_from_ms, bound_host) WHERE claimable_from_ms IS NOT NULL",
        ),
        False,
    ),
)

LATEST = MIGRATIONS[-1][0]
#: The tables a catalog holds at `LATEST` (besides `schema_version`).
TABLES = ("activities", "activity_kinds", "catalog_clock")


def current_version(conn: sqlite3.Connection) -> int:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version"
        " (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL) STRICT"
    )
    row = conn.execute("SELECT version FROM schema_version WHERE id = 1").fetchone()
    return 0 if row is None else int(row[0])


def migrate(conn: sqlite3.Connection, *, upgrade: bool = True, where: str = "") -> int:
    """Bring the schema forward to `LATEST` in one transaction; return the version found.

    Without ``upgrade``, only a fresh file (version 0) is brought forward: an older schema is
    refused (`SchemaOutdated`, naming `tether db upgrade URL`).
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "worlds" in tables and "activities" not in tables:
            raise other_store(where, "world")
        found = current_version(conn)
        damage = damage_of(tables, TABLES, found, LATEST, ("activities",))
        if damage is not None:  # its version and its tables disagree
            raise StoreDamaged("catalog", where or "the catalog file", damage, found)
        if found > LATEST:
            raise SchemaOutdated.newer("catalog", found, LATEST, where)
        if 0 < found < LATEST and not upgrade:
            raise SchemaOutdated(
                f"the catalog schema at {where} is version {found}, this Tether needs"
                f" {LATEST}: stop every Tether process using it, then run"
                f" `tether db upgrade {where or 'URL'}`",
                "catalog",
                found,
                LATEST,
            )
        needs_rederive = False
        for version, statements, then_rederive in MIGRATIONS:
            if version > found:
                for statement in statements:
                    conn.execute(statement)
                needs_rederive = needs_rederive or then_rederive
        conn.execute(
            "INSERT INTO schema_version (id, version) VALUES (1, ?)"
            " ON CONFLICT (id) DO UPDATE SET version = excluded.version",
            (LATEST,),
        )
        # Storage names every column in SQL, so only the set must match, not the order.
        columns = {r[1] for r in conn.execute("PRAGMA table_info(activities)")}
        if columns != set(COLUMNS):
            raise CatalogStorageError(
                "the activities table does not match the core's column layout"
            )
        if needs_rederive:
            rederive(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # a failed COMMIT (a full disk) has rolled back already
            conn.execute("ROLLBACK")
        raise
    return found
