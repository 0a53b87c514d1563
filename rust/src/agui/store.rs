//! The activity store: one thread's ordered message history, built from AG-UI events.
//!
//! Rules (AG-UI draft, as narrowed by Tether issue 2):
//! 1. ACTIVITY_SNAPSHOT creates the activity at the point of arrival; for an existing activity
//!    it replaces content and activityType unless `replace` is `false`, which leaves both as
//!    they are (not a merge).
//! 2. Metadata merges key by key, last write wins, no deep merge, across replacing snapshots.
//! 3. A replacing snapshot re-mints `subagentRunId` (absent on the snapshot: absent on the
//!    message); `replace: false` keeps the owner whatever it says; a tagged ACTIVITY_DELTA whose
//!    tag differs from the owner is fatal; an untagged delta is accepted.
//! 4. ACTIVITY_DELTA patches content atomically (AG-UI patch mode) and its activityType
//!    replaces the message's. A missing or non-activity target, a patch that does not apply,
//!    or a result that is not an object: skipped with a warning, content and type kept, the
//!    delta's metadata still merged (when there is a target). So is a delta that could nest
//!    content deeper than `MAX_CONTENT_DEPTH` or make it heavier than its weight limit
//!    (resource bounds of Tether's, not AG-UI's: `copy` can double content per operation).
//!    The patch is read before anything applies (a malformed one is fatal, whatever the
//!    target; a `move` into its own child is well formed and just does not apply), and an
//!    operation with an unknown `op` is dropped with its warning first, whatever then happens
//!    to the rest of the patch.
//! 5. Malformed known values are fatal and leave the store exactly as it was; unknown event
//!    types are dropped and unknown properties of closed objects stripped, with warnings.
//! 6. MESSAGES_SNAPSHOT replaces held messages by id in place, appends unseen ones in snapshot
//!    order and drops held messages it omits, except activity and reasoning messages when the
//!    snapshot carries no message of that role.
//! 7. `run_input_messages` is the history without activity messages.
//! 8. `rawEvent: null`, on any event, is taken as absent with a warning until 2027-09-08 and
//!    is fatal (`null_value`) from that date, judged by `StoreOptions::today` (`deprecated`).
//! 9. The run lifecycle is enforced before anything else of an event applies (`lifecycle`):
//!    the stream begins with RUN_STARTED or RUN_ERROR, a run is not started twice, RUN_FINISHED
//!    names the open run, and after the end only RUN_STARTED or a late RUN_ERROR may follow.
//!    `Lifecycle::Partial` lets a capture begin mid-run.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::deprecated::{self, Date};
use super::error::{self as codes, AguiError, ErrorKind, Warning};
use super::fast;
use super::frame::{self, Frame, Framer};
use super::lifecycle::{self, Lifecycle, Run};
use super::message::{growth, merge_metadata, patch_growth, Activity, Message, MAX_CONTENT_DEPTH};
use super::schema::{self, ENVELOPE};
use crate::patch::{parse_ops, run, Mode, Op, ValueDoc};

/// How a store reads its input; fixed when it is built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreOptions {
    /// The date deprecation windows are judged by (the core reads no clock). `None` counts
    /// every window as closed: `rawEvent: null` is then fatal.
    pub today: Option<Date>,
    /// How strictly the run lifecycle is enforced (strict by default).
    pub lifecycle: Lifecycle,
}

/// One thread's message history. Single owner: feed it from one place.
#[derive(Debug, Default)]
pub struct ActivityStore {
    framer: Framer,
    thread: Thread,
}

/// The history and everything the rules need besides the byte framing.
#[derive(Debug)]
struct Thread {
    options: StoreOptions,
    messages: Vec<Message>,
    index: HashMap<String, usize>,
    warnings: Vec<Warning>,
    run: Run,
    /// The message a field-less TEXT_MESSAGE_CHUNK continues.
    open_chunk: Option<String>,
    events: u64,
}

impl Default for Thread {
    fn default() -> Self {
        Thread {
            options: StoreOptions::default(),
            messages: Vec::new(),
            index: HashMap::new(),
            warnings: Vec::new(),
            run: Run::initial(Lifecycle::Strict),
            open_chunk: None,
            events: 0,
        }
    }
}

