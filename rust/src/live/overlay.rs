//! The consumer's optimistic overlay of one agent session, and its reconciliation with the
//! canonical record.
//!
//! Rules, all here:
//! - A tool-output `append_text` applies only when its `offsetBytes` equals the byte length of
//!   the message's `payload.output.text`. Otherwise nothing of that delta applies and the message
//!   is marked as needing reconciliation with the reason: `offset_mismatch`,
//!   `append_without_anchor` (no text to append to: its `set` was never seen),
//!   `late_after_terminal` (the message is terminal or its turn settled) or
//!   `identity_mismatch` (another workspace/session, or a known message's turn, role or kind
//!   differs). A content `append_text` needs string content to append to in the same way.
//! - A delta applies in this order: `payloadUnset`, `payloadSet` (top-level payload keys),
//!   `toolOutput`, `content`, `status`, `semantics`, the timestamps.
//! - A message is terminal once it has `completedAtUnixMs` or a terminal status (completed,
//!   failed, canceled, interrupted); a turn once settled; an interaction once answered or
//!   superseded. Nothing changes a terminal entry except the canonical record.
//! - An audit keeps its highest version; an interaction snapshot replaces the collection.
//! - A discontinuity marks each key it names `late_after_terminal`.
//! - `reconcile` replaces the optimistic state with the canonical record and clears the marks,
//!   then applies the deliveries of frames later than the record (the subscriber kept them);
//!   the exception: an explicitly terminal optimistic entry stands (with its mark, if any) until
//!   the canonical entry is terminal too.
//!
//! The first mark of an entry is kept until reconciliation. Single owner; pure.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::live::error::{Code, LiveError};
use crate::live::event::*;
use crate::live::frame::{Delivery, KeyKind, ReconcileKey};
use crate::live::validate::{
    at, audit, closed, integer, interaction, non_empty, object, one_of, opt_at, string, turn,
    turn_consistency, R,
};

/// Statuses after which a message never changes.
pub const TERMINAL_STATUSES: &[&str] = &["completed", "failed", "canceled", "interrupted"];

/// Why an entry needs reconciliation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    OffsetMismatch,
    AppendWithoutAnchor,
    LateAfterTerminal,
    IdentityMismatch,
}

impl Reason {
    pub const ALL: &'static [Reason] = &[
        Reason::OffsetMismatch,
        Reason::AppendWithoutAnchor,
        Reason::LateAfterTerminal,
        Reason::IdentityMismatch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::OffsetMismatch => "offset_mismatch",
            Reason::AppendWithoutAnchor => "append_without_anchor",
            Reason::LateAfterTerminal => "late_after_terminal",
            Reason::IdentityMismatch => "identity_mismatch",
        }
    }
}

/// What applying one event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Applied,
    /// Nothing to change (an older audit version, a repeat of a terminal entry).
    Unchanged,
    Marked(Reason),
}

/// One message as the overlay and the canonical record hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageState {
    pub turn_id: String,
    pub role: String,
    pub kind: String,
    pub content: Option<Value>,
    pub payload: Map<String, Value>,
    pub status: Option<String>,
    pub semantics: Option<Map<String, Value>>,
    pub started_at_unix_ms: Option<u64>,
    pub completed_at_unix_ms: Option<u64>,
}

impl MessageState {
    fn new(turn_id: &str, role: &str, kind: &str) -> Self {
        MessageState {
            turn_id: turn_id.to_owned(),
            role: role.to_owned(),
            kind: kind.to_owned(),
            content: None,
            payload: Map::new(),
            status: None,
            semantics: None,
            started_at_unix_ms: None,
            completed_at_unix_ms: None,
        }
    }

    pub fn is_terminal(&self) -> bool {
        self.completed_at_unix_ms.is_some()
            || self
                .status
                .as_deref()
                .is_some_and(|s| TERMINAL_STATUSES.contains(&s))
    }

