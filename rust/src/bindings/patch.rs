//! Python bindings for `crate::patch`: the engine's Python-object representation and the
//! `patch_*` functions behind `tether.patch`.
//!
//! Documents and patches given as Python objects are walked here with the GIL held, through the
//! same generic engine that patches `serde_json` values: no JSON text, no `serde_json` round
//! trip. Only exact `dict`, `list`, `str`, `int`, `float`, `bool` and `None` are JSON; anything
//! else (subclasses included) is refused with `InvalidDocument` or `InvalidPatch`.

use std::ptr;

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pybacked::{PyBackedBytes, PyBackedStr};
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::bindings::errors::TetherError;
use crate::patch::{
    self, diff, parse_ops, run, DiffSink, Failure, Field, Mode, Node, OpSource, PatchErrorKind,
    Shape, Tree,
};
use crate::pointer::Pointer;

pyo3::create_exception!(
    _core,
    PatchError,
    TetherError,
    "A JSON Patch was refused; `op_index` and `path` locate the failing operation."
);
pyo3::create_exception!(
    _core,
    InvalidPatch,
    PatchError,
    "The patch is malformed: not a list of operation objects, a missing or wrongly typed \
     member, bad pointer syntax, an unknown op in strict mode, or a non-JSON value."
);
pyo3::create_exception!(
    _core,
    PatchDoesNotApply,
    PatchError,
    "A well-formed patch does not apply to this document: a missing path, an index out of \
     range, a failed test, or a move into the value's own child."
);
pyo3::create_exception!(
    _core,
    InvalidDocument,
    PatchError,
    "The document is not JSON: a dict/list subclass, a non-string key, or a value of a \
     non-JSON type (or invalid JSON text)."
);

/// An operation the AG-UI mode tolerated (dropped), with a stable snake_case `code`.
#[pyclass(module = "tether._core", frozen, eq, hash, get_all)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PatchWarning {
    op_index: usize,
    code: String,
    message: String,
}

impl From<patch::PatchWarning> for PatchWarning {
    fn from(w: patch::PatchWarning) -> Self {
        PatchWarning {
            op_index: w.op_index,
            code: w.code.to_owned(),
            message: w.message,
        }
    }
}

#[pymethods]
impl PatchWarning {
    #[new]
    fn new(op_index: usize, code: String, message: String) -> Self {
        PatchWarning {
            op_index,
            code,
            message,
        }
    }

    fn __repr__(&self) -> String {
        let q = |s: &str| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"));
        format!(
            "PatchWarning(op_index={}, code={}, message={})",
            self.op_index,
            q(&self.code),
            q(&self.message)
        )
    }
}

fn warning_list(warnings: Vec<patch::PatchWarning>) -> Vec<PatchWarning> {
    warnings.into_iter().map(PatchWarning::from).collect()
}

/// Attach the warnings of the operations dropped before a failure to its exception.
fn with_warnings(py: Python<'_>, exc: PyErr, warnings: Vec<patch::PatchWarning>) -> PyErr {
    if warnings.is_empty() {
        return exc;
    }
    let value = exc.value(py);
    if value.is_instance_of::<PatchError>() {
        // Best effort, like `locate`: the exception is already the answer.
        if let Ok(tuple) = PyTuple::new(py, warning_list(warnings)) {
            let _ = value.setattr("warnings", tuple);
        }
    }
    exc
}

/// Codes the Python representation adds to `patch::ERROR_CODES`.
const BINDING_ERROR_CODES: [&str; 4] =
    ["not_json", "non_finite_number", "too_deep", "invalid_json"];

/// Deeper nesting than this is refused rather than risking the native stack.
const MAX_DEPTH: usize = 1000;

/// The JSON kind of a Python object, by exact type.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Null,
    Bool,
    Int,
    Float,
    Str,
    Dict,
    List,
}

/// Whose value is being read: it decides which exception a non-JSON value raises.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Document,
    Patch,
}

fn not_json(obj: &Bound<'_, PyAny>, side: Side) -> PyErr {
    let ty = obj.get_type();
    let name = ty
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    let detail = if obj.is_instance_of::<PyDict>() {
        format!("dict subclass {name} is not JSON; pass a plain dict")
    } else if obj.is_instance_of::<PyList>() {
        format!("list subclass {name} is not JSON; pass a plain list")
    } else {
        format!("a value of type {name} is not JSON")
    };
    match side {
        Side::Document => coded(
            obj.py(),
            InvalidDocument::new_err(format!("document: {detail}")),
            "not_json",
        ),
        Side::Patch => coded(
            obj.py(),
            InvalidPatch::new_err(format!("patch value: {detail}")),
            "not_json",
        ),
    }
}

