//! Python bindings for `crate::catalog`.
//!
//! Records cross as flat tuples in `catalog_columns()` order: that is exactly what `sqlite3`
//! reads and binds, so storage passes rows straight through and the Python record view is built
//! once per call. Inputs (admission, receipt, result, guard, evidence) are the Python frozen
//! dataclasses themselves, read by attribute. Every rejection becomes one exception class under
//! `CatalogRejection`, with the stable code as the class attribute `code`.

use pyo3::create_exception;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyList, PyString, PyTuple};

use crate::bindings::errors::TetherError;
use crate::catalog::{
    self, ActivityRecord, Admission, CellRef, Decision, DecisionOutcome, Key, Now, Receipt,
    Rejection, RejectionKind, ResultRef, RowError, COLUMNS,
};

create_exception!(
    _core,
    CatalogRejection,
    TetherError,
    "The Activity catalog refused a transition; `code` names the rule."
);
create_exception!(
    _core,
    CatalogStorageError,
    TetherError,
    "A stored catalog row or schema is unusable."
);
create_exception!(
    _core,
    CatalogConfigError,
    TetherError,
    "A catalog URL or option is invalid."
);

create_exception!(
    _core,
    StaleFence,
    CatalogRejection,
    "The fence is not the current attempt's."
);
create_exception!(
    _core,
    LeaseExpired,
    CatalogRejection,
    "The current attempt's lease has expired."
);
create_exception!(
    _core,
    AdmissionConflict,
    CatalogRejection,
    "Same key, different immutable admission."
);
create_exception!(
    _core,
    ResultConflict,
    CatalogRejection,
    "A different result is already recorded."
);
create_exception!(
    _core,
    NotBound,
    CatalogRejection,
    "No provider operation is bound yet."
);
create_exception!(
    _core,
    ReconcileOnly,
    CatalogRejection,
    "The attempt may only reconcile."
);
create_exception!(
    _core,
    NotReconciling,
    CatalogRejection,
    "Only a reconcile attempt may do this."
);
create_exception!(
    _core,
    AwaitingDecision,
    CatalogRejection,
    "The activity awaits an operator decision."
);
create_exception!(
    _core,
    NotAwaitingDecision,
    CatalogRejection,
    "The activity awaits no decision."
);
create_exception!(
    _core,
    StaleEvidenceRevision,
    CatalogRejection,
    "The decision names old evidence."
);
create_exception!(
    _core,
    InvalidDecision,
    CatalogRejection,
    "The operator decision is malformed."
);
create_exception!(
    _core,
    ReceiptMismatch,
    CatalogRejection,
    "The receipt does not fit this activity."
);
create_exception!(
    _core,
    TokenlessReceipt,
    ReceiptMismatch,
    "The receipt has no visibility token."
);
create_exception!(
    _core,
    EvidenceMismatch,
    CatalogRejection,
    "The evidence does not bind the result."
);
create_exception!(
    _core,
    SettlementConflict,
    CatalogRejection,
    "A different settlement is recorded."
);
create_exception!(
    _core,
    NoResult,
    CatalogRejection,
    "No result is recorded yet."
);
create_exception!(
    _core,
    OperationConflict,
    CatalogRejection,
    "A different provider operation is bound."
);
create_exception!(
    _core,
    OperationBound,
    CatalogRejection,
    "The provider operation is bound; reconcile."
);
create_exception!(
    _core,
    NotClaimable,
    CatalogRejection,
    "The activity cannot be claimed now."
);
create_exception!(
    _core,
    BoundsExceeded,
    CatalogRejection,
    "A field is empty, too long or out of range."
);
create_exception!(
    _core,
    Compacted,
    CatalogRejection,
    "The activity settled and was compacted."
);
create_exception!(
    _core,
    NotCompactable,
    CatalogRejection,
    "The activity is unsettled or settled after the cutoff."
);
create_exception!(
    _core,
    WrongHost,
    CatalogRejection,
    "The activity's device is bound to another host."
);
create_exception!(
    _core,
    InvalidRefusal,
    CatalogRejection,
    "A refused admission's refusal is not a failed refusal document."
);
// Not a rule of the pure core (which only sees one record): storage found no record to change.
create_exception!(
    _core,
    UnknownActivity,
    CatalogRejection,
    "No activity with this key exists."
);

