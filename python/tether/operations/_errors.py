"""The error the operations journal raises (born in Python, with fields)."""

from __future__ import annotations

from typing import Final

from tether._coded import CodedError

#: Every `.code` a `JournalError` carries.
JOURNAL_ERROR_CODES: Final = (
    "bad_operation_id",
    "request_conflict",
    "attempt_already_started",
    "attempt_fenced",
    "operation_pruned",
    "unknown_operation",
    "result_conflict",
    "proof_conflict",
    "journal_corrupt",
    "old_layout",
)


class JournalError(CodedError):
    """A provider fact the journal refuses to record or cannot read; `code` is one of
    `JOURNAL_ERROR_CODES` (a conflicting request, a second start of one attempt, a pruned id,
    an id that is not a safe name, a damaged record)."""

    def __init__(self, code: str, message: str, **details: object) -> None:
        if code not in JOURNAL_ERROR_CODES:
            raise ValueError(f"unlisted journal error code {code!r}")
        super().__init__(code, message, details=details)


__all__ = ["JOURNAL_ERROR_CODES", "JournalError"]
