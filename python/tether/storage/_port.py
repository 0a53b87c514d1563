"""The storage port of the Activity catalog: rows in, rows out, rules stay in the Rust core."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

from tether.storage._doorbell import Doorbell

Row = tuple[Any, ...]
KeyTuple = tuple[str, str, str]
View = Literal["claimable", "pending_observation", "awaiting_decision"]

# A transition reads the stored row (None: no such activity) and returns the row to store, or
# raises a CatalogRejection. It is the Rust core's decision; storage only persists it.
Transition = Callable[[Row | None], Row]
ClaimTransition = Callable[[Row], Row]


class CatalogStore(Protocol):
    """A catalog backend. Each method is one transaction; rows follow `catalog_columns()`.

    After each committed change a backend rings its `doorbell` with `changed_topics(old,
    new)`, so waiting loops wake (SQLite: `Doorbell`, sockets beside the file).
    """

    doorbell: Doorbell

    def apply(self, key: KeyTuple, transition: Transition) -> Row:
        """Read the row, run the transition, compare-and-swap the result on `version`."""
        ...

    def claim(
        self,
        now_ms: int,
        transition: ClaimTransition,
        kinds: Sequence[str] | None,
        world_id: str | None,
    ) -> Row | None:
        """Claim the claimable row with the earliest `claimable_from_ms` (compared with the
        lease-clock time ``now_ms``), if any."""
        ...

    def align_clock(self, boot_id: str, rebase: ClaimTransition) -> int:
        """Put the claimable index on boot ``boot_id``'s lease clock, once per boot.

        Unless the store already is on ``boot_id``, hand every row that holds lease-clock
        values (a `claimable_from_ms`) of another boot to ``rebase`` (the core's decision),
        store what it returns and record ``boot_id``, in one transaction. Returns the number
        of rows rebased.
        """
        ...

    def next_claimable(self, kinds: Sequence[str] | None, world_id: str | None) -> int | None:
        """The smallest `claimable_from_ms` (lease clock) of the rows of ``kinds`` (every kind
        for None), of ``world_id`` if given; None if no row will become claimable."""
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
        """One keyset page of a view, strictly after the cursor `after` (see `cursor`)."""
        ...

    def cursor(self, view: View, row: Row) -> tuple[Any, ...]:
        """The keyset cursor of a row within a view."""
        ...

    def has_unsettled(self, world_id: str) -> bool:
        """Whether a row of the world has the core's `unsettled` flag set."""
        ...

    def close(self) -> None: ...
