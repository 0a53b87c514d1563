//! The hot path: an ACTIVITY_DELTA parsed straight from its JSON text into borrowed fields,
//! without building a `serde_json::Value` for the envelope or the operations.
//!
//! It only ever handles the clean, common case. Anything else (another event type, an unknown
//! or null member, a wrong type, a patch that is malformed or does not apply, a missing target,
//! an attribution mismatch) makes it decline before touching the store, and the general path
//! in `store` handles the event and gives the precise error or warning.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::patch::{parse_ops, run, Field, Mode, OpSource, ValueDoc};

/// `Some` for a present member: unlike `Option`'s own impl, `null` is not taken as absent.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FastDelta<'a> {
    #[serde(rename = "type", borrow)]
    pub ty: Cow<'a, str>,
    #[serde(default, deserialize_with = "present")]
    pub timestamp: Option<i64>,
    #[serde(rename = "messageId", borrow)]
    pub message_id: Cow<'a, str>,
    #[serde(rename = "activityType", borrow)]
    pub activity_type: Cow<'a, str>,
    #[serde(rename = "subagentRunId", default, deserialize_with = "present")]
    pub subagent_run_id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(borrow)]
    pub patch: Vec<FastOp<'a>>,
}

/// One operation; members it does not name are ignored here, as AG-UI mode keeps them.
#[derive(Deserialize)]
pub struct FastOp<'a> {
    #[serde(borrow)]
    pub op: Cow<'a, str>,
    #[serde(borrow)]
    pub path: Cow<'a, str>,
    #[serde(default, deserialize_with = "present", borrow)]
    pub from: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "present")]
    pub value: Option<Value>,
}

impl<'p, 'a> OpSource for &'p FastOp<'a> {
    type Lit = &'p Value;
    type Fault = std::convert::Infallible;

    fn is_object(&self) -> Result<bool, Self::Fault> {
        Ok(true)
    }

    fn text(&self, name: &str) -> Result<Field<'_>, Self::Fault> {
        Ok(match name {
            "op" => Field::Str(Cow::Borrowed(&self.op)),
            "path" => Field::Str(Cow::Borrowed(&self.path)),
            "from" => match &self.from {
                Some(f) => Field::Str(Cow::Borrowed(f)),
                None => Field::Absent,
            },
            _ => Field::Absent,
        })
    }

    fn literal(&self, name: &str) -> Result<Option<Self::Lit>, Self::Fault> {
        Ok(if name == "value" {
            self.value.as_ref()
        } else {
            None
        })
    }
}

const MAX_SAFE: i64 = 9_007_199_254_740_991;

/// Parses the text as a clean ACTIVITY_DELTA, or `None` when it is anything else.
pub fn parse(text: &[u8]) -> Option<FastDelta<'_>> {
    let d: FastDelta<'_> = serde_json::from_slice(text).ok()?;
    if d.ty != "ACTIVITY_DELTA"
        || d.timestamp
            .is_some_and(|t| t.unsigned_abs() > MAX_SAFE as u64)
    {
        return None;
    }
    Some(d)
}

/// Applies the delta's patch to `content` in AG-UI mode, atomically. `false` (content
/// untouched) when the patch is malformed, drops an operation, does not apply, or would leave
/// something other than an object.
pub fn apply(content: &mut Value, ops: &[FastOp<'_>]) -> bool {
    let mut warnings = Vec::new();
    let Ok(parsed) = parse_ops(ops.iter(), Mode::AgUi, &mut warnings) else {
        return false;
    };
    if !warnings.is_empty() {
        return false;
    }
    let root = parsed.iter().any(|op| op.path.is_root());
    let backup = if root { Some(content.clone()) } else { None };
    if run(&mut ValueDoc::new(content), &parsed, true).is_err() {
        return false;
    }
    if !content.is_object() {
        if let Some(b) = backup {
            *content = b;
        }
        return false;
    }
    true
}
