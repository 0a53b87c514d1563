//! Python bindings for `crate::live`: the event validator, the publisher-side framer, the
//! subscriber and the overlay, and the `LiveEventError` exception family.
//!
//! Errors: `LiveError` converts once, in `to_pyerr`, into `LiveEventInvalid` (the peer sent
//! something the contract refuses) or `LiveUsageError` (the caller's mistake), with `code`,
//! `path` and `reason` set on the instance and declared on the class. The crate is built for
//! abi3, where pyo3 cannot make a `#[pyclass(extends = PyException)]`, so the classes come
//! from `create_exception!` like the rest of the hierarchy.
//!
//! Events cross as JSON bytes (or a dict, walked in Rust) and are held as frozen `LiveEvent`
//! objects; every call is microseconds of pure work on small inputs, so none releases the GIL.

use pyo3::create_exception;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyString, PyTuple};

use super::agui::{py_to_value, value_to_py};
use crate::bindings::errors::TetherError;
use crate::live::error::{self as lerr, ErrorKind, LiveError};
use crate::live::frame::{Delivery, KeyKind};
use crate::live::framer::{FramerConfig, Publisher};
use crate::live::overlay::{parse_record, Applied, Overlay, Reason};
use crate::live::subscriber::{Fault, FrameOutcome, Subscriber};
use crate::live::{self, Identity, LiveEvent};

create_exception!(
    _core,
    LiveEventError,
    TetherError,
    "A live event, frame or record was refused; `code`, `path` and `reason` say why and where."
);
create_exception!(
    _core,
    LiveEventInvalid,
    LiveEventError,
    "The peer sent an event, frame or canonical record that the live contract refuses."
);
create_exception!(
    _core,
    LiveUsageError,
    LiveEventError,
    "The caller used a live object wrongly (bad configuration, another session's record)."
);

fn to_pyerr(py: Python<'_>, e: LiveError) -> PyErr {
    let text = e.to_string();
    let err = match e.kind() {
        ErrorKind::Invalid => LiveEventInvalid::new_err(text),
        ErrorKind::Usage => LiveUsageError::new_err(text),
    };
    let value = err.value(py);
    // Setting attributes on a fresh exception instance cannot fail; the message has them all.
    let _ = value.setattr("code", e.code.as_str());
    let _ = value.setattr("path", e.path);
    let _ = value.setattr("reason", e.reason);
    err
}

/// Reads an event from bytes, bytearray, str (JSON text) or a dict.
fn event_from_py(obj: &Bound<'_, PyAny>) -> PyResult<LiveEvent> {
    let py = obj.py();
    if let Ok(e) = obj.cast::<PyLiveEvent>() {
        return Ok(e.get().inner.clone());
    }
    let result = if let Ok(b) = obj.cast::<PyBytes>() {
        live::validate(b.as_bytes())
    } else if let Ok(b) = obj.cast::<PyByteArray>() {
        live::validate(&b.to_vec())
    } else if let Ok(s) = obj.cast::<PyString>() {
        live::validate(s.to_str()?.as_bytes())
    } else if obj.cast::<PyDict>().is_ok() {
        // A dict nests as deep as text may (`MAX_DEPTH`): deeper, it was accepted here and
        // then refused by every subscriber of the frame that carried it.
        let value = py_to_value(obj, 0)?;
        live::json::check_depth(&value).and_then(|()| live::validate_value(&value))
    } else {
        return Err(PyTypeError::new_err(format!(
            "expected a LiveEvent, JSON bytes/str or a dict, not {}",
            obj.get_type().name()?
        )));
    };
    result.map_err(|e| to_pyerr(py, e))
}

/// One validated live event (frozen).
#[pyclass(module = "tether._core", frozen, name = "LiveEvent")]
pub struct PyLiveEvent {
    inner: LiveEvent,
}

