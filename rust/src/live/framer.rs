//! The publisher side of the live contract: tool-output traces framed for agent GUIs.
//!
//! Rules, all here:
//! - A message's trace starts with a `set`; every later chunk is an `append_text` whose
//!   `offsetBytes` is the UTF-8 byte length emitted before it.
//! - A chunk is at most `max_chunk_bytes` (128 KiB by default) and always cut on a UTF-8
//!   character boundary.
//! - A trace is capped at `max_output_bytes` (1 MiB by default) including the truncation
//!   marker, which is appended once, when the first byte is dropped; later text is counted in
//!   `dropped_bytes` and not sent.
//! - Adjacent pure appends (a tool-output append and nothing else) of the same message are
//!   coalesced while they wait to be framed, only when the second starts exactly where the first
//!   ends and the result still fits one chunk.
//! - Structured state travels as `payloadSet`/`payloadUnset` on the same message.
//! - Anything for a turn that has settled (a message delta, an interaction, another turn update)
//!   is not sent: it becomes a discontinuity carrying the keys a subscriber must re-read. So
//!   does a delta for a message this publisher already sent as terminal (completedAtUnixMs or
//!   a terminal status).
//! - Frames carry `epoch` and a `seq` that grows by one per frame, heartbeats included, so a
//!   subscriber detects every lost frame.
//!
//! Sans-I/O: the caller passes the time (`now_ms`) and moves the frame bytes.

use std::collections::{HashMap, HashSet};

use crate::live::error::{Code, LiveError};
use crate::live::event::{Identity, LiveEvent, MessageDelta, ToolOutput};
use crate::live::frame::{
    Delivery, Discontinuity, DiscontinuityReason, Frame, KeyKind, ReconcileKey,
};

/// The role and kind of every tool-call message Tether publishes.
pub const TOOL_ROLE: &str = "tool";
pub const TOOL_CALL_KIND: &str = "tool_call";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramerConfig {
    pub max_chunk_bytes: usize,
    pub max_output_bytes: usize,
    pub truncation_marker: String,
    pub max_deliveries_per_frame: usize,
}

pub const DEFAULT_MAX_CHUNK_BYTES: usize = 128 * 1024;
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1024 * 1024;
pub const DEFAULT_TRUNCATION_MARKER: &str = "\n[tether: output truncated]\n";
pub const DEFAULT_MAX_DELIVERIES_PER_FRAME: usize = 64;

impl Default for FramerConfig {
    fn default() -> Self {
        FramerConfig {
            max_chunk_bytes: DEFAULT_MAX_CHUNK_BYTES,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            truncation_marker: DEFAULT_TRUNCATION_MARKER.to_owned(),
            max_deliveries_per_frame: DEFAULT_MAX_DELIVERIES_PER_FRAME,
        }
    }
}

impl FramerConfig {
    pub fn check(&self) -> Result<(), LiveError> {
        let bad = |r: String| Err(LiveError::new(Code::InvalidConfig, "", r));
        if self.max_chunk_bytes < 4 {
            return bad("max_chunk_bytes must be at least 4 (one UTF-8 character)".into());
        }
        if self.truncation_marker.is_empty() {
            return bad("truncation_marker must not be empty".into());
        }
        if self.truncation_marker.len() > self.max_chunk_bytes {
            return bad("truncation_marker must fit in one chunk".into());
        }
        if self.max_output_bytes < self.truncation_marker.len() {
            return bad("max_output_bytes must leave room for the truncation marker".into());
        }
        if self.max_deliveries_per_frame == 0 {
            return bad("max_deliveries_per_frame must be at least 1".into());
        }
        Ok(())
    }
}

impl FramerConfig {
    /// The text a subscriber holds once the whole trace `text` went through
    /// `Publisher::tool_output`, in any number of pieces: the cap and its marker applied the
    /// way `tool_output` applies them piece by piece (what a canonical record's output is).
    pub fn capped_output(&self, text: &str) -> String {
        let room = self.max_output_bytes - self.truncation_marker.len();
        if text.len() <= room {
            return text.to_owned();
        }
        let mut out = text[..floor_boundary(text, room)].to_owned();
        out.push_str(&self.truncation_marker);
        out
    }
}

