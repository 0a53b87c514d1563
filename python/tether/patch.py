"""JSON Patch (RFC 6902) and JSON Pointer (RFC 6901) on Python objects and JSON text.

One Rust engine (`tether._core`) applies patches to Python dicts and lists directly, with the
GIL held, and to JSON text without going through Python objects. Patches apply atomically: on
any error the document is exactly as it was.

Modes: ``"strict"`` (RFC 6902; an unknown ``op`` makes the patch malformed) and ``"agui"``
(an operation with an unknown ``op`` is dropped with a warning; the rest applies).

Only plain JSON types are accepted: ``dict`` (``str`` keys), ``list``, ``str``, ``int``,
finite ``float``, ``bool`` and ``None``; subclasses and other types raise ``InvalidDocument``
(in the document) or ``InvalidPatch`` (in the patch), and so do NaN and the infinities, which
JSON does not have (code ``non_finite_number``).

Every ``PatchError`` carries ``op_index`` and ``path`` (the failing operation, when known),
``code``, a stable snake_case reason listed in `ERROR_CODES`, and ``warnings``: in AG-UI mode
the operations dropped before the failure, in order (a drop stands whatever happens to the rest
of the patch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, overload

from tether import _core
from tether._core import PatchWarning
from tether.errors import InvalidDocument, InvalidPatch, PatchDoesNotApply, PatchError

__all__ = [
    "ERROR_CODES",
    "WARNING_CODES",
    "Applied",
    "InvalidDocument",
    "InvalidPatch",
    "JsonText",
    "Mode",
    "PatchDoesNotApply",
    "PatchError",
    "PatchWarning",
    "apply",
    "apply_detailed",
    "apply_json",
    "apply_json_detailed",
    "diff",
]

Mode = Literal["strict", "agui"]

#: Every `PatchError.code` (stable snake_case reasons).
ERROR_CODES: tuple[str, ...] = tuple(_core.PATCH_ERROR_CODES)

#: Every warning code the engine can emit.
WARNING_CODES: tuple[str, ...] = tuple(_core.PATCH_WARNING_CODES)


@dataclass(frozen=True, slots=True)
class Applied:
    """A patched document together with the warnings of AG-UI mode."""

    document: Any
    warnings: tuple[PatchWarning, ...]


def apply_detailed(
    doc: Any, patch: list[Any], *, mode: Mode = "strict", in_place: bool = False
) -> Applied:
    """Like `apply`, also returning the warnings of AG-UI mode.

    When the patch fails, the raised ``PatchError`` carries the warnings of the operations
    dropped before the failure in ``warnings``, in order.
    """
    out, warnings = _core.patch_apply(doc, patch, mode=mode, in_place=in_place)
    return Applied(out, tuple(warnings))


def apply(doc: Any, patch: list[Any], *, mode: Mode = "strict", in_place: bool = False) -> Any:
    """Apply ``patch`` to ``doc`` and return the result.

    By default ``doc`` is never mutated: the result has new dicts and lists and shares the
    (immutable) scalars, as ``copy.deepcopy`` would. With ``in_place=True`` ``doc`` itself is
    patched and returned (unless the patch replaced the whole document); a failure still
    leaves it exactly as it was, rolled back through an undo journal. In place, only the parts
    of ``doc`` the patch walks, compares or copies are checked for non-JSON values; the copying
    mode checks the whole document while copying it.

    Raises:
        InvalidPatch: the patch is malformed (``op_index`` and ``path`` locate the operation).
        PatchDoesNotApply: a well-formed patch does not apply to this document.
        InvalidDocument: the document holds a non-JSON value (NaN and +-Infinity included).
        ValueError: ``mode`` is not ``"strict"`` or ``"agui"``.
    """
    out, _ = _core.patch_apply(doc, patch, mode=mode, in_place=in_place)
    return out


#: JSON text: ``bytes``, ``bytearray`` or ``str`` (its UTF-8 encoding).
JsonText = bytes | bytearray | str


@overload
def apply_json_detailed(
    doc: bytes | bytearray, patch: JsonText, *, mode: Mode = "strict"
) -> tuple[bytes, tuple[PatchWarning, ...]]: ...
@overload
def apply_json_detailed(
    doc: str, patch: JsonText, *, mode: Mode = "strict"
) -> tuple[str, tuple[PatchWarning, ...]]: ...
def apply_json_detailed(
    doc: JsonText, patch: JsonText, *, mode: Mode = "strict"
) -> tuple[bytes | str, tuple[PatchWarning, ...]]:
    """Like `apply_json`, also returning the warnings of AG-UI mode (carried by a raised
    ``PatchError`` in ``warnings`` when the patch fails)."""
    out, warnings = _core.patch_apply_json(doc, patch, mode=mode)
    return (out.decode() if isinstance(doc, str) else out), tuple(warnings)


@overload
def apply_json(doc: bytes | bytearray, patch: JsonText, *, mode: Mode = "strict") -> bytes: ...
@overload
def apply_json(doc: str, patch: JsonText, *, mode: Mode = "strict") -> str: ...
def apply_json(doc: JsonText, patch: JsonText, *, mode: Mode = "strict") -> bytes | str:
    """Apply a patch given as JSON text to a document given as JSON text.

    Either text may be ``bytes``, ``bytearray`` or ``str``; the result is ``str`` when ``doc``
    is, ``bytes`` otherwise. Numbers keep their digits (integers beyond 64 bits and long
    decimals survive untouched; only an exponent may be respelled, ``1E5`` as ``1e+5``) and
    object members keep their order. Invalid document text, or a document of another type,
    raises ``InvalidDocument``; invalid patch text, or a patch of another type, raises
    ``InvalidPatch`` (code ``invalid_json``).
    """
    out, _ = _core.patch_apply_json(doc, patch, mode=mode)
    return out.decode() if isinstance(doc, str) else out


def diff(old: Any, new: Any) -> list[dict[str, Any]]:
    """Return a minimal-ish patch turning ``old`` into ``new``.

    Comparison is exact (``True`` is not ``1``, ``1`` is not ``1.0``), so
    ``apply(old, diff(old, new)) == new`` with every type kept. The patch has its own
    containers: it never aliases ``new``.
    """
    return _core.patch_diff(old, new)