#[pymethods]
impl PyLiveEvent {
    #[getter]
    fn event_type(&self) -> &'static str {
        self.inner.event_type().as_str()
    }
    #[getter]
    fn workspace_id(&self) -> &str {
        &self.inner.identity().workspace_id
    }
    #[getter]
    fn agent_session_id(&self) -> &str {
        &self.inner.identity().agent_session_id
    }
    /// The message id of a message delta, else None.
    #[getter]
    fn message_id(&self) -> Option<&str> {
        match &self.inner {
            LiveEvent::MessageDelta(d) => Some(&d.message_id),
            _ => None,
        }
    }
    /// The turn a message delta or turn update concerns, else None.
    #[getter]
    fn turn_id(&self) -> Option<&str> {
        match &self.inner {
            LiveEvent::MessageDelta(d) => Some(&d.turn_id),
            LiveEvent::TurnUpdate(u) => Some(&u.turn.turn_id),
            _ => None,
        }
    }
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        value_to_py(py, &self.inner.to_value())
    }
    fn to_json<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.to_json())
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyLiveEvent>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }
    fn __repr__(&self) -> String {
        format!(
            "LiveEvent({})",
            String::from_utf8_lossy(&self.inner.to_json())
        )
    }
}

/// Validates one live event; raises `LiveEventInvalid` naming the rule and the JSON path.
#[pyfunction]
fn validate_live_event(data: &Bound<'_, PyAny>) -> PyResult<PyLiveEvent> {
    Ok(PyLiveEvent {
        inner: event_from_py(data)?,
    })
}

/// One delivery of a frame: an event, or a discontinuity naming keys to re-read.
#[pyclass(module = "tether._core", frozen, name = "LiveDelivery")]
pub struct PyDelivery {
    inner: Delivery,
}

#[pymethods]
impl PyDelivery {
    #[getter]
    fn kind(&self) -> &'static str {
        match self.inner {
            Delivery::Event(_) => "event",
            Delivery::Discontinuity(_) => "discontinuity",
        }
    }
    #[getter]
    fn event(&self) -> Option<PyLiveEvent> {
        match &self.inner {
            Delivery::Event(e) => Some(PyLiveEvent { inner: e.clone() }),
            Delivery::Discontinuity(_) => None,
        }
    }
    /// The keys of a discontinuity, as (kind, id) pairs; empty for an event.
    #[getter]
    fn reconcile_keys(&self) -> Vec<(&'static str, String)> {
        match &self.inner {
            Delivery::Event(_) => Vec::new(),
            Delivery::Discontinuity(d) => d
                .keys
                .iter()
                .map(|k| (k.kind.as_str(), k.id.clone()))
                .collect(),
        }
    }
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        value_to_py(py, &self.inner.to_value())
    }
    fn __repr__(&self) -> String {
        format!("LiveDelivery({})", self.inner.to_value())
    }
}

fn deliveries(ds: Vec<Delivery>) -> Vec<PyDelivery> {
    ds.into_iter().map(|inner| PyDelivery { inner }).collect()
}

/// One session's publisher: tool-output traces and events framed into transport frames.
///
/// Single owner: not for concurrent use from several threads.
#[pyclass(module = "tether._core", name = "LivePublisher")]
pub struct PyLivePublisher {
    inner: Publisher,
}

