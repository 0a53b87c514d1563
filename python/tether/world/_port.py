"""The typed port a world engine implements so the runtime can drive it (SQLite is the default).

Rules every implementation keeps:
- `commit` is atomic: component writes, a fresh non-empty visibility token and the head
  advance land together or not at all, under a compare-and-swap on the head.
- A newer `Writer` epoch fences older ones: their commits fail with `StaleWriter`.
- Tick T+1 is refused (`PostCommitPending`) until `complete_post_commit` was called for T.
- `check_receipt` fails closed (`ReceiptRejected`) unless the receipt is the current committed
  head of its world and run, its token is the sole token at that head, and the token is in the
  world's pinned visibility allowlist.

The rules themselves live once, in `tether.world.rules` (`_rules.py`): an engine reports the
`WorldFacts`/`HeadFacts` of a world in one consistent view, calls the rule, and stores what it
decided in the same transaction. An engine never re-implements a rule.

Lock scope: `lock` is the exact-world lock of one process (the Host's threads). Across
processes single-writer safety does not rest on it but on the durable checks above: a newer
writer epoch makes every older writer's commit fail (`StaleWriter`), the head compare-and-swap
refuses a parent that is no longer the head, `fork` and `destroy(world, head)` re-check in their
own transaction that the head the caller judged settled is still the head with its post-commit
work done, and `reserve_close` stops every process's ticks. Post-commit work may then run in
two processes at once for the same receipt; it is idempotent (identical admissions and
settlements are no-ops, a conflicting one fails closed in both).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from tether.world._types import CommittedTickReceipt, ComponentWrite, WorldSnapshot, Writer


@runtime_checkable
class WorldLedger(Protocol):
    """A world engine as seen by the Tether runtime."""

    def create_world(self, world_id: str) -> CommittedTickReceipt:
        """Create a world with a fresh run and an empty genesis tick 0; return its receipt."""
        ...

    def worlds(self) -> list[str]:
        """Ids of every world that is not destroyed, sorted."""
        ...

    def start_run(self, writer: Writer) -> CommittedTickReceipt:
        """Begin a new run (empty genesis tick 0); a restart resumes the current run instead."""
        ...

    def acquire_writer(self, world_id: str) -> Writer:
        """Become the world's only writer; every earlier writer is fenced."""
        ...

    def commit(
        self, writer: Writer, parent: CommittedTickReceipt, writes: Sequence[ComponentWrite]
    ) -> CommittedTickReceipt:
        """Commit tick `parent.tick + 1` on top of `parent`, which must still be the head."""
        ...

    def head(self, world_id: str) -> CommittedTickReceipt:
        """The world's current committed head (in its current run)."""
        ...

    def read_at(self, receipt: CommittedTickReceipt) -> WorldSnapshot:
        """A read-only snapshot of the components as of exactly `receipt`'s tick."""
        ...

    def check_receipt(self, receipt: CommittedTickReceipt) -> None:
        """The fail-closed receipt reader used for admission and settlement."""
        ...

    def visibility_allowlist(self, world_id: str) -> frozenset[str]:
        """The world's pinned visibility tokens."""
        ...

    def lock(self, world_id: str) -> AbstractContextManager[None]:
        """The exact-world lock (re-entrant for its holder)."""
        ...

    def holds_lock(self, world_id: str | None = None) -> bool:
        """Whether the calling thread holds the lock of `world_id` (or of any world)."""
        ...

    def pending_post_commit(self, world_id: str) -> CommittedTickReceipt | None:
        """The head receipt if its post-commit work has not yet succeeded, else None."""
        ...

    def complete_post_commit(self, receipt: CommittedTickReceipt) -> None:
        """Record that the post-commit work of the head `receipt` succeeded."""
        ...

    def fork(self, source: CommittedTickReceipt, new_world_id: str) -> CommittedTickReceipt:
        """Create `new_world_id` whose genesis holds `source`'s state; return its receipt.

        Refuses unless `source` is still the head and its post-commit work succeeded, checked
        atomically with the copy (`ReceiptRejected`, `HeadConflict`, `PostCommitPending`).
        """
        ...

    def reserve_close(self, world_id: str, *, sticky: bool) -> None:
        """Reserve the world for close: it accepts no more ticks until reopened."""
        ...

    def rollback_close(self, world_id: str) -> None:
        """Undo a provisional (non-sticky) close reservation; sticky ones stay."""
        ...

    def close_state(self, world_id: str) -> tuple[str, bool]:
        """(state, sticky): state is `open`, `closing` or `destroyed`."""
        ...

    def destroy(self, world_id: str, head: CommittedTickReceipt | None = None) -> None:
        """Delete a world reserved for close; its receipts then fail closed.

        With `head`, refuse (`HeadConflict`/`PostCommitPending`) unless it is still the head
        and its post-commit work succeeded, checked atomically with the delete.
        """
        ...

    def close(self) -> None:
        """Release the ledger's resources."""
        ...
