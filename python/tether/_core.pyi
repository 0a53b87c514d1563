"""Type stubs for `tether._core`, the Rust extension (hand-written; checked by mypy.stubtest)."""

__version__: str

class TetherError(Exception):
    """Root of every error Tether raises."""

# --- patch (rust/src/bindings/patch.rs) ---

import typing as _typing  # noqa: E402

class PatchError(TetherError):
    """A JSON Patch was refused; `op_index` and `path` locate the failing operation."""

    op_index: int | None
    path: str | None
    code: str | None

class InvalidPatch(PatchError):
    """The patch is malformed (structure, member types, pointer syntax, unknown op, non-JSON)."""

class PatchDoesNotApply(PatchError):
    """A well-formed patch does not apply: a missing path, an index out of range, a failed test."""

class InvalidDocument(PatchError):
    """The document is not JSON: a dict/list subclass, a non-str key, a non-JSON value."""

PATCH_WARNING_CODES: list[str]
PATCH_ERROR_CODES: list[str]

def patch_apply(
    doc: _typing.Any, patch: _typing.Any, *, mode: str = "strict", in_place: bool = False
) -> tuple[_typing.Any, list[tuple[int, str, str]]]:
    """Apply a patch to Python objects; returns (document, warnings)."""

def patch_apply_json(
    doc: bytes, patch: bytes, *, mode: str = "strict"
) -> tuple[bytes, list[tuple[int, str, str]]]:
    """Apply a JSON-text patch to a JSON-text document; returns (json_bytes, warnings)."""

def patch_diff(old: _typing.Any, new: _typing.Any) -> list[dict[str, _typing.Any]]:
    """A patch (list of operation dicts) turning `old` into `new`."""

# --- agui (rust/src/bindings/agui.rs) ---

# --- catalog (rust/src/bindings/catalog.rs) ---

# --- codec (rust/src/bindings/codec.rs) ---
