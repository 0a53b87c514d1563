"""tether.patch on Python objects and JSON text: modes, errors, aliasing, atomicity."""

from __future__ import annotations

import collections
import copy
import json
import typing
from collections.abc import Callable
from typing import Any

import pytest
from tether import patch
from tether.errors import TetherError


def test_copying_mode_shares_scalars_and_copies_containers() -> None:
    doc = {"k": "a string value", "n": 10**30, "list": [1, {"x": 1.5}], "obj": {"y": None}}
    before = copy.deepcopy(doc)
    out = patch.apply(doc, [{"op": "replace", "path": "/obj/y", "value": 2}])
    assert out["k"] is doc["k"]
    assert out["n"] is doc["n"]
    assert out["list"][1]["x"] is doc["list"][1]["x"]
    assert out["list"] is not doc["list"] and out["list"][1] is not doc["list"][1]
    assert out["obj"] is not doc["obj"]
    assert doc == before
    assert out == {"k": "a string value", "n": 10**30, "list": [1, {"x": 1.5}], "obj": {"y": 2}}


def test_in_place_mutates_and_returns_the_same_object() -> None:
    doc: dict[str, Any] = {"a": [1]}
    out = patch.apply(doc, [{"op": "add", "path": "/a/-", "value": 2}], in_place=True)
    assert out is doc and doc == {"a": [1, 2]}
    # A root replacement returns the new root; the caller's object is left alone.
    out = patch.apply(doc, [{"op": "replace", "path": "", "value": [0]}], in_place=True)
    assert out == [0] and doc == {"a": [1, 2]}


ROLLBACK_PATCH = [
    {"op": "remove", "path": "/z"},
    {"op": "remove", "path": "/m/x"},
    {"op": "add", "path": "/m/x", "value": 5},
    {"op": "add", "path": "/a/0", "value": 0},
    {"op": "remove", "path": "/a/1"},
    {"op": "replace", "path": "/a/1", "value": None},
    {"op": "replace", "path": "/m/y", "value": [7]},
    {"op": "move", "from": "/a/2", "path": "/new"},
    {"op": "move", "from": "/m", "path": "/a/0"},
    {"op": "copy", "from": "/a", "path": "/a2"},
    {"op": "add", "path": "/z", "value": "back"},
    {"op": "test", "path": "/z", "value": "not back"},
]


def test_in_place_failure_rolls_back_exactly() -> None:
    inner = {"k": "v"}
    doc = {"z": 1, "a": [1, 2, inner], "m": {"x": 1, "y": 2, "w": 3}, "last": True}
    snapshot = copy.deepcopy(doc)
    ids = (id(doc["a"]), id(doc["m"]), id(inner))
    with pytest.raises(patch.PatchDoesNotApply) as info:
        patch.apply(doc, ROLLBACK_PATCH, in_place=True)
    assert info.value.op_index == 11 and info.value.path == "/z"
    assert doc == snapshot
    # Order of members, not just equality, and the very same container objects.
    assert list(doc) == ["z", "a", "m", "last"]
    assert list(doc["m"]) == ["x", "y", "w"]
    assert (id(doc["a"]), id(doc["m"]), id(doc["a"][2])) == ids


def test_failed_move_in_place_restores_the_source() -> None:
    doc = {"a": {"b": 1}, "c": 2, "list": [1, 2, 3]}
    for bad in (
        [{"op": "move", "from": "/a/b", "path": "/missing/x"}],
        [{"op": "move", "from": "/list/0", "path": "/list/7"}],
        [{"op": "move", "from": "/a", "path": "/c/x"}],
    ):
        with pytest.raises(patch.PatchDoesNotApply):
            patch.apply(doc, bad, in_place=True)
        assert doc == {"a": {"b": 1}, "c": 2, "list": [1, 2, 3]}
        assert list(doc) == ["a", "c", "list"]


