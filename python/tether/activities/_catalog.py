"""`Catalog`: the Activity catalog's Python API over a storage port and the Rust fencing core.

Every method reads the clock once, runs one storage transaction in which the Rust core decides
the transition, and returns the typed record. Rejections are `tether.errors.CatalogRejection`
subclasses; storage failures are `CatalogStorageError`.

Leases (1 ms to 7 days, `MAX_LEASE_MS`) and reconciliation backoff (0 to 7 days,
`MAX_RETRY_AFTER_MS`) run on the clock's lease clock, which wall-clock steps never move; a
lease of another boot has expired (see `tether.activities._clock`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

from tether import _core
from tether._core import UnknownActivity
from tether.activities._clock import CatalogClock, ClockLike, Now, as_clock
from tether.activities._record import Row, record_from_row
from tether.activities._types import (
    ActivityKey,
    ActivityRecord,
    Admission,
    Claim,
    Decision,
    Evidence,
    Receipt,
    ResultRef,
    RetryGuard,
    WorkStep,
)
from tether.errors import CatalogRejection
from tether.storage import CatalogStore, CommitUnknown, KeyTuple, View, WakeBell, open_store
from tether.storage._port import ClockBootChanged, ClockInTransaction, NotTaken, ServerClocked

PAGE_SIZE = 256
_T = TypeVar("_T")


def operation_id_for(key: ActivityKey) -> str:
    """The stable provider operation id of an activity: SHA-256 of canonical JSON of
    (kind, world_id, activity_id) under a Tether namespace, prefixed ``tether-op-v1:``."""
    return _core.operation_id_for(key.kind, key.world_id, key.activity_id)


def settlement_evidence_digest(key: ActivityKey, result: ResultRef) -> str:
    """The completion evidence digest `Catalog.settle` expects: it binds the activity's kind,
    world and id to the exact recorded result reference and digest."""
    return _core.settlement_evidence_digest(
        key.kind, key.world_id, key.activity_id, result.ref, result.digest
    )


def _as_record(row: Row | Exception) -> ActivityRecord:
    if isinstance(row, Exception):
        raise row  # not the core's rejection: a storage or programming error
    return record_from_row(row)


# A step is the core's transition of one row at one clock reading.
Step = Callable[[Row, Now], Row]
RowStep = Callable[[Row | None, Now], Row]


def _admit_step(adm: Admission) -> RowStep:
    return lambda old, now: _core.catalog_admit(old, adm, now)


def _bind_step(fence: int, op: str) -> Step:
    return lambda row, now: _core.catalog_bind_provider_operation(row, fence, op, now)


def _result_step(fence: int, result: ResultRef) -> Step:
    return lambda row, now: _core.catalog_record_result(row, fence, result, now)


def _settle_step(receipt: Receipt, digest: str) -> Step:
    return lambda row, now: _core.catalog_settle(row, receipt, digest, None, now)


def _recording(key: ActivityKey, fence: int, result: ResultRef) -> RowStep:
    """`_known(key, _result_step(fence, result))` in one frame (a work step's hot path)."""

    def run(row: Row | None, now: Now) -> Row:
        if row is None:
            raise UnknownActivity(
                f"unknown_activity: no activity {key.world_id}/{key.kind}/{key.activity_id}"
            )
        return _core.catalog_record_result(row, fence, result, now)

    return run


def _settling(key: ActivityKey, receipt: Receipt, digest: str) -> RowStep:
    """`_known(key, _settle_step(receipt, digest))` in one frame (a work step's hot path)."""

    def run(row: Row | None, now: Now) -> Row:
        if row is None:
            raise UnknownActivity(
                f"unknown_activity: no activity {key.world_id}/{key.kind}/{key.activity_id}"
            )
        return _core.catalog_settle(row, receipt, digest, None, now)

    return run


def _at(step: RowStep, now: Now) -> Callable[[Row | None], Row]:
    return lambda row: step(row, now)


def _known(key: ActivityKey, step: Step) -> RowStep:
    """``step`` on an existing row; no row is `UnknownActivity`."""

    def run(row: Row | None, now: Now) -> Row:
        if row is None:
            raise UnknownActivity(
                f"unknown_activity: no activity {key.world_id}/{key.kind}/{key.activity_id}"
            )
        return step(row, now)

    return run


def _claim_of(record: ActivityRecord) -> Claim:
    assert record.attempt is not None  # a claim always issues an attempt
    return Claim(record, record.attempt)


#: The largest count a store's statement takes (SQLite's and PostgreSQL's 64-bit integers): a
#: larger limit or page asks for no more rows than this one does.
_MAX_COUNT = (1 << 63) - 1
#: The earliest compaction cutoff (`Catalog._cutoff`): before any wall-clock settlement.
_EARLIEST_CUTOFF_MS = -(1 << 62)


def _count(name: str, value: object, low: int, error: type[Exception] = TypeError) -> int:
    """A count argument (a limit, a page size): an int (not a bool) >= ``low``, as at most
    `_MAX_COUNT` (a larger one takes the same rows; a store would refuse its SQL integer)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise error(f"{name} must be an int >= {low}, got {value!r}")
    return min(value, _MAX_COUNT)


def _key(key: ActivityKey) -> KeyTuple:
    if not isinstance(key, ActivityKey):
        raise TypeError(f"expected an ActivityKey, not {type(key).__name__}")
    return (key.world_id, key.kind, key.activity_id)


def _kinds(kinds: Sequence[str] | None) -> Sequence[str] | None:
    if kinds is None:
        return None
    if isinstance(kinds, str):
        raise TypeError("kinds must be a sequence of kinds, not one string")
    return list(kinds)


def _taking(
    claim: Callable[[Row, Any], Row], take: Callable[[ActivityRecord], bool] | None
) -> Callable[[Row, Any], Row]:
    """`claim`, each claimed row offered to ``take`` first (see `claim_many`)."""
    if take is None:
        return claim

    def step(old: Row, now: Any) -> Row:
        new = claim(old, now)
        if not take(record_from_row(new)):
            raise NotTaken(old[2])
        return new

    return step


class Catalog:
    """The durable Activity catalog.

    One instance may be shared by threads; processes on one host share the database file. Time
    comes from ``clock`` (default `SystemClock`): leases and backoff on its lease clock
    (CLOCK_BOOTTIME with the boot id, so every process on the host compares the same clock and
    no wall-clock step moves a lease), record times on its wall clock. A plain callable of
    integer milliseconds is taken as a `FixedBootClock` (both clocks, one fixed boot): tests.
    """

    def __init__(self, store: CatalogStore, *, clock: ClockLike | None = None) -> None:
        self._store = store
        self._clock: CatalogClock = as_clock(clock)
        # The boot whose lease clock the store's claimable index is known to be on.
        self._aligned_boot: str | None = None
        # A store that reads this very clock inside its transactions (PostgreSQL on its
        # server clock): one reading per transaction, under its row locks, no round trip.
        self._in_txn: ClockInTransaction | None = (
            store
            if isinstance(store, ClockInTransaction) and store.reads_clock(self._clock)
            else None
        )

    @classmethod
    def open(
        cls, url: str, *, clock: ClockLike | None = None, synchronous: str = "FULL"
    ) -> Catalog:
        """Open the catalog at ``url`` (``sqlite:///abs/path.db`` or ``postgresql://host/db``);
        ``synchronous`` (SQLite only) is ``"FULL"`` (default: every commit is durable) or
        ``"NORMAL"`` (WAL commits may roll back on power loss, never corrupt). Without
        ``clock``, a PostgreSQL catalog measures leases on its server (`PostgresClock`), a
        SQLite one on this host (`SystemClock`)."""
        resolved = None if clock is None else as_clock(clock)  # a bad clock fails first
        store = open_store(url, synchronous=synchronous)
        if resolved is None and isinstance(store, ServerClocked):
            try:
                resolved = store.server_clock()  # PostgreSQL: leases on the server's clock
            except BaseException:
                store.close()
                raise
        return cls(store, clock=resolved)

    @property
    def store(self) -> CatalogStore:
        return self._store

    @property
    def clock(self) -> CatalogClock:
        return self._clock

    @property
    def doorbell(self) -> WakeBell:
        """What the store rings after each commit that changes what a loop waits for: wait on
        it instead of polling (see `tether.runtime.Wakeup`). The data directory's `Doorbell`
        for a SQLite catalog, LISTEN/NOTIFY (`PostgresDoorbell`) for a PostgreSQL one."""
        return self._store.doorbell()

    def now(self) -> Now:
        """One reading of the catalog's clock."""
        return self._clock.now()

    def _claim_now(self) -> Now:
        """A reading for a claim or a claimable scan, after the store's lease-clock values are
        on its boot: the first time a boot is seen, the core rebases every record holding
        lease-clock values of another boot (their leases expired with that boot)."""
        now = self._clock.now()
        if now.boot_id != self._aligned_boot:
            self._align(now)
        return now

    def _apply(self, key: ActivityKey, step: RowStep) -> Row:
        """One transaction: the core's ``step`` on the stored row at one clock reading (read
        in the transaction where the store reads this clock, else just before it)."""
        k = _key(key)
        if self._in_txn is not None:
            return self._in_txn.apply_at(k, step)
        return self._store.apply(k, _at(step, self._clock.now()))

    def _apply_many(self, items: Sequence[tuple[ActivityKey, RowStep]]) -> list[Row | Exception]:
        keyed = [(_key(k), step) for k, step in items]
        if self._in_txn is not None:
            return self._in_txn.apply_many_at(keyed)
        now = self._clock.now()
        return self._store.apply_many([(k, _at(step, now)) for k, step in keyed])

    def _change(self, key: ActivityKey, step: Step) -> ActivityRecord:
        return record_from_row(self._apply(key, _known(key, step)))

    def admit(self, admission: Admission) -> ActivityRecord:
        """Admit an activity. The identical admission, or the same input from a later tick of
        the source run (the same Activity asked for again), returns the stored record unchanged,
        its source binding kept; any other difference is `AdmissionConflict`. A lost COMMIT
        is `CommitUnknown`; on a PostgreSQL server clock it names no row (the reading the new
        record was stamped with is unknown): admit again, which returns the record if it
        landed."""
        if not isinstance(admission, Admission):
            raise TypeError(f"expected an Admission, not {type(admission).__name__}")
        if self._in_txn is not None:  # one round trip, stamped on the server's reading
            return _as_record(self._admit_at([admission])[0])
        return record_from_row(self._apply(admission.key, _admit_step(admission)))

    def _admit_at(self, admissions: Sequence[Admission]) -> list[Row | Exception]:
        """Admissions through the store's stamped insert (`ClockInTransaction.admit_at`): the
        core's template of each new record, its stamps taken from the inserting statement's
        reading; a template the core refuses keeps its rejection in its place."""
        assert self._in_txn is not None
        out: list[Row | Exception | None] = []
        items: list[tuple[KeyTuple, Row, RowStep]] = []
        for adm in admissions:
            try:
                template = _core.catalog_admission_template(adm)
            except CatalogRejection as e:
                out.append(e)
                continue
            out.append(None)
            items.append((_key(adm.key), template, _admit_step(adm)))
        done = iter(self._in_txn.admit_at(items))
        return [next(done) if r is None else r for r in out]

    def admit_refused(self, admission: Admission, refusal: ResultRef) -> ActivityRecord:
        """Admit an activity its family refused before any work: its request can never run.

        ``refusal`` references the durable refusal document (put in the artifact store
        first) and must be a failed result (`InvalidRefusal` otherwise). A new record already
        holds it as its result: no attempt, no fence, no provider operation, never claimable,
        pending observation, so the family observes and settles it through a later tick like
        any other failed result. Under an existing key the rules are `admit`'s (a different
        input is `AdmissionConflict`) and the stored record comes back unchanged, whatever it
        holds: the first admission decides, so a replay never rewrites a record.
        """
        if not isinstance(admission, Admission):
            raise TypeError(f"expected an Admission, not {type(admission).__name__}")
        if not isinstance(refusal, ResultRef):
            raise TypeError(f"expected a ResultRef, not {type(refusal).__name__}")
        row = self._apply(
            admission.key,
            lambda old, now: _core.catalog_admit_refused(old, admission, refusal, now),
        )
        return record_from_row(row)

    def claim(
        self,
        owner: str,
        lease_ms: int,
        *,
        kinds: Sequence[str] | None = None,
        world_id: str | None = None,
        host: str | None = None,
    ) -> Claim | None:
        """Claim the claimable activity that became claimable first, or return None.

        The attempt holds a lease of ``lease_ms`` (1 ms to 7 days, `MAX_LEASE_MS`) on the lease
        clock; renew it with `renew` (a worker's heartbeat) before it runs out. ``host`` is the
        claiming worker's host: an activity bound to a host (`Admission.bound_host`, its
        device's host) is claimed only there, unbound ones anywhere; a claim naming no host
        takes only unbound work.
        """
        if not isinstance(owner, str) or not isinstance(lease_ms, int):
            raise TypeError("claim(owner: str, lease_ms: int)")
        if host is not None and not isinstance(host, str):
            raise TypeError("claim(host=) must be a str or None")
        if self._in_txn is not None:
            rows = self._claim_at(owner, lease_ms, 1, kinds, world_id, host, single=True)
            return _claim_of(record_from_row(rows[0])) if rows else None
        now = self._claim_now()
        _core.catalog_check_claim(owner, lease_ms, now, host)
        row = self._store.claim(
            now.boot_ms,
            lambda old: _core.catalog_claim(old, owner, lease_ms, now, host),
            _kinds(kinds),
            world_id,
            host=host,
        )
        if row is None:
            return None
        return _claim_of(record_from_row(row))

    def _claim_at(
        self,
        owner: str,
        lease_ms: int,
        limit: int,
        kinds: Sequence[str] | None,
        world_id: str | None,
        host: str | None,
        *,
        single: bool,
        step: Callable[[Row, Now], Row] | None = None,
    ) -> list[Row]:
        """A claim on the reading of its own transaction (`ClockInTransaction`). A reading on
        a boot the store is not aligned to writes nothing: align to it, then claim again.
        ``step``: the row's transition (the core's claim if None)."""
        in_txn = self._in_txn
        assert in_txn is not None
        kinds = _kinds(kinds)
        if step is None:

            def step(old: Row, now: Now) -> Row:
                return _core.catalog_claim(old, owner, lease_ms, now, host)

        claim = step
        return self._aligned(
            lambda boot: in_txn.claim_at(
                claim,
                lambda now: _core.catalog_check_claim(owner, lease_ms, now, host),
                kinds,
                world_id,
                limit,
                host=host,
                boot_id=boot,
                single=single,
            )
        )

    def _aligned(self, call: Callable[[str | None], _T]) -> _T:
        """``call`` with the boot the store is aligned to; a reading on another boot
        (`ClockBootChanged`: nothing written) aligns the store to it and calls again."""
        for _ in range(3):
            try:
                return call(self._aligned_boot)
            except ClockBootChanged as e:
                self._align(e.now)
        raise _core.CatalogStorageError("the catalog clock changed boot during every claim")

    def _align(self, now: Now) -> None:
        self._store.align_clock(now.boot_id, lambda row: _core.catalog_rebase(row, now))
        self._aligned_boot = now.boot_id

    def claim_key(
        self, key: ActivityKey, owner: str, lease_ms: int, *, host: str | None = None
    ) -> Claim:
        """Claim exactly the activity ``key`` (tools, tests, an operator's reconcile-now).

        Same rules and lease bounds as `claim`, but a key that cannot be claimed now raises
        the core's rejection instead of returning None: `NotClaimable` (live lease, or a result
        is recorded), `AwaitingDecision` (inside its reconciliation backoff), `WrongHost` (its
        device is bound to another host than ``host``) or `UnknownActivity`.
        """
        if not isinstance(owner, str) or not isinstance(lease_ms, int):
            raise TypeError("claim_key(key: ActivityKey, owner: str, lease_ms: int)")
        if self._in_txn is not None:

            def claim_at(row: Row | None, now: Now) -> Row:
                if now.boot_id != self._aligned_boot:
                    raise ClockBootChanged(now)
                _core.catalog_check_claim(owner, lease_ms, now, host)
                return _known(key, claim)(row, now)

            def claim(row: Row, now: Now) -> Row:
                return _core.catalog_claim(row, owner, lease_ms, now, host)

            return _claim_of(record_from_row(self._aligned(lambda _: self._apply(key, claim_at))))
        now = self._claim_now()
        _core.catalog_check_claim(owner, lease_ms, now, host)
        return _claim_of(
            self._change(
                key, lambda row, _now: _core.catalog_claim(row, owner, lease_ms, now, host)
            )
        )

    # -- batches: one transaction for many Activities, each decided by the core

    def _change_many(
        self, items: Sequence[tuple[ActivityKey, Step]]
    ) -> list[ActivityRecord | CatalogRejection]:
        out = self._apply_many([(k, _known(k, step)) for k, step in items])
        return [r if isinstance(r, CatalogRejection) else _as_record(r) for r in out]

    def admit_many(
        self, admissions: Sequence[Admission]
    ) -> list[ActivityRecord | CatalogRejection]:
        """`admit` each admission, in one transaction (one sync). Each is decided by the core
        on its own; a refused one (its rejection in its place) leaves the others admitted. A
        lost COMMIT is `CommitUnknown` naming no key: re-read each (`get`) before acting on
        any."""
        for adm in admissions:
            if not isinstance(adm, Admission):
                raise TypeError(f"expected an Admission, not {type(adm).__name__}")
        if self._in_txn is not None:  # one round trip, stamped on the server's reading
            out = self._admit_at(admissions)
        else:
            out = self._apply_many([(adm.key, _admit_step(adm)) for adm in admissions])
        return [r if isinstance(r, CatalogRejection) else _as_record(r) for r in out]

    def claim_many(
        self,
        owner: str,
        lease_ms: int,
        limit: int,
        *,
        kinds: Sequence[str] | None = None,
        world_id: str | None = None,
        host: str | None = None,
        take: Callable[[ActivityRecord], bool] | None = None,
    ) -> list[Claim]:
        """Up to ``limit`` claims as `claim` would make them one by one (each row decided by
        the core: its own fence and lease), in one transaction.

        ``take``: the caller's choice (never a rule) of the rows it wants: it sees each row
        as the core would claim it, and a row it refuses is left unclaimed (skipped)."""
        limit = _count("claim_many(limit=)", limit, 1)
        step = _taking(lambda old, now: _core.catalog_claim(old, owner, lease_ms, now, host), take)
        return self._claim_rows(owner, lease_ms, limit, kinds, world_id, host, step)

    def claim_and_bind_many(
        self,
        owner: str,
        lease_ms: int,
        limit: int,
        *,
        kinds: Sequence[str] | None = None,
        world_id: str | None = None,
        host: str | None = None,
    ) -> list[Claim]:
        """`claim_many`, each claimed Activity also bound to `operation_id_for(key)` in the
        same transaction (`bind_provider_operation` on the attempt just issued): the core
        decides the claim and then the bind of each row, so the bind still lands before any
        effect, and a worker saves the bind's own transaction. For work whose provider
        operation id is the deterministic one (every Tether provider's). A reconcile-only
        attempt comes back claimed and unbound (`attempt.may_execute` false): reconcile it."""
        if not isinstance(owner, str) or not isinstance(lease_ms, int):
            raise TypeError("claim_and_bind_many(owner: str, lease_ms: int, limit: int)")
        limit = _count("claim_and_bind_many(limit=)", limit, 1)
        if host is not None and not isinstance(host, str):
            raise TypeError("claim_and_bind_many(host=) must be a str or None")

        def step(old: Row, now: Now) -> Row:
            return _core.catalog_claim_and_bind(old, owner, lease_ms, now, host)

        return self._claim_rows(owner, lease_ms, limit, kinds, world_id, host, step)

    def _claim_rows(
        self,
        owner: str,
        lease_ms: int,
        limit: int,
        kinds: Sequence[str] | None,
        world_id: str | None,
        host: str | None,
        step: Callable[[Row, Now], Row],
    ) -> list[Claim]:
        """Up to ``limit`` rows claimed by ``step`` (the core's transitions of one row) in one
        transaction: on the reading of the store's own transaction where it has one, else on
        one reading checked by the core first."""
        if self._in_txn is not None:
            rows = self._claim_at(
                owner, lease_ms, limit, kinds, world_id, host, single=False, step=step
            )
        else:
            now = self._claim_now()
            _core.catalog_check_claim(owner, lease_ms, now, host)
            rows = self._store.claim_many(
                now.boot_ms, lambda old: step(old, now), _kinds(kinds), world_id, limit, host=host
            )
        return [_claim_of(record_from_row(r)) for r in rows]

    def bind_many(
        self, items: Sequence[tuple[ActivityKey, int]]
    ) -> list[ActivityRecord | CatalogRejection]:
        """`bind_provider_operation` of each (key, fence) to `operation_id_for(key)`, in one
        transaction; a refused item keeps its rejection in its place (it must
        not execute)."""
        return self._change_many([(k, _bind_step(f, operation_id_for(k))) for k, f in items])

    def record_results(
        self, items: Sequence[tuple[ActivityKey, int, ResultRef]]
    ) -> list[ActivityRecord | CatalogRejection]:
        """`record_result` of each (key, fence, result), in one transaction."""
        return self._change_many([(k, _result_step(f, r)) for k, f, r in items])

    def settle_many(
        self, items: Sequence[tuple[ActivityKey, Receipt, str]]
    ) -> list[ActivityRecord | CatalogRejection]:
        """`settle` each (key, receipt, evidence digest), in one transaction."""
        return self._change_many([(k, _settle_step(rc, e)) for k, rc, e in items])

    def work_step(
        self,
        owner: str,
        lease_ms: int,
        limit: int,
        *,
        results: Sequence[tuple[ActivityKey, int, ResultRef]] = (),
        settlements: Sequence[tuple[ActivityKey, Receipt, str]] = (),
        kinds: Sequence[str] | None = None,
        world_id: str | None = None,
        host: str | None = None,
    ) -> WorkStep:
        """One worker step in one transaction: `settle_many` of ``settlements``, then
        `record_results` of ``results``, then `claim_and_bind_many` of up to ``limit`` (0:
        none) of ``owner``'s next attempts. A worker hands in what its last attempts
        concluded and takes its next ones in one commit.

        Each item and each claim is decided by the core exactly as its own call decides it,
        on one clock reading (the transaction's own, where the store reads the clock): a
        refused item keeps its rejection in its place and changes nothing, the others go
        through. An Activity that is also an item is not claimed in this step. Every step of
        one Activity stays its own commit: a result recorded here was bound by an earlier
        one, a settlement here settles a result an earlier one recorded. A lost COMMIT is
        `CommitUnknown` naming no key: re-read each item before acting, and run nothing
        claimed by it (an unanswered claim is reconciled by the next one)."""
        if not isinstance(owner, str) or not isinstance(lease_ms, int):
            raise TypeError("work_step(owner: str, lease_ms: int, limit: int)")
        limit = _count("work_step(limit=)", limit, 0)
        if host is not None and not isinstance(host, str):
            raise TypeError("work_step(host=) must be a str or None")
        items: list[tuple[KeyTuple, RowStep]] = [
            (_key(k), _settling(k, rc, e)) for k, rc, e in settlements
        ]
        items += [(_key(k), _recording(k, f, r)) for k, f, r in results]
        kinds = _kinds(kinds)

        def claim(old: Row, now: Now) -> Row:
            return _core.catalog_claim_and_bind(old, owner, lease_ms, now, host)

        in_txn = self._in_txn
        if not items and not limit:
            _core.catalog_check_claim(owner, lease_ms, self._clock.now(), host)
            return WorkStep((), 0, ())
        if in_txn is not None:
            out, rows = self._aligned(
                lambda boot: in_txn.apply_and_claim_at(
                    items,
                    claim,
                    lambda now: _core.catalog_check_claim(owner, lease_ms, now, host),
                    kinds,
                    world_id,
                    limit,
                    host=host,
                    boot_id=boot,
                )
            )
        else:
            now = self._claim_now()
            _core.catalog_check_claim(owner, lease_ms, now, host)
            out, rows = self._store.apply_and_claim(
                [(k, _at(step, now)) for k, step in items],
                now.boot_ms,
                lambda old: claim(old, now),
                kinds,
                world_id,
                limit,
                host=host,
            )
        for r in out:
            if isinstance(r, Exception) and not isinstance(r, CatalogRejection):
                raise r  # not the core's rejection: a storage or programming error
        claims = tuple(_claim_of(record_from_row(r)) for r in rows)
        return WorkStep(cast("list[Row | CatalogRejection]", out), len(settlements), claims)

    def renew(self, key: ActivityKey, fence: int, lease_ms: int) -> ActivityRecord:
        """Extend the live attempt's lease to now + ``lease_ms`` on the lease clock (at most 7
        days, `MAX_LEASE_MS`; an expired lease cannot be renewed: `LeaseExpired`)."""
        return self._change(key, lambda row, now: _core.catalog_renew(row, fence, lease_ms, now))

    def release(self, key: ActivityKey, fence: int) -> ActivityRecord:
        """Give back an execute attempt that bound nothing; it is claimable again at once."""
        return self._change(key, lambda row, now: _core.catalog_release(row, fence, now))

    def bind_provider_operation(
        self, key: ActivityKey, fence: int, operation_id: str
    ) -> ActivityRecord:
        """Durably bind the provider operation before any external effect. ``operation_id``
        must be `operation_id_for(key)` (anything else is `OperationConflict`). Only an execute
        attempt binds: a successful bind is the signal that the adapter may execute, so a
        reconcile-only attempt is refused (`ReconcileOnly`) even with the id already bound; an
        execute attempt rebinding its own id is a no-op."""
        return self._change(
            key,
            lambda row, now: _core.catalog_bind_provider_operation(row, fence, operation_id, now),
        )

    def record_result(self, key: ActivityKey, fence: int, result: ResultRef) -> ActivityRecord:
        """Record the durable result under the live fence (an execute attempt must have bound
        first). The attempt ends; the record is never claimable again. An exact repeat under
        the same fence is a no-op, any other result a `ResultConflict`."""
        return self._change(
            key, lambda row, now: _core.catalog_record_result(row, fence, result, now)
        )

    def confirm_absent(self, key: ActivityKey, fence: int, guard: RetryGuard) -> ActivityRecord:
        """A reconcile attempt proved the operation absent and the guard proves no stale
        claimant can start it: the attempt ends and the next claim may execute, once."""
        return self._change(
            key, lambda row, now: _core.catalog_confirm_absent(row, fence, guard, now)
        )

    def record_unknown(
        self, key: ActivityKey, fence: int, evidence: Evidence, retry_after_ms: int
    ) -> ActivityRecord:
        """A reconcile attempt could not tell: the evidence revision rises, the activity awaits
        an operator decision (`iter_awaiting_decision`) and is claimable again, to reconcile
        only, after ``retry_after_ms`` (0 to 7 days, `MAX_RETRY_AFTER_MS`) on the lease clock."""
        return self._change(
            key,
            lambda row, now: _core.catalog_record_unknown(
                row, fence, evidence, retry_after_ms, now
            ),
        )

    def refresh_evidence(
        self, key: ActivityKey, seen_revision: int, evidence: Evidence
    ) -> ActivityRecord:
        """The device changed since the evidence of revision ``seen_revision`` (the adapter's
        comparison): record ``evidence`` as the next revision, still awaiting a decision, so a
        decision naming the old revision is refused. Refused (`NotAwaitingDecision`,
        `StaleEvidenceRevision`) unless a decision is awaited on exactly that revision."""
        return self._change(
            key, lambda row, now: _core.catalog_refresh_evidence(row, seen_revision, evidence, now)
        )

    def resolve(self, key: ActivityKey, decision: Decision) -> ActivityRecord:
        """Apply an operator decision (see `Decision`) to an activity awaiting one.

        The decision raises the fence (every older attempt is stale) and is recorded with the
        operator, the note, the evidence revision it names and, as its time, this catalog's
        clock at the call: the operator does not supply a time.
        """
        if not isinstance(decision, Decision):
            raise TypeError(f"expected a Decision, not {type(decision).__name__}")
        d = decision
        return self._change(
            key,
            lambda row, now: _core.catalog_resolve(
                row, d.outcome, d.evidence_revision, d.operator, d.note, d.result, d.guard, now
            ),
        )

    def settle(
        self,
        key: ActivityKey,
        receipt: Receipt,
        evidence_digest: str,
        *,
        fence: int | None = None,
    ) -> ActivityRecord:
        """Settle against the later receipt that committed the observation. ``evidence_digest``
        must be `settlement_evidence_digest(key, result)`; with ``fence``, the caller must also
        still hold the current fence."""
        return self._change(
            key, lambda row, now: _core.catalog_settle(row, receipt, evidence_digest, fence, now)
        )

    def committed(self, error: CommitUnknown) -> ActivityRecord | None:
        """Re-read the record a `CommitUnknown` transaction wrote: the record if that commit
        landed (the stored row is exactly the row it wrote), None if it did not (the stored
        row is anything else, or there is none). Nothing may act on a lost commit before this.

        Raises:
            CommitUnknown: the error names no row (the claim found none before it broke).
            CatalogStorageError: the re-read itself failed; the outcome is still unknown.
        """
        if error.key is None or error.intended is None:
            raise error
        row = self._store.get(error.key)
        if row is None or tuple(row) != tuple(error.intended):
            return None
        return record_from_row(_core.catalog_check_row(row))

    def claimable_in_ms(
        self,
        *,
        kinds: Sequence[str] | None = None,
        world_id: str | None = None,
        host: str | None = None,
    ) -> int | None:
        """Milliseconds on the lease clock until the earliest activity (of ``kinds``, of
        ``world_id``, that a claim on ``host`` may take) becomes claimable: 0 if one is
        claimable now, None if none will be without another change (which rings `doorbell`).
        Lease expiry and reconciliation backoff are both this time, computed by the core."""
        now = self._claim_now()
        at = self._store.next_claimable(_kinds(kinds), world_id, host=host)
        return None if at is None else max(0, at - now.boot_ms)

    def get(self, key: ActivityKey) -> ActivityRecord | None:
        row = self._store.get(_key(key))
        return None if row is None else record_from_row(_core.catalog_check_row(row))

    def _iter(
        self,
        view: View,
        kinds: Sequence[str] | None,
        world_id: str | None,
        page_size: int,
    ) -> Iterator[ActivityRecord]:
        page_size = _count("page_size", page_size, 1, ValueError)
        kinds = _kinds(kinds)
        now = self._claim_now() if view == "claimable" else self._clock.now()
        after: tuple[Any, ...] | None = None
        while True:
            rows = self._store.page(view, now.boot_ms, kinds, world_id, after, page_size)
            for row in rows:
                yield record_from_row(_core.catalog_check_row(row))
            if len(rows) < page_size:
                return
            after = self._store.cursor(view, rows[-1])

    def iter_claimable(
        self,
        *,
        kinds: Sequence[str] | None = None,
        world_id: str | None = None,
        page_size: int = PAGE_SIZE,
    ) -> Iterator[ActivityRecord]:
        """Every activity claimable now, earliest first, paged to exhaustion."""
        return self._iter("claimable", kinds, world_id, page_size)

    def iter_pending_observation(
        self,
        *,
        world_id: str | None = None,
        kinds: Sequence[str] | None = None,
        page_size: int = PAGE_SIZE,
    ) -> Iterator[ActivityRecord]:
        """Every recorded, unsettled result (restage these after restart), paged to exhaustion."""
        return self._iter("pending_observation", kinds, world_id, page_size)

    def iter_awaiting_decision(
        self,
        *,
        world_id: str | None = None,
        kinds: Sequence[str] | None = None,
        page_size: int = PAGE_SIZE,
    ) -> Iterator[ActivityRecord]:
        """Every activity whose reconciliation came back unknown and awaits an operator."""
        return self._iter("awaiting_decision", kinds, world_id, page_size)

    def _cutoff(self, older_than_ms: int) -> tuple[Now, int]:
        if not isinstance(older_than_ms, int) or isinstance(older_than_ms, bool):
            raise TypeError("older_than_ms must be an int")
        if older_than_ms < 0:
            raise ValueError("older_than_ms must be >= 0")
        now = self._clock.now()
        # An age beyond every wall-clock time compacts nothing, as the earliest cutoff does
        # (one that still fits the stores' 64-bit integers).
        return now, max(now.wall_ms - older_than_ms, _EARLIEST_CUTOFF_MS)

    def iter_compactable(
        self, older_than_ms: int, *, page_size: int = PAGE_SIZE
    ) -> Iterator[ActivityRecord]:
        """Every record `compact_settled(older_than_ms)` would compact now (a dry run), oldest
        settlement first, paged to exhaustion; the core decides each one."""
        page_size = _count("page_size", page_size, 1, ValueError)
        _now, cutoff = self._cutoff(older_than_ms)
        after: tuple[Any, ...] | None = None
        while True:
            rows = self._store.page("compactable", cutoff, None, None, after, page_size)
            for row in rows:
                if _core.catalog_compactable(row, cutoff):
                    yield record_from_row(_core.catalog_check_row(row))
            if len(rows) < page_size:
                return
            after = self._store.cursor("compactable", rows[-1])

    def compact_settled(
        self,
        older_than_ms: int,
        *,
        batch: int = PAGE_SIZE,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Compact every record settled at least ``older_than_ms`` ago (wall clock); return
        how many were compacted.

        The core decides each record (`compacted` form: key, source receipt, input digest,
        fence and settlement stay; input and result references, attempts, binding, guard,
        evidence and decision go) and never compacts an unsettled one. A compacted key is never
        admitted again: the same input digest is a no-op, another is `AdmissionConflict`. Runs
        in transactions of ``batch`` records, so workers interleave; ``progress`` receives the
        running count after each. Result payloads in an artifact store are not touched.
        """
        batch = _count("batch", batch, 1, ValueError)
        now, cutoff = self._cutoff(older_than_ms)

        def transition(row: Row) -> Row | None:
            try:
                return _core.catalog_compact(row, cutoff, now)
            except _core.NotCompactable:
                return None  # the core keeps it; the cursor moves past it

        total = 0
        after: tuple[Any, ...] | None = None
        while True:
            changed, after = self._store.compact(cutoff, transition, after, batch)
            total += len(changed)
            if progress is not None:
                progress(total)
            if after is None:
                return total

    def has_unsettled(self, world_id: str) -> bool:
        """Whether the world has any admitted activity without a settlement (lifecycle gate:
        fork and destroy are refused while this is true). The core computes `unsettled` per
        record; storage only finds one."""
        return self._store.has_unsettled(world_id)

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
