//! The subscriber side of the transport: reads frames and says when the canonical state must be
//! re-read.
//!
//! Rules, all here. With `next` the seq expected in the current epoch:
//! - a frame of another epoch (or the first frame, when no position is known): `epoch_change`;
//!   the new epoch is adopted, its deliveries pass, a re-read is needed;
//! - `seq == next`: in order, its deliveries pass;
//! - `seq > next`: `gap`; the missing seqs are reported, the deliveries pass, a re-read is
//!   needed;
//! - `seq < next`, seen before with the same bytes: `duplicate`, dropped, nothing lost;
//!   with other bytes: `conflicting_duplicate`, dropped, a re-read is needed;
//! - `seq < next`, one of the missing seqs: `reorder`; not applied now but kept, a re-read is
//!   needed (and `resync` replays it in seq order when the read is older than it); an unknown
//!   older seq (beyond the window): `reorder`, dropped, a re-read is needed;
//! - `seq` at or below the position of the last canonical read: `stale`, dropped, nothing lost;
//! - a discontinuity delivery: a re-read is needed.
//!
//! While a re-read is pending the deliveries that pass are also kept; `resync(epoch, seq)`,
//! called once the overlay holds the canonical record as of that position, returns the kept
//! deliveries of later frames, in seq order, so they apply on top. The re-read stays needed while a seq above
//! that position is still missing. A frame that is not valid puts the subscriber in its failed
//! state (every later frame is refused) until `resync`. Sans-I/O, single owner.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use sha2::{Digest, Sha256};

use crate::live::error::{Code, LiveError};
use crate::live::frame::{parse_frame, Delivery};

/// A fault the subscriber detected in the frame sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    Gap,
    Duplicate,
    ConflictingDuplicate,
    Reorder,
    Stale,
    EpochChange,
}

impl Fault {
    pub const ALL: &'static [Fault] = &[
        Fault::Gap,
        Fault::Duplicate,
        Fault::ConflictingDuplicate,
        Fault::Reorder,
        Fault::Stale,
        Fault::EpochChange,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Fault::Gap => "gap",
            Fault::Duplicate => "duplicate",
            Fault::ConflictingDuplicate => "conflicting_duplicate",
            Fault::Reorder => "reorder",
            Fault::Stale => "stale",
            Fault::EpochChange => "epoch_change",
        }
    }
}

/// What one frame meant.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameOutcome {
    pub epoch: u64,
    pub seq: u64,
    pub fault: Option<Fault>,
    /// The seqs this frame revealed as missing (a gap): the latest `window` of them at most.
    pub missing: Vec<u64>,
    /// Deliveries to apply now, in order (empty when the frame was dropped).
    pub deliveries: Vec<Delivery>,
    /// Whether the canonical state must be re-read (after this frame).
    pub reread: bool,
}

pub const DEFAULT_WINDOW: usize = 1024;

#[derive(Debug)]
pub struct Subscriber {
    epoch: Option<u64>,
    next: u64,
    floor: u64,
    seen: HashMap<u64, [u8; 32]>,
    seen_order: VecDeque<u64>,
    missing: BTreeSet<u64>,
    needs_reread: bool,
    kept: BTreeMap<u64, Vec<Delivery>>,
    kept_lost_through: u64,
    window: usize,
    failed: Option<LiveError>,
}

impl Subscriber {
    /// A subscriber whose overlay holds the canonical record as of (`epoch`, `seq`), or, with
    /// `epoch` None, one that has read nothing yet (so it needs a re-read).
    pub fn new(epoch: Option<u64>, seq: u64, window: usize) -> Result<Self, LiveError> {
        if window == 0 {
            return Err(LiveError::new(
                Code::InvalidConfig,
                "",
                "window must be at least 1",
            ));
        }
        Ok(Subscriber {
            epoch,
            next: seq + 1,
            floor: seq,
            seen: HashMap::new(),
            seen_order: VecDeque::new(),
            missing: BTreeSet::new(),
            needs_reread: epoch.is_none(),
            kept: BTreeMap::new(),
            kept_lost_through: 0,
            window,
            failed: None,
        })
    }