#[pymethods]
impl PyLivePublisher {
    #[new]
    // Python keyword-only options: the pyo3 signature, not a Rust call site, keeps this readable.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (workspace_id, agent_session_id, *, epoch, max_chunk_bytes = 131072,
        max_output_bytes = 1048576, truncation_marker = None, max_deliveries_per_frame = 64))]
    fn new(
        py: Python<'_>,
        workspace_id: String,
        agent_session_id: String,
        epoch: u64,
        max_chunk_bytes: usize,
        max_output_bytes: usize,
        truncation_marker: Option<String>,
        max_deliveries_per_frame: usize,
    ) -> PyResult<Self> {
        let config = FramerConfig {
            max_chunk_bytes,
            max_output_bytes,
            truncation_marker: truncation_marker
                .unwrap_or_else(|| live::framer::DEFAULT_TRUNCATION_MARKER.to_owned()),
            max_deliveries_per_frame,
        };
        Publisher::new(
            Identity {
                workspace_id,
                agent_session_id,
            },
            epoch,
            config,
        )
        .map(|inner| PyLivePublisher { inner })
        .map_err(|e| to_pyerr(py, e))
    }

    /// Appends text to a tool call's trace (role "tool", kind "tool_call").
    #[pyo3(signature = (message_id, turn_id, text, *, now_ms))]
    fn tool_output(
        &mut self,
        py: Python<'_>,
        message_id: &str,
        turn_id: &str,
        text: &str,
        now_ms: u64,
    ) -> PyResult<()> {
        self.inner
            .tool_output(message_id, turn_id, text, now_ms)
            .map_err(|e| to_pyerr(py, e))
    }

    /// Queues an event (a LiveEvent, JSON bytes/str or a dict), validated first.
    fn publish(&mut self, py: Python<'_>, event: &Bound<'_, PyAny>) -> PyResult<()> {
        let e = event_from_py(event)?;
        self.inner.publish(e).map_err(|e| to_pyerr(py, e))
    }

    /// The next frame's JSON bytes, or None when nothing is queued.
    fn poll_frame<'py>(&mut self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.inner
            .poll_frame()
            .map(|f| PyBytes::new(py, &f.to_json()))
    }

    /// The next frame, or an empty one that still advances `seq`.
    fn heartbeat<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.heartbeat().to_json())
    }

    fn emitted_bytes(&self, message_id: &str) -> Option<u64> {
        self.inner.emitted_bytes(message_id)
    }
    fn dropped_bytes(&self, message_id: &str) -> Option<u64> {
        self.inner.dropped_bytes(message_id)
    }
    /// The text a subscriber holds once the whole trace `text` went through `tool_output`
    /// (in any pieces): the output cap and its marker applied.
    fn capped_output(&self, text: &str) -> String {
        self.inner.config().capped_output(text)
    }
    fn is_turn_settled(&self, turn_id: &str) -> bool {
        self.inner.is_turn_settled(turn_id)
    }
    /// Forget a message that will be published no more (see the Rust docs).
    fn forget_message(&mut self, message_id: &str) {
        self.inner.forget_message(message_id)
    }
    /// Forget a turn none of whose messages is held any more.
    fn forget_turn(&mut self, turn_id: &str) {
        self.inner.forget_turn(turn_id)
    }
    /// Messages and turns this publisher holds state for.
    #[getter]
    fn held(&self) -> usize {
        self.inner.held()
    }
    #[getter]
    fn epoch(&self) -> u64 {
        self.inner.epoch()
    }
    #[getter]
    fn seq(&self) -> u64 {
        self.inner.seq()
    }
    #[getter]
    fn pending(&self) -> usize {
        self.inner.pending()
    }
}

/// What one frame meant to the subscriber (frozen).
#[pyclass(module = "tether._core", frozen, name = "FrameOutcome")]
pub struct PyFrameOutcome {
    #[pyo3(get)]
    epoch: u64,
    #[pyo3(get)]
    seq: u64,
    #[pyo3(get)]
    fault: Option<&'static str>,
    #[pyo3(get)]
    missing: Vec<u64>,
    #[pyo3(get)]
    reread: bool,
    inner: Vec<Delivery>,
}

#[pymethods]
impl PyFrameOutcome {
    #[getter]
    fn deliveries(&self) -> Vec<PyDelivery> {
        deliveries(self.inner.clone())
    }
    fn __repr__(&self) -> String {
        format!(
            "FrameOutcome(epoch={}, seq={}, fault={}, missing={:?}, deliveries={}, reread={})",
            self.epoch,
            self.seq,
            self.fault.map_or("None".to_owned(), |f| format!("'{f}'")),
            self.missing,
            self.inner.len(),
            if self.reread { "True" } else { "False" }
        )
    }
}

impl From<FrameOutcome> for PyFrameOutcome {
    fn from(o: FrameOutcome) -> Self {
        PyFrameOutcome {
            epoch: o.epoch,
            seq: o.seq,
            fault: o.fault.map(Fault::as_str),
            missing: o.missing,
            reread: o.reread,
            inner: o.deliveries,
        }
    }
}

/// Reads transport frames and says when the canonical state must be re-read.
///
/// Single owner: not for concurrent use from several threads.
#[pyclass(module = "tether._core", name = "LiveSubscriber")]
pub struct PyLiveSubscriber {
    inner: Subscriber,
}

