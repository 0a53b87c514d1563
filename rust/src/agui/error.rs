//! The store's one error type and its warnings, with stable snake_case codes.
//!
//! Errors are fatal for the event that raised them (the store keeps exactly what it held before
//! that event); warnings are the tolerated failures the AG-UI processing model tells a consumer
//! to survive. Both carry the code, the event type and the message id they concern.

use std::fmt;

/// What kind of fatal failure an event caused. The bindings map each to its own exception.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The bytes are not a JSON event stream (bad JSON, truncated capture).
    Decode,
    /// A field the protocol describes carries a value the schema rejects.
    Malformed,
    /// An ACTIVITY_DELTA tagged with a `subagentRunId` other than the activity's owner.
    Attribution,
    /// The event is not allowed at this point of the run (the rules in `lifecycle`).
    Sequence,
}

/// A fatal failure of one event; the store is unchanged by that event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AguiError {
    pub kind: ErrorKind,
    pub code: &'static str,
    pub event_type: Option<String>,
    pub message_id: Option<String>,
    pub reason: String,
}

impl AguiError {
    pub(crate) fn new(kind: ErrorKind, code: &'static str, reason: impl Into<String>) -> Self {
        AguiError {
            kind,
            code,
            event_type: None,
            message_id: None,
            reason: reason.into(),
        }
    }

    pub(crate) fn malformed(code: &'static str, reason: impl Into<String>) -> Self {
        Self::new(ErrorKind::Malformed, code, reason)
    }

    pub(crate) fn decode(code: &'static str, reason: impl Into<String>) -> Self {
        Self::new(ErrorKind::Decode, code, reason)
    }

    pub(crate) fn with_context(
        mut self,
        event_type: Option<&str>,
        message_id: Option<&str>,
    ) -> Self {
        if self.event_type.is_none() {
            self.event_type = event_type.map(str::to_owned);
        }
        if self.message_id.is_none() {
            self.message_id = message_id.map(str::to_owned);
        }
        self
    }
}

impl fmt::Display for AguiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.code)?;
        if let Some(t) = &self.event_type {
            write!(f, " in {t}")?;
        }
        if let Some(id) = &self.message_id {
            write!(f, " (messageId {id:?})")?;
        }
        write!(f, ": {}", self.reason)
    }
}

impl std::error::Error for AguiError {}

/// A tolerated failure: the event (or the offending part of it) was skipped or stripped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub code: &'static str,
    pub event_type: Option<String>,
    pub message_id: Option<String>,
    pub reason: String,
}

impl Warning {
    pub(crate) fn new(
        code: &'static str,
        event_type: &str,
        message_id: Option<&str>,
        reason: impl Into<String>,
    ) -> Self {
        Warning {
            code,
            event_type: Some(event_type.to_owned()),
            message_id: message_id.map(str::to_owned),
            reason: reason.into(),
        }
    }
}

/// Every warning code the store can produce.
pub const WARNING_CODES: &[&str] = &[
    UNKNOWN_EVENT_TYPE,
    UNKNOWN_PROPERTY,
    UNKNOWN_MESSAGE_ROLE,
    DELTA_TARGET_MISSING,
    DELTA_TARGET_NOT_ACTIVITY,
    SNAPSHOT_TARGET_NOT_ACTIVITY,
    PATCH_NOT_APPLIED,
    PATCH_RESULT_NOT_OBJECT,
    PATCH_OP_DROPPED,
    TEXT_MESSAGE_MISSING,
    TEXT_MESSAGE_CONFLICT,
    CONTENT_TOO_DEEP,
    CONTENT_TOO_LARGE,
    RAW_EVENT_NULL,
];

pub const UNKNOWN_EVENT_TYPE: &str = "unknown_event_type";
pub const UNKNOWN_PROPERTY: &str = "unknown_property";
pub const UNKNOWN_MESSAGE_ROLE: &str = "unknown_message_role";
pub const DELTA_TARGET_MISSING: &str = "delta_target_missing";
pub const DELTA_TARGET_NOT_ACTIVITY: &str = "delta_target_not_activity";
pub const SNAPSHOT_TARGET_NOT_ACTIVITY: &str = "snapshot_target_not_activity";
pub const PATCH_NOT_APPLIED: &str = "patch_not_applied";
pub const PATCH_RESULT_NOT_OBJECT: &str = "patch_result_not_object";
pub const PATCH_OP_DROPPED: &str = "patch_op_dropped";
pub const TEXT_MESSAGE_MISSING: &str = "text_message_missing";
pub const TEXT_MESSAGE_CONFLICT: &str = "text_message_conflict";
pub const CONTENT_TOO_DEEP: &str = "content_too_deep";
pub const CONTENT_TOO_LARGE: &str = "content_too_large";
/// `rawEvent: null` converted to absent (deprecated; fatal from 2027-09-08, see `deprecated`).
pub const RAW_EVENT_NULL: &str = "raw_event_null";

/// Every error code the store can raise.
pub const ERROR_CODES: &[&str] = &[
    INVALID_JSON,
    TRUNCATED_STREAM,
    EVENT_NOT_OBJECT,
    MISSING_TYPE,
    MISSING_FIELD,
    WRONG_TYPE,
    NULL_VALUE,
    FRACTIONAL_TIMESTAMP,
    TIMESTAMP_OUT_OF_RANGE,
    MALFORMED_PATCH,
    DUPLICATE_MESSAGE_ID,
    ATTRIBUTION_MISMATCH,
    RUN_NOT_STARTED,
    RUN_ALREADY_STARTED,
    RUN_ID_MISMATCH,
    EVENT_AFTER_RUN_FINISHED,
    NON_FINITE_NUMBER,
];

pub const INVALID_JSON: &str = "invalid_json";
pub const TRUNCATED_STREAM: &str = "truncated_stream";
pub const EVENT_NOT_OBJECT: &str = "event_not_object";
pub const MISSING_TYPE: &str = "missing_type";
pub const MISSING_FIELD: &str = "missing_field";
pub const WRONG_TYPE: &str = "wrong_type";
pub const NULL_VALUE: &str = "null_value";
pub const FRACTIONAL_TIMESTAMP: &str = "fractional_timestamp";
pub const TIMESTAMP_OUT_OF_RANGE: &str = "timestamp_out_of_range";
pub const MALFORMED_PATCH: &str = "malformed_patch";
pub const DUPLICATE_MESSAGE_ID: &str = "duplicate_message_id";
pub const ATTRIBUTION_MISMATCH: &str = "attribution_mismatch";
pub const RUN_NOT_STARTED: &str = "run_not_started";
pub const RUN_ALREADY_STARTED: &str = "run_already_started";
pub const RUN_ID_MISMATCH: &str = "run_id_mismatch";
pub const EVENT_AFTER_RUN_FINISHED: &str = "event_after_run_finished";
/// A number given as a Python float that is NaN or infinite (JSON text cannot carry one).
pub const NON_FINITE_NUMBER: &str = "non_finite_number";
