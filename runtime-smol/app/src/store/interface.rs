//! The store interface, [`Store`], and what goes in and out of it: sessions, messages, runs,
//! first answers; and how a stored value is read back.

use super::error::StoreError;
use connop_core::run::{Applied, Run, RunChange, RunEvent};
use connop_core::time::Timestamp;
use serde_json::{Value, json};
use std::future::Future;
use std::pin::Pin;

/// What a store call answers, later.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The most messages a turn gets as its history: the latest of its session.
pub const HISTORY_MESSAGES: u32 = 100;

/// The most bytes of message text a turn gets as its history: the latest messages whose
/// texts add up to at most this many (so a history may hold fewer than
/// [`HISTORY_MESSAGES`], or none when the latest alone is larger).
pub const HISTORY_BYTES: u64 = 2 << 20;

/// The store interface: what the HTTP API asks of SQLite or PostgreSQL.
pub trait Store: Send + Sync {
    /// Sessions oldest first, at most `limit` of them, from after `after` on.
    fn sessions<'a>(
        &'a self,
        after: Option<&'a SessionCursor>,
        limit: u32,
    ) -> StoreFuture<'a, SessionPage>;

    /// One session.
    fn session<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<SessionRow>>;

    /// Creates a session; `false` when the id exists.
    fn create_session<'a>(&'a self, row: &'a SessionRow) -> StoreFuture<'a, bool>;

    /// Appends the user's message of a chat turn, and answers the history before it (its
    /// latest messages, [`HISTORY_MESSAGES`] and [`HISTORY_BYTES`] at most).
    fn begin_turn<'a>(&'a self, message: &'a NewMessage<'a>) -> StoreFuture<'a, Vec<Message>>;

    /// Appends a message (the assistant's reply).
    fn add_message<'a>(&'a self, message: &'a NewMessage<'a>) -> StoreFuture<'a, ()>;

    /// Starts a run in one step: its `Idempotency-Key` (unless the key is taken: then the
    /// first answer comes back and nothing else is written), its session if new, the user's
    /// message, and the queued run.
    fn start_run<'a>(&'a self, start: &'a NewRun<'a>) -> StoreFuture<'a, Started>;

    /// Remembers the answer to a keyed request that started nothing (a refusal); answers the
    /// first answer instead if the key is taken.
    fn remember<'a>(&'a self, key: &'a Keyed<'a>) -> StoreFuture<'a, Option<FirstAnswer>>;

    /// A run as it stands.
    fn run<'a>(&'a self, run_id: &'a str) -> StoreFuture<'a, Option<Run>>;

    /// Applies one change to a stored run as [`Run::apply`] decides, storing the new status
    /// and events and waking their watchers; `None` for an unknown run.
    fn apply<'a>(
        &'a self,
        run_id: &'a str,
        change: RunChange<'a>,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<(Run, Applied)>>;

    /// A run's stored events from `seq` `from` on, in order, at most `limit` of them.
    fn events<'a>(
        &'a self,
        run_id: &'a str,
        from: u32,
        limit: u32,
    ) -> StoreFuture<'a, Vec<RunEvent>>;

    /// Carries a stop to the process whose turn runs `run_id`, wherever it is (nothing to do
    /// with one gateway per store).
    fn route_stop<'a>(&'a self, run_id: &'a str) -> StoreFuture<'a, ()>;

    /// Forgets `Idempotency-Key`s older than [`connop_core::run::IDEMPOTENCY_TTL`]; answers
    /// how many.
    fn forget_expired_keys(&self, now: Timestamp) -> StoreFuture<'_, u64>;

    /// Whether the store answers now (a fresh connection for PostgreSQL), within its
    /// timeouts.
    fn ping(&self) -> StoreFuture<'_, ()>;

    /// The ids of the active runs this process owns: all of them in SQLite, this replica's
    /// in PostgreSQL.
    fn active_runs(&self) -> StoreFuture<'_, Vec<String>>;

    /// This process leaves (its runs were ended as docs/http-api.md#shutdown-and-restarts says):
    /// background work stops, and a replica says it is gone.
    fn leave(&self) -> StoreFuture<'_, ()>;
}

/// A session as listed: `{"session_id", "title", "source", "created_at"}`.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionRow {
    /// The id.
    pub session_id: String,
    /// The title (`Bot Chat` is the one `peer dm` looks for).
    pub title: String,
    /// Where it came from (`desktop`, `api_server`, …).
    pub source: String,
    /// Float seconds since the epoch.
    pub created_at: f64,
}

impl SessionRow {
    /// The wire shape.
    pub fn to_json(&self) -> Value {
        json!({"session_id": self.session_id, "title": self.title, "source": self.source, "created_at": self.created_at})
    }
}

