//! The live module's one error type: a stable snake_case code, the JSON Pointer of the offending
//! value and a readable reason.
//!
//! `Invalid` errors mean the peer sent something the contract refuses (an event, a frame or a
//! canonical record); `Usage` errors mean the caller used an object wrongly (a bad
//! configuration, a record for another session, a subscriber used after a fatal frame). The
//! codes are split again by who can state the rule: `SCHEMA_CODES` are rules the JSON Schema
//! expresses (the Python `jsonschema` package must agree with Tether on them);
//! `TETHER_ONLY_CODES` are the rules no JSON Schema can state, which only Tether enforces.

use std::fmt;

/// Who is at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The bytes or values received violate the contract.
    Invalid,
    /// The caller used the API wrongly.
    Usage,
}

/// One stable rejection reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    // --- the JSON text itself (Tether only) ---
    InvalidUtf8,
    InvalidJson,
    TrailingData,
    TooDeep,
    DuplicateKey,
    // --- rules the schema expresses ---
    WrongType,
    MissingField,
    UnknownField,
    UnknownEventType,
    ConstMismatch,
    NotInEnum,
    EmptyString,
    BelowMinimum,
    EmptyObject,
    EmptyArray,
    DuplicateItem,
    EmptyPropertyName,
    NoChange,
    UnknownOperation,
    // --- rules no schema can state (Tether only) ---
    IdentityMismatch,
    ToolOutputNotToolCall,
    TurnInconsistent,
    UnsafeInteger,
    // --- usage ---
    InvalidConfig,
    SessionMismatch,
    MessageConflict,
    SubscriberFailed,
}

impl Code {
    pub const ALL: &'static [Code] = &[
        Code::InvalidUtf8,
        Code::InvalidJson,
        Code::TrailingData,
        Code::TooDeep,
        Code::DuplicateKey,
        Code::WrongType,
        Code::MissingField,
        Code::UnknownField,
        Code::UnknownEventType,
        Code::ConstMismatch,
        Code::NotInEnum,
        Code::EmptyString,
        Code::BelowMinimum,
        Code::EmptyObject,
        Code::EmptyArray,
        Code::DuplicateItem,
        Code::EmptyPropertyName,
        Code::NoChange,
        Code::UnknownOperation,
        Code::IdentityMismatch,
        Code::ToolOutputNotToolCall,
        Code::TurnInconsistent,
        Code::UnsafeInteger,
        Code::InvalidConfig,
        Code::SessionMismatch,
        Code::MessageConflict,
        Code::SubscriberFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Code::InvalidUtf8 => "invalid_utf8",
            Code::InvalidJson => "invalid_json",
            Code::TrailingData => "trailing_data",
            Code::TooDeep => "too_deep",
            Code::DuplicateKey => "duplicate_key",
            Code::WrongType => "wrong_type",
            Code::MissingField => "missing_field",
            Code::UnknownField => "unknown_field",
            Code::UnknownEventType => "unknown_event_type",
            Code::ConstMismatch => "const_mismatch",
            Code::NotInEnum => "not_in_enum",
            Code::EmptyString => "empty_string",
            Code::BelowMinimum => "below_minimum",
            Code::EmptyObject => "empty_object",
            Code::EmptyArray => "empty_array",
            Code::DuplicateItem => "duplicate_item",
            Code::EmptyPropertyName => "empty_property_name",
            Code::NoChange => "no_change",
            Code::UnknownOperation => "unknown_operation",
            Code::IdentityMismatch => "identity_mismatch",
            Code::ToolOutputNotToolCall => "tool_output_not_tool_call",
            Code::TurnInconsistent => "turn_inconsistent",
            Code::UnsafeInteger => "unsafe_integer",
            Code::InvalidConfig => "invalid_config",
            Code::SessionMismatch => "session_mismatch",
            Code::MessageConflict => "message_conflict",
            Code::SubscriberFailed => "subscriber_failed",
        }
    }

    pub fn kind(self) -> ErrorKind {
        match self {
            Code::InvalidConfig
            | Code::SessionMismatch
            | Code::MessageConflict
            | Code::SubscriberFailed => ErrorKind::Usage,
            _ => ErrorKind::Invalid,
        }
    }

    /// Rules the live-event JSON Schema expresses.
    pub fn is_schema_rule(self) -> bool {
        matches!(
            self,
            Code::WrongType
                | Code::MissingField
                | Code::UnknownField
                | Code::UnknownEventType
                | Code::ConstMismatch
                | Code::NotInEnum
                | Code::EmptyString
                | Code::BelowMinimum
                | Code::EmptyObject
                | Code::EmptyArray
                | Code::DuplicateItem
                | Code::EmptyPropertyName
                | Code::NoChange
                | Code::UnknownOperation
        )
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every code, in a stable order.
pub fn error_codes() -> Vec<&'static str> {
    Code::ALL.iter().map(|c| c.as_str()).collect()
}

