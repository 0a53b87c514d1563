"""The PostgreSQL world ledger: the same `WorldLedger` as `SqliteLedger`, shared by many hosts.

Every mutation is one READ COMMITTED transaction that first locks the world's row
(`SELECT ... FOR UPDATE`), so the mutations of one world serialise on the server while other
worlds proceed; it reads the world's facts, lets `tether.world._rules` decide, and writes what
the rules decided, with the head advance guarded by a compare-and-swap on (head tick, writer
epoch). SQL here decides no rule. Reads that need one consistent view (`check_receipt`,
`read_at`) run in a read-only REPEATABLE READ transaction. The session settings (synchronous
commit on, statement and idle-in-transaction timeouts) are those of `tether.storage._pg`.

A COMMIT whose reply was lost is an unknown outcome. A tick's raises `LedgerCommitUnknown`
naming the tick it would have made (the Ticker re-reads the head). A lifecycle call resolves
its own by re-reading, in a new session, what only that call could have written, and tries
once more only when the re-read says it did not land (`LIFECYCLE_TRIES`):
- `create_world`, `fork`, `start_run`: the new run's fresh id (or its genesis token) is stored:
  it landed, the call returns its receipt. Otherwise it did not, and it is decided afresh (a
  world someone else created meanwhile is then `WorldExists`).
- `destroy`: the world is `destroyed` (nothing else makes it so): it landed.
- `reserve_close`, `rollback_close`: the rules, applied to the re-read facts, would write
  nothing more (the reservation or the reopening is there): done.
- `complete_post_commit`: the stored mark covers the receipt's tick of its run: done.
- `acquire_writer`: an epoch is no proof (another process's acquisition may have taken the
  same number), so it is acquired once more: the newer epoch fences whatever the lost one did.
If a retry is refused by a rule, the earlier lost tries are re-read again first (a COMMIT still
in flight on the server when the first re-read ran may have landed since). Only when the
re-read fails, or the last try was lost too and is not found, `LedgerCommitUnknown` is raised.

The exact-world lock (`lock`) is this process's, as for SQLite: across processes and hosts,
single-writer safety rests on the durable writer epoch and the head compare-and-swap.
"""

from __future__ import annotations

import logging
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final, TypeVar

from tether.storage._pg import Session
from tether.storage._pg_schema import ensure
from tether.world import _rules as rules
from tether.world._errors import (
    HeadConflict,
    LedgerCommitUnknown,
    ReceiptRejected,
    WorldError,
    WorldNotFound,
)
from tether.world._locks import WorldLocks
from tether.world._rules import HeadFacts, WorldFacts
from tether.world._types import CommittedTickReceipt, ComponentWrite, WorldSnapshot, Writer

_FACTS = (
    "SELECT run_id, head_tick, head_token, writer_epoch, post_commit_tick, close_state,"
    " close_sticky FROM worlds WHERE world_id = %s"
)
_NOW_MS = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

#: Tries of a lifecycle call whose COMMIT reply was lost and whose re-read found it not landed.
LIFECYCLE_TRIES: Final = 2

log = logging.getLogger("tether.world.postgres")
T = TypeVar("T")
#: One try of a lifecycle call: run it; re-read whether it landed; what it returns if it did.
Try = tuple[Callable[[], T], Callable[[], bool], T]


def _new_token() -> str:
    return "vt_" + secrets.token_hex(16)


def _facts_of(row: tuple[Any, ...] | None) -> WorldFacts | None:
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


