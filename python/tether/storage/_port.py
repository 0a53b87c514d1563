"""The storage port of the Activity catalog: rows in, rows out, rules stay in the Rust core."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tether.activities._clock import CatalogClock, Now

from tether.storage._doorbell import WakeBell

Row = tuple[Any, ...]
KeyTuple = tuple[str, str, str]
View = Literal["claimable", "pending_observation", "awaiting_decision", "compactable"]

# A transition reads the stored row (None: no such activity) and returns the row to store, or
# raises a CatalogRejection. It is the Rust core's decision; storage only persists it.
Transition = Callable[[Row | None], Row]
ClaimTransition = Callable[[Row], Row]
# The core's compaction of one row, or None where the core keeps the row as it is.
CompactTransition = Callable[[Row], Row | None]
# Transitions that take the clock reading of their own transaction (`ClockInTransaction`).
TimedTransition = Callable[[Row | None, "Now"], Row]
TimedClaimTransition = Callable[[Row, "Now"], Row]


class NotTaken(Exception):
    """A claimable row the claim's caller declined (`Catalog.claim_many`'s ``take``): left
    unclaimed, as a row the core refused is. Any other exception of a claim's transition
    (a bug in ``take``, say) propagates."""


class ClockBootChanged(Exception):
    """A claim's own clock reading is on another boot than the one the caller aligned the
    store to: nothing was written; align (`align_clock`) on ``now.boot_id`` and claim again."""

    def __init__(self, now: Now) -> None:
        super().__init__(f"the catalog clock is on boot {now.boot_id}")
        self.now = now


class CatalogStore(Protocol):
    """A catalog backend. Each method is one transaction; rows follow `catalog_columns()`.

    After each committed change that a waiting loop cares about, a backend wakes its
    `doorbell()` (topics from the core's columns, `changed_topics(old, new)`): SQLite rings a
    `Doorbell` of sockets beside the file after the commit; PostgreSQL sends NOTIFY inside the
    committing transaction, heard by its `PostgresDoorbell`.
    """

    def doorbell(self) -> WakeBell:
        """This process's doorbell of this catalog: what idle loops wait on."""
        ...

    def apply(self, key: KeyTuple, transition: Transition) -> Row:
        """Read the row, run the transition, compare-and-swap the result on `version`."""
        ...

    def claim(
        self,
        now_ms: int,
        transition: ClaimTransition,
        kinds: Sequence[str] | None,
        world_id: str | None,
        *,
        host: str | None = None,
    ) -> Row | None:
        """Claim the claimable row with the earliest `claimable_from_ms` (compared with the
        lease-clock time ``now_ms``), if any, among the rows a claim on ``host`` may take:
        `bound_host` empty or ``host`` (empty only, for None). The core's claim decides; this
        filter only keeps a host from picking rows the core would refuse it."""
        ...

    def apply_many(self, items: Sequence[tuple[KeyTuple, Transition]]) -> list[Row | Exception]:
        """`apply` for each item, in one transaction (PostgreSQL and SQLite). A transition that
        raises (the core's rejection, an unknown key) leaves its row unchanged and its exception
        takes the item's place; the others are written. A lost COMMIT raises `CommitUnknown`
        without a key: re-read every item."""
        ...

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
        """`claim` up to ``limit`` rows, in claim order, in one transaction where the backend
        can; a row whose transition raises is left unchanged and skipped."""
        ...

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
        """`apply_many` of ``items``, then `claim_many` of up to ``limit`` rows, in one
        transaction (a worker's step: what its last attempts concluded, and its next ones).
        The items are decided first; a claimable row that is also an item's is not claimed.
        Returns the items' outcomes (a rejection in its item's place) and the claimed rows;
        a lost COMMIT raises `CommitUnknown` without a key."""
        ...

    def align_clock(self, boot_id: str, rebase: ClaimTransition) -> int:
        """Put the claimable index on boot ``boot_id``'s lease clock, once per boot.

        Unless the store already is on ``boot_id``, hand every row that holds lease-clock
        values (a `claimable_from_ms`) of another boot to ``rebase`` (the core's decision),
        store what it returns and record ``boot_id``, in one transaction. Returns the number
        of rows rebased.
        """
        ...

    def next_claimable(
        self, kinds: Sequence[str] | None, world_id: str | None, *, host: str | None = None
    ) -> int | None:
        """The smallest `claimable_from_ms` (lease clock) of the rows of ``kinds`` (every kind
        for None), of ``world_id`` if given, that a claim on ``host`` may take (as `claim`);
        None if no such row will become claimable."""
        ...

    def get(self, key: KeyTuple) -> Row | None: ...

    def page(
        self,
        view: View,
        now_ms: int,
        kinds: Sequence[str] | None,
        world_id: str | None,
        after: tuple[Any, ...] | None,
        limit: int,
    ) -> list[Row]:
        """One keyset page of a view, strictly after the cursor `after` (see `cursor`).

        ``now_ms`` is the lease-clock time for the claimable view and the wall-clock cutoff
        for the compactable one; the other views take no time."""
        ...

    def compact(
        self,
        cutoff_ms: int,
        transition: CompactTransition,
        after: tuple[Any, ...] | None,
        limit: int,
    ) -> tuple[list[tuple[Row, Row]], tuple[Any, ...] | None]:
        """In one transaction, hand up to ``limit`` rows of the compactable view at the
        wall-clock ``cutoff_ms`` (strictly after the cursor ``after``) to ``transition`` (the
        core's decision) and compare-and-swap what it returns. Returns the (old, new) rows it
        changed and the cursor to continue from, or None once the view is exhausted."""
        ...

    def cursor(self, view: View, row: Row) -> tuple[Any, ...]:
        """The keyset cursor of a row within a view."""
        ...

    def has_unsettled(self, world_id: str) -> bool:
        """Whether a row of the world has the core's `unsettled` flag set."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ServerClocked(Protocol):
    """A store whose server keeps the catalog's time (PostgreSQL): `Catalog.open` uses its
    clock unless given one, so every host measures leases on the same clock."""

    def server_clock(self) -> CatalogClock: ...


@runtime_checkable
class ClockInTransaction(Protocol):
    """A store that reads its server's clock inside its own transactions (PostgreSQL on its
    server clock): the reading is taken under the transaction's row locks and costs no round
    trip of its own. The catalog uses these instead of `apply`, `apply_many` and
    `claim_many` when its clock is the one the store reads (`reads_clock`); the transitions
    are the same core decisions, handed the transaction's reading."""

    def reads_clock(self, clock: object) -> bool: ...

    def apply_at(self, key: KeyTuple, transition: TimedTransition) -> Row: ...

    def apply_many_at(
        self, items: Sequence[tuple[KeyTuple, TimedTransition]]
    ) -> list[Row | Exception]: ...

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
        """`claim_many` (``single``: `claim`, a refusal raised) on the transaction's reading,
        after ``check`` (the core's check of the claim's arguments) passed on it; raises
        `ClockBootChanged` (nothing written) if the reading is not on boot ``boot_id``."""
        ...

    def admit_at(
        self, items: Sequence[tuple[KeyTuple, Row, TimedTransition]]
    ) -> list[Row | Exception]:
        """Admissions, each (key, the core's template of its new record, the core's `admit`):
        in one transaction, each template whose key holds no record is inserted with its
        stamp columns (`catalog_admission_stamps`) set to the transaction's reading, and
        every other item is decided by its transition on the stored record, which an
        admission never changes. A lost COMMIT raises `CommitUnknown` naming no row (the
        reading is unknown): admit again (idempotent)."""
        ...

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
        """`apply_and_claim` on the transaction's reading (items and claims see the same
        one), as `claim_at` checks it."""
        ...
