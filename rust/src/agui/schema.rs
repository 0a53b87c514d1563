//! The closed shapes of AG-UI events and messages: which properties each describes, and the
//! JSON type each must carry. Unknown properties are stripped with a warning; a described
//! property with a wrong value (including `null`) is a malformed known value, which is fatal.
//!
//! `content`, `metadata` and patch operations are open: their members are never inspected here.

use serde_json::{Map, Value};

use super::error::{
    AguiError, Warning, FRACTIONAL_TIMESTAMP, MISSING_FIELD, NULL_VALUE, TIMESTAMP_OUT_OF_RANGE,
    UNKNOWN_PROPERTY, WRONG_TYPE,
};

/// The JSON type a described property must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Str,
    Bool,
    /// An integer within +-(2^53 - 1), as the schema bounds `timestamp`.
    Int,
    Obj,
    Arr,
    StrOrArr,
    /// One of the streamed text roles.
    TextRole,
    /// Any JSON value, `null` included.
    Any,
}

/// One described property.
pub type Field = (&'static str, Kind, bool);

const REQ: bool = true;
const OPT: bool = false;

/// Properties every event carries.
pub const ENVELOPE: &[Field] = &[
    ("type", Kind::Str, REQ),
    ("timestamp", Kind::Int, OPT),
    ("rawEvent", Kind::Any, OPT),
    ("metadata", Kind::Obj, OPT),
];

const ATTR: Field = ("subagentRunId", Kind::Str, OPT);

/// The known event types, their own properties, and whether they are attributable.
pub const EVENTS: &[(&str, &[Field], bool)] = &[
    (
        "TEXT_MESSAGE_START",
        &[
            ("messageId", Kind::Str, REQ),
            ("role", Kind::TextRole, OPT),
            ("name", Kind::Str, OPT),
        ],
        true,
    ),
    (
        "TEXT_MESSAGE_CONTENT",
        &[("messageId", Kind::Str, REQ), ("delta", Kind::Str, REQ)],
        true,
    ),
    ("TEXT_MESSAGE_END", &[("messageId", Kind::Str, REQ)], true),
    (
        "TEXT_MESSAGE_CHUNK",
        &[
            ("messageId", Kind::Str, OPT),
            ("role", Kind::TextRole, OPT),
            ("delta", Kind::Str, OPT),
            ("name", Kind::Str, OPT),
        ],
        true,
    ),
    (
        "TOOL_CALL_START",
        &[
            ("toolCallId", Kind::Str, REQ),
            ("toolCallName", Kind::Str, REQ),
            ("parentMessageId", Kind::Str, OPT),
        ],
        true,
    ),
    (
        "TOOL_CALL_ARGS",
        &[("toolCallId", Kind::Str, REQ), ("delta", Kind::Str, REQ)],
        true,
    ),
    ("TOOL_CALL_END", &[("toolCallId", Kind::Str, REQ)], true),
    (
        "TOOL_CALL_CHUNK",
        &[
            ("toolCallId", Kind::Str, OPT),
            ("toolCallName", Kind::Str, OPT),
            ("parentMessageId", Kind::Str, OPT),
            ("delta", Kind::Str, OPT),
        ],
        true,
    ),
    (
        "TOOL_CALL_RESULT",
        &[
            ("messageId", Kind::Str, REQ),
            ("toolCallId", Kind::Str, REQ),
            ("content", Kind::StrOrArr, REQ),
            ("role", Kind::Str, OPT),
        ],
        true,
    ),
    ("STATE_SNAPSHOT", &[("snapshot", Kind::Any, REQ)], true),
    ("STATE_DELTA", &[("delta", Kind::Arr, REQ)], true),
    ("MESSAGES_SNAPSHOT", &[("messages", Kind::Arr, REQ)], false),
    (
        "ACTIVITY_SNAPSHOT",
        &[
            ("messageId", Kind::Str, REQ),
            ("activityType", Kind::Str, REQ),
            ("content", Kind::Obj, REQ),
            ("replace", Kind::Bool, OPT),
        ],
        true,
    ),
    (
        "ACTIVITY_DELTA",
        &[
            ("messageId", Kind::Str, REQ),
            ("activityType", Kind::Str, REQ),
            ("patch", Kind::Arr, REQ),
        ],
        true,
    ),
    (
        "RAW",
        &[("event", Kind::Any, REQ), ("source", Kind::Str, OPT)],
        true,
    ),
    (
        "CUSTOM",
        &[("name", Kind::Str, REQ), ("value", Kind::Any, REQ)],
        true,
    ),
    (
        "RUN_STARTED",
        &[
            ("threadId", Kind::Str, REQ),
            ("runId", Kind::Str, REQ),
            ("protocolVersion", Kind::Str, OPT),
            ("parentRunId", Kind::Str, OPT),
            ("input", Kind::Obj, OPT),
        ],
        false,
    ),
    (
        "RUN_FINISHED",
        &[
            ("threadId", Kind::Str, REQ),
            ("runId", Kind::Str, REQ),
            ("result", Kind::Any, OPT),
            ("outcome", Kind::Obj, OPT),
            // A list of token usages, one per provider/model (ag-ui-protocol `TokenUsage`).
            ("usage", Kind::Arr, OPT),
        ],
        false,
    ),
    (
        "RUN_ERROR",
        &[
            ("message", Kind::Str, REQ),
            ("code", Kind::Str, OPT),
            // A list of token usages, one per provider/model (ag-ui-protocol `TokenUsage`).
            ("usage", Kind::Arr, OPT),
        ],
        false,
    ),
    ("STEP_STARTED", &[("stepName", Kind::Str, REQ)], true),
    ("STEP_FINISHED", &[("stepName", Kind::Str, REQ)], true),
    ("REASONING_START", &[("messageId", Kind::Str, REQ)], true),
    (
        "REASONING_MESSAGE_START",
        &[("messageId", Kind::Str, REQ), ("role", Kind::Str, OPT)],
        true,
    ),
    (
        "REASONING_MESSAGE_CONTENT",
        &[("messageId", Kind::Str, REQ), ("delta", Kind::Str, REQ)],
        true,
    ),
    (
        "REASONING_MESSAGE_END",
        &[("messageId", Kind::Str, REQ)],
        true,
    ),
    (
        "REASONING_MESSAGE_CHUNK",
        &[("messageId", Kind::Str, OPT), ("delta", Kind::Str, OPT)],
        true,
    ),
    ("REASONING_END", &[("messageId", Kind::Str, REQ)], true),
    (
        "REASONING_ENCRYPTED_VALUE",
        &[
            ("subtype", Kind::Str, REQ),
            ("entityId", Kind::Str, REQ),
            ("encryptedValue", Kind::Str, REQ),
        ],
        true,
    ),
    (
        "SUBAGENT_STARTED",
        &[
            ("subagentRunId", Kind::Str, REQ),
            ("name", Kind::Str, REQ),
            ("description", Kind::Str, OPT),
            ("parentSubagentRunId", Kind::Str, OPT),
            ("parentToolCallId", Kind::Str, OPT),
            ("parentMessageId", Kind::Str, OPT),
        ],
        false,
    ),
    (
        "SUBAGENT_FINISHED",
        &[
            ("subagentRunId", Kind::Str, REQ),
            ("result", Kind::Any, OPT),
            ("outcome", Kind::Obj, OPT),
        ],
        false,
    ),
    (
        "SUBAGENT_ERROR",
        &[
            ("subagentRunId", Kind::Str, REQ),
            ("message", Kind::Str, REQ),
            ("code", Kind::Str, OPT),
        ],
        false,
    ),
];

/// Properties every message carries, whatever its role.
const MESSAGE_COMMON: &[Field] = &[
    ("id", Kind::Str, REQ),
    ("role", Kind::Str, REQ),
    ("subagentRunId", Kind::Str, OPT),
    ("metadata", Kind::Obj, OPT),
];

/// The known message roles and their own properties.
pub const MESSAGES: &[(&str, &[Field])] = &[
    (
        "developer",
        &[
            ("content", Kind::Str, REQ),
            ("name", Kind::Str, OPT),
            ("encryptedValue", Kind::Str, OPT),
        ],
    ),
    (
        "system",
        &[
            ("content", Kind::Str, REQ),
            ("name", Kind::Str, OPT),
            ("encryptedValue", Kind::Str, OPT),
        ],
    ),
    (
        "assistant",
        &[
            ("content", Kind::Str, OPT),
            ("name", Kind::Str, OPT),
            ("encryptedValue", Kind::Str, OPT),
            ("toolCalls", Kind::Arr, OPT),
        ],
    ),
    (
        "user",
        &[
            ("content", Kind::StrOrArr, REQ),
            ("name", Kind::Str, OPT),
            ("encryptedValue", Kind::Str, OPT),
        ],
    ),
    (
        "tool",
        &[
            ("content", Kind::StrOrArr, REQ),
            ("toolCallId", Kind::Str, REQ),
            ("error", Kind::Str, OPT),
            ("encryptedValue", Kind::Str, OPT),
        ],
    ),
    (
        "activity",
        &[
            ("activityType", Kind::Str, REQ),
            ("content", Kind::Obj, REQ),
        ],
    ),
    (
        "reasoning",
        &[
            ("content", Kind::Str, REQ),
            ("encryptedValue", Kind::Str, OPT),
        ],
    ),
];

pub const TEXT_ROLES: &[&str] = &["developer", "system", "assistant", "user"];

/// The event table entry for a type, if the type is known.
pub fn event_fields(event_type: &str) -> Option<(&'static [Field], bool)> {
    EVENTS
        .iter()
        .find(|(t, _, _)| *t == event_type)
        .map(|(_, f, a)| (*f, *a))
}

/// The message table entry for a role, if the role is known.
pub fn message_fields(role: &str) -> Option<&'static [Field]> {
    MESSAGES.iter().find(|(r, _)| *r == role).map(|(_, f)| *f)
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Str => "a string",
        Kind::Bool => "a boolean",
        Kind::Int => "an integer",
        Kind::Obj => "an object",
        Kind::Arr => "an array",
        Kind::StrOrArr => "a string or an array",
        Kind::TextRole => "one of developer, system, assistant, user",
        Kind::Any => "any JSON value",
    }
}

