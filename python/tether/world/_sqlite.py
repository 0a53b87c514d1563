"""The embedded SQLite world ledger: the default and reference implementation of `WorldLedger`.

One connection, serialised by a mutex, in autocommit mode; every mutation is one
`BEGIN IMMEDIATE` transaction, so a tick's component writes, its visibility token and the
head advance are durable together (WAL, `synchronous=FULL`) or not at all. Each transaction
reads the world's facts, lets `tether.world._rules` decide, and writes what it decided: SQL
here decides no rule.

Schema version 2 (see `_TABLES`) keeps ticks, tokens, the allowlist and components in their
primary keys; a version 1 file refuses to open (`SchemaOutdated`) until `tether db upgrade URL`
rebuilds those tables with their rows (`_migrate`, one transaction).

Three costs a tick does not pay:
- The post-commit mark is committed without a sync of its own (`synchronous=NORMAL` for that
  one transaction): it survives a process crash at once and a power loss with the next
  durable commit, because the WAL is one ordered log and a FULL commit syncs every frame
  before its own. The only steps that read the mark, the next tick and a fork or destroy,
  are such commits, so a tick T+1 that is durable proves T's mark is; a mark lost with the
  power only makes a restart repeat T's post-commit work, which is idempotent.
- A rowid table's second b-tree: the primary key is the table, so a tick writes 6 pages (its
  row in each table, the components' tick index) where version 1 wrote 10.
- `read_at` of a tick this ledger committed (or read last) does not re-read the world: each
  world's latest snapshot is kept, and a commit on it builds the next one from the writes.
  Committed ticks never change, so the kept state is exact; the tick's existence is still
  checked in SQL on every read (a destroyed world's receipts fail closed).
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import MappingProxyType

from tether._sqlite_files import hold_sqlite_file
from tether.storage._errors import SchemaOutdated, StoreDamaged, damage_of, other_store
from tether.storage._urls import sqlite_url
from tether.world import _rules as rules
from tether.world._errors import (
    HeadConflict,
    LedgerClosed,
    ReceiptRejected,
    WorldError,
    WorldNotFound,
    WorldStorageError,
)
from tether.world._locks import WorldLocks
from tether.world._rules import HeadFacts, WorldFacts
from tether.world._types import CommittedTickReceipt, ComponentWrite, WorldSnapshot, Writer

#: The world ledger's schema version (its `schema_version` table).
SCHEMA_VERSION = 2

# The tables of the latest version, by name. Version 2 keeps the ticks, tokens, allowlist and
# components in their primary keys (WITHOUT ROWID): each insert writes one b-tree instead of a
# rowid table plus its key's index, so a tick commits 6 pages instead of 10 (every page is a
# WAL frame the tick's sync writes). `worlds` keeps its rowid (a tick only updates its row).
_TABLES: dict[str, str] = {
    "worlds": """CREATE TABLE worlds (
    world_id         TEXT PRIMARY KEY,
    run_id           TEXT NOT NULL,
    head_tick        INTEGER NOT NULL,
    head_token       TEXT NOT NULL,
    writer_epoch     INTEGER NOT NULL DEFAULT 0,
    post_commit_tick INTEGER NOT NULL,
    close_state      TEXT NOT NULL DEFAULT 'open',
    close_sticky     INTEGER NOT NULL DEFAULT 0,
    forked_from      TEXT,
    forked_at_tick   INTEGER
)""",
    "ticks": """CREATE TABLE ticks (
    world_id     TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    tick         INTEGER NOT NULL,
    committed_ms INTEGER NOT NULL,
    PRIMARY KEY (world_id, run_id, tick)
) WITHOUT ROWID""",
    "tick_tokens": """CREATE TABLE tick_tokens (
    world_id TEXT NOT NULL,
    run_id   TEXT NOT NULL,
    tick     INTEGER NOT NULL,
    token    TEXT NOT NULL,
    PRIMARY KEY (world_id, run_id, tick, token)
) WITHOUT ROWID""",
    "visibility": """CREATE TABLE visibility (
    world_id TEXT NOT NULL,
    token    TEXT NOT NULL,
    PRIMARY KEY (world_id, token)
) WITHOUT ROWID""",
    "components": """CREATE TABLE components (
    world_id  TEXT NOT NULL,
    run_id    TEXT NOT NULL,
    entity    TEXT NOT NULL,
    component TEXT NOT NULL,
    tick      INTEGER NOT NULL,
    value     TEXT,
    PRIMARY KEY (world_id, run_id, entity, component, tick)
) WITHOUT ROWID""",
}
#: The tables a ledger holds at `SCHEMA_VERSION` (besides `schema_version`).
TABLES = tuple(_TABLES)
_INDEXES = ("CREATE INDEX components_by_tick ON components (world_id, run_id, tick)",)
# Version 1 held the same columns in rowid tables; version 2 rebuilds these four.
_REBUILT_IN_2 = ("ticks", "tick_tokens", "visibility", "components")


def _version_of(db: sqlite3.Connection) -> int:
    """The file's schema version: 0 when it holds no ledger, 1 for a ledger from before the
    version table (it holds the version 1 tables)."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "schema_version" in tables:
        row = db.execute("SELECT version FROM schema_version WHERE id = 1").fetchone()
        if row is not None:
            return int(row[0])
    return 1 if "worlds" in tables else 0