def test_patch_values_are_never_aliased() -> None:
    value = {"deep": [1, 2]}
    ops = [
        {"op": "add", "path": "/x", "value": value},
        {"op": "add", "path": "/x/deep/-", "value": 3},
    ]
    for in_place in (False, True):
        doc: dict[str, Any] = {}
        out = patch.apply(doc, ops, in_place=in_place)
        assert out == {"x": {"deep": [1, 2, 3]}}
        assert value == {"deep": [1, 2]}, "a later op changed the caller's patch"
        assert out["x"] is not value


def test_copy_is_deep() -> None:
    out = patch.apply(
        {"a": {"b": [1]}},
        [{"op": "copy", "from": "/a", "path": "/c"}, {"op": "add", "path": "/c/b/-", "value": 2}],
    )
    assert out == {"a": {"b": [1]}, "c": {"b": [1, 2]}}


def test_error_hierarchy_and_location() -> None:
    assert issubclass(patch.PatchError, TetherError)
    for cls in (patch.InvalidPatch, patch.PatchDoesNotApply, patch.InvalidDocument):
        assert issubclass(cls, patch.PatchError)
    assert not issubclass(patch.InvalidPatch, patch.PatchDoesNotApply)
    with pytest.raises(patch.InvalidPatch) as bad:
        patch.apply({}, [{"op": "add", "path": "/a", "value": 1}, {"op": "add", "path": "b"}])
    assert (bad.value.op_index, bad.value.path) == (1, "b")
    with pytest.raises(patch.InvalidPatch) as bad:
        patch.apply({}, {"op": "add"})  # type: ignore[arg-type]
    assert (bad.value.op_index, bad.value.path) == (None, None)
    with pytest.raises(patch.PatchDoesNotApply) as miss:
        patch.apply(
            {"a": [1]},
            [{"op": "test", "path": "/a", "value": [1]}, {"op": "remove", "path": "/a/1"}],
        )
    assert (miss.value.op_index, miss.value.path) == (1, "/a/1")
    assert miss.value.code == "index_out_of_range"


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda: patch.apply({}, {}), "patch_not_array"),
        (lambda: patch.apply({}, [1]), "op_not_object"),
        (lambda: patch.apply({}, [{"op": "add", "path": "/a"}]), "missing_member"),
        (lambda: patch.apply({}, [{"op": "x", "path": "/a"}]), "unknown_op"),
        (lambda: patch.apply({}, [{"op": "remove", "path": "/a~2"}]), "bad_pointer"),
        (lambda: patch.apply({}, [{"op": "move", "from": "", "path": "/a"}]), "move_into_child"),
        (lambda: patch.apply({}, [{"op": "remove", "path": "/a"}]), "member_not_found"),
        (lambda: patch.apply([], [{"op": "add", "path": "/01", "value": 1}]), "invalid_index"),
        (lambda: patch.apply([], [{"op": "add", "path": "/1", "value": 1}]), "index_out_of_range"),
        (lambda: patch.apply([1], [{"op": "remove", "path": "/-"}]), "end_of_array"),
        (lambda: patch.apply(1, [{"op": "add", "path": "/a", "value": 1}]), "not_a_container"),
        (lambda: patch.apply({}, [{"op": "remove", "path": ""}]), "remove_root"),
        (lambda: patch.apply({}, [{"op": "test", "path": "", "value": []}]), "test_failed"),
        (lambda: patch.apply((), []), "not_json"),
        (lambda: patch.apply({}, [{"op": "add", "path": "/a", "value": {1}}]), "not_json"),
        (lambda: patch.apply_json(b"[", b"[]"), "invalid_json"),
    ],
)
def test_error_codes(call: Callable[[], object], code: str) -> None:
    with pytest.raises(patch.PatchError) as info:
        call()
    assert info.value.code == code
    assert code in patch.ERROR_CODES


