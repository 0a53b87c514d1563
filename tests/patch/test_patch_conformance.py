"""The public RFC 6902 suite (json-patch-tests), read from the shared checkout, in strict mode."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tether import patch

REPO_ROOT = Path(__file__).resolve().parents[2]
SUITE_NAME = Path("shared", "conformance", "json-patch-tests")


def _suite_dir() -> Path | None:
    # The suite sits at `../shared/...` from the repository root; a git worktree one level
    # further down finds it in the next ancestor. Never copied into this repository.
    for base in [REPO_ROOT.parent, *REPO_ROOT.parent.parents]:
        candidate = base / SUITE_NAME
        if (candidate / "tests.json").is_file():
            return candidate
    return None


SUITE = _suite_dir()


def _cases() -> list[Any]:
    if SUITE is None:
        return [
            pytest.param(
                None,
                marks=pytest.mark.skip(
                    reason=f"json-patch-tests not found at ../{SUITE_NAME} from {REPO_ROOT}"
                ),
                id="suite-absent",
            )
        ]
    params = []
    for name in ("tests.json", "spec_tests.json"):
        records = json.loads((SUITE / name).read_text(encoding="utf-8"))
        for i, record in enumerate(records):
            if "doc" not in record or "patch" not in record:
                continue  # a comment-only record
            marks = []
            if record.get("disabled"):
                marks.append(pytest.mark.skip(reason="disabled in the suite"))
            params.append(pytest.param(record, marks=marks, id=f"{name}:{i}"))
    return params


CASES = _cases()


def test_suite_has_enabled_cases() -> None:
    if SUITE is None:
        pytest.skip(f"json-patch-tests not found at ../{SUITE_NAME} from {REPO_ROOT}")
    enabled = [p for p in CASES if not p.marks]
    assert len(enabled) > 100


@pytest.mark.parametrize("record", CASES)
def test_python_objects(record: dict[str, Any], same: Callable[[Any, Any], bool]) -> None:
    doc = record["doc"]
    before = copy.deepcopy(doc)
    if "error" in record:
        with pytest.raises((patch.InvalidPatch, patch.PatchDoesNotApply)):
            patch.apply(doc, record["patch"])
    else:
        out = patch.apply(doc, record["patch"])
        if "expected" in record:
            assert same(out, record["expected"])
    assert same(doc, before), "the copying mode must never mutate its input"


@pytest.mark.parametrize("record", CASES)
def test_python_objects_in_place(record: dict[str, Any], same: Callable[[Any, Any], bool]) -> None:
    doc = copy.deepcopy(record["doc"])
    if "error" in record:
        with pytest.raises((patch.InvalidPatch, patch.PatchDoesNotApply)):
            patch.apply(doc, record["patch"], in_place=True)
        assert same(doc, record["doc"]), "a failed in-place patch must change nothing"
    else:
        out = patch.apply(doc, record["patch"], in_place=True)
        if "expected" in record:
            assert same(out, record["expected"])


@pytest.mark.parametrize("record", CASES)
def test_json_text(record: dict[str, Any], same: Callable[[Any, Any], bool]) -> None:
    doc = json.dumps(record["doc"]).encode()
    patch_text = json.dumps(record["patch"]).encode()
    if "error" in record:
        with pytest.raises((patch.InvalidPatch, patch.PatchDoesNotApply)):
            patch.apply_json(doc, patch_text)
    else:
        out = json.loads(patch.apply_json(doc, patch_text))
        if "expected" in record:
            assert same(out, record["expected"])