def _migrate(db: sqlite3.Connection, where: str, *, upgrade: bool) -> int:
    """In one transaction: create a fresh ledger at `SCHEMA_VERSION`, or (``upgrade``) bring an
    older one forward; refuse an older one otherwise (`SchemaOutdated`, naming `tether db
    upgrade URL`) and a newer one always. Returns the version found."""
    db.execute("BEGIN IMMEDIATE")
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "activities" in tables and "worlds" not in tables:
            raise other_store(where, "catalog")
        found = _version_of(db)
        damage = damage_of(tables, TABLES, found, SCHEMA_VERSION, TABLES)
        if damage is not None:  # its version and its tables disagree
            raise StoreDamaged("world", where, damage, found)
        if found > SCHEMA_VERSION:
            raise SchemaOutdated.newer("world", found, SCHEMA_VERSION, where)
        if 0 < found < SCHEMA_VERSION and not upgrade:
            raise SchemaOutdated(
                f"the world schema at {where} is version {found}, this Tether needs"
                f" {SCHEMA_VERSION}: stop every Tether process using it, then run"
                f" `tether db upgrade {where}`",
                "world",
                found,
                SCHEMA_VERSION,
            )
        if found == 0:
            for statement in (*_TABLES.values(), *_INDEXES):
                db.execute(statement)
        elif found == 1:
            for table in _REBUILT_IN_2:
                db.execute(f"ALTER TABLE {table} RENAME TO {table}_v1")
                db.execute(_TABLES[table])
                db.execute(f"INSERT INTO {table} SELECT * FROM {table}_v1")
                db.execute(f"DROP TABLE {table}_v1")  # its indexes go with it
            for statement in _INDEXES:
                db.execute(statement)
        db.execute(
            "CREATE TABLE IF NOT EXISTS schema_version"
            " (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)"
        )
        db.execute(
            "INSERT INTO schema_version (id, version) VALUES (1, ?)"
            " ON CONFLICT (id) DO UPDATE SET version = excluded.version",
            (SCHEMA_VERSION,),
        )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # a failed COMMIT (a full disk) has rolled back already
            db.execute("ROLLBACK")
        raise
    return found


