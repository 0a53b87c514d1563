//! The typed live events of the seed's `AgentActivityLiveEvent` contract, as Tether reads and
//! writes them. Values are built only by `validate` (which enforces every rule) or by Tether's
//! own publisher; `to_value` gives the wire form back, field order as the schema lists them.

use serde_json::{Map, Value};

/// The envelope identity every event repeats inside `data`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    pub workspace_id: String,
    pub agent_session_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    RuntimeActivityUpdate,
    MessageDelta,
    TurnUpdate,
    InteractionUpdate,
    InteractionSnapshot,
    SessionAudit,
}

impl EventType {
    pub const ALL: [EventType; 6] = [
        EventType::RuntimeActivityUpdate,
        EventType::MessageDelta,
        EventType::TurnUpdate,
        EventType::InteractionUpdate,
        EventType::InteractionSnapshot,
        EventType::SessionAudit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::RuntimeActivityUpdate => "runtime_activity_update",
            EventType::MessageDelta => "message_delta",
            EventType::TurnUpdate => "turn_update",
            EventType::InteractionUpdate => "interaction_update",
            EventType::InteractionSnapshot => "interaction_snapshot",
            EventType::SessionAudit => "session_audit",
        }
    }

    pub fn parse(s: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// Defines a closed string vocabulary with stable lowercase values.
macro_rules! vocabulary {
    ($name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(s: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }
    };
}

vocabulary!(RuntimeState { Idle => "idle", Running => "running" });
vocabulary!(Phase {
    Submitted => "submitted",
    Running => "running",
    Waiting => "waiting",
    Settling => "settling",
    Settled => "settled",
});
vocabulary!(Outcome {
    Completed => "completed",
    Failed => "failed",
    Canceled => "canceled",
    Interrupted => "interrupted",
});
vocabulary!(InteractionKind { Approval => "approval", Question => "question", Plan => "plan" });
vocabulary!(InteractionStatus {
    Pending => "pending",
    Answered => "answered",
    Superseded => "superseded",
});

impl InteractionStatus {
    /// Answered and superseded requests never change again.
    pub fn is_terminal(self) -> bool {
        !matches!(self, InteractionStatus::Pending)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeUpdate {
    pub identity: Identity,
    pub state: RuntimeState,
    pub occurred_at_unix_ms: u64,
}

/// A message's `content` mutation.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    AppendText(String),
    Set(Value),
}

/// A mutation of a tool call's `payload.output.text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOutput {
    Set(String),
    AppendText { text: String, offset_bytes: u64 },
}

#[derive(Debug, Clone, PartialEq)]
pub struct MessageDelta {
    pub identity: Identity,
    pub message_id: String,
    pub turn_id: String,
    pub role: String,
    pub kind: String,
    pub occurred_at_unix_ms: u64,
    pub content: Option<Content>,
    pub tool_output: Option<ToolOutput>,
    pub payload_set: Option<Map<String, Value>>,
    pub payload_unset: Option<Vec<String>>,
    pub status: Option<String>,
    pub semantics: Option<Map<String, Value>>,
    pub started_at_unix_ms: Option<u64>,
    pub completed_at_unix_ms: Option<u64>,
}

impl MessageDelta {
    /// A delta that only appends tool output: the one kind the publisher coalesces.
    pub fn is_pure_append(&self) -> bool {
        matches!(self.tool_output, Some(ToolOutput::AppendText { .. }))
            && self.content.is_none()
            && self.payload_set.is_none()
            && self.payload_unset.is_none()
            && self.status.is_none()
            && self.semantics.is_none()
            && self.started_at_unix_ms.is_none()
            && self.completed_at_unix_ms.is_none()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TurnError {
    pub message: String,
    pub code: Option<String>,
    pub detail: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub turn_id: String,
    pub agent_session_id: String,
    pub phase: Phase,
    pub outcome: Option<Outcome>,
    pub error: Option<TurnError>,
    pub started_at_unix_ms: u64,
    pub settled_at_unix_ms: Option<u64>,
    pub updated_at_unix_ms: u64,
}

impl Turn {
    pub fn is_settled(&self) -> bool {
        self.phase == Phase::Settled
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TurnUpdate {
    pub identity: Identity,
    pub occurred_at_unix_ms: u64,
    pub active_turn_id: Option<String>,
    pub turn: Turn,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Interaction {
    pub request_id: String,
    pub agent_session_id: String,
    pub turn_id: String,
    pub kind: InteractionKind,
    pub status: InteractionStatus,
    pub tool_name: Option<String>,
    pub input: Option<Map<String, Value>>,
    pub output: Option<Map<String, Value>>,
    pub metadata: Option<Map<String, Value>>,
    pub created_at_unix_ms: u64,
    pub updated_at_unix_ms: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InteractionUpdate {
    pub identity: Identity,
    pub occurred_at_unix_ms: u64,
    pub interaction: Interaction,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InteractionSnapshot {
    pub identity: Identity,
    pub occurred_at_unix_ms: u64,
    pub root_turn_id: String,
    pub interactions: Vec<Interaction>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Audit {
    pub audit_id: String,
    pub role: String,
    pub payload: Map<String, Value>,
    pub version: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SessionAudit {
    pub identity: Identity,
    pub occurred_at_unix_ms: u64,
    pub audit: Audit,
}

/// One validated live event.
#[derive(Debug, Clone, PartialEq)]
pub enum LiveEvent {
    RuntimeActivityUpdate(RuntimeUpdate),
    MessageDelta(MessageDelta),
    TurnUpdate(TurnUpdate),
    InteractionUpdate(InteractionUpdate),
    InteractionSnapshot(InteractionSnapshot),
    SessionAudit(SessionAudit),
}

impl LiveEvent {
    pub fn event_type(&self) -> EventType {
        match self {
            LiveEvent::RuntimeActivityUpdate(_) => EventType::RuntimeActivityUpdate,
            LiveEvent::MessageDelta(_) => EventType::MessageDelta,
            LiveEvent::TurnUpdate(_) => EventType::TurnUpdate,
            LiveEvent::InteractionUpdate(_) => EventType::InteractionUpdate,
            LiveEvent::InteractionSnapshot(_) => EventType::InteractionSnapshot,
            LiveEvent::SessionAudit(_) => EventType::SessionAudit,
        }
    }

    pub fn identity(&self) -> &Identity {
        match self {
            LiveEvent::RuntimeActivityUpdate(e) => &e.identity,
            LiveEvent::MessageDelta(e) => &e.identity,
            LiveEvent::TurnUpdate(e) => &e.identity,
            LiveEvent::InteractionUpdate(e) => &e.identity,
            LiveEvent::InteractionSnapshot(e) => &e.identity,
            LiveEvent::SessionAudit(e) => &e.identity,
        }
    }

    /// The wire form: `{workspaceId, agentSessionId, eventType, data}`.
    pub fn to_value(&self) -> Value {
        let id = self.identity();
        let t = self.event_type().as_str();
        let mut data = ident_map(id, t);
        match self {
            LiveEvent::RuntimeActivityUpdate(e) => {
                data.insert("state".into(), e.state.as_str().into());
                data.insert("occurredAtUnixMs".into(), e.occurred_at_unix_ms.into());
            }
            LiveEvent::MessageDelta(d) => {
                data.remove("eventType");
                delta_fields(d, &mut data);
            }
            LiveEvent::TurnUpdate(e) => {
                data.insert("occurredAtUnixMs".into(), e.occurred_at_unix_ms.into());
                data.insert("activeTurnId".into(), opt_str(&e.active_turn_id));
                data.insert("turn".into(), e.turn.to_value());
            }
            LiveEvent::InteractionUpdate(e) => {
                data.insert("occurredAtUnixMs".into(), e.occurred_at_unix_ms.into());
                data.insert("interaction".into(), e.interaction.to_value());
            }
            LiveEvent::InteractionSnapshot(e) => {
                data.insert("occurredAtUnixMs".into(), e.occurred_at_unix_ms.into());
                data.insert("rootTurnId".into(), e.root_turn_id.clone().into());
                data.insert(
                    "interactions".into(),
                    Value::Array(e.interactions.iter().map(Interaction::to_value).collect()),
                );
            }
            LiveEvent::SessionAudit(e) => {
                data.insert("occurredAtUnixMs".into(), e.occurred_at_unix_ms.into());
                data.insert("audit".into(), e.audit.to_value());
            }
        }
        let mut env = Map::with_capacity(4);
        env.insert("workspaceId".into(), id.workspace_id.clone().into());
        env.insert("agentSessionId".into(), id.agent_session_id.clone().into());
        env.insert("eventType".into(), t.into());
        env.insert("data".into(), Value::Object(data));
        Value::Object(env)
    }

    /// The wire form as compact JSON text.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising a Value built from strings, maps and u64s cannot fail.
        serde_json::to_vec(&self.to_value()).unwrap_or_default()
    }
}

fn ident_map(id: &Identity, event_type: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("workspaceId".into(), id.workspace_id.clone().into());
    m.insert("agentSessionId".into(), id.agent_session_id.clone().into());
    m.insert("eventType".into(), event_type.into());
    m
}

fn opt_str(s: &Option<String>) -> Value {
    s.as_ref().map_or(Value::Null, |s| Value::String(s.clone()))
}

fn opt_map(m: &Option<Map<String, Value>>) -> Value {
    m.as_ref().map_or(Value::Null, |m| Value::Object(m.clone()))
}

fn delta_fields(d: &MessageDelta, data: &mut Map<String, Value>) {
    data.insert("messageId".into(), d.message_id.clone().into());
    data.insert("turnId".into(), d.turn_id.clone().into());
    data.insert("role".into(), d.role.clone().into());
    data.insert("kind".into(), d.kind.clone().into());
    data.insert("occurredAtUnixMs".into(), d.occurred_at_unix_ms.into());
    if let Some(c) = &d.content {
        let mut m = Map::new();
        match c {
            Content::AppendText(t) => {
                m.insert("operation".into(), "append_text".into());
                m.insert("text".into(), t.clone().into());
            }
            Content::Set(v) => {
                m.insert("operation".into(), "set".into());
                m.insert("value".into(), v.clone());
            }
        }
        data.insert("content".into(), Value::Object(m));
    }
    if let Some(o) = &d.tool_output {
        let mut m = Map::new();
        match o {
            ToolOutput::Set(t) => {
                m.insert("operation".into(), "set".into());
                m.insert("text".into(), t.clone().into());
            }
            ToolOutput::AppendText { text, offset_bytes } => {
                m.insert("operation".into(), "append_text".into());
                m.insert("text".into(), text.clone().into());
                m.insert("offsetBytes".into(), (*offset_bytes).into());
            }
        }
        data.insert("toolOutput".into(), Value::Object(m));
    }
    if let Some(s) = &d.payload_set {
        data.insert("payloadSet".into(), Value::Object(s.clone()));
    }
    if let Some(u) = &d.payload_unset {
        data.insert(
            "payloadUnset".into(),
            Value::Array(u.iter().cloned().map(Value::String).collect()),
        );
    }
    if let Some(s) = &d.status {
        data.insert("status".into(), s.clone().into());
    }
    if let Some(s) = &d.semantics {
        data.insert("semantics".into(), Value::Object(s.clone()));
    }
    if let Some(t) = d.started_at_unix_ms {
        data.insert("startedAtUnixMs".into(), t.into());
    }
    if let Some(t) = d.completed_at_unix_ms {
        data.insert("completedAtUnixMs".into(), t.into());
    }
}

impl Turn {
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("turnId".into(), self.turn_id.clone().into());
        m.insert(
            "agentSessionId".into(),
            self.agent_session_id.clone().into(),
        );
        m.insert("phase".into(), self.phase.as_str().into());
        m.insert(
            "outcome".into(),
            self.outcome.map_or(Value::Null, |o| o.as_str().into()),
        );
        m.insert(
            "error".into(),
            self.error.as_ref().map_or(Value::Null, |e| {
                let mut em = Map::new();
                em.insert("message".into(), e.message.clone().into());
                if let Some(c) = &e.code {
                    em.insert("code".into(), c.clone().into());
                }
                em.insert("detail".into(), e.detail.clone());
                Value::Object(em)
            }),
        );
        m.insert("startedAtUnixMs".into(), self.started_at_unix_ms.into());
        m.insert(
            "settledAtUnixMs".into(),
            self.settled_at_unix_ms.map_or(Value::Null, Value::from),
        );
        m.insert("updatedAtUnixMs".into(), self.updated_at_unix_ms.into());
        Value::Object(m)
    }
}

impl Interaction {
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("requestId".into(), self.request_id.clone().into());
        m.insert(
            "agentSessionId".into(),
            self.agent_session_id.clone().into(),
        );
        m.insert("turnId".into(), self.turn_id.clone().into());
        m.insert("kind".into(), self.kind.as_str().into());
        m.insert("status".into(), self.status.as_str().into());
        m.insert("toolName".into(), opt_str(&self.tool_name));
        m.insert("input".into(), opt_map(&self.input));
        m.insert("output".into(), opt_map(&self.output));
        m.insert("metadata".into(), opt_map(&self.metadata));
        m.insert("createdAtUnixMs".into(), self.created_at_unix_ms.into());
        m.insert("updatedAtUnixMs".into(), self.updated_at_unix_ms.into());
        Value::Object(m)
    }
}

impl Audit {
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("auditId".into(), self.audit_id.clone().into());
        m.insert("role".into(), self.role.clone().into());
        m.insert("payload".into(), Value::Object(self.payload.clone()));
        m.insert("version".into(), self.version.into());
        Value::Object(m)
    }
}