fn take_str(m: &mut Map<String, Value>, k: &str) -> Option<String> {
    match m.shift_remove(k) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

fn take_obj(m: &mut Map<String, Value>, k: &str) -> Option<Map<String, Value>> {
    match m.shift_remove(k) {
        Some(Value::Object(o)) => Some(o),
        _ => None,
    }
}

fn merge_into_wire(msg: &mut Map<String, Value>, from: Option<Map<String, Value>>) {
    let Some(from) = from else { return };
    match msg.get_mut("metadata") {
        Some(Value::Object(m)) => {
            for (k, v) in from {
                m.insert(k, v);
            }
        }
        _ => {
            msg.insert("metadata".into(), Value::Object(from));
        }
    }
}

impl ActivityStore {
    /// A store with the default options (no date: deprecation windows count as closed).
    pub fn new() -> Self {
        Self::default()
    }

    /// A store reading its input as `options` say.
    pub fn with_options(options: StoreOptions) -> Self {
        let mut store = Self::default();
        store.thread.options = options;
        store.thread.run = Run::initial(options.lifecycle);
        store
    }

    /// The options the store was built with.
    pub fn options(&self) -> StoreOptions {
        self.thread.options
    }

    /// The history, in order.
    pub fn messages(&self) -> &[Message] {
        &self.thread.messages
    }

    /// The message with this id.
    pub fn get(&self, id: &str) -> Option<&Message> {
        self.thread.index.get(id).map(|i| &self.thread.messages[*i])
    }

    /// Every warning so far, oldest first.
    pub fn warnings(&self) -> &[Warning] {
        &self.thread.warnings
    }

    /// How many events were handled (applied, skipped or dropped with a warning).
    pub fn events_handled(&self) -> u64 {
        self.thread.events
    }

    /// Bytes fed that do not yet form a complete event.
    pub fn pending_bytes(&self) -> usize {
        self.framer.pending()
    }

    /// The history in wire form, as a JSON array.
    pub fn to_json(&self) -> Vec<u8> {
        let arr = Value::Array(self.messages().iter().map(Message::to_wire).collect());
        serde_json::to_vec(&arr).unwrap_or_else(|_| b"[]".to_vec())
    }

    /// The messages to send as run input: the history without activity messages.
    pub fn run_input_messages(&self) -> impl Iterator<Item = &Message> {
        self.messages()
            .iter()
            .filter(|m| !matches!(m, Message::Activity(_)))
    }

    /// Feeds raw bytes (one JSON event, NDJSON or SSE; any chunk split) and handles every
    /// complete event. Stops at the first fatal error: events before it are applied, the bytes
    /// after it stay buffered and are handled by the next `feed` call.
    pub fn feed(&mut self, data: &[u8]) -> Result<(), AguiError> {
        self.framer.push(data);
        self.drain(false)
    }

    /// End of input: handles a last event left without its terminator; leftover bytes that
    /// do not form an event are a `truncated_stream` error.
    pub fn finish(&mut self) -> Result<(), AguiError> {
        self.drain(true)?;
        self.framer.finish()
    }

    /// Handles one event. On error the store is exactly as before the call.
    pub fn handle_value(&mut self, event: Value) -> Result<(), AguiError> {
        self.thread.handle_value(event)
    }

    fn drain(&mut self, eof: bool) -> Result<(), AguiError> {
        loop {
            let value = match self.framer.next_frame(eof)? {
                None => return Ok(()),
                Some(Frame::Value(v)) => v,
                Some(Frame::Data(text)) => {
                    if self.thread.try_fast(text) {
                        continue;
                    }
                    let parsed = frame::parse_data(text);
                    parsed.map_err(|e| self.framer.data_error(e))?
                }
                Some(Frame::Line(text)) => {
                    if self.thread.try_fast(text) {
                        continue;
                    }
                    match serde_json::from_slice::<Value>(text) {
                        Ok(v) => v,
                        Err(_) => {
                            self.framer.rewind_to_stream();
                            continue;
                        }
                    }
                }
            };
            self.thread.handle_value(value)?;
        }
    }
}

impl Thread {
    fn handle_value(&mut self, event: Value) -> Result<(), AguiError> {
        let mut warnings = Vec::new();
        let result = self.handle_inner(event, &mut warnings);
        if result.is_ok() {
            self.events += 1;
            self.warnings.append(&mut warnings);
        }
        result
    }

    /// The hot path for a clean ACTIVITY_DELTA given as text; `false` leaves the event to the
    /// general path, with nothing changed.
    fn try_fast(&mut self, text: &[u8]) -> bool {
        let Some(d) = fast::parse(text) else {
            return false;
        };
        if !self.run.is_open() {
            return false;
        }
        let Some(Message::Activity(a)) = self
            .index
            .get(d.message_id.as_ref())
            .map(|i| &mut self.messages[*i])
        else {
            return false;
        };
        if d.subagent_run_id.is_some() && d.subagent_run_id != a.subagent_run_id {
            return false;
        }
        let ops = d.patch.iter().map(|op| {
            (
                op.op.as_ref(),
                op.path.as_ref(),
                op.from.as_deref(),
                op.value.as_ref(),
            )
        });
        let (depth, weight) = growth(ops, a.depth, a.weight, None);
        if depth > MAX_CONTENT_DEPTH
            || weight > a.weight_limit
            || !fast::apply(&mut a.content, &d.patch)
        {
            return false;
        }
        (a.depth, a.weight) = (depth, weight);
        if a.activity_type != d.activity_type {
            a.activity_type = d.activity_type.into_owned();
        }
        merge_metadata(&mut a.metadata, d.metadata);
        self.events += 1;
        true
    }

    fn handle_inner(&mut self, event: Value, warnings: &mut Vec<Warning>) -> Result<(), AguiError> {
        let Value::Object(mut ev) = event else {
            return Err(AguiError::malformed(
                codes::EVENT_NOT_OBJECT,
                format!(
                    "an event must be a JSON object, got {}",
                    schema::type_name(&event)
                ),
            ));
        };
        let event_type = match ev.get("type") {
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(AguiError::malformed(
                    codes::MISSING_TYPE,
                    format!("`type` must be a string, got {}", schema::type_name(v)),
                ))
            }
            None => {
                return Err(AguiError::malformed(
                    codes::MISSING_TYPE,
                    "the event has no `type`",
                ))
            }
        };
        let message_id = ev
            .get("messageId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let ctx = |e: AguiError| e.with_context(Some(&event_type), message_id.as_deref());
        // Every event carries the envelope, known type or not.
        deprecated::raw_event_null(
            &mut ev,
            &event_type,
            message_id.as_deref(),
            self.options.today,
            warnings,
        )
        .map_err(ctx)?;
        let Some((fields, attributable)) = schema::event_fields(&event_type) else {
            // An unknown type is still an event of the run: the lifecycle applies to it.
            lifecycle::next(&self.run, &event_type, None).map_err(ctx)?;
            warnings.push(Warning::new(
                codes::UNKNOWN_EVENT_TYPE,
                &event_type,
                message_id.as_deref(),
                format!("dropped an event of unknown type {event_type:?}"),
            ));
            return Ok(());
        };
        let unknown = schema::check_closed(&ev, &[ENVELOPE, fields], attributable).map_err(ctx)?;
        if !unknown.is_empty() {
            warnings.push(schema::unknown_warning(
                &event_type,
                message_id.as_deref(),
                "the event",
                &unknown,
            ));
            for name in &unknown {
                ev.shift_remove(name);
            }
        }
        let ids = match (ev.get("threadId"), ev.get("runId")) {
            (Some(Value::String(t)), Some(Value::String(r))) => Some((t.as_str(), r.as_str())),
            _ => None,
        };
        let run = lifecycle::next(&self.run, &event_type, ids).map_err(ctx)?;
        match event_type.as_str() {
            "RUN_STARTED" => {}
            "RUN_FINISHED" | "RUN_ERROR" => self.open_chunk = None,
            "ACTIVITY_SNAPSHOT" => self.activity_snapshot(ev, warnings),
            "ACTIVITY_DELTA" => self.activity_delta(ev, warnings).map_err(ctx)?,
            "MESSAGES_SNAPSHOT" => self.messages_snapshot(ev, warnings).map_err(ctx)?,
            "TEXT_MESSAGE_START"
            | "TEXT_MESSAGE_CONTENT"
            | "TEXT_MESSAGE_END"
            | "TEXT_MESSAGE_CHUNK" => self.text_message(&event_type, ev, warnings),
            _ => {}
        }
        if let Some(run) = run {
            self.run = run;
        }
        Ok(())
    }

    fn push(&mut self, msg: Message) {
        self.index.insert(msg.id().to_owned(), self.messages.len());
        self.messages.push(msg);
    }

    fn activity_snapshot(&mut self, mut ev: Map<String, Value>, warnings: &mut Vec<Warning>) {
        let id = take_str(&mut ev, "messageId").unwrap_or_default();
        let activity_type = take_str(&mut ev, "activityType").unwrap_or_default();
        let subagent_run_id = take_str(&mut ev, "subagentRunId");
        let metadata = take_obj(&mut ev, "metadata");
        let replace = ev.get("replace").and_then(Value::as_bool).unwrap_or(true);
        let content = ev
            .shift_remove("content")
            .unwrap_or_else(|| Value::Object(Map::new()));
        match self.index.get(&id).map(|i| &mut self.messages[*i]) {
            None => self.push(Message::Activity(Activity::new(
                id,
                activity_type,
                content,
                metadata,
                subagent_run_id,
            ))),
            Some(Message::Activity(a)) => {
                if replace {
                    a.set_content(content);
                    a.activity_type = activity_type;
                    a.subagent_run_id = subagent_run_id;
                }
                // replace: false keeps content, type and the established owner; metadata merges.
                merge_metadata(&mut a.metadata, metadata);
            }
            Some(other) => warnings.push(Warning::new(
                codes::SNAPSHOT_TARGET_NOT_ACTIVITY,
                "ACTIVITY_SNAPSHOT",
                Some(&id),
                format!(
                    "skipped: message {id:?} has role {:?}, not activity",
                    other.role()
                ),
            )),
        }
    }

    fn activity_delta(
        &mut self,
        mut ev: Map<String, Value>,
        warnings: &mut Vec<Warning>,
    ) -> Result<(), AguiError> {
        const T: &str = "ACTIVITY_DELTA";
        let id = take_str(&mut ev, "messageId").unwrap_or_default();
        let patch = ev.shift_remove("patch").unwrap_or(Value::Array(Vec::new()));
        // Enforcement before application: a malformed patch is fatal whatever the target, and
        // an operation with an unknown `op` is dropped with its warning, which stands whatever
        // happens to the rest of the patch (a later failure adds its own warning).
        let ops = read_patch(&patch, &id, warnings)?;
        let target = match self.index.get(&id).map(|i| &mut self.messages[*i]) {
            Some(Message::Activity(a)) => a,
            found => {
                let (code, why) = match found {
                    None => (
                        codes::DELTA_TARGET_MISSING,
                        "no message has this id".to_owned(),
                    ),
                    Some(m) => (
                        codes::DELTA_TARGET_NOT_ACTIVITY,
                        format!("it names a message with role {:?}", m.role()),
                    ),
                };
                warnings.push(Warning::new(
                    code,
                    T,
                    Some(&id),
                    format!("skipped the delta: {why}"),
                ));
                return Ok(());
            }
        };
        let tag = take_str(&mut ev, "subagentRunId");
        if let Some(tag) = &tag {
            if target.subagent_run_id.as_ref() != Some(tag) {
                return Err(AguiError::new(
                    ErrorKind::Attribution,
                    codes::ATTRIBUTION_MISMATCH,
                    format!(
                        "the delta is tagged subagentRunId {tag:?} but the activity belongs to {}",
                        target
                            .subagent_run_id
                            .as_ref()
                            .map_or("the parent agent".to_owned(), |o| format!("{o:?}"))
                    ),
                ));
            }
        }
        let exceeds = |(depth, weight): (usize, usize), a: &Activity| {
            depth > MAX_CONTENT_DEPTH || weight > a.weight_limit
        };
        let mut bounds = patch_growth(&patch, target.depth, target.weight, None);
        if exceeds(bounds, target) {
            // The bounds only grow between snapshots, and copies were taken to copy everything:
            // measure the content and what the copies read before refusing.
            target.remeasure();
            let content = Some(&target.content);
            bounds = patch_growth(&patch, target.depth, target.weight, content);
        }
        if exceeds(bounds, target) {
            // Skipped like a patch that does not apply (a malformed one was fatal above).
            let (code, why) = if bounds.0 > MAX_CONTENT_DEPTH {
                let why = format!("nest content deeper than {MAX_CONTENT_DEPTH} levels");
                (codes::CONTENT_TOO_DEEP, why)
            } else {
                let why = format!("make content heavier than {} units", target.weight_limit);
                (codes::CONTENT_TOO_LARGE, why)
            };
            warnings.push(Warning::new(
                code,
                T,
                Some(&id),
                format!("skipped the delta: it could {why}"),
            ));
            merge_metadata(&mut target.metadata, take_obj(&mut ev, "metadata"));
            return Ok(());
        }
        let backup = if ops.iter().any(|op| op.path.is_root()) {
            Some(target.content.clone())
        } else {
            None
        };
        match run(&mut ValueDoc::new(&mut target.content), &ops, true) {
            Ok(()) if !target.content.is_object() => {
                let got = schema::type_name(&target.content);
                target.content = backup.unwrap_or_else(|| Value::Object(Map::new()));
                warnings.push(Warning::new(
                    codes::PATCH_RESULT_NOT_OBJECT,
                    T,
                    Some(&id),
                    format!("skipped the delta: its result is {got}, not an object"),
                ));
            }
            Ok(()) => {
                (target.depth, target.weight) = bounds;
                target.activity_type = take_str(&mut ev, "activityType").unwrap_or_default();
            }
            Err(f) => {
                let e = f.into_patch_error();
                warnings.push(Warning::new(
                    codes::PATCH_NOT_APPLIED,
                    T,
                    Some(&id),
                    format!(
                        "skipped the delta: operation {} at {:?} does not apply: {}",
                        e.op_index.map_or("?".to_owned(), |i| i.to_string()),
                        e.path.unwrap_or_default(),
                        e.message
                    ),
                ));
            }
        }
        merge_metadata(&mut target.metadata, take_obj(&mut ev, "metadata"));
        Ok(())
    }

    fn messages_snapshot(
        &mut self,
        mut ev: Map<String, Value>,
        warnings: &mut Vec<Warning>,
    ) -> Result<(), AguiError> {
        let Some(Value::Array(list)) = ev.shift_remove("messages") else {
            return Ok(());
        };
        let mut incoming: Vec<Message> = Vec::with_capacity(list.len());
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, raw) in list.iter().enumerate() {
            let Some(m) = schema::check_message(raw, i, warnings)? else {
                continue;
            };
            let msg = Message::from_checked(m);
            if seen.insert(msg.id().to_owned(), incoming.len()).is_some() {
                return Err(AguiError::malformed(
                    codes::DUPLICATE_MESSAGE_ID,
                    format!("messages[{i}] repeats id {:?}", msg.id()),
                )
                .with_context(None, Some(msg.id())));
            }
            incoming.push(msg);
        }
        let carries = |role: &str| incoming.iter().any(|m| m.role() == role);
        let (keep_activity, keep_reasoning) = (!carries("activity"), !carries("reasoning"));
        let mut slots: Vec<Option<Message>> = incoming.into_iter().map(Some).collect();
        let mut out = Vec::with_capacity(slots.len() + self.messages.len());
        for held in std::mem::take(&mut self.messages) {
            if let Some(&j) = seen.get(held.id()) {
                if let Some(m) = slots[j].take() {
                    out.push(m);
                }
            } else if (keep_activity && held.role() == "activity")
                || (keep_reasoning && held.role() == "reasoning")
            {
                out.push(held);
            }
        }
        out.extend(slots.into_iter().flatten());
        self.messages = out;
        self.index = self
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| (m.id().to_owned(), i))
            .collect();
        if self
            .open_chunk
            .as_ref()
            .is_some_and(|id| !self.index.contains_key(id))
        {
            self.open_chunk = None;
        }
        Ok(())
    }

    fn text_message(
        &mut self,
        event_type: &str,
        mut ev: Map<String, Value>,
        warnings: &mut Vec<Warning>,
    ) {
        let chunk = event_type == "TEXT_MESSAGE_CHUNK";
        let id = match take_str(&mut ev, "messageId") {
            Some(id) => id,
            None => match &self.open_chunk {
                Some(id) => id.clone(),
                None => {
                    warnings.push(Warning::new(
                        codes::TEXT_MESSAGE_MISSING,
                        event_type,
                        None,
                        "skipped: a chunk without messageId and no message open",
                    ));
                    return;
                }
            },
        };
        let metadata = take_obj(&mut ev, "metadata");
        let delta = take_str(&mut ev, "delta");
        let opens = event_type == "TEXT_MESSAGE_START" || chunk;
        let exists = self.index.contains_key(&id);
        if !exists && opens {
            let mut m = Map::new();
            m.insert("id".into(), Value::String(id.clone()));
            let role = take_str(&mut ev, "role").unwrap_or_else(|| "assistant".into());
            m.insert("role".into(), Value::String(role));
            if let Some(s) = take_str(&mut ev, "subagentRunId") {
                m.insert("subagentRunId".into(), Value::String(s));
            }
            if let Some(n) = take_str(&mut ev, "name") {
                m.insert("name".into(), Value::String(n));
            }
            m.insert("content".into(), Value::String(String::new()));
            self.push(Message::Other(m));
        }
        let Some(&i) = self.index.get(&id) else {
            warnings.push(Warning::new(
                codes::TEXT_MESSAGE_MISSING,
                event_type,
                Some(&id),
                "skipped: no text message with this id was started",
            ));
            return;
        };
        let Message::Other(msg) = &mut self.messages[i] else {
            warnings.push(Warning::new(
                codes::TEXT_MESSAGE_CONFLICT,
                event_type,
                Some(&id),
                "skipped: the id names an activity message",
            ));
            return;
        };
        if let Some(d) = delta {
            match msg.get_mut("content") {
                Some(Value::String(s)) => s.push_str(&d),
                _ => {
                    msg.insert("content".into(), Value::String(d));
                }
            }
        }
        merge_into_wire(msg, metadata);
        if chunk {
            self.open_chunk = Some(id);
        } else if event_type == "TEXT_MESSAGE_END" && self.open_chunk.as_deref() == Some(&id) {
            self.open_chunk = None;
        }
    }
}