fn rejection_type(py: Python<'_>, kind: RejectionKind) -> Bound<'_, pyo3::types::PyType> {
    match kind {
        RejectionKind::StaleFence => py.get_type::<StaleFence>(),
        RejectionKind::LeaseExpired => py.get_type::<LeaseExpired>(),
        RejectionKind::AdmissionConflict => py.get_type::<AdmissionConflict>(),
        RejectionKind::ResultConflict => py.get_type::<ResultConflict>(),
        RejectionKind::NotBound => py.get_type::<NotBound>(),
        RejectionKind::ReconcileOnly => py.get_type::<ReconcileOnly>(),
        RejectionKind::NotReconciling => py.get_type::<NotReconciling>(),
        RejectionKind::AwaitingDecision => py.get_type::<AwaitingDecision>(),
        RejectionKind::NotAwaitingDecision => py.get_type::<NotAwaitingDecision>(),
        RejectionKind::StaleEvidenceRevision => py.get_type::<StaleEvidenceRevision>(),
        RejectionKind::InvalidDecision => py.get_type::<InvalidDecision>(),
        RejectionKind::ReceiptMismatch => py.get_type::<ReceiptMismatch>(),
        RejectionKind::TokenlessReceipt => py.get_type::<TokenlessReceipt>(),
        RejectionKind::EvidenceMismatch => py.get_type::<EvidenceMismatch>(),
        RejectionKind::SettlementConflict => py.get_type::<SettlementConflict>(),
        RejectionKind::NoResult => py.get_type::<NoResult>(),
        RejectionKind::OperationConflict => py.get_type::<OperationConflict>(),
        RejectionKind::OperationBound => py.get_type::<OperationBound>(),
        RejectionKind::NotClaimable => py.get_type::<NotClaimable>(),
        RejectionKind::BoundsExceeded => py.get_type::<BoundsExceeded>(),
        RejectionKind::Compacted => py.get_type::<Compacted>(),
        RejectionKind::NotCompactable => py.get_type::<NotCompactable>(),
        RejectionKind::InvalidRefusal => py.get_type::<InvalidRefusal>(),
        RejectionKind::WrongHost => py.get_type::<WrongHost>(),
    }
}

/// Converts a rejection into its exception, with `field` set on the instance.
fn rejected(py: Python<'_>, r: Rejection) -> PyErr {
    let ty = rejection_type(py, r.kind);
    match ty.call1((r.to_string(),)) {
        Ok(exc) => {
            // Setting an attribute on a fresh exception instance cannot fail short of OOM.
            let _ = exc.setattr("field", r.field);
            PyErr::from_value(exc)
        }
        Err(e) => e,
    }
}

/// An integer argument of a catalog call (`name`): a Python int, not a bool (`True` is no
/// fence or lease), within 64 bits. One beyond them is `bounds_exceeded` on its field, as one
/// outside the core's own bounds is, never an `OverflowError` naming no argument.
fn int_arg(ob: &Bound<'_, PyAny>, field: &'static str) -> PyResult<i64> {
    if ob.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err("must be an int, not bool"));
    }
    match ob.extract::<i64>() {
        Ok(v) => Ok(v),
        Err(e) if e.is_instance_of::<PyOverflowError>(ob.py()) => {
            let digits = ob.str().map(|t| t.to_string()).unwrap_or_default();
            let what = if digits.len() <= 40 {
                digits
            } else {
                format!("an int of {} digits", digits.trim_start_matches('-').len())
            };
            Err(rejected(
                ob.py(),
                Rejection::on(
                    RejectionKind::BoundsExceeded,
                    field,
                    format!("{what} does not fit in 64 bits"),
                ),
            ))
        }
        Err(e) => Err(e),
    }
}

macro_rules! int_args {
    ($($fname:ident => $field:literal),* $(,)?) => {$(
        fn $fname(ob: &Bound<'_, PyAny>) -> PyResult<i64> {
            int_arg(ob, $field)
        }
    )*};
}

int_args!(
    arg_lease_ms => "lease_ms",
    arg_fence => "fence",
    arg_retry_after_ms => "retry_after_ms",
    arg_seen_revision => "seen_revision",
    arg_evidence_revision => "evidence_revision",
    arg_cutoff_ms => "cutoff_ms",
    arg_at_ms => "at_ms",
);

fn row_error(e: RowError) -> PyErr {
    CatalogStorageError::new_err(format!("stored catalog row does not decode: {e}"))
}