/// The JSON kind of a raw object pointer, by exact type; `None` when it is not JSON.
///
/// # Safety
/// `ob` must point to a live Python object and the GIL must be held.
unsafe fn raw_kind(ob: *mut ffi::PyObject) -> Option<Kind> {
    let t = ffi::Py_TYPE(ob);
    Some(if ptr::eq(t, ptr::addr_of_mut!(ffi::PyDict_Type)) {
        Kind::Dict
    } else if ptr::eq(t, ptr::addr_of_mut!(ffi::PyList_Type)) {
        Kind::List
    } else if ptr::eq(t, ptr::addr_of_mut!(ffi::PyUnicode_Type)) {
        Kind::Str
    } else if ptr::eq(t, ptr::addr_of_mut!(ffi::PyLong_Type)) {
        Kind::Int
    } else if ptr::eq(t, ptr::addr_of_mut!(ffi::PyFloat_Type)) {
        Kind::Float
    } else if ptr::eq(t, ptr::addr_of_mut!(ffi::PyBool_Type)) {
        Kind::Bool
    } else if ptr::eq(ob, ffi::Py_None()) {
        Kind::Null
    } else {
        return None;
    })
}

/// NaN and the infinities are floats but not JSON numbers (RFC 8259 has neither).
fn non_finite(obj: &Bound<'_, PyAny>, side: Side) -> PyErr {
    let text = obj
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    let what = format!("{text} is not a JSON number (JSON has no NaN or Infinity)");
    match side {
        Side::Document => coded(
            obj.py(),
            InvalidDocument::new_err(format!("document: {what}")),
            "non_finite_number",
        ),
        Side::Patch => coded(
            obj.py(),
            InvalidPatch::new_err(format!("patch value: {what}")),
            "non_finite_number",
        ),
    }
}

/// Refuses a non-finite float given as a raw pointer.
///
/// # Safety
/// `ob` must point to a live exact `float` and the GIL must be held.
unsafe fn check_finite_raw(py: Python<'_>, ob: *mut ffi::PyObject, side: Side) -> PyResult<()> {
    if ffi::PyFloat_AsDouble(ob).is_finite() {
        Ok(())
    } else {
        Err(non_finite(&Bound::from_borrowed_ptr(py, ob), side))
    }
}

fn kind(obj: &Bound<'_, PyAny>, side: Side) -> PyResult<Kind> {
    // SAFETY: `obj` is a live object and holding a `Bound` proves the GIL is held; a `Float`
    // kind means it is an exact `float`.
    match unsafe { raw_kind(obj.as_ptr()) } {
        Some(Kind::Float) => {
            unsafe { check_finite_raw(obj.py(), obj.as_ptr(), side)? };
            Ok(Kind::Float)
        }
        Some(k) => Ok(k),
        None => Err(not_json(obj, side)),
    }
}

/// Attach a stable snake_case `code` to a fresh exception.
fn coded(py: Python<'_>, err: PyErr, code: &'static str) -> PyErr {
    // Best effort: the exception is already the answer, the attribute only adds detail.
    let _ = err.value(py).setattr("code", code);
    err
}

fn too_deep(py: Python<'_>, side: Side) -> PyErr {
    let what = format!("nested deeper than {MAX_DEPTH} levels");
    match side {
        Side::Document => coded(
            py,
            InvalidDocument::new_err(format!("document: {what}")),
            "too_deep",
        ),
        Side::Patch => coded(
            py,
            InvalidPatch::new_err(format!("patch value: {what}")),
            "too_deep",
        ),
    }
}

fn key_str<'py>(key: &Bound<'py, PyAny>, side: Side) -> PyResult<Bound<'py, PyString>> {
    if key.is_exact_instance_of::<PyString>() {
        Ok(key.cast_exact::<PyString>()?.clone())
    } else {
        let name = key
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default();
        Err(match side {
            Side::Document => {
                let msg = format!("document: object keys must be str, not {name}");
                coded(key.py(), InvalidDocument::new_err(msg), "not_json")
            }
            Side::Patch => {
                let msg = format!("patch value: object keys must be str, not {name}");
                coded(key.py(), InvalidPatch::new_err(msg), "not_json")
            }
        })
    }
}

