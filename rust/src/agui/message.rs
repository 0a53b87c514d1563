//! The messages a store holds, and their wire (camelCase JSON) form.

use serde_json::{Map, Value};

/// The deepest activity content the store holds. Deltas can nest content without limit (each
/// one adds at the deepest point), and content that deep would overflow the native stack when
/// it is copied, converted or dropped; a delta that could go deeper is skipped with a warning.
pub const MAX_CONTENT_DEPTH: usize = 512;

/// How heavy (see [`measure`]) deltas may make an activity's content: this, or twice its weight
/// at its last snapshot when that is more. `copy` doubles content with a few bytes of input, so
/// without a bound a handful of deltas would exhaust memory; a delta that could go past it is
/// skipped with a warning.
pub const MAX_CONTENT_WEIGHT: usize = 64 << 20;

/// One activity message: content is always an object.
#[derive(Debug, Clone, PartialEq)]
pub struct Activity {
    pub id: String,
    pub activity_type: String,
    pub content: Value,
    pub metadata: Option<Map<String, Value>>,
    pub subagent_run_id: Option<String>,
    /// Upper bounds of `content`'s depth and weight (see [`measure`]), kept by the store.
    pub depth: usize,
    pub weight: usize,
    /// The weight deltas may take `content` to (see [`MAX_CONTENT_WEIGHT`]).
    pub weight_limit: usize,
}

impl Activity {
    /// A new activity message, measured.
    pub fn new(
        id: String,
        activity_type: String,
        content: Value,
        metadata: Option<Map<String, Value>>,
        subagent_run_id: Option<String>,
    ) -> Self {
        let mut a = Activity {
            id,
            activity_type,
            content: Value::Null,
            metadata,
            subagent_run_id,
            depth: 0,
            weight: 0,
            weight_limit: 0,
        };
        a.set_content(content);
        a
    }

    /// Replaces the content as a snapshot does: measured, and the weight limit set from it.
    pub fn set_content(&mut self, content: Value) {
        (self.depth, self.weight) = measure(&content);
        self.weight_limit = MAX_CONTENT_WEIGHT.max(self.weight.saturating_mul(2));
        self.content = content;
    }

    /// Measures the content again, tightening the bounds that deltas only ever raise.
    pub fn remeasure(&mut self) {
        (self.depth, self.weight) = measure(&self.content);
    }
}

/// The nesting depth of a value (0 for a scalar, 1 for `{}` or `[]`, one more per level) and
/// its weight (1 per value, plus the bytes of every string and member name: about the size of
/// its JSON text). Iterative, so any depth is measured without recursion.
pub fn measure(v: &Value) -> (usize, usize) {
    let (mut depth, mut weight) = (0, 0);
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        weight += 1;
        match v {
            Value::Array(a) => {
                depth = depth.max(d);
                stack.extend(a.iter().map(|x| (x, d + 1)));
            }
            Value::Object(m) => {
                depth = depth.max(d);
                for (k, x) in m {
                    weight += k.len();
                    stack.push((x, d + 1));
                }
            }
            Value::String(s) => weight += s.len(),
            _ => {}
        }
    }
    (depth, weight)
}

/// One patch operation as far as growth is concerned: `op`, `path`, `from` and `value`.
pub type GrowthOp<'a> = (&'a str, &'a str, Option<&'a str>, Option<&'a Value>);

/// The number of reference tokens in pointer text (escapes never contain `/`).
fn pointer_len(pointer: &str) -> usize {
    pointer.bytes().filter(|b| *b == b'/').count()
}

/// Upper bounds of the content's depth and weight after these operations, given bounds before:
/// an add or replace nests its value under its path and adds its weight; a copy nests what sits
/// at `from` (at most `depth` minus the tokens of `from`) under its path and adds its weight; a
/// move nests likewise and only adds its new member name.
///
/// `source` may give the weight of what sits at a `from` pointer before the first operation;
/// what sits there later is at most that plus everything added since. Without it, a copy is
/// taken to copy the whole document.
pub fn growth<'a>(
    ops: impl IntoIterator<Item = GrowthOp<'a>>,
    mut depth: usize,
    mut weight: usize,
    source: Option<&Value>,
) -> (usize, usize) {
    let start = weight;
    for (op, path, from, value) in ops {
        let (nest, add) = match op {
            "add" | "replace" => {
                let (d, w) = value.map_or((0, 0), measure);
                (pointer_len(path) + d, path.len() + w)
            }
            "copy" | "move" => {
                let below = depth.saturating_sub(from.map_or(0, pointer_len));
                let copied = match (op, source.zip(from).and_then(|(doc, f)| doc.pointer(f))) {
                    ("move", _) => 0,
                    (_, Some(node)) => measure(node).1.saturating_add(weight - start).min(weight),
                    (_, None) => weight,
                };
                (pointer_len(path) + below, path.len().saturating_add(copied))
            }
            _ => (0, 0),
        };
        depth = depth.max(nest);
        weight = weight.saturating_add(add);
    }
    (depth, weight)
}

/// [`growth`] for a patch given as a JSON value (members of the wrong type count as absent;
/// such a patch is malformed and never applied).
pub fn patch_growth(
    patch: &Value,
    depth: usize,
    weight: usize,
    source: Option<&Value>,
) -> (usize, usize) {
    let ops = patch.as_array().into_iter().flatten().map(|op| {
        let text = |k: &str| op.get(k).and_then(Value::as_str);
        (
            text("op").unwrap_or(""),
            text("path").unwrap_or(""),
            text("from"),
            op.get("value"),
        )
    });
    growth(ops, depth, weight, source)
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
        Message::Activity(Activity::new(
            id,
            activity_type,
            content,
            metadata,
            subagent_run_id,
        ))
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