/// Reads a delta's patch (every malformed-patch rule, nothing applied: applying even to a
/// scratch object could be costly, as each `copy` of the root doubles it) and pushes the
/// warning of every dropped operation, in patch order.
fn read_patch<'p>(
    patch: &'p Value,
    id: &str,
    warnings: &mut Vec<Warning>,
) -> Result<Vec<Op<&'p Value>>, AguiError> {
    let Some(items) = patch.as_array() else {
        return Err(AguiError::malformed(
            codes::MALFORMED_PATCH,
            "a patch must be a JSON array of operations",
        ));
    };
    let mut dropped = Vec::new();
    let ops = parse_ops(items.iter(), Mode::AgUi, &mut dropped)
        .map_err(|f| malformed_patch(f.into_patch_error()))?;
    warnings.extend(dropped.into_iter().map(|w| {
        Warning::new(
            codes::PATCH_OP_DROPPED,
            "ACTIVITY_DELTA",
            Some(id),
            format!("patch operation {}: {} ({})", w.op_index, w.message, w.code),
        )
    }));
    Ok(ops)
}

fn malformed_patch(e: crate::patch::PatchError) -> AguiError {
    let at = match (e.op_index, &e.path) {
        (Some(i), Some(p)) => format!("operation {i} at {p:?}: "),
        (Some(i), None) => format!("operation {i}: "),
        _ => String::new(),
    };
    AguiError::malformed(codes::MALFORMED_PATCH, format!("{at}{}", e.message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agui::message::{measure, MAX_CONTENT_WEIGHT};
    use serde_json::json;

    fn run_started() -> Value {
        json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r"})
    }

    /// A store inside a run (RUN_STARTED handled, as the lifecycle requires) that took `events`.
    fn store(events: &[Value]) -> ActivityStore {
        let mut s = ActivityStore::new();
        s.handle_value(run_started()).unwrap();
        for e in events {
            s.handle_value(e.clone()).unwrap();
        }
        s
    }

    fn wire(s: &ActivityStore) -> Value {
        Value::Array(s.messages().iter().map(Message::to_wire).collect())
    }

    fn snap(id: &str, content: Value) -> Value {
        json!({"type": "ACTIVITY_SNAPSHOT", "messageId": id, "activityType": "t", "content": content})
    }

    fn delta(id: &str, patch: Value) -> Value {
        json!({"type": "ACTIVITY_DELTA", "messageId": id, "activityType": "t", "patch": patch})
    }

    fn codes_of(s: &ActivityStore) -> Vec<&'static str> {
        s.warnings().iter().map(|w| w.code).collect()
    }

    #[test]
    fn snapshot_creates_at_arrival_and_replaces_in_place() {
        let mut s = store(&[
            snap("a", json!({"n": 1})),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "hi"}),
            json!({"type": "TEXT_MESSAGE_END", "messageId": "m"}),
        ]);
        s.handle_value(json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "u", "content": {"n": 2}}))
            .unwrap();
        assert_eq!(
            wire(&s),
            json!([
                {"id": "a", "role": "activity", "activityType": "u", "content": {"n": 2}},
                {"id": "m", "role": "assistant", "content": "hi"}
            ])
        );
    }

    #[test]
    fn replace_false_keeps_content_type_and_owner_but_merges_metadata() {
        let s = store(&[
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t", "content": {"n": 1},
                   "subagentRunId": "sub-1", "metadata": {"k": 1, "j": 1}}),
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "other", "content": {"m": 2},
                   "replace": false, "subagentRunId": "sub-2", "metadata": {"k": 2}}),
        ]);
        assert_eq!(
            wire(&s),
            json!([{"id": "a", "role": "activity", "subagentRunId": "sub-1", "activityType": "t",
                    "content": {"n": 1}, "metadata": {"k": 2, "j": 1}}])
        );
        assert!(s.warnings().is_empty());
    }

    #[test]
    fn replace_false_creates_when_unseen() {
        let s = store(&[
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t",
                               "content": {"n": 1}, "replace": false}),
        ]);
        assert_eq!(
            wire(&s),
            json!([{"id": "a", "role": "activity", "activityType": "t", "content": {"n": 1}}])
        );
    }

    #[test]
    fn replacing_snapshot_remints_owner_and_keeps_metadata() {
        let s = store(&[
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t", "content": {},
                   "subagentRunId": "sub-1", "metadata": {"deep": {"x": 1}}}),
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t", "content": {"v": 1},
                   "metadata": {"deep": {"y": 2}}}),
        ]);
        assert_eq!(
            wire(&s),
            json!([{"id": "a", "role": "activity", "activityType": "t", "content": {"v": 1},
                    "metadata": {"deep": {"y": 2}}}])
        );
    }

    #[test]
    fn delta_patches_and_retypes() {
        let mut s = store(&[snap("a", json!({"steps": [], "n": 0}))]);
        s.handle_value(
            json!({"type": "ACTIVITY_DELTA", "messageId": "a", "activityType": "u",
                              "metadata": {"tick": 3},
                              "patch": [{"op": "add", "path": "/steps/-", "value": "x"},
                                        {"op": "replace", "path": "/n", "value": 1}]}),
        )
        .unwrap();
        assert_eq!(
            wire(&s),
            json!([{"id": "a", "role": "activity", "activityType": "u", "content": {"steps": ["x"], "n": 1},
                    "metadata": {"tick": 3}}])
        );
    }

    #[test]
    fn delta_that_does_not_apply_is_skipped_but_metadata_merges() {
        let mut s = store(&[snap("a", json!({"n": 0}))]);
        s.handle_value(json!({"type": "ACTIVITY_DELTA", "messageId": "a", "activityType": "u", "metadata": {"m": 1},
                              "patch": [{"op": "replace", "path": "/n", "value": 5},
                                        {"op": "remove", "path": "/missing"}]}))
            .unwrap();
        assert_eq!(
            wire(&s),
            json!([{"id": "a", "role": "activity", "activityType": "t", "content": {"n": 0}, "metadata": {"m": 1}}])
        );
        assert_eq!(codes_of(&s), vec![codes::PATCH_NOT_APPLIED]);
        s.handle_value(snap("a", json!({"fresh": true}))).unwrap();
        assert_eq!(
            s.get("a").unwrap().to_wire()["content"],
            json!({"fresh": true})
        );
    }

    #[test]
    fn delta_whose_result_is_not_an_object_is_skipped() {
        let mut s = store(&[snap("a", json!({"n": 0}))]);
        s.handle_value(delta(
            "a",
            json!([{"op": "replace", "path": "", "value": [1]}]),
        ))
        .unwrap();
        assert_eq!(s.get("a").unwrap().to_wire()["content"], json!({"n": 0}));
        assert_eq!(codes_of(&s), vec![codes::PATCH_RESULT_NOT_OBJECT]);
        s.handle_value(delta(
            "a",
            json!([{"op": "replace", "path": "", "value": {"root": 1}}]),
        ))
        .unwrap();
        assert_eq!(s.get("a").unwrap().to_wire()["content"], json!({"root": 1}));
    }

    #[test]
    fn delta_to_missing_or_non_activity_warns() {
        let mut s = store(&[json!({"type": "TEXT_MESSAGE_START", "messageId": "m"})]);
        s.handle_value(delta("nope", json!([]))).unwrap();
        s.handle_value(delta("m", json!([]))).unwrap();
        assert_eq!(
            codes_of(&s),
            vec![
                codes::DELTA_TARGET_MISSING,
                codes::DELTA_TARGET_NOT_ACTIVITY
            ]
        );
        let err = s
            .handle_value(delta(
                "nope",
                json!([{"op": "add", "path": "x", "value": 1}]),
            ))
            .unwrap_err();
        assert_eq!(err.code, codes::MALFORMED_PATCH);
    }

    #[test]
    fn a_move_into_its_own_child_is_skipped_with_a_warning() {
        let mut s = store(&[snap("a", json!({"x": {"y": 1}}))]);
        let into_child = json!([{"op": "move", "from": "/x", "path": "/x/y/z"}]);
        s.handle_value(delta("a", into_child.clone())).unwrap();
        s.handle_value(delta("missing", into_child.clone()))
            .unwrap();
        s.feed(format!("{}\n", delta("a", into_child)).as_bytes())
            .unwrap();
        assert_eq!(
            codes_of(&s),
            vec![
                codes::PATCH_NOT_APPLIED,
                codes::DELTA_TARGET_MISSING,
                codes::PATCH_NOT_APPLIED
            ]
        );
        assert_eq!(
            s.get("a").unwrap().to_wire()["content"],
            json!({"x": {"y": 1}})
        );
    }

    #[test]
    fn unknown_op_is_dropped_with_a_warning_and_extra_members_kept() {
        let mut s = store(&[snap("a", json!({"n": 0}))]);
        s.handle_value(delta(
            "a",
            json!([{"op": "frobnicate", "path": "/n"}, {"op": "add", "path": "/o", "value": {"x": 1}, "extra": true}]),
        ))
        .unwrap();
        assert_eq!(
            s.get("a").unwrap().to_wire()["content"],
            json!({"n": 0, "o": {"x": 1}})
        );
        assert_eq!(codes_of(&s), vec![codes::PATCH_OP_DROPPED]);
    }

    #[test]
    fn a_dropped_op_warns_first_whatever_happens_to_the_rest() {
        let dropped = json!({"op": "frobnicate", "path": "/n"});
        let cases = [
            (
                delta("a", json!([dropped, {"op": "remove", "path": "/missing"}])),
                codes::PATCH_NOT_APPLIED,
            ),
            (
                delta(
                    "a",
                    json!([dropped, {"op": "replace", "path": "", "value": 1}]),
                ),
                codes::PATCH_RESULT_NOT_OBJECT,
            ),
            (
                delta("missing", json!([dropped])),
                codes::DELTA_TARGET_MISSING,
            ),
        ];
        for (event, then) in cases {
            for bytes in [false, true] {
                let mut s = store(&[snap("a", json!({"n": 0}))]);
                if bytes {
                    s.feed(format!("{event}\n").as_bytes()).unwrap();
                } else {
                    s.handle_value(event.clone()).unwrap();
                }
                assert_eq!(codes_of(&s), vec![codes::PATCH_OP_DROPPED, then], "{event}");
                assert_eq!(s.get("a").unwrap().to_wire()["content"], json!({"n": 0}));
            }
        }
    }

    fn on(year: i32, month: u32, day: u32) -> StoreOptions {
        StoreOptions {
            today: Date::new(year, month, day),
            ..StoreOptions::default()
        }
    }

    #[test]
    fn raw_event_null_is_absent_with_a_warning_until_it_expires() {
        let with_null = |mut ev: Value| {
            ev["rawEvent"] = Value::Null;
            ev
        };
        let events = [
            with_null(snap("a", json!({"n": 0}))),
            with_null(delta(
                "a",
                json!([{"op": "replace", "path": "/n", "value": 1}]),
            )),
            with_null(json!({"type": "FUTURE_THING"})),
        ];
        let mut s = ActivityStore::with_options(on(2027, 9, 7));
        s.handle_value(run_started()).unwrap();
        for ev in &events {
            s.handle_value(ev.clone()).unwrap();
        }
        // The delta as text too (the fast path declines it; the general path warns).
        s.feed(format!("{}\n", events[1]).as_bytes()).unwrap();
        assert_eq!(
            codes_of(&s),
            vec![
                codes::RAW_EVENT_NULL,
                codes::RAW_EVENT_NULL,
                codes::RAW_EVENT_NULL,
                codes::UNKNOWN_EVENT_TYPE,
                codes::RAW_EVENT_NULL
            ]
        );
        assert_eq!(s.get("a").unwrap().to_wire()["content"], json!({"n": 1}));
        // A non-null rawEvent is any JSON value, as before, and never warns.
        let mut raw = snap("b", json!({}));
        raw["rawEvent"] = json!({"source": "vendor"});
        s.handle_value(raw).unwrap();
        assert_eq!(s.warnings().len(), 5);

        // On the expiry date, after it, and without a date: fatal like any other null.
        for options in [on(2027, 9, 8), on(2031, 1, 1), StoreOptions::default()] {
            let mut s = ActivityStore::with_options(options);
            s.handle_value(run_started()).unwrap();
            for ev in &events {
                let err = s.handle_value(ev.clone()).unwrap_err();
                assert_eq!(
                    (err.kind, err.code),
                    (ErrorKind::Malformed, codes::NULL_VALUE)
                );
                assert!(err.reason.contains("rawEvent"), "{err}");
            }
            let err = s.feed(format!("{}\n", events[0]).as_bytes()).unwrap_err();
            assert_eq!(err.code, codes::NULL_VALUE);
            assert!(s.messages().is_empty() && s.warnings().is_empty());
        }
    }

    #[test]
    fn attribution_rules() {
        let mut s = store(&[
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t",
                                   "content": {"n": 0}, "subagentRunId": "sub-1"}),
        ]);
        let before = wire(&s);
        let mut tagged = delta("a", json!([{"op": "replace", "path": "/n", "value": 1}]));
        tagged["subagentRunId"] = json!("sub-2");
        let err = s.handle_value(tagged.clone()).unwrap_err();
        assert_eq!(
            (err.kind, err.code),
            (ErrorKind::Attribution, codes::ATTRIBUTION_MISMATCH)
        );
        assert_eq!(wire(&s), before);
        tagged["subagentRunId"] = json!("sub-1");
        s.handle_value(tagged).unwrap();
        s.handle_value(delta(
            "a",
            json!([{"op": "replace", "path": "/n", "value": 2}]),
        ))
        .unwrap();
        assert_eq!(s.get("a").unwrap().to_wire()["content"], json!({"n": 2}));
        // A parent-owned activity rejects a subagent-tagged delta.
        let mut p = store(&[snap("b", json!({}))]);
        let mut tagged = delta("b", json!([]));
        tagged["subagentRunId"] = json!("sub-1");
        assert_eq!(
            p.handle_value(tagged).unwrap_err().code,
            codes::ATTRIBUTION_MISMATCH
        );
    }

    #[test]
    fn malformed_values_are_fatal_and_change_nothing() {
        let base = store(&[snap("a", json!({"n": 0}))]);
        let bad = [
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t", "content": [1]}),
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t", "content": {}, "replace": "no"}),
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t", "content": {}, "replace": null}),
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t", "content": {}, "metadata": null}),
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t", "content": {}, "subagentRunId": null}),
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t", "content": {}, "timestamp": 1.5}),
            json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "content": {}}),
            json!({"type": "ACTIVITY_DELTA", "messageId": "a", "activityType": "t", "patch": [{"op": "add", "path": "/~2", "value": 1}]}),
            json!({"type": "ACTIVITY_DELTA", "messageId": "a", "activityType": "t", "patch": {"op": "add"}}),
            json!({"type": "MESSAGES_SNAPSHOT", "messages": [{"id": "x", "role": "activity", "activityType": "t", "content": "s"}]}),
            json!({"type": 7}),
            json!([1]),
        ];
        for ev in bad {
            let mut s = store(&[snap("a", json!({"n": 0}))]);
            let err = s.handle_value(ev.clone()).unwrap_err();
            assert!(matches!(err.kind, ErrorKind::Malformed), "{ev}: {err}");
            assert_eq!(wire(&s), wire(&base), "{ev}");
            assert!(s.warnings().is_empty());
        }
    }

    #[test]
    fn unknown_types_and_properties_warn() {
        let mut s = store(&[]);
        s.handle_value(json!({"type": "FUTURE_THING", "x": 1}))
            .unwrap();
        s.handle_value(json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "a", "activityType": "t",
                              "content": {"open": {"any": 1}}, "metadata": {"also": "open"}, "surprise": 1}))
            .unwrap();
        assert_eq!(
            codes_of(&s),
            vec![codes::UNKNOWN_EVENT_TYPE, codes::UNKNOWN_PROPERTY]
        );
        assert_eq!(
            s.get("a").unwrap().to_wire()["content"],
            json!({"open": {"any": 1}})
        );
    }

    #[test]
    fn messages_snapshot_reconciles() {
        let mut s = store(&[
            json!({"type": "TEXT_MESSAGE_START", "messageId": "u1", "role": "user"}),
            snap("act", json!({"n": 1})),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m1"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "gone"}),
        ]);
        s.handle_value(json!({"type": "MESSAGES_SNAPSHOT", "messages": [
            {"id": "new", "role": "user", "content": "later", "junk": 1},
            {"id": "m1", "role": "assistant", "content": "replaced"},
            {"id": "u1", "role": "user", "content": "hello"},
        ]}))
        .unwrap();
        let ids: Vec<_> = s.messages().iter().map(|m| m.id().to_owned()).collect();
        assert_eq!(ids, ["u1", "act", "m1", "new"]);
        assert_eq!(s.get("m1").unwrap().to_wire()["content"], json!("replaced"));
        assert_eq!(
            s.get("new").unwrap().to_wire(),
            json!({"id": "new", "role": "user", "content": "later"})
        );
        assert_eq!(codes_of(&s), vec![codes::UNKNOWN_PROPERTY]);
        // A snapshot that carries an activity message drops held activities it omits.
        s.handle_value(json!({"type": "MESSAGES_SNAPSHOT", "messages": [
            {"id": "act2", "role": "activity", "activityType": "t", "content": {}},
        ]}))
        .unwrap();
        let ids: Vec<_> = s.messages().iter().map(|m| m.id().to_owned()).collect();
        assert_eq!(ids, ["act2"]);
        let input: Vec<_> = s.run_input_messages().collect();
        assert!(input.is_empty());
    }

    #[test]
    fn text_chunks_build_messages() {
        let s = store(&[
            json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": "c", "delta": "a"}),
            json!({"type": "TEXT_MESSAGE_CHUNK", "delta": "b", "metadata": {"k": 1}}),
            json!({"type": "TEXT_MESSAGE_CHUNK", "delta": "c"}),
        ]);
        assert_eq!(
            wire(&s),
            json!([{"id": "c", "role": "assistant", "content": "abc", "metadata": {"k": 1}}])
        );
    }

    fn nested(levels: usize) -> Value {
        let mut v = json!({});
        for _ in 0..levels {
            v = json!({ "a": v });
        }
        v
    }

    #[test]
    fn deltas_never_nest_content_past_the_limit() {
        let mut s = store(&[snap("a", json!({}))]);
        let mut chain = 0;
        for _ in 0..10 {
            // Add 100 more levels at the deepest point of the chain of "a" members.
            let path = "/a".repeat(chain + 1);
            let before = s.get("a").unwrap().to_wire();
            s.handle_value(delta(
                "a",
                json!([{"op": "add", "path": path, "value": nested(99)}]),
            ))
            .unwrap();
            if s.warnings().is_empty() {
                chain += 100;
            } else {
                assert_eq!(codes_of(&s), vec![codes::CONTENT_TOO_DEEP]);
                assert_eq!(s.get("a").unwrap().to_wire(), before);
                break;
            }
        }
        let Some(Message::Activity(a)) = s.get("a") else {
            panic!("no activity")
        };
        assert_eq!(codes_of(&s), vec![codes::CONTENT_TOO_DEEP]);
        assert!(measure(&a.content).0 <= MAX_CONTENT_DEPTH);
        assert_eq!(measure(&a.content).0, chain + 1);
    }

    #[test]
    fn the_depth_bound_is_remeasured_before_refusing() {
        // Each copy raises the conservative bound by one; the real depth stays at 3.
        let mut s = store(&[snap("a", json!({"a": {"x": [1]}, "b": {}}))]);
        for _ in 0..2 * MAX_CONTENT_DEPTH {
            s.handle_value(delta(
                "a",
                json!([{"op": "copy", "from": "/a", "path": "/b/c"}]),
            ))
            .unwrap();
        }
        assert!(s.warnings().is_empty(), "{:?}", s.warnings());
        assert_eq!(
            s.get("a").unwrap().to_wire()["content"],
            json!({"a": {"x": [1]}, "b": {"c": {"x": [1]}}})
        );
    }

    #[test]
    fn copy_bombs_stop_at_the_weight_limit() {
        let mut s = store(&[snap("a", json!({"s": "x".repeat(1000)}))]);
        for i in 0..40 {
            s.handle_value(delta(
                "a",
                json!([{"op": "copy", "from": "", "path": format!("/c{i}")}]),
            ))
            .unwrap();
        }
        let Some(Message::Activity(a)) = s.get("a") else {
            panic!("no activity")
        };
        assert!(measure(&a.content).1 <= MAX_CONTENT_WEIGHT);
        let skipped = codes_of(&s);
        assert!(
            !skipped.is_empty() && skipped.iter().all(|c| *c == codes::CONTENT_TOO_LARGE),
            "{skipped:?}"
        );
        // Doubling stops near the limit, not long before it.
        assert!(measure(&a.content).1 > MAX_CONTENT_WEIGHT / 4);
        // One delta with many copies is refused before any of it is applied.
        let mut t = store(&[snap("a", json!({"s": "x".repeat(1000)}))]);
        let bomb: Vec<Value> = (0..40)
            .map(|i| json!({"op": "copy", "from": "", "path": format!("/c{i}")}))
            .collect();
        t.handle_value(delta("a", Value::Array(bomb.clone())))
            .unwrap();
        assert_eq!(codes_of(&t), vec![codes::CONTENT_TOO_LARGE]);
        // Nor is it tried out on a scratch document when the target is missing.
        t.handle_value(delta("missing", Value::Array(bomb)))
            .unwrap();
        assert_eq!(
            codes_of(&t),
            vec![codes::CONTENT_TOO_LARGE, codes::DELTA_TARGET_MISSING]
        );
        assert_eq!(
            t.get("a").unwrap().to_wire()["content"],
            json!({"s": "x".repeat(1000)})
        );
    }

    #[test]
    fn a_big_snapshot_may_still_take_deltas() {
        let big = "x".repeat(MAX_CONTENT_WEIGHT);
        let mut s = store(&[snap(
            "a",
            json!({"log": [big], "n": 0, "small": {"k": [1, 2]}}),
        )]);
        // Small copies count what they copy once measured, not the whole document.
        for i in 0..20 {
            s.handle_value(delta(
                "a",
                json!([
                    {"op": "replace", "path": "/n", "value": i},
                    {"op": "add", "path": "/log/-", "value": "y"},
                    {"op": "copy", "from": "/small", "path": format!("/c{i}")},
                ]),
            ))
            .unwrap();
        }
        assert!(s.warnings().is_empty(), "{:?}", s.warnings());
        let content = s.get("a").unwrap().to_wire()["content"].clone();
        assert_eq!(content["n"], json!(19));
        assert_eq!(content["c19"], json!({"k": [1, 2]}));
    }

    #[test]
    fn a_too_deep_delta_is_still_fatal_when_malformed() {
        let mut s = store(&[snap("a", json!({}))]);
        let err = s
            .handle_value(delta(
                "a",
                json!([{"op": "add", "path": "/x", "value": nested(600)}, {"op": "add", "path": "bad"}]),
            ))
            .unwrap_err();
        assert_eq!(err.code, codes::MALFORMED_PATCH);
    }

    fn finished(thread: &str, run: &str) -> Value {
        json!({"type": "RUN_FINISHED", "threadId": thread, "runId": run})
    }

    fn sequence_error(s: &mut ActivityStore, ev: Value) -> &'static str {
        let before = (wire(s), s.warnings().len(), s.events_handled());
        let err = s.handle_value(ev.clone()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Sequence, "{ev}: {err}");
        assert_eq!((wire(s), s.warnings().len(), s.events_handled()), before);
        err.code
    }

    #[test]
    fn the_run_lifecycle_is_enforced() {
        // The first event is RUN_STARTED or RUN_ERROR.
        for first in [
            snap("a", json!({})),
            delta("a", json!([])),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m"}),
            json!({"type": "FUTURE_THING"}),
            finished("t", "r"),
        ] {
            let mut s = ActivityStore::new();
            assert_eq!(
                sequence_error(&mut s, first.clone()),
                codes::RUN_NOT_STARTED
            );
            // The refused event changed nothing: the stream may still begin properly.
            s.handle_value(run_started()).unwrap();
        }
        let mut s = ActivityStore::new();
        s.handle_value(json!({"type": "RUN_ERROR", "message": "could not start"}))
            .unwrap();
        assert_eq!(
            sequence_error(&mut s, snap("a", json!({}))),
            codes::EVENT_AFTER_RUN_FINISHED
        );

        // No second RUN_STARTED while a run is open.
        let mut s = store(&[snap("a", json!({"n": 0}))]);
        let again = json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r2"});
        assert_eq!(
            sequence_error(&mut s, again.clone()),
            codes::RUN_ALREADY_STARTED
        );
        assert_eq!(
            sequence_error(&mut s, run_started()),
            codes::RUN_ALREADY_STARTED
        );

        // RUN_FINISHED names the open run's thread and run.
        assert_eq!(
            sequence_error(&mut s, finished("t", "r2")),
            codes::RUN_ID_MISMATCH
        );
        assert_eq!(
            sequence_error(&mut s, finished("t2", "r")),
            codes::RUN_ID_MISMATCH
        );
        s.handle_value(finished("t", "r")).unwrap();

        // After RUN_FINISHED: only a new RUN_STARTED or a late RUN_ERROR.
        for late in [
            snap("a", json!({})),
            delta("a", json!([])),
            json!({"type": "FUTURE_THING"}),
            finished("t", "r"),
        ] {
            assert_eq!(
                sequence_error(&mut s, late),
                codes::EVENT_AFTER_RUN_FINISHED
            );
        }
        // The fast path declines after the end too.
        let err = s
            .feed(
                format!(
                    "{}\n",
                    delta("a", json!([{"op": "replace", "path": "/n", "value": 1}]))
                )
                .as_bytes(),
            )
            .unwrap_err();
        assert_eq!(err.code, codes::EVENT_AFTER_RUN_FINISHED);
        s.handle_value(json!({"type": "RUN_ERROR", "message": "late"}))
            .unwrap();
        s.handle_value(again).unwrap();
        s.handle_value(delta(
            "a",
            json!([{"op": "replace", "path": "/n", "value": 2}]),
        ))
        .unwrap();
        s.handle_value(json!({"type": "RUN_ERROR", "message": "failed"}))
            .unwrap();
        assert_eq!(s.get("a").unwrap().to_wire()["content"], json!({"n": 2}));
        assert!(s.warnings().is_empty());
    }

    #[test]
    fn a_partial_capture_may_begin_mid_run() {
        let partial = StoreOptions {
            lifecycle: Lifecycle::Partial,
            ..StoreOptions::default()
        };
        let mut s = ActivityStore::with_options(partial);
        s.feed(format!("{}\n", snap("a", json!({"n": 0}))).as_bytes())
            .unwrap();
        s.feed(
            format!(
                "{}\n",
                delta("a", json!([{"op": "replace", "path": "/n", "value": 1}]))
            )
            .as_bytes(),
        )
        .unwrap();
        // The capture's run has unknown ids: its RUN_FINISHED is taken as it is.
        s.handle_value(finished("some", "run")).unwrap();
        assert_eq!(
            sequence_error(&mut s, snap("b", json!({}))),
            codes::EVENT_AFTER_RUN_FINISHED
        );
        s.handle_value(run_started()).unwrap();
        // From the first run event on, every rule applies.
        assert_eq!(
            sequence_error(&mut s, run_started()),
            codes::RUN_ALREADY_STARTED
        );
        assert_eq!(
            sequence_error(&mut s, finished("t", "other")),
            codes::RUN_ID_MISMATCH
        );
        assert_eq!(s.get("a").unwrap().to_wire()["content"], json!({"n": 1}));
        // A partial capture that does start with RUN_STARTED is read strictly from there.
        let mut s = ActivityStore::with_options(partial);
        s.handle_value(run_started()).unwrap();
        assert_eq!(
            sequence_error(&mut s, run_started()),
            codes::RUN_ALREADY_STARTED
        );
    }

    #[test]
    fn feed_bytes_split_anywhere_equals_dicts() {
        let events = [
            snap("a", json!({"steps": [], "n": "é"})),
            delta("a", json!([{"op": "add", "path": "/steps/-", "value": 1}])),
            json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": "c", "delta": "x\ny"}),
        ];
        let expected = wire(&store(&events));
        let mut sse = Vec::new();
        for e in std::iter::once(&run_started()).chain(&events) {
            sse.extend_from_slice(b"data: ");
            sse.extend_from_slice(&serde_json::to_vec(e).unwrap());
            sse.extend_from_slice(b"\n\n");
        }
        for cut in 0..=sse.len() {
            let mut s = ActivityStore::new();
            s.feed(&sse[..cut]).unwrap();
            s.feed(&sse[cut..]).unwrap();
            s.finish().unwrap();
            assert_eq!(wire(&s), expected, "cut at {cut}");
        }
    }

    #[test]
    fn fatal_event_in_a_feed_keeps_earlier_events_and_buffers_later_ones() {
        let mut s = store(&[]);
        let input = b"{\"type\":\"ACTIVITY_SNAPSHOT\",\"messageId\":\"a\",\"activityType\":\"t\",\"content\":{}}\n\
{\"type\":\"ACTIVITY_SNAPSHOT\",\"messageId\":\"b\",\"activityType\":\"t\",\"content\":1}\n\
{\"type\":\"ACTIVITY_SNAPSHOT\",\"messageId\":\"c\",\"activityType\":\"t\",\"content\":{}}\n";
        assert_eq!(s.feed(input).unwrap_err().code, codes::WRONG_TYPE);
        assert_eq!(s.messages().len(), 1);
        s.feed(b"").unwrap();
        let ids: Vec<_> = s.messages().iter().map(|m| m.id().to_owned()).collect();
        assert_eq!(ids, ["a", "c"]);
    }
}