/// The codes of rules the JSON Schema expresses.
pub fn schema_codes() -> Vec<&'static str> {
    Code::ALL
        .iter()
        .filter(|c| c.is_schema_rule())
        .map(|c| c.as_str())
        .collect()
}

/// The codes of contract rules only Tether enforces (the JSON text and the cross-field rules).
pub fn tether_only_codes() -> Vec<&'static str> {
    Code::ALL
        .iter()
        .filter(|c| !c.is_schema_rule() && c.kind() == ErrorKind::Invalid)
        .map(|c| c.as_str())
        .collect()
}

/// A rejection: the code, the RFC 6901 pointer of the offending value ("" for the whole
/// message) and a readable reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveError {
    pub code: Code,
    pub path: String,
    pub reason: String,
}

impl LiveError {
    pub fn new(code: Code, path: impl Into<String>, reason: impl Into<String>) -> Self {
        LiveError {
            code,
            path: path.into(),
            reason: reason.into(),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        self.code.kind()
    }

    /// The same error under a parent: `at("data")` turns `/turn` into `/data/turn`.
    pub fn under(mut self, segment: &str) -> Self {
        let mut p = String::with_capacity(segment.len() + 1 + self.path.len());
        p.push('/');
        push_escaped(&mut p, segment);
        p.push_str(&self.path);
        self.path = p;
        self
    }
}

/// Appends one RFC 6901 reference token (`~` as `~0`, `/` as `~1`).
pub(crate) fn push_escaped(out: &mut String, segment: &str) {
    for c in segment.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
}

/// A pointer from reference tokens.
pub(crate) fn pointer(segments: &[&str]) -> String {
    let mut p = String::new();
    for s in segments {
        p.push('/');
        push_escaped(&mut p, s);
    }
    p
}

impl fmt::Display for LiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.path.is_empty() {
            "(root)"
        } else {
            self.path.as_str()
        };
        write!(f, "{} at {}: {}", self.code, at, self.reason)
    }
}

impl std::error::Error for LiveError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_snake_case() {
        let all = error_codes();
        let mut sorted = all.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len());
        for c in all {
            assert!(
                c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{c}"
            );
        }
    }

    #[test]
    fn schema_and_tether_only_codes_are_disjoint() {
        let s = schema_codes();
        for c in tether_only_codes() {
            assert!(!s.contains(&c));
        }
        assert!(tether_only_codes().contains(&"duplicate_key"));
        assert!(!tether_only_codes().contains(&"invalid_config"));
    }

    #[test]
    fn paths_escape_tokens() {
        let e = LiveError::new(Code::WrongType, "/x", "r").under("a/b~c");
        assert_eq!(e.path, "/a~1b~0c/x");
        assert_eq!(pointer(&["data", "turn"]), "/data/turn");
        assert_eq!(e.to_string(), "wrong_type at /a~1b~0c/x: r");
    }
}
