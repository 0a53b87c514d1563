"""Frozen value types of the Activity catalog: keys, receipts, references, attempts, records."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tether._core import catalog_lease_reached

if TYPE_CHECKING:
    from tether.activities._clock import Now
    from tether.errors import CatalogRejection

DecisionOutcome = Literal["recovered", "absent", "abandon"]
#: The operator's word for each outcome (`tether operator resolve --decision`, the console):
#: `done` records a result, `reissue` proves the earlier attempt gone (the work runs again),
#: `abandon` records a failed result.
DECISION_WORDS: dict[str, str] = {"recovered": "done", "absent": "reissue", "abandon": "abandon"}


@dataclass(frozen=True, slots=True)
class ActivityKey:
    """The control key. Activity ids are family-local, so world and kind belong to the key.
    Shown (`str`, in logs and refusals) as ``world/kind/activity``, as every command names it."""

    world_id: str
    kind: str
    activity_id: str

    def __str__(self) -> str:
        return f"{self.world_id}/{self.kind}/{self.activity_id}"


def _no_bool(field: str, value: object) -> None:
    """A count or a tick is an int, never a bool (`True` is no tick 1): the core bounds it,
    but a bool passes its int check."""
    if isinstance(value, bool):
        raise TypeError(f"{field} must be an int, not bool")


@dataclass(frozen=True, slots=True)
class Receipt:
    """A committed tick receipt (CommittedTickReceipt): world, run, tick and visibility token."""

    world_id: str
    run_id: str
    tick: int
    visibility_token: str

    def __post_init__(self) -> None:
        _no_bool("Receipt.tick", self.tick)


@dataclass(frozen=True, slots=True)
class Admission:
    """What the required projector admits: key, source receipt and immutable input reference.

    ``bound_host`` names the host that owns the device the work drives: only a claim on that
    host takes it (others get `WrongHost`). Empty (the default): any host may claim it
    (simulation, remote gRPC work). Immutable like the rest: another value under the same key
    is `AdmissionConflict`.
    """

    key: ActivityKey
    source: Receipt
    input_ref: str
    input_digest: str
    bound_host: str = ""


@dataclass(frozen=True, slots=True)
class ResultRef:
    """A bounded reference to a durable result.

    A failed result is an ordinary result with ``failed=True`` (an operator's "abandon" records
    one with media type ``application/vnd.tether.abandoned``); families observe and settle it
    like any other.
    """

    ref: str
    digest: str
    media_type: str
    size: int
    failed: bool = False

    def __post_init__(self) -> None:
        _no_bool("ResultRef.size", self.size)


@dataclass(frozen=True, slots=True)
class RetryGuard:
    """The adapter's proof that a fresh execution cannot duplicate a stale claimant's effect."""

    ref: str
    digest: str


@dataclass(frozen=True, slots=True)
class Evidence:
    """Bounded reference to reconciliation evidence that could not decide the outcome."""

    ref: str
    digest: str


@dataclass(frozen=True, slots=True)
class Attempt:
    """The current attempt. ``may_execute`` False means reconcile-only. ``lease_expires_ms`` is
    on the record's lease clock (`ActivityRecord.lease_boot_id`), not the wall clock."""

    number: int
    fence: int
    owner: str
    lease_expires_ms: int
    may_execute: bool


@dataclass(frozen=True, slots=True)
class RecordedResult:
    """Who recorded the result: attempt number (0 for an operator decision or a refusal at
    admission) and fence."""

    result: ResultRef
    attempt: int
    fence: int
    recorded_at_ms: int


@dataclass(frozen=True, slots=True)
class RecordedGuard:
    """A confirmed absence: the retry guard, the fence it was recorded under, and whether it
    still authorises one fresh execution."""

    guard: RetryGuard
    fence: int
    recorded_at_ms: int
    authorizes_execution: bool


@dataclass(frozen=True, slots=True)
class RecordedEvidence:
    """The latest "unknown" evidence and when it was recorded."""

    evidence: Evidence
    recorded_at_ms: int


@dataclass(frozen=True, slots=True)
class Decision:
    """An operator decision for `Catalog.resolve`, made on one evidence revision.

    ``recovered`` needs ``result``; ``absent`` needs ``guard`` (a retry guard that references the
    adapter's proof that no stale claimant can still act); ``abandon`` needs neither and records
    a failed result. The decision time is the catalog clock's.
    """

    outcome: DecisionOutcome
    evidence_revision: int
    operator: str
    note: str = ""
    result: ResultRef | None = None
    guard: RetryGuard | None = None

    @classmethod
    def recovered(
        cls, result: ResultRef, *, evidence_revision: int, operator: str, note: str = ""
    ) -> Decision:
        return cls("recovered", evidence_revision, operator, note, result=result)

    @classmethod
    def absent(
        cls, guard: RetryGuard, *, evidence_revision: int, operator: str, note: str = ""
    ) -> Decision:
        return cls("absent", evidence_revision, operator, note, guard=guard)

    @classmethod
    def abandon(cls, *, evidence_revision: int, operator: str, note: str = "") -> Decision:
        return cls("abandon", evidence_revision, operator, note)


@dataclass(frozen=True, slots=True)
class OperatorDecision:
    """The recorded operator decision."""

    outcome: str
    evidence_revision: int
    operator: str
    decided_at_ms: int
    note: str


