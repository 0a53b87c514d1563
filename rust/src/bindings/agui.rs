//! Python bindings for `crate::agui`: `ActivityStore`, `AguiWarning`, the parse-only baseline
//! `ParseOnlyStream`, and the `AguiError` exception family.

use pyo3::create_exception;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBool, PyBytes, PyDate, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

use crate::agui::{self, ErrorKind, Message};
use crate::bindings::errors::TetherError;

create_exception!(
    _core,
    AguiError,
    TetherError,
    "An AG-UI event could not be consumed; the store is unchanged by it."
);
create_exception!(
    _core,
    AguiDecodeError,
    AguiError,
    "The bytes are not a JSON/NDJSON/SSE AG-UI event stream."
);
create_exception!(
    _core,
    AguiMalformedError,
    AguiError,
    "A field the AG-UI protocol describes carries a value the schema rejects."
);
create_exception!(
    _core,
    AguiAttributionError,
    AguiMalformedError,
    "An ACTIVITY_DELTA's subagentRunId disagrees with the activity's owner."
);
create_exception!(
    _core,
    AguiSequenceError,
    AguiError,
    "The event is not allowed at this point of the run."
);

fn to_pyerr(py: Python<'_>, e: agui::AguiError) -> PyErr {
    let text = e.to_string();
    let err = match e.kind {
        ErrorKind::Decode => AguiDecodeError::new_err(text),
        ErrorKind::Malformed => AguiMalformedError::new_err(text),
        ErrorKind::Attribution => AguiAttributionError::new_err(text),
        ErrorKind::Sequence => AguiSequenceError::new_err(text),
    };
    let value = err.value(py);
    // Attributes are best effort: the message above already carries all of them.
    let _ = value.setattr("code", e.code);
    let _ = value.setattr("event_type", e.event_type);
    let _ = value.setattr("message_id", e.message_id);
    let _ = value.setattr("reason", e.reason);
    err
}

/// The deepest nesting accepted from Python objects (cycles would otherwise never end).
const MAX_DEPTH: usize = 256;

/// A JSON value from Python objects: dict (str keys), list/tuple, str, int, float, bool, None,
/// subclasses included (a `str` enum member such as `ag_ui.core.EventType` is its string).
/// A NaN or infinite float is an `AguiMalformedError` (`non_finite_number`); any other
/// non-JSON value is a `TypeError`.
pub(crate) fn py_to_value(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyTypeError::new_err(format!(
            "value nested deeper than {MAX_DEPTH} levels (a cycle?)"
        )));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(utf8(s)?.to_owned()));
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = obj.cast::<PyInt>() {
        if let Ok(v) = i.extract::<i64>() {
            return Ok(Value::Number(v.into()));
        }
        // int.__repr__ of the base type: an IntEnum's str() would be its name.
        let text = py_int_text(i)?;
        return serde_json::from_str::<Number>(&text)
            .map(Value::Number)
            .map_err(|e| {
                PyTypeError::new_err(format!("integer {text} is not representable: {e}"))
            });
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let v = f.value();
        // NaN and the infinities are Python floats but no JSON number: a malformed value, as
        // the same event given as JSON text (where they cannot even be written) would be.
        return Number::from_f64(v).map(Value::Number).ok_or_else(|| {
            let why = format!("{v} is not a JSON number (JSON has no NaN or Infinity)");
            to_pyerr(
                obj.py(),
                agui::AguiError::malformed(agui::error::NON_FINITE_NUMBER, why),
            )
        });
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut m = Map::with_capacity(d.len());
        for (k, v) in d.iter() {
            let Ok(k) = k.cast::<PyString>() else {
                return Err(PyTypeError::new_err(format!(
                    "JSON object keys must be str, got {}",
                    k.get_type().name()?
                )));
            };
            m.insert(utf8(k)?.to_owned(), py_to_value(&v, depth + 1)?);
        }
        return Ok(Value::Object(m));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        return l
            .iter()
            .map(|v| py_to_value(&v, depth + 1))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        return t
            .iter()
            .map(|v| py_to_value(&v, depth + 1))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    Err(PyTypeError::new_err(format!(
        "{} is not a JSON value",
        obj.get_type().name()?
    )))
}

