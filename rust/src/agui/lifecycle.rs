//! The run lifecycle: where in a run each event may appear. Pure: no I/O, no clock.
//!
//! Everything that decides whether an event is allowed at this point of the stream lives here.
//! Rules (AG-UI run lifecycle):
//! 1. The first event is `RUN_STARTED` or `RUN_ERROR` (`run_not_started`).
//! 2. No second `RUN_STARTED` while a run is open (`run_already_started`).
//! 3. `RUN_FINISHED` names the open run's `threadId` and `runId` (`run_id_mismatch`).
//!    `RUN_ERROR` carries no ids in the schema, so it ends whichever run is open.
//! 4. After `RUN_FINISHED` (or `RUN_ERROR`) only a new `RUN_STARTED` or a late `RUN_ERROR` is
//!    allowed (`event_after_run_finished`).
//!
//! Every rule applies to every event, known type or not. Each violation is a fatal
//! `ErrorKind::Sequence` error; the caller keeps its state as it was.
//!
//! `Lifecycle::Partial` is for replaying a capture that may begin mid-run: until its first
//! `RUN_STARTED` or `RUN_ERROR` the events belong to a run whose ids are unknown, so rule 1 is
//! off and a `RUN_FINISHED` there is not checked against ids (nor is a `RUN_STARTED` a second
//! start). From the first run event on, every rule applies as in `Lifecycle::Strict`.

use super::error::{
    AguiError, ErrorKind, EVENT_AFTER_RUN_FINISHED, RUN_ALREADY_STARTED, RUN_ID_MISMATCH,
    RUN_NOT_STARTED,
};

/// How strictly the run lifecycle is enforced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Lifecycle {
    /// Every rule, from the first event.
    #[default]
    Strict,
    /// The stream may begin mid-run (a partial capture); see the module docs.
    Partial,
}

/// Where the stream stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Run {
    /// No event yet (strict).
    NotStarted,
    /// A partial capture before its first run event: inside a run with unknown ids.
    Unknown,
    /// Between RUN_STARTED and its end.
    Open { thread_id: String, run_id: String },
    /// After RUN_FINISHED or RUN_ERROR (`by` names which).
    Ended { by: &'static str },
}

impl Run {
    /// The state a fresh store starts in.
    pub fn initial(lifecycle: Lifecycle) -> Run {
        match lifecycle {
            Lifecycle::Strict => Run::NotStarted,
            Lifecycle::Partial => Run::Unknown,
        }
    }

    /// True while events other than run events are allowed.
    pub fn is_open(&self) -> bool {
        matches!(self, Run::Open { .. } | Run::Unknown)
    }
}

fn refuse(code: &'static str, reason: String) -> AguiError {
    AguiError::new(ErrorKind::Sequence, code, reason)
}

