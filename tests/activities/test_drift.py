"""Rust lists and Python names stay equal: rejection codes, exception classes, row layout."""

from __future__ import annotations

import re

import tether.errors as errors
from tether import _core
from tether.activities import REJECTION_CODES
from tether.activities._record import COLUMNS, record_from_row


def _class_name(code: str) -> str:
    return "".join(part.capitalize() for part in code.split("_"))


def test_every_rejection_code_has_its_exception_class() -> None:
    assert len(set(REJECTION_CODES)) == len(REJECTION_CODES)
    for code in REJECTION_CODES:
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", code)
        cls = getattr(errors, _class_name(code))
        assert cls.code == code
        assert issubclass(cls, errors.CatalogRejection)
        assert issubclass(cls, errors.TetherError)


def test_the_record_view_unpacks_the_core_row_layout() -> None:
    import inspect

    source = inspect.getsource(record_from_row)
    unpacked = re.search(r"\(\n(.*?)\) = row", source, re.S)
    assert unpacked is not None
    lines = unpacked.group(1).splitlines()
    names = [n.strip().rstrip(",").lstrip("_") for n in lines if n.strip()]
    assert tuple(names) == COLUMNS == tuple(_core.catalog_columns())
