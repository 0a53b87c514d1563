use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

fn apply(doc: &Value, patch: Value) -> Result<Value, PatchError> {
    let mut out = doc.clone();
    apply_value(&mut out, &patch, Mode::Strict).map(|w| {
        assert!(w.is_empty());
        out
    })
}

fn fails(doc: Value, patch: Value) -> PatchError {
    let mut out = doc.clone();
    let err = apply_value(&mut out, &patch, Mode::Strict).unwrap_err();
    assert!(ERROR_CODES.contains(&err.code), "{}", err.code);
    assert_eq!(out, doc, "a failed patch must leave the document unchanged");
    assert_eq!(
        serde_json::to_string(&out).unwrap(),
        serde_json::to_string(&doc).unwrap()
    );
    err
}

fn text(v: &Value) -> String {
    serde_json::to_string(v).unwrap()
}

#[test]
fn six_operations() {
    let doc = json!({"a": 1, "b": [1, 2, 3], "c": {"d": "x"}});
    let out = apply(
        &doc,
        json!([
            {"op": "add", "path": "/e", "value": {"f": [true]}},
            {"op": "remove", "path": "/a"},
            {"op": "replace", "path": "/b/1", "value": 20},
            {"op": "move", "from": "/c/d", "path": "/b/-"},
            {"op": "copy", "from": "/e", "path": "/g"},
            {"op": "test", "path": "/b", "value": [1, 20, 3, "x"]},
        ]),
    )
    .unwrap();
    assert_eq!(
        text(&out),
        r#"{"b":[1,20,3,"x"],"c":{},"e":{"f":[true]},"g":{"f":[true]}}"#
    );
}