const MAX_SAFE: u128 = 9_007_199_254_740_991;

/// What the exact decimal value of a JSON number's text is, as an integer.
#[derive(Debug, PartialEq, Eq)]
enum Integral {
    /// An integral value (written `3`, `3.0`, `0.3e1` or `300e-2` alike) of at most 30 digits.
    Value(i128),
    /// Not an integer.
    Fractional,
    /// An integer with more than 30 digits.
    TooLarge,
}

/// Reads JSON number text (as `serde_json` validated it) exactly, without going through f64.
fn exact_integer(text: &str) -> Integral {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exp_text) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, "0"),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = int.chars().chain(frac.chars()).collect();
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Integral::Value(0);
    }
    let significant = digits.trim_end_matches('0');
    let exp_text = exp_text.strip_prefix('+').unwrap_or(exp_text);
    // An exponent too long for i64 is astronomically large or small: either way no timestamp.
    let Ok(exp) = exp_text.parse::<i64>() else {
        return if exp_text.starts_with('-') {
            Integral::Fractional
        } else {
            Integral::TooLarge
        };
    };
    // value = significant * 10^shift
    let shift = i128::from(exp) - frac.len() as i128 + (digits.len() - significant.len()) as i128;
    if shift < 0 {
        return Integral::Fractional;
    }
    if significant.len() as i128 + shift > 30 {
        return Integral::TooLarge;
    }
    let mut value: i128 = significant.parse().unwrap_or(0);
    for _ in 0..shift {
        value *= 10;
    }
    Integral::Value(if negative { -value } else { value })
}

