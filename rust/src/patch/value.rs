//! The engine's `serde_json::Value` representation (documents held in Rust).
//!
//! serde_json is built with `preserve_order` (objects keep member order; removals use
//! `shift_remove` so order survives) and `arbitrary_precision` (numbers keep their text, so
//! integers beyond 64 bits pass through untouched; `test` compares them as exact decimals).

use std::borrow::Cow;
use std::convert::Infallible;

use serde_json::{Map, Number, Value};

use super::diff::{diff, DiffSink};
use super::ops::{Field, OpSource};
use super::tree::{Node, Shape, Tree};
use crate::pointer::Pointer;

fn shape_of(v: &Value) -> Shape {
    match v {
        Value::Object(_) => Shape::Object,
        Value::Array(a) => Shape::Array(a.len()),
        _ => Shape::Scalar,
    }
}

impl Node for &Value {
    type Fault = Infallible;

    fn shape(&self) -> Result<Shape, Infallible> {
        Ok(shape_of(self))
    }

    fn member(&self, key: &str) -> Result<Option<Self>, Infallible> {
        Ok(self.as_object().and_then(|m| m.get(key)))
    }

    fn element(&self, index: usize) -> Result<Option<Self>, Infallible> {
        Ok(self.as_array().and_then(|a| a.get(index)))
    }

    fn elements(&self) -> Result<Vec<Self>, Infallible> {
        Ok(self
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default())
    }

    fn entries(&self) -> Result<Vec<(String, Self)>, Infallible> {
        Ok(self
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v)).collect())
            .unwrap_or_default())
    }

    fn same(&self, other: &Self) -> Result<bool, Infallible> {
        // With `arbitrary_precision` numbers compare by text, so `1` and `1.0` differ; map
        // equality ignores member order.
        Ok(*self == *other)
    }
}

/// A `serde_json::Value` document being patched in place.
pub struct ValueDoc<'d> {
    root: &'d mut Value,
}

impl<'d> ValueDoc<'d> {
    pub fn new(root: &'d mut Value) -> Self {
        ValueDoc { root }
    }
}

fn object(node: &mut Value) -> Option<&mut Map<String, Value>> {
    node.as_object_mut()
}

fn array(node: &mut Value) -> Option<&mut Vec<Value>> {
    node.as_array_mut()
}

// The engine checks shapes and bounds before every primitive; the guards below only keep a
// broken caller from panicking.
impl<'p> Tree<&'p Value> for ValueDoc<'_> {
    type Value = Value;
    type Fault = Infallible;
    type Node<'a>
        = &'a Value
    where
        Self: 'a;
    type NodeMut<'a>
        = &'a mut Value
    where
        Self: 'a;

    fn root(&self) -> &Value {
        self.root
    }

    fn root_mut(&mut self) -> &mut Value {
        self.root
    }

    fn replace_root(&mut self, value: Value) -> Value {
        std::mem::replace(self.root, value)
    }

    fn shape_mut(node: &&mut Value) -> Result<Shape, Infallible> {
        Ok(shape_of(node))
    }

    fn member_mut<'a>(
        node: Self::NodeMut<'a>,
        key: &str,
    ) -> Result<Option<Self::NodeMut<'a>>, Infallible>
    where
        Self: 'a,
    {
        Ok(node.as_object_mut().and_then(|m| m.get_mut(key)))
    }

    fn element_mut<'a>(
        node: Self::NodeMut<'a>,
        index: usize,
    ) -> Result<Option<Self::NodeMut<'a>>, Infallible>
    where
        Self: 'a,
    {
        Ok(node.as_array_mut().and_then(|a| a.get_mut(index)))
    }

    fn obj_contains(node: &&mut Value, key: &str) -> Result<bool, Infallible> {
        Ok(node.as_object().is_some_and(|m| m.contains_key(key)))
    }

    fn obj_set(
        node: &mut &mut Value,
        key: &str,
        value: Value,
    ) -> Result<Option<Value>, Infallible> {
        Ok(object(node).and_then(|m| m.insert(key.to_owned(), value)))
    }

    fn obj_remove(node: &mut &mut Value, key: &str) -> Result<Option<(usize, Value)>, Infallible> {
        let Some(m) = object(node) else {
            return Ok(None);
        };
        let Some(position) = m.keys().position(|k| k == key) else {
            return Ok(None);
        };
        Ok(m.shift_remove(key).map(|v| (position, v)))
    }

    fn obj_insert_at(
        node: &mut &mut Value,
        position: usize,
        key: &str,
        value: Value,
    ) -> Result<(), Infallible> {
        if let Some(m) = object(node) {
            let position = position.min(m.len());
            m.shift_insert(position, key.to_owned(), value);
        }
        Ok(())
    }

    fn arr_insert(node: &mut &mut Value, index: usize, value: Value) -> Result<(), Infallible> {
        if let Some(a) = array(node) {
            let index = index.min(a.len());
            a.insert(index, value);
        }
        Ok(())
    }

    fn arr_remove(node: &mut &mut Value, index: usize) -> Result<Value, Infallible> {
        Ok(match array(node) {
            Some(a) if index < a.len() => a.remove(index),
            _ => Value::Null,
        })
    }

    fn arr_set(node: &mut &mut Value, index: usize, value: Value) -> Result<Value, Infallible> {
        Ok(match array(node).and_then(|a| a.get_mut(index)) {
            Some(slot) => std::mem::replace(slot, value),
            None => Value::Null,
        })
    }

    fn clone_node(node: &&Value) -> Result<Value, Infallible> {
        Ok((*node).clone())
    }

    fn import(literal: &&'p Value) -> Result<Value, Infallible> {
        Ok((*literal).clone())
    }

    fn equals(node: &&Value, literal: &&'p Value) -> Result<bool, Infallible> {
        Ok(json_equal(node, literal))
    }
}

