//! The live-event contract of seed 002 (`AgentActivityLiveEvent`), sans-I/O.
//!
//! - `json`: the strict JSON reader (UTF-8, one value, depth <= 64, no duplicate keys).
//! - `validate`: every rule of the event schema and the rules only Tether can enforce.
//! - `event`: the typed events and their wire form.
//! - `framer`: the publisher side: tool-output traces framed as `set` then `append_text` at
//!   byte offsets, chunked and capped, coalesced, late deltas turned into discontinuities,
//!   all packed into transport frames `{epoch, seq, deliveries}`.
//! - `subscriber`: reads frames, detects gaps, duplicates, reorders and epoch changes.
//! - `overlay`: the consumer's optimistic view and its reconciliation with a canonical record.
//!
//! Nothing here opens a socket or a file or reads a clock: time (`now_ms`,
//! `occurredAtUnixMs`) is always a parameter, and bytes in and out are the caller's to move.

pub mod error;
pub mod event;
pub mod frame;
pub mod framer;
pub mod json;
pub mod overlay;
pub mod subscriber;
pub mod validate;

pub use error::{Code, ErrorKind, LiveError};
pub use event::*;
pub use validate::{validate, validate_value};
