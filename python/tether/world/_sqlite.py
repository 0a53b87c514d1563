"""The embedded SQLite world ledger: the default and reference implementation of `WorldLedger`.

One connection, serialised by a mutex, in autocommit mode; every mutation is one
`BEGIN IMMEDIATE` transaction, so a tick's component writes, its visibility token and the
head advance are durable together (WAL, `synchronous=FULL`) or not at all.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from tether.world._errors import (
    HeadConflict,
    InvalidWrite,
    PostCommitPending,
    ReceiptRejected,
    StaleWriter,
    WorldClosing,
    WorldError,
    WorldExists,
    WorldNotFound,
)
from tether.world._types import (
    CommittedTickReceipt,
    ComponentWrite,
    WorldSnapshot,
    Writer,
    check_name,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS worlds (
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
);
CREATE TABLE IF NOT EXISTS ticks (
    world_id     TEXT NOT NULL,
    run_id       TEXT NOT NULL,
    tick         INTEGER NOT NULL,
    committed_ms INTEGER NOT NULL,
    PRIMARY KEY (world_id, run_id, tick)
);
CREATE TABLE IF NOT EXISTS tick_tokens (
    world_id TEXT NOT NULL,
    run_id   TEXT NOT NULL,
    tick     INTEGER NOT NULL,
    token    TEXT NOT NULL,
    PRIMARY KEY (world_id, run_id, tick, token)
);
CREATE TABLE IF NOT EXISTS visibility (
    world_id TEXT NOT NULL,
    token    TEXT NOT NULL,
    PRIMARY KEY (world_id, token)
);
CREATE TABLE IF NOT EXISTS components (
    world_id  TEXT NOT NULL,
    run_id    TEXT NOT NULL,
    entity    TEXT NOT NULL,
    component TEXT NOT NULL,
    tick      INTEGER NOT NULL,
    value     TEXT,
    PRIMARY KEY (world_id, run_id, entity, component, tick)
);
CREATE INDEX IF NOT EXISTS components_by_tick ON components (world_id, run_id, tick);
"""