    /// `payload.output.text`, the anchor of tool-output appends.
    pub fn output_text(&self) -> Option<&str> {
        output_text_of(self.payload.get("output"))
    }

    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("turnId".into(), self.turn_id.clone().into());
        m.insert("role".into(), self.role.clone().into());
        m.insert("kind".into(), self.kind.clone().into());
        if let Some(c) = &self.content {
            m.insert("content".into(), c.clone());
        }
        m.insert("payload".into(), Value::Object(self.payload.clone()));
        if let Some(s) = &self.status {
            m.insert("status".into(), s.clone().into());
        }
        if let Some(s) = &self.semantics {
            m.insert("semantics".into(), Value::Object(s.clone()));
        }
        if let Some(t) = self.started_at_unix_ms {
            m.insert("startedAtUnixMs".into(), t.into());
        }
        if let Some(t) = self.completed_at_unix_ms {
            m.insert("completedAtUnixMs".into(), t.into());
        }
        Value::Object(m)
    }
}

fn output_text_of(output: Option<&Value>) -> Option<&str> {
    output?.as_object()?.get("text")?.as_str()
}

/// The session state both sides agree on: the overlay's view and the canonical record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionState {
    pub runtime: Option<RuntimeState>,
    pub turns: BTreeMap<String, Turn>,
    pub messages: BTreeMap<String, MessageState>,
    pub interactions: BTreeMap<String, Interaction>,
    pub audits: BTreeMap<String, Audit>,
}

/// One session's optimistic overlay. Single owner.
#[derive(Debug, Clone)]
pub struct Overlay {
    identity: Identity,
    state: SessionState,
    marks: BTreeMap<(KeyKind, String), Reason>,
    applied: u64,
}

impl Overlay {
    pub fn new(identity: Identity) -> Self {
        Overlay {
            identity,
            state: SessionState::default(),
            marks: BTreeMap::new(),
            applied: 0,
        }
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }
    pub fn state(&self) -> &SessionState {
        &self.state
    }
    /// Every entry that needs reconciliation, and why.
    pub fn marks(&self) -> &BTreeMap<(KeyKind, String), Reason> {
        &self.marks
    }
    pub fn needs_reconciliation(&self) -> bool {
        !self.marks.is_empty()
    }
    /// Events applied so far (marked or not).
    pub fn events_applied(&self) -> u64 {
        self.applied
    }

    fn mark(&mut self, kind: KeyKind, id: &str, reason: Reason) -> Applied {
        self.marks.entry((kind, id.to_owned())).or_insert(reason);
        Applied::Marked(reason)
    }

    /// Applies one delivery: an event, or a discontinuity (which marks its keys).
    pub fn apply_delivery(&mut self, d: &Delivery) -> Vec<Applied> {
        match d {
            Delivery::Event(e) => vec![self.apply(e)],
            Delivery::Discontinuity(disc) => disc.keys.iter().map(|k| self.mark_key(k)).collect(),
        }
    }

    fn mark_key(&mut self, k: &ReconcileKey) -> Applied {
        let reason = if k.identity == self.identity {
            Reason::LateAfterTerminal
        } else {
            Reason::IdentityMismatch
        };
        self.mark(k.kind, &k.id, reason)
    }

