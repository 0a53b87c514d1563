"""The base of every error born in Python: a `TetherError` with `code`, `message` and `details`.

Errors the Rust core raises are made in Rust, with their fields set there. Errors raised by
Python code (configuration, transport, devices, operator decisions) subclass `CodedError`
instead of borrowing a class from the bindings, so their fields are declared and typed:

- `code`: a stable snake_case reason a program can branch on (each raiser lists its codes);
- `message`: one line for a person, naming the problem;
- `details`: the facts behind it (a key, the nearest valid key, a device id, a path).

`str(err)` is `"code: message"`, one line, which is what a command prints on an expected
failure. This module imports nothing but the root class, so every error module can use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether._core import TetherError


class CodedError(TetherError):
    """A Tether error raised by Python code, with a stable `code` and structured `details`."""

    code: str
    message: str
    details: dict[str, Any]

    def __init__(
        self, code: str, message: str, *, details: Mapping[str, Any] | None = None
    ) -> None:
        # `args` are what pickling replays (details travel in `__dict__`).
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.details = dict(details or {})

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        """The error as JSON-ready data: class name, code, message and details."""
        return {
            "error": type(self).__name__,
            "code": self.code,
            "message": self.message,
            "details": self.details,
        }


__all__ = ["CodedError"]