/// The state after an event of `event_type`: `Ok(None)` leaves it as it is, `Ok(Some(run))`
/// moves to `run`. `ids` are the event's `(threadId, runId)`, which the schema requires of
/// RUN_STARTED and RUN_FINISHED.
pub fn next(
    state: &Run,
    event_type: &str,
    ids: Option<(&str, &str)>,
) -> Result<Option<Run>, AguiError> {
    let (thread, run) = ids.unwrap_or_default();
    match (event_type, state) {
        ("RUN_STARTED", Run::Open { thread_id, run_id }) => Err(refuse(
            RUN_ALREADY_STARTED,
            format!(
                "RUN_STARTED (run {run:?}) while run {run_id:?} of thread {thread_id:?} is open; \
                 a run ends with RUN_FINISHED or RUN_ERROR first"
            ),
        )),
        ("RUN_STARTED", _) => Ok(Some(Run::Open {
            thread_id: thread.to_owned(),
            run_id: run.to_owned(),
        })),
        ("RUN_ERROR", _) => Ok(Some(Run::Ended { by: "RUN_ERROR" })),
        ("RUN_FINISHED", Run::Open { thread_id, run_id }) => {
            if thread == thread_id && run == run_id {
                Ok(Some(Run::Ended { by: "RUN_FINISHED" }))
            } else {
                Err(refuse(
                    RUN_ID_MISMATCH,
                    format!(
                        "RUN_FINISHED names thread {thread:?} run {run:?}, but the open run is \
                         thread {thread_id:?} run {run_id:?}"
                    ),
                ))
            }
        }
        ("RUN_FINISHED", Run::Unknown) => Ok(Some(Run::Ended { by: "RUN_FINISHED" })),
        (_, Run::NotStarted) => Err(refuse(
            RUN_NOT_STARTED,
            format!(
                "{event_type} before RUN_STARTED; a stream begins with RUN_STARTED or RUN_ERROR"
            ),
        )),
        (_, Run::Ended { by }) => Err(refuse(
            EVENT_AFTER_RUN_FINISHED,
            format!("{event_type} after {by}; only RUN_STARTED or a late RUN_ERROR may follow"),
        )),
        (_, Run::Open { .. } | Run::Unknown) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(t: &str, r: &str) -> Run {
        Run::Open {
            thread_id: t.into(),
            run_id: r.into(),
        }
    }

    fn code(state: &Run, event_type: &str, ids: Option<(&str, &str)>) -> &'static str {
        next(state, event_type, ids).unwrap_err().code
    }

    #[test]
    fn the_table() {
        let ids = Some(("t", "r"));
        let started = Run::initial(Lifecycle::Strict);
        // 1. The first event.
        assert_eq!(
            next(&started, "RUN_STARTED", ids).unwrap(),
            Some(open("t", "r"))
        );
        assert_eq!(
            next(&started, "RUN_ERROR", None).unwrap(),
            Some(Run::Ended { by: "RUN_ERROR" })
        );
        for ty in ["ACTIVITY_SNAPSHOT", "TEXT_MESSAGE_START", "FUTURE_THING"] {
            assert_eq!(code(&started, ty, None), RUN_NOT_STARTED);
        }
        assert_eq!(code(&started, "RUN_FINISHED", ids), RUN_NOT_STARTED);
        // 2. No second start.
        assert_eq!(
            code(&open("t", "r"), "RUN_STARTED", Some(("t", "r2"))),
            RUN_ALREADY_STARTED
        );
        assert_eq!(next(&open("t", "r"), "ACTIVITY_DELTA", None).unwrap(), None);
        // 3. The finish names the open run.
        assert_eq!(
            next(&open("t", "r"), "RUN_FINISHED", ids).unwrap(),
            Some(Run::Ended { by: "RUN_FINISHED" })
        );
        for other in [("t", "r2"), ("t2", "r"), ("", "")] {
            assert_eq!(
                code(&open("t", "r"), "RUN_FINISHED", Some(other)),
                RUN_ID_MISMATCH
            );
        }
        assert_eq!(
            next(&open("t", "r"), "RUN_ERROR", None).unwrap(),
            Some(Run::Ended { by: "RUN_ERROR" })
        );
        // 4. After the end.
        for by in ["RUN_FINISHED", "RUN_ERROR"] {
            let ended = Run::Ended { by };
            assert_eq!(
                code(&ended, "ACTIVITY_SNAPSHOT", None),
                EVENT_AFTER_RUN_FINISHED
            );
            assert_eq!(code(&ended, "RUN_FINISHED", ids), EVENT_AFTER_RUN_FINISHED);
            assert_eq!(
                next(&ended, "RUN_ERROR", None).unwrap(),
                Some(Run::Ended { by: "RUN_ERROR" })
            );
            assert_eq!(
                next(&ended, "RUN_STARTED", Some(("t", "r2"))).unwrap(),
                Some(open("t", "r2"))
            );
        }
    }

    #[test]
    fn partial_captures_may_begin_mid_run() {
        let unknown = Run::initial(Lifecycle::Partial);
        assert!(unknown.is_open());
        assert_eq!(next(&unknown, "ACTIVITY_DELTA", None).unwrap(), None);
        assert_eq!(
            next(&unknown, "RUN_FINISHED", Some(("any", "ids"))).unwrap(),
            Some(Run::Ended { by: "RUN_FINISHED" })
        );
        assert_eq!(
            next(&unknown, "RUN_STARTED", Some(("t", "r"))).unwrap(),
            Some(open("t", "r"))
        );
        assert!(!Run::Ended { by: "RUN_ERROR" }.is_open());
        assert!(!Run::NotStarted.is_open());
    }
}
