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
//! switches of the runs whose turns run here. [`Guarded`] is the store as the handlers use
//! it: it notices when the store goes away, fails calls at once while it is, and ends what
//! the outage left unsettled once it is back ([`health`]).
//!
//! Reads are bounded: sessions are listed a page at a time ([`SessionCursor`]), and a turn
//! gets the latest [`HISTORY_MESSAGES`] messages of its session, at most [`HISTORY_BYTES`]
//! of them together.

pub mod health;
mod migrations;
pub mod postgres;
mod signals;
pub mod sqlite;

pub use health::{Guarded, Health};
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
/// [`connop_core::run::RESTART_ERROR`]. `http_port` names the default replica id. The store
/// comes guarded ([`Guarded`]).
pub async fn open(
    database: &Database,
    signals: Arc<RunSignals>,
    http_port: u16,
    now: Timestamp,
) -> Result<Arc<Guarded>, StoreError> {
    let health = Arc::new(Health::default());
    let store: Arc<dyn Store> = match database {
        Database::Sqlite { home } => {
            Arc::new(sqlite::SqliteStore::open(home, signals.clone(), now)?)
        }
        Database::Postgres(options) => Arc::new(
            postgres::PgStore::open(options, signals.clone(), health.clone(), http_port, now)
                .await?,
        ),
    };
    Ok(Arc::new(Guarded::new(store, health, signals)))
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
    /// The PostgreSQL server could not be reached: refused, unreachable, or no answer within
    /// the connect timeout.
    #[error(
        "cannot reach the database at {target} ({}): check that the server runs and that --database-url names its host and port",
        io_reason(source)
    )]
    Unreachable {
        /// Where, without a password.
        target: String,
        /// Why.
        source: std::io::Error,
    },
    /// The PostgreSQL server refused the connection (authentication, no such database, …).
    #[error("{}", refusal_text(target, user, database, source))]
    Refused {
        /// Where, without a password.
        target: String,
        /// The user the URL names.
        user: String,
        /// The database the URL names.
        database: String,
        /// Why.
        source: tokio_postgres::Error,
    },
    /// A PostgreSQL statement failed.
    #[error("the database failed: {}", pg_reason(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// A PostgreSQL statement, or a free pooled connection, took longer than allowed.
    #[error(
        "the database at {target} did not answer within {} s ({what})",
        after.as_secs_f64()
    )]
    Timeout {
        /// Where, without a password.
        target: String,
        /// What was waited for.
        what: &'static str,
        /// How long.
        after: std::time::Duration,
    },
    /// The store is known to be away: the call was not tried.
    #[error("the store is down ({0}); try again once it is back")]
    Unavailable(String),
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

impl StoreError {
    /// Whether the error says the store cannot be used for now (its server is away, its
    /// connection broke, its disk is full), as opposed to one statement or value being wrong:
    /// such a failure is answered 503, makes the store check itself, and is tried again once
    /// the store is back.
    pub fn is_outage(&self) -> bool {
        match self {
            StoreError::Unreachable { .. }
            | StoreError::Refused { .. }
            | StoreError::Timeout { .. }
            | StoreError::Unavailable(_) => true,
            StoreError::Postgres(e) => pg_outage(e),
            StoreError::Sql(e) => sqlite_outage(e),
            StoreError::Migration { source, .. } => source.is_outage(),
            StoreError::CreateHome { .. }
            | StoreError::File { .. }
            | StoreError::Open { .. }
            | StoreError::InUse { .. }
            | StoreError::SchemaTooNew { .. }
            | StoreError::ReplicaInUse(_)
            | StoreError::Unreadable { .. } => false,
        }
    }
}

/// A PostgreSQL failure of the connection or the server rather than of the statement: the
/// connection closed or broke, or the server's code is of class 08 (connection), 53 (out of
/// disk, memory or connections) or 57 (shut down, starting up).
fn pg_outage(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => ["08", "53", "57"]
            .iter()
            .any(|class| code.code().starts_with(class)),
        None => std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()),
    }
}

/// A SQLite failure of the file or the disk rather than of the statement.
fn sqlite_outage(e: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode::*;
    matches!(
        e.sqlite_error_code(),
        Some(
            DiskFull
                | SystemIoFailure
                | CannotOpen
                | ReadOnly
                | DatabaseBusy
                | DatabaseLocked
                | NotADatabase
                | DatabaseCorrupt
                | OutOfMemory
                | FileLockingProtocolFailed
        )
    )
}

/// What a failed PostgreSQL call says, with the server's message and code when it sent one
/// (the error's own text is only its kind, such as `db error`).
pub(crate) fn pg_reason(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            text.push_str(": ");
            text.push_str(detail);
        }
        return text;
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// Why a connection failed, in a few words.
fn io_reason(e: &std::io::Error) -> String {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => "connection refused".into(),
        ConnectionReset => "connection reset".into(),
        HostUnreachable => "host unreachable".into(),
        NetworkUnreachable => "network unreachable".into(),
        NotFound => "no such socket".into(),
        PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// A refused connection, as what to fix. PostgreSQL says `28P01` for a wrong password (and,
/// under password authentication, for a user it does not know, so as not to tell which),
/// `28000` with `role … does not exist` for an unknown user it trusts, `3D000` for an
/// unknown database.
fn refusal_text(target: &str, user: &str, database: &str, e: &tokio_postgres::Error) -> String {
    use tokio_postgres::error::SqlState;
    let reason = pg_reason(e);
    match e.code() {
        Some(code) if *code == SqlState::INVALID_PASSWORD => format!(
            "authentication failed for user \"{user}\" at {target}: check the user and password in --database-url"
        ),
        Some(code)
            if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
                && e.as_db_error()
                    .is_some_and(|db| db.message().starts_with("role ")) =>
        {
            format!(
                "unknown user \"{user}\" at {target}: the server has no such role; check the user in --database-url"
            )
        }
        Some(code) if *code == SqlState::INVALID_CATALOG_NAME => format!(
            "unknown database \"{database}\" at {target}: create it, or check the database name in --database-url"
        ),
        None if reason.contains("password missing") => format!(
            "the database at {target} asks for a password for user \"{user}\": add it to --database-url (postgres://user:password@host:port/database)"
        ),
        _ => format!("the database at {target} refused the connection: {reason}"),
    }
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
    fn from_rows(mut rows: Vec<(SessionRow, i64)>, limit: u32) -> Self {
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
