//! Every rule of the live-event contract, in one place.
//!
//! The rules the JSON Schema expresses (the seed's `agent-activity-live-event.schema.json` and
//! Tether's `activity.updated.event.json` for the variants it `$ref`s) are checked first, in
//! schema order: the type, then missing required members, then members a closed object does
//! not allow, then each member. Then the rules no JSON Schema can state (`TETHER_ONLY_CODES`):
//! the identity inside `data` (and a turn's or interaction's `agentSessionId`) equals the
//! envelope's, `toolOutput` only on a `tool_call` message, a settled turn is self-consistent.
//! The JSON text rules (UTF-8, one value, depth, duplicate keys) live in `json`.
//!
//! Pure: no I/O, no clock.

use serde_json::{Map, Value};

use crate::live::error::{pointer, Code, LiveError};
use crate::live::event::*;
use crate::live::json::{self, integer_value, IntegerValue};

pub(crate) type R<T> = Result<T, LiveError>;

/// Reads and validates one live event from JSON text.
pub fn validate(bytes: &[u8]) -> R<LiveEvent> {
    validate_value(&json::parse(bytes)?)
}

/// Validates one live event given as a JSON value (already free of duplicate keys).
pub fn validate_value(v: &Value) -> R<LiveEvent> {
    let env = object(v)?;
    let event_type = match env.get("eventType") {
        None => return Err(missing("eventType")),
        Some(Value::String(s)) => EventType::parse(s),
        Some(_) => None,
    }
    .ok_or_else(|| {
        LiveError::new(
            Code::UnknownEventType,
            "/eventType",
            "eventType is none of runtime_activity_update, message_delta, turn_update, \
             interaction_update, interaction_snapshot, session_audit",
        )
    })?;
    closed(
        env,
        &["workspaceId", "agentSessionId", "eventType", "data"],
        &[],
    )?;
    let identity = Identity {
        workspace_id: at(env, "workspaceId", non_empty)?,
        agent_session_id: at(env, "agentSessionId", non_empty)?,
    };
    let t = event_type.as_str();
    let event = at(env, "data", |d| match event_type {
        EventType::RuntimeActivityUpdate => runtime_update(d, t),
        EventType::MessageDelta => message_delta(d),
        EventType::TurnUpdate => turn_update(d, t),
        EventType::InteractionUpdate => interaction_update(d, t),
        EventType::InteractionSnapshot => interaction_snapshot(d, t),
        EventType::SessionAudit => session_audit(d, t),
    })?;
    tether_rules(&event, &identity)?;
    Ok(event)
}

// --- schema rules: small readers whose errors are relative to the value they read ---