#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn pieces() -> impl Strategy<Value = Vec<u8>> {
        let atoms = prop::sample::select(vec![
            &b"data: "[..],
            b"\n",
            b"\r\n",
            b"\r",
            b"{",
            b"}",
            b"\"type\":\"ACTIVITY_DELTA\",",
            b"\"type\":\"ACTIVITY_SNAPSHOT\",",
            b"\"messageId\":\"a\",",
            b"\"activityType\":\"t\",",
            b"\"content\":{},",
            b"\"patch\":[{\"op\":\"add\",\"path\":\"/x\",\"value\":1}]",
            b"\"patch\":[{\"op\":\"replace\",\"path\":\"\",\"value\":2}]",
            b"null",
            b":",
            b",",
            b"\xff",
        ]);
        prop::collection::vec(atoms, 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        /// Any bytes, split anywhere: each call gives Ok or a typed error, never a panic, and
        /// every activity keeps object content.
        #[test]
        fn any_bytes_any_split(data in prop_oneof![pieces(), prop::collection::vec(any::<u8>(), 0..200)],
                               cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
                               partial in any::<bool>()) {
            let mut bounds: Vec<usize> = cuts.iter().map(|c| c.index(data.len() + 1)).collect();
            bounds.push(0);
            bounds.push(data.len());
            bounds.sort_unstable();
            let lifecycle = if partial { Lifecycle::Partial } else { Lifecycle::Strict };
            let mut s = ActivityStore::with_options(StoreOptions { lifecycle, ..StoreOptions::default() });
            if !partial {
                s.feed(b"{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\"}\n").unwrap();
            }
            for w in bounds.windows(2) {
                let _ = s.feed(&data[w[0]..w[1]]);
            }
            let _ = s.finish();
            let _ = s.feed(b"");
            for m in s.messages() {
                if let Message::Activity(a) = m {
                    prop_assert!(a.content.is_object());
                }
            }
        }
    }
}