/// A stored row's items, borrowed from its tuple (no reference counted), for `load` to borrow
/// their text from.
fn items_of<'a, 'py>(row: &'a Bound<'py, PyTuple>) -> Vec<Borrowed<'a, 'py, PyAny>> {
    row.iter_borrowed().collect()
}

/// A stored row's cells, their text borrowed from the row's Python strings.
fn cells_of<'b>(items: &'b [Borrowed<'_, '_, PyAny>]) -> PyResult<Vec<CellRef<'b>>> {
    let mut cells = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let cell = if item.is_none() {
            CellRef::Null
        } else if let Ok(s) = (**item).cast::<PyString>() {
            CellRef::Text(s.to_str()?)
        } else if let Ok(v) = item.extract::<i64>() {
            CellRef::Int(v)
        } else {
            let column = COLUMNS.get(i).copied().unwrap_or("?");
            return Err(CatalogStorageError::new_err(format!(
                "stored catalog row: column {column} holds an unsupported value"
            )));
        };
        cells.push(cell);
    }
    Ok(cells)
}

/// A stored row as read: the Python tuple, its cells (borrowed from it) and the decoded
/// record.
struct Loaded<'b, 'py> {
    row: &'b Bound<'py, PyTuple>,
    cells: Vec<CellRef<'b>>,
    record: ActivityRecord,
}

fn load<'b, 'py>(
    row: &'b Bound<'py, PyTuple>,
    items: &'b [Borrowed<'b, 'py, PyAny>],
) -> PyResult<Loaded<'b, 'py>> {
    let cells = cells_of(items)?;
    let record = ActivityRecord::from_cell_refs(&cells).map_err(row_error)?;
    Ok(Loaded { row, cells, record })
}

/// The record as a row tuple. Cells equal to the stored row's reuse its Python objects, so
/// storage's changed-column comparison is mostly identity checks and few objects are created.
fn row_of<'py>(
    py: Python<'py>,
    old: Option<&Loaded<'_, 'py>>,
    rec: &ActivityRecord,
) -> PyResult<Bound<'py, PyTuple>> {
    let items: Vec<Py<PyAny>> = rec
        .to_cell_refs()
        .into_iter()
        .enumerate()
        .map(|(i, c)| -> PyResult<Py<PyAny>> {
            if let Some(old) = old {
                if old.cells.get(i) == Some(&c) {
                    return Ok(old.row.get_item(i)?.unbind());
                }
            }
            Ok(match c {
                CellRef::Null => py.None(),
                CellRef::Int(i) => i.into_pyobject(py)?.into_any().unbind(),
                CellRef::Text(s) => PyString::new(py, s).into_any().unbind(),
            })
        })
        .collect::<PyResult<_>>()?;
    PyTuple::new(py, items)
}

fn done<'py>(
    py: Python<'py>,
    old: Option<&Loaded<'_, 'py>>,
    out: Result<ActivityRecord, Rejection>,
) -> PyResult<Bound<'py, PyTuple>> {
    match out {
        Ok(rec) => row_of(py, old, &rec),
        Err(r) => Err(rejected(py, r)),
    }
}

/// A clock reading (`tether.activities.Now`): the lease clock's boot and milliseconds, and the
/// wall clock's.
#[derive(FromPyObject)]
struct PyNow {
    boot_id: String,
    boot_ms: i64,
    wall_ms: i64,
}

impl From<PyNow> for Now {
    fn from(n: PyNow) -> Now {
        Now {
            boot_id: n.boot_id,
            boot_ms: n.boot_ms,
            wall_ms: n.wall_ms,
        }
    }
}

#[derive(FromPyObject)]
struct PyKey {
    world_id: String,
    kind: String,
    activity_id: String,
}

impl From<PyKey> for Key {
    fn from(k: PyKey) -> Key {
        Key {
            world_id: k.world_id,
            kind: k.kind,
            activity_id: k.activity_id,
        }
    }
}

#[derive(FromPyObject)]
struct PyReceipt {
    world_id: String,
    run_id: String,
    tick: i64,
    visibility_token: String,
}

impl From<PyReceipt> for Receipt {
    fn from(r: PyReceipt) -> Receipt {
        Receipt {
            world_id: r.world_id,
            run_id: r.run_id,
            tick: r.tick,
            visibility_token: r.visibility_token,
        }
    }
}

#[derive(FromPyObject)]
struct PyAdmission {
    key: PyKey,
    source: PyReceipt,
    input_ref: String,
    input_digest: String,
    bound_host: String,
}