#[pymethods]
impl PyLiveSubscriber {
    #[new]
    #[pyo3(signature = (*, epoch = None, seq = 0, window = 1024))]
    fn new(py: Python<'_>, epoch: Option<u64>, seq: u64, window: usize) -> PyResult<Self> {
        Subscriber::new(epoch, seq, window)
            .map(|inner| PyLiveSubscriber { inner })
            .map_err(|e| to_pyerr(py, e))
    }

    /// Reads one frame (JSON bytes); raises `LiveEventInvalid` for a frame the contract refuses.
    fn handle_frame(&mut self, py: Python<'_>, data: &[u8]) -> PyResult<PyFrameOutcome> {
        self.inner
            .handle_frame(data)
            .map(PyFrameOutcome::from)
            .map_err(|e| to_pyerr(py, e))
    }

    /// The overlay holds the canonical record as of (epoch, seq): returns the kept deliveries
    /// of later frames, to apply on top.
    fn resync(&mut self, epoch: u64, seq: u64) -> Vec<PyDelivery> {
        deliveries(self.inner.resync(epoch, seq))
    }

    #[getter]
    fn epoch(&self) -> Option<u64> {
        self.inner.epoch()
    }
    #[getter]
    fn last_seq(&self) -> u64 {
        self.inner.last_seq()
    }
    #[getter]
    fn needs_reread(&self) -> bool {
        self.inner.needs_reread()
    }
    #[getter]
    fn missing(&self) -> Vec<u64> {
        self.inner.missing()
    }
}

fn applied_str(a: Applied) -> &'static str {
    match a {
        Applied::Applied => "applied",
        Applied::Unchanged => "unchanged",
        Applied::Marked(r) => r.as_str(),
    }
}

/// One session's optimistic overlay, reconciled with the canonical record.
///
/// Single owner: not for concurrent use from several threads.
#[pyclass(module = "tether._core", name = "LiveOverlay")]
pub struct PyLiveOverlay {
    inner: Overlay,
}

#[pymethods]
impl PyLiveOverlay {
    #[new]
    fn new(workspace_id: String, agent_session_id: String) -> Self {
        PyLiveOverlay {
            inner: Overlay::new(Identity {
                workspace_id,
                agent_session_id,
            }),
        }
    }

    /// Applies one event (a LiveEvent, JSON bytes/str or a dict, validated first). Returns
    /// "applied", "unchanged" or the reason the entry now needs reconciliation.
    fn apply(&mut self, event: &Bound<'_, PyAny>) -> PyResult<&'static str> {
        if let Ok(e) = event.cast::<PyLiveEvent>() {
            return Ok(applied_str(self.inner.apply(&e.get().inner)));
        }
        let e = event_from_py(event)?;
        Ok(applied_str(self.inner.apply(&e)))
    }

    /// Applies one delivery (a discontinuity marks its keys).
    fn apply_delivery(&mut self, delivery: &Bound<'_, PyDelivery>) -> Vec<&'static str> {
        self.inner
            .apply_delivery(&delivery.get().inner)
            .into_iter()
            .map(applied_str)
            .collect()
    }

    /// Applies every delivery of a frame outcome, in order.
    fn apply_outcome(&mut self, outcome: &Bound<'_, PyFrameOutcome>) -> Vec<&'static str> {
        let mut out = Vec::new();
        for d in &outcome.get().inner {
            out.extend(self.inner.apply_delivery(d).into_iter().map(applied_str));
        }
        out
    }

    /// Replaces the optimistic state with the canonical record (the `snapshot()` form), then
    /// applies `replay` (what `LiveSubscriber.resync` returned); returns the (kind, id) of each
    /// terminal optimistic entry that stood.
    #[pyo3(signature = (record, *, replay = Vec::new()))]
    fn reconcile(
        &mut self,
        py: Python<'_>,
        record: &Bound<'_, PyAny>,
        replay: Vec<Bound<'_, PyDelivery>>,
    ) -> PyResult<Vec<(&'static str, String)>> {
        let v = py_to_value(record, 0)?;
        let (identity, state) = parse_record(&v).map_err(|e| to_pyerr(py, e))?;
        if &identity != self.inner.identity() {
            return Err(to_pyerr(
                py,
                LiveError::new(
                    lerr::Code::SessionMismatch,
                    "",
                    "the record is of another workspace or session",
                ),
            ));
        }
        let replay: Vec<Delivery> = replay.iter().map(|d| d.get().inner.clone()).collect();
        Ok(self
            .inner
            .reconcile(state, &replay)
            .into_iter()
            .map(|(k, id)| (k.as_str(), id))
            .collect())
    }

    /// The overlay in the canonical record's form.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        value_to_py(py, &self.inner.snapshot())
    }

    /// One message in record form, or None.
    fn message<'py>(
        &self,
        py: Python<'py>,
        message_id: &str,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner
            .state()
            .messages
            .get(message_id)
            .map(|m| value_to_py(py, &m.to_value()))
            .transpose()
    }

    /// Every entry that needs reconciliation: (kind, id, reason).
    #[getter]
    fn marks<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for ((kind, id), reason) in self.inner.marks() {
            list.append(PyTuple::new(
                py,
                [
                    kind.as_str().into_pyobject(py)?.into_any(),
                    id.as_str().into_pyobject(py)?.into_any(),
                    reason.as_str().into_pyobject(py)?.into_any(),
                ],
            )?)?;
        }
        Ok(list)
    }