class _WorldLock:
    """A re-entrant per-world lock that can tell whether the calling thread holds it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._owner: int | None = None
        self._depth = 0

    def acquire(self) -> None:
        self._lock.acquire()
        self._owner = threading.get_ident()
        self._depth += 1

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
        self._lock.release()

    def held_by_me(self) -> bool:
        return self._owner == threading.get_ident()


def _new_token() -> str:
    return "vt_" + secrets.token_hex(16)


class SqliteLedger:
    """The SQLite world ledger (`world.db` in the data directory). Shareable across threads."""

    def __init__(self, path: str | Path, *, clock: Callable[[], int] | None = None) -> None:
        self._path = Path(path)
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._mutex = threading.Lock()
        self._locks: dict[str, _WorldLock] = {}
        self._locks_guard = threading.Lock()
        try:
            self._db = sqlite3.connect(
                str(self._path), isolation_level=None, check_same_thread=False, timeout=30.0
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as e:
            raise WorldError(f"cannot open world ledger at {self._path}: {e}") from e

    @classmethod
    def open(cls, path: str | Path, *, clock: Callable[[], int] | None = None) -> SqliteLedger:
        """Open (creating if needed) the ledger file at `path`."""
        return cls(path, clock=clock)

    # -- transactions -------------------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._mutex:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    def _world_row(self, db: sqlite3.Connection, world_id: str) -> tuple[Any, ...]:
        row = db.execute(
            "SELECT run_id, head_tick, head_token, writer_epoch, post_commit_tick, close_state,"
            " close_sticky FROM worlds WHERE world_id = ?",
            (world_id,),
        ).fetchone()
        if row is None or row[5] == "destroyed":
            raise WorldNotFound(f"world {world_id!r} does not exist")
        return tuple(row)

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
        check_name("world id", world_id)
        run_id, token = "run_" + uuid.uuid4().hex, _new_token()
        with self._tx() as db:
            if db.execute("SELECT 1 FROM worlds WHERE world_id = ?", (world_id,)).fetchone():
                raise WorldExists(f"world {world_id!r} already exists (or was destroyed)")
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
            row = self._world_row(db, writer.world_id)
            self._check_writable(writer, row)
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
            row = self._world_row(db, world_id)
            epoch = int(row[3]) + 1
            db.execute("UPDATE worlds SET writer_epoch = ? WHERE world_id = ?", (epoch, world_id))
        return Writer(world_id, epoch)

    @staticmethod
    def _check_writable(writer: Writer, row: tuple[Any, ...]) -> None:
        if row[5] != "open":
            raise WorldClosing(f"world {writer.world_id!r} is reserved for close")
        if writer.epoch != row[3]:
            raise StaleWriter(
                f"writer epoch {writer.epoch} of {writer.world_id!r} was superseded by {row[3]}"
            )

    # -- ticks --------------------------------------------------------------------------

    def commit(
        self, writer: Writer, parent: CommittedTickReceipt, writes: Sequence[ComponentWrite]
    ) -> CommittedTickReceipt:
        """Commit tick `parent.tick + 1` on top of `parent`, which must still be the head.

        Raises:
            InvalidWrite: a write is malformed, or one (entity, component) is written twice.
            StaleWriter, WorldClosing, HeadConflict, PostCommitPending: see the port rules.
        """
        if parent.world_id != writer.world_id:
            raise InvalidWrite(f"parent receipt names world {parent.world_id!r}")
        encoded: dict[tuple[str, str], str | None] = {}
        for w in writes:
            if not isinstance(w, ComponentWrite):
                raise InvalidWrite(f"{w!r} is not a ComponentWrite")
            key = (w.entity, w.component)
            text = w.encoded()
            if key in encoded:
                raise InvalidWrite(f"component {key} is written twice in one tick")
            encoded[key] = text
        token = _new_token()
        with self._tx() as db:
            row = self._world_row(db, writer.world_id)
            self._check_writable(writer, row)
            run_id, head_tick, head_token = row[0], int(row[1]), row[2]
            if (parent.run_id, parent.tick, parent.visibility_token) != (
                run_id,
                head_tick,
                head_token,
            ):
                raise HeadConflict(f"parent {parent} is not the head ({run_id}, tick {head_tick})")
            if int(row[4]) < head_tick:
                raise PostCommitPending(
                    f"post-commit work of tick {head_tick} of {writer.world_id!r} has not succeeded"
                )
            tick = head_tick + 1
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
            if cur.rowcount != 1:  # pragma: no cover - guarded by BEGIN IMMEDIATE above
                raise HeadConflict(f"head of {writer.world_id!r} moved during commit")
        return CommittedTickReceipt(writer.world_id, run_id, tick, token)

    def head(self, world_id: str) -> CommittedTickReceipt:
        """The world's current committed head (in its current run)."""
        with self._mutex:
            row = self._world_row(self._db, world_id)
        return CommittedTickReceipt(world_id, row[0], int(row[1]), row[2])

    def pending_post_commit(self, world_id: str) -> CommittedTickReceipt | None:
        """The head receipt if its post-commit work has not yet succeeded, else None."""
        with self._mutex:
            row = self._world_row(self._db, world_id)
        if int(row[4]) >= int(row[1]):
            return None
        return CommittedTickReceipt(world_id, row[0], int(row[1]), row[2])

    def complete_post_commit(self, receipt: CommittedTickReceipt) -> None:
        """Record that the post-commit work of the head `receipt` succeeded."""
        self.check_receipt(receipt)
        with self._tx() as db:
            db.execute(
                "UPDATE worlds SET post_commit_tick = MAX(post_commit_tick, ?)"
                " WHERE world_id = ? AND run_id = ? AND head_tick = ?",
                (receipt.tick, receipt.world_id, receipt.run_id, receipt.tick),
            )

    # -- reading ------------------------------------------------------------------------

    def check_receipt(self, receipt: CommittedTickReceipt) -> None:
        """The fail-closed receipt reader used for admission and settlement.

        Raises:
            ReceiptRejected: with the code of the first rule the receipt breaks.
        """
        token = getattr(receipt, "visibility_token", None)
        if not isinstance(token, str) or not token:
            raise ReceiptRejected("tokenless", f"receipt {receipt!r} carries no visibility token")
        with self._mutex:
            row = self._db.execute(
                "SELECT run_id, head_tick, close_state FROM worlds WHERE world_id = ?",
                (receipt.world_id,),
            ).fetchone()
            if row is None:
                raise ReceiptRejected("unknown_world", f"no world {receipt.world_id!r}")
            if row[2] == "destroyed":
                raise ReceiptRejected("world_closed", f"world {receipt.world_id!r} was destroyed")
            if row[0] != receipt.run_id:
                raise ReceiptRejected(
                    "wrong_run", f"run {receipt.run_id!r} is not the current run {row[0]!r}"
                )
            if int(row[1]) != receipt.tick:
                raise ReceiptRejected(
                    "not_head", f"tick {receipt.tick} is not the committed head {row[1]}"
                )
            tokens = [
                r[0]
                for r in self._db.execute(
                    "SELECT token FROM tick_tokens WHERE world_id = ? AND run_id = ? AND tick = ?",
                    (receipt.world_id, receipt.run_id, receipt.tick),
                )
            ]
            visible = self._db.execute(
                "SELECT 1 FROM visibility WHERE world_id = ? AND token = ?",
                (receipt.world_id, token),
            ).fetchone()
        if len(tokens) > 1:
            raise ReceiptRejected("ambiguous_head", f"head tick {receipt.tick} has {len(tokens)}")
        if tokens != [token]:
            raise ReceiptRejected("sibling_token", f"token {token!r} is not the head's token")
        if visible is None:
            raise ReceiptRejected("not_visible", f"token {token!r} is not in the allowlist")

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
        if not isinstance(receipt.visibility_token, str) or not receipt.visibility_token:
            raise ReceiptRejected("tokenless", f"receipt {receipt!r} carries no visibility token")
        key = (receipt.world_id, receipt.run_id, receipt.tick)
        with self._mutex:
            found = self._db.execute(
                "SELECT 1 FROM tick_tokens WHERE world_id = ? AND run_id = ? AND tick = ?"
                " AND token = ?",
                (*key, receipt.visibility_token),
            ).fetchone()
            if found is None:
                raise ReceiptRejected("no_such_tick", f"no committed tick matches {receipt!r}")
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
        return WorldSnapshot.of(receipt, state, frozenset((r[0], r[1]) for r in changed))

    # -- locking ------------------------------------------------------------------------

    def _world_lock(self, world_id: str) -> _WorldLock:
        with self._locks_guard:
            return self._locks.setdefault(world_id, _WorldLock())

    @contextmanager
    def _locked(self, world_id: str) -> Iterator[None]:
        lock = self._world_lock(world_id)
        lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def lock(self, world_id: str) -> AbstractContextManager[None]:
        """The exact-world lock (re-entrant for its holder), as a context manager."""
        return self._locked(world_id)

    def holds_lock(self, world_id: str | None = None) -> bool:
        """Whether the calling thread holds the lock of `world_id` (or of any world)."""
        with self._locks_guard:
            locks = list(self._locks.items())
        return any(lk.held_by_me() for w, lk in locks if world_id is None or w == world_id)

    # -- lifecycle ----------------------------------------------------------------------

    def fork(self, source: CommittedTickReceipt, new_world_id: str) -> CommittedTickReceipt:
        """Create `new_world_id` whose genesis holds `source`'s state (no control records)."""
        check_name("world id", new_world_id)
        self.check_receipt(source)
        snapshot = self.read_at(source)
        run_id, token = "run_" + uuid.uuid4().hex, _new_token()
        with self._tx() as db:
            if db.execute("SELECT 1 FROM worlds WHERE world_id = ?", (new_world_id,)).fetchone():
                raise WorldExists(f"world {new_world_id!r} already exists (or was destroyed)")
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
            row = self._world_row(db, world_id)
            db.execute(
                "UPDATE worlds SET close_state = 'closing', close_sticky = ? WHERE world_id = ?",
                (1 if (sticky or row[6]) else 0, world_id),
            )

    def rollback_close(self, world_id: str) -> None:
        """Undo a provisional (non-sticky) close reservation; sticky ones stay."""
        with self._tx() as db:
            self._world_row(db, world_id)
            db.execute(
                "UPDATE worlds SET close_state = 'open'"
                " WHERE world_id = ? AND close_state = 'closing' AND close_sticky = 0",
                (world_id,),
            )

    def close_state(self, world_id: str) -> tuple[str, bool]:
        """(state, sticky) where state is `open`, `closing` or `destroyed`."""
        with self._mutex:
            row = self._db.execute(
                "SELECT close_state, close_sticky FROM worlds WHERE world_id = ?", (world_id,)
            ).fetchone()
        if row is None:
            raise WorldNotFound(f"world {world_id!r} does not exist")
        return str(row[0]), bool(row[1])

    def destroy(self, world_id: str) -> None:
        """Delete a world reserved for close; its receipts then fail closed (`world_closed`)."""
        with self._tx() as db:
            row = self._world_row(db, world_id)
            if row[5] != "closing":
                raise WorldError(f"world {world_id!r} must be reserved for close before destroy")
            for table in ("ticks", "tick_tokens", "visibility", "components"):
                db.execute(f"DELETE FROM {table} WHERE world_id = ?", (world_id,))
            db.execute(
                "UPDATE worlds SET close_state = 'destroyed' WHERE world_id = ?", (world_id,)
            )

    def close(self) -> None:
        """Close the connection."""
        with self._mutex:
            self._db.close()
