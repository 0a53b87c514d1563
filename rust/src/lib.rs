//! Tether's sans-I/O core.
//!
//! Nothing in this crate opens a file or socket, reads a clock or touches a database: time and
//! data are passed in, decisions come back as values. The Python package `tether` does all I/O
//! and persists what these pure functions decide. `bindings/` (compiled only with the `python`
//! feature, which maturin enables) is the one place that uses pyo3.

pub mod agui;
pub mod catalog;
pub mod codec;
pub mod live;
pub mod patch;
pub mod pointer;

#[cfg(feature = "python")]
mod bindings;
