//! The root of Tether's exception hierarchy. Every binding module derives its exceptions from
//! `TetherError` so Python callers can catch everything Tether raises in one place.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _core,
    TetherError,
    PyException,
    "Root of every error Tether raises."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("TetherError", m.py().get_type::<TetherError>())?;
    Ok(())
}