@dataclass(frozen=True, slots=True)
class Settlement:
    """The later receipt that observed the result, and the completion evidence digest."""

    receipt: Receipt
    evidence_digest: str
    settled_at_ms: int


@dataclass(frozen=True, slots=True)
class ActivityRecord:
    """One activity's durable control record (a snapshot; records never change in place).

    There is no status field: ``claimable_from_ms`` (None once a result exists), ``attempt``,
    ``result``, ``awaiting_decision`` and ``settlement`` are the facts views derive from.
    ``claimable_from_ms`` and the attempt's lease are on the lease clock of boot
    ``lease_boot_id``; ``pending_observation`` (a result not yet settled) and ``unsettled``
    (no settlement yet) are derived by the Rust core and stored as columns. Times named
    ``*_at_ms`` are wall-clock.

    A compacted record (``compacted_at_ms`` set, by `Catalog.compact_settled`) keeps its key,
    source receipt, ``input_digest``, fence, attempt count, evidence revision and
    ``settlement``; ``input_ref`` is empty, ``lease_boot_id`` too, and ``operation_id``,
    ``retry_guard``, ``result``, ``recorded_result``, ``evidence`` and ``decision`` are None;
    ``compacted_result_failed`` keeps whether the dropped result failed (see `result_failed`).
    ``compactable_from_ms`` (the core's column) is the settlement time of a settled record not
    yet compacted, else None.
    """

    key: ActivityKey
    source: Receipt
    input_ref: str
    input_digest: str
    admitted_at_ms: int
    fence: int
    attempt_count: int
    attempt: Attempt | None
    operation_id: str | None
    operation_bound_at_ms: int | None
    retry_guard: RecordedGuard | None
    result: ResultRef | None
    recorded_result: RecordedResult | None
    evidence: RecordedEvidence | None
    evidence_revision: int
    awaiting_decision: bool
    decision: OperatorDecision | None
    settlement: Settlement | None
    claimable_from_ms: int | None
    lease_boot_id: str
    pending_observation: bool
    unsettled: bool
    version: int
    compacted_at_ms: int | None = None
    compactable_from_ms: int | None = None
    compacted_result_failed: bool = False
    #: The host the activity's device is bound to ('' for any host; see `Admission`).
    bound_host: str = ""

    @property
    def admission(self) -> Admission:
        return Admission(self.key, self.source, self.input_ref, self.input_digest, self.bound_host)

    @property
    def result_failed(self) -> bool:
        """Whether the recorded result is a failed one, also once compaction dropped it."""
        return self.result.failed if self.result is not None else self.compacted_result_failed

    @property
    def refused_at_admission(self) -> bool:
        """Whether its family refused the request at admission (`Catalog.admit_refused`): a
        failed result and never an attempt (every other failed result follows one)."""
        if self.attempt_count != 0 or not self.result_failed:
            return False
        return self.recorded_result is None or self.recorded_result.attempt == 0

    @property
    def compacted(self) -> bool:
        """Whether the record was compacted (only key, input digest and settlement remain)."""
        return self.compacted_at_ms is not None

    def claimable(self, now: Now) -> bool:
        """Whether ``claimable_from_ms`` is reached at ``now`` (the core's rule: on the same
        boot when the lease clock got there, from another boot always)."""
        return self.claimable_from_ms is not None and catalog_lease_reached(
            self.lease_boot_id, self.claimable_from_ms, now
        )


@dataclass(frozen=True, slots=True)
class Claim:
    """A successful claim: the new record and its attempt (``may_execute`` False: reconcile)."""

    record: ActivityRecord
    attempt: Attempt

    @property
    def key(self) -> ActivityKey:
        return self.record.key

    @property
    def fence(self) -> int:
        return self.attempt.fence


class WorkStep:
    """What one `Catalog.work_step` transaction did: the attempts it claimed (`claims`, each
    bound as `Catalog.claim_and_bind_many` binds), and each settlement's and each result's
    outcome in the order given (`settled`, `recorded`: the record, or the core's rejection,
    which changed nothing). `refused` lists the rejections alone; the records are built
    only when `settled` or `recorded` is read (a worker mostly needs neither)."""

    __slots__ = ("_rows", "_settlements", "claims")

    def __init__(
        self,
        rows: Sequence[tuple[Any, ...] | CatalogRejection],
        settlements: int,
        claims: tuple[Claim, ...],
    ) -> None:
        self._rows = tuple(rows)
        self._settlements = settlements
        self.claims = claims

    def _outcomes(self, part: slice) -> tuple[ActivityRecord | CatalogRejection, ...]:
        from tether.activities._record import record_from_row

        return tuple(
            r if isinstance(r, BaseException) else record_from_row(r) for r in self._rows[part]
        )

    @property
    def settled(self) -> tuple[ActivityRecord | CatalogRejection, ...]:
        return self._outcomes(slice(None, self._settlements))

    @property
    def recorded(self) -> tuple[ActivityRecord | CatalogRejection, ...]:
        return self._outcomes(slice(self._settlements, None))

    @property
    def refused(self) -> tuple[CatalogRejection, ...]:
        """The items the core refused, in order (settlements first)."""
        return tuple(r for r in self._rows if isinstance(r, BaseException))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorkStep):
            return NotImplemented
        return (self.settled, self.recorded, self.claims) == (
            other.settled,
            other.recorded,
            other.claims,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"WorkStep(settled={self.settled!r}, recorded={self.recorded!r},"
            f" claims={self.claims!r})"
        )
