//! The AG-UI activity message store. Pure: no I/O, no clock, no Python.
//!
//! `ActivityStore` holds one thread's ordered message history and consumes AG-UI events given
//! as JSON values or as bytes (`frame::Framer`: one JSON event, NDJSON or an SSE capture, any
//! chunk split). Activity deltas are applied by `crate::patch` in AG-UI mode. Failures the
//! protocol tolerates come back as `Warning` values; malformed known values are `AguiError`s
//! and leave the store exactly as it was. The rules are listed in `store`. The store reads no
//! clock: the date a deprecation window is judged by comes in `StoreOptions::today`.

pub mod deprecated;
pub mod error;
mod fast;
pub mod frame;
pub mod lifecycle;
pub mod message;
pub mod schema;
pub mod store;

pub use deprecated::{Date, RAW_EVENT_NULL_EXPIRES};
pub use error::{AguiError, ErrorKind, Warning, ERROR_CODES, WARNING_CODES};
pub use frame::Framer;
pub use lifecycle::Lifecycle;
pub use message::{Activity, Message};
pub use store::{ActivityStore, StoreOptions};