pub(crate) fn missing(key: &str) -> LiveError {
    LiveError::new(
        Code::MissingField,
        pointer(&[key]),
        format!("required member {key:?} is missing"),
    )
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn wrong_type(expected: &str, v: &Value) -> LiveError {
    LiveError::new(
        Code::WrongType,
        "",
        format!("expected {expected}, got {}", type_name(v)),
    )
}

pub(crate) fn object(v: &Value) -> R<&Map<String, Value>> {
    v.as_object().ok_or_else(|| wrong_type("an object", v))
}

/// Required members present, and no member outside `required` and `optional`.
pub(crate) fn closed(m: &Map<String, Value>, required: &[&str], optional: &[&str]) -> R<()> {
    for r in required {
        if !m.contains_key(*r) {
            return Err(missing(r));
        }
    }
    if m.len() > required.len() || !optional.is_empty() {
        for k in m.keys() {
            if !required.contains(&k.as_str()) && !optional.contains(&k.as_str()) {
                return Err(LiveError::new(
                    Code::UnknownField,
                    pointer(&[k]),
                    format!("member {k:?} is not allowed here"),
                ));
            }
        }
    }
    Ok(())
}

/// Reads the member `key` (present: `closed` checked it) with `f`, errors placed under it.
pub(crate) fn at<T>(m: &Map<String, Value>, key: &str, f: impl FnOnce(&Value) -> R<T>) -> R<T> {
    match m.get(key) {
        Some(v) => f(v).map_err(|e| e.under(key)),
        None => Err(missing(key)),
    }
}

/// Reads the optional member `key` with `f`.
pub(crate) fn opt_at<T>(
    m: &Map<String, Value>,
    key: &str,
    f: impl FnOnce(&Value) -> R<T>,
) -> R<Option<T>> {
    m.get(key)
        .map(|v| f(v).map_err(|e| e.under(key)))
        .transpose()
}

pub(crate) fn string(v: &Value) -> R<String> {
    v.as_str()
        .map(str::to_owned)
        .ok_or_else(|| wrong_type("a string", v))
}

pub(crate) fn non_empty(v: &Value) -> R<String> {
    let s = v.as_str().ok_or_else(|| wrong_type("a string", v))?;
    if s.is_empty() {
        return Err(LiveError::new(Code::EmptyString, "", "must not be empty"));
    }
    Ok(s.to_owned())
}

pub(crate) fn nullable(v: &Value, f: impl FnOnce(&Value) -> R<String>) -> R<Option<String>> {
    if v.is_null() {
        Ok(None)
    } else {
        f(v).map(Some).map_err(|mut e| {
            if e.code == Code::WrongType {
                e.reason = format!("expected a string or null, got {}", type_name(v));
            }
            e
        })
    }
}

/// A JSON Schema `integer` with a `minimum`, within 2^53 - 1 (the last is Tether's rule).
pub(crate) fn integer(v: &Value, minimum: u64) -> R<u64> {
    let n = v.as_number().ok_or_else(|| wrong_type("an integer", v))?;
    match integer_value(n) {
        IntegerValue::NotInteger => Err(wrong_type("an integer", v)),
        IntegerValue::Negative => Err(below(minimum, n)),
        IntegerValue::Safe(u) if u < minimum => Err(below(minimum, n)),
        IntegerValue::Safe(u) => Ok(u),
        IntegerValue::Huge => Err(LiveError::new(
            Code::UnsafeInteger,
            "",
            format!("{n} is above 2^53 - 1, the largest integer every reader keeps exactly"),
        )),
    }
}

fn below(minimum: u64, n: &serde_json::Number) -> LiveError {
    LiveError::new(
        Code::BelowMinimum,
        "",
        format!("{n} is below the minimum {minimum}"),
    )
}

pub(crate) fn nullable_integer(v: &Value, minimum: u64) -> R<Option<u64>> {
    if v.is_null() {
        return Ok(None);
    }
    integer(v, minimum).map(Some).map_err(|mut e| {
        if e.code == Code::WrongType {
            e.reason = format!("expected an integer or null, got {}", type_name(v));
        }
        e
    })
}

fn any_object(v: &Value) -> R<Map<String, Value>> {
    object(v).cloned()
}

fn nullable_object(v: &Value) -> R<Option<Map<String, Value>>> {
    match v {
        Value::Null => Ok(None),
        Value::Object(m) => Ok(Some(m.clone())),
        _ => Err(wrong_type("an object or null", v)),
    }
}

fn constant(expected: &'static str) -> impl Fn(&Value) -> R<()> {
    move |v| {
        if v.as_str() == Some(expected) {
            Ok(())
        } else {
            Err(LiveError::new(
                Code::ConstMismatch,
                "",
                format!("must be {expected:?}"),
            ))
        }
    }
}

pub(crate) fn one_of<T: Copy>(
    parse: fn(&str) -> Option<T>,
    all: &'static [T],
    name: fn(T) -> &'static str,
) -> impl Fn(&Value) -> R<T> {
    move |v| {
        v.as_str().and_then(parse).ok_or_else(|| {
            let names: Vec<&str> = all.iter().map(|t| name(*t)).collect();
            LiveError::new(
                Code::NotInEnum,
                "",
                format!("must be one of {}", names.join(", ")),
            )
        })
    }
}

/// The identity members every `data` object starts with.
fn data_identity(m: &Map<String, Value>) -> R<Identity> {
    Ok(Identity {
        workspace_id: at(m, "workspaceId", non_empty)?,
        agent_session_id: at(m, "agentSessionId", non_empty)?,
    })
}

fn runtime_update(v: &Value, t: &'static str) -> R<LiveEvent> {
    let m = object(v)?;
    closed(
        m,
        &[
            "workspaceId",
            "agentSessionId",
            "eventType",
            "state",
            "occurredAtUnixMs",
        ],
        &[],
    )?;
    let identity = data_identity(m)?;
    at(m, "eventType", constant(t))?;
    Ok(LiveEvent::RuntimeActivityUpdate(RuntimeUpdate {
        identity,
        state: at(
            m,
            "state",
            one_of(RuntimeState::parse, RuntimeState::ALL, RuntimeState::as_str),
        )?,
        occurred_at_unix_ms: at(m, "occurredAtUnixMs", |v| integer(v, 1))?,
    }))
}

const DELTA_REQUIRED: &[&str] = &[
    "workspaceId",
    "agentSessionId",
    "messageId",
    "turnId",
    "role",
    "kind",
    "occurredAtUnixMs",
];
/// The members of the data `anyOf`: a delta must change at least one of them.
const DELTA_CHANGES: &[&str] = &[
    "content",
    "toolOutput",
    "payloadSet",
    "payloadUnset",
    "status",
    "semantics",
    "startedAtUnixMs",
    "completedAtUnixMs",
];

fn message_delta(v: &Value) -> R<LiveEvent> {
    let m = object(v)?;
    closed(m, DELTA_REQUIRED, DELTA_CHANGES)?;
    let identity = data_identity(m)?;
    let d = MessageDelta {
        identity,
        message_id: at(m, "messageId", non_empty)?,
        turn_id: at(m, "turnId", non_empty)?,
        role: at(m, "role", non_empty)?,
        kind: at(m, "kind", non_empty)?,
        occurred_at_unix_ms: at(m, "occurredAtUnixMs", |v| integer(v, 1))?,
        content: opt_at(m, "content", content)?,
        tool_output: opt_at(m, "toolOutput", tool_output)?,
        payload_set: opt_at(m, "payloadSet", payload_set)?,
        payload_unset: opt_at(m, "payloadUnset", payload_unset)?,
        status: opt_at(m, "status", string)?,
        semantics: opt_at(m, "semantics", any_object)?,
        started_at_unix_ms: opt_at(m, "startedAtUnixMs", |v| integer(v, 0))?,
        completed_at_unix_ms: opt_at(m, "completedAtUnixMs", |v| integer(v, 0))?,
    };
    if !DELTA_CHANGES.iter().any(|k| m.contains_key(*k)) {
        return Err(LiveError::new(
            Code::NoChange,
            "",
            format!(
                "a message delta must carry one of {}",
                DELTA_CHANGES.join(", ")
            ),
        ));
    }
    Ok(LiveEvent::MessageDelta(d))
}

fn operation(m: &Map<String, Value>) -> R<&str> {
    match m.get("operation") {
        None => Err(missing("operation")),
        Some(Value::String(s)) if s == "append_text" || s == "set" => Ok(s),
        Some(_) => Err(LiveError::new(
            Code::UnknownOperation,
            "/operation",
            "operation must be \"append_text\" or \"set\"",
        )),
    }
}

fn content(v: &Value) -> R<Content> {
    let m = object(v)?;
    if operation(m)? == "append_text" {
        closed(m, &["operation", "text"], &[])?;
        Ok(Content::AppendText(at(m, "text", string)?))
    } else {
        closed(m, &["operation", "value"], &[])?;
        Ok(Content::Set(m["value"].clone()))
    }
}

fn tool_output(v: &Value) -> R<ToolOutput> {
    let m = object(v)?;
    if operation(m)? == "append_text" {
        closed(m, &["operation", "text", "offsetBytes"], &[])?;
        Ok(ToolOutput::AppendText {
            text: at(m, "text", non_empty)?,
            offset_bytes: at(m, "offsetBytes", |v| integer(v, 0))?,
        })
    } else {
        closed(m, &["operation", "text"], &[])?;
        Ok(ToolOutput::Set(at(m, "text", string)?))
    }
}

fn payload_set(v: &Value) -> R<Map<String, Value>> {
    let m = object(v)?;
    if m.is_empty() {
        return Err(LiveError::new(
            Code::EmptyObject,
            "",
            "payloadSet must set at least one key",
        ));
    }
    if m.contains_key("") {
        return Err(LiveError::new(
            Code::EmptyPropertyName,
            "/",
            "payload keys must not be empty",
        ));
    }
    Ok(m.clone())
}

fn payload_unset(v: &Value) -> R<Vec<String>> {
    let a = v.as_array().ok_or_else(|| wrong_type("an array", v))?;
    if a.is_empty() {
        return Err(LiveError::new(
            Code::EmptyArray,
            "",
            "payloadUnset must name at least one key",
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(a.len());
    for (i, item) in a.iter().enumerate() {
        out.push(non_empty(item).map_err(|e| e.under(&i.to_string()))?);
    }
    for (i, k) in out.iter().enumerate() {
        if out[..i].contains(k) {
            return Err(LiveError::new(
                Code::DuplicateItem,
                pointer(&[&i.to_string()]),
                format!("{k:?} is listed twice"),
            ));
        }
    }
    Ok(out)
}

fn turn_update(v: &Value, t: &'static str) -> R<LiveEvent> {
    let m = object(v)?;
    closed(
        m,
        &[
            "workspaceId",
            "agentSessionId",
            "eventType",
            "occurredAtUnixMs",
            "activeTurnId",
            "turn",
        ],
        &[],
    )?;
    let identity = data_identity(m)?;
    at(m, "eventType", constant(t))?;
    Ok(LiveEvent::TurnUpdate(TurnUpdate {
        identity,
        occurred_at_unix_ms: at(m, "occurredAtUnixMs", |v| integer(v, 1))?,
        active_turn_id: at(m, "activeTurnId", |v| nullable(v, non_empty))?,
        turn: at(m, "turn", turn)?,
    }))
}

pub(crate) fn turn(v: &Value) -> R<Turn> {
    let m = object(v)?;
    closed(
        m,
        &[
            "turnId",
            "agentSessionId",
            "phase",
            "outcome",
            "error",
            "startedAtUnixMs",
            "settledAtUnixMs",
            "updatedAtUnixMs",
        ],
        &[],
    )?;
    Ok(Turn {
        turn_id: at(m, "turnId", non_empty)?,
        agent_session_id: at(m, "agentSessionId", non_empty)?,
        phase: at(m, "phase", one_of(Phase::parse, Phase::ALL, Phase::as_str))?,
        outcome: at(m, "outcome", |v| {
            if v.is_null() {
                Ok(None)
            } else {
                one_of(Outcome::parse, Outcome::ALL, Outcome::as_str)(v)
                    .map(Some)
                    .map_err(|mut e| {
                        e.reason = format!("{} or null", e.reason);
                        e
                    })
            }
        })?,
        error: at(m, "error", turn_error)?,
        started_at_unix_ms: at(m, "startedAtUnixMs", |v| integer(v, 0))?,
        settled_at_unix_ms: at(m, "settledAtUnixMs", |v| nullable_integer(v, 0))?,
        updated_at_unix_ms: at(m, "updatedAtUnixMs", |v| integer(v, 0))?,
    })
}

fn turn_error(v: &Value) -> R<Option<TurnError>> {
    if v.is_null() {
        return Ok(None);
    }
    let m = v
        .as_object()
        .ok_or_else(|| wrong_type("an object or null", v))?;
    closed(m, &["message", "detail"], &["code"])?;
    Ok(Some(TurnError {
        message: at(m, "message", non_empty)?,
        code: opt_at(m, "code", non_empty)?,
        detail: m["detail"].clone(),
    }))
}

fn interaction_update(v: &Value, t: &'static str) -> R<LiveEvent> {
    let m = object(v)?;
    closed(
        m,
        &[
            "workspaceId",
            "agentSessionId",
            "eventType",
            "occurredAtUnixMs",
            "interaction",
        ],
        &[],
    )?;
    let identity = data_identity(m)?;
    at(m, "eventType", constant(t))?;
    Ok(LiveEvent::InteractionUpdate(InteractionUpdate {
        identity,
        occurred_at_unix_ms: at(m, "occurredAtUnixMs", |v| integer(v, 1))?,
        interaction: at(m, "interaction", interaction)?,
    }))
}

pub(crate) fn interaction(v: &Value) -> R<Interaction> {
    let m = object(v)?;
    closed(
        m,
        &[
            "requestId",
            "agentSessionId",
            "turnId",
            "kind",
            "status",
            "toolName",
            "input",
            "output",
            "metadata",
            "createdAtUnixMs",
            "updatedAtUnixMs",
        ],
        &[],
    )?;
    Ok(Interaction {
        request_id: at(m, "requestId", non_empty)?,
        agent_session_id: at(m, "agentSessionId", non_empty)?,
        turn_id: at(m, "turnId", non_empty)?,
        kind: at(
            m,
            "kind",
            one_of(
                InteractionKind::parse,
                InteractionKind::ALL,
                InteractionKind::as_str,
            ),
        )?,
        status: at(
            m,
            "status",
            one_of(
                InteractionStatus::parse,
                InteractionStatus::ALL,
                InteractionStatus::as_str,
            ),
        )?,
        tool_name: at(m, "toolName", |v| nullable(v, string))?,
        input: at(m, "input", nullable_object)?,
        output: at(m, "output", nullable_object)?,
        metadata: at(m, "metadata", nullable_object)?,
        created_at_unix_ms: at(m, "createdAtUnixMs", |v| integer(v, 0))?,
        updated_at_unix_ms: at(m, "updatedAtUnixMs", |v| integer(v, 0))?,
    })
}

fn interaction_snapshot(v: &Value, t: &'static str) -> R<LiveEvent> {
    let m = object(v)?;
    closed(
        m,
        &[
            "workspaceId",
            "agentSessionId",
            "eventType",
            "occurredAtUnixMs",
            "rootTurnId",
            "interactions",
        ],
        &[],
    )?;
    let identity = data_identity(m)?;
    at(m, "eventType", constant(t))?;
    Ok(LiveEvent::InteractionSnapshot(InteractionSnapshot {
        identity,
        occurred_at_unix_ms: at(m, "occurredAtUnixMs", |v| integer(v, 0))?,
        root_turn_id: at(m, "rootTurnId", non_empty)?,
        interactions: at(m, "interactions", |v| {
            let a = v.as_array().ok_or_else(|| wrong_type("an array", v))?;
            a.iter()
                .enumerate()
                .map(|(i, x)| interaction(x).map_err(|e| e.under(&i.to_string())))
                .collect()
        })?,
    }))
}

fn session_audit(v: &Value, t: &'static str) -> R<LiveEvent> {
    let m = object(v)?;
    closed(
        m,
        &[
            "workspaceId",
            "agentSessionId",
            "eventType",
            "occurredAtUnixMs",
            "audit",
        ],
        &[],
    )?;
    let identity = data_identity(m)?;
    at(m, "eventType", constant(t))?;
    Ok(LiveEvent::SessionAudit(SessionAudit {
        identity,
        occurred_at_unix_ms: at(m, "occurredAtUnixMs", |v| integer(v, 1))?,
        audit: at(m, "audit", audit)?,
    }))
}

pub(crate) fn audit(v: &Value) -> R<Audit> {
    let m = object(v)?;
    closed(m, &["auditId", "role", "payload", "version"], &[])?;
    Ok(Audit {
        audit_id: at(m, "auditId", non_empty)?,
        role: at(m, "role", non_empty)?,
        payload: at(m, "payload", any_object)?,
        version: at(m, "version", |v| integer(v, 1))?,
    })
}

// --- the rules no JSON Schema can state ---

fn tether_rules(event: &LiveEvent, envelope: &Identity) -> R<()> {
    let data = event.identity();
    if data.workspace_id != envelope.workspace_id {
        return Err(identity_mismatch(
            "/data/workspaceId",
            "data.workspaceId differs from the envelope's workspaceId",
        ));
    }
    if data.agent_session_id != envelope.agent_session_id {
        return Err(identity_mismatch(
            "/data/agentSessionId",
            "data.agentSessionId differs from the envelope's agentSessionId",
        ));
    }
    let session = &envelope.agent_session_id;
    match event {
        LiveEvent::MessageDelta(d) => {
            if d.tool_output.is_some() && d.kind != "tool_call" {
                return Err(LiveError::new(
                    Code::ToolOutputNotToolCall,
                    "/data/toolOutput",
                    format!(
                        "toolOutput is only allowed on kind \"tool_call\", not {:?}",
                        d.kind
                    ),
                ));
            }
        }
        LiveEvent::TurnUpdate(u) => {
            if &u.turn.agent_session_id != session {
                return Err(identity_mismatch(
                    "/data/turn/agentSessionId",
                    "the turn's agentSessionId differs from the envelope's",
                ));
            }
            turn_consistency(&u.turn).map_err(|e| e.under("turn").under("data"))?;
            let expected = if u.turn.is_settled() {
                None
            } else {
                Some(&u.turn.turn_id)
            };
            if u.active_turn_id.as_ref() != expected {
                return Err(LiveError::new(
                    Code::TurnInconsistent,
                    "/data/activeTurnId",
                    if u.turn.is_settled() {
                        "activeTurnId must be null once the turn is settled".to_owned()
                    } else {
                        "activeTurnId must equal turn.turnId until the turn is settled".to_owned()
                    },
                ));
            }
        }
        LiveEvent::InteractionUpdate(u) => {
            if &u.interaction.agent_session_id != session {
                return Err(identity_mismatch(
                    "/data/interaction/agentSessionId",
                    "the interaction's agentSessionId differs from the envelope's",
                ));
            }
        }
        LiveEvent::InteractionSnapshot(s) => {
            for (i, x) in s.interactions.iter().enumerate() {
                if &x.agent_session_id != session {
                    return Err(identity_mismatch(
                        &format!("/data/interactions/{i}/agentSessionId"),
                        "the interaction's agentSessionId differs from the envelope's",
                    ));
                }
            }
        }
        LiveEvent::RuntimeActivityUpdate(_) | LiveEvent::SessionAudit(_) => {}
    }
    Ok(())
}

fn identity_mismatch(path: &str, reason: &str) -> LiveError {
    LiveError::new(Code::IdentityMismatch, path, reason)
}

/// A turn's own fields agree: settled exactly when it has an outcome and a settle time; an
/// error only on a settled turn that did not complete; start <= settle <= last update.
pub(crate) fn turn_consistency(t: &Turn) -> R<()> {
    let bad = |path: &str, reason: &str| Err(LiveError::new(Code::TurnInconsistent, path, reason));
    let settled = t.is_settled();
    if settled != t.outcome.is_some() {
        return bad(
            "/outcome",
            "a turn has an outcome exactly when its phase is settled",
        );
    }
    if settled != t.settled_at_unix_ms.is_some() {
        return bad(
            "/settledAtUnixMs",
            "a turn has settledAtUnixMs exactly when its phase is settled",
        );
    }
    if t.error.is_some() && (!settled || t.outcome == Some(Outcome::Completed)) {
        return bad(
            "/error",
            "only a settled turn that did not complete carries an error",
        );
    }
    if let Some(s) = t.settled_at_unix_ms {
        if s < t.started_at_unix_ms {
            return bad("/settledAtUnixMs", "a turn cannot settle before it started");
        }
        if t.updated_at_unix_ms < s {
            return bad(
                "/updatedAtUnixMs",
                "updatedAtUnixMs cannot precede settledAtUnixMs",
            );
        }
    }
    if t.updated_at_unix_ms < t.started_at_unix_ms {
        return bad(
            "/updatedAtUnixMs",
            "updatedAtUnixMs cannot precede startedAtUnixMs",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn delta() -> Value {
        json!({
            "workspaceId": "ws", "agentSessionId": "world-1", "eventType": "message_delta",
            "data": {
                "workspaceId": "ws", "agentSessionId": "world-1",
                "messageId": "toolcall:world-1/sim/a", "turnId": "receipt:world-1/r/3/v",
                "role": "tool", "kind": "tool_call", "occurredAtUnixMs": 5,
                "toolOutput": {"operation": "append_text", "text": "é", "offsetBytes": 3}
            }
        })
    }

    fn turn_event() -> Value {
        json!({
            "workspaceId": "ws", "agentSessionId": "s", "eventType": "turn_update",
            "data": {
                "workspaceId": "ws", "agentSessionId": "s", "eventType": "turn_update",
                "occurredAtUnixMs": 9, "activeTurnId": null,
                "turn": {
                    "turnId": "t", "agentSessionId": "s", "phase": "settled",
                    "outcome": "failed",
                    "error": {"message": "1 of 2 activities failed", "detail": null},
                    "startedAtUnixMs": 1, "settledAtUnixMs": 5, "updatedAtUnixMs": 6
                }
            }
        })
    }

    fn err(v: &Value) -> (Code, String) {
        let e = validate_value(v).unwrap_err();
        (e.code, e.path)
    }

    fn with(mut v: Value, path: &str, new: Value) -> Value {
        let (parent, key) = path.rsplit_once('/').unwrap();
        v.pointer_mut(parent)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert(key.to_owned(), new);
        v
    }

    fn without(mut v: Value, path: &str) -> Value {
        let (parent, key) = path.rsplit_once('/').unwrap();
        v.pointer_mut(parent)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove(key);
        v
    }

    #[test]
    fn valid_events_read_and_write_back() {
        for v in [delta(), turn_event()] {
            let e = validate_value(&v).unwrap();
            assert_eq!(e.to_value(), v);
            let again = validate(&e.to_json()).unwrap();
            assert_eq!(again, e);
        }
    }

    #[test]
    fn schema_rules_have_their_codes_and_paths() {
        let d = delta();
        assert_eq!(err(&json!([])), (Code::WrongType, "".into()));
        assert_eq!(
            err(&without(d.clone(), "/eventType")),
            (Code::MissingField, "/eventType".into())
        );
        assert_eq!(
            err(&with(d.clone(), "/eventType", json!("nope"))),
            (Code::UnknownEventType, "/eventType".into())
        );
        assert_eq!(
            err(&with(d.clone(), "/extra", json!(1))),
            (Code::UnknownField, "/extra".into())
        );
        assert_eq!(
            err(&with(d.clone(), "/data/extra", json!(1))),
            (Code::UnknownField, "/data/extra".into())
        );
        assert_eq!(
            err(&with(d.clone(), "/data/role", json!(""))),
            (Code::EmptyString, "/data/role".into())
        );
        assert_eq!(
            err(&with(d.clone(), "/data/occurredAtUnixMs", json!(0))),
            (Code::BelowMinimum, "/data/occurredAtUnixMs".into())
        );
        assert_eq!(
            err(&with(d.clone(), "/data/occurredAtUnixMs", json!(1.5))),
            (Code::WrongType, "/data/occurredAtUnixMs".into())
        );
        assert_eq!(
            err(&with(
                d.clone(),
                "/data/toolOutput/operation",
                json!("patch")
            )),
            (Code::UnknownOperation, "/data/toolOutput/operation".into())
        );
        assert_eq!(
            err(&with(d.clone(), "/data/toolOutput/text", json!(""))),
            (Code::EmptyString, "/data/toolOutput/text".into())
        );
        assert_eq!(
            err(&without(d.clone(), "/data/toolOutput/offsetBytes")),
            (Code::MissingField, "/data/toolOutput/offsetBytes".into())
        );
        assert_eq!(
            err(&without(d.clone(), "/data/toolOutput")),
            (Code::NoChange, "/data".into())
        );
        assert_eq!(
            err(&with(d.clone(), "/data/payloadSet", json!({}))),
            (Code::EmptyObject, "/data/payloadSet".into())
        );
        assert_eq!(
            err(&with(d.clone(), "/data/payloadSet", json!({"": 1}))),
            (Code::EmptyPropertyName, "/data/payloadSet/".into())
        );
        assert_eq!(
            err(&with(d.clone(), "/data/payloadUnset", json!([]))),
            (Code::EmptyArray, "/data/payloadUnset".into())
        );
        assert_eq!(
            err(&with(d.clone(), "/data/payloadUnset", json!(["a", "a"]))),
            (Code::DuplicateItem, "/data/payloadUnset/1".into())
        );
        let t = turn_event();
        assert_eq!(
            err(&with(t.clone(), "/data/eventType", json!("message_delta"))),
            (Code::ConstMismatch, "/data/eventType".into())
        );
        assert_eq!(
            err(&with(t.clone(), "/data/turn/phase", json!("done"))),
            (Code::NotInEnum, "/data/turn/phase".into())
        );
        assert_eq!(
            err(&with(t.clone(), "/data/turn/error/extra", json!(1))),
            (Code::UnknownField, "/data/turn/error/extra".into())
        );
    }

    #[test]
    fn tether_only_rules() {
        let d = delta();
        assert_eq!(
            err(&with(d.clone(), "/data/agentSessionId", json!("other"))),
            (Code::IdentityMismatch, "/data/agentSessionId".into())
        );
        assert_eq!(
            err(&with(d.clone(), "/data/kind", json!("text"))),
            (Code::ToolOutputNotToolCall, "/data/toolOutput".into())
        );
        assert_eq!(
            err(&with(
                d.clone(),
                "/data/occurredAtUnixMs",
                json!(1u64 << 60)
            )),
            (Code::UnsafeInteger, "/data/occurredAtUnixMs".into())
        );
        let t = turn_event();
        assert_eq!(
            err(&with(t.clone(), "/data/activeTurnId", json!("t"))),
            (Code::TurnInconsistent, "/data/activeTurnId".into())
        );
        assert_eq!(
            err(&with(t.clone(), "/data/turn/outcome", json!(null))),
            (Code::TurnInconsistent, "/data/turn/outcome".into())
        );
        assert_eq!(
            err(&with(t.clone(), "/data/turn/settledAtUnixMs", json!(0))),
            (Code::TurnInconsistent, "/data/turn/settledAtUnixMs".into())
        );
        assert_eq!(
            err(&with(t.clone(), "/data/turn/outcome", json!("completed"))),
            (Code::TurnInconsistent, "/data/turn/error".into())
        );
        assert_eq!(
            err(&with(t.clone(), "/data/turn/agentSessionId", json!("x"))),
            (Code::IdentityMismatch, "/data/turn/agentSessionId".into())
        );
        let running = with(
            with(
                with(
                    with(t.clone(), "/data/turn/phase", json!("running")),
                    "/data/turn/outcome",
                    json!(null),
                ),
                "/data/turn/settledAtUnixMs",
                json!(null),
            ),
            "/data/turn/error",
            json!(null),
        );
        assert_eq!(
            err(&running),
            (Code::TurnInconsistent, "/data/activeTurnId".into())
        );
        assert!(validate_value(&with(running, "/data/activeTurnId", json!("t"))).is_ok());
    }

    #[test]
    fn json_text_rules_come_first() {
        let e = validate(br#"{"workspaceId": "a", "workspaceId": "b"}"#).unwrap_err();
        assert_eq!(e.code, Code::DuplicateKey);
        assert_eq!(validate(b"{} x").unwrap_err().code, Code::TrailingData);
    }
}