impl From<PyAdmission> for Admission {
    fn from(a: PyAdmission) -> Admission {
        Admission {
            key: a.key.into(),
            source: a.source.into(),
            input_ref: a.input_ref,
            input_digest: a.input_digest,
            bound_host: a.bound_host,
        }
    }
}

#[derive(FromPyObject)]
struct PyResultRef {
    #[pyo3(attribute("ref"))]
    result_ref: String,
    digest: String,
    media_type: String,
    size: i64,
    failed: bool,
}

impl From<PyResultRef> for ResultRef {
    fn from(r: PyResultRef) -> ResultRef {
        ResultRef {
            result_ref: r.result_ref,
            digest: r.digest,
            media_type: r.media_type,
            size: r.size,
            failed: r.failed,
        }
    }
}

/// A retry guard or evidence reference: both are a bounded `ref` and `digest`.
#[derive(FromPyObject)]
struct PyRefDigest {
    #[pyo3(attribute("ref"))]
    reference: String,
    digest: String,
}

/// Reads the `(entity, component, canonical value text)` triples of a fact list.
fn facts_from(facts: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String, String)>> {
    let mut out = Vec::new();
    for item in facts.try_iter()? {
        out.push(item?.extract::<(String, String, String)>()?);
    }
    Ok(out)
}

/// The completion evidence of `result` for `key` and its complete fact set, as canonical JSON.
#[pyfunction]
fn completion_evidence(
    key: PyKey,
    result: PyResultRef,
    facts: &Bound<'_, PyAny>,
) -> PyResult<String> {
    let owned = facts_from(facts)?;
    let facts: Vec<catalog::Fact<'_>> = owned
        .iter()
        .map(|(e, c, v)| catalog::Fact {
            entity: e,
            component: c,
            value: v,
        })
        .collect();
    catalog::completion_evidence(&key.into(), &result.into(), &facts).map_err(|m| {
        PyValueError::new_err(format!(
            "completion evidence: {} (one component listed twice)",
            m.code()
        ))
    })
}

/// The settlement evidence digest if `evidence` is complete completion evidence of `result`
/// for `key` in the snapshot `state` (a mapping `(entity, component) -> canonical JSON text`),
/// else the mismatch code as the second item.
#[pyfunction]
#[pyo3(signature = (key, result, evidence, *, written_in_tick, state))]
fn verify_completion(
    key: PyKey,
    result: PyResultRef,
    evidence: Option<&str>,
    written_in_tick: bool,
    state: &Bound<'_, PyAny>,
) -> PyResult<(Option<String>, Option<&'static str>)> {
    let mut failure: Option<PyErr> = None;
    let lookup = |e: &str, c: &str| -> Option<String> {
        let found = state
            .call_method1("get", ((e, c),))
            .and_then(|v| v.extract::<Option<String>>());
        match found {
            Ok(v) => v,
            Err(err) => {
                failure.get_or_insert(err);
                None
            }
        }
    };
    let out = catalog::verify_completion(
        &key.into(),
        &result.into(),
        evidence,
        written_in_tick,
        lookup,
    );
    if let Some(err) = failure {
        return Err(err);
    }
    Ok(match out {
        Ok(binding) => (Some(binding), None),
        Err(m) => (None, Some(m.code())),
    })
}

/// Every completion mismatch code, in declaration order.
#[pyfunction]
fn completion_mismatch_codes() -> Vec<&'static str> {
    catalog::CompletionMismatch::ALL
        .iter()
        .map(|m| m.code())
        .collect()
}

/// The flat column names, in the order rows cross and storage keeps them.
#[pyfunction]
fn catalog_columns() -> Vec<&'static str> {
    COLUMNS.to_vec()
}

/// The positions where two rows of the layout differ, as a bit mask (bit i: column i), for
/// storage to write only the changed columns. Cells are compared as Python values, the same
/// object first (a transition's unchanged cells are its input's objects).
#[pyfunction]
fn catalog_changed_mask(old: &Bound<'_, PyTuple>, new: &Bound<'_, PyTuple>) -> PyResult<u64> {
    if old.len() != COLUMNS.len() || new.len() != COLUMNS.len() {
        return Err(CatalogStorageError::new_err(format!(
            "catalog rows have {} columns, not {} and {}",
            COLUMNS.len(),
            old.len(),
            new.len()
        )));
    }
    const _: () = assert!(COLUMNS.len() <= 64, "a row's mask is one u64");
    let mut mask = 0u64;
    for (i, (a, b)) in old.iter().zip(new.iter()).enumerate() {
        if !a.is(&b) && !a.eq(&b)? {
            mask |= 1 << i;
        }
    }
    Ok(mask)
}