fn check_value(name: &str, kind: Kind, v: &Value) -> Result<(), AguiError> {
    if v.is_null() && kind != Kind::Any {
        return Err(AguiError::malformed(
            NULL_VALUE,
            format!("`{name}` is null; an absent value is left out, never null"),
        ));
    }
    let ok = match kind {
        Kind::Str => v.is_string(),
        Kind::Bool => v.is_boolean(),
        Kind::Obj => v.is_object(),
        Kind::Arr => v.is_array(),
        Kind::StrOrArr => v.is_string() || v.is_array(),
        Kind::TextRole => v.as_str().is_some_and(|r| TEXT_ROLES.contains(&r)),
        Kind::Any => true,
        Kind::Int => {
            let Value::Number(n) = v else {
                return Err(AguiError::malformed(
                    WRONG_TYPE,
                    format!("`{name}` must be an integer, got {}", type_name(v)),
                ));
            };
            // Decided on the number's exact decimal text: an f64 would round
            // 1700000000000.00001 or 1e-400 to an integer.
            return match exact_integer(n.as_str()) {
                Integral::Fractional => Err(AguiError::malformed(
                    FRACTIONAL_TIMESTAMP,
                    format!("`{name}` is fractional ({n}); it must be an integer"),
                )),
                Integral::Value(i) if i.unsigned_abs() <= MAX_SAFE => Ok(()),
                Integral::Value(_) | Integral::TooLarge => Err(AguiError::malformed(
                    TIMESTAMP_OUT_OF_RANGE,
                    format!("`{name}` ({n}) is outside +-(2^53 - 1)"),
                )),
            };
        }
    };
    if ok {
        Ok(())
    } else {
        Err(AguiError::malformed(
            WRONG_TYPE,
            format!("`{name}` must be {}, got {}", kind_name(kind), type_name(v)),
        ))
    }
}

pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks a closed object against its described properties. Returns the names of the
/// properties it does not describe (the caller strips them and warns); a described property
/// that is missing or carries a wrong value is an error.
pub fn check_closed(
    obj: &Map<String, Value>,
    groups: &[&[Field]],
    attributable: bool,
) -> Result<Vec<String>, AguiError> {
    let mut unknown = Vec::new();
    for (name, v) in obj {
        let found = groups
            .iter()
            .flat_map(|g| g.iter())
            .chain(if attributable { Some(&ATTR) } else { None })
            .find(|(n, _, _)| n == name);
        match found {
            Some((n, kind, _)) => check_value(n, *kind, v)?,
            None => unknown.push(name.clone()),
        }
    }
    for (name, _, required) in groups.iter().flat_map(|g| g.iter()) {
        if *required && !obj.contains_key(*name) {
            return Err(AguiError::malformed(
                MISSING_FIELD,
                format!("required `{name}` is missing"),
            ));
        }
    }
    Ok(unknown)
}

/// The warning for properties stripped from a closed object.
pub fn unknown_warning(
    event_type: &str,
    message_id: Option<&str>,
    what: &str,
    names: &[String],
) -> Warning {
    Warning::new(
        UNKNOWN_PROPERTY,
        event_type,
        message_id,
        format!(
            "stripped unknown propert{} {} from {what}",
            if names.len() == 1 { "y" } else { "ies" },
            names.join(", ")
        ),
    )
}