    pub fn apply(&mut self, event: &LiveEvent) -> Applied {
        self.applied += 1;
        let foreign = event.identity() != &self.identity;
        match event {
            LiveEvent::MessageDelta(d) => {
                if foreign {
                    return self.mark(KeyKind::Message, &d.message_id, Reason::IdentityMismatch);
                }
                self.apply_delta(d)
            }
            LiveEvent::TurnUpdate(u) => {
                if foreign {
                    return self.mark(KeyKind::Turn, &u.turn.turn_id, Reason::IdentityMismatch);
                }
                match self.state.turns.get(&u.turn.turn_id) {
                    Some(old) if old.is_settled() => {
                        if old == &u.turn {
                            Applied::Unchanged
                        } else {
                            self.mark(KeyKind::Turn, &u.turn.turn_id, Reason::LateAfterTerminal)
                        }
                    }
                    _ => {
                        self.state
                            .turns
                            .insert(u.turn.turn_id.clone(), u.turn.clone());
                        Applied::Applied
                    }
                }
            }
            LiveEvent::InteractionUpdate(u) => {
                if foreign {
                    return self.mark(
                        KeyKind::Interaction,
                        &u.interaction.request_id,
                        Reason::IdentityMismatch,
                    );
                }
                self.apply_interaction(&u.interaction)
            }
            LiveEvent::InteractionSnapshot(s) => {
                if foreign {
                    return self.mark(
                        KeyKind::Interaction,
                        &s.root_turn_id,
                        Reason::IdentityMismatch,
                    );
                }
                let mut next: BTreeMap<String, Interaction> = BTreeMap::new();
                let mut late = Vec::new();
                for x in &s.interactions {
                    match self.state.interactions.get(&x.request_id) {
                        Some(old) if old.status.is_terminal() && old != x => {
                            next.insert(x.request_id.clone(), old.clone());
                            late.push(x.request_id.clone());
                        }
                        _ => {
                            next.insert(x.request_id.clone(), x.clone());
                        }
                    }
                }
                self.state.interactions = next;
                let mut result = Applied::Applied;
                for id in late {
                    result = self.mark(KeyKind::Interaction, &id, Reason::LateAfterTerminal);
                }
                result
            }
            LiveEvent::RuntimeActivityUpdate(r) => {
                if foreign {
                    return Applied::Marked(Reason::IdentityMismatch);
                }
                self.state.runtime = Some(r.state);
                Applied::Applied
            }
            LiveEvent::SessionAudit(a) => {
                if foreign {
                    return Applied::Marked(Reason::IdentityMismatch);
                }
                match self.state.audits.get(&a.audit.audit_id) {
                    Some(old) if old.version > a.audit.version => Applied::Unchanged,
                    _ => {
                        self.state
                            .audits
                            .insert(a.audit.audit_id.clone(), a.audit.clone());
                        Applied::Applied
                    }
                }
            }
        }
    }

    fn apply_interaction(&mut self, x: &Interaction) -> Applied {
        match self.state.interactions.get(&x.request_id) {
            Some(old) if old.status.is_terminal() => {
                if old == x {
                    Applied::Unchanged
                } else {
                    self.mark(
                        KeyKind::Interaction,
                        &x.request_id,
                        Reason::LateAfterTerminal,
                    )
                }
            }
            _ => {
                self.state
                    .interactions
                    .insert(x.request_id.clone(), x.clone());
                Applied::Applied
            }
        }
    }

    fn apply_delta(&mut self, d: &MessageDelta) -> Applied {
        let turn_settled = self
            .state
            .turns
            .get(&d.turn_id)
            .is_some_and(Turn::is_settled);
        let existed = self.state.messages.contains_key(&d.message_id);
        let msg = self
            .state
            .messages
            .entry(d.message_id.clone())
            .or_insert_with(|| MessageState::new(&d.turn_id, &d.role, &d.kind));
        let reason = if msg.turn_id != d.turn_id || msg.role != d.role || msg.kind != d.kind {
            Some(Reason::IdentityMismatch)
        } else if msg.is_terminal() || turn_settled {
            Some(Reason::LateAfterTerminal)
        } else {
            check_anchors(msg, d)
        };
        if let Some(r) = reason {
            if !existed {
                // Nothing of a refused delta applies: not even the message it would open.
                self.state.messages.remove(&d.message_id);
            }
            return self.mark(KeyKind::Message, &d.message_id, r);
        }
        if let Some(keys) = &d.payload_unset {
            for k in keys {
                msg.payload.remove(k);
            }
        }
        if let Some(set) = &d.payload_set {
            for (k, v) in set {
                msg.payload.insert(k.clone(), v.clone());
            }
        }
        match &d.tool_output {
            Some(ToolOutput::Set(t)) => match msg.payload.get_mut("output") {
                Some(Value::Object(o)) => {
                    o.insert("text".into(), t.clone().into());
                }
                _ => {
                    let mut o = Map::new();
                    o.insert("text".into(), t.clone().into());
                    msg.payload.insert("output".into(), Value::Object(o));
                }
            },
            Some(ToolOutput::AppendText { text, .. }) => {
                if let Some(Value::String(s)) = msg
                    .payload
                    .get_mut("output")
                    .and_then(|o| o.as_object_mut())
                    .and_then(|o| o.get_mut("text"))
                {
                    s.push_str(text);
                }
            }
            None => {}
        }
        match &d.content {
            Some(Content::Set(v)) => msg.content = Some(v.clone()),
            Some(Content::AppendText(t)) => {
                if let Some(Value::String(s)) = &mut msg.content {
                    s.push_str(t);
                }
            }
            None => {}
        }
        if let Some(s) = &d.status {
            msg.status = Some(s.clone());
        }
        if let Some(s) = &d.semantics {
            msg.semantics = Some(s.clone());
        }
        if let Some(t) = d.started_at_unix_ms {
            msg.started_at_unix_ms = Some(t);
        }
        if let Some(t) = d.completed_at_unix_ms {
            msg.completed_at_unix_ms = Some(t);
        }
        Applied::Applied
    }

