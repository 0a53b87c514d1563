//! The messages a store holds, and their wire (camelCase JSON) form.

use serde_json::{Map, Value};

/// One activity message: content is always an object.
#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    pub id: String,
    pub activity_type: String,
    pub content: Value,
    pub metadata: Option<Map<String, Value>>,
    pub subagent_run_id: Option<String>,
}

/// A message in the history. Non-activity messages are kept in their wire form, stripped of
/// unknown properties; they always have string `id` and `role`.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Activity(Activity),
    Other(Map<String, Value>),
}

impl Message {
    pub fn id(&self) -> &str {
        match self {
            Message::Activity(a) => &a.id,
            Message::Other(m) => m.get("id").and_then(Value::as_str).unwrap_or(""),
        }
    }

    pub fn role(&self) -> &str {
        match self {
            Message::Activity(_) => "activity",
            Message::Other(m) => m.get("role").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The wire form: `{"id", "role", ...}` with camelCase keys and no `null` for absent fields.
    pub fn to_wire(&self) -> Value {
        match self {
            Message::Other(m) => Value::Object(m.clone()),
            Message::Activity(a) => {
                let mut m = Map::new();
                m.insert("id".into(), Value::String(a.id.clone()));
                m.insert("role".into(), Value::String("activity".into()));
                if let Some(s) = &a.subagent_run_id {
                    m.insert("subagentRunId".into(), Value::String(s.clone()));
                }
                m.insert(
                    "activityType".into(),
                    Value::String(a.activity_type.clone()),
                );
                m.insert("content".into(), a.content.clone());
                if let Some(md) = &a.metadata {
                    m.insert("metadata".into(), Value::Object(md.clone()));
                }
                Value::Object(m)
            }
        }
    }

    /// Builds a held message from a checked snapshot message (see `schema::check_message`).
    pub fn from_checked(mut m: Map<String, Value>) -> Message {
        if m.get("role").and_then(Value::as_str) != Some("activity") {
            return Message::Other(m);
        }
        let take_str = |m: &mut Map<String, Value>, k: &str| match m.shift_remove(k) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let id = take_str(&mut m, "id").unwrap_or_default();
        let activity_type = take_str(&mut m, "activityType").unwrap_or_default();
        let subagent_run_id = take_str(&mut m, "subagentRunId");
        let content = m
            .shift_remove("content")
            .unwrap_or_else(|| Value::Object(Map::new()));
        let metadata = match m.shift_remove("metadata") {
            Some(Value::Object(md)) => Some(md),
            _ => None,
        };
        Message::Activity(Activity {
            id,
            activity_type,
            content,
            metadata,
            subagent_run_id,
        })
    }
}

/// Merges event metadata into a message's: key by key, last write wins, no deep merge.
pub fn merge_metadata(into: &mut Option<Map<String, Value>>, from: Option<Map<String, Value>>) {
    let Some(from) = from else { return };
    match into {
        Some(m) => {
            for (k, v) in from {
                m.insert(k, v);
            }
        }
        None => *into = Some(from),
    }
}
