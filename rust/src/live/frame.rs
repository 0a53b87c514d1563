//! The transport frame `{epoch, seq, deliveries: [{kind, payload}]}` (schema:
//! `live-frame.schema.json`): deliveries are live events or discontinuities, a discontinuity
//! names the keys whose canonical state a subscriber must re-read.

use serde_json::{Map, Value};

use crate::live::error::{Code, LiveError};
use crate::live::event::{Identity, LiveEvent};
use crate::live::json;
use crate::live::validate::{
    at, closed, integer, non_empty, object, validate_value, wrong_type, R,
};

/// What a reconcile key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyKind {
    Message,
    Turn,
    Interaction,
}

impl KeyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Message => "message",
            KeyKind::Turn => "turn",
            KeyKind::Interaction => "interaction",
        }
    }
}

/// One piece of state a subscriber must re-read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReconcileKey {
    pub kind: KeyKind,
    pub identity: Identity,
    /// The message or interaction id, or the turn id for a turn key.
    pub id: String,
    /// The message's turn (message keys only).
    pub turn_id: Option<String>,
}

impl ReconcileKey {
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), self.kind.as_str().into());
        m.insert(
            "workspaceId".into(),
            self.identity.workspace_id.clone().into(),
        );
        m.insert(
            "agentSessionId".into(),
            self.identity.agent_session_id.clone().into(),
        );
        match self.kind {
            KeyKind::Message => {
                m.insert(
                    "turnId".into(),
                    self.turn_id.clone().unwrap_or_default().into(),
                );
                m.insert("messageId".into(), self.id.clone().into());
            }
            KeyKind::Turn => {
                m.insert("turnId".into(), self.id.clone().into());
            }
            KeyKind::Interaction => {
                m.insert("requestId".into(), self.id.clone().into());
            }
        }
        Value::Object(m)
    }
}

/// Why the publisher sent a discontinuity instead of deltas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscontinuityReason {
    /// Deltas arrived after their turn settled; they were not sent.
    DeltaAfterSettled,
    /// Deltas arrived for a message already published as terminal; they were not sent.
    DeltaAfterTerminal,
}

impl DiscontinuityReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DiscontinuityReason::DeltaAfterSettled => "delta_after_settled",
            DiscontinuityReason::DeltaAfterTerminal => "delta_after_terminal",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discontinuity {
    pub reason: DiscontinuityReason,
    pub keys: Vec<ReconcileKey>,
}

/// One delivery of a frame.
// Nearly every delivery is an event; boxing it would add an allocation to each one.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    Event(LiveEvent),
    Discontinuity(Discontinuity),
}

impl Delivery {
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        match self {
            Delivery::Event(e) => {
                m.insert("kind".into(), "event".into());
                m.insert("payload".into(), e.to_value());
            }
            Delivery::Discontinuity(d) => {
                m.insert("kind".into(), "discontinuity".into());
                let mut p = Map::new();
                p.insert("reason".into(), d.reason.as_str().into());
                p.insert(
                    "reconcileKeys".into(),
                    Value::Array(d.keys.iter().map(ReconcileKey::to_value).collect()),
                );
                m.insert("payload".into(), Value::Object(p));
            }
        }
        Value::Object(m)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub epoch: u64,
    pub seq: u64,
    pub deliveries: Vec<Delivery>,
}

impl Frame {
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("epoch".into(), self.epoch.into());
        m.insert("seq".into(), self.seq.into());
        m.insert(
            "deliveries".into(),
            Value::Array(self.deliveries.iter().map(Delivery::to_value).collect()),
        );
        Value::Object(m)
    }

    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(&self.to_value()).unwrap_or_default()
    }
}

/// Reads and validates one frame (every event payload by the live-event rules).
pub fn parse_frame(bytes: &[u8]) -> R<Frame> {
    let v = json::parse(bytes)?;
    let m = object(&v)?;
    closed(m, &["epoch", "seq", "deliveries"], &[])?;
    Ok(Frame {
        epoch: at(m, "epoch", |v| integer(v, 0))?,
        seq: at(m, "seq", |v| integer(v, 1))?,
        deliveries: at(m, "deliveries", |v| {
            let a = v.as_array().ok_or_else(|| wrong_type("an array", v))?;
            a.iter()
                .enumerate()
                .map(|(i, d)| delivery(d).map_err(|e| e.under(&i.to_string())))
                .collect()
        })?,
    })
}