/// Where a page of sessions ends: the next page starts after it. Opaque to clients: 32
/// lower-case hex characters (the session's creation time's bits, then its position).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SessionCursor {
    /// The creation time of the last session of the page.
    pub created_at: f64,
    /// Its position among sessions created at the same time (the store's insertion order).
    pub position: i64,
}

impl SessionCursor {
    /// The cursor as clients see it.
    pub fn encode(&self) -> String {
        // The position's bits as they are: a cast back in `parse` restores it.
        format!(
            "{:016x}{:016x}",
            self.created_at.to_bits(),
            self.position as u64
        )
    }

    /// A cursor [`encode`](Self::encode) made; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let (time, position) = text.split_at(16);
        Some(SessionCursor {
            created_at: f64::from_bits(u64::from_str_radix(time, 16).ok()?),
            position: u64::from_str_radix(position, 16).ok()? as i64,
        })
    }
}

/// One page of sessions, and where the next starts (`None` after the last).
#[derive(Clone, Debug, PartialEq)]
pub struct SessionPage {
    /// The sessions, oldest first.
    pub rows: Vec<SessionRow>,
    /// The cursor of the next page, if there are more sessions.
    pub next: Option<SessionCursor>,
}

impl SessionPage {
    /// A page from up to `limit + 1` rows read with their positions: the extra row says
    /// there is a next page.
    pub(super) fn from_rows(mut rows: Vec<(SessionRow, i64)>, limit: u32) -> Self {
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next = more
            .then(|| rows.last())
            .flatten()
            .map(|(row, position)| SessionCursor {
                created_at: row.created_at,
                position: *position,
            });
        SessionPage {
            rows: rows.into_iter().map(|(row, _)| row).collect(),
            next,
        }
    }
}

/// One message of a session's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// A message to append.
#[derive(Clone, Copy, Debug)]
pub struct NewMessage<'a> {
    /// The session.
    pub session_id: &'a str,
    /// `user` or `assistant`.
    pub role: &'a str,
    /// The text.
    pub content: &'a str,
    /// The `author` object of the request, if any.
    pub author: Option<&'a Value>,
    /// When.
    pub now: Timestamp,
}

/// The first answer to an `Idempotency-Key`: replayed for the same body, a conflict for
/// another.
#[derive(Clone, Debug, PartialEq)]
pub struct FirstAnswer {
    /// The request body it answered.
    pub body: String,
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub answer: Value,
}

/// A keyed request's key and first answer, as stored.
#[derive(Clone, Copy, Debug)]
pub struct Keyed<'a> {
    /// The `Idempotency-Key`.
    pub key: &'a str,
    /// What it answers.
    pub first: &'a FirstAnswer,
    /// When (a key older than the TTL is free again).
    pub now: Timestamp,
}

/// A run to start.
#[derive(Clone, Copy, Debug)]
pub struct NewRun<'a> {
    /// The queued run (its session is created if new).
    pub run: &'a Run,
    /// The user's message.
    pub message: &'a str,
    /// The `author` object of the request, if any.
    pub author: Option<&'a Value>,
    /// Its `Idempotency-Key`, if it has one.
    pub key: Option<Keyed<'a>>,
}

/// What [`Store::start_run`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Started {
    /// The run is stored; its turn takes this history (the messages before the user's).
    Run(Vec<Message>),
    /// The key was taken: nothing was written, and this is its first answer.
    Taken(FirstAnswer),
}

/// A stored time (float seconds) as a timestamp. A store may hold anything a float can:
/// negative and NaN read as the epoch, infinite or too large saturate (never a panic).
pub(crate) fn stored_time(secs: f64) -> Timestamp {
    match std::time::Duration::try_from_secs_f64(secs) {
        Ok(since_epoch) => Timestamp::from_unix(since_epoch),
        Err(_) if secs > 0.0 => Timestamp::from_nanos(u64::MAX),
        Err(_) => Timestamp::EPOCH,
    }
}

/// A stored event count (never negative).
pub(super) fn stored_count(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// A stored event: its data must be JSON and its name one of ours.
pub(super) fn stored_event(seq: i64, name: &str, data: &str) -> Result<RunEvent, StoreError> {
    let unreadable = || StoreError::Unreadable {
        what: "a run event",
        value: format!("{name} {}", data.chars().take(80).collect::<String>()),
    };
    let data = serde_json::from_str(data).map_err(|_| unreadable())?;
    RunEvent::restore(stored_count(seq), name, data).ok_or_else(unreadable)
}

/// A stored first answer.
pub(super) fn stored_answer(
    body: String,
    status: i64,
    answer: &str,
) -> Result<FirstAnswer, StoreError> {
    let unreadable = || StoreError::Unreadable {
        what: "an idempotency answer",
        value: answer.chars().take(80).collect(),
    };
    Ok(FirstAnswer {
        body,
        status: u16::try_from(status).map_err(|_| unreadable())?,
        answer: serde_json::from_str(answer).map_err(|_| unreadable())?,
    })
}