    pub fn epoch(&self) -> Option<u64> {
        self.epoch
    }
    /// The highest seq accepted in the current epoch.
    pub fn last_seq(&self) -> u64 {
        self.next - 1
    }
    pub fn needs_reread(&self) -> bool {
        self.needs_reread
    }
    pub fn missing(&self) -> Vec<u64> {
        self.missing.iter().copied().collect()
    }
    pub fn failed(&self) -> Option<&LiveError> {
        self.failed.as_ref()
    }

    fn remember(&mut self, seq: u64, digest: [u8; 32]) {
        if self.seen.insert(seq, digest).is_none() {
            self.seen_order.push_back(seq);
        }
        while self.seen_order.len() > self.window {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen.remove(&old);
            }
        }
    }

    fn keep(&mut self, seq: u64, deliveries: &[Delivery]) {
        self.kept.insert(seq, deliveries.to_vec());
        while self.kept.len() > self.window {
            if let Some((s, _)) = self.kept.pop_first() {
                self.kept_lost_through = self.kept_lost_through.max(s);
            }
        }
    }

    /// Reads one frame.
    pub fn handle_frame(&mut self, bytes: &[u8]) -> Result<FrameOutcome, LiveError> {
        if let Some(e) = &self.failed {
            return Err(LiveError::new(
                Code::SubscriberFailed,
                "",
                format!("an earlier frame was invalid ({e}); resync first"),
            ));
        }
        let frame = match parse_frame(bytes) {
            Ok(f) => f,
            Err(e) => {
                self.failed = Some(e.clone());
                self.needs_reread = true;
                return Err(e);
            }
        };
        let digest: [u8; 32] = Sha256::digest(bytes).into();
        let (epoch, seq) = (frame.epoch, frame.seq);
        let mut out = FrameOutcome {
            epoch,
            seq,
            fault: None,
            missing: Vec::new(),
            deliveries: Vec::new(),
            reread: false,
        };
        let pass = if self.epoch != Some(epoch) {
            self.epoch = Some(epoch);
            self.next = seq + 1;
            self.floor = 0;
            self.seen.clear();
            self.seen_order.clear();
            self.missing.clear();
            self.kept.clear();
            self.kept_lost_through = 0;
            self.needs_reread = true;
            out.fault = Some(Fault::EpochChange);
            true
        } else if seq == self.next {
            self.next += 1;
            true
        } else if seq > self.next {
            // At most `window` of them, the latest: a peer's seq far ahead (2^53 - 1 is a valid
            // one) must not make a list of every seq between (it aborted the process). Older
            // ones cannot be placed anyway: their state comes from the re-read.
            let from = self.next.max(seq.saturating_sub(self.window as u64));
            out.missing = (from..seq).collect();
            self.missing.extend(from..seq);
            while self.missing.len() > self.window {
                self.missing.pop_first();
            }
            self.next = seq + 1;
            self.needs_reread = true;
            out.fault = Some(Fault::Gap);
            true
        } else if self.missing.remove(&seq) {
            // Too late to apply now; kept, so a re-read older than it still replays it in order.
            self.needs_reread = true;
            out.fault = Some(Fault::Reorder);
            self.remember(seq, digest);
            self.keep(seq, &frame.deliveries);
            false
        } else if let Some(d) = self.seen.get(&seq) {
            if *d == digest {
                out.fault = Some(Fault::Duplicate);
            } else {
                self.needs_reread = true;
                out.fault = Some(Fault::ConflictingDuplicate);
            }
            false
        } else if seq <= self.floor {
            out.fault = Some(Fault::Stale);
            false
        } else {
            // Older than the window: it cannot be placed, so its state must come from a re-read.
            self.needs_reread = true;
            out.fault = Some(Fault::Reorder);
            false
        };
        if pass {
            self.remember(seq, digest);
            if frame
                .deliveries
                .iter()
                .any(|d| matches!(d, Delivery::Discontinuity(_)))
            {
                self.needs_reread = true;
            }
            if self.needs_reread {
                self.keep(seq, &frame.deliveries);
            }
            out.deliveries = frame.deliveries;
        }
        out.reread = self.needs_reread;
        Ok(out)
    }

    /// The overlay now holds the canonical record as of (`epoch`, `seq`). Returns the kept
    /// deliveries of later frames, to apply on top, in order.
    pub fn resync(&mut self, epoch: u64, seq: u64) -> Vec<Delivery> {
        let was_failed = self.failed.take().is_some();
        if self.epoch != Some(epoch) {
            // Nothing read yet, or the connection failed (its replacement starts afresh): adopt
            // the record's epoch.
            let adopt = self.epoch.is_none() || was_failed;
            if !adopt {
                // The record is of another epoch than the stream: it cannot be placed.
                self.needs_reread = true;
                return Vec::new();
            }
            self.epoch = Some(epoch);
            self.next = seq + 1;
            self.seen.clear();
            self.seen_order.clear();
            self.missing.clear();
            self.kept.clear();
        }
        self.floor = self.floor.max(seq);
        if self.next <= seq {
            self.next = seq + 1;
        }
        self.missing.retain(|&m| m > seq);
        let mut replay = Vec::new();
        let mut discontinuity = false;
        for (s, ds) in std::mem::take(&mut self.kept) {
            if s > seq {
                discontinuity |= ds.iter().any(|d| matches!(d, Delivery::Discontinuity(_)));
                replay.extend(ds);
            }
        }
        self.needs_reread =
            !self.missing.is_empty() || discontinuity || self.kept_lost_through > seq;
        self.kept_lost_through = 0;
        replay
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::event::Identity;
    use crate::live::framer::{FramerConfig, Publisher};

    fn publisher() -> Publisher {
        Publisher::new(
            Identity {
                workspace_id: "w".into(),
                agent_session_id: "s".into(),
            },
            7,
            FramerConfig::default(),
        )
        .unwrap()
    }

    fn frames(p: &mut Publisher, n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                p.tool_output("m", "t", &format!("line {i}\n"), 1).unwrap();
                p.poll_frame().unwrap().to_json()
            })
            .collect()
    }

    #[test]
    fn in_order_frames_pass() {
        let mut p = publisher();
        let f = frames(&mut p, 3);
        let mut s = Subscriber::new(Some(7), 0, 16).unwrap();
        for b in &f {
            let o = s.handle_frame(b).unwrap();
            assert_eq!((o.fault, o.reread, o.deliveries.len()), (None, false, 1));
        }
        assert_eq!(s.last_seq(), 3);
    }

    #[test]
    fn each_fault_is_named() {
        let mut p = publisher();
        let f = frames(&mut p, 6);
        let mut s = Subscriber::new(Some(7), 0, 16).unwrap();
        s.handle_frame(&f[0]).unwrap();
        let dup = s.handle_frame(&f[0]).unwrap();
        assert_eq!((dup.fault, dup.reread), (Some(Fault::Duplicate), false));
        assert!(dup.deliveries.is_empty());
        let gap = s.handle_frame(&f[2]).unwrap();
        assert_eq!((gap.fault, gap.reread), (Some(Fault::Gap), true));
        assert_eq!(gap.missing, vec![2]);
        let late = s.handle_frame(&f[1]).unwrap();
        assert_eq!(late.fault, Some(Fault::Reorder));
        assert!(late.deliveries.is_empty());
        // The record as of seq 2 covers frames 1-2; frame 3 was kept and replays on top.
        let replay = s.resync(7, 2);
        assert_eq!(replay.len(), 1);
        assert!(!s.needs_reread());
        let mut fresh = publisher();
        let old = frames(&mut fresh, 1);
        let mut t = Subscriber::new(Some(7), 5, 16).unwrap();
        let stale = t.handle_frame(&old[0]).unwrap();
        assert_eq!((stale.fault, stale.reread), (Some(Fault::Stale), false));
        // Frame 2 again: seen (kept when it arrived late), so a harmless duplicate.
        let again = s.handle_frame(&f[1]).unwrap();
        assert_eq!((again.fault, again.reread), (Some(Fault::Duplicate), false));
        // Same seq, other bytes.
        let mut other = publisher();
        let g = frames(&mut other, 5);
        let mut alt = String::from_utf8(g[3].clone()).unwrap();
        alt = alt.replace("line 3", "line X");
        let o = s.handle_frame(&f[3]).unwrap();
        assert_eq!(o.fault, None);
        let c = s.handle_frame(alt.as_bytes()).unwrap();
        assert_eq!(
            (c.fault, c.reread),
            (Some(Fault::ConflictingDuplicate), true)
        );
        // Another epoch.
        let mut q = Publisher::new(
            Identity {
                workspace_id: "w".into(),
                agent_session_id: "s".into(),
            },
            8,
            FramerConfig::default(),
        )
        .unwrap();
        let h = frames(&mut q, 1);
        let e = s.handle_frame(&h[0]).unwrap();
        assert_eq!((e.fault, e.reread), (Some(Fault::EpochChange), true));
    }

    #[test]
    fn a_late_frame_newer_than_the_read_replays_in_order() {
        let mut p = publisher();
        let f = frames(&mut p, 4);
        let mut s = Subscriber::new(Some(7), 0, 16).unwrap();
        s.handle_frame(&f[0]).unwrap();
        s.handle_frame(&f[2]).unwrap(); // 2 missing
        s.handle_frame(&f[3]).unwrap();
        let late = s.handle_frame(&f[1]).unwrap();
        assert_eq!(late.fault, Some(Fault::Reorder));
        assert!(late.deliveries.is_empty());
        // A read as of seq 1 replays 2, 3, 4 in seq order.
        let replay = s.resync(7, 1);
        let seqs: Vec<u64> = replay
            .iter()
            .map(|d| match d {
                Delivery::Event(crate::live::LiveEvent::MessageDelta(m)) => match &m.tool_output {
                    Some(crate::live::ToolOutput::AppendText { offset_bytes, .. }) => *offset_bytes,
                    _ => 0,
                },
                _ => u64::MAX,
            })
            .collect();
        assert_eq!(seqs.len(), 3);
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
        assert!(!s.needs_reread());
    }

    #[test]
    fn a_seq_far_ahead_reports_a_bounded_gap() {
        let mut s = Subscriber::new(Some(1), 0, 4).unwrap();
        let frame = br#"{"epoch":1,"seq":9007199254740981,"deliveries":[]}"#;
        let out = s.handle_frame(frame).unwrap();
        assert_eq!(out.fault, Some(Fault::Gap));
        assert_eq!(
            out.missing,
            (9007199254740977..9007199254740981).collect::<Vec<_>>()
        );
        assert!(out.reread && s.missing().len() == 4);
        // Many gaps in a row keep at most `window` missing seqs.
        for seq in [9007199254740983_u64, 9007199254740985, 9007199254740991] {
            let f = format!(r#"{{"epoch":1,"seq":{seq},"deliveries":[]}}"#);
            s.handle_frame(f.as_bytes()).unwrap();
        }
        assert_eq!(s.missing().len(), 4);
    }

    #[test]
    fn a_missing_seq_above_the_read_keeps_the_reread() {
        let mut p = publisher();
        let f = frames(&mut p, 5);
        let mut s = Subscriber::new(Some(7), 0, 16).unwrap();
        s.handle_frame(&f[0]).unwrap();
        s.handle_frame(&f[4]).unwrap(); // 2, 3, 4 missing
        s.resync(7, 2);
        assert!(s.needs_reread());
        assert_eq!(s.missing(), vec![3, 4]);
        s.resync(7, 5);
        assert!(!s.needs_reread());
    }

    #[test]
    fn an_invalid_frame_fails_until_resync() {
        let mut s = Subscriber::new(None, 0, 16).unwrap();
        assert_eq!(s.handle_frame(b"{").unwrap_err().code, Code::InvalidJson);
        assert_eq!(
            s.handle_frame(b"{}").unwrap_err().code,
            Code::SubscriberFailed
        );
        s.resync(1, 0);
        assert!(s.failed().is_none());
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_give_an_outcome_or_a_typed_error(data: Vec<u8>) {
            let mut s = Subscriber::new(Some(1), 0, 4).unwrap();
            let _ = s.handle_frame(&data);
        }
    }
}
