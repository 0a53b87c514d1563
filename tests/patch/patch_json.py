"""Exact JSON comparison for the patch tests (True is not 1, key order ignored)."""

from __future__ import annotations

import math
from typing import Any


def json_same(a: Any, b: Any) -> bool:
    """JSON equality as RFC 6902 `test` defines it, but strict about bool versus number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b and not (isinstance(a, float) and math.isnan(a))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b
