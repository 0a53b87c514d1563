"""Plain data shared by every world ledger: receipts, component writes, snapshots, writers."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeAlias

from tether.activities import Receipt
from tether.world._errors import InvalidWrite

JSONValue: TypeAlias = Any
"""A value made only of dict/list/str/int/float/bool/None (checked by `canonical_json`)."""

_NAME = re.compile(r"^[A-Za-z0-9_.:/@+\-]{1,256}$")


#: The exact coordinates of one committed tick (world, run, tick, visibility token). It is the
#: catalog's `Receipt` class itself, so a ledger receipt is admitted and settled as it is.
CommittedTickReceipt = Receipt


def canonical_json(value: JSONValue) -> bytes:
    """Encode `value` as canonical JSON (sorted keys, no spaces, UTF-8, no NaN/Infinity).

    Raises:
        InvalidWrite: the value is not plain JSON data.
    """
    _check_json(value, depth=0)
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InvalidWrite(f"value is not JSON: {e}") from e
    return text.encode("utf-8")


def digest_of(data: bytes) -> str:
    """The `sha256:<hex>` digest of `data`."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _check_json(value: JSONValue, depth: int) -> None:
    if depth > 64:
        raise InvalidWrite("value nests deeper than 64 levels")
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidWrite("value holds a non-finite float")
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_json(item, depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidWrite(f"object key {k!r} is not a string")
            _check_json(v, depth + 1)
        return
    raise InvalidWrite(f"{type(value).__name__} is not a JSON value")


def check_name(what: str, name: object, *, slash: bool = True) -> str:
    """Return `name` if it is a valid entity/component/world name, else raise InvalidWrite.
    The whole name (a trailing newline is no part of a name). ``slash=False``: a world id or an
    activity kind, which an Activity's key (`world/kind/activity`) joins with '/'."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or (not slash and "/" in name):
        rule = _NAME.pattern if slash else f"{_NAME.pattern} without '/'"
        raise InvalidWrite(f"{what} {name!r} must match {rule}")
    return name


@dataclass(frozen=True, slots=True)
class ComponentWrite:
    """Set (or, with `value=None`, delete) one component of one entity in a tick."""

    entity: str
    component: str
    value: JSONValue = None

    def encoded(self) -> str | None:
        """The canonical JSON text stored for this write (None for a delete)."""
        check_name("entity", self.entity)
        check_name("component", self.component)
        if self.value is None:
            return None
        return canonical_json(self.value).decode("utf-8")


@dataclass(frozen=True, slots=True)
class Writer:
    """The single-writer capability for one world; a newer epoch fences older ones."""

    world_id: str
    epoch: int


@dataclass(frozen=True)
class WorldSnapshot:
    """A read-only view of a world's components exactly as of one committed receipt.

    It holds plain data only (no ledger, connection or handle), so a projection given a
    snapshot can reach nothing but the committed state. Values are decoded afresh on every
    read, so a caller mutating what it got back changes nothing.

    Attributes:
        receipt: the receipt this snapshot was read at.
        changes: the (entity, component) pairs written (or deleted) by exactly this tick.
    """

    receipt: CommittedTickReceipt
    _encoded: Mapping[tuple[str, str], str] = field(repr=False)
    changes: frozenset[tuple[str, str]] = frozenset()

    @staticmethod
    def of(
        receipt: CommittedTickReceipt,
        encoded: Mapping[tuple[str, str], str],
        changes: frozenset[tuple[str, str]],
    ) -> WorldSnapshot:
        """Build a snapshot from canonical JSON texts keyed by (entity, component)."""
        return WorldSnapshot(receipt, MappingProxyType(dict(encoded)), changes)

    def get(self, entity: str, component: str) -> JSONValue | None:
        """The component's value, or None when the entity does not have it."""
        text = self._encoded.get((entity, component))
        return None if text is None else json.loads(text)

    def encoded(self) -> Mapping[tuple[str, str], str]:
        """The stored canonical JSON texts by (entity, component), read-only."""
        return self._encoded

    def __contains__(self, key: object) -> bool:
        return key in self._encoded

    def keys(self) -> Iterator[tuple[str, str]]:
        """Every (entity, component) present, sorted."""
        return iter(sorted(self._encoded))

    def with_component(self, component: str) -> Iterator[tuple[str, JSONValue]]:
        """(entity, value) for every entity holding `component`, sorted by entity."""
        for entity, comp in sorted(self._encoded):
            if comp == component:
                yield entity, json.loads(self._encoded[(entity, comp)])

    def entities(self) -> list[str]:
        """Every entity holding at least one component, sorted."""
        return sorted({entity for entity, _ in self._encoded})

    def changed(self, component: str) -> Iterator[tuple[str, JSONValue | None]]:
        """(entity, value-or-None) for each `component` this exact tick wrote, by entity."""
        for entity, comp in sorted(self.changes):
            if comp == component:
                yield entity, self.get(entity, comp)

    def __len__(self) -> int:
        return len(self._encoded)