/// Checks one message of a MESSAGES_SNAPSHOT. `Ok(None)` means an unknown role (dropped with a
/// warning by the caller); otherwise the message with its unknown properties stripped.
pub fn check_message(
    msg: &Value,
    index: usize,
    warnings: &mut Vec<Warning>,
) -> Result<Option<Map<String, Value>>, AguiError> {
    let Value::Object(obj) = msg else {
        return Err(AguiError::malformed(
            WRONG_TYPE,
            format!(
                "messages[{index}] must be an object, got {}",
                type_name(msg)
            ),
        ));
    };
    let at = |e: AguiError| AguiError {
        reason: format!("messages[{index}]: {}", e.reason),
        ..e
    };
    let str_field = |name: &str| -> Result<&str, AguiError> {
        match obj.get(name) {
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(v) => Err(at(check_value(name, Kind::Str, v)
                .err()
                .unwrap_or_else(unreachable_err))),
            None => Err(at(AguiError::malformed(
                MISSING_FIELD,
                format!("required `{name}` is missing"),
            ))),
        }
    };
    let id = str_field("id")?;
    let role = str_field("role").map_err(|e| e.with_context(None, Some(id)))?;
    let Some(fields) = message_fields(role) else {
        warnings.push(Warning::new(
            super::error::UNKNOWN_MESSAGE_ROLE,
            "MESSAGES_SNAPSHOT",
            Some(id),
            format!("dropped messages[{index}] with unknown role {role:?}"),
        ));
        return Ok(None);
    };
    let unknown = check_closed(obj, &[MESSAGE_COMMON, fields], false)
        .map_err(|e| at(e).with_context(None, Some(id)))?;
    let mut out = obj.clone();
    if !unknown.is_empty() {
        warnings.push(unknown_warning(
            "MESSAGES_SNAPSHOT",
            Some(id),
            &format!("messages[{index}]"),
            &unknown,
        ));
        for name in &unknown {
            out.shift_remove(name);
        }
    }
    Ok(Some(out))
}

fn unreachable_err() -> AguiError {
    AguiError::malformed(WRONG_TYPE, "wrong type")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_event_type_is_listed_once() {
        let mut names: Vec<_> = EVENTS.iter().map(|e| e.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), EVENTS.len());
    }

    #[test]
    fn timestamps_must_be_safe_integers() {
        assert!(check_value("timestamp", Kind::Int, &json!(1_700_000_000_000_i64)).is_ok());
        assert!(check_value("timestamp", Kind::Int, &json!(1e3)).is_ok());
        assert_eq!(
            check_value("timestamp", Kind::Int, &json!(1.5))
                .unwrap_err()
                .code,
            FRACTIONAL_TIMESTAMP
        );
        assert_eq!(
            check_value("timestamp", Kind::Int, &json!(9_007_199_254_740_992_i64))
                .unwrap_err()
                .code,
            TIMESTAMP_OUT_OF_RANGE
        );
        for text in ["1700000000000.00001", "1e-400", "0.5e0", "15e-1", "-0.1"] {
            let n: Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                check_value("timestamp", Kind::Int, &n).unwrap_err().code,
                FRACTIONAL_TIMESTAMP,
                "{text}"
            );
        }
        for text in [
            "1.0",
            "0.3e1",
            "300e-2",
            "-0",
            "0e999999999999999999999",
            "9007199254740991",
        ] {
            let n: Value = serde_json::from_str(text).unwrap();
            assert!(check_value("timestamp", Kind::Int, &n).is_ok(), "{text}");
        }
        for text in [
            "9007199254740992",
            "-9007199254740992",
            "1e400",
            "1e99999999999999999999",
        ] {
            let n: Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                check_value("timestamp", Kind::Int, &n).unwrap_err().code,
                TIMESTAMP_OUT_OF_RANGE,
                "{text}"
            );
        }
        assert_eq!(
            check_value("timestamp", Kind::Int, &json!("1"))
                .unwrap_err()
                .code,
            WRONG_TYPE
        );
        assert_eq!(
            check_value("timestamp", Kind::Int, &Value::Null)
                .unwrap_err()
                .code,
            NULL_VALUE
        );
    }
}
