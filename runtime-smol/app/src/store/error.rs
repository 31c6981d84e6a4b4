//! Why the store failed, and how a database's failure is told apart: an outage (the
//! connection, the disk) or a refused statement, in words that say what to fix.

use std::path::PathBuf;

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
fn pg_reason(e: &tokio_postgres::Error) -> String {
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