/// The largest character boundary of `s` at or below `i`.
pub fn floor_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Splits `s` into pieces of at most `max` bytes, each cut on a character boundary
/// (`max >= 4`, so every piece holds at least one character).
pub fn chunks(s: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::with_capacity(s.len() / max.max(1) + 1);
    let mut rest = s;
    while !rest.is_empty() {
        let cut = floor_boundary(rest, max);
        out.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    out
}

/// Merges `next` into `last` when both are pure appends of one message, contiguous, and the
/// result fits a chunk. Returns `next` back when it cannot be merged.
pub fn coalesce_into(last: &mut Delivery, next: Delivery, max_chunk: usize) -> Option<Delivery> {
    let (Delivery::Event(LiveEvent::MessageDelta(a)), Delivery::Event(LiveEvent::MessageDelta(b))) =
        (&mut *last, &next)
    else {
        return Some(next);
    };
    if !(a.is_pure_append() && b.is_pure_append())
        || a.identity != b.identity
        || a.message_id != b.message_id
        || a.turn_id != b.turn_id
        || a.role != b.role
        || a.kind != b.kind
    {
        return Some(next);
    }
    let (
        Some(ToolOutput::AppendText {
            text: at,
            offset_bytes: ao,
        }),
        Some(ToolOutput::AppendText {
            text: bt,
            offset_bytes: bo,
        }),
    ) = (&mut a.tool_output, &b.tool_output)
    else {
        return Some(next);
    };
    if *ao + at.len() as u64 != *bo || at.len() + bt.len() > max_chunk {
        return Some(next);
    }
    at.push_str(bt);
    a.occurred_at_unix_ms = a.occurred_at_unix_ms.max(b.occurred_at_unix_ms);
    None
}

/// Coalesces a whole sequence of deliveries (what the publisher does as it queues them).
pub fn coalesce(deliveries: Vec<Delivery>, max_chunk: usize) -> Vec<Delivery> {
    let mut out: Vec<Delivery> = Vec::with_capacity(deliveries.len());
    for d in deliveries {
        push_coalesced(&mut out, d, max_chunk);
    }
    out
}

fn push_coalesced(queue: &mut Vec<Delivery>, d: Delivery, max_chunk: usize) {
    let rest = match queue.last_mut() {
        Some(last) => coalesce_into(last, d, max_chunk),
        None => Some(d),
    };
    if let Some(d) = rest {
        queue.push(d);
    }
}

#[derive(Debug, Clone)]
struct Trace {
    turn_id: String,
    emitted: u64,
    anchored: bool,
    truncated: bool,
    dropped: u64,
}

/// One session's live-event publisher. Single owner.
#[derive(Debug)]
pub struct Publisher {
    identity: Identity,
    epoch: u64,
    seq: u64,
    config: FramerConfig,
    traces: HashMap<String, Trace>,
    settled_turns: HashSet<String>,
    terminal_messages: HashSet<String>,
    queue: Vec<Delivery>,
}

impl Publisher {
    pub fn new(identity: Identity, epoch: u64, config: FramerConfig) -> Result<Self, LiveError> {
        config.check()?;
        if identity.workspace_id.is_empty() || identity.agent_session_id.is_empty() {
            return Err(LiveError::new(
                Code::InvalidConfig,
                "",
                "workspace and session ids must not be empty",
            ));
        }
        if epoch > crate::live::json::MAX_SAFE_INTEGER {
            // A frame's epoch is a JSON integer a subscriber reads exactly: past 2^53 - 1 it
            // refused every frame of this publisher (`unsafe_integer`).
            return Err(LiveError::new(
                Code::InvalidConfig,
                "",
                "epoch must be at most 2^53 - 1 (a frame's integers are exact in JSON)",
            ));
        }
        Ok(Publisher {
            identity,
            epoch,
            seq: 0,
            config,
            traces: HashMap::new(),
            settled_turns: HashSet::new(),
            terminal_messages: HashSet::new(),
            queue: Vec::new(),
        })
    }

    pub fn identity(&self) -> &Identity {
        &self.identity
    }
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
    /// The seq of the last frame produced (0 before the first).
    pub fn seq(&self) -> u64 {
        self.seq
    }
    pub fn config(&self) -> &FramerConfig {
        &self.config
    }
    /// Deliveries queued and not yet framed.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }
    /// Bytes of the message's trace sent so far (its `offsetBytes` for the next append).
    pub fn emitted_bytes(&self, message_id: &str) -> Option<u64> {
        self.traces.get(message_id).map(|t| t.emitted)
    }
    /// Bytes of the message's trace dropped by the output cap.
    pub fn dropped_bytes(&self, message_id: &str) -> Option<u64> {
        self.traces.get(message_id).map(|t| t.dropped)
    }
    pub fn is_turn_settled(&self, turn_id: &str) -> bool {
        self.settled_turns.contains(turn_id)
    }
    /// Forgets what is held of a message that will be published no more (a bounded feed let
    /// it go): its trace's offsets and its terminal mark. Nothing is framed. Should it come
    /// back, it is published as a new one (a `set` for its trace), not as a late delta.
    pub fn forget_message(&mut self, message_id: &str) {
        self.traces.remove(message_id);
        self.terminal_messages.remove(message_id);
    }
    /// Forgets a turn's settled mark once none of its messages is held (`forget_message`).
    pub fn forget_turn(&mut self, turn_id: &str) {
        self.settled_turns.remove(turn_id);
    }
    /// Messages and turns this publisher holds state for (traces, terminal marks, settled
    /// turns): what `forget_message` and `forget_turn` give back.
    pub fn held(&self) -> usize {
        self.traces.len() + self.terminal_messages.len() + self.settled_turns.len()
    }

    fn key(&self, kind: KeyKind, id: &str, turn_id: Option<&str>) -> ReconcileKey {
        ReconcileKey {
            kind,
            identity: self.identity.clone(),
            id: id.to_owned(),
            turn_id: turn_id.map(str::to_owned),
        }
    }

    fn discontinuity(&mut self, reason: DiscontinuityReason, key: ReconcileKey) {
        // A run of late deltas needs one re-read, not one per delta.
        if let Some(Delivery::Discontinuity(d)) = self.queue.last_mut() {
            if d.reason == reason {
                if !d.keys.contains(&key) {
                    d.keys.push(key);
                }
                return;
            }
        }
        self.queue.push(Delivery::Discontinuity(Discontinuity {
            reason,
            keys: vec![key],
        }));
    }

    /// The discontinuity reason for a message delta, if it must not be sent.
    fn late(&self, message_id: &str, turn_id: &str) -> Option<DiscontinuityReason> {
        if self.settled_turns.contains(turn_id) {
            Some(DiscontinuityReason::DeltaAfterSettled)
        } else if self.terminal_messages.contains(message_id) {
            Some(DiscontinuityReason::DeltaAfterTerminal)
        } else {
            None
        }
    }

    fn trace(&mut self, message_id: &str, turn_id: &str) -> Result<&mut Trace, LiveError> {
        let t = self
            .traces
            .entry(message_id.to_owned())
            .or_insert_with(|| Trace {
                turn_id: turn_id.to_owned(),
                emitted: 0,
                anchored: false,
                truncated: false,
                dropped: 0,
            });
        if t.turn_id != turn_id {
            return Err(LiveError::new(
                Code::MessageConflict,
                "",
                format!(
                    "message {message_id:?} belongs to turn {:?}, not {turn_id:?}",
                    t.turn_id
                ),
            ));
        }
        Ok(t)
    }

    fn bare_delta(&self, message_id: &str, turn_id: &str, now_ms: u64) -> MessageDelta {
        MessageDelta {
            identity: self.identity.clone(),
            message_id: message_id.to_owned(),
            turn_id: turn_id.to_owned(),
            role: TOOL_ROLE.to_owned(),
            kind: TOOL_CALL_KIND.to_owned(),
            occurred_at_unix_ms: now_ms,
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

    /// Appends text to a tool call's trace (the first call sends a `set`, even of "").
    pub fn tool_output(
        &mut self,
        message_id: &str,
        turn_id: &str,
        text: &str,
        now_ms: u64,
    ) -> Result<(), LiveError> {
        check_time(now_ms)?;
        if message_id.is_empty() || turn_id.is_empty() {
            return Err(LiveError::new(
                Code::InvalidConfig,
                "",
                "message and turn ids must not be empty",
            ));
        }
        if let Some(reason) = self.late(message_id, turn_id) {
            self.trace(message_id, turn_id)?;
            let key = self.key(KeyKind::Message, message_id, Some(turn_id));
            self.discontinuity(reason, key);
            return Ok(());
        }
        let max_out = self.config.max_output_bytes as u64;
        let marker_len = self.config.truncation_marker.len() as u64;
        let trace = self.trace(message_id, turn_id)?;
        if trace.truncated {
            trace.dropped += text.len() as u64;
            return Ok(());
        }
        let room = max_out - marker_len - trace.emitted.min(max_out - marker_len);
        let (keep, truncate) = if text.len() as u64 <= room {
            (text, false)
        } else {
            let cut = floor_boundary(text, room as usize);
            trace.truncated = true;
            trace.dropped += (text.len() - cut) as u64;
            (&text[..cut], true)
        };
        self.emit(message_id, turn_id, keep, now_ms);
        if truncate {
            let marker = self.config.truncation_marker.clone();
            self.emit(message_id, turn_id, &marker, now_ms);
        }
        Ok(())
    }

    fn emit(&mut self, message_id: &str, turn_id: &str, text: &str, now_ms: u64) {
        let max_chunk = self.config.max_chunk_bytes;
        let mut pieces = chunks(text, max_chunk);
        let trace = self.traces.get_mut(message_id).expect("trace() created it");
        let mut outputs = Vec::with_capacity(pieces.len() + 1);
        if !trace.anchored {
            let first = if pieces.is_empty() {
                ""
            } else {
                pieces.remove(0)
            };
            trace.anchored = true;
            trace.emitted = first.len() as u64;
            outputs.push(ToolOutput::Set(first.to_owned()));
        }
        for p in pieces {
            outputs.push(ToolOutput::AppendText {
                text: p.to_owned(),
                offset_bytes: trace.emitted,
            });
            trace.emitted += p.len() as u64;
        }
        for o in outputs {
            let mut d = self.bare_delta(message_id, turn_id, now_ms);
            d.tool_output = Some(o);
            push_coalesced(
                &mut self.queue,
                Delivery::Event(LiveEvent::MessageDelta(d)),
                max_chunk,
            );
        }
    }

    /// Queues an event the caller built (a structured message delta, a turn or interaction
    /// update, ...). Its identity must be this publisher's; a delta for a settled turn becomes
    /// a discontinuity; a settled turn update marks the turn settled.
    pub fn publish(&mut self, event: LiveEvent) -> Result<(), LiveError> {
        if event.identity() != &self.identity {
            return Err(LiveError::new(
                Code::SessionMismatch,
                "",
                "the event's workspace and session are not this publisher's",
            ));
        }
        match &event {
            LiveEvent::MessageDelta(d) => {
                if let Some(reason) = self.late(&d.message_id, &d.turn_id) {
                    let key = self.key(KeyKind::Message, &d.message_id, Some(&d.turn_id));
                    self.discontinuity(reason, key);
                    return Ok(());
                }
                let terminal = d.completed_at_unix_ms.is_some()
                    || d.status
                        .as_deref()
                        .is_some_and(|s| crate::live::overlay::TERMINAL_STATUSES.contains(&s));
                if terminal {
                    self.terminal_messages.insert(d.message_id.clone());
                }
                if let Some(o) = &d.tool_output {
                    let (message_id, turn_id) = (d.message_id.clone(), d.turn_id.clone());
                    let trace = self.trace(&message_id, &turn_id)?;
                    match o {
                        ToolOutput::Set(t) => trace.emitted = t.len() as u64,
                        ToolOutput::AppendText { text, offset_bytes } => {
                            trace.emitted = offset_bytes + text.len() as u64
                        }
                    }
                    trace.anchored = true;
                }
            }
            LiveEvent::TurnUpdate(u) => {
                let id = u.turn.turn_id.clone();
                if self.settled_turns.contains(&id) {
                    let key = self.key(KeyKind::Turn, &id, None);
                    self.discontinuity(DiscontinuityReason::DeltaAfterSettled, key);
                    return Ok(());
                }
                if u.turn.is_settled() {
                    self.settled_turns.insert(id);
                }
            }
            LiveEvent::InteractionUpdate(u) => {
                if self.settled_turns.contains(&u.interaction.turn_id) {
                    let key = self.key(KeyKind::Interaction, &u.interaction.request_id, None);
                    self.discontinuity(DiscontinuityReason::DeltaAfterSettled, key);
                    return Ok(());
                }
            }
            LiveEvent::RuntimeActivityUpdate(_)
            | LiveEvent::InteractionSnapshot(_)
            | LiveEvent::SessionAudit(_) => {}
        }
        let max_chunk = self.config.max_chunk_bytes;
        push_coalesced(&mut self.queue, Delivery::Event(event), max_chunk);
        Ok(())
    }

    /// The next frame of queued deliveries, or None when nothing waits.
    pub fn poll_frame(&mut self) -> Option<Frame> {
        if self.queue.is_empty() {
            return None;
        }
        let n = self.queue.len().min(self.config.max_deliveries_per_frame);
        let deliveries: Vec<Delivery> = self.queue.drain(..n).collect();
        self.seq += 1;
        Some(Frame {
            epoch: self.epoch,
            seq: self.seq,
            deliveries,
        })
    }

    /// The next frame of queued deliveries, or an empty one: an idle stream still advances
    /// `seq`, so a subscriber notices a lost last frame.
    pub fn heartbeat(&mut self) -> Frame {
        self.poll_frame().unwrap_or_else(|| {
            self.seq += 1;
            Frame {
                epoch: self.epoch,
                seq: self.seq,
                deliveries: Vec::new(),
            }
        })
    }
}

fn check_time(now_ms: u64) -> Result<(), LiveError> {
    if now_ms == 0 || now_ms > crate::live::json::MAX_SAFE_INTEGER {
        return Err(LiveError::new(
            Code::InvalidConfig,
            "",
            "now_ms must be between 1 and 2^53 - 1 (occurredAtUnixMs has minimum 1)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::validate::validate;
    use proptest::prelude::*;

    fn ident() -> Identity {
        Identity {
            workspace_id: "ws".into(),
            agent_session_id: "world-1".into(),
        }
    }

    fn publisher(chunk: usize, cap: usize) -> Publisher {
        Publisher::new(
            ident(),
            1,
            FramerConfig {
                max_chunk_bytes: chunk,
                max_output_bytes: cap,
                truncation_marker: "<cut>".into(),
                max_deliveries_per_frame: 1_000_000,
            },
        )
        .unwrap()
    }

    fn outputs(frames: &[Frame]) -> Vec<ToolOutput> {
        frames
            .iter()
            .flat_map(|f| f.deliveries.iter())
            .filter_map(|d| match d {
                Delivery::Event(LiveEvent::MessageDelta(m)) => m.tool_output.clone(),
                _ => None,
            })
            .collect()
    }

    /// Applies outputs as a consumer does, checking each offset.
    fn replay(outs: &[ToolOutput]) -> String {
        let mut text: Option<String> = None;
        for o in outs {
            match o {
                ToolOutput::Set(t) => text = Some(t.clone()),
                ToolOutput::AppendText {
                    text: t,
                    offset_bytes,
                } => {
                    let cur = text.as_mut().expect("append after a set");
                    assert_eq!(*offset_bytes, cur.len() as u64);
                    cur.push_str(t);
                }
            }
        }
        text.unwrap_or_default()
    }

    fn drain(p: &mut Publisher) -> Vec<Frame> {
        std::iter::from_fn(|| p.poll_frame()).collect()
    }

    /// Publishes turn "t" settled.
    fn settle_turn_t(p: &mut Publisher) {
        let settled = r#"{"workspaceId":"ws","agentSessionId":"world-1","eventType":"turn_update","data":{"workspaceId":"ws","agentSessionId":"world-1","eventType":"turn_update","occurredAtUnixMs":2,"activeTurnId":null,"turn":{"turnId":"t","agentSessionId":"world-1","phase":"settled","outcome":"completed","error":null,"startedAtUnixMs":1,"settledAtUnixMs":2,"updatedAtUnixMs":2}}}"#;
        p.publish(validate(settled.as_bytes()).unwrap()).unwrap();
    }

    #[test]
    fn first_chunk_is_set_then_appends_at_offsets() {
        let mut p = publisher(8, 1 << 20);
        p.tool_output("m", "t", "héllo wörld!", 10).unwrap();
        let outs = outputs(&drain(&mut p));
        assert!(matches!(outs[0], ToolOutput::Set(_)));
        assert!(outs.len() >= 2);
        for o in &outs {
            let t = match o {
                ToolOutput::Set(t) | ToolOutput::AppendText { text: t, .. } => t,
            };
            assert!(t.len() <= 8);
        }
        assert_eq!(replay(&outs), "héllo wörld!");
    }

    #[test]
    fn output_is_capped_with_one_marker() {
        let mut p = publisher(16, 20);
        p.tool_output("m", "t", "0123456789", 1).unwrap();
        p.tool_output("m", "t", "abcdefghij", 2).unwrap();
        p.tool_output("m", "t", "more", 3).unwrap();
        let text = replay(&outputs(&drain(&mut p)));
        assert_eq!(text, "0123456789abcde<cut>");
        assert_eq!(text.len(), 20);
        assert_eq!(p.dropped_bytes("m"), Some(5 + 4));
    }

    #[test]
    fn pure_appends_coalesce_only_when_contiguous() {
        let mut p = publisher(1024, 1 << 20);
        p.tool_output("m", "t", "a", 1).unwrap();
        p.tool_output("m", "t", "b", 2).unwrap();
        p.tool_output("m", "t", "c", 3).unwrap();
        let f = drain(&mut p);
        // The set stands alone; the two appends became one.
        assert_eq!(
            outputs(&f),
            vec![
                ToolOutput::Set("a".into()),
                ToolOutput::AppendText {
                    text: "bc".into(),
                    offset_bytes: 1
                }
            ]
        );
        // A gap in offsets keeps appends apart.
        let mk = |text: &str, off: u64| {
            let mut d = p.bare_delta("m", "t", 5);
            d.tool_output = Some(ToolOutput::AppendText {
                text: text.into(),
                offset_bytes: off,
            });
            Delivery::Event(LiveEvent::MessageDelta(d))
        };
        assert_eq!(coalesce(vec![mk("x", 3), mk("y", 4)], 1024).len(), 1);
        assert_eq!(coalesce(vec![mk("x", 3), mk("y", 9)], 1024).len(), 2);
        assert_eq!(coalesce(vec![mk("x", 3), mk("y", 4)], 1).len(), 2);
        // Another message in between also keeps them apart.
        let mut other = p.bare_delta("n", "t", 5);
        other.tool_output = Some(ToolOutput::Set("z".into()));
        let other = Delivery::Event(LiveEvent::MessageDelta(other));
        assert_eq!(coalesce(vec![mk("x", 3), other, mk("y", 4)], 1024).len(), 3);
    }

    #[test]
    fn deltas_after_settle_become_discontinuities() {
        let mut p = publisher(1024, 1 << 20);
        p.tool_output("m", "t", "x", 1).unwrap();
        settle_turn_t(&mut p);
        p.tool_output("m", "t", "late", 3).unwrap();
        p.tool_output("m", "t", "later", 4).unwrap();
        let f = drain(&mut p);
        let last = f.last().unwrap().deliveries.last().unwrap();
        let Delivery::Discontinuity(d) = last else {
            panic!("expected a discontinuity, got {last:?}")
        };
        assert_eq!(d.keys.len(), 1);
        assert_eq!(d.keys[0].id, "m");
        assert_eq!(d.keys[0].turn_id.as_deref(), Some("t"));
        // Every delivery the publisher frames passes the validator.
        for fr in &f {
            assert_eq!(crate::live::frame::parse_frame(&fr.to_json()).unwrap(), *fr);
        }
    }

    #[test]
    fn a_forgotten_message_and_turn_hold_nothing_and_come_back_as_new() {
        let mut p = publisher(1024, 1 << 20);
        p.tool_output("m", "t", "first", 1).unwrap();
        settle_turn_t(&mut p);
        drain(&mut p);
        assert!(p.held() >= 2 && p.is_turn_settled("t"));
        let seq = p.seq();
        p.forget_message("m");
        assert!(p.is_turn_settled("t"));
        p.forget_turn("t");
        assert_eq!(p.held(), 0);
        assert_eq!(p.emitted_bytes("m"), None);
        assert!(!p.is_turn_settled("t") && p.poll_frame().is_none() && p.seq() == seq);
        // Back again: a new trace (a set from offset 0), not a discontinuity.
        p.tool_output("m", "t", "again", 3).unwrap();
        let f = drain(&mut p);
        assert!(f
            .iter()
            .flat_map(|fr| fr.deliveries.iter())
            .all(|d| !matches!(d, Delivery::Discontinuity(_))));
        assert_eq!(outputs(&f), vec![ToolOutput::Set("again".into())]);
    }

    #[test]
    fn heartbeats_advance_seq_and_misuse_is_typed() {
        let mut p = publisher(1024, 1 << 20);
        assert_eq!(p.heartbeat().seq, 1);
        assert_eq!(p.heartbeat().seq, 2);
        p.tool_output("m", "t", "x", 1).unwrap();
        assert_eq!(
            p.tool_output("m", "other", "x", 1).unwrap_err().code,
            Code::MessageConflict
        );
        assert_eq!(
            p.tool_output("m", "t", "x", 0).unwrap_err().code,
            Code::InvalidConfig
        );
        let bad = FramerConfig {
            max_chunk_bytes: 3,
            ..FramerConfig::default()
        };
        assert_eq!(
            Publisher::new(ident(), 0, bad).unwrap_err().code,
            Code::InvalidConfig
        );
    }

    proptest! {
        #[test]
        fn every_chunking_of_multibyte_text_round_trips(
            parts in proptest::collection::vec("[a-zé€😀\u{10FFFF}\n]{0,40}", 0..12),
            chunk in 5usize..40,
        ) {
            let mut p = publisher(chunk, 1 << 20);
            for (i, part) in parts.iter().enumerate() {
                p.tool_output("m", "t", part, i as u64 + 1).unwrap();
            }
            let frames = drain(&mut p);
            let outs = outputs(&frames);
            let whole: String = parts.concat();
            if parts.is_empty() {
                prop_assert!(outs.is_empty());
            } else {
                prop_assert!(matches!(outs[0], ToolOutput::Set(_)));
                for o in &outs {
                    let t = match o { ToolOutput::Set(t) | ToolOutput::AppendText { text: t, .. } => t };
                    prop_assert!(t.len() <= chunk);
                }
                prop_assert_eq!(replay(&outs), whole);
            }
        }

        #[test]
        fn chunks_cut_on_character_boundaries(s in "[a-zé€😀]{0,64}", max in 4usize..20) {
            let pieces = chunks(&s, max);
            prop_assert_eq!(pieces.concat(), s.clone());
            for p in pieces {
                prop_assert!(!p.is_empty() && p.len() <= max);
            }
        }

        #[test]
        fn capped_output_is_a_prefix_plus_marker(
            parts in proptest::collection::vec("[a-zé😀]{0,30}", 1..10),
            cap in 5usize..60,
        ) {
            let mut p = publisher(8, cap);
            for part in &parts {
                p.tool_output("m", "t", part, 1).unwrap();
            }
            let text = replay(&outputs(&drain(&mut p)));
            let whole: String = parts.concat();
            prop_assert_eq!(&text, &p.config().capped_output(&whole));
            prop_assert!(text.len() <= cap);
            if whole.len() + 5 <= cap {
                prop_assert_eq!(text, whole);
            } else {
                let body = text.strip_suffix("<cut>").unwrap();
                prop_assert!(whole.starts_with(body));
                prop_assert!(cap - 5 - body.len() < 4);
            }
        }
    }
}