/// The UTF-8 text of a `str`; a lone surrogate, which no JSON text can carry, is a TypeError.
fn utf8<'a>(s: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    s.to_str()
        .map_err(|_| PyTypeError::new_err("a str with a lone surrogate is not JSON text"))
}

fn py_int_text(i: &Bound<'_, PyInt>) -> PyResult<String> {
    let repr = i
        .py()
        .get_type::<PyInt>()
        .getattr("__repr__")?
        .call1((i,))?;
    Ok(repr.cast::<PyString>()?.to_str()?.to_owned())
}

/// Python objects from a JSON value; integers of any size stay exact.
pub(crate) fn value_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                let text = n.to_string();
                if text.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
                    py.get_type::<PyInt>().call1((text,))?
                } else {
                    // Rust's parser reads the exact text as Python's `json` does: 1e400 is
                    // inf (`as_f64` would give up on it).
                    let f = n.as_str().parse::<f64>().map_err(|e| {
                        PyTypeError::new_err(format!("number {n} is not representable: {e}"))
                    })?;
                    PyFloat::new(py, f).into_any()
                }
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(a) => {
            let list = PyList::empty(py);
            for item in a {
                list.append(value_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(m) => {
            let d = PyDict::new(py);
            for (k, item) in m {
                d.set_item(k, value_to_py(py, item)?)?;
            }
            d.into_any()
        }
    })
}

/// A tolerated failure: the event, or part of it, was skipped or stripped.
#[pyclass(module = "tether._core", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AguiWarning {
    #[pyo3(get)]
    code: String,
    #[pyo3(get)]
    event_type: Option<String>,
    #[pyo3(get)]
    message_id: Option<String>,
    #[pyo3(get)]
    reason: String,
}

impl From<&agui::Warning> for AguiWarning {
    fn from(w: &agui::Warning) -> Self {
        AguiWarning {
            code: w.code.to_owned(),
            event_type: w.event_type.clone(),
            message_id: w.message_id.clone(),
            reason: w.reason.clone(),
        }
    }
}

#[pymethods]
impl AguiWarning {
    #[new]
    #[pyo3(signature = (code, reason, *, event_type = None, message_id = None))]
    fn new(
        code: String,
        reason: String,
        event_type: Option<String>,
        message_id: Option<String>,
    ) -> Self {
        AguiWarning {
            code,
            event_type,
            message_id,
            reason,
        }
    }

    /// The wire-style dict: `code`, `eventType`, `messageId`, `reason` (absent ids left out).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("code", &self.code)?;
        if let Some(t) = &self.event_type {
            d.set_item("eventType", t)?;
        }
        if let Some(id) = &self.message_id {
            d.set_item("messageId", id)?;
        }
        d.set_item("reason", &self.reason)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "AguiWarning(code={}, event_type={}, message_id={}, reason={})",
            py_str_repr(&self.code),
            opt_repr(&self.event_type),
            opt_repr(&self.message_id),
            py_str_repr(&self.reason)
        )
    }
}

