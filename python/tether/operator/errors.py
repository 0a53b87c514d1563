"""The error an operator decision is refused with (born in Python, with fields)."""

from __future__ import annotations

from tether._coded import CodedError


class OperatorRejection(CodedError):
    """An operator decision was refused (credential, stale revision, changed device state);
    `code` is one of `tether.operator.decisions.REJECTION_CODES`."""


__all__ = ["OperatorRejection"]
