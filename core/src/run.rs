//! The run lifecycle of SPEC §9.1 as a pure state machine: an agent turn submitted over HTTP,
//! its statuses, and its event log.
//!
//! The first terminal status wins and is never rewritten: a stop goes through `stopping` to
//! `cancelled`; a shutdown ends an active run `interrupted`, and the cancellation that follows
//! changes nothing; every run has exactly one terminal event. The event log is kept whole so
//! a late subscriber can be replayed from the start.

use crate::time::Timestamp;
use serde_json::{Map, Value, json};
use std::fmt;

/// The error of a run ended by a gateway shutdown.
pub const SHUTDOWN_ERROR: &str = "Gateway shutdown interrupted the run.";

/// The error of a run found unsettled when the gateway started.
pub const RESTART_ERROR: &str = "The gateway restarted before this run settled.";

/// Where a run stands. The last four are terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RunStatus {
    /// Accepted, not started.
    Queued,
    /// The turn is running.
    Running,
    /// A stop was asked; the turn is being interrupted.
    Stopping,
    /// The turn answered.
    Completed,
    /// The turn failed.
    Failed,
    /// Stopped on request.
    Cancelled,
    /// Ended by a shutdown or a restart.
    Interrupted,
}

impl RunStatus {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Stopping => "stopping",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Interrupted => "interrupted",
        }
    }

    /// Parses a wire name (the store reads them back).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => RunStatus::Queued,
            "running" => RunStatus::Running,
            "stopping" => RunStatus::Stopping,
            "completed" => RunStatus::Completed,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            "interrupted" => RunStatus::Interrupted,
            _ => return None,
        })
    }

    /// Whether nothing changes the status any more.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed
                | RunStatus::Failed
                | RunStatus::Cancelled
                | RunStatus::Interrupted
        )
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event of a run's stream: `{"event", "run_id", "timestamp", …}`.
#[derive(Clone, Debug, PartialEq)]
pub struct RunEvent {
    /// `run.started`, `message.delta`, `run.completed`, `run.failed`, `run.cancelled`,
    /// `run.interrupted`.
    pub event: &'static str,
    /// The whole `data` object, `event`, `run_id` and `timestamp` included.
    pub data: Value,
}

impl RunEvent {
    /// Whether this event ends the stream.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.event,
            "run.completed" | "run.failed" | "run.cancelled" | "run.interrupted"
        )
    }
}

/// What a stop request did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopOutcome {
    /// The run was already terminal: nothing changed.
    Unchanged,
    /// The run is now `stopping`: interrupt its turn; it ends `cancelled`.
    Stopping,
}

/// One run.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    run_id: String,
    session_id: String,
    status: RunStatus,
    created_at: Timestamp,
    updated_at: Timestamp,
    output: Option<String>,
    error: Option<String>,
    events: Vec<RunEvent>,
}

