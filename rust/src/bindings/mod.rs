//! PyO3 bindings: the only code in the crate that knows about Python.
//!
//! Each submodule exposes `register(m)`, which adds its classes, functions and exceptions to the
//! flat `tether._core` module.

use pyo3::prelude::*;

mod agui;
mod catalog;
mod codec;
pub(crate) mod errors;
mod live;
mod patch;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    patch::register(m)?;
    agui::register(m)?;
    catalog::register(m)?;
    codec::register(m)?;
    live::register(m)?;
    Ok(())
}