/// The UTF-8 text of a `str`; a lone surrogate (which no JSON text can carry) is not JSON.
fn utf8<'a>(s: &'a Bound<'_, PyString>, side: Side) -> PyResult<&'a str> {
    s.to_str().map_err(|_| {
        let what = "a str with a lone surrogate is not JSON text";
        match side {
            Side::Document => coded(
                s.py(),
                InvalidDocument::new_err(format!("document: {what}")),
                "not_json",
            ),
            Side::Patch => coded(
                s.py(),
                InvalidPatch::new_err(format!("patch value: {what}")),
                "not_json",
            ),
        }
    })
}

/// Deep copy of JSON: new dicts and lists, scalars shared (they are immutable), as
/// `copy.deepcopy` does for JSON values. Validates as it goes.
fn copy_json<'py>(
    obj: &Bound<'py, PyAny>,
    side: Side,
    depth: usize,
) -> PyResult<Bound<'py, PyAny>> {
    if depth > MAX_DEPTH {
        return Err(too_deep(obj.py(), side));
    }
    let py = obj.py();
    match kind(obj, side)? {
        Kind::Dict => {
            let src = obj.cast_exact::<PyDict>()?;
            // Start from a shallow copy (one table copy), then replace the containers.
            let out = src.copy()?;
            let (mut pos, mut k, mut v): (ffi::Py_ssize_t, _, _) =
                (0, ptr::null_mut(), ptr::null_mut());
            // SAFETY: `PyDict_Next` lends `k` and `v` while `src` is alive and unmodified; this
            // loop only writes to `out`, and no Python code runs (exact dicts, str keys).
            while unsafe { ffi::PyDict_Next(src.as_ptr(), &mut pos, &mut k, &mut v) } != 0 {
                if unsafe { raw_kind(k) } != Some(Kind::Str) {
                    let key = unsafe { Bound::from_borrowed_ptr(py, k) };
                    return Err(key_str(&key, side)
                        .err()
                        .unwrap_or_else(|| not_json(&key, side)));
                }
                match unsafe { raw_kind(v) } {
                    Some(Kind::Dict | Kind::List) => {
                        let (key, value) = unsafe {
                            (
                                Bound::from_borrowed_ptr(py, k),
                                Bound::from_borrowed_ptr(py, v),
                            )
                        };
                        out.set_item(key, copy_json(&value, side, depth + 1)?)?;
                    }
                    Some(Kind::Float) => unsafe { check_finite_raw(py, v, side)? },
                    Some(_) => {}
                    None => {
                        return Err(not_json(&unsafe { Bound::from_borrowed_ptr(py, v) }, side))
                    }
                }
            }
            Ok(out.into_any())
        }
        Kind::List => {
            let src = obj.cast_exact::<PyList>()?;
            let len = src.len();
            let out = src.get_slice(0, len);
            for i in 0..len {
                // SAFETY: `i < len` and `src` is not modified; the reference is borrowed.
                let v = unsafe { ffi::PyList_GetItem(src.as_ptr(), i as ffi::Py_ssize_t) };
                if v.is_null() {
                    return Err(PyErr::fetch(py));
                }
                match unsafe { raw_kind(v) } {
                    Some(Kind::Dict | Kind::List) => {
                        let value = unsafe { Bound::from_borrowed_ptr(py, v) };
                        out.set_item(i, copy_json(&value, side, depth + 1)?)?;
                    }
                    Some(Kind::Float) => unsafe { check_finite_raw(py, v, side)? },
                    Some(_) => {}
                    None => {
                        return Err(not_json(&unsafe { Bound::from_borrowed_ptr(py, v) }, side))
                    }
                }
            }
            Ok(out.into_any())
        }
        _ => Ok(obj.clone()),
    }
}

