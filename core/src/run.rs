//! The run lifecycle of docs/http-api.md#runs and docs/operating.md#postgresql as a pure state
//! machine: an agent turn submitted over HTTP, its statuses, and the events each change produces.
//!
//! Every change is one [`RunChange`] fed to [`Run::apply`], which decides whether it happens
//! and returns the events it produced, numbered in order. The first terminal status wins and
//! is never rewritten: a stop goes through `stopping` to `cancelled`; a shutdown, a restart or
//! a replica that stopped answering ends an active run `interrupted`, and whatever follows
//! changes nothing; every run has exactly one terminal event.
//!
//! A run is kept by a store, not in memory: the store reads the run back
//! ([`Run::restore`]), applies the change here, and writes the new status with the new events,
//! at once. So whichever process applies a change (the replica that runs the turn, the
//! one a stop arrived on, the survivor that found a replica dead), the rule is this one.

use crate::time::Timestamp;
use serde_json::{Map, Value, json};
use std::fmt;
use std::time::Duration;

/// The error of a run ended by a gateway shutdown.
pub const SHUTDOWN_ERROR: &str = "Gateway shutdown interrupted the run.";

/// The error of a run found unsettled when the gateway (or a replica of the same id) started.
pub const RESTART_ERROR: &str = "The gateway restarted before this run settled.";

/// The error of a run whose replica went silent (docs/operating.md#postgresql).
pub const REPLICA_LOST_ERROR: &str = "The gateway that ran this run stopped answering.";

/// The error of a run whose store failed while it was active: its turn was stopped (or its end
/// could not be stored), and it is ended so once the store is back.
pub const STORE_FAILED_ERROR: &str = "The store failed while this run was active.";

/// How often a replica writes its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);

/// A replica whose last heartbeat is older than this is dead: a survivor interrupts its runs.
pub const REPLICA_DEAD_AFTER: Duration = Duration::from_secs(10);

/// How long an `Idempotency-Key` is remembered; after it, the key is free again.
pub const IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest `Idempotency-Key` accepted, in bytes.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

/// Why an `Idempotency-Key` was refused: a key is 1 to [`MAX_IDEMPOTENCY_KEY`] bytes of
/// printable ASCII (space to `~`). A key outside that would be read as no key by some part of
/// the way (a header value that is not text reads as absent), and two requests meant as one
/// would both run: refused instead, so the client learns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdempotencyKeyError {
    /// The header is there with nothing in it.
    #[error("Idempotency-Key is empty: send 1 to 255 printable ASCII characters, or no header")]
    Empty,
    /// More than [`MAX_IDEMPOTENCY_KEY`] bytes.
    #[error("Idempotency-Key is {len} bytes long: at most 255 printable ASCII characters")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A byte that is no printable ASCII character (a control character, or not ASCII).
    #[error(
        "Idempotency-Key holds a byte that is not printable ASCII (space to '~'): \
         send 1 to 255 printable ASCII characters"
    )]
    NotPrintable,
}

/// An `Idempotency-Key` header's value, as given, checked; the key as text.
pub fn idempotency_key(raw: &[u8]) -> Result<&str, IdempotencyKeyError> {
    if raw.is_empty() {
        return Err(IdempotencyKeyError::Empty);
    }
    if raw.len() > MAX_IDEMPOTENCY_KEY {
        return Err(IdempotencyKeyError::TooLong { len: raw.len() });
    }
    if !raw.iter().all(|b| (0x20..0x7f).contains(b)) {
        return Err(IdempotencyKeyError::NotPrintable);
    }
    std::str::from_utf8(raw).map_err(|_| IdempotencyKeyError::NotPrintable)
}

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
    /// Ended by a shutdown, a restart, or a replica that stopped answering.
    Interrupted,
}

impl RunStatus {
    /// Every status, the terminal ones last.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Stopping,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
        RunStatus::Interrupted,
    ];

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

    /// The statuses that are not terminal, by wire name (a store selects active runs by them).
    pub const ACTIVE: [&'static str; 3] = ["queued", "running", "stopping"];
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The event names, the terminal ones last.
const EVENT_NAMES: [&str; 6] = [
    "run.started",
    "message.delta",
    "run.completed",
    "run.failed",
    "run.cancelled",
    "run.interrupted",
];

/// One event of a run's stream: `{"event", "run_id", "timestamp", …}`.
#[derive(Clone, Debug, PartialEq)]
pub struct RunEvent {
    /// Its place in the run's stream, from 0.
    pub seq: u32,
    /// `run.started`, `message.delta`, `run.completed`, `run.failed`, `run.cancelled`,
    /// `run.interrupted`.
    pub event: &'static str,
    /// The whole `data` object, `event`, `run_id` and `timestamp` included.
    pub data: Value,
}

impl RunEvent {
    /// Whether this event ends the stream.
    pub fn is_terminal(&self) -> bool {
        EVENT_NAMES[2..].contains(&self.event)
    }

    /// The static name of a stored event name, if it is one.
    pub fn name(stored: &str) -> Option<&'static str> {
        EVENT_NAMES.into_iter().find(|n| *n == stored)
    }

    /// An event as a store read it back; `None` for a name that is none of ours.
    pub fn restore(seq: u32, name: &str, data: Value) -> Option<Self> {
        Some(RunEvent {
            seq,
            event: Self::name(name)?,
            data,
        })
    }
}

