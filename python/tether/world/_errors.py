"""Typed errors raised by the world ledger and the world lifecycle."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from tether._core import TetherError

if TYPE_CHECKING:
    from tether.world._types import CommittedTickReceipt

#: Stable snake_case codes a receipt rejection carries (listable at runtime).
RECEIPT_REJECTION_CODES: Final = (
    "tokenless",
    "unknown_world",
    "world_closed",
    "wrong_run",
    "not_head",
    "ambiguous_head",
    "sibling_token",
    "not_visible",
    "no_such_tick",
)


class WorldError(TetherError):
    """Base of every error raised by the world ledger. Each subclass has a stable `code` (a
    program branches on it as on any Tether error's); this class itself has none: raised
    for a store that failed, it is classified by its cause (`storage_failure`)."""


class WorldStorageError(WorldError):
    """The ledger's file refused a statement or its COMMIT (a full disk, a file-size limit,
    an I/O error, a read-only file system): nothing of the transaction was written. Its
    `code` is `disk_full`, `file_too_large` or `storage_io_error` (see
    `tether._sqlite_files.storage_failure`), else `storage_error`; `message` is one line."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details: dict[str, str] = {}


class LedgerClosed(WorldError):
    """The ledger was closed: nothing more can be read or written through it."""

    code: str = "ledger_closed"


class WorldNotFound(WorldError):
    """The named world does not exist in this ledger."""

    code: str = "world_not_found"


class WorldExists(WorldError):
    """A world with this id already exists (create or fork target)."""

    code: str = "world_exists"


class InvalidWrite(WorldError):
    """A component write is malformed (bad entity/component name or a non-JSON value)."""

    code: str = "invalid_write"


class StaleWriter(WorldError):
    """The commit came from a writer whose epoch was superseded by a newer writer."""

    code: str = "stale_writer"


class HeadConflict(WorldError):
    """The head moved since the writer read it (compare-and-swap on the head failed)."""

    code: str = "head_conflict"


class PostCommitPending(WorldError):
    """Tick T+1 was requested while the post-commit work of tick T has not succeeded."""

    code: str = "post_commit_pending"


class WorldClosing(WorldError):
    """The world is reserved for close or destroyed; it accepts no new ticks."""

    code: str = "world_closing"


class ReceiptRejected(WorldError):
    """The receipt reader failed closed: the receipt may neither admit nor settle work.

    Attributes:
        code: one of `RECEIPT_REJECTION_CODES`.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class UnsettledActivities(WorldError):
    """Fork or destroy was refused: the world still has admitted, unsettled Activities."""

    code: str = "unsettled_activities"


class LedgerCommitUnknown(WorldError):
    """A ledger COMMIT got no reply (the connection to the server broke): the tick or change
    may or may not have landed. Re-read the head (`head`, `pending_post_commit`) before acting;
    the head compare-and-swap refuses a second commit on the same parent. A lifecycle call
    (create, fork, new run, writer, mark, close, destroy) re-reads its own lost COMMIT and
    raises this only when the re-read failed or it was lost on its one retry as well.

    Attributes:
        intended: for a tick commit, the receipt the tick would have (its fresh visibility
            token names it): the tick landed exactly when a re-read finds that tick and token.
            None when unknown (the transaction broke before the tick was decided, or the
            change was not a tick).
    """

    code: str = "commit_unknown"

    def __init__(self, message: str, intended: CommittedTickReceipt | None = None) -> None:
        super().__init__(message)
        self.intended = intended
