"""The pitfalls issue 2 lists, each checked through every representation of the one engine."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from tether import patch

Runner = Callable[[Any, list[dict[str, Any]]], Any]


def _copying(doc: Any, ops: list[dict[str, Any]]) -> Any:
    before = copy.deepcopy(doc)
    try:
        return patch.apply(doc, ops)
    finally:
        assert doc == before


def _in_place(doc: Any, ops: list[dict[str, Any]]) -> Any:
    target = copy.deepcopy(doc)
    try:
        return patch.apply(target, ops, in_place=True)
    except patch.PatchError:
        assert json.dumps(target) == json.dumps(doc), "a failed patch changed the document"
        raise


def _json_text(doc: Any, ops: list[dict[str, Any]]) -> Any:
    return json.loads(patch.apply_json(json.dumps(doc).encode(), json.dumps(ops).encode()))


RUNNERS = pytest.mark.parametrize(
    "run", [_copying, _in_place, _json_text], ids=lambda f: f.__name__
)
DOC = {"a": [10, 20], "o": {"-": 1, "01": 2, "": 3}}


@RUNNERS
@pytest.mark.parametrize(
    "op",
    [
        {"op": "remove", "path": "/a/-"},
        {"op": "replace", "path": "/a/-", "value": 1},
        {"op": "test", "path": "/a/-", "value": 20},
        {"op": "add", "path": "/a/-/x", "value": 1},
        {"op": "copy", "from": "/a/-", "path": "/b"},
        {"op": "move", "from": "/a/-", "path": "/b"},
    ],
)
def test_dash_only_as_the_last_token_of_an_add_target(run: Runner, op: dict[str, Any]) -> None:
    with pytest.raises(patch.PatchDoesNotApply):
        run(DOC, [op])


@RUNNERS
def test_dash_appends_for_add_move_and_copy(run: Runner) -> None:
    ops = [
        {"op": "add", "path": "/a/-", "value": 30},
        {"op": "copy", "from": "/a/0", "path": "/a/-"},
        {"op": "move", "from": "/o/-", "path": "/a/-"},
    ]
    assert run(DOC, ops) == {"a": [10, 20, 30, 10, 1], "o": {"01": 2, "": 3}}


@RUNNERS
@pytest.mark.parametrize("token", ["01", "+1", "-0", "-1", " 1", "1 ", "", "1.0", "0x1", "1e0"])
@pytest.mark.parametrize("op", ["add", "remove", "replace", "test"])
def test_array_index_grammar(run: Runner, token: str, op: str) -> None:
    with pytest.raises(patch.PatchDoesNotApply):
        run(DOC, [{"op": op, "path": f"/a/{token}", "value": 10}])


@RUNNERS
def test_huge_index_does_not_overflow(run: Runner) -> None:
    for token in ["18446744073709551616", "9" * 400]:
        with pytest.raises(patch.PatchDoesNotApply) as info:
            run(DOC, [{"op": "add", "path": f"/a/{token}", "value": 1}])
        assert info.value.code == "index_out_of_range"


@RUNNERS
def test_odd_tokens_are_plain_keys_on_objects(run: Runner) -> None:
    ops = [
        {"op": "replace", "path": "/o/-", "value": 5},
        {"op": "remove", "path": "/o/01"},
        {"op": "test", "path": "/o/", "value": 3},
    ]
    assert run(DOC, ops)["o"] == {"-": 5, "": 3}


@RUNNERS
@pytest.mark.parametrize("pointer", ["/a~2", "/a~", "/~", "/x/~a", "a", "#/a"])
def test_bad_escapes_and_syntax_are_malformed(run: Runner, pointer: str) -> None:
    with pytest.raises(patch.InvalidPatch) as info:
        run(DOC, [{"op": "add", "path": pointer, "value": 1}])
    assert info.value.code == "bad_pointer"
    with pytest.raises(patch.InvalidPatch):
        run(DOC, [{"op": "copy", "from": pointer, "path": "/z"}])


@RUNNERS
def test_escapes_decode_in_order(run: Runner) -> None:
    out = run({"~1": 1, "a/b": 2, "m~n": 3}, [{"op": "remove", "path": "/~01"}])
    assert out == {"a/b": 2, "m~n": 3}
    out = run({"a/b": 2, "m~n": 3}, [{"op": "move", "from": "/a~1b", "path": "/m~0n"}])
    assert out == {"m~n": 2}


@RUNNERS
def test_move_into_own_child_is_refused_but_onto_itself_is_fine(run: Runner) -> None:
    doc = {"a": {"b": {}}, "ab": {}}
    # Well formed (RFC 6902 4.4 forbids the move, not the operation's shape): it does not apply.
    with pytest.raises(patch.PatchDoesNotApply) as info:
        run(doc, [{"op": "move", "from": "/a", "path": "/a/b/c"}])
    assert info.value.code == "move_into_child"
    assert (info.value.op_index, info.value.path) == (0, "/a/b/c")
    assert run(doc, [{"op": "move", "from": "/a", "path": "/a"}]) == doc
    # `/a` is not a token-prefix of `/ab/x`.
    assert run(doc, [{"op": "move", "from": "/a", "path": "/ab/x"}]) == {"ab": {"x": {"b": {}}}}
    with pytest.raises(patch.PatchDoesNotApply):
        run(doc, [{"op": "move", "from": "/missing", "path": "/missing"}])


@RUNNERS
@pytest.mark.parametrize(
    ("value", "literal"),
    [(True, 1), (1, True), (False, 0), (0, False), (1, "1"), (None, 0), ([True], [1])],
)
def test_booleans_are_not_numbers(run: Runner, value: Any, literal: Any) -> None:
    with pytest.raises(patch.PatchDoesNotApply):
        run({"v": value}, [{"op": "test", "path": "/v", "value": literal}])


@RUNNERS
def test_numbers_compare_by_value(run: Runner) -> None:
    run({"v": 1}, [{"op": "test", "path": "/v", "value": 1.0}])
    run({"v": {"x": 1, "y": [2.0]}}, [{"op": "test", "path": "/v", "value": {"y": [2], "x": 1.0}}])


def test_nan_is_refused_not_compared() -> None:
    # JSON has no NaN: neither the document nor the patch value may carry one, so `test` never
    # gets to compare NaN with itself.
    nan = float("nan")
    for in_place in (False, True):
        with pytest.raises(patch.InvalidDocument) as doc_info:
            patch.apply({"v": nan}, [{"op": "test", "path": "/v", "value": 1}], in_place=in_place)
        assert doc_info.value.code == "non_finite_number"
        with pytest.raises(patch.InvalidPatch) as patch_info:
            patch.apply({"v": 1}, [{"op": "test", "path": "/v", "value": nan}], in_place=in_place)
        assert patch_info.value.code == "non_finite_number"


@RUNNERS
def test_integers_beyond_64_bits_survive(run: Runner) -> None:
    big = 2**64 + 1
    out = run({"a": big, "b": -(2**100)}, [{"op": "copy", "from": "/a", "path": "/c"}])
    assert out == {"a": big, "b": -(2**100), "c": big}
    with pytest.raises(patch.PatchDoesNotApply):
        run({"a": big}, [{"op": "test", "path": "/a", "value": big - 1}])


@RUNNERS
def test_insertion_order_is_kept(run: Runner) -> None:
    doc = {"z": 0, "y": 1, "x": 2}
    ops = [
        {"op": "replace", "path": "/y", "value": 10},
        {"op": "add", "path": "/z", "value": 20},
        {"op": "add", "path": "/w", "value": 30},
    ]
    assert list(run(doc, ops).items()) == [("z", 20), ("y", 10), ("x", 2), ("w", 30)]


@pytest.mark.parametrize("in_place", [False, True])
def test_values_from_a_patch_are_never_aliased(in_place: bool) -> None:
    value: dict[str, Any] = {"list": [1]}
    ops = [
        {"op": "add", "path": "/v", "value": value},
        {"op": "replace", "path": "/w", "value": value},
        {"op": "add", "path": "/v/list/-", "value": 2},
        {"op": "add", "path": "/w/list/-", "value": 3},
    ]
    out = patch.apply({"w": None}, ops, in_place=in_place)
    assert out == {"w": {"list": [1, 3]}, "v": {"list": [1, 2]}}
    assert value == {"list": [1]}
    assert ops[0]["value"] is value


class Sub(dict[str, Any]):
    pass


class Seq(list[Any]):
    pass


@pytest.mark.parametrize("bad", [Sub(), Seq(), (), {1}, 1j, b"", bytearray(), object()])
def test_subclasses_and_non_json_values_get_a_clear_error(bad: Any) -> None:
    with pytest.raises(patch.InvalidDocument, match=type(bad).__name__):
        patch.apply({"k": bad}, [])
    with pytest.raises(patch.InvalidPatch, match=type(bad).__name__) as info:
        patch.apply({}, [{"op": "add", "path": "/k", "value": bad}])
    assert (info.value.op_index, info.value.path, info.value.code) == (0, "/k", "not_json")


def test_nan_in_json_text_is_refused_not_compared() -> None:
    # JSON text has no NaN: the third representation refuses it as invalid text.
    with pytest.raises(patch.InvalidDocument) as doc_info:
        patch.apply_json(b'{"v": NaN}', b'[{"op": "test", "path": "/v", "value": 1}]')
    assert doc_info.value.code == "invalid_json"
    with pytest.raises(patch.InvalidPatch) as patch_info:
        patch.apply_json(b'{"v": 1}', b'[{"op": "test", "path": "/v", "value": NaN}]')
    assert patch_info.value.code == "invalid_json"


@pytest.mark.parametrize("bad", [Sub(), Seq(), (), {1}, 1j, b"", object()])
def test_in_place_refuses_non_json_values_it_meets_and_changes_nothing(bad: Any) -> None:
    doc = {"ok": [1], "k": bad}
    ops = [
        {"op": "add", "path": "/ok/-", "value": 2},
        {"op": "add", "path": "/k/x", "value": 1},
    ]
    with pytest.raises(patch.InvalidDocument, match=type(bad).__name__) as info:
        patch.apply(doc, ops, in_place=True)
    assert (info.value.op_index, info.value.path, info.value.code) == (1, "/k/x", "not_json")
    assert doc["ok"] == [1] and doc["k"] is bad
    with pytest.raises(patch.InvalidDocument):
        patch.apply(doc, [{"op": "test", "path": "/k", "value": 1}], in_place=True)
    with pytest.raises(patch.InvalidDocument):
        patch.apply(doc, [{"op": "copy", "from": "/k", "path": "/c"}], in_place=True)
    assert list(doc) == ["ok", "k"]


def test_a_subclass_root_is_refused_in_every_mode() -> None:
    for root in (Sub(a=1), Seq([1])):
        for in_place in (False, True):
            with pytest.raises(patch.InvalidDocument, match="subclass"):
                patch.apply(root, [{"op": "add", "path": "/0", "value": 0}], in_place=in_place)
        assert root == (Sub(a=1) if isinstance(root, dict) else Seq([1]))