    /// Replaces the optimistic state with the canonical record, applies `replay` (the
    /// deliveries of frames later than the record, `Subscriber::resync`'s answer) on top, then
    /// lets each explicitly terminal optimistic entry stand where the result is not terminal.
    /// Returns the keys of the entries that stood.
    pub fn reconcile(
        &mut self,
        record: SessionState,
        replay: &[Delivery],
    ) -> Vec<(KeyKind, String)> {
        let before = std::mem::replace(&mut self.state, record);
        let old_marks = std::mem::take(&mut self.marks);
        for d in replay {
            self.apply_delivery(d);
        }
        let mut kept = Vec::new();
        for (id, m) in before.messages {
            if m.is_terminal()
                && !self
                    .state
                    .messages
                    .get(&id)
                    .is_some_and(MessageState::is_terminal)
            {
                kept.push((KeyKind::Message, id.clone()));
                self.state.messages.insert(id, m);
            }
        }
        for (id, t) in before.turns {
            if t.is_settled() && !self.state.turns.get(&id).is_some_and(Turn::is_settled) {
                kept.push((KeyKind::Turn, id.clone()));
                self.state.turns.insert(id, t);
            }
        }
        for (id, x) in before.interactions {
            if x.status.is_terminal()
                && !self
                    .state
                    .interactions
                    .get(&id)
                    .is_some_and(|c| c.status.is_terminal())
            {
                kept.push((KeyKind::Interaction, id.clone()));
                self.state.interactions.insert(id, x);
            }
        }
        for k in &kept {
            match old_marks.get(k) {
                Some(r) => {
                    self.marks.insert(k.clone(), *r);
                }
                None => {
                    self.marks.remove(k);
                }
            }
        }
        kept
    }

    /// The overlay in the canonical record's form.
    pub fn snapshot(&self) -> Value {
        record_value(&self.identity, &self.state)
    }
}

/// Can this delta apply to this message? (Checked before anything changes.)
fn check_anchors(msg: &MessageState, d: &MessageDelta) -> Option<Reason> {
    if let Some(ToolOutput::AppendText { offset_bytes, .. }) = &d.tool_output {
        // The anchor as it will be once this delta's payload changes are applied.
        let output = match &d.payload_set {
            Some(set) if set.contains_key("output") => set.get("output"),
            _ if d
                .payload_unset
                .as_ref()
                .is_some_and(|u| u.iter().any(|k| k == "output")) =>
            {
                None
            }
            _ => msg.payload.get("output"),
        };
        match output_text_of(output) {
            None => return Some(Reason::AppendWithoutAnchor),
            Some(t) if t.len() as u64 != *offset_bytes => return Some(Reason::OffsetMismatch),
            Some(_) => {}
        }
    }
    if let Some(Content::AppendText(_)) = &d.content {
        if !matches!(msg.content, Some(Value::String(_))) {
            return Some(Reason::AppendWithoutAnchor);
        }
    }
    None
}