fn py_str_repr(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn opt_repr(s: &Option<String>) -> String {
    s.as_deref().map_or_else(|| "None".to_owned(), py_str_repr)
}

/// One AG-UI thread's ordered message history, built from events (dicts or bytes).
///
/// Single owner: not for concurrent use from several threads. Subclassable:
/// `tether.agui.ActivityStore` passes today's date.
#[pyclass(module = "tether._core", name = "ActivityStore", subclass)]
pub struct PyActivityStore {
    inner: agui::ActivityStore,
}

/// A `datetime.date` (or `datetime.datetime`, for its date) as the core's `Date`.
fn py_date(obj: &Bound<'_, PyAny>) -> PyResult<agui::Date> {
    if !obj.is_instance_of::<PyDate>() {
        return Err(PyTypeError::new_err(format!(
            "today must be a datetime.date, not {}",
            obj.get_type().name()?
        )));
    }
    let (year, month, day): (i32, u32, u32) = (
        obj.getattr("year")?.extract()?,
        obj.getattr("month")?.extract()?,
        obj.getattr("day")?.extract()?,
    );
    agui::Date::new(year, month, day)
        .ok_or_else(|| PyValueError::new_err(format!("{year}-{month}-{day} is not a date")))
}

impl PyActivityStore {
    fn new_warnings(&self, from: usize) -> Vec<AguiWarning> {
        self.inner.warnings()[from..]
            .iter()
            .map(AguiWarning::from)
            .collect()
    }
}

fn message_list<'py, 'a>(
    py: Python<'py>,
    msgs: impl Iterator<Item = &'a Message>,
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for m in msgs {
        list.append(value_to_py(py, &m.to_wire())?)?;
    }
    Ok(list)
}

#[pymethods]
impl PyActivityStore {
    /// `today` is the date deprecation windows are judged by (the core reads no clock);
    /// without one they count as closed, so `rawEvent: null` is fatal. `lifecycle` is
    /// `"strict"` or `"partial"` (a capture that may begin mid-run).
    #[new]
    #[pyo3(signature = (*, today = None, lifecycle = "strict"))]
    fn py_new(today: Option<&Bound<'_, PyAny>>, lifecycle: &str) -> PyResult<Self> {
        let today = today.map(py_date).transpose()?;
        let lifecycle = match lifecycle {
            "strict" => agui::Lifecycle::Strict,
            "partial" => agui::Lifecycle::Partial,
            other => {
                return Err(PyValueError::new_err(format!(
                    "lifecycle must be 'strict' or 'partial', not {other:?}"
                )))
            }
        };
        Ok(PyActivityStore {
            inner: agui::ActivityStore::with_options(agui::StoreOptions { today, lifecycle }),
        })
    }

    /// How the run lifecycle is enforced: `"strict"` or `"partial"`.
    #[getter]
    fn lifecycle(&self) -> &'static str {
        match self.inner.options().lifecycle {
            agui::Lifecycle::Strict => "strict",
            agui::Lifecycle::Partial => "partial",
        }
    }

    /// The date deprecation windows are judged by, or None.
    #[getter]
    fn today<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(d) = self.inner.options().today else {
            return Ok(None);
        };
        let (y, m, day) = d.parts();
        Ok(Some(PyDate::new(py, y, m, day)?.into_any()))
    }

    /// Feeds raw bytes and returns the warnings they caused.
    fn feed(&mut self, py: Python<'_>, data: PyBackedBytes) -> PyResult<Vec<AguiWarning>> {
        let before = self.inner.warnings().len();
        let inner = &mut self.inner;
        // Parsing and patching owned data is pure Rust and can run long on big captures.
        let result = py.detach(|| inner.feed(&data));
        result.map_err(|e| to_pyerr(py, e))?;
        Ok(self.new_warnings(before))
    }

    /// Handles one event given as a dict and returns the warnings it caused.
    fn handle_event(
        &mut self,
        py: Python<'_>,
        event: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<AguiWarning>> {
        let value = py_to_value(event, 0)?;
        let before = self.inner.warnings().len();
        self.inner
            .handle_value(value)
            .map_err(|e| to_pyerr(py, e))?;
        Ok(self.new_warnings(before))
    }

    /// End of the byte stream: handles a last unterminated event; leftover bytes are an error.
    fn finish(&mut self, py: Python<'_>) -> PyResult<Vec<AguiWarning>> {
        let before = self.inner.warnings().len();
        self.inner.finish().map_err(|e| to_pyerr(py, e))?;
        Ok(self.new_warnings(before))
    }

    /// The history as wire-form (camelCase) dicts.
    fn messages<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        message_list(py, self.inner.messages().iter())
    }

    /// The history without activity messages: what a run's input may carry.
    fn run_input_messages<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        message_list(py, self.inner.run_input_messages())
    }

    /// The activity messages only, in history order.
    fn activities<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        message_list(
            py,
            self.inner
                .messages()
                .iter()
                .filter(|m| matches!(m, Message::Activity(_))),
        )
    }

    /// The message with this id, in wire form, or None.
    fn get<'py>(&self, py: Python<'py>, message_id: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner
            .get(message_id)
            .map(|m| value_to_py(py, &m.to_wire()))
            .transpose()
    }

    /// The history as a JSON array (bytes).
    fn to_json<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.to_json())
    }

    /// Every warning so far, oldest first.
    #[getter]
    fn warnings(&self) -> Vec<AguiWarning> {
        self.new_warnings(0)
    }

    /// Events handled so far (applied, skipped or dropped with a warning).
    #[getter]
    fn events_handled(&self) -> u64 {
        self.inner.events_handled()
    }

    /// Bytes fed that do not yet form a complete event.
    #[getter]
    fn pending_bytes(&self) -> usize {
        self.inner.pending_bytes()
    }

    fn __len__(&self) -> usize {
        self.inner.messages().len()
    }
}