/// One cell of a row as JSON: text, an integer (64-bit) or null; anything else is refused.
fn push_cell(out: &mut String, cell: &Bound<'_, PyAny>, column: usize) -> PyResult<()> {
    if cell.is_none() {
        out.push_str("null");
    } else if let Ok(text) = cell.cast::<PyString>() {
        let text = text.to_str().map_err(|_| {
            CatalogStorageError::new_err(format!(
                "catalog column {} holds text that is not valid Unicode",
                COLUMNS.get(column).copied().unwrap_or("?")
            ))
        })?;
        out.push_str(
            &serde_json::to_string(text)
                .map_err(|e| CatalogStorageError::new_err(e.to_string()))?,
        );
    } else if cell.is_instance_of::<PyInt>() && !cell.is_instance_of::<pyo3::types::PyBool>() {
        let value: i64 = cell.extract().map_err(|_| {
            CatalogStorageError::new_err(format!(
                "catalog column {} holds an integer outside the signed 64-bit range",
                COLUMNS.get(column).copied().unwrap_or("?")
            ))
        })?;
        out.push_str(&value.to_string());
    } else {
        return Err(CatalogStorageError::new_err(format!(
            "catalog column {} holds a {}, not text, an integer or None",
            COLUMNS.get(column).copied().unwrap_or("?"),
            cell.get_type().name()?
        )));
    }
    Ok(())
}

/// The batch UPDATE of ``updates`` ((read row, decided row) pairs) as storage writes it in
/// one statement: the positions written (every position where some pair differs, as
/// `catalog_changed_mask` compares them, except those of ``fixed``, a bit mask), and one
/// JSON array with a row per pair: the read row's key (positions 0 to 2), its version (the
/// guard), the decided row's version, then its cells at those positions. Cells are text
/// (valid Unicode), signed 64-bit integers or None; any other is `CatalogStorageError`.
#[pyfunction]
fn catalog_update_rows(updates: &Bound<'_, PyList>, fixed: u64) -> PyResult<(Vec<usize>, String)> {
    let version = COLUMNS
        .iter()
        .position(|c| *c == "version")
        .expect("the layout has a version");
    let mut pairs = Vec::with_capacity(updates.len());
    let mut mask = 0u64;
    for item in updates.iter() {
        let (old, new): (Bound<'_, PyTuple>, Bound<'_, PyTuple>) = item.extract()?;
        mask |= catalog_changed_mask(&old, &new)?;
        pairs.push((old, new));
    }
    mask &= !fixed;
    let cols: Vec<usize> = (0..COLUMNS.len()).filter(|i| mask >> i & 1 == 1).collect();
    let mut out = String::with_capacity(64 * (cols.len() + 5) * pairs.len().max(1));
    out.push('[');
    for (n, (old, new)) in pairs.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push('[');
        let cells = (0..3)
            .map(|i| (old, i))
            .chain([(old, version), (new, version)])
            .chain(cols.iter().map(|&i| (new, i)));
        for (k, (row, i)) in cells.enumerate() {
            if k > 0 {
                out.push(',');
            }
            push_cell(&mut out, &row.get_item(i)?, i)?;
        }
        out.push(']');
    }
    out.push(']');
    Ok((cols, out))
}

/// Every rejection code, in declaration order.
#[pyfunction]
fn catalog_rejection_codes() -> Vec<&'static str> {
    RejectionKind::ALL.iter().map(|k| k.code()).collect()
}

#[pyfunction]
fn operation_id_for(kind: &str, world_id: &str, activity_id: &str) -> String {
    catalog::operation_id_for(kind, world_id, activity_id)
}

#[pyfunction]
fn settlement_evidence_digest(
    kind: &str,
    world_id: &str,
    activity_id: &str,
    result_ref: &str,
    result_digest: &str,
) -> String {
    catalog::settlement_evidence_digest(kind, world_id, activity_id, result_ref, result_digest)
}

