"""Strict configuration tables: every key is declared, and an unknown or misspelled key is an
error that names it and the nearest valid one. Protocol-neutral; every device type reads its
part of the host configuration through it.

Rules:
- A `Table` is opened with the keys it accepts. Any other key raises `HostConfigError` with
  code `unknown_key` at once, before a single value is read, so a misspelled safety setting
  (`sped = 0.1`, `mx = 1.0`) can never be ignored while its default is used in its place.
- The error names the table, the key and, when one is close (a small edit distance, a case
  slip or a prefix), the valid key it most likely meant; `details` carries `table`, `key`,
  `suggestion` and `valid`.
- Values are typed: a `bool` is never a number; an `int` is accepted where a float is wanted.
  A missing required key is `missing_key`, a value of the wrong type `wrong_type`.
- Units are SI (radians, rad/s, seconds or a named SI multiple such as `_ms`); protocol units
  (ticks, raw register values) never appear in a configuration.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from tether._coded import CodedError

#: The codes this module raises (device configurations add their own).
CODES: Final = ("missing_key", "unknown_key", "wrong_type", "empty_value")


class HostConfigError(CodedError):
    """The host configuration is invalid; `code` says how, `details` says where."""


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def _distance(a: str, b: str) -> int:
    """Edit distance with adjacent transpositions (optimal string alignment)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[len(b)]


#: How much of a name from a request an error repeats (`clipped`).
SHOWN_CHARS: Final = 64


def clipped(name: str) -> str:
    """``name`` as an error repeats it: whole up to `SHOWN_CHARS` characters, else its start
    and its length (a request may carry a megabyte-long name)."""
    if len(name) <= SHOWN_CHARS:
        return name
    return f"{name[:SHOWN_CHARS]}... ({len(name)} characters)"


def nearest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate `word` most likely meant, or None when none is close. The edit distance
    is computed only where the lengths allow a close match (it is at least their difference,
    and exactly that when one is a prefix of the other), so a megabyte-long word costs no more
    than a short one."""
    low = word.lower()
    close = max(1, len(low) // 3)
    best: tuple[int, int, str] | None = None
    for candidate in candidates:
        cand = candidate.lower()
        prefix = min(len(low), len(cand)) >= 3 and (low.startswith(cand) or cand.startswith(low))
        gap = abs(len(low) - len(cand))
        if prefix:
            distance = gap
        elif gap > close:
            continue
        else:
            distance = _distance(low, cand)
        if distance > close and not prefix:
            continue
        rank = (distance, 0 if prefix else 1, candidate)
        if best is None or rank < best:
            best = rank
    return None if best is None else best[2]


def unknown_key(where: str, key: str, valid: Iterable[str]) -> HostConfigError:
    """The error for a key `where` does not accept, naming the nearest valid key."""
    valid = sorted(valid)
    suggestion = nearest(key, valid)
    hint = f"; did you mean `{suggestion}`?" if suggestion else ""
    return HostConfigError(
        "unknown_key",
        f"{where}: unknown key `{key}`{hint} (valid: {', '.join(valid) or 'none'})",
        details={"table": where, "key": key, "suggestion": suggestion, "valid": valid},
    )


def _is(value: Any, kinds: tuple[type, ...]) -> bool:
    # bool is an int subclass: a `true` is never a number here.
    return isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)


class Table:
    """One configuration table, read strictly: only its declared `keys` may appear."""

    def __init__(self, data: Any, where: str, keys: Iterable[str]) -> None:
        """`where` is the table's dotted name (`robots.arm`); "" is the top level."""
        self.where = where
        self.keys: tuple[str, ...] = tuple(keys)
        if not isinstance(data, dict):
            raise HostConfigError(
                "wrong_type", f"{self.label} is not a table", details={"table": where}
            )
        self._data: dict[str, Any] = data
        for key in data:
            if key not in self.keys:
                raise unknown_key(self.label, key, self.keys)

    @property
    def label(self) -> str:
        """How messages name this table."""
        return self.where or "the top level"

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def _value(self, key: str, kinds: tuple[type, ...], what: str, default: Any) -> Any:
        if key not in self.keys:
            raise ValueError(f"{self.label}: `{key}` is read but not declared")  # a code bug
        if key not in self._data:
            if default is MISSING:
                raise HostConfigError(
                    "missing_key",
                    f"{self.label}: `{key}` is required",
                    details={"table": self.where, "key": key},
                )
            return default
        value = self._data[key]
        if not _is(value, kinds):
            raise HostConfigError(
                "wrong_type",
                f"{self.label}: `{key}` must be {what}, not {type(value).__name__}",
                details={"table": self.where, "key": key, "expected": what},
            )
        return value

    def text(self, key: str, default: str | _Missing = MISSING) -> str:
        value: str = self._value(key, (str,), "a string", default)
        return value

    def path(self, key: str, default: str | _Missing = MISSING) -> str:
        """A path: a string, never empty when set (`empty_value`: an empty one, a template's
        unset variable say, would silently be the current directory)."""
        value = self.text(key, default)
        if key in self._data and not value.strip():
            raise HostConfigError(
                "empty_value",
                f"{self.label}: `{key}` is empty: give a path, or leave the key out for its"
                " default",
                details={"table": self.where, "key": key},
            )
        return value

    def optional_text(self, key: str) -> str | None:
        value: str | None = self._value(key, (str,), "a string", None)
        return value

    def integer(self, key: str, default: int | _Missing = MISSING) -> int:
        value: int = self._value(key, (int,), "an integer", default)
        return value

    def optional_integer(self, key: str) -> int | None:
        value: int | None = self._value(key, (int,), "an integer", None)
        return value

    def number(self, key: str, default: float | _Missing = MISSING) -> float:
        return float(self._value(key, (int, float), "a number", default))

    def table(self, key: str, keys: Iterable[str]) -> Table:
        """A sub-table (empty when absent), itself read strictly."""
        return Table(self._value(key, (dict,), "a table", {}), where_in(self.where, key), keys)

    def mapping(self, key: str) -> dict[str, Any]:
        """A table of named entries (`[ports.NAME]`), empty when absent; each entry is opened
        as a `Table` by the caller, who knows its keys."""
        value: dict[str, Any] = self._value(key, (dict,), "a table", {})
        return value

    def array(self, key: str) -> list[Any]:
        """An array (`[[robots.arm.joints]]`); each table in it is opened by the caller."""
        value: list[Any] = self._value(key, (list,), "an array", MISSING)
        return value


def where_in(parent: str, key: str) -> str:
    """The dotted name of `key` inside `parent` (the top level has no name)."""
    return f"{parent}.{key}" if parent else key


__all__ = ["CODES", "MISSING", "HostConfigError", "Table", "nearest", "unknown_key", "where_in"]