/// The record form: `{workspaceId, agentSessionId, runtime, turns, messages, interactions,
/// audits}`, each collection an object keyed by id.
pub fn record_value(identity: &Identity, s: &SessionState) -> Value {
    let mut m = Map::new();
    m.insert("workspaceId".into(), identity.workspace_id.clone().into());
    m.insert(
        "agentSessionId".into(),
        identity.agent_session_id.clone().into(),
    );
    m.insert(
        "runtime".into(),
        s.runtime.map_or(Value::Null, |r| {
            let mut o = Map::new();
            o.insert("state".into(), r.as_str().into());
            Value::Object(o)
        }),
    );
    let coll = |it: Vec<(String, Value)>| Value::Object(it.into_iter().collect());
    m.insert(
        "turns".into(),
        coll(
            s.turns
                .iter()
                .map(|(k, v)| (k.clone(), v.to_value()))
                .collect(),
        ),
    );
    m.insert(
        "messages".into(),
        coll(
            s.messages
                .iter()
                .map(|(k, v)| (k.clone(), v.to_value()))
                .collect(),
        ),
    );
    m.insert(
        "interactions".into(),
        coll(
            s.interactions
                .iter()
                .map(|(k, v)| (k.clone(), v.to_value()))
                .collect(),
        ),
    );
    m.insert(
        "audits".into(),
        coll(
            s.audits
                .iter()
                .map(|(k, v)| (k.clone(), v.to_value()))
                .collect(),
        ),
    );
    Value::Object(m)
}

/// Reads a canonical record (the form `record_value` writes), checking every entry by the
/// event rules and that each collection's keys are their entries' ids.
pub fn parse_record(v: &Value) -> R<(Identity, SessionState)> {
    let m = object(v)?;
    closed(
        m,
        &[
            "workspaceId",
            "agentSessionId",
            "runtime",
            "turns",
            "messages",
            "interactions",
            "audits",
        ],
        &[],
    )?;
    let identity = Identity {
        workspace_id: at(m, "workspaceId", non_empty)?,
        agent_session_id: at(m, "agentSessionId", non_empty)?,
    };
    let session = identity.agent_session_id.clone();
    let runtime = at(m, "runtime", |v| {
        if v.is_null() {
            return Ok(None);
        }
        let r = object(v)?;
        closed(r, &["state"], &[])?;
        at(
            r,
            "state",
            one_of(RuntimeState::parse, RuntimeState::ALL, RuntimeState::as_str),
        )
        .map(Some)
    })?;
    let key_mismatch = |what: &str| {
        LiveError::new(
            Code::IdentityMismatch,
            "",
            format!("the entry's {what} differs from its key"),
        )
    };
    let turns = at(m, "turns", |v| {
        collection(v, |id, e| {
            let t = turn(e)?;
            if t.turn_id != id {
                return Err(key_mismatch("turnId").under("turnId"));
            }
            if t.agent_session_id != session {
                return Err(LiveError::new(
                    Code::IdentityMismatch,
                    "/agentSessionId",
                    "the turn belongs to another session",
                ));
            }
            turn_consistency(&t)?;
            Ok(t)
        })
    })?;
    let messages = at(m, "messages", |v| collection(v, |_, e| message_record(e)))?;
    let interactions = at(m, "interactions", |v| {
        collection(v, |id, e| {
            let x = interaction(e)?;
            if x.request_id != id {
                return Err(key_mismatch("requestId").under("requestId"));
            }
            if x.agent_session_id != session {
                return Err(LiveError::new(
                    Code::IdentityMismatch,
                    "/agentSessionId",
                    "the interaction belongs to another session",
                ));
            }
            Ok(x)
        })
    })?;
    let audits = at(m, "audits", |v| {
        collection(v, |id, e| {
            let a = audit(e)?;
            if a.audit_id != id {
                return Err(key_mismatch("auditId").under("auditId"));
            }
            Ok(a)
        })
    })?;
    Ok((
        identity,
        SessionState {
            runtime,
            turns,
            messages,
            interactions,
            audits,
        },
    ))
}

fn collection<T>(v: &Value, f: impl Fn(&str, &Value) -> R<T>) -> R<BTreeMap<String, T>> {
    let m = object(v)?;
    m.iter()
        .map(|(k, e)| {
            if k.is_empty() {
                return Err(LiveError::new(
                    Code::EmptyPropertyName,
                    "/",
                    "ids must not be empty",
                ));
            }
            f(k, e).map(|t| (k.clone(), t)).map_err(|e| e.under(k))
        })
        .collect()
}