#[test]
fn key_order_is_kept() {
    let doc = json!({"z": 1, "a": 2, "m": 3});
    let out = apply(&doc, json!([{"op": "replace", "path": "/a", "value": 9}])).unwrap();
    assert_eq!(text(&out), r#"{"z":1,"a":9,"m":3}"#);
    let out = apply(&doc, json!([{"op": "add", "path": "/b", "value": 0}])).unwrap();
    assert_eq!(text(&out), r#"{"z":1,"a":2,"m":3,"b":0}"#);
    let out = apply(&doc, json!([{"op": "remove", "path": "/z"}])).unwrap();
    assert_eq!(text(&out), r#"{"a":2,"m":3}"#);
}

#[test]
fn rollback_restores_order_and_values() {
    let doc = json!({"z": 1, "a": [1, 2, {"k": "v"}], "m": {"x": 1, "y": 2}});
    // Every primitive kind, then a failing test.
    let err = fails(
        doc,
        json!([
            {"op": "remove", "path": "/z"},
            {"op": "remove", "path": "/m/x"},
            {"op": "add", "path": "/m/x", "value": 5},
            {"op": "add", "path": "/a/0", "value": 0},
            {"op": "remove", "path": "/a/1"},
            {"op": "replace", "path": "/a/1", "value": null},
            {"op": "replace", "path": "/m/y", "value": [7]},
            {"op": "move", "from": "/a/2", "path": "/new"},
            {"op": "move", "from": "/m", "path": "/a/0"},
            {"op": "copy", "from": "/a", "path": "/a2"},
            {"op": "replace", "path": "", "value": {"root": true}},
            {"op": "add", "path": "/root2", "value": 1},
            {"op": "test", "path": "/root", "value": false},
        ]),
    );
    assert_eq!(err.kind, PatchErrorKind::DoesNotApply);
    assert_eq!(err.op_index, Some(12));
    assert_eq!(err.path.as_deref(), Some("/root"));
}

#[test]
fn failing_move_target_restores_source() {
    let doc = json!({"a": {"b": 1}, "list": [1, 2, 3]});
    fails(
        doc.clone(),
        json!([{"op": "move", "from": "/a/b", "path": "/nope/x"}]),
    );
    fails(
        doc.clone(),
        json!([{"op": "move", "from": "/list/0", "path": "/list/5"}]),
    );
    fails(
        doc,
        json!([{"op": "move", "from": "/list/1", "path": "/a/c"}, {"op": "remove", "path": "/q"}]),
    );
}

#[test]
fn malformed_versus_does_not_apply() {
    let doc = json!({"a": [1]});
    let m = |p: Value| {
        let e = fails(doc.clone(), p);
        assert_eq!(e.kind, PatchErrorKind::Malformed, "{e}");
        e
    };
    assert_eq!(m(json!({"op": "add"})).op_index, None);
    assert_eq!(
        m(json!([{"op": "add", "path": "/x", "value": 1}, 5])).op_index,
        Some(1)
    );
    m(json!([{"path": "/a"}]));
    m(json!([{"op": 1, "path": "/a"}]));
    m(json!([{"op": "add", "value": 1}]));
    m(json!([{"op": "add", "path": 3, "value": 1}]));
    m(json!([{"op": "add", "path": "/x"}]));
    m(json!([{"op": "test", "path": "/x"}]));
    m(json!([{"op": "move", "path": "/x"}]));
    m(json!([{"op": "copy", "path": "/x", "from": 1}]));
    m(json!([{"op": "add", "path": "a", "value": 1}]));
    m(json!([{"op": "add", "path": "/a~2", "value": 1}]));
    m(json!([{"op": "add", "path": "/a~", "value": 1}]));
    m(json!([{"op": "copy", "path": "/x", "from": "/~"}]));
    m(json!([{"op": "frobnicate", "path": "/a"}]));
    let e = m(json!([{"op": "nope", "path": "/a"}]));
    assert_eq!((e.path.as_deref(), e.code), (Some("/a"), "unknown_op"));
    assert_eq!(
        m(json!([{"op": "add", "path": "/a~2", "value": 1}])).code,
        "bad_pointer"
    );
    assert_eq!(
        m(json!([{"op": "add", "path": "/a"}])).code,
        "missing_member"
    );
    assert_eq!(
        m(json!([{"op": "add", "path": 1, "value": 1}])).code,
        "member_not_string"
    );
    assert_eq!(m(json!([1])).code, "op_not_object");
    assert_eq!(m(json!({})).code, "patch_not_array");
    // Malformed wins even when an earlier operation would not apply.
    m(json!([{"op": "remove", "path": "/missing"}, {"op": "add", "path": "x", "value": 1}]));

    let d = |p: Value| {
        let e = fails(doc.clone(), p);
        assert_eq!(e.kind, PatchErrorKind::DoesNotApply, "{e}");
        e
    };
    let e = d(json!([{"op": "remove", "path": "/b"}]));
    assert_eq!(
        (e.op_index, e.path.as_deref(), e.code),
        (Some(0), Some("/b"), "member_not_found")
    );
    assert_eq!(
        d(json!([{"op": "add", "path": "/a/01", "value": 1}])).code,
        "invalid_index"
    );
    assert_eq!(
        d(json!([{"op": "remove", "path": "/a/-"}])).code,
        "end_of_array"
    );
    assert_eq!(
        d(json!([{"op": "remove", "path": "/a/1"}])).code,
        "index_out_of_range"
    );
    assert_eq!(
        d(json!([{"op": "add", "path": "/a/0/x", "value": 1}])).code,
        "not_a_container"
    );
    assert_eq!(
        d(json!([{"op": "test", "path": "/a", "value": [2]}])).code,
        "test_failed"
    );
    d(json!([{"op": "add", "path": "/a/2", "value": 1}]));
    d(json!([{"op": "add", "path": "/b/c", "value": 1}]));
    d(json!([{"op": "replace", "path": "/b", "value": 1}]));
    d(json!([{"op": "test", "path": "/a/0", "value": 2}]));
    d(json!([{"op": "copy", "from": "/b", "path": "/c"}]));
    d(json!([{"op": "move", "from": "/b", "path": "/b"}]));
    assert_eq!(d(json!([{"op": "remove", "path": ""}])).code, "remove_root");
    d(json!([{"op": "add", "path": "/a/0/x", "value": 1}]));
    // A move into the value's own child is well formed; it cannot apply to any document.
    let e = d(json!([{"op": "move", "from": "/a", "path": "/a/0"}]));
    assert_eq!(
        (e.op_index, e.path.as_deref(), e.code),
        (Some(0), Some("/a/0"), "move_into_child")
    );
    let e = d(
        json!([{"op": "replace", "path": "/a/0", "value": 2}, {"op": "move", "from": "", "path": "/x"}]),
    );
    assert_eq!((e.op_index, e.code), (Some(1), "move_into_child"));
    // Malformed still wins over it: every operation is parsed before any applies.
    m(
        json!([{"op": "move", "from": "/a", "path": "/a/0"}, {"op": "add", "path": "x", "value": 1}]),
    );
}

#[test]
fn array_index_pitfalls() {
    let doc = json!({"a": [10, 20], "o": {"-": 1, "01": 2}});
    for bad in [
        "01",
        "+1",
        "-0",
        " 1",
        "",
        "1.0",
        "-1",
        "99999999999999999999999999",
    ] {
        for op in [
            json!({"op": "replace", "path": format!("/a/{bad}"), "value": 0}),
            json!({"op": "add", "path": format!("/a/{bad}"), "value": 0}),
            json!({"op": "remove", "path": format!("/a/{bad}")}),
            json!({"op": "test", "path": format!("/a/{bad}"), "value": 10}),
        ] {
            let e = fails(doc.clone(), json!([op]));
            assert_eq!(e.kind, PatchErrorKind::DoesNotApply);
        }
    }
    // `-` only as the last token of an add (or move/copy) target.
    for op in [
        json!({"op": "remove", "path": "/a/-"}),
        json!({"op": "replace", "path": "/a/-", "value": 1}),
        json!({"op": "test", "path": "/a/-", "value": 20}),
        json!({"op": "add", "path": "/a/-/x", "value": 1}),
        json!({"op": "copy", "from": "/a/-", "path": "/b"}),
        json!({"op": "move", "from": "/a/-", "path": "/b"}),
    ] {
        fails(doc.clone(), json!([op]));
    }
    let out = apply(
        &doc,
        json!([{"op": "copy", "from": "/a/0", "path": "/a/-"}]),
    )
    .unwrap();
    assert_eq!(out["a"], json!([10, 20, 10]));
    // On objects `-` and `01` are ordinary keys.
    let out = apply(
        &doc,
        json!([{"op": "replace", "path": "/o/-", "value": 5}, {"op": "remove", "path": "/o/01"}]),
    )
    .unwrap();
    assert_eq!(out["o"], json!({"-": 5}));
}

#[test]
fn move_rules() {
    let doc = json!({"a": {"b": 1}, "ab": 2});
    // from == path is a no-op.
    assert_eq!(
        apply(&doc, json!([{"op": "move", "from": "/a", "path": "/a"}])).unwrap(),
        doc
    );
    // `/a` is not a token-prefix of `/ab/x`... but /ab is a number, so that fails as not applying.
    let e = fails(
        doc.clone(),
        json!([{"op": "move", "from": "/a", "path": "/ab/x"}]),
    );
    assert_eq!(e.kind, PatchErrorKind::DoesNotApply);
    let out = apply(
        &doc,
        json!([{"op": "move", "from": "/a/b", "path": "/a/c"}]),
    )
    .unwrap();
    assert_eq!(text(&out), r#"{"a":{"c":1},"ab":2}"#);
    let list = json!([1, 2, 3]);
    assert_eq!(
        apply(&list, json!([{"op": "move", "from": "/0", "path": "/2"}])).unwrap(),
        json!([2, 3, 1])
    );
    assert_eq!(
        apply(&list, json!([{"op": "move", "from": "/0", "path": "/-"}])).unwrap(),
        json!([2, 3, 1])
    );
}

#[test]
fn test_compares_json_values() {
    let doc: Value = serde_json::from_str(
        r#"{"n": 1, "f": 1.0, "big": 123456789012345678901234567890, "t": true, "o": {"x": 1, "y": [1, 2]}}"#,
    )
    .unwrap();
    let ok = |p: &str, v: &str| {
        let patch: Value =
            serde_json::from_str(&format!(r#"[{{"op":"test","path":"{p}","value":{v}}}]"#))
                .unwrap();
        apply(&doc, patch).is_ok()
    };
    assert!(ok("/n", "1.0"));
    assert!(ok("/n", "1e0"));
    assert!(ok("/n", "0.1e1"));
    assert!(ok("/f", "1"));
    assert!(ok("/big", "123456789012345678901234567890"));
    assert!(ok("/big", "1.23456789012345678901234567890e29"));
    assert!(!ok("/big", "123456789012345678901234567891"));
    assert!(!ok("/t", "1"));
    assert!(!ok("/n", "true"));
    assert!(ok("/o", r#"{"y": [1, 2.0], "x": 1}"#));
    assert!(!ok("/o", r#"{"y": [2, 1], "x": 1}"#));
    assert!(!ok("/n", r#""1""#));
    assert!(ok("/n", "1"));
}

#[test]
fn big_integers_survive() {
    let doc: Value =
        serde_json::from_str(r#"{"a": 18446744073709551616123, "b": -1.5e400}"#).unwrap();
    let patch: Value =
        serde_json::from_str(r#"[{"op": "add", "path": "/c", "value": 340282366920938463463374607431768211457}, {"op": "copy", "from": "/a", "path": "/d"}]"#)
            .unwrap();
    let out = apply(&doc, patch).unwrap();
    assert_eq!(
        text(&out),
        r#"{"a":18446744073709551616123,"b":-1.5e+400,"c":340282366920938463463374607431768211457,"d":18446744073709551616123}"#
    );
}

#[test]
fn agui_mode_drops_unknown_ops_with_a_warning() {
    let mut doc = json!({"a": 1});
    let patch = json!([
        {"op": "increment", "path": "/a"},
        {"op": "replace", "path": "/a", "value": 2, "extra": "kept by the caller"},
        {"op": "unknown-without-path"},
    ]);
    let warnings = apply_value(&mut doc, &patch, Mode::AgUi).unwrap();
    assert_eq!(doc, json!({"a": 2}));
    assert_eq!(warnings.len(), 2);
    assert_eq!((warnings[0].op_index, warnings[0].code), (0, "unknown_op"));
    assert_eq!(warnings[1].op_index, 2);
    assert!(WARNING_CODES.contains(&warnings[0].code));
    // A failure in AG-UI mode still reports the original operation index.
    let e = apply_value(
        &mut doc,
        &json!([{"op": "x", "path": ""}, {"op": "remove", "path": "/q"}]),
        Mode::AgUi,
    )
    .unwrap_err();
    assert_eq!(e.op_index, Some(1));
    // Strict mode refuses the same patch as malformed.
    let e = apply_value(&mut doc, &patch, Mode::Strict).unwrap_err();
    assert_eq!((e.kind, e.op_index), (PatchErrorKind::Malformed, Some(0)));
    assert_eq!(doc, json!({"a": 2}));
}

#[test]
fn diff_of_deep_documents_stays_bounded() {
    let (mut old, mut new) = (json!(1), json!(2));
    for _ in 0..400 {
        old = json!([old]);
        new = json!([new]);
    }
    let patch = diff_value(&old, &new);
    let ops = patch.as_array().unwrap();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0]["path"].as_str().unwrap().matches('/').count(), 256);
    let mut out = old.clone();
    apply_value(&mut out, &patch, Mode::Strict).unwrap();
    assert_eq!(out, new);
}

#[test]
fn root_operations() {
    let doc = json!({"a": 1});
    assert_eq!(
        apply(&doc, json!([{"op": "replace", "path": "", "value": [1]}])).unwrap(),
        json!([1])
    );
    assert_eq!(
        apply(&doc, json!([{"op": "add", "path": "", "value": 3}])).unwrap(),
        json!(3)
    );
    assert!(apply(
        &doc,
        json!([{"op": "test", "path": "", "value": {"a": 1.0}}])
    )
    .is_ok());
    assert_eq!(
        apply(&doc, json!([{"op": "copy", "from": "", "path": "/self"}])).unwrap(),
        json!({"a": 1, "self": {"a": 1}})
    );
    assert_eq!(
        apply(&doc, json!([{"op": "add", "path": "/", "value": 2}])).unwrap()[""],
        json!(2)
    );
}

#[test]
fn escaped_keys() {
    let doc = json!({"a/b": 1, "m~n": 2});
    let out = apply(
        &doc,
        json!([{"op": "move", "from": "/a~1b", "path": "/m~0n"}, {"op": "add", "path": "/~01", "value": 3}]),
    )
    .unwrap();
    assert_eq!(text(&out), r#"{"m~n":1,"~1":3}"#);
}

#[test]
fn diff_examples() {
    let cases = [
        (json!({"a": 1}), json!({"a": 1}), json!([])),
        (
            json!({"a": 1}),
            json!({"a": 2}),
            json!([{"op": "replace", "path": "/a", "value": 2}]),
        ),
        (
            json!({"a": 1}),
            json!({"a": true}),
            json!([{"op": "replace", "path": "/a", "value": true}]),
        ),
        (
            json!({"a/b": 1}),
            json!({}),
            json!([{"op": "remove", "path": "/a~1b"}]),
        ),
        (
            json!({}),
            json!({"m~n": 1}),
            json!([{"op": "add", "path": "/m~0n", "value": 1}]),
        ),
        (
            json!([1, 2]),
            json!([1, 2, 3]),
            json!([{"op": "add", "path": "/-", "value": 3}]),
        ),
        (
            json!([1, 2]),
            json!([0, 1, 2]),
            json!([{"op": "add", "path": "/0", "value": 0}]),
        ),
        (
            json!([1, 2, 3]),
            json!([1, 3]),
            json!([{"op": "remove", "path": "/1"}]),
        ),
        (
            json!([1]),
            json!({"a": 1}),
            json!([{"op": "replace", "path": "", "value": {"a": 1}}]),
        ),
    ];
    for (old, new, expected) in cases {
        let patch = diff_value(&old, &new);
        assert_eq!(patch, expected, "{old} -> {new}");
        assert_eq!(text(&apply(&old, patch).unwrap()), text(&new));
    }
}

fn json_strategy() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..5).prop_map(|n| json!(n)),
        prop_oneof![
            Just("a"),
            Just("b"),
            Just("~"),
            Just("/"),
            Just("-"),
            Just("0")
        ]
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("a"),
                        Just("b"),
                        Just("c"),
                        Just("~"),
                        Just("/"),
                        Just("0")
                    ],
                    inner
                ),
                0..4
            )
            .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

fn pointer_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            Just("a"),
            Just("b"),
            Just("c"),
            Just("~0"),
            Just("~1"),
            Just("0"),
            Just("1"),
            Just("2"),
            Just("-")
        ],
        0..3,
    )
    .prop_map(|t| t.iter().map(|s| format!("/{s}")).collect())
}

fn op_strategy() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            Just("add"),
            Just("remove"),
            Just("replace"),
            Just("move"),
            Just("copy"),
            Just("test")
        ],
        pointer_strategy(),
        pointer_strategy(),
        json_strategy(),
    )
        .prop_map(
            |(op, path, from, value)| json!({"op": op, "path": path, "from": from, "value": value}),
        )
}

fn wild_op_strategy() -> impl Strategy<Value = Value> {
    let text = prop_oneof![
        "[-~/a0-9 ]{0,6}".prop_map(Value::String),
        pointer_strategy().prop_map(Value::String),
        Just(Value::Null),
        any::<i64>().prop_map(|n| json!(n)),
    ];
    (
        prop_oneof![
            Just(json!("add")),
            Just(json!("remove")),
            Just(json!("replace")),
            Just(json!("move")),
            Just(json!("copy")),
            Just(json!("test")),
            Just(json!("nope")),
            Just(json!(3)),
        ],
        text.clone(),
        text,
        json_strategy(),
        0u8..8,
    )
        .prop_map(|(op, path, from, value, drop)| {
            let mut m = serde_json::Map::new();
            for (i, (k, v)) in [("op", op), ("path", path), ("from", from), ("value", value)]
                .into_iter()
                .enumerate()
            {
                if usize::from(drop) != i {
                    m.insert(k.to_owned(), v);
                }
            }
            Value::Object(m)
        })
}

proptest! {
    /// Any patch, however wrong, gives a result or a typed error: never a panic, and a refusal
    /// leaves the document as it was (both modes).
    #[test]
    fn wild_patches_never_panic(
        doc in json_strategy(),
        patch in prop::collection::vec(wild_op_strategy(), 0..6),
    ) {
        for mode in [Mode::Strict, Mode::AgUi] {
            let mut out = doc.clone();
            match apply_value(&mut out, &Value::Array(patch.clone()), mode) {
                Ok(_) => {}
                Err(e) => {
                    prop_assert!(ERROR_CODES.contains(&e.code));
                    prop_assert_eq!(text(&out), text(&doc));
                }
            }
        }
    }

    #[test]
    fn a_failed_patch_changes_nothing(
        doc in json_strategy(),
        patch in prop::collection::vec(op_strategy(), 1..6),
    ) {
        let before = text(&doc);
        let mut out = doc.clone();
        if apply_value(&mut out, &Value::Array(patch), Mode::Strict).is_err() {
            prop_assert_eq!(text(&out), before);
        }
    }

    #[test]
    fn diff_round_trips(old in json_strategy(), new in json_strategy()) {
        let patch = diff_value(&old, &new);
        let mut out = old.clone();
        apply_value(&mut out, &patch, Mode::Strict).unwrap();
        prop_assert_eq!(&out, &new);
        prop_assert!(diff_value(&new, &new).as_array().unwrap().is_empty());
    }
}

#[test]
fn agui_errors_carry_the_drop_warnings_in_order() {
    let drop = |name: &str| json!({"op": name, "path": "/n"});
    let mut doc = json!({"n": 0});
    let patch = json!([drop("a"), {"op": "replace", "path": "/n", "value": 1}, drop("b"),
                       {"op": "remove", "path": "/missing"}]);
    let e = apply_value(&mut doc, &patch, Mode::AgUi).unwrap_err();
    assert_eq!(
        (e.kind, e.op_index),
        (PatchErrorKind::DoesNotApply, Some(3))
    );
    let dropped: Vec<_> = e.warnings.iter().map(|w| (w.op_index, w.code)).collect();
    assert_eq!(dropped, [(0, "unknown_op"), (2, "unknown_op")]);
    assert_eq!(doc, json!({"n": 0}));
    // A malformed operation after a drop keeps the drop's warning too.
    let e = apply_value(
        &mut doc,
        &json!([drop("a"), {"op": "add", "path": "n", "value": 1}]),
        Mode::AgUi,
    )
    .unwrap_err();
    assert_eq!(e.kind, PatchErrorKind::Malformed);
    assert_eq!(e.warnings.len(), 1);
    // Strict mode drops nothing.
    let e = apply_value(
        &mut doc,
        &json!([{"op": "remove", "path": "/missing"}]),
        Mode::Strict,
    )
    .unwrap_err();
    assert!(e.warnings.is_empty());
}