#[pyfunction]
fn catalog_admit<'py>(
    py: Python<'py>,
    row: Option<&Bound<'py, PyTuple>>,
    admission: PyAdmission,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = row.map(items_of);
    let existing = row
        .zip(items.as_deref())
        .map(|(row, items)| load(row, items))
        .transpose()?;
    let adm: Admission = admission.into();
    // A replay or re-request returns the stored record unchanged (same version): storage
    // then writes nothing.
    let out =
        catalog::admit(existing.as_ref().map(|l| &l.record), &adm, &now.into()).map(|(r, _)| r);
    done(py, existing.as_ref(), out)
}

/// The record `admit` makes of `admission` where none exists, its `catalog_admission_stamps`
/// columns left for the admitting transaction's reading (zero, empty).
#[pyfunction]
fn catalog_admission_template<'py>(
    py: Python<'py>,
    admission: PyAdmission,
) -> PyResult<Bound<'py, PyTuple>> {
    done(py, None, catalog::admission_template(&admission.into()))
}

/// The columns of a new record that hold the admitting transaction's clock reading, each
/// with the part it holds: "boot_id", "boot_ms" or "wall_ms".
#[pyfunction]
fn catalog_admission_stamps() -> Vec<(&'static str, &'static str)> {
    catalog::ADMISSION_STAMPS
        .iter()
        .map(|(column, stamp)| {
            let part = match stamp {
                catalog::Stamp::BootId => "boot_id",
                catalog::Stamp::BootMs => "boot_ms",
                catalog::Stamp::WallMs => "wall_ms",
            };
            (*column, part)
        })
        .collect()
}

/// `admit_refused`: the admission its family refused, holding `refusal` as its failed result.
#[pyfunction]
fn catalog_admit_refused<'py>(
    py: Python<'py>,
    row: Option<&Bound<'py, PyTuple>>,
    admission: PyAdmission,
    refusal: PyResultRef,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = row.map(items_of);
    let existing = row
        .zip(items.as_deref())
        .map(|(row, items)| load(row, items))
        .transpose()?;
    let adm: Admission = admission.into();
    // As with `admit`, an existing record comes back unchanged: storage then writes nothing.
    let out = catalog::admit_refused(
        existing.as_ref().map(|l| &l.record),
        &adm,
        &refusal.into(),
        &now.into(),
    )
    .map(|(r, _)| r);
    done(py, existing.as_ref(), out)
}

/// Refuses bad claim arguments even when nothing is claimable. `host` is the claiming
/// worker's host (None: a claim that names none, which never takes device-bound work).
#[pyfunction]
#[pyo3(signature = (owner, lease_ms, now, host=None))]
fn catalog_check_claim(
    py: Python<'_>,
    owner: &str,
    #[pyo3(from_py_with = arg_lease_ms)] lease_ms: i64,
    now: PyNow,
    host: Option<&str>,
) -> PyResult<()> {
    catalog::check_claim_on(owner, host, lease_ms, &now.into())
        .map(|_| ())
        .map_err(|r| rejected(py, r))
}

#[pyfunction]
#[pyo3(signature = (row, owner, lease_ms, now, host=None))]
fn catalog_claim<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    owner: &str,
    #[pyo3(from_py_with = arg_lease_ms)] lease_ms: i64,
    now: PyNow,
    host: Option<&str>,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let old = load(row, &items)?;
    done(
        py,
        Some(&old),
        catalog::claim_on(&old.record, owner, host, lease_ms, &now.into()),
    )
}

/// `claim`, then the bind of the activity's own operation identity to the attempt it issued
/// (a reconcile-only attempt comes back claimed and unbound), on one reading.
#[pyfunction]
#[pyo3(signature = (row, owner, lease_ms, now, host=None))]
fn catalog_claim_and_bind<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    owner: &str,
    #[pyo3(from_py_with = arg_lease_ms)] lease_ms: i64,
    now: PyNow,
    host: Option<&str>,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let old = load(row, &items)?;
    done(
        py,
        Some(&old),
        catalog::claim_and_bind_on(&old.record, owner, host, lease_ms, &now.into()),
    )
}

#[pyfunction]
fn catalog_renew<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    #[pyo3(from_py_with = arg_fence)] fence: i64,
    #[pyo3(from_py_with = arg_lease_ms)] lease_ms: i64,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let old = load(row, &items)?;
    done(
        py,
        Some(&old),
        catalog::renew(&old.record, fence, lease_ms, &now.into()),
    )
}

