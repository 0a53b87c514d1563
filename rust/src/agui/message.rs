//! The messages a store holds, and their wire (camelCase JSON) form.

use serde_json::{Map, Value};

/// The deepest activity content the store holds. Deltas can nest content without limit (each
/// one adds at the deepest point), and content that deep would overflow the native stack when
/// it is copied, converted or dropped; a delta that could go deeper is skipped with a warning.
pub const MAX_CONTENT_DEPTH: usize = 512;

/// One activity message: content is always an object.
#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    pub id: String,
    pub activity_type: String,
    pub content: Value,
    pub metadata: Option<Map<String, Value>>,
    pub subagent_run_id: Option<String>,
    /// An upper bound of `content`'s nesting depth (see [`value_depth`]), kept by the store.
    pub depth: usize,
}

/// Nesting depth of a value: 0 for a scalar, 1 for `{}` or `[]`, one more per level. Iterative,
/// so any depth is measured without recursion.
pub fn value_depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        match v {
            Value::Array(a) => {
                max = max.max(d);
                stack.extend(a.iter().map(|x| (x, d + 1)));
            }
            Value::Object(m) => {
                max = max.max(d);
                stack.extend(m.values().map(|x| (x, d + 1)));
            }
            _ => {}
        }
    }
    max
}

/// One patch operation as far as depth is concerned: `op`, the token counts of `path` and
/// `from`, and the `value`.
pub type DepthOp<'a> = (&'a str, usize, Option<usize>, Option<&'a Value>);

/// The number of reference tokens in pointer text (escapes never contain `/`).
pub fn pointer_len(pointer: &str) -> usize {
    pointer.bytes().filter(|b| *b == b'/').count()
}

/// An upper bound of the content's depth after these operations, given that `depth` bounds it
/// before: an add or replace nests its value under its path; a copy or move nests what sits at
/// `from` (at most `depth` minus the tokens of `from`) under its path.
pub fn depth_after<'a>(ops: impl IntoIterator<Item = DepthOp<'a>>, mut depth: usize) -> usize {
    for (op, path, from, value) in ops {
        let grown = match op {
            "add" | "replace" => path + value.map_or(0, value_depth),
            "copy" | "move" => path + depth.saturating_sub(from.unwrap_or(0)),
            _ => 0,
        };
        depth = depth.max(grown);
    }
    depth
}

/// `depth_after` for a patch given as a JSON value (members of the wrong type count as absent;
/// such a patch is malformed and never applied).
pub fn patch_depth_after(patch: &Value, depth: usize) -> usize {
    let ops = patch.as_array().into_iter().flatten().map(|op| {
        let text = |k: &str| op.get(k).and_then(Value::as_str);
        (
            text("op").unwrap_or(""),
            text("path").map_or(0, pointer_len),
            text("from").map(pointer_len),
            op.get("value"),
        )
    });
    depth_after(ops, depth)
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
        let depth = value_depth(&content);
        Message::Activity(Activity {
            id,
            activity_type,
            content,
            metadata,
            subagent_run_id,
            depth,
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