@pytest.mark.parametrize(
    "ops",
    [
        [{"path": "/a"}],
        [{"op": 1, "path": "/a"}],
        [{"op": "add", "value": 1}],
        [{"op": "add", "path": 1, "value": 1}],
        [{"op": "add", "path": "/a"}],
        [{"op": "replace", "path": "/a"}],
        [{"op": "test", "path": "/a"}],
        [{"op": "move", "path": "/a"}],
        [{"op": "copy", "path": "/a", "from": None}],
        [{"op": "add", "path": "a", "value": 1}],
        [{"op": "add", "path": "/a~2", "value": 1}],
        [{"op": "add", "path": "/a~", "value": 1}],
        [{"op": "increment", "path": "/a"}],
        ["not an object"],
        [["add", "/a", 1]],
    ],
)
def test_malformed(ops: list[Any]) -> None:
    doc = {"a": {"b": 1}}
    with pytest.raises(patch.InvalidPatch):
        patch.apply(doc, ops)
    with pytest.raises(patch.InvalidPatch):
        patch.apply_json(json.dumps(doc).encode(), json.dumps(ops).encode())


def test_patch_must_be_a_plain_list() -> None:
    op = {"op": "add", "path": "/a", "value": 1}
    with pytest.raises(patch.InvalidPatch, match="tuple"):
        patch.apply({}, (op,))  # type: ignore[arg-type]

    class OpList(list[Any]):
        pass

    with pytest.raises(patch.InvalidPatch, match="subclass"):
        patch.apply({}, OpList([op]))
    with pytest.raises(patch.InvalidPatch, match="OrderedDict"):
        patch.apply({}, [collections.OrderedDict(op)])


def test_agui_mode_drops_unknown_ops_with_a_warning() -> None:
    ops = [
        {"op": "increment", "path": "/n"},
        {"op": "replace", "path": "/n", "value": 2, "extra": {"kept": True}},
    ]
    applied = patch.apply_detailed({"n": 1}, ops, mode="agui")
    assert applied.document == {"n": 2}
    expected = patch.PatchWarning(0, "unknown_op", 'unknown op "increment" dropped')
    assert applied.warnings == (expected,)
    assert all(w.code in patch.WARNING_CODES for w in applied.warnings)
    out, warnings = patch.apply_json_detailed(b'{"n": 1}', json.dumps(ops).encode(), mode="agui")
    assert json.loads(out) == {"n": 2} and warnings == applied.warnings
    with pytest.raises(patch.InvalidPatch):
        patch.apply({"n": 1}, ops)  # strict is the default
    with pytest.raises(ValueError, match="mode"):
        patch.apply({}, [], mode="lenient")  # type: ignore[arg-type]


DROPS_THEN_FAILS = [
    {"op": "increment", "path": "/n"},
    {"op": "replace", "path": "/n", "value": 2},
    {"op": "decrement", "path": "/n"},
    {"op": "remove", "path": "/missing"},
]


@pytest.mark.parametrize("form", ["copy", "in_place", "json"])
def test_agui_errors_carry_the_drop_warnings_in_order(form: str) -> None:
    def run(ops: list[Any]) -> None:
        doc = {"n": 1}
        if form == "json":
            patch.apply_json_detailed(
                json.dumps(doc).encode(), json.dumps(ops).encode(), mode="agui"
            )
        else:
            patch.apply_detailed(doc, ops, mode="agui", in_place=form == "in_place")
        raise AssertionError("the patch applied")

    with pytest.raises(patch.PatchDoesNotApply) as miss:
        run(DROPS_THEN_FAILS)
    assert [(w.op_index, w.code) for w in miss.value.warnings] == [
        (0, "unknown_op"),
        (2, "unknown_op"),
    ]
    assert all(isinstance(w, patch.PatchWarning) for w in miss.value.warnings)
    assert miss.value.op_index == 3 and miss.value.code == "member_not_found"
    # A malformed operation after a drop: the drop is still reported.
    with pytest.raises(patch.InvalidPatch) as bad:
        run([DROPS_THEN_FAILS[0], {"op": "add", "path": "n", "value": 1}])
    assert [w.op_index for w in bad.value.warnings] == [0]
    # Nothing dropped (or strict mode): no warnings.
    with pytest.raises(patch.PatchDoesNotApply) as plain:
        run([{"op": "remove", "path": "/missing"}])
    assert plain.value.warnings == ()