/// Check that a patch literal is JSON, without copying it.
fn check_json(obj: &Bound<'_, PyAny>, side: Side, depth: usize) -> PyResult<()> {
    if depth > MAX_DEPTH {
        return Err(too_deep(obj.py(), side));
    }
    match kind(obj, side)? {
        Kind::Dict => {
            for (k, v) in obj.cast_exact::<PyDict>()?.iter() {
                key_str(&k, side)?;
                check_json(&v, side, depth + 1)?;
            }
        }
        Kind::List => {
            for v in obj.cast_exact::<PyList>()?.iter() {
                check_json(&v, side, depth + 1)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// RFC 6902 `test` equality between a document node and a patch literal.
fn json_equal(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>, depth: usize) -> PyResult<bool> {
    if depth > MAX_DEPTH {
        return Err(too_deep(a.py(), Side::Document));
    }
    let (ka, kb) = (kind(a, Side::Document)?, kind(b, Side::Patch)?);
    Ok(match (ka, kb) {
        (Kind::Null, Kind::Null) => true,
        (Kind::Bool, Kind::Bool) => a.is(b),
        // Exact int/float comparison (CPython compares int and float exactly); `kind` has
        // refused NaN and the infinities on both sides.
        (Kind::Int | Kind::Float, Kind::Int | Kind::Float) => a.eq(b)?,
        (Kind::Str, Kind::Str) => a.eq(b)?,
        (Kind::List, Kind::List) => {
            let (la, lb) = (a.cast_exact::<PyList>()?, b.cast_exact::<PyList>()?);
            if la.len() != lb.len() {
                return Ok(false);
            }
            for (x, y) in la.iter().zip(lb.iter()) {
                if !json_equal(&x, &y, depth + 1)? {
                    return Ok(false);
                }
            }
            true
        }
        (Kind::Dict, Kind::Dict) => {
            let (da, db) = (a.cast_exact::<PyDict>()?, b.cast_exact::<PyDict>()?);
            if da.len() != db.len() {
                return Ok(false);
            }
            for (k, x) in da.iter() {
                key_str(&k, Side::Document)?;
                match db.get_item(&k)? {
                    Some(y) if json_equal(&x, &y, depth + 1)? => {}
                    _ => return Ok(false),
                }
            }
            true
        }
        _ => false,
    })
}

/// Identical JSON values, type for type (for diff).
fn json_same(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>, depth: usize) -> PyResult<bool> {
    if depth > MAX_DEPTH {
        return Err(too_deep(a.py(), Side::Document));
    }
    let (ka, kb) = (kind(a, Side::Document)?, kind(b, Side::Document)?);
    if ka != kb {
        return Ok(false);
    }
    if a.is(b) {
        // `patch_diff` validated both documents up front.
        return Ok(true);
    }
    Ok(match ka {
        Kind::Null => true,
        Kind::Bool => false,
        Kind::Int | Kind::Str => a.eq(b)?,
        Kind::Float => a.extract::<f64>()? == b.extract::<f64>()?,
        Kind::List => {
            let (la, lb) = (a.cast_exact::<PyList>()?, b.cast_exact::<PyList>()?);
            if la.len() != lb.len() {
                return Ok(false);
            }
            for (x, y) in la.iter().zip(lb.iter()) {
                if !json_same(&x, &y, depth + 1)? {
                    return Ok(false);
                }
            }
            true
        }
        Kind::Dict => {
            let (da, db) = (a.cast_exact::<PyDict>()?, b.cast_exact::<PyDict>()?);
            if da.len() != db.len() {
                return Ok(false);
            }
            for (k, x) in da.iter() {
                key_str(&k, Side::Document)?;
                match db.get_item(&k)? {
                    Some(y) if json_same(&x, &y, depth + 1)? => {}
                    _ => return Ok(false),
                }
            }
            true
        }
    })
}

/// A document node: a Python object with its nesting depth (for the stack guard in diff).
#[derive(Clone)]
struct PyNode<'py> {
    obj: Bound<'py, PyAny>,
    depth: usize,
}

impl<'py> PyNode<'py> {
    fn child(&self, obj: Bound<'py, PyAny>) -> PyResult<Self> {
        if self.depth >= MAX_DEPTH {
            return Err(too_deep(self.obj.py(), Side::Document));
        }
        Ok(PyNode {
            obj,
            depth: self.depth + 1,
        })
    }
}

fn shape_of(obj: &Bound<'_, PyAny>) -> PyResult<Shape> {
    Ok(match kind(obj, Side::Document)? {
        Kind::Dict => Shape::Object,
        Kind::List => Shape::Array(obj.cast_exact::<PyList>()?.len()),
        _ => Shape::Scalar,
    })
}

impl<'py> Node for PyNode<'py> {
    type Fault = PyErr;

    fn shape(&self) -> PyResult<Shape> {
        shape_of(&self.obj)
    }

    fn member(&self, key: &str) -> PyResult<Option<Self>> {
        match self.obj.cast_exact::<PyDict>()?.get_item(key)? {
            Some(v) => Ok(Some(self.child(v)?)),
            None => Ok(None),
        }
    }

    fn element(&self, index: usize) -> PyResult<Option<Self>> {
        let list = self.obj.cast_exact::<PyList>()?;
        if index >= list.len() {
            return Ok(None);
        }
        Ok(Some(self.child(list.get_item(index)?)?))
    }

    fn elements(&self) -> PyResult<Vec<Self>> {
        self.obj
            .cast_exact::<PyList>()?
            .iter()
            .map(|v| self.child(v))
            .collect()
    }

    fn entries(&self) -> PyResult<Vec<(String, Self)>> {
        let dict = self.obj.cast_exact::<PyDict>()?;
        let mut out = Vec::with_capacity(dict.len());
        for (k, v) in dict.iter() {
            let k = utf8(&key_str(&k, Side::Document)?, Side::Document)?.to_owned();
            out.push((k, self.child(v)?));
        }
        Ok(out)
    }

    fn same(&self, other: &Self) -> PyResult<bool> {
        json_same(&self.obj, &other.obj, self.depth)
    }
}

/// A Python document being patched in place (the copying mode patches a fresh copy).
struct PyDoc<'py> {
    root: Bound<'py, PyAny>,
}

fn dict<'a, 'py>(node: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyDict>> {
    Ok(node.cast_exact::<PyDict>()?)
}

fn list<'a, 'py>(node: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PyList>> {
    Ok(node.cast_exact::<PyList>()?)
}

impl<'py> Tree<Bound<'py, PyAny>> for PyDoc<'py> {
    type Value = Bound<'py, PyAny>;
    type Fault = PyErr;
    type Node<'a>
        = PyNode<'py>
    where
        Self: 'a;
    type NodeMut<'a>
        = Bound<'py, PyAny>
    where
        Self: 'a;

    fn root(&self) -> PyNode<'py> {
        PyNode {
            obj: self.root.clone(),
            depth: 0,
        }
    }

    fn root_mut(&mut self) -> Bound<'py, PyAny> {
        self.root.clone()
    }

    fn replace_root(&mut self, value: Bound<'py, PyAny>) -> Bound<'py, PyAny> {
        std::mem::replace(&mut self.root, value)
    }

    fn shape_mut(node: &Bound<'py, PyAny>) -> PyResult<Shape> {
        shape_of(node)
    }

    fn member_mut<'a>(node: Bound<'py, PyAny>, key: &str) -> PyResult<Option<Bound<'py, PyAny>>>
    where
        Self: 'a,
    {
        dict(&node)?.get_item(key)
    }

    fn element_mut<'a>(node: Bound<'py, PyAny>, index: usize) -> PyResult<Option<Bound<'py, PyAny>>>
    where
        Self: 'a,
    {
        let list = list(&node)?;
        if index >= list.len() {
            return Ok(None);
        }
        list.get_item(index).map(Some)
    }

    fn obj_contains(node: &Bound<'py, PyAny>, key: &str) -> PyResult<bool> {
        dict(node)?.contains(key)
    }

    fn obj_set(
        node: &mut Bound<'py, PyAny>,
        key: &str,
        value: Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let d = dict(node)?;
        let key = PyString::new(node.py(), key);
        let prev = d.get_item(&key)?;
        d.set_item(key, value)?;
        Ok(prev)
    }

    fn obj_remove(
        node: &mut Bound<'py, PyAny>,
        key: &str,
    ) -> PyResult<Option<(usize, Bound<'py, PyAny>)>> {
        let d = dict(node)?;
        let Some(value) = d.get_item(key)? else {
            return Ok(None);
        };
        let mut position = 0;
        for k in d.keys().iter() {
            // A key with a lone surrogate has no UTF-8 text, so it is never `key`.
            if k.is_exact_instance_of::<PyString>()
                && k.cast_exact::<PyString>()?.to_str().is_ok_and(|k| k == key)
            {
                break;
            }
            position += 1;
        }
        d.del_item(key)?;
        Ok(Some((position, value)))
    }

    fn obj_insert_at(
        node: &mut Bound<'py, PyAny>,
        position: usize,
        key: &str,
        value: Bound<'py, PyAny>,
    ) -> PyResult<()> {
        // Python dicts only append, so the members after `position` are re-appended after it.
        let d = dict(node)?;
        let tail: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)> = d.iter().skip(position).collect();
        for (k, _) in &tail {
            d.del_item(k)?;
        }
        d.set_item(key, value)?;
        for (k, v) in tail {
            d.set_item(k, v)?;
        }
        Ok(())
    }

    fn arr_insert(
        node: &mut Bound<'py, PyAny>,
        index: usize,
        value: Bound<'py, PyAny>,
    ) -> PyResult<()> {
        list(node)?.insert(index, value)
    }

    fn arr_remove(node: &mut Bound<'py, PyAny>, index: usize) -> PyResult<Bound<'py, PyAny>> {
        let l = list(node)?;
        let value = l.get_item(index)?;
        l.del_item(index)?;
        Ok(value)
    }

    fn arr_set(
        node: &mut Bound<'py, PyAny>,
        index: usize,
        value: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let l = list(node)?;
        let prev = l.get_item(index)?;
        l.set_item(index, value)?;
        Ok(prev)
    }

    fn clone_node(node: &PyNode<'py>) -> PyResult<Bound<'py, PyAny>> {
        copy_json(&node.obj, Side::Document, node.depth)
    }

    fn import(literal: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        copy_json(literal, Side::Patch, 0)
    }

    fn equals(node: &PyNode<'py>, literal: &Bound<'py, PyAny>) -> PyResult<bool> {
        json_equal(&node.obj, literal, node.depth)
    }
}

/// One element of a Python patch list.
struct PyOp<'py>(Bound<'py, PyAny>);