class PostgresLedger:
    """The PostgreSQL world ledger. Shareable across threads (one connection, serialised).

    Args:
        conninfo: a libpq URL; credentials from the environment or a password file.
        clock: record times of ticks (ms); default the server's `clock_timestamp()`.
        upgrade: apply pending schema migrations instead of refusing an older schema.
    """

    def __init__(
        self, conninfo: str, *, clock: Callable[[], int] | None = None, upgrade: bool = False
    ) -> None:
        self._clock = clock
        self._mutex = threading.Lock()
        self._world_locks = WorldLocks()
        self._session = Session(
            conninfo, WorldError, LedgerCommitUnknown, application="tether-world"
        )
        self.where = self._session.where
        try:
            with self._session.transaction("world schema") as cur:
                self.schema_found = ensure(cur, "world", self.where, upgrade=upgrade, url=conninfo)
        except BaseException:
            self._session.close()
            raise

    @classmethod
    def open(cls, conninfo: str, *, clock: Callable[[], int] | None = None) -> PostgresLedger:
        """Open the ledger at ``conninfo`` (creating its tables in a fresh database)."""
        return cls(conninfo, clock=clock)

    @property
    def backend_pid(self) -> int | None:
        """The server process of this ledger's connection (for tests that cut it)."""
        return self._session.backend_pid

    # -- transactions -------------------------------------------------------------------

    @contextmanager
    def _tx(self, what: str) -> Iterator[Any]:
        with self._mutex, self._session.transaction(what) as cur:
            yield cur

    @contextmanager
    def _view(self, what: str) -> Iterator[Any]:
        with self._mutex:
            try:
                with self._session.transaction(what, snapshot=True) as cur:
                    yield cur
            except LedgerCommitUnknown:
                # A read-only snapshot wrote nothing, and every row it read was fetched before
                # its COMMIT: a lost reply leaves no outcome to resolve (the session reconnects).
                pass

    @staticmethod
    def _locked_facts(cur: Any, world_id: str) -> WorldFacts | None:
        return _facts_of(cur.execute(_FACTS + " FOR UPDATE", (world_id,)).fetchone())

    def _live(self, cur: Any, world_id: str) -> WorldFacts:
        return rules.live_world(world_id, self._locked_facts(cur, world_id))

    def _insert_tick(self, cur: Any, world_id: str, run_id: str, tick: int, token: str) -> None:
        if self._clock is None:
            cur.execute(
                f"INSERT INTO ticks (world_id, run_id, tick, committed_ms)"
                f" VALUES (%s, %s, %s, {_NOW_MS})",
                (world_id, run_id, tick),
            )
        else:
            cur.execute(
                "INSERT INTO ticks (world_id, run_id, tick, committed_ms) VALUES (%s, %s, %s, %s)",
                (world_id, run_id, tick, self._clock()),
            )
        cur.execute(
            "INSERT INTO tick_tokens (world_id, run_id, tick, token) VALUES (%s, %s, %s, %s)",
            (world_id, run_id, tick, token),
        )
        cur.execute("INSERT INTO visibility (world_id, token) VALUES (%s, %s)", (world_id, token))

    # -- lost COMMITs of lifecycle calls ------------------------------------------------

    def _resolved(self, what: str, prepare: Callable[[], Try[T]]) -> T:
        """Run the lifecycle call that ``prepare`` sets up; if its COMMIT reply is lost,
        re-read whether it landed instead of raising (see the module docstring)."""
        lost: list[Try[T]] = []
        error: LedgerCommitUnknown | None = None
        for _ in range(LIFECYCLE_TRIES):
            attempt = prepare()
            run, _landed, _value = attempt
            try:
                return run()
            except LedgerCommitUnknown as e:
                lost.append(attempt)
                error = e
            except WorldError as e:
                # A rule refused the retry: an earlier try still in flight may have landed.
                found = self._landed(what, lost, e) if lost else None
                if found is not None:
                    return found[0]
                raise
            found = self._landed(what, lost, error)
            if found is not None:
                return found[0]
            log.warning("%s: its COMMIT reply was lost; re-read: not landed, trying again", what)
        assert error is not None
        raise LedgerCommitUnknown(
            f"{error}; {what} was lost {len(lost)} times and a re-read did not find it"
        ) from error

    def _landed(self, what: str, lost: list[Try[T]], error: Exception) -> tuple[T] | None:
        """(the outcome,) of the first lost try a re-read finds landed, else None."""
        for _run, landed, value in lost:
            try:
                if landed():
                    log.warning("%s: its COMMIT reply was lost; re-read: landed", what)
                    return (value,)
            except WorldError as e:
                raise LedgerCommitUnknown(
                    f"{error}; the re-read of the {what} failed too ({e})"
                ) from e
        return None

    def _stored_facts(self, world_id: str) -> WorldFacts | None:
        """The world's facts as stored now (None: no such row), in a fresh statement."""
        with self._mutex:
            rows = self._session.read("world read", _FACTS, (world_id,))
        return _facts_of(rows[0] if rows else None)

    def _genesis_stored(self, receipt: CommittedTickReceipt) -> bool:
        """Whether the genesis ``receipt`` (a fresh run id and token) was stored: only the
        transaction that made them could have."""
        with self._mutex:
            rows = self._session.read(
                "world read",
                "SELECT 1 FROM worlds WHERE world_id = %s AND run_id = %s"
                " UNION ALL SELECT 1 FROM tick_tokens WHERE world_id = %s AND run_id = %s"
                " AND tick = 0 AND token = %s",
                (
                    receipt.world_id,
                    receipt.run_id,
                    receipt.world_id,
                    receipt.run_id,
                    receipt.visibility_token,
                ),
            )
        return bool(rows)

    @staticmethod
    def _genesis() -> tuple[str, str]:
        return "run_" + uuid.uuid4().hex, _new_token()

    # -- worlds and runs ----------------------------------------------------------------

    def create_world(self, world_id: str) -> CommittedTickReceipt:
        """Create a world with a fresh run and an empty genesis tick 0; return its receipt."""
        rules.check_new_world(world_id, False)

        def prepare() -> Try[CommittedTickReceipt]:
            run_id, token = self._genesis()
            receipt = CommittedTickReceipt(world_id, run_id, 0, token)
            return (lambda: self._create(receipt)), (lambda: self._genesis_stored(receipt)), receipt

        return self._resolved("world creation", prepare)

    def _create(self, receipt: CommittedTickReceipt) -> CommittedTickReceipt:
        world_id, run_id, token = receipt.world_id, receipt.run_id, receipt.visibility_token
        with self._tx("world creation") as cur:
            cur.execute(
                "INSERT INTO worlds (world_id, run_id, head_tick, head_token, post_commit_tick)"
                " VALUES (%s, %s, 0, %s, 0) ON CONFLICT DO NOTHING",
                (world_id, run_id, token),
            )
            rules.check_new_world(world_id, cur.rowcount != 1)
            self._insert_tick(cur, world_id, run_id, 0, token)
        return receipt

    def worlds(self) -> list[str]:
        """Ids of every world that is not destroyed, sorted."""
        with self._mutex:
            rows = self._session.read(
                "world read",
                "SELECT world_id FROM worlds WHERE close_state != 'destroyed'"
                ' ORDER BY world_id COLLATE "C"',
            )
        return [r[0] for r in rows]

    def start_run(self, writer: Writer) -> CommittedTickReceipt:
        """Begin a new run of the world (empty genesis tick 0); receipts of the old run go stale."""

        def prepare() -> Try[CommittedTickReceipt]:
            run_id, token = self._genesis()
            receipt = CommittedTickReceipt(writer.world_id, run_id, 0, token)
            run = lambda: self._start_run(writer, receipt)  # noqa: E731
            return run, (lambda: self._genesis_stored(receipt)), receipt

        return self._resolved("new run", prepare)

    def _start_run(self, writer: Writer, receipt: CommittedTickReceipt) -> CommittedTickReceipt:
        run_id, token = receipt.run_id, receipt.visibility_token
        with self._tx("new run") as cur:
            rules.check_writer(writer, self._live(cur, writer.world_id))
            cur.execute(
                "UPDATE worlds SET run_id = %s, head_tick = 0, head_token = %s,"
                " post_commit_tick = 0 WHERE world_id = %s",
                (run_id, token, writer.world_id),
            )
            self._insert_tick(cur, writer.world_id, run_id, 0, token)
        return receipt

    def acquire_writer(self, world_id: str) -> Writer:
        """Become the world's only writer; every earlier writer is fenced."""
        # No re-read proves a lost acquisition (an epoch number is not unique to it): it is
        # acquired once more, and that newer epoch fences it whether it landed or not.
        for tries in range(1, LIFECYCLE_TRIES + 1):
            try:
                return self._acquire(world_id)
            except LedgerCommitUnknown as e:
                if tries == LIFECYCLE_TRIES:
                    raise LedgerCommitUnknown(
                        f"{e}; the writer acquisition was lost {tries} times"
                    ) from e
                log.warning("writer acquisition: its COMMIT reply was lost; acquiring again")
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _acquire(self, world_id: str) -> Writer:
        with self._tx("writer acquisition") as cur:
            writer = rules.next_writer(world_id, self._live(cur, world_id))
            cur.execute(
                "UPDATE worlds SET writer_epoch = %s WHERE world_id = %s", (writer.epoch, world_id)
            )
        return writer

    # -- ticks --------------------------------------------------------------------------

    def commit(
        self, writer: Writer, parent: CommittedTickReceipt, writes: Sequence[ComponentWrite]
    ) -> CommittedTickReceipt:
        """Commit tick `parent.tick + 1` on top of `parent`, which must still be the head."""
        encoded = rules.encode_writes(writes)
        token = _new_token()
        intended: CommittedTickReceipt | None = None
        try:
            with self._tx("tick commit") as cur:
                facts = self._live(cur, writer.world_id)
                tick = rules.commit_tick(writer, parent, facts)
                run_id, head_tick = facts.run_id, facts.head_tick
                intended = CommittedTickReceipt(writer.world_id, run_id, tick, token)
                self._write_tick(cur, writer, encoded, run_id, head_tick, tick, token)
                return intended  # once the COMMIT below (on leaving the block) has its reply
        except LedgerCommitUnknown as e:
            # The COMMIT was sent and its reply lost: name the tick it would have made, so a
            # re-read can tell whether it landed (its token is fresh, no other tick has it).
            raise LedgerCommitUnknown(str(e), intended) from e

    def _write_tick(
        self,
        cur: Any,
        writer: Writer,
        encoded: dict[tuple[str, str], str | None],
        run_id: str,
        head_tick: int,
        tick: int,
        token: str,
    ) -> None:
        self._insert_tick(cur, writer.world_id, run_id, tick, token)
        if encoded:
            cur.executemany(
                "INSERT INTO components (world_id, run_id, entity, component, tick, value)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                [(writer.world_id, run_id, e, c, tick, v) for (e, c), v in encoded.items()],
            )
        cur.execute(
            "UPDATE worlds SET head_tick = %s, head_token = %s"
            " WHERE world_id = %s AND head_tick = %s AND writer_epoch = %s",
            (tick, token, writer.world_id, head_tick, writer.epoch),
        )
        if cur.rowcount != 1:  # pragma: no cover - the world row is locked above
            raise HeadConflict(f"head of {writer.world_id!r} moved during commit")

    def _read_facts(self, world_id: str) -> WorldFacts:
        with self._mutex:
            rows = self._session.read("world read", _FACTS, (world_id,))
        return rules.live_world(world_id, _facts_of(rows[0] if rows else None))

    def head(self, world_id: str) -> CommittedTickReceipt:
        """The world's current committed head (in its current run)."""
        return rules.head_of(world_id, self._read_facts(world_id))

    def pending_post_commit(self, world_id: str) -> CommittedTickReceipt | None:
        """The head receipt if its post-commit work has not yet succeeded, else None."""
        facts = self._read_facts(world_id)
        return rules.head_of(world_id, facts) if rules.post_commit_pending(facts) else None

    def complete_post_commit(self, receipt: CommittedTickReceipt) -> None:
        """Record that the post-commit work of the head `receipt` succeeded."""

        def marked() -> bool:  # the stored mark covers the receipt's tick of its run
            facts = self._stored_facts(receipt.world_id)
            return (
                facts is not None
                and facts.run_id == receipt.run_id
                and facts.post_commit_tick >= receipt.tick
            )

        self._resolved("post-commit mark", lambda: (lambda: self._mark(receipt), marked, None))

    def _mark(self, receipt: CommittedTickReceipt) -> None:
        self.check_receipt(receipt)
        with self._tx("post-commit mark") as cur:
            mark = rules.post_commit_mark(receipt, self._live(cur, receipt.world_id))
            cur.execute(
                "UPDATE worlds SET post_commit_tick = %s WHERE world_id = %s",
                (mark, receipt.world_id),
            )

    # -- reading ------------------------------------------------------------------------

    def check_receipt(self, receipt: CommittedTickReceipt) -> None:
        """The fail-closed receipt reader used for admission and settlement."""
        token = rules.receipt_token(receipt)
        with self._view("receipt check") as cur:
            row = cur.execute(
                "SELECT run_id, head_tick, close_state FROM worlds WHERE world_id = %s",
                (receipt.world_id,),
            ).fetchone()
            tokens = frozenset(
                r[0]
                for r in cur.execute(
                    "SELECT token FROM tick_tokens WHERE world_id = %s AND run_id = %s"
                    " AND tick = %s",
                    (receipt.world_id, receipt.run_id, receipt.tick),
                ).fetchall()
            )
            visible = cur.execute(
                "SELECT 1 FROM visibility WHERE world_id = %s AND token = %s",
                (receipt.world_id, token),
            ).fetchone()
        facts = (
            None
            if row is None
            else HeadFacts(
                run_id=row[0],
                head_tick=int(row[1]),
                destroyed=row[2] == "destroyed",
                tokens_at_tick=tokens,
                visible=visible is not None,
            )
        )
        rules.judge_receipt(receipt, facts)

    def visibility_allowlist(self, world_id: str) -> frozenset[str]:
        """The world's pinned visibility tokens."""
        with self._mutex:
            rows = self._session.read(
                "world read", "SELECT token FROM visibility WHERE world_id = %s", (world_id,)
            )
        return frozenset(r[0] for r in rows)

    def read_at(self, receipt: CommittedTickReceipt) -> WorldSnapshot:
        """A read-only snapshot of the components as of exactly `receipt`'s tick."""
        token = rules.receipt_token(receipt)
        key = (receipt.world_id, receipt.run_id, receipt.tick)
        with self._view("snapshot read") as cur:
            found = cur.execute(
                "SELECT 1 FROM tick_tokens WHERE world_id = %s AND run_id = %s AND tick = %s"
                " AND token = %s",
                (*key, token),
            ).fetchone()
            if found is None:
                raise ReceiptRejected("no_such_tick", f"no committed tick matches {receipt!r}")
            rows = cur.execute(
                "SELECT DISTINCT ON (entity, component) entity, component, value"
                " FROM components WHERE world_id = %s AND run_id = %s AND tick <= %s"
                " ORDER BY entity, component, tick DESC",
                key,
            ).fetchall()
            changed = cur.execute(
                "SELECT entity, component FROM components"
                " WHERE world_id = %s AND run_id = %s AND tick = %s",
                key,
            ).fetchall()
        state = {(r[0], r[1]): r[2] for r in rows if r[2] is not None}
        return WorldSnapshot.of(receipt, state, frozenset((r[0], r[1]) for r in changed))

    # -- locking ------------------------------------------------------------------------

    def lock(self, world_id: str) -> AbstractContextManager[None]:
        """The exact-world lock of this process (re-entrant for its holder)."""
        return self._world_locks.lock(world_id)

    def holds_lock(self, world_id: str | None = None) -> bool:
        """Whether the calling thread holds the lock of `world_id` (or of any world)."""
        return self._world_locks.holds(world_id)

    # -- lifecycle ----------------------------------------------------------------------

    def fork(self, source: CommittedTickReceipt, new_world_id: str) -> CommittedTickReceipt:
        """Create `new_world_id` whose genesis holds `source`'s state (no control records)."""
        rules.check_new_world(new_world_id, False)

        def prepare() -> Try[CommittedTickReceipt]:
            run_id, token = self._genesis()
            receipt = CommittedTickReceipt(new_world_id, run_id, 0, token)
            run = lambda: self._fork(source, receipt)  # noqa: E731
            return run, (lambda: self._genesis_stored(receipt)), receipt

        return self._resolved("fork", prepare)

    def _fork(
        self, source: CommittedTickReceipt, receipt: CommittedTickReceipt
    ) -> CommittedTickReceipt:
        new_world_id, run_id, token = receipt.world_id, receipt.run_id, receipt.visibility_token
        self.check_receipt(source)
        snapshot = self.read_at(source)
        with self._tx("fork") as cur:
            rules.check_settled_head(source, self._live(cur, source.world_id))
            cur.execute(
                "INSERT INTO worlds (world_id, run_id, head_tick, head_token, post_commit_tick,"
                " forked_from, forked_at_tick) VALUES (%s, %s, 0, %s, 0, %s, %s)"
                " ON CONFLICT DO NOTHING",
                (new_world_id, run_id, token, source.world_id, source.tick),
            )
            rules.check_new_world(new_world_id, cur.rowcount != 1)
            self._insert_tick(cur, new_world_id, run_id, 0, token)
            rows = [
                (new_world_id, run_id, e, c, snapshot._encoded[(e, c)])
                for (e, c) in snapshot.keys()
            ]
            if rows:
                cur.executemany(
                    "INSERT INTO components (world_id, run_id, entity, component, tick, value)"
                    " VALUES (%s, %s, %s, %s, 0, %s)",
                    rows,
                )
        return receipt

    def reserve_close(self, world_id: str, *, sticky: bool) -> None:
        """Reserve the world for close; a sticky reservation survives `rollback_close`."""

        def reserved() -> bool:  # the rule would change nothing more: the reservation is there
            facts = self._stored_facts(world_id)
            return facts is not None and rules.reserve_close(facts, sticky=sticky) == (
                facts.close_state,
                facts.close_sticky,
            )

        def run() -> None:
            with self._tx("close reservation") as cur:
                state, keep = rules.reserve_close(self._live(cur, world_id), sticky=sticky)
                cur.execute(
                    "UPDATE worlds SET close_state = %s, close_sticky = %s WHERE world_id = %s",
                    (state, keep, world_id),
                )

        self._resolved("close reservation", lambda: (run, reserved, None))

    def rollback_close(self, world_id: str) -> None:
        """Undo a provisional (non-sticky) close reservation; sticky ones stay."""

        def rolled_back() -> bool:  # the rule would change nothing more
            facts = self._stored_facts(world_id)
            return facts is not None and rules.rollback_close(facts) == facts.close_state

        def run() -> None:
            with self._tx("close rollback") as cur:
                state = rules.rollback_close(self._live(cur, world_id))
                cur.execute(
                    "UPDATE worlds SET close_state = %s WHERE world_id = %s", (state, world_id)
                )

        self._resolved("close rollback", lambda: (run, rolled_back, None))

    def close_state(self, world_id: str) -> tuple[str, bool]:
        """(state, sticky) where state is `open`, `closing` or `destroyed`."""
        with self._mutex:
            rows = self._session.read("world read", _FACTS, (world_id,))
        facts = _facts_of(rows[0] if rows else None)
        if facts is None:
            raise WorldNotFound(f"world {world_id!r} does not exist")
        return facts.close_state, facts.close_sticky

    def destroy(self, world_id: str, head: CommittedTickReceipt | None = None) -> None:
        """Delete a world reserved for close; its receipts then fail closed (`world_closed`)."""

        def destroyed() -> bool:  # only a destroy makes a world `destroyed`, and for good
            facts = self._stored_facts(world_id)
            return facts is not None and facts.close_state == "destroyed"

        self._resolved("destroy", lambda: (lambda: self._destroy(world_id, head), destroyed, None))

    def _destroy(self, world_id: str, head: CommittedTickReceipt | None) -> None:
        with self._tx("destroy") as cur:
            facts = self._live(cur, world_id)
            rules.check_destroyable(world_id, facts)
            if head is not None:
                rules.check_settled_head(head, facts)
            for table in ("ticks", "tick_tokens", "visibility", "components"):
                cur.execute(f"DELETE FROM {table} WHERE world_id = %s", (world_id,))
            cur.execute(
                "UPDATE worlds SET close_state = 'destroyed' WHERE world_id = %s", (world_id,)
            )

    def close(self) -> None:
        """Close the connection."""
        with self._mutex:
            self._session.close()