    #[getter]
    fn needs_reconciliation(&self) -> bool {
        self.inner.needs_reconciliation()
    }

    #[getter]
    fn events_applied(&self) -> u64 {
        self.inner.events_applied()
    }
}

/// Every code a live error can carry.
#[pyfunction]
fn live_error_codes() -> Vec<&'static str> {
    lerr::error_codes()
}

/// The codes of rules the live-event JSON Schema expresses.
#[pyfunction]
fn live_schema_codes() -> Vec<&'static str> {
    lerr::schema_codes()
}

/// The codes of contract rules only Tether enforces.
#[pyfunction]
fn live_tether_only_codes() -> Vec<&'static str> {
    lerr::tether_only_codes()
}

/// Every reason the overlay gives for an entry that needs reconciliation.
#[pyfunction]
fn live_mark_reasons() -> Vec<&'static str> {
    Reason::ALL.iter().map(|r| r.as_str()).collect()
}

/// Every fault the subscriber reports.
#[pyfunction]
fn live_fault_kinds() -> Vec<&'static str> {
    Fault::ALL.iter().map(|f| f.as_str()).collect()
}

/// Every reconcile-key kind.
#[pyfunction]
fn live_key_kinds() -> Vec<&'static str> {
    [KeyKind::Message, KeyKind::Turn, KeyKind::Interaction]
        .iter()
        .map(|k| k.as_str())
        .collect()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let base = py.get_type::<LiveEventError>();
    // Class-level defaults, so the attributes exist (and are typed in the stub) on the class.
    for attr in ["code", "path", "reason"] {
        base.setattr(attr, py.None())?;
    }
    m.add("LiveEventError", base)?;
    m.add("LiveEventInvalid", py.get_type::<LiveEventInvalid>())?;
    m.add("LiveUsageError", py.get_type::<LiveUsageError>())?;
    m.add_class::<PyLiveEvent>()?;
    m.add_class::<PyDelivery>()?;
    m.add_class::<PyLivePublisher>()?;
    m.add_class::<PyFrameOutcome>()?;
    m.add_class::<PyLiveSubscriber>()?;
    m.add_class::<PyLiveOverlay>()?;
    m.add_function(wrap_pyfunction!(validate_live_event, m)?)?;
    m.add_function(wrap_pyfunction!(live_error_codes, m)?)?;
    m.add_function(wrap_pyfunction!(live_schema_codes, m)?)?;
    m.add_function(wrap_pyfunction!(live_tether_only_codes, m)?)?;
    m.add_function(wrap_pyfunction!(live_mark_reasons, m)?)?;
    m.add_function(wrap_pyfunction!(live_fault_kinds, m)?)?;
    m.add_function(wrap_pyfunction!(live_key_kinds, m)?)?;
    Ok(())
}