# What the receipt reader needs, in one statement: the world's head, every token recorded at
# the receipt's (run, tick), and whether the receipt's token is in the visibility allowlist;
# then the rest of the world's facts (the post-commit mark reads both).
_RECEIPT_FACTS = """
SELECT w.run_id, w.head_tick, w.close_state,
    (SELECT json_group_array(t.token) FROM tick_tokens t
        WHERE t.world_id = w.world_id AND t.run_id = ?1 AND t.tick = ?2),
    EXISTS (SELECT 1 FROM visibility v WHERE v.world_id = w.world_id AND v.token = ?3),
    w.head_token, w.writer_epoch, w.post_commit_tick, w.close_sticky
FROM worlds w WHERE w.world_id = ?4
"""


def _same(a: CommittedTickReceipt, b: CommittedTickReceipt) -> bool:
    return (a.world_id, a.run_id, a.tick, a.visibility_token) == (
        b.world_id,
        b.run_id,
        b.tick,
        b.visibility_token,
    )


def _new_token() -> str:
    return "vt_" + secrets.token_hex(16)


class SqliteLedger:
    """The SQLite world ledger (`world.db` in the data directory). Shareable across threads."""

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], int] | None = None,
        upgrade: bool = False,
    ) -> None:
        self._path = Path(path)
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._mutex = threading.Lock()
        self._world_locks = WorldLocks()
        # Per world, the latest snapshot read or committed here (committed ticks never change).
        self._latest: dict[str, tuple[WorldSnapshot, dict[tuple[str, str], str]]] = {}
        #: Write transactions committed, and how many of them synced the WAL (FULL).
        self.commits = 0
        self.synced_commits = 0
        # Checked, and held (never read again by this process) until `close`: see
        # tether._sqlite_files.
        self._hold = hold_sqlite_file(self._path, what="the world ledger")
        try:
            self._db = sqlite3.connect(
                str(self._path), isolation_level=None, check_same_thread=False, timeout=30.0
            )
        except sqlite3.Error as e:
            self._hold.release()
            raise WorldError(f"cannot open world ledger at {self._path}: {e}") from e
        except BaseException:
            self._hold.release()
            raise
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            _migrate(self._db, sqlite_url(self._path), upgrade=upgrade)
            self._unsynced = sqlite3.connect(
                str(self._path), isolation_level=None, check_same_thread=False, timeout=30.0
            )
            self._unsynced.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as e:
            self._db.close()
            self._hold.release()
            raise WorldError(f"cannot open world ledger at {self._path}: {e}") from e
        except BaseException:
            self._db.close()
            self._hold.release()
            raise

    @classmethod
    def open(
        cls, path: str | Path, *, clock: Callable[[], int] | None = None, upgrade: bool = False
    ) -> SqliteLedger:
        """Open (creating if needed) the ledger file at `path`.

        A ledger of an older schema is refused (`SchemaOutdated`) unless ``upgrade`` (what
        `tether db upgrade URL` passes), which migrates it forward in one transaction.
        """
        return cls(path, clock=clock, upgrade=upgrade)

    # -- transactions -------------------------------------------------------------------

    @contextmanager
    def _tx(self, *, sync: bool = True) -> Iterator[sqlite3.Connection]:
        # Unsynced (only the post-commit mark, see the module docstring): the second
        # connection, opened with synchronous=NORMAL; both are used under the one mutex.
        db = self._db if sync else self._unsynced
        with self._mutex:
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
                else:
                    db.execute("COMMIT")
            except sqlite3.Error as e:
                # The file refused a statement or the COMMIT (a full disk, say): nothing of
                # the transaction was written (a failed COMMIT of SQLite rolls back).
                if db.in_transaction:
                    try:
                        db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                raise self._storage_error(e) from e
            self.commits += 1
            self.synced_commits += sync

    def _storage_error(self, e: sqlite3.Error) -> WorldStorageError:
        from tether._sqlite_files import describe, storage_failure

        kind = storage_failure(e)
        said = describe(kind) if kind is not None else str(e)
        return WorldStorageError(
            kind or "storage_error",
            f"the world ledger {self._path} could not be written: {said}; nothing of the"
            " transaction was written (free space, then run the same command again)",
        )

    @staticmethod
    def _facts(db: sqlite3.Connection, world_id: str) -> WorldFacts | None:
        row = db.execute(
            "SELECT run_id, head_tick, head_token, writer_epoch, post_commit_tick, close_state,"
            " close_sticky FROM worlds WHERE world_id = ?",
            (world_id,),
        ).fetchone()
        if row is None:
            return None
        return WorldFacts(
            run_id=row[0],
            head_tick=int(row[1]),
            head_token=row[2],
            writer_epoch=int(row[3]),
            post_commit_tick=int(row[4]),
            close_state=str(row[5]),
            close_sticky=bool(row[6]),
        )

    def _live(self, db: sqlite3.Connection, world_id: str) -> WorldFacts:
        return rules.live_world(world_id, self._facts(db, world_id))

    def _insert_tick(
        self, db: sqlite3.Connection, world_id: str, run_id: str, tick: int, token: str
    ) -> None:
        db.execute(
            "INSERT INTO ticks (world_id, run_id, tick, committed_ms) VALUES (?, ?, ?, ?)",
            (world_id, run_id, tick, self._clock()),
        )
        db.execute(
            "INSERT INTO tick_tokens (world_id, run_id, tick, token) VALUES (?, ?, ?, ?)",
            (world_id, run_id, tick, token),
        )
        db.execute("INSERT INTO visibility (world_id, token) VALUES (?, ?)", (world_id, token))

    # -- worlds and runs ----------------------------------------------------------------

    def create_world(self, world_id: str) -> CommittedTickReceipt:
        """Create a world with a fresh run and an empty genesis tick 0; return its receipt."""
        rules.check_new_world(world_id, False)
        run_id, token = "run_" + uuid.uuid4().hex, _new_token()
        with self._tx() as db:
            rules.check_new_world(world_id, self._facts(db, world_id) is not None)
            db.execute(
                "INSERT INTO worlds (world_id, run_id, head_tick, head_token, post_commit_tick)"
                " VALUES (?, ?, 0, ?, 0)",
                (world_id, run_id, token),
            )
            self._insert_tick(db, world_id, run_id, 0, token)
        return CommittedTickReceipt(world_id, run_id, 0, token)

    def worlds(self) -> list[str]:
        """Ids of every world that is not destroyed, sorted."""
        with self._mutex:
            rows = self._db.execute(
                "SELECT world_id FROM worlds WHERE close_state != 'destroyed' ORDER BY world_id"
            ).fetchall()
        return [r[0] for r in rows]

    def start_run(self, writer: Writer) -> CommittedTickReceipt:
        """Begin a new run of the world (empty genesis tick 0); receipts of the old run go stale.

        A restart does not call this: it resumes the current run at its head.
        """
        run_id, token = "run_" + uuid.uuid4().hex, _new_token()
        with self._tx() as db:
            rules.check_writer(writer, self._live(db, writer.world_id))
            db.execute(
                "UPDATE worlds SET run_id = ?, head_tick = 0, head_token = ?, post_commit_tick = 0"
                " WHERE world_id = ?",
                (run_id, token, writer.world_id),
            )
            self._insert_tick(db, writer.world_id, run_id, 0, token)
        return CommittedTickReceipt(writer.world_id, run_id, 0, token)

    def acquire_writer(self, world_id: str) -> Writer:
        """Become the world's only writer; every earlier writer is fenced."""
        with self._tx() as db:
            writer = rules.next_writer(world_id, self._live(db, world_id))
            db.execute(
                "UPDATE worlds SET writer_epoch = ? WHERE world_id = ?", (writer.epoch, world_id)
            )
        return writer

    # -- ticks --------------------------------------------------------------------------

    def commit(
        self, writer: Writer, parent: CommittedTickReceipt, writes: Sequence[ComponentWrite]
    ) -> CommittedTickReceipt:
        """Commit tick `parent.tick + 1` on top of `parent`, which must still be the head.

        Raises:
            InvalidWrite: a write is malformed, or one (entity, component) is written twice.
            StaleWriter, WorldClosing, HeadConflict, PostCommitPending: see the port rules.
        """
        encoded = rules.encode_writes(writes)
        token = _new_token()
        with self._tx() as db:
            facts = self._live(db, writer.world_id)
            tick = rules.commit_tick(writer, parent, facts)
            run_id, head_tick = facts.run_id, facts.head_tick
            self._insert_tick(db, writer.world_id, run_id, tick, token)
            db.executemany(
                "INSERT INTO components (world_id, run_id, entity, component, tick, value)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(writer.world_id, run_id, e, c, tick, v) for (e, c), v in encoded.items()],
            )
            cur = db.execute(
                "UPDATE worlds SET head_tick = ?, head_token = ?"
                " WHERE world_id = ? AND head_tick = ? AND writer_epoch = ?",
                (tick, token, writer.world_id, head_tick, writer.epoch),
            )
            # Compare-and-swap on the facts read (as the catalog swaps on its version).
            if cur.rowcount != 1:  # pragma: no cover - guarded by BEGIN IMMEDIATE above
                raise HeadConflict(f"head of {writer.world_id!r} moved during commit")
        receipt = CommittedTickReceipt(writer.world_id, run_id, tick, token)
        self._keep_next(parent, receipt, encoded)
        return receipt

    def _keep_next(
        self,
        parent: CommittedTickReceipt,
        receipt: CommittedTickReceipt,
        encoded: dict[tuple[str, str], str | None],
    ) -> None:
        """Keep the committed tick's snapshot, built from the kept parent's and the writes."""
        with self._mutex:
            kept = self._latest.get(parent.world_id)
            if kept is None or not _same(kept[0].receipt, parent):
                self._latest.pop(parent.world_id, None)
                return
            state = kept[1].copy()  # a new dict: the parent's snapshot stays as it was
            for key, text in encoded.items():
                if text is None:
                    state.pop(key, None)
                else:
                    state[key] = text
            snapshot = WorldSnapshot(receipt, MappingProxyType(state), frozenset(encoded))
            self._latest[parent.world_id] = (snapshot, state)

    def head(self, world_id: str) -> CommittedTickReceipt:
        """The world's current committed head (in its current run)."""
        with self._mutex:
            facts = self._live(self._db, world_id)
        return rules.head_of(world_id, facts)

    def pending_post_commit(self, world_id: str) -> CommittedTickReceipt | None:
        """The head receipt if its post-commit work has not yet succeeded, else None."""
        with self._mutex:
            facts = self._live(self._db, world_id)
        return rules.head_of(world_id, facts) if rules.post_commit_pending(facts) else None

    def complete_post_commit(self, receipt: CommittedTickReceipt) -> None:
        """Record that the post-commit work of the head `receipt` succeeded.

        Raises:
            ReceiptRejected: `receipt` is not the world's exact committed head (the reader).
        """
        token = rules.receipt_token(receipt)
        with self._tx(sync=False) as db:  # durable with the next FULL commit (see above)
            head, world = self._receipt_facts(db, receipt, token)
            rules.judge_receipt(receipt, head)
            mark = rules.post_commit_mark(receipt, rules.live_world(receipt.world_id, world))
            db.execute(
                "UPDATE worlds SET post_commit_tick = ? WHERE world_id = ?",
                (mark, receipt.world_id),
            )

    # -- reading ------------------------------------------------------------------------

    def check_receipt(self, receipt: CommittedTickReceipt) -> None:
        """The fail-closed receipt reader used for admission and settlement.

        Raises:
            ReceiptRejected: with the code of the first rule the receipt breaks.
        """
        token = rules.receipt_token(receipt)
        with self._mutex:  # one statement: one consistent view, no commit lands in between
            facts, _ = self._receipt_facts(self._db, receipt, token)
        rules.judge_receipt(receipt, facts)

    @staticmethod
    def _receipt_facts(
        db: sqlite3.Connection, receipt: CommittedTickReceipt, token: str
    ) -> tuple[HeadFacts | None, WorldFacts | None]:
        """The receipt reader's facts and the world's facts, in one statement."""
        row = db.execute(
            _RECEIPT_FACTS, (receipt.run_id, receipt.tick, token, receipt.world_id)
        ).fetchone()
        if row is None:
            return None, None
        head = HeadFacts(
            run_id=row[0],
            head_tick=int(row[1]),
            destroyed=row[2] == "destroyed",
            tokens_at_tick=frozenset(json.loads(row[3])),
            visible=bool(row[4]),
        )
        world = WorldFacts(
            run_id=row[0],
            head_tick=int(row[1]),
            head_token=row[5],
            writer_epoch=int(row[6]),
            post_commit_tick=int(row[7]),
            close_state=str(row[2]),
            close_sticky=bool(row[8]),
        )
        return head, world

    def visibility_allowlist(self, world_id: str) -> frozenset[str]:
        """The world's pinned visibility tokens."""
        with self._mutex:
            rows = self._db.execute(
                "SELECT token FROM visibility WHERE world_id = ?", (world_id,)
            ).fetchall()
        return frozenset(r[0] for r in rows)

    def read_at(self, receipt: CommittedTickReceipt) -> WorldSnapshot:
        """A read-only snapshot of the components as of exactly `receipt`'s tick.

        Historical receipts may be read; admission and settlement use `check_receipt` first.

        Raises:
            ReceiptRejected: `tokenless` or `no_such_tick` when no such committed tick exists.
        """
        token = rules.receipt_token(receipt)
        key = (receipt.world_id, receipt.run_id, receipt.tick)
        with self._mutex:
            found = self._db.execute(
                "SELECT 1 FROM tick_tokens WHERE world_id = ? AND run_id = ? AND tick = ?"
                " AND token = ?",
                (*key, token),
            ).fetchone()
            if found is None:
                raise ReceiptRejected("no_such_tick", f"no committed tick matches {receipt!r}")
            kept = self._latest.get(receipt.world_id)
            if kept is not None and _same(kept[0].receipt, receipt):
                return kept[0]
            rows = self._db.execute(
                "SELECT entity, component, value, MAX(tick) FROM components"
                " WHERE world_id = ? AND run_id = ? AND tick <= ? GROUP BY entity, component",
                key,
            ).fetchall()
            changed = self._db.execute(
                "SELECT entity, component FROM components"
                " WHERE world_id = ? AND run_id = ? AND tick = ?",
                key,
            ).fetchall()
        state = {(r[0], r[1]): r[2] for r in rows if r[2] is not None}
        snapshot = WorldSnapshot(
            receipt, MappingProxyType(state), frozenset((r[0], r[1]) for r in changed)
        )
        with self._mutex:
            kept = self._latest.get(receipt.world_id)
            later_kept = (
                kept is not None
                and kept[0].receipt.run_id == receipt.run_id
                and kept[0].receipt.tick > receipt.tick
            )
            if not later_kept:  # a historical read leaves the later snapshot kept
                self._latest[receipt.world_id] = (snapshot, state)
        return snapshot

    # -- locking ------------------------------------------------------------------------

    def lock(self, world_id: str) -> AbstractContextManager[None]:
        """The exact-world lock (re-entrant for its holder), as a context manager."""
        return self._world_locks.lock(world_id)

    def holds_lock(self, world_id: str | None = None) -> bool:
        """Whether the calling thread holds the lock of `world_id` (or of any world)."""
        return self._world_locks.holds(world_id)

    # -- lifecycle ----------------------------------------------------------------------

    def fork(self, source: CommittedTickReceipt, new_world_id: str) -> CommittedTickReceipt:
        """Create `new_world_id` whose genesis holds `source`'s state (no control records).

        Raises:
            ReceiptRejected: `source` is not the current head (the fail-closed reader).
            HeadConflict: the head moved between the read and the fork's transaction.
            PostCommitPending: the head's post-commit work has not succeeded.
        """
        rules.check_new_world(new_world_id, False)
        self.check_receipt(source)
        snapshot = self.read_at(source)
        run_id, token = "run_" + uuid.uuid4().hex, _new_token()
        with self._tx() as db:
            # Another process's writer may have committed since the caller checked for
            # unsettled work: the checked head must still be the settled head.
            rules.check_settled_head(source, self._live(db, source.world_id))
            rules.check_new_world(new_world_id, self._facts(db, new_world_id) is not None)
            db.execute(
                "INSERT INTO worlds (world_id, run_id, head_tick, head_token, post_commit_tick,"
                " forked_from, forked_at_tick) VALUES (?, ?, 0, ?, 0, ?, ?)",
                (new_world_id, run_id, token, source.world_id, source.tick),
            )
            self._insert_tick(db, new_world_id, run_id, 0, token)
            db.executemany(
                "INSERT INTO components (world_id, run_id, entity, component, tick, value)"
                " VALUES (?, ?, ?, ?, 0, ?)",
                [
                    (new_world_id, run_id, e, c, snapshot._encoded[(e, c)])
                    for (e, c) in snapshot.keys()
                ],
            )
        return CommittedTickReceipt(new_world_id, run_id, 0, token)

    def reserve_close(self, world_id: str, *, sticky: bool) -> None:
        """Reserve the world for close; a sticky reservation survives `rollback_close`."""
        with self._tx() as db:
            state, keep = rules.reserve_close(self._live(db, world_id), sticky=sticky)
            db.execute(
                "UPDATE worlds SET close_state = ?, close_sticky = ? WHERE world_id = ?",
                (state, int(keep), world_id),
            )

    def rollback_close(self, world_id: str) -> None:
        """Undo a provisional (non-sticky) close reservation; sticky ones stay."""
        with self._tx() as db:
            state = rules.rollback_close(self._live(db, world_id))
            db.execute("UPDATE worlds SET close_state = ? WHERE world_id = ?", (state, world_id))

    def close_state(self, world_id: str) -> tuple[str, bool]:
        """(state, sticky) where state is `open`, `closing` or `destroyed`."""
        with self._mutex:
            facts = self._facts(self._db, world_id)
        if facts is None:
            raise WorldNotFound(f"world {world_id!r} does not exist")
        return facts.close_state, facts.close_sticky

    def destroy(self, world_id: str, head: CommittedTickReceipt | None = None) -> None:
        """Delete a world reserved for close; its receipts then fail closed (`world_closed`).

        With `head`, the head the caller checked for unsettled work, the destroy also fails
        (`HeadConflict`, `PostCommitPending`) unless that is still the head with its post-commit
        work done, checked in the same transaction.
        """
        with self._tx() as db:
            facts = self._live(db, world_id)
            rules.check_destroyable(world_id, facts)
            if head is not None:
                rules.check_settled_head(head, facts)
            for table in ("ticks", "tick_tokens", "visibility", "components"):
                db.execute(f"DELETE FROM {table} WHERE world_id = ?", (world_id,))
            db.execute(
                "UPDATE worlds SET close_state = 'destroyed' WHERE world_id = ?", (world_id,)
            )
            self._latest.pop(world_id, None)

    def close(self) -> None:
        """Close the connections; every later call is `LedgerClosed` (a raw sqlite3 error
        before)."""
        with self._mutex:
            if isinstance(self._db, _Closed):
                return
            self._unsynced.close()
            self._db.close()
            self._hold.release()
            self._db = self._unsynced = _Closed()  # type: ignore[assignment]


class _Closed:
    """A closed ledger's connections: any use is `LedgerClosed`."""

    def __getattr__(self, name: str) -> object:
        raise LedgerClosed("the world ledger is closed")