fn delivery(v: &Value) -> R<Delivery> {
    let m = object(v)?;
    closed(m, &["kind", "payload"], &[])?;
    match m["kind"].as_str() {
        Some("event") => at(m, "payload", validate_value).map(Delivery::Event),
        Some("discontinuity") => at(m, "payload", discontinuity).map(Delivery::Discontinuity),
        _ => Err(LiveError::new(
            Code::NotInEnum,
            "/kind",
            "a delivery's kind is \"event\" or \"discontinuity\"",
        )),
    }
}

fn discontinuity(v: &Value) -> R<Discontinuity> {
    let m = object(v)?;
    closed(m, &["reason", "reconcileKeys"], &[])?;
    let reason = at(m, "reason", |v| match v.as_str() {
        Some("delta_after_settled") => Ok(DiscontinuityReason::DeltaAfterSettled),
        Some("delta_after_terminal") => Ok(DiscontinuityReason::DeltaAfterTerminal),
        _ => Err(LiveError::new(
            Code::NotInEnum,
            "",
            "the reason must be \"delta_after_settled\" or \"delta_after_terminal\"",
        )),
    })?;
    let keys = at(m, "reconcileKeys", |v| {
        let a = v.as_array().ok_or_else(|| wrong_type("an array", v))?;
        if a.is_empty() {
            return Err(LiveError::new(
                Code::EmptyArray,
                "",
                "a discontinuity names at least one key",
            ));
        }
        a.iter()
            .enumerate()
            .map(|(i, k)| reconcile_key(k).map_err(|e| e.under(&i.to_string())))
            .collect()
    })?;
    Ok(Discontinuity { reason, keys })
}

fn reconcile_key(v: &Value) -> R<ReconcileKey> {
    let m = object(v)?;
    let kind = match m.get("kind").and_then(Value::as_str) {
        Some("message") => KeyKind::Message,
        Some("turn") => KeyKind::Turn,
        Some("interaction") => KeyKind::Interaction,
        _ => {
            return Err(LiveError::new(
                Code::NotInEnum,
                "/kind",
                "a reconcile key's kind is message, turn or interaction",
            ))
        }
    };
    let base = ["kind", "workspaceId", "agentSessionId"];
    let (id_key, extra): (&str, &[&str]) = match kind {
        KeyKind::Message => ("messageId", &["turnId"]),
        KeyKind::Turn => ("turnId", &[]),
        KeyKind::Interaction => ("requestId", &[]),
    };
    let mut required: Vec<&str> = base.to_vec();
    required.push(id_key);
    required.extend_from_slice(extra);
    closed(m, &required, &[])?;
    Ok(ReconcileKey {
        kind,
        identity: Identity {
            workspace_id: at(m, "workspaceId", non_empty)?,
            agent_session_id: at(m, "agentSessionId", non_empty)?,
        },
        id: at(m, id_key, non_empty)?,
        turn_id: if kind == KeyKind::Message {
            Some(at(m, "turnId", non_empty)?)
        } else {
            None
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_reject_bad_parts() {
        let key = ReconcileKey {
            kind: KeyKind::Message,
            identity: Identity {
                workspace_id: "w".into(),
                agent_session_id: "s".into(),
            },
            id: "m".into(),
            turn_id: Some("t".into()),
        };
        let f = Frame {
            epoch: 2,
            seq: 7,
            deliveries: vec![Delivery::Discontinuity(Discontinuity {
                reason: DiscontinuityReason::DeltaAfterSettled,
                keys: vec![key],
            })],
        };
        assert_eq!(parse_frame(&f.to_json()).unwrap(), f);
        let bad = |s: &str| parse_frame(s.as_bytes()).unwrap_err();
        assert_eq!(
            bad(r#"{"epoch":0,"seq":0,"deliveries":[]}"#).code,
            Code::BelowMinimum
        );
        let e = bad(r#"{"epoch":0,"seq":1,"deliveries":[{"kind":"x","payload":{}}]}"#);
        assert_eq!(
            (e.code, e.path.as_str()),
            (Code::NotInEnum, "/deliveries/0/kind")
        );
        let e = bad(r#"{"epoch":0,"seq":1,"deliveries":[{"kind":"event","payload":{}}]}"#);
        assert_eq!(
            (e.code, e.path.as_str()),
            (Code::MissingField, "/deliveries/0/payload/eventType")
        );
        assert_eq!(bad(r#"{"epoch":0,"seq":1}"#).code, Code::MissingField);
    }
}