def test_patch_warnings_are_values() -> None:
    w = patch.PatchWarning(1, "unknown_op", "it's gone")
    assert (w.op_index, w.code, w.message) == (1, "unknown_op", "it's gone")
    assert w == patch.PatchWarning(1, "unknown_op", "it's gone") and len({w, w}) == 1
    assert repr(w) == "PatchWarning(op_index=1, code='unknown_op', message='it\\'s gone')"
    assert patch.PatchError.warnings == ()


def test_apply_json_keeps_big_integers_and_order() -> None:
    doc = b'{"z": 1, "big": 123456789012345678901234567890123, "a": -98765432109876543210.5}'
    ops = (
        b'[{"op": "copy", "from": "/big", "path": "/copy"},'
        b' {"op": "add", "path": "/m", "value": 340282366920938463463374607431768211457}]'
    )
    out = patch.apply_json(doc, ops)
    assert out == (
        b'{"z":1,"big":123456789012345678901234567890123,"a":-98765432109876543210.5,'
        b'"copy":123456789012345678901234567890123,"m":340282366920938463463374607431768211457}'
    )
    test_big = b'[{"op": "test", "path": "/big", "value": 123456789012345678901234567890124}]'
    with pytest.raises(patch.PatchDoesNotApply):
        patch.apply_json(doc, test_big)


def test_apply_json_keeps_the_digits_of_every_number() -> None:
    doc = b'{"a":0.1000,"b":-0,"c":1.5e-3,"d":123456789012345678901234567890.123456789012345678901}'
    assert patch.apply_json(doc, b"[]") == doc
    assert patch.apply_json(b'{"e":1E5}', b"[]") == b'{"e":1e+5}'


def test_apply_json_rejects_bad_text() -> None:
    with pytest.raises(patch.InvalidDocument):
        patch.apply_json(b"{", b"[]")
    with pytest.raises(patch.InvalidPatch):
        patch.apply_json(b"{}", b"[{]")
    with pytest.raises(patch.InvalidDocument):
        patch.apply_json(b"\xff", b"[]")


def test_apply_json_takes_str_as_well_as_bytes() -> None:
    ops = '[{"op": "add", "path": "/é", "value": "ünï"}]'
    out = patch.apply_json('{"a": 1}', ops)
    assert out == '{"a":1,"é":"ünï"}' and isinstance(out, str)
    assert patch.apply_json(b'{"a": 1}', ops) == out.encode()
    assert patch.apply_json(bytearray(b'{"a": 1}'), ops.encode()) == out.encode()
    text, warnings = patch.apply_json_detailed(
        '{"n": 1}', '[{"op": "x", "path": "/n"}]', mode="agui"
    )
    assert text == '{"n":1}' and [w.code for w in warnings] == ["unknown_op"]
    with pytest.raises(patch.PatchDoesNotApply):
        patch.apply_json("{}", '[{"op": "remove", "path": "/a"}]')
    with pytest.raises(patch.InvalidDocument) as info:
        patch.apply_json("{", "[]")
    assert info.value.code == "invalid_json"


@pytest.mark.parametrize(
    "bad",
    [{"a": 1}, 7, None, memoryview(b"{}"), "\ud800"],
    ids=["dict", "int", "none", "memoryview", "lone_surrogate"],  # the same in every process
)
def test_apply_json_refuses_other_types_with_a_typed_error(bad: Any) -> None:
    with pytest.raises(patch.InvalidDocument) as doc_info:
        patch.apply_json(bad, b"[]")
    assert doc_info.value.code == "invalid_json"
    with pytest.raises(patch.InvalidPatch) as patch_info:
        patch.apply_json(b"{}", bad)
    assert patch_info.value.code == "invalid_json"


