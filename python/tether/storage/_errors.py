"""Storage errors born in Python: a commit whose outcome is unknown, an out-of-date schema."""

from __future__ import annotations

from typing import Any

from tether._core import CatalogStorageError, TetherError


class CommitUnknown(CatalogStorageError):
    """A COMMIT was sent and its reply was lost (the connection broke): the transaction may or
    may not have landed. Nothing may act on either guess: re-read the record first
    (`tether.activities.Catalog.committed`).

    Attributes:
        key: (world_id, kind, activity_id) of the row the transaction wrote, if known.
        intended: the exact row the transaction would have stored, if known.
    """

    def __init__(
        self,
        message: str,
        key: tuple[str, str, str] | None = None,
        intended: tuple[Any, ...] | None = None,
    ) -> None:
        super().__init__(message)
        self.key = key
        self.intended = intended


class SchemaOutdated(TetherError):
    """The database (catalog or world ledger, either backend) holds an older Tether schema:
    `tether db upgrade URL` brings it forward.

    Attributes:
        store: ``catalog`` or ``world``.
        found: the schema version found.
        latest: the version this Tether needs.
    """

    def __init__(self, message: str, store: str, found: int, latest: int) -> None:
        super().__init__(message)
        self.store = store
        self.found = found
        self.latest = latest