impl<'p> OpSource for &'p Value {
    type Lit = &'p Value;
    type Fault = Infallible;

    fn is_object(&self) -> Result<bool, Infallible> {
        Ok(Value::is_object(self))
    }

    fn text(&self, name: &str) -> Result<Field<'_>, Infallible> {
        Ok(match self.get(name) {
            None => Field::Absent,
            Some(Value::String(s)) => Field::Str(Cow::Borrowed(s)),
            Some(_) => Field::Other,
        })
    }

    fn literal(&self, name: &str) -> Result<Option<&'p Value>, Infallible> {
        Ok(self.get(name))
    }
}

/// RFC 6902 `test` equality: numbers compare as exact decimals (`1 == 1.0 == 1e0`, and two
/// integers beyond 64 bits differ when any digit does), booleans are not numbers, object member
/// order is irrelevant.
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => number_equal(x, y),
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => false,
    }
}

fn number_equal(x: &Number, y: &Number) -> bool {
    let (sx, sy) = (x.as_str(), y.as_str());
    if sx == sy {
        return true;
    }
    match (Decimal::parse(sx), Decimal::parse(sy)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// A JSON number reduced to sign, significant digits (no leading or trailing zeros) and a
/// decimal exponent, so equal values have equal forms.
#[derive(PartialEq, Eq, Debug)]
struct Decimal {
    negative: bool,
    digits: String,
    exponent: i128,
}

impl Decimal {
    fn parse(text: &str) -> Option<Decimal> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exp_text) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let mut exponent: i128 = match exp_text {
            // Exponents this long are not numbers anyone means; compare them by text.
            Some(e) if e.len() > 30 => return None,
            Some(e) => e.strip_prefix('+').unwrap_or(e).parse().ok()?,
            None => 0,
        };
        exponent -= i128::try_from(frac.len()).ok()?;
        let all: String = int.chars().chain(frac.chars()).collect();
        let trimmed = all.trim_start_matches('0');
        if trimmed.is_empty() {
            return Some(Decimal {
                negative: false,
                digits: String::new(),
                exponent: 0,
            });
        }
        let significant = trimmed.trim_end_matches('0');
        exponent += i128::try_from(trimmed.len() - significant.len()).ok()?;
        Some(Decimal {
            negative,
            digits: significant.to_owned(),
            exponent,
        })
    }
}

struct ValueSink {
    ops: Vec<Value>,
}

impl ValueSink {
    fn push(&mut self, op: &str, path: &Pointer, value: Option<&Value>) {
        let mut m = Map::new();
        m.insert("op".to_owned(), Value::String(op.to_owned()));
        m.insert("path".to_owned(), Value::String(path.to_string()));
        if let Some(v) = value {
            m.insert("value".to_owned(), v.clone());
        }
        self.ops.push(Value::Object(m));
    }
}

impl<'a> DiffSink<&'a Value> for ValueSink {
    type Fault = Infallible;

    fn add(&mut self, path: &Pointer, value: &&'a Value) -> Result<(), Infallible> {
        self.push("add", path, Some(value));
        Ok(())
    }

    fn remove(&mut self, path: &Pointer) -> Result<(), Infallible> {
        self.push("remove", path, None);
        Ok(())
    }

    fn replace(&mut self, path: &Pointer, value: &&'a Value) -> Result<(), Infallible> {
        self.push("replace", path, Some(value));
        Ok(())
    }
}

/// Minimal-ish RFC 6902 patch turning `old` into `new`.
pub fn diff_value(old: &Value, new: &Value) -> Value {
    let mut sink = ValueSink { ops: Vec::new() };
    match diff(&old, &new, &mut sink) {
        Ok(()) => Value::Array(sink.ops),
        Err(never) => match never {},
    }
}