def test_python_big_integers_survive() -> None:
    big = 2**200 + 1
    out = patch.apply({"a": big}, [{"op": "copy", "from": "/a", "path": "/b"}])
    assert out == {"a": big, "b": big} and out["b"] is big
    with pytest.raises(patch.PatchDoesNotApply):
        patch.apply({"a": big}, [{"op": "test", "path": "/a", "value": float(big)}])
    patch.apply({"a": 2**60}, [{"op": "test", "path": "/a", "value": float(2**60)}])


class MyDict(dict[str, Any]):
    pass


class MyList(list[Any]):
    pass


@pytest.mark.parametrize(
    "doc",
    [
        collections.OrderedDict(a=1),
        {"a": MyDict()},
        {"a": [MyList()]},
        {"a": (1, 2)},
        {"a": {1, 2}},
        {"a": b"bytes"},
        {1: "int key"},
        {"a": object()},
        {"a": collections.defaultdict(list)},
    ],
)
def test_non_json_documents_are_refused(doc: Any) -> None:
    with pytest.raises(patch.InvalidDocument, match=r"not JSON|keys must be str"):
        patch.apply(doc, [])
    with pytest.raises(patch.InvalidDocument):
        patch.diff(doc, {})


@pytest.mark.parametrize("value", [(1,), {1, 2}, MyDict(), [MyList()], {"k": object()}, {2: 1}])
def test_non_json_patch_values_are_refused(value: Any) -> None:
    for op in ("add", "replace", "test"):
        with pytest.raises(patch.InvalidPatch) as info:
            patch.apply({"a": 1}, [{"op": op, "path": "/a", "value": value}])
        assert info.value.op_index == 0


NON_FINITE = [float("nan"), float("inf"), float("-inf")]


@pytest.mark.parametrize("bad", NON_FINITE, ids=repr)
@pytest.mark.parametrize(
    "where",
    [lambda v: v, lambda v: {"a": v}, lambda v: {"a": [1, {"b": v}]}, lambda v: [0.5, v]],
    ids=["root", "member", "nested", "element"],
)
def test_nan_and_infinity_in_a_document_are_refused(bad: float, where: Any) -> None:
    doc = where(bad)
    for call in (
        lambda: patch.apply(doc, []),
        lambda: patch.apply_detailed(doc, [], mode="agui"),
        lambda: patch.diff(doc, {}),
        lambda: patch.diff({}, doc),
    ):
        with pytest.raises(patch.InvalidDocument, match="not a JSON number") as info:
            call()
        assert info.value.code == "non_finite_number"
        assert "non_finite_number" in patch.ERROR_CODES


@pytest.mark.parametrize("bad", NON_FINITE, ids=repr)
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("mode", ["strict", "agui"])
def test_nan_and_infinity_in_a_patch_value_are_refused(
    bad: float, in_place: bool, mode: patch.Mode
) -> None:
    for op in ("add", "replace", "test"):
        for value in (bad, {"x": [bad]}):
            doc = {"a": 1}
            with pytest.raises(patch.InvalidPatch) as info:
                patch.apply_detailed(
                    doc, [{"op": op, "path": "/a", "value": value}], mode=mode, in_place=in_place
                )
            assert (info.value.op_index, info.value.path) == (0, "/a")
            assert info.value.code == "non_finite_number"
            assert doc == {"a": 1}