/// A run id: `run_` and 32 lower-case hex characters from 16 random bytes (the runtime
/// draws them).
pub fn run_id(entropy: [u8; 16]) -> String {
    let mut id = String::with_capacity(36);
    id.push_str("run_");
    for b in entropy {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

impl Run {
    /// A queued run.
    pub fn new(run_id: impl Into<String>, session_id: impl Into<String>, now: Timestamp) -> Self {
        Run {
            run_id: run_id.into(),
            session_id: session_id.into(),
            status: RunStatus::Queued,
            created_at: now,
            updated_at: now,
            output: None,
            error: None,
            events: Vec::new(),
        }
    }

    /// A run as stored, without its events (which are not kept across restarts).
    #[allow(clippy::too_many_arguments)]
    pub fn restore(
        run_id: String,
        session_id: String,
        status: RunStatus,
        created_at: Timestamp,
        updated_at: Timestamp,
        output: Option<String>,
        error: Option<String>,
        last_event: Option<&'static str>,
    ) -> Self {
        let events = last_event
            .map(|event| {
                vec![RunEvent {
                    event,
                    data: json!({"event": event, "run_id": &run_id, "timestamp": updated_at.as_secs_f64()}),
                }]
            })
            .unwrap_or_default();
        Run {
            run_id,
            session_id,
            status,
            created_at,
            updated_at,
            output,
            error,
            events,
        }
    }

    /// The id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The session the turn belongs to.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The status.
    pub fn status(&self) -> RunStatus {
        self.status
    }

    /// When it was created.
    pub fn created_at(&self) -> Timestamp {
        self.created_at
    }

    /// When it last changed.
    pub fn updated_at(&self) -> Timestamp {
        self.updated_at
    }

    /// The reply, once completed.
    pub fn output(&self) -> Option<&str> {
        self.output.as_deref()
    }

    /// The error, once failed or interrupted.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Every event so far, in order (a late subscriber's replay).
    pub fn events(&self) -> &[RunEvent] {
        &self.events
    }

    /// The name of the last event, if any.
    pub fn last_event(&self) -> Option<&'static str> {
        self.events.last().map(|e| e.event)
    }

    fn push(&mut self, event: &'static str, extra: Map<String, Value>, now: Timestamp) {
        self.updated_at = now.max(self.updated_at);
        let mut data = Map::new();
        data.insert("event".into(), event.into());
        data.insert("run_id".into(), self.run_id.clone().into());
        data.insert("timestamp".into(), now.as_secs_f64().into());
        data.extend(extra);
        self.events.push(RunEvent {
            event,
            data: Value::Object(data),
        });
    }

    /// The turn starts: `queued → running`, `run.started`. Refused (false) once terminal.
    pub fn start(&mut self, now: Timestamp) -> bool {
        if self.status != RunStatus::Queued {
            return false;
        }
        self.status = RunStatus::Running;
        self.push("run.started", Map::new(), now);
        true
    }

    /// A piece of the reply: `message.delta {delta}`, while the turn runs.
    pub fn delta(&mut self, text: &str, now: Timestamp) -> bool {
        if self.status != RunStatus::Running {
            return false;
        }
        let mut extra = Map::new();
        extra.insert("delta".into(), text.into());
        self.push("message.delta", extra, now);
        true
    }

    fn end(
        &mut self,
        status: RunStatus,
        event: &'static str,
        extra: Map<String, Value>,
        now: Timestamp,
    ) -> bool {
        if self.status.is_terminal() {
            return false;
        }
        self.status = status;
        self.push(event, extra, now);
        true
    }

    /// Ends the run with its one text: the `output` of a completion, else the `error`.
    fn end_with(
        &mut self,
        status: RunStatus,
        event: &'static str,
        text: &str,
        now: Timestamp,
    ) -> bool {
        let completed = status == RunStatus::Completed;
        let mut extra = Map::new();
        extra.insert(
            if completed { "output" } else { "error" }.into(),
            text.into(),
        );
        let ended = self.end(status, event, extra, now);
        if ended {
            let slot = if completed {
                &mut self.output
            } else {
                &mut self.error
            };
            *slot = Some(text.to_owned());
        }
        ended
    }

    /// The turn answered. A run being stopped ends `cancelled` instead: the stop decided.
    pub fn complete(&mut self, output: &str, now: Timestamp) -> bool {
        if self.status == RunStatus::Stopping {
            return self.cancelled(now);
        }
        self.end_with(RunStatus::Completed, "run.completed", output, now)
    }

    /// The turn failed. A run being stopped ends `cancelled` instead.
    pub fn fail(&mut self, error: &str, now: Timestamp) -> bool {
        if self.status == RunStatus::Stopping {
            return self.cancelled(now);
        }
        self.end_with(RunStatus::Failed, "run.failed", error, now)
    }

    /// A stop request: a terminal run is left as it is; otherwise `stopping`, and the caller
    /// interrupts the turn.
    pub fn stop(&mut self, now: Timestamp) -> StopOutcome {
        if self.status.is_terminal() {
            return StopOutcome::Unchanged;
        }
        self.status = RunStatus::Stopping;
        self.updated_at = now.max(self.updated_at);
        StopOutcome::Stopping
    }

    /// The turn ended because it was stopped or cancelled: `cancelled` unless something
    /// terminal came first (a shutdown's `interrupted` is never rewritten).
    pub fn cancelled(&mut self, now: Timestamp) -> bool {
        self.end(RunStatus::Cancelled, "run.cancelled", Map::new(), now)
    }

    /// A shutdown (or a restart) ends the run `interrupted` with `error`.
    pub fn interrupt(&mut self, error: &str, now: Timestamp) -> bool {
        self.end_with(RunStatus::Interrupted, "run.interrupted", error, now)
    }

    /// `GET /v1/runs/{id}`: `{"object": "connop.run", "run_id", "status", "created_at",
    /// "updated_at", "session_id", "last_event", "output"?, "error"?}`.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "object": "connop.run",
            "run_id": self.run_id,
            "status": self.status.as_str(),
            "created_at": self.created_at.as_secs_f64(),
            "updated_at": self.updated_at.as_secs_f64(),
            "session_id": self.session_id,
            "last_event": self.last_event(),
        });
        if let Some(output) = &self.output {
            v["output"] = output.clone().into();
        }
        if let Some(error) = &self.error {
            v["error"] = error.clone().into();
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u64) -> Timestamp {
        Timestamp::from_secs(1_800_000_000 + s)
    }

    fn terminal_events(run: &Run) -> usize {
        run.events().iter().filter(|e| e.is_terminal()).count()
    }

    #[test]
    fn a_run_completes_with_its_output() {
        let mut run = Run::new(run_id([0xab; 16]), "bot-chat", t(0));
        assert_eq!(run.run_id().len(), 36);
        assert!(run.start(t(1)));
        assert!(run.delta("ran ", t(2)));
        assert!(run.complete("ran here", t(3)));
        assert_eq!(run.status(), RunStatus::Completed);
        let v = run.to_json();
        assert_eq!(v["object"], "connop.run");
        assert_eq!(v["output"], "ran here");
        assert_eq!(v["last_event"], "run.completed");
        assert!(v.get("error").is_none());
        let names: Vec<&str> = run.events().iter().map(|e| e.event).collect();
        assert_eq!(names, ["run.started", "message.delta", "run.completed"]);
        assert_eq!(run.events()[2].data["output"], "ran here");
    }

    #[test]
    fn the_first_terminal_status_wins() {
        let mut run = Run::new("run_x", "s", t(0));
        run.start(t(1));
        assert!(run.fail("boom", t(2)));
        assert!(!run.complete("late", t(3)));
        assert!(!run.interrupt(SHUTDOWN_ERROR, t(4)));
        assert!(!run.cancelled(t(5)));
        assert_eq!(run.stop(t(6)), StopOutcome::Unchanged);
        assert_eq!(
            (run.status(), run.error()),
            (RunStatus::Failed, Some("boom"))
        );
        assert_eq!(terminal_events(&run), 1);
    }

    #[test]
    fn a_stop_goes_through_stopping_to_cancelled() {
        let mut run = Run::new("run_x", "s", t(0));
        run.start(t(1));
        assert_eq!(run.stop(t(2)), StopOutcome::Stopping);
        assert_eq!(run.status(), RunStatus::Stopping);
        // The killed turn reports an error (or even an answer): the stop decided.
        assert!(run.fail("killed", t(3)));
        assert_eq!(run.status(), RunStatus::Cancelled);
        assert_eq!(run.last_event(), Some("run.cancelled"));
        assert_eq!(terminal_events(&run), 1);
        assert!(run.error().is_none());
    }

    #[test]
    fn shutdown_interrupts_and_the_cancellation_after_it_changes_nothing() {
        let mut run = Run::new("run-1", "bot-chat", t(0));
        run.start(t(1));
        assert!(run.interrupt(SHUTDOWN_ERROR, t(2)));
        assert!(!run.cancelled(t(3)));
        assert_eq!(run.status(), RunStatus::Interrupted);
        assert_eq!(run.error(), Some("Gateway shutdown interrupted the run."));
        let names: Vec<&str> = run
            .events()
            .iter()
            .filter(|e| e.is_terminal())
            .map(|e| e.event)
            .collect();
        assert_eq!(names, ["run.interrupted"]);
    }

    #[test]
    fn a_queued_run_can_end_without_starting_and_statuses_round_trip() {
        let mut run = Run::new("run_x", "s", t(0));
        assert!(run.interrupt(RESTART_ERROR, t(1)));
        assert!(!run.start(t(2)));
        for s in [
            RunStatus::Queued,
            RunStatus::Running,
            RunStatus::Stopping,
            RunStatus::Completed,
            RunStatus::Failed,
            RunStatus::Cancelled,
            RunStatus::Interrupted,
        ] {
            assert_eq!(RunStatus::parse(s.as_str()), Some(s));
        }
    }
}
