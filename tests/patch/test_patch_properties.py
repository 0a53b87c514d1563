"""Hypothesis: tether.patch against the `jsonpatch` reference, and diff round trips."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import jsonpointer
from hypothesis import given, note
from hypothesis import strategies as st
from patch_json import json_same
from tether import patch

KEYS = st.sampled_from(["a", "b", "c", "~", "/", "~1", "-", "0", "1", "", "a/b~c"])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=3)
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.sampled_from([0.0, 1.0, -0.0, 2.5])
    | st.text(alphabet="ab~/", max_size=3)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _pointers(doc: Any, prefix: str = "") -> list[str]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _pointers(v, f"{prefix}/{_escape(k)}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _pointers(v, f"{prefix}/{i}")
        out.append(f"{prefix}/-")
        out.append(f"{prefix}/{len(doc)}")
    return out


def _value_at(doc: Any, pointer: str) -> Any:
    try:
        value = jsonpointer.resolve_pointer(doc, pointer)
    except jsonpointer.JsonPointerException:
        return None
    # `/-` resolves to jsonpointer's EndOfList marker, which is not JSON.
    return None if isinstance(value, jsonpointer.EndOfList) else copy.deepcopy(value)


ODD_TOKENS = ["01", "-0", "+1", " 1", "", "99999999999999999999", "-", "x", "~0", "~1"]


@st.composite
def doc_and_patch(draw: st.DrawFn) -> tuple[Any, list[dict[str, Any]]]:
    doc = draw(JSON)
    known = _pointers(doc)
    pointer = st.sampled_from(known) | st.builds(
        lambda base, tok: f"{base}/{tok}", st.sampled_from(known), st.sampled_from(ODD_TOKENS)
    )
    op = st.fixed_dictionaries(
        {
            "op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]),
            "path": pointer,
            "from": pointer,
            "value": JSON | st.sampled_from(known).map(lambda p: _value_at(doc, p)),
        }
    )
    # Now and then a member goes missing (a malformed patch).
    dropped = st.sampled_from(["from", "value", "path"])
    op = st.tuples(op, st.integers(0, 19), dropped).map(
        lambda t: {k: v for k, v in t[0].items() if not (t[1] == 0 and k == t[2])}
    )
    return doc, draw(st.lists(op, min_size=1, max_size=5))


def _reference(doc: Any, ops: list[dict[str, Any]]) -> tuple[bool, Any]:
    try:
        return True, jsonpatch.apply_patch(doc, ops)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
        return False, None


@given(doc_and_patch())
def test_same_result_as_jsonpatch_or_both_refuse(case: tuple[Any, list[dict[str, Any]]]) -> None:
    doc, ops = case
    before = copy.deepcopy(doc)
    ref_ok, ref_out = _reference(doc, copy.deepcopy(ops))
    try:
        out = patch.apply(doc, ops)
        ok = True
    except patch.PatchError as e:
        note(f"tether refused: {type(e).__name__}: {e}")
        ok, out = False, None
    assert ok == ref_ok, (ok, ref_ok)
    if ok:
        assert json_same(out, ref_out)
    assert json_same(doc, before)

    # In place: the same outcome, and a refusal leaves the document exactly as it was.
    target = copy.deepcopy(doc)
    try:
        out_in_place = patch.apply(target, ops, in_place=True)
        assert ok and json_same(out_in_place, ref_out)
    except patch.PatchError:
        assert not ok
        assert json_same(target, before)
        assert json.dumps(target) == json.dumps(before), "member order changed"

    # JSON text: the serde_json representation of the same engine agrees.
    try:
        text = patch.apply_json(json.dumps(doc).encode(), json.dumps(ops).encode())
        assert ok and json_same(json.loads(text), ref_out)
    except patch.PatchError:
        assert not ok


@given(JSON, JSON)
def test_diff_round_trips(old: Any, new: Any) -> None:
    ops = patch.diff(old, new)
    assert json_same(patch.apply(old, ops), new)
    assert patch.diff(new, new) == []
    text = patch.apply_json(json.dumps(old).encode(), json.dumps(ops).encode())
    assert json_same(json.loads(text), new)
    # The reference library agrees on what the diff means.
    assert json_same(jsonpatch.apply_patch(old, ops), new)