@pytest.mark.parametrize("bad", NON_FINITE, ids=repr)
def test_in_place_refuses_nan_where_it_compares_or_copies(bad: float) -> None:
    doc = {"a": {"b": bad}, "n": 1}
    for ops in (
        [{"op": "test", "path": "/a/b", "value": 1}],
        [{"op": "copy", "from": "/a", "path": "/c"}],
        [{"op": "add", "path": "/a/b/x", "value": 1}],  # walks into the float
    ):
        with pytest.raises(patch.InvalidDocument) as info:
            patch.apply(doc, ops, in_place=True)
        assert info.value.code == "non_finite_number"
        assert set(doc) == {"a", "n"}


def test_in_place_touches_only_what_it_walks() -> None:
    # In place, unrelated non-JSON parts are not visited (no whole-document scan), but anything
    # the patch walks or copies is checked.
    doc = {"ok": {"x": 1}, "odd": (1, 2)}
    patch.apply(doc, [{"op": "replace", "path": "/ok/x", "value": 2}], in_place=True)
    assert doc["ok"] == {"x": 2}
    with pytest.raises(patch.InvalidDocument):
        patch.apply(doc, [{"op": "copy", "from": "/odd", "path": "/c"}], in_place=True)
    assert "c" not in doc


def test_deep_nesting_is_refused_not_a_crash() -> None:
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(patch.InvalidDocument, match="deeper"):
        patch.apply(deep, [])
    with pytest.raises(patch.InvalidPatch, match="deeper"):
        patch.apply({}, [{"op": "add", "path": "/a", "value": deep}])
    with pytest.raises(patch.InvalidDocument, match="deeper"):
        patch.diff(deep, [])


def test_diff_round_trip_examples(same: Callable[[Any, Any], bool]) -> None:
    cases = [
        ({"a": True}, {"a": 1}),
        ({"a": 1}, {"a": 1.0}),
        ({"a~b/c": [1, 2]}, {"a~b/c": [1, 2, 3], "/": {"~": 0}}),
        ([1, 2, 3], [0, 1, 2, 3]),
        ({"x": [1, {"y": 2}]}, {"x": [{"y": 3}]}),
        ({}, []),
        (None, {"a": None}),
    ]
    for old, new in cases:
        ops = patch.diff(old, new)
        out = patch.apply(old, ops)
        assert same(out, new), (old, new, ops)
    assert patch.diff({"a": True}, {"a": 1}) == [{"op": "replace", "path": "/a", "value": 1}]
    assert patch.diff({"a/b": 1}, {}) == [{"op": "remove", "path": "/a~1b"}]
    assert patch.diff([1], [1, 2]) == [{"op": "add", "path": "/-", "value": 2}]


def test_diff_never_aliases_new() -> None:
    new = {"a": {"b": [1]}}
    ops = patch.diff({}, new)
    assert ops[0]["value"] == new["a"] and ops[0]["value"] is not new["a"]


def test_mode_literal_matches_the_engine() -> None:
    modes = typing.get_args(patch.Mode)
    assert set(modes) == {"strict", "agui"}
    for mode in modes:
        assert patch.apply({}, [], mode=mode) == {}
        assert patch.apply_json(b"{}", b"[]", mode=mode) == b"{}"
    assert len(set(patch.ERROR_CODES)) == len(patch.ERROR_CODES)
    assert patch.WARNING_CODES == ("unknown_op",)


def test_lone_surrogates_are_not_json_text() -> None:
    with pytest.raises(patch.InvalidPatch) as info:
        patch.apply({}, [{"op": "add", "path": "/\ud800", "value": 1}])
    assert (info.value.code, info.value.op_index) == ("not_json", 0)
    with pytest.raises(patch.InvalidDocument) as doc_info:
        patch.diff({"\ud800": 1}, {})
    assert doc_info.value.code == "not_json"
    # A surrogate key elsewhere in the object does not stop removing another member.
    doc = {"\udc00": 1, "a": 2, "z": 3}
    out = patch.apply(doc, [{"op": "remove", "path": "/a"}], in_place=True)
    assert list(out) == ["\udc00", "z"]