/// One change to a run, from whoever applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunChange<'a> {
    /// The turn starts: `queued → running`, `run.started`.
    Start,
    /// The turn answered in one piece: `message.delta` then `run.completed` — or
    /// `run.cancelled` if a stop came first.
    Reply(&'a str),
    /// The turn failed (`run.failed`), or `run.cancelled` if a stop came first.
    Fail(&'a str),
    /// A stop request: `stopping` (the caller then interrupts the turn), or nothing once
    /// terminal.
    Stop,
    /// The turn ended because it was stopped: `run.cancelled`.
    Stopped,
    /// A shutdown, a restart, a lost replica or a failed store: `run.interrupted` with this
    /// error.
    Interrupt(&'a str),
}

/// What [`Run::apply`] did.
#[derive(Clone, Debug, Default, PartialEq)]
#[must_use]
pub struct Applied {
    /// Whether the run changed (its status, or its events): a store writes it only then.
    pub changed: bool,
    /// The events the change produced, in order.
    pub events: Vec<RunEvent>,
}

/// One run: its status and its texts, and how many events it has had (the events themselves
/// live in the store).
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    run_id: String,
    session_id: String,
    status: RunStatus,
    created_at: Timestamp,
    updated_at: Timestamp,
    output: Option<String>,
    error: Option<String>,
    last_event: Option<&'static str>,
    events: u32,
}

/// A run as a store keeps it, for [`Run::restore`].
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    /// The id.
    pub run_id: String,
    /// The session the turn belongs to.
    pub session_id: String,
    /// The status.
    pub status: RunStatus,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// The reply, once completed.
    pub output: Option<String>,
    /// The error, once failed or interrupted.
    pub error: Option<String>,
    /// The name of the last event (a stored name that is none of ours reads as none).
    pub last_event: Option<String>,
    /// How many events it has had.
    pub events: u32,
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
            last_event: None,
            events: 0,
        }
    }

    /// A run as stored.
    pub fn restore(record: RunRecord) -> Self {
        Run {
            last_event: record.last_event.as_deref().and_then(RunEvent::name),
            run_id: record.run_id,
            session_id: record.session_id,
            status: record.status,
            created_at: record.created_at,
            updated_at: record.updated_at,
            output: record.output,
            error: record.error,
            events: record.events,
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

    /// The name of the last event, if any.
    pub fn last_event(&self) -> Option<&'static str> {
        self.last_event
    }

    /// How many events the run has had (the next one's `seq`).
    pub fn event_count(&self) -> u32 {
        self.events
    }

    /// Applies one change at `now`: what changed, and the events it produced.
    pub fn apply(&mut self, change: RunChange<'_>, now: Timestamp) -> Applied {
        let mut applied = Applied::default();
        match change {
            RunChange::Start => {
                if self.status == RunStatus::Queued {
                    self.status = RunStatus::Running;
                    self.push(&mut applied, "run.started", Map::new(), now);
                }
            }
            RunChange::Reply(text) if self.status == RunStatus::Running => {
                let mut delta = Map::new();
                delta.insert("delta".into(), text.into());
                self.push(&mut applied, "message.delta", delta, now);
                self.end_with(&mut applied, RunStatus::Completed, text, now);
            }
            // A stop decided: the killed turn's answer or error is not the run's.
            RunChange::Reply(_) | RunChange::Fail(_) | RunChange::Stopped
                if self.status == RunStatus::Stopping =>
            {
                self.end(&mut applied, RunStatus::Cancelled, Map::new(), now);
            }
            RunChange::Reply(text) => self.end_with(&mut applied, RunStatus::Completed, text, now),
            RunChange::Fail(error) => self.end_with(&mut applied, RunStatus::Failed, error, now),
            RunChange::Stopped => self.end(&mut applied, RunStatus::Cancelled, Map::new(), now),
            RunChange::Stop => {
                if !self.status.is_terminal() && self.status != RunStatus::Stopping {
                    self.status = RunStatus::Stopping;
                    self.updated_at = now.max(self.updated_at);
                    applied.changed = true;
                }
            }
            RunChange::Interrupt(error) => {
                self.end_with(&mut applied, RunStatus::Interrupted, error, now);
            }
        }
        applied
    }

    fn push(
        &mut self,
        applied: &mut Applied,
        event: &'static str,
        extra: Map<String, Value>,
        now: Timestamp,
    ) {
        self.updated_at = now.max(self.updated_at);
        let mut data = Map::new();
        data.insert("event".into(), event.into());
        data.insert("run_id".into(), self.run_id.clone().into());
        data.insert("timestamp".into(), now.as_secs_f64().into());
        data.extend(extra);
        applied.changed = true;
        applied.events.push(RunEvent {
            seq: self.events,
            event,
            data: Value::Object(data),
        });
        self.events = self.events.saturating_add(1);
        self.last_event = Some(event);
    }

    fn end(
        &mut self,
        applied: &mut Applied,
        status: RunStatus,
        extra: Map<String, Value>,
        now: Timestamp,
    ) {
        if self.status.is_terminal() {
            return;
        }
        self.status = status;
        let event = match status {
            RunStatus::Completed => "run.completed",
            RunStatus::Failed => "run.failed",
            RunStatus::Cancelled => "run.cancelled",
            _ => "run.interrupted",
        };
        self.push(applied, event, extra, now);
    }

    /// Ends the run with its one text: the `output` of a completion, else the `error`.
    fn end_with(&mut self, applied: &mut Applied, status: RunStatus, text: &str, now: Timestamp) {
        if self.status.is_terminal() {
            return;
        }
        let completed = status == RunStatus::Completed;
        let key = if completed { "output" } else { "error" };
        let mut extra = Map::new();
        extra.insert(key.into(), text.into());
        self.end(applied, status, extra, now);
        let slot = if completed {
            &mut self.output
        } else {
            &mut self.error
        };
        *slot = Some(text.to_owned());
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
            "last_event": self.last_event,
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

    /// A run and every event it produced.
    struct Log {
        run: Run,
        events: Vec<RunEvent>,
    }

    impl Log {
        fn new() -> Self {
            Log {
                run: Run::new("run_x", "s", t(0)),
                events: Vec::new(),
            }
        }

        fn apply(&mut self, change: RunChange<'_>, at: u64) -> bool {
            let applied = self.run.apply(change, t(at));
            self.events.extend(applied.events);
            applied.changed
        }

        fn names(&self) -> Vec<&'static str> {
            self.events.iter().map(|e| e.event).collect()
        }

        fn terminal(&self) -> usize {
            self.events.iter().filter(|e| e.is_terminal()).count()
        }
    }

    #[test]
    fn a_run_completes_with_its_output_and_numbered_events() {
        let mut log = Log {
            run: Run::new(run_id([0xab; 16]), "bot-chat", t(0)),
            events: Vec::new(),
        };
        assert_eq!(log.run.run_id().len(), 36);
        assert!(log.apply(RunChange::Start, 1));
        assert!(log.apply(RunChange::Reply("ran here"), 3));
        assert_eq!(log.run.status(), RunStatus::Completed);
        let v = log.run.to_json();
        assert_eq!(v["object"], "connop.run");
        assert_eq!(v["output"], "ran here");
        assert_eq!(v["last_event"], "run.completed");
        assert!(v.get("error").is_none());
        assert_eq!(
            log.names(),
            ["run.started", "message.delta", "run.completed"]
        );
        let seqs: Vec<u32> = log.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [0, 1, 2]);
        assert_eq!(log.events[1].data["delta"], "ran here");
        assert_eq!(log.events[2].data["output"], "ran here");
        assert_eq!(log.run.event_count(), 3);
    }

    #[test]
    fn the_first_terminal_status_wins() {
        let mut log = Log::new();
        log.apply(RunChange::Start, 1);
        assert!(log.apply(RunChange::Fail("boom"), 2));
        for (change, at) in [
            (RunChange::Reply("late"), 3),
            (RunChange::Interrupt(SHUTDOWN_ERROR), 4),
            (RunChange::Stopped, 5),
            (RunChange::Stop, 6),
            (RunChange::Start, 7),
        ] {
            assert!(!log.apply(change, at), "{change:?} changes nothing");
        }
        assert_eq!(
            (log.run.status(), log.run.error()),
            (RunStatus::Failed, Some("boom"))
        );
        assert_eq!(log.terminal(), 1);
        assert_eq!(log.run.updated_at(), t(2));
    }

    #[test]
    fn a_stop_goes_through_stopping_to_cancelled_whatever_the_turn_said() {
        for ending in [
            RunChange::Fail("killed"),
            RunChange::Reply("an answer after all"),
            RunChange::Stopped,
        ] {
            let mut log = Log::new();
            log.apply(RunChange::Start, 1);
            assert!(log.apply(RunChange::Stop, 2));
            assert_eq!(log.run.status(), RunStatus::Stopping);
            assert!(
                !log.apply(RunChange::Stop, 3),
                "a second stop changes nothing"
            );
            assert!(log.apply(ending, 4));
            assert_eq!(log.run.status(), RunStatus::Cancelled);
            assert_eq!(log.names(), ["run.started", "run.cancelled"]);
            assert!(log.run.error().is_none() && log.run.output().is_none());
        }
    }

    #[test]
    fn an_interrupt_is_never_rewritten_by_the_cancellation_after_it() {
        for error in [SHUTDOWN_ERROR, RESTART_ERROR, REPLICA_LOST_ERROR] {
            let mut log = Log::new();
            log.apply(RunChange::Start, 1);
            log.apply(RunChange::Stop, 2);
            assert!(log.apply(RunChange::Interrupt(error), 3));
            assert!(!log.apply(RunChange::Stopped, 4));
            assert!(!log.apply(RunChange::Interrupt(REPLICA_LOST_ERROR), 5));
            assert_eq!(log.run.status(), RunStatus::Interrupted);
            assert_eq!(log.run.error(), Some(error));
            assert_eq!(log.names(), ["run.started", "run.interrupted"]);
            assert_eq!(log.events[1].data["error"], error);
        }
    }

    #[test]
    fn a_restored_run_goes_on_where_the_store_left_it() {
        let mut log = Log::new();
        log.apply(RunChange::Start, 1);
        let stored = RunRecord {
            run_id: log.run.run_id().into(),
            session_id: log.run.session_id().into(),
            status: log.run.status(),
            created_at: log.run.created_at(),
            updated_at: log.run.updated_at(),
            output: None,
            error: None,
            last_event: log.run.last_event().map(str::to_owned),
            events: log.run.event_count(),
        };
        let mut again = Run::restore(stored);
        assert_eq!(again, log.run);
        let applied = again.apply(RunChange::Interrupt(REPLICA_LOST_ERROR), t(9));
        assert_eq!(applied.events.len(), 1);
        assert_eq!(applied.events[0].seq, 1, "numbering goes on");
        let odd = Run::restore(RunRecord {
            last_event: Some("run.exploded".into()),
            ..RunRecord {
                run_id: "r".into(),
                session_id: "s".into(),
                status: RunStatus::Queued,
                created_at: t(0),
                updated_at: t(0),
                output: None,
                error: None,
                last_event: None,
                events: 0,
            }
        });
        assert_eq!(odd.last_event(), None);
        assert_eq!(
            RunEvent::restore(4, "run.failed", json!({})).map(|e| e.is_terminal()),
            Some(true)
        );
        assert!(RunEvent::restore(0, "nope", json!({})).is_none());
    }

    #[test]
    fn a_queued_run_can_end_without_starting_and_statuses_round_trip() {
        let mut log = Log::new();
        assert!(log.apply(RunChange::Interrupt(RESTART_ERROR), 1));
        assert!(!log.apply(RunChange::Start, 2));
        for s in RunStatus::ALL {
            assert_eq!(RunStatus::parse(s.as_str()), Some(s));
            assert_eq!(RunStatus::ACTIVE.contains(&s.as_str()), !s.is_terminal());
        }
    }

    #[test]
    fn an_idempotency_key_is_1_to_255_bytes_of_printable_ascii() {
        assert_eq!(idempotency_key(b"k-1"), Ok("k-1"));
        assert_eq!(idempotency_key(b" a b ~"), Ok(" a b ~"));
        let longest = [b'k'; MAX_IDEMPOTENCY_KEY];
        assert!(idempotency_key(&longest).is_ok());
        assert_eq!(
            idempotency_key(&[b'k'; MAX_IDEMPOTENCY_KEY + 1]),
            Err(IdempotencyKeyError::TooLong { len: 256 })
        );
        assert_eq!(idempotency_key(b""), Err(IdempotencyKeyError::Empty));
        for bad in [
            &b"\xc3\xa9"[..],
            b"a\tb",
            b"\x7f",
            b"a\nb",
            b"\x00",
            b"\xff",
        ] {
            assert_eq!(
                idempotency_key(bad),
                Err(IdempotencyKeyError::NotPrintable),
                "{bad:?}"
            );
        }
        assert!(
            IdempotencyKeyError::NotPrintable
                .to_string()
                .contains("printable ASCII")
        );
    }
}
