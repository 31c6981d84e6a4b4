//! The store of the HTTP API (SPEC §9, §12.4, §12.6): sessions and their messages, runs with
//! every event, and `Idempotency-Key`s. It is the source of truth: a finished run lives only
//! here, and `GET` and event streams read it.
//!
//! One interface, [`Store`], two implementations:
//! - [`sqlite::SqliteStore`], `CONNOP_HOME/state.db`, the embedded default: one gateway per
//!   file (a lock refuses a second), files 0600;
//! - [`postgres::PgStore`], `--database-url postgres://…`: any number of replicas on one
//!   database, with heartbeats, a sweep of dead replicas' runs, and LISTEN/NOTIFY to carry
//!   run events and stops between replicas.
//!
//! Neither decides a run's lifecycle: each reads the run back, lets
//! [`connop_core::run::Run::apply`] decide, and writes what changed as one atomic step (a
//! transaction in SQLite, a compare-and-set on the status and event count in PostgreSQL). So a
//! change applied by two replicas at once is decided once, and the loser reads the winner's
//! run.
//!
//! [`RunSignals`] is this process's side: who watches which run's events, and the stop
//! switches of the runs whose turns run here.

mod migrations;
pub mod postgres;
mod signals;
pub mod sqlite;

pub use signals::{RunSignals, Running, Watch};

use connop_core::run::{Applied, Run, RunChange, RunEvent};
use connop_core::time::Timestamp;
use serde_json::{Value, json};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

/// What a store call answers, later.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The store interface: what the HTTP API asks of SQLite or PostgreSQL.
pub trait Store: Send + Sync {
    /// Every session, oldest first.
    fn sessions(&self) -> StoreFuture<'_, Vec<SessionRow>>;

    /// One session.
    fn session<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<SessionRow>>;

    /// Creates a session; `false` when the id exists.
    fn create_session<'a>(&'a self, row: &'a SessionRow) -> StoreFuture<'a, bool>;

    /// Appends the user's message of a chat turn, and answers the history before it.
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

    /// This process leaves (its runs were ended as SPEC §9.1 says): background work stops, and
    /// a replica says it is gone.
    fn leave(&self) -> StoreFuture<'_, ()>;
}

/// Where the store is.
#[derive(Clone, Debug)]
pub enum Database {
    /// SQLite at `home/state.db`.
    Sqlite {
        /// `CONNOP_HOME`.
        home: PathBuf,
    },
    /// PostgreSQL, as one replica among any number.
    Postgres(Box<postgres::PgOptions>),
}

/// Opens the store: creates or migrates its schema, and ends the runs an earlier process of
/// the same store (or of the same replica id) left unsettled, `interrupted` with
/// [`connop_core::run::RESTART_ERROR`]. `http_port` names the default replica id.
pub async fn open(
    database: &Database,
    signals: Arc<RunSignals>,
    http_port: u16,
    now: Timestamp,
) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match database {
        Database::Sqlite { home } => Arc::new(sqlite::SqliteStore::open(home, signals, now)?),
        Database::Postgres(options) => {
            Arc::new(postgres::PgStore::open(options, signals, http_port, now).await?)
        }
    })
}

/// Why the store failed. Each is this machine's or its database's: a folder or file that
/// cannot be made, a database that cannot be reached or refused a statement, a store another
/// gateway holds.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `CONNOP_HOME` could not be created.
    #[error("cannot create {}: {source}", path.display())]
    CreateHome {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file of the store (`state.db`, its lock) could not be created or opened.
    #[error("cannot open {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `state.db` could not be opened.
    #[error("cannot open the state database {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// Another live gateway serves this SQLite store.
    #[error(
        "another `connop gateway --http`{} already serves {}: one gateway per SQLite store; several gateways share one PostgreSQL database (--database-url postgres://…)",
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        path.display()
    )]
    InUse {
        /// The database file.
        path: PathBuf,
        /// The other gateway's process id, if it wrote one.
        pid: Option<u32>,
    },
    /// A SQLite statement failed.
    #[error("the state database failed: {0}")]
    Sql(#[from] rusqlite::Error),
    /// The PostgreSQL server could not be reached.
    #[error("cannot reach the database at {target}: {source}")]
    Unreachable {
        /// Where, without a password.
        target: String,
        /// Why.
        source: std::io::Error,
    },
    /// The PostgreSQL server refused the connection (authentication, no such database, …).
    #[error("the database at {target} refused the connection: {source}")]
    Refused {
        /// Where, without a password.
        target: String,
        /// Why.
        source: tokio_postgres::Error,
    },
    /// A PostgreSQL statement failed.
    #[error("the database failed: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// A schema migration failed; nothing of it was applied.
    #[error("schema migration {version} ({name}) failed: {source}")]
    Migration {
        /// The version it would have reached.
        version: i64,
        /// What it does.
        name: &'static str,
        /// Why.
        source: Box<StoreError>,
    },
    /// The database's schema is newer than this binary knows.
    #[error(
        "the database's schema is version {found}, newer than this connop knows ({known}): run a newer connop"
    )]
    SchemaTooNew {
        /// The database's version.
        found: i64,
        /// The newest this binary knows.
        known: i64,
    },
    /// Another live process is this replica.
    #[error(
        "replica id {0:?} is held by another live gateway on this database: give each replica its own --replica-id"
    )]
    ReplicaInUse(String),
    /// A stored value this binary cannot read.
    #[error("the store holds {what} that cannot be read: {value:?}")]
    Unreadable {
        /// Which value.
        what: &'static str,
        /// What was found.
        value: String,
    },
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
fn stored_count(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// A stored event: its data must be JSON and its name one of ours.
fn stored_event(seq: i64, name: &str, data: &str) -> Result<RunEvent, StoreError> {
    let unreadable = || StoreError::Unreadable {
        what: "a run event",
        value: format!("{name} {}", data.chars().take(80).collect::<String>()),
    };
    let data = serde_json::from_str(data).map_err(|_| unreadable())?;
    RunEvent::restore(stored_count(seq), name, data).ok_or_else(unreadable)
}

/// A stored first answer.
fn stored_answer(body: String, status: i64, answer: &str) -> Result<FirstAnswer, StoreError> {
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

#[cfg(test)]
mod contract;