impl<'py> OpSource for PyOp<'py> {
    type Lit = Bound<'py, PyAny>;
    type Fault = PyErr;

    fn is_object(&self) -> PyResult<bool> {
        if self.0.is_instance_of::<PyDict>() && !self.0.is_exact_instance_of::<PyDict>() {
            return Err(not_json(&self.0, Side::Patch));
        }
        Ok(self.0.is_exact_instance_of::<PyDict>())
    }

    fn text(&self, name: &str) -> PyResult<Field<'_>> {
        Ok(match self.0.cast_exact::<PyDict>()?.get_item(name)? {
            None => Field::Absent,
            Some(v) if v.is_exact_instance_of::<PyString>() => Field::Str(
                utf8(v.cast_exact::<PyString>()?, Side::Patch)?
                    .to_owned()
                    .into(),
            ),
            Some(_) => Field::Other,
        })
    }

    fn literal(&self, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        let value = self.0.cast_exact::<PyDict>()?.get_item(name)?;
        if let Some(v) = &value {
            check_json(v, Side::Patch, 0)?;
        }
        Ok(value)
    }
}

/// Convert a patch error once, attaching `op_index`, `path` and the drop warnings.
fn patch_error(py: Python<'_>, err: patch::PatchError) -> PyErr {
    let exc = match err.kind {
        PatchErrorKind::Malformed => InvalidPatch::new_err(err.to_string()),
        PatchErrorKind::DoesNotApply => PatchDoesNotApply::new_err(err.to_string()),
    };
    let exc = coded(py, exc, err.code);
    let exc = locate(py, exc, err.op_index, err.path);
    with_warnings(py, exc, err.warnings)
}