fn message_record(v: &Value) -> R<MessageState> {
    let m = object(v)?;
    closed(
        m,
        &["turnId", "role", "kind", "payload"],
        &[
            "content",
            "status",
            "semantics",
            "startedAtUnixMs",
            "completedAtUnixMs",
        ],
    )?;
    Ok(MessageState {
        turn_id: at(m, "turnId", non_empty)?,
        role: at(m, "role", non_empty)?,
        kind: at(m, "kind", non_empty)?,
        content: m.get("content").cloned(),
        payload: at(m, "payload", |v| object(v).cloned())?,
        status: opt_at(m, "status", string)?,
        semantics: opt_at(m, "semantics", |v| object(v).cloned())?,
        started_at_unix_ms: opt_at(m, "startedAtUnixMs", |v| integer(v, 0))?,
        completed_at_unix_ms: opt_at(m, "completedAtUnixMs", |v| integer(v, 0))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::framer::{FramerConfig, Publisher};

    fn ident() -> Identity {
        Identity {
            workspace_id: "ws".into(),
            agent_session_id: "s".into(),
        }
    }

    fn append(text: &str, offset: u64) -> LiveEvent {
        let mut d = delta("m");
        d.tool_output = Some(ToolOutput::AppendText {
            text: text.into(),
            offset_bytes: offset,
        });
        LiveEvent::MessageDelta(d)
    }

    fn delta(id: &str) -> MessageDelta {
        MessageDelta {
            identity: ident(),
            message_id: id.into(),
            turn_id: "t".into(),
            role: "tool".into(),
            kind: "tool_call".into(),
            occurred_at_unix_ms: 1,
            content: None,
            tool_output: None,
            payload_set: None,
            payload_unset: None,
            status: None,
            semantics: None,
            started_at_unix_ms: None,
            completed_at_unix_ms: None,
        }
    }

    fn set(text: &str) -> LiveEvent {
        let mut d = delta("m");
        d.tool_output = Some(ToolOutput::Set(text.into()));
        LiveEvent::MessageDelta(d)
    }

    fn text(o: &Overlay) -> Option<String> {
        o.state()
            .messages
            .get("m")?
            .output_text()
            .map(str::to_owned)
    }

    #[test]
    fn appends_apply_only_at_their_offset() {
        let mut o = Overlay::new(ident());
        assert_eq!(o.apply(&set("hé")), Applied::Applied);
        assert_eq!(o.apply(&append("llo", 3)), Applied::Applied);
        assert_eq!(text(&o).as_deref(), Some("héllo"));
        assert_eq!(
            o.apply(&append("!", 2)),
            Applied::Marked(Reason::OffsetMismatch)
        );
        assert_eq!(text(&o).as_deref(), Some("héllo"));
        // The first mark stays.
        o.apply(&LiveEvent::MessageDelta(MessageDelta {
            turn_id: "other".into(),
            ..delta("m")
        }));
        assert_eq!(
            o.marks().get(&(KeyKind::Message, "m".into())),
            Some(&Reason::OffsetMismatch)
        );
    }

    #[test]
    fn every_reason() {
        let mut o = Overlay::new(ident());
        assert_eq!(
            o.apply(&append("x", 0)),
            Applied::Marked(Reason::AppendWithoutAnchor)
        );
        // Nothing of it applies: not even an empty message under its id.
        assert!(o.state().messages.is_empty());
        let mut o = Overlay::new(ident());
        o.apply(&set(""));
        let mut done = delta("m");
        done.status = Some("completed".into());
        o.apply(&LiveEvent::MessageDelta(done));
        assert_eq!(
            o.apply(&append("x", 0)),
            Applied::Marked(Reason::LateAfterTerminal)
        );
        let mut o = Overlay::new(ident());
        let mut foreign = delta("m");
        foreign.identity.agent_session_id = "other".into();
        foreign.tool_output = Some(ToolOutput::Set("x".into()));
        assert_eq!(
            o.apply(&LiveEvent::MessageDelta(foreign)),
            Applied::Marked(Reason::IdentityMismatch)
        );
        assert!(o.state().messages.is_empty());
    }

    #[test]
    fn payload_set_and_unset() {
        let mut o = Overlay::new(ident());
        let mut d = delta("m");
        d.payload_set = Some(
            serde_json::json!({"a": 1, "b": {"c": 2}})
                .as_object()
                .unwrap()
                .clone(),
        );
        o.apply(&LiveEvent::MessageDelta(d));
        let mut d = delta("m");
        d.payload_unset = Some(vec!["a".into()]);
        d.payload_set = Some(serde_json::json!({"d": 3}).as_object().unwrap().clone());
        o.apply(&LiveEvent::MessageDelta(d));
        assert_eq!(
            Value::Object(o.state().messages["m"].payload.clone()),
            serde_json::json!({"b": {"c": 2}, "d": 3})
        );
    }

    #[test]
    fn terminal_optimistic_entry_stands_until_canonical_is_terminal() {
        let mut o = Overlay::new(ident());
        o.apply(&set("abc"));
        let mut done = delta("m");
        done.completed_at_unix_ms = Some(9);
        o.apply(&LiveEvent::MessageDelta(done));
        // The canonical record lags: the message still running there.
        let mut lagging = SessionState::default();
        let mut running = MessageState::new("t", "tool", "tool_call");
        running
            .payload
            .insert("output".into(), serde_json::json!({"text": "ab"}));
        lagging.messages.insert("m".into(), running.clone());
        let kept = o.reconcile(lagging, &[]);
        assert_eq!(kept, vec![(KeyKind::Message, "m".to_string())]);
        assert_eq!(text(&o).as_deref(), Some("abc"));
        // Once canonical is terminal, it wins.
        let mut caught_up = SessionState::default();
        running.completed_at_unix_ms = Some(10);
        caught_up.messages.insert("m".into(), running);
        assert!(o.reconcile(caught_up, &[]).is_empty());
        assert_eq!(text(&o).as_deref(), Some("ab"));
        assert_eq!(o.state().messages["m"].completed_at_unix_ms, Some(10));
    }

    #[test]
    fn reconcile_replaces_marks_and_state() {
        let mut o = Overlay::new(ident());
        o.apply(&append("x", 5));
        assert!(o.needs_reconciliation());
        let mut rec = SessionState::default();
        let mut m = MessageState::new("t", "tool", "tool_call");
        m.payload
            .insert("output".into(), serde_json::json!({"text": "hello"}));
        rec.messages.insert("m".into(), m);
        o.reconcile(rec.clone(), &[]);
        assert!(!o.needs_reconciliation());
        assert_eq!(o.apply(&append("!", 5)), Applied::Applied);
        // The snapshot reads back as a record.
        let (id, state) = parse_record(&o.snapshot()).unwrap();
        assert_eq!(id, ident());
        assert_eq!(state, o.state().clone());
    }

    #[test]
    fn a_publishers_frames_rebuild_its_trace() {
        let mut p = Publisher::new(ident(), 1, FramerConfig::default()).unwrap();
        let mut o = Overlay::new(ident());
        let whole: String = "ünïcödé 😀 line\n".repeat(60_000);
        let mut start = 0;
        while start < whole.len() {
            let end = crate::live::framer::floor_boundary(&whole, start + 7919);
            p.tool_output("m", "t", &whole[start..end], 5).unwrap();
            start = end;
        }
        while let Some(f) = p.poll_frame() {
            let f = crate::live::frame::parse_frame(&f.to_json()).unwrap();
            for d in &f.deliveries {
                for a in o.apply_delivery(d) {
                    assert_eq!(a, Applied::Applied);
                }
            }
        }
        let out = text(&o).unwrap();
        assert!(out.len() <= 1 << 20);
        assert!(out.ends_with(crate::live::framer::DEFAULT_TRUNCATION_MARKER));
        assert!(whole.starts_with(
            out.strip_suffix(crate::live::framer::DEFAULT_TRUNCATION_MARKER)
                .unwrap()
        ));
    }
}
