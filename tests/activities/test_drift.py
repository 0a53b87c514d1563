"""Rust lists and Python names stay equal: rejection codes, exception classes, row layout."""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

import pytest
import tether.errors as errors
from tether import _core
from tether.activities import (
    REJECTION_CODES,
    ActivityKey,
    ActivityRecord,
    Catalog,
    Decision,
    Evidence,
    RetryGuard,
)
from tether.activities._record import COLUMNS, record_from_row
from tether.errors import CatalogStorageError


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


def test_record_view_is_the_dataclass(db_url: str) -> None:
    """`record_from_row` stores every field through the slots: the record equals the one the
    dataclass's `__init__` builds from the same values, at every stage of a lifecycle (with an
    attempt, a guard, evidence, a decision, a result, a settlement, compacted), from the rows
    either backend's store returns."""
    from tests.activities.support import (
        ManualClock,
        bound_claim,
        evidence_for,
        key,
        receipt,
        reconciling,
        result,
    )

    clock = ManualClock()
    rows: list[tuple[Any, ...]] = []
    with Catalog.open(db_url, clock=clock) as cat:

        def keep(k: ActivityKey) -> None:
            row = cat.store.get((k.world_id, k.kind, k.activity_id))
            assert row is not None
            rows.append(row)

        done, unknown = key("done"), key("unknown")
        c = bound_claim(cat, done)
        keep(done)
        cat.record_result(done, c.fence, result("r"))
        keep(done)
        cat.settle(done, receipt(9), evidence_for(done, result("r")))
        keep(done)
        clock.advance(10)
        assert cat.compact_settled(0) == 1
        keep(done)
        _, rec = reconciling(cat, clock, unknown)
        keep(unknown)
        cat.record_unknown(unknown, rec.fence, Evidence("evidence://e", "sha256:e"), 0)
        keep(unknown)
        awaiting = cat.get(unknown)
        assert awaiting is not None
        cat.resolve(
            unknown,
            Decision.absent(
                RetryGuard("guard://g", "sha256:g"),
                evidence_revision=awaiting.evidence_revision,
                operator="op",
            ),
        )
        keep(unknown)
    seen: set[str] = set()
    at = {c: i for i, c in enumerate(COLUMNS)}
    for row in rows:
        record = record_from_row(row)
        names = [f.name for f in fields(ActivityRecord)]
        values = [getattr(record, n) for n in names]  # every slot is set
        assert record == ActivityRecord(*values)
        # Each field holds its own column (a slot set from the wrong one would differ).
        for name, value in zip(names, values, strict=True):
            if name in at:
                assert value == row[at[name]], name
        assert record.key == ActivityKey(row[0], row[1], row[2])
        assert record.source.run_id == row[at["source_run_id"]]
        assert record.operation_bound_at_ms == row[at["bound_at_ms"]]
        assert (record.attempt is None) == (row[at["attempt_owner"]] is None)
        assert (record.result and record.result.ref) == row[at["result_ref"]]
        assert (record.recorded_result and record.recorded_result.recorded_at_ms) == row[
            at["result_at_ms"]
        ]
        assert (record.retry_guard and record.retry_guard.guard.ref) == row[at["guard_ref"]]
        assert (record.evidence and record.evidence.evidence.ref) == row[at["evidence_ref"]]
        assert (record.decision and record.decision.outcome) == row[at["decision_outcome"]]
        assert (record.settlement and record.settlement.receipt.run_id) == row[at["settled_run_id"]]
        seen.update(n for n, v in zip(names, values, strict=True) if v not in (None, ""))
    assert seen >= {"attempt", "retry_guard", "result", "evidence", "decision", "settlement"}
    assert "compacted_at_ms" in seen


def test_the_changed_mask_names_exactly_the_columns_that_differ() -> None:
    """`catalog_changed_mask` (what the PostgreSQL store writes) sets bit i exactly where
    column i differs: equal values in distinct objects count as unchanged."""
    row = tuple(f"text-{i}" if i % 3 else (i + 1) * 1_000_003 for i in range(len(COLUMNS)))
    assert _core.catalog_changed_mask(row, row) == 0
    copied = tuple(int(str(v)) if isinstance(v, int) else "".join(v) for v in row)
    assert all(a is not b for a, b in zip(row, copied, strict=True) if isinstance(a, int))
    assert _core.catalog_changed_mask(row, copied) == 0
    for i in (0, 1, len(COLUMNS) - 1):
        changed = list(row)
        changed[i] = None
        assert _core.catalog_changed_mask(row, tuple(changed)) == 1 << i
    both = list(row)
    both[2], both[5] = "other", -1
    assert _core.catalog_changed_mask(row, tuple(both)) == (1 << 2) | (1 << 5)
    with pytest.raises(CatalogStorageError):
        _core.catalog_changed_mask(row, row[:-1])


def test_a_batch_update_is_encoded_as_the_json_of_its_rows() -> None:
    """`catalog_update_rows` (the PostgreSQL store's batch UPDATE): the positions some pair
    changes, less the fixed ones, and per pair the key, both versions and the decided cells,
    as the JSON the statement reads back (checked against the standard library's parser)."""
    import json
    import random

    rng = random.Random(5)
    version = COLUMNS.index("version")
    texts = ["plain", "quo'te", 'dq"x', "back\\slash", "tab\tnl\n", "ünï 😀", "", "\x01"]

    def cell(i: int) -> Any:
        if i < 3:
            return rng.choice(texts[:6]) + str(i)
        return rng.choice([None, rng.choice(texts), rng.randrange(-(2**63), 2**63)])

    for _ in range(50):
        pairs = []
        for _ in range(rng.randrange(1, 5)):
            old = tuple(cell(i) for i in range(len(COLUMNS)))
            new = list(old)
            for i in rng.sample(range(len(COLUMNS)), rng.randrange(0, 6)):
                new[i] = cell(i)
            pairs.append((old, tuple(new)))
        fixed = (1 << 0) | (1 << 1) | (1 << 2) | (1 << version)
        cols, text = _core.catalog_update_rows(pairs, fixed)
        changed = {i for o, n in pairs for i in range(len(COLUMNS)) if o[i] != n[i]}
        assert cols == sorted(changed - {0, 1, 2, version})
        assert json.loads(text) == [
            [*o[:3], o[version], n[version], *(n[i] for i in cols)] for o, n in pairs
        ]
    row = tuple(range(len(COLUMNS)))
    for bad in (1.5, True, 2**63, b"x", "lone \ud800 surrogate"):
        with pytest.raises(CatalogStorageError, match=COLUMNS[4]):
            _core.catalog_update_rows([(row, (*row[:4], bad, *row[5:]))], 0)
    with pytest.raises(CatalogStorageError):
        _core.catalog_update_rows([(row, row[:-1])], 0)