fn locate(py: Python<'_>, exc: PyErr, op_index: Option<usize>, path: Option<String>) -> PyErr {
    let value = exc.value(py);
    if value.is_instance_of::<PatchError>() {
        // Best effort: the exception is already the answer, attributes only add context.
        let _ = value.setattr("op_index", op_index);
        let _ = value.setattr("path", path);
    }
    exc
}

fn failure(py: Python<'_>, f: Failure<PyErr>) -> PyErr {
    match f {
        Failure::Patch(e) => patch_error(py, e),
        Failure::Fault {
            fault,
            op_index,
            path,
        } => locate(py, fault, op_index, path),
    }
}

fn parse_mode(mode: &str) -> PyResult<Mode> {
    match mode {
        "strict" => Ok(Mode::Strict),
        "agui" => Ok(Mode::AgUi),
        other => Err(PyValueError::new_err(format!(
            "mode must be 'strict' or 'agui', not {other:?}"
        ))),
    }
}

/// Apply a patch given as Python objects; returns `(document, warnings)`. A raised
/// `PatchError` carries the warnings of the operations dropped before it in `warnings`.
#[pyfunction]
#[pyo3(signature = (doc, patch, *, mode = "strict", in_place = false))]
fn patch_apply<'py>(
    py: Python<'py>,
    doc: Bound<'py, PyAny>,
    patch: Bound<'py, PyAny>,
    mode: &str,
    in_place: bool,
) -> PyResult<(Bound<'py, PyAny>, Vec<PatchWarning>)> {
    let mode = parse_mode(mode)?;
    if !patch.is_exact_instance_of::<PyList>() {
        let what = if patch.is_instance_of::<PyList>() {
            "a list subclass"
        } else if patch.is_instance_of::<PyTuple>() {
            "a tuple"
        } else {
            "not a list"
        };
        let msg = format!("a patch must be a list of operations ({what} was given)");
        return Err(coded(py, InvalidPatch::new_err(msg), "patch_not_array"));
    }
    let items: Vec<PyOp<'py>> = patch.cast_exact::<PyList>()?.iter().map(PyOp).collect();
    let mut warnings = Vec::new();
    let result = parse_ops(items, mode, &mut warnings)
        .map_err(|f| failure(py, f))
        .and_then(|ops| {
            let root = if in_place {
                doc
            } else {
                copy_json(&doc, Side::Document, 0)?
            };
            let mut tree = PyDoc { root };
            // The copying mode discards its private copy on failure, so it needs no journal.
            run(&mut tree, &ops, in_place).map_err(|f| failure(py, f))?;
            Ok(tree.root)
        });
    match result {
        Ok(root) => Ok((root, warning_list(warnings))),
        Err(e) => Err(with_warnings(py, e, warnings)),
    }
}