/// The parse-only limit for benchmarks: frames and parses JSON values exactly as
/// `ActivityStore.feed` does, and does nothing else with them.
#[pyclass(module = "tether._core")]
pub struct ParseOnlyStream {
    framer: agui::Framer,
}

#[pymethods]
impl ParseOnlyStream {
    #[new]
    fn new() -> Self {
        ParseOnlyStream {
            framer: agui::Framer::new(),
        }
    }

    /// Feeds bytes and returns how many complete JSON values they finished.
    fn feed(&mut self, py: Python<'_>, data: PyBackedBytes) -> PyResult<usize> {
        let framer = &mut self.framer;
        // Same GIL release as ActivityStore.feed, so the two are measured alike.
        let result = py.detach(|| {
            framer.push(&data);
            let mut n = 0usize;
            while let Some(v) = framer.next_value()? {
                std::hint::black_box(&v);
                n += 1;
            }
            Ok::<usize, agui::AguiError>(n)
        });
        result.map_err(|e| to_pyerr(py, e))
    }
}

/// Every warning code `ActivityStore` can produce.
#[pyfunction]
fn agui_warning_codes() -> Vec<&'static str> {
    agui::WARNING_CODES.to_vec()
}

/// Every error code `ActivityStore` can raise.
#[pyfunction]
fn agui_error_codes() -> Vec<&'static str> {
    agui::ERROR_CODES.to_vec()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let base = py.get_type::<AguiError>();
    // Class-level defaults, so the attributes exist (and are typed in the stub) on the class.
    for attr in ["code", "event_type", "message_id", "reason"] {
        base.setattr(attr, py.None())?;
    }
    m.add("AguiError", base)?;
    m.add("AguiDecodeError", py.get_type::<AguiDecodeError>())?;
    m.add("AguiMalformedError", py.get_type::<AguiMalformedError>())?;
    m.add(
        "AguiAttributionError",
        py.get_type::<AguiAttributionError>(),
    )?;
    m.add("AguiSequenceError", py.get_type::<AguiSequenceError>())?;
    m.add_class::<AguiWarning>()?;
    m.add_class::<PyActivityStore>()?;
    m.add_class::<ParseOnlyStream>()?;
    m.add_function(wrap_pyfunction!(agui_warning_codes, m)?)?;
    m.add_function(wrap_pyfunction!(agui_error_codes, m)?)?;
    let expires = agui::RAW_EVENT_NULL_EXPIRES.parts();
    m.add(
        "AGUI_RAW_EVENT_NULL_EXPIRES",
        PyDate::new(py, expires.0, expires.1, expires.2)?,
    )?;
    Ok(())
}
