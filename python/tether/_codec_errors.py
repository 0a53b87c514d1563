"""Errors of the DYNAMIXEL codec (`tether._core.dxl_*`), born in Python with fields.

The Rust codec decides what is wrong (a stable code and a message, `CodecErrorKind`); its
binding builds the exception from these classes (`rust/src/bindings/codec.rs`, `to_py`), so
the classes, their fields (`code`, `message`, `details`) and their place in the hierarchy are
Python's. This module imports nothing but `tether._coded`.

Split as h11 does: `DxlUsageError` is the caller's mistake (a bad id, an empty read, an
oversize packet); `DxlFrameError` is the peer's (bytes that are not a valid frame or command).
"""

from __future__ import annotations

from tether._coded import CodedError


class DxlError(CodedError):
    """Root of DYNAMIXEL codec errors; `code` is one of `tether._core.dxl_error_codes()`."""


class DxlUsageError(DxlError):
    """A DYNAMIXEL codec argument the caller can fix (bad id, empty read, oversize packet)."""


class DxlFrameError(DxlError):
    """Received bytes that are not a valid DYNAMIXEL frame or command (the peer's fault)."""


def from_codec(code: str, message: str, usage: bool) -> DxlError:
    """The exception for one codec failure the Rust core reported (called by the binding)."""
    cls = DxlUsageError if usage else DxlFrameError
    return cls(code, message, details={"kind": "usage" if usage else "frame"})


__all__ = ["DxlError", "DxlFrameError", "DxlUsageError", "from_codec"]