/// Which input a JSON text error belongs to.
enum JsonFailure {
    Document(String),
    Patch(String),
    Apply(patch::PatchError),
}

/// JSON text given as `bytes`, `bytearray` (copied) or `str` (its UTF-8), held immutable so the
/// GIL can be released while it is parsed.
enum JsonText {
    Bytes(PyBackedBytes),
    Str(PyBackedStr),
}

impl JsonText {
    fn as_bytes(&self) -> &[u8] {
        match self {
            JsonText::Bytes(b) => b,
            JsonText::Str(s) => s.as_bytes(),
        }
    }
}

fn json_text(obj: &Bound<'_, PyAny>, side: Side) -> PyResult<JsonText> {
    let refuse = |what: String| {
        let (who, err): (&str, fn(String) -> PyErr) = match side {
            Side::Document => ("document", InvalidDocument::new_err),
            Side::Patch => ("patch", InvalidPatch::new_err),
        };
        coded(obj.py(), err(format!("{who}: {what}")), "invalid_json")
    };
    if let Ok(s) = obj.cast::<PyString>() {
        return PyBackedStr::try_from(s.clone())
            .map(JsonText::Str)
            .map_err(|_| refuse("a str with a lone surrogate is not JSON text".to_owned()));
    }
    if obj.is_instance_of::<PyBytes>() || obj.is_instance_of::<PyByteArray>() {
        return Ok(JsonText::Bytes(obj.extract::<PyBackedBytes>()?));
    }
    let name = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned());
    Err(refuse(format!(
        "JSON text must be bytes or str, not {name}"
    )))
}