#[pyfunction]
fn catalog_release<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    #[pyo3(from_py_with = arg_fence)] fence: i64,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let old = load(row, &items)?;
    done(
        py,
        Some(&old),
        catalog::release(&old.record, fence, &now.into()),
    )
}

#[pyfunction]
fn catalog_bind_provider_operation<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    #[pyo3(from_py_with = arg_fence)] fence: i64,
    operation_id: &str,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let old = load(row, &items)?;
    let out = catalog::bind_provider_operation(&old.record, fence, operation_id, &now.into());
    done(py, Some(&old), out)
}

#[pyfunction]
fn catalog_record_result<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    #[pyo3(from_py_with = arg_fence)] fence: i64,
    result: PyResultRef,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let old = load(row, &items)?;
    let out = catalog::record_result(&old.record, fence, &result.into(), &now.into());
    done(py, Some(&old), out)
}

#[pyfunction]
fn catalog_confirm_absent<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    #[pyo3(from_py_with = arg_fence)] fence: i64,
    guard: PyRefDigest,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let old = load(row, &items)?;
    let out = catalog::confirm_absent(
        &old.record,
        fence,
        &guard.reference,
        &guard.digest,
        &now.into(),
    );
    done(py, Some(&old), out)
}

#[pyfunction]
fn catalog_record_unknown<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    #[pyo3(from_py_with = arg_fence)] fence: i64,
    evidence: PyRefDigest,
    #[pyo3(from_py_with = arg_retry_after_ms)] retry_after_ms: i64,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let old = load(row, &items)?;
    let out = catalog::record_unknown(
        &old.record,
        fence,
        &evidence.reference,
        &evidence.digest,
        retry_after_ms,
        &now.into(),
    );
    done(py, Some(&old), out)
}

#[pyfunction]
fn catalog_refresh_evidence<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    #[pyo3(from_py_with = arg_seen_revision)] seen_revision: i64,
    evidence: PyRefDigest,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let old = load(row, &items)?;
    let out = catalog::refresh_evidence(
        &old.record,
        seen_revision,
        &evidence.reference,
        &evidence.digest,
        &now.into(),
    );
    done(py, Some(&old), out)
}

#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (row, outcome, evidence_revision, operator, note, result, guard, now))]
fn catalog_resolve<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    outcome: &str,
    #[pyo3(from_py_with = arg_evidence_revision)] evidence_revision: i64,
    operator: String,
    note: String,
    result: Option<PyResultRef>,
    guard: Option<PyRefDigest>,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let invalid = |msg: &str| {
        rejected(
            py,
            Rejection {
                kind: RejectionKind::InvalidDecision,
                field: Some("decision"),
                message: msg.to_owned(),
            },
        )
    };
    let outcome = match (outcome, result, guard) {
        ("recovered", Some(r), None) => DecisionOutcome::Recovered(r.into()),
        ("recovered", _, _) => return Err(invalid("\"recovered\" needs a result and no guard")),
        ("absent", None, Some(g)) => DecisionOutcome::Absent {
            guard_ref: g.reference,
            guard_digest: g.digest,
        },
        ("absent", _, _) => {
            return Err(invalid(
                "\"absent\" needs a retry guard referencing the adapter's proof, and no result",
            ))
        }
        ("abandon", None, None) => DecisionOutcome::Abandon,
        ("abandon", _, _) => return Err(invalid("\"abandon\" takes neither a result nor a guard")),
        _ => {
            return Err(invalid(
                "outcome must be \"recovered\", \"absent\" or \"abandon\"",
            ))
        }
    };
    let decision = Decision {
        outcome,
        evidence_revision,
        operator,
        note,
    };
    let items = items_of(row);
    let old = load(row, &items)?;
    done(
        py,
        Some(&old),
        catalog::resolve(&old.record, &decision, &now.into()),
    )
}

#[pyfunction]
#[pyo3(signature = (row, receipt, evidence_digest, fence, now))]
fn catalog_settle<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    receipt: PyReceipt,
    evidence_digest: &str,
    fence: Option<i64>,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let old = load(row, &items)?;
    let out = catalog::settle(
        &old.record,
        &receipt.into(),
        evidence_digest,
        fence,
        &now.into(),
    );
    done(py, Some(&old), out)
}

/// Brings a row's lease-clock values onto `now`'s boot (unchanged when they already are).
#[pyfunction]
fn catalog_rebase<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let old = load(row, &items)?;
    done(py, Some(&old), catalog::rebase(&old.record, &now.into()))
}