/// Apply a patch to JSON text (`bytes`, `bytearray` or `str`); returns `(json_bytes, warnings)`.
#[pyfunction]
#[pyo3(signature = (doc, patch, *, mode = "strict"))]
fn patch_apply_json<'py>(
    py: Python<'py>,
    doc: &Bound<'py, PyAny>,
    patch: &Bound<'py, PyAny>,
    mode: &str,
) -> PyResult<(Bound<'py, PyBytes>, Vec<PatchWarning>)> {
    let mode = parse_mode(mode)?;
    let (doc, patch) = (
        json_text(doc, Side::Document)?,
        json_text(patch, Side::Patch)?,
    );
    let (doc, patch) = (doc.as_bytes(), patch.as_bytes());
    // Pure Rust on immutable `bytes`: parsing and serialising a large document shows in the
    // benchmark, so other threads may run meanwhile.
    let result = py.detach(|| {
        let mut value: serde_json::Value = serde_json::from_slice(doc)
            .map_err(|e| JsonFailure::Document(format!("document is not JSON: {e}")))?;
        let patch: serde_json::Value = serde_json::from_slice(patch)
            .map_err(|e| JsonFailure::Patch(format!("patch is not JSON: {e}")))?;
        let warnings = patch::apply_value(&mut value, &patch, mode).map_err(JsonFailure::Apply)?;
        let bytes = serde_json::to_vec(&value)
            .map_err(|e| JsonFailure::Document(format!("cannot serialise the result: {e}")))?;
        Ok((bytes, warnings))
    });
    match result {
        Ok((bytes, warnings)) => Ok((PyBytes::new(py, &bytes), warning_list(warnings))),
        Err(JsonFailure::Document(m)) => {
            Err(coded(py, InvalidDocument::new_err(m), "invalid_json"))
        }
        Err(JsonFailure::Patch(m)) => Err(coded(py, InvalidPatch::new_err(m), "invalid_json")),
        Err(JsonFailure::Apply(e)) => Err(patch_error(py, e)),
    }
}

/// Collects diff operations as Python dicts.
struct PySink<'py> {
    ops: Bound<'py, PyList>,
}

impl<'py> PySink<'py> {
    fn push(&mut self, op: &str, path: &Pointer, value: Option<&PyNode<'py>>) -> PyResult<()> {
        let py = self.ops.py();
        let d = PyDict::new(py);
        d.set_item("op", op)?;
        d.set_item("path", path.to_string())?;
        if let Some(v) = value {
            // The patch gets its own containers: it must not alias the new document.
            d.set_item("value", copy_json(&v.obj, Side::Document, v.depth)?)?;
        }
        self.ops.append(d)
    }
}

impl<'py> DiffSink<PyNode<'py>> for PySink<'py> {
    type Fault = PyErr;

    fn add(&mut self, path: &Pointer, value: &PyNode<'py>) -> PyResult<()> {
        self.push("add", path, Some(value))
    }

    fn remove(&mut self, path: &Pointer) -> PyResult<()> {
        self.push("remove", path, None)
    }

    fn replace(&mut self, path: &Pointer, value: &PyNode<'py>) -> PyResult<()> {
        self.push("replace", path, Some(value))
    }
}

/// A patch (list of operation dicts) turning `old` into `new`.
#[pyfunction]
fn patch_diff<'py>(
    py: Python<'py>,
    old: Bound<'py, PyAny>,
    new: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyList>> {
    // Validate everything first: a removed or unchanged subtree is otherwise never inspected.
    check_json(&old, Side::Document, 0).map_err(|e| locate(py, e, None, None))?;
    check_json(&new, Side::Document, 0).map_err(|e| locate(py, e, None, None))?;
    let mut sink = PySink {
        ops: PyList::empty(py),
    };
    let (old, new) = (PyNode { obj: old, depth: 0 }, PyNode { obj: new, depth: 0 });
    diff(&old, &new, &mut sink).map_err(|e| locate(py, e, None, None))?;
    Ok(sink.ops)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let base = py.get_type::<PatchError>();
    base.setattr("op_index", py.None())?;
    base.setattr("path", py.None())?;
    base.setattr("code", py.None())?;
    base.setattr("warnings", PyTuple::empty(py))?;
    m.add("PatchError", base)?;
    m.add_class::<PatchWarning>()?;
    m.add("InvalidPatch", py.get_type::<InvalidPatch>())?;
    m.add("PatchDoesNotApply", py.get_type::<PatchDoesNotApply>())?;
    m.add("InvalidDocument", py.get_type::<InvalidDocument>())?;
    m.add("PATCH_WARNING_CODES", patch::WARNING_CODES.to_vec())?;
    let mut codes = patch::ERROR_CODES.to_vec();
    codes.extend(BINDING_ERROR_CODES);
    m.add("PATCH_ERROR_CODES", codes)?;
    m.add_function(wrap_pyfunction!(patch_apply, m)?)?;
    m.add_function(wrap_pyfunction!(patch_apply_json, m)?)?;
    m.add_function(wrap_pyfunction!(patch_diff, m)?)?;
    Ok(())
}