/// A stored row with its derived columns recomputed from its facts (the migration that adds
/// them); the version is unchanged, since no transition happened.
#[pyfunction]
fn catalog_derive_row<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let cells = cells_of(&items)?;
    let record = ActivityRecord::from_cells_rederived(&cells).map_err(row_error)?;
    let old = Loaded { row, cells, record };
    row_of(py, Some(&old), &old.record)
}

/// The compacted form of a settled row whose settlement is at or before the wall-clock
/// `cutoff_ms` (`NotCompactable` otherwise; a compacted row comes back unchanged).
#[pyfunction]
fn catalog_compact<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
    #[pyo3(from_py_with = arg_cutoff_ms)] cutoff_ms: i64,
    now: PyNow,
) -> PyResult<Bound<'py, PyTuple>> {
    let items = items_of(row);
    let old = load(row, &items)?;
    done(
        py,
        Some(&old),
        catalog::compact(&old.record, cutoff_ms, &now.into()),
    )
}

/// Whether the core would compact this row at the wall-clock `cutoff_ms`.
#[pyfunction]
fn catalog_compactable(
    row: &Bound<'_, PyTuple>,
    #[pyo3(from_py_with = arg_cutoff_ms)] cutoff_ms: i64,
) -> PyResult<bool> {
    let items = items_of(row);
    Ok(catalog::compactable(&load(row, &items)?.record, cutoff_ms))
}

/// Whether the lease-clock time `at_ms`, measured on boot `lease_boot_id`, is reached at `now`.
#[pyfunction]
fn catalog_lease_reached(
    lease_boot_id: &str,
    #[pyo3(from_py_with = arg_at_ms)] at_ms: i64,
    now: PyNow,
) -> bool {
    catalog::lease_reached(lease_boot_id, at_ms, &now.into())
}

/// Validates and normalises a stored row (used by scans that do not transition).
#[pyfunction]
fn catalog_check_row<'py>(
    py: Python<'py>,
    row: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyTuple>> {
    if row.len() != COLUMNS.len() {
        return Err(PyTypeError::new_err("row has the wrong number of columns"));
    }
    // Decoding validates the row; re-encoding normalises it (e.g. booleans to 0/1).
    let items = items_of(row);
    row_of(py, None, &load(row, &items)?.record)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CatalogRejection", py.get_type::<CatalogRejection>())?;
    m.add("CatalogStorageError", py.get_type::<CatalogStorageError>())?;
    m.add("CatalogConfigError", py.get_type::<CatalogConfigError>())?;
    let base = py.get_type::<CatalogRejection>();
    base.setattr("code", "catalog_rejection")?;
    base.setattr("field", py.None())?;
    let unknown = py.get_type::<UnknownActivity>();
    unknown.setattr("code", "unknown_activity")?;
    m.add("UnknownActivity", unknown)?;
    for kind in RejectionKind::ALL {
        let ty = rejection_type(py, kind);
        ty.setattr("code", kind.code())?;
        m.add(ty.name()?, ty)?;
    }
    m.add("ABANDONED_MEDIA_TYPE", catalog::ABANDONED_MEDIA_TYPE)?;
    m.add("MAX_LEASE_MS", catalog::MAX_LEASE_MS)?;
    m.add("MAX_RETRY_AFTER_MS", catalog::MAX_RETRY_AFTER_MS)?;
    m.add_function(wrap_pyfunction!(catalog_columns, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_admission_template, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_admission_stamps, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_changed_mask, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_update_rows, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_rejection_codes, m)?)?;
    m.add_function(wrap_pyfunction!(operation_id_for, m)?)?;
    m.add_function(wrap_pyfunction!(settlement_evidence_digest, m)?)?;
    m.add_function(wrap_pyfunction!(completion_evidence, m)?)?;
    m.add_function(wrap_pyfunction!(verify_completion, m)?)?;
    m.add_function(wrap_pyfunction!(completion_mismatch_codes, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_admit, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_admit_refused, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_check_claim, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_claim, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_claim_and_bind, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_renew, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_release, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_bind_provider_operation, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_record_result, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_confirm_absent, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_record_unknown, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_resolve, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_refresh_evidence, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_settle, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_check_row, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_rebase, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_derive_row, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_lease_reached, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_compact, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_compactable, m)?)?;
    Ok(())
}
