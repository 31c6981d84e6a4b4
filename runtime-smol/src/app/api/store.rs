//! Sessions, their messages, and runs in SQLite at `CONNOP_HOME/state.db`.
//!
//! Runs are written on every status change, so a run found unsettled when the gateway starts
//! (its process died without shutting down) is marked `interrupted` with
//! `The gateway restarted before this run settled.`

use connop_core::run::{RESTART_ERROR, Run, RunStatus};
use connop_core::time::Timestamp;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Why the store failed. Each is this machine's: a folder that cannot be made, a database
/// file that cannot be opened, a statement the disk refused.
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
    /// `state.db` could not be opened.
    #[error("cannot open the state database {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// A statement failed.
    #[error("the state database failed: {0}")]
    Sql(#[from] rusqlite::Error),
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

/// The SQLite store. One connection behind a lock: every statement is short.
pub struct Store {
    db: Mutex<Connection>,
}

impl Store {
    /// Opens (creating if needed) `home/state.db`, and marks every run left unsettled by an
    /// earlier process `interrupted`.
    pub fn open(home: &Path, now: Timestamp) -> Result<Self, StoreError> {
        std::fs::create_dir_all(home).map_err(|source| StoreError::CreateHome {
            path: home.to_path_buf(),
            source,
        })?;
        let path = home.join("state.db");
        let db = Connection::open(&path).map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        Self::init(db, now)
    }

    /// An in-memory store (tests).
    pub fn in_memory(now: Timestamp) -> Result<Self, StoreError> {
        Self::init(Connection::open_in_memory()?, now)
    }

    fn init(db: Connection, now: Timestamp) -> Result<Self, StoreError> {
        db.execute_batch(
            // WAL with synchronous=NORMAL: a crashed process loses nothing committed (what the
            // restart recovery needs); only a power cut may lose the last commits. Five writes
            // per run made full syncs the bottleneck (911 vs 2,963 runs per second).
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             CREATE TABLE IF NOT EXISTS sessions (
                 session_id TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '',
                 source TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL);
             CREATE TABLE IF NOT EXISTS messages (
                 id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
                 role TEXT NOT NULL, content TEXT NOT NULL, author TEXT, created_at REAL NOT NULL);
             CREATE TABLE IF NOT EXISTS runs (
                 run_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, status TEXT NOT NULL,
                 created_at REAL NOT NULL, updated_at REAL NOT NULL,
                 output TEXT, error TEXT, last_event TEXT);",
        )?;
        db.execute(
            "UPDATE runs SET status = 'interrupted', error = ?1, last_event = 'run.interrupted', updated_at = ?2
             WHERE status IN ('queued', 'running', 'stopping')",
            params![RESTART_ERROR, now.as_secs_f64()],
        )
        ?;
        Ok(Store { db: Mutex::new(db) })
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every session, oldest first.
    pub fn sessions(&self) -> Result<Vec<SessionRow>, StoreError> {
        let db = self.db();
        let mut statement = db.prepare(
            "SELECT session_id, title, source, created_at FROM sessions ORDER BY created_at, rowid",
        )?;
        let rows = statement.query_map([], |r| {
            Ok(SessionRow {
                session_id: r.get(0)?,
                title: r.get(1)?,
                source: r.get(2)?,
                created_at: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One session.
    pub fn session(&self, session_id: &str) -> Result<Option<SessionRow>, StoreError> {
        self.db()
            .query_row(
                "SELECT session_id, title, source, created_at FROM sessions WHERE session_id = ?1",
                params![session_id],
                |r| {
                    Ok(SessionRow {
                        session_id: r.get(0)?,
                        title: r.get(1)?,
                        source: r.get(2)?,
                        created_at: r.get(3)?,
                    })
                },
            )
            .optional()
            .map_err(StoreError::from)
    }

    /// Creates a session; `Ok(false)` when the id exists.
    pub fn create_session(&self, row: &SessionRow) -> Result<bool, StoreError> {
        let changed = self
            .db()
            .execute(
                "INSERT OR IGNORE INTO sessions (session_id, title, source, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![row.session_id, row.title, row.source, row.created_at],
            )
            ?;
        Ok(changed == 1)
    }

    /// Sets a session's title.
    pub fn set_title(&self, session_id: &str, title: &str) -> Result<(), StoreError> {
        self.db().execute(
            "UPDATE sessions SET title = ?2 WHERE session_id = ?1",
            params![session_id, title],
        )?;
        Ok(())
    }

    /// A session's messages, in order.
    pub fn history(&self, session_id: &str) -> Result<Vec<Message>, StoreError> {
        let db = self.db();
        let mut statement =
            db.prepare("SELECT role, content FROM messages WHERE session_id = ?1 ORDER BY id")?;
        let rows = statement.query_map(params![session_id], |r| {
            Ok(Message {
                role: r.get(0)?,
                content: r.get(1)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Appends a message.
    pub fn add_message(
        &self,
        session_id: &str,
        role: &str,
        content: &str,
        author: Option<&Value>,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        self.db()
            .execute(
                "INSERT INTO messages (session_id, role, content, author, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![session_id, role, content, author.map(Value::to_string), now.as_secs_f64()],
            )
            ?;
        Ok(())
    }

    /// Writes a run as it stands.
    pub fn save_run(&self, run: &Run) -> Result<(), StoreError> {
        self.db()
            .execute(
                "INSERT INTO runs (run_id, session_id, status, created_at, updated_at, output, error, last_event)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT(run_id) DO UPDATE SET status = ?3, updated_at = ?5, output = ?6, error = ?7, last_event = ?8",
                params![
                    run.run_id(),
                    run.session_id(),
                    run.status().as_str(),
                    run.created_at().as_secs_f64(),
                    run.updated_at().as_secs_f64(),
                    run.output(),
                    run.error(),
                    run.last_event(),
                ],
            )
            ?;
        Ok(())
    }

    /// A stored run (its events are not kept across restarts; the last one's name is).
    pub fn run(&self, run_id: &str) -> Result<Option<Run>, StoreError> {
        self.db()
            .query_row(
                "SELECT run_id, session_id, status, created_at, updated_at, output, error, last_event FROM runs WHERE run_id = ?1",
                params![run_id],
                |r| {
                    let status: String = r.get(2)?;
                    let last: Option<String> = r.get(7)?;
                    Ok(Run::restore(
                        r.get(0)?,
                        r.get(1)?,
                        RunStatus::parse(&status).unwrap_or(RunStatus::Interrupted),
                        stored_time(r.get(3)?),
                        stored_time(r.get(4)?),
                        r.get(5)?,
                        r.get(6)?,
                        last.as_deref().and_then(event_name),
                    ))
                },
            )
            .optional()
            .map_err(StoreError::from)
    }
}

/// A stored time (float seconds) as a timestamp. The file may hold anything a REAL can:
/// negative and NaN read as the epoch, infinite or too large saturate (never a panic).
fn stored_time(secs: f64) -> Timestamp {
    match std::time::Duration::try_from_secs_f64(secs) {
        Ok(since_epoch) => Timestamp::from_unix(since_epoch),
        Err(_) if secs > 0.0 => Timestamp::from_nanos(u64::MAX),
        Err(_) => Timestamp::EPOCH,
    }
}

/// The static name of a stored event.
fn event_name(name: &str) -> Option<&'static str> {
    [
        "run.started",
        "message.delta",
        "run.completed",
        "run.failed",
        "run.cancelled",
        "run.interrupted",
    ]
    .into_iter()
    .find(|n| *n == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u64) -> Timestamp {
        Timestamp::from_secs(1_800_000_000 + s)
    }

    #[test]
    fn sessions_messages_and_runs_round_trip_and_a_restart_interrupts_unsettled_runs() {
        let dir = std::env::temp_dir().join(format!(
            "connop-store-{}",
            connop_blocking::clock::random_hex(6)
        ));
        {
            let store = Store::open(&dir, t(0)).unwrap();
            let row = SessionRow {
                session_id: "bot-chat".into(),
                title: String::new(),
                source: "desktop".into(),
                created_at: t(1).as_secs_f64(),
            };
            assert!(store.create_session(&row).unwrap());
            assert!(!store.create_session(&row).unwrap(), "the id exists");
            store.set_title("bot-chat", "Bot Chat").unwrap();
            store
                .add_message("bot-chat", "user", "ping", None, t(2))
                .unwrap();
            store
                .add_message("bot-chat", "assistant", "pong", None, t(3))
                .unwrap();
            assert_eq!(store.history("bot-chat").unwrap().len(), 2);
            let mut done = Run::new("run_a", "bot-chat", t(4));
            done.start(t(4));
            done.complete("ok", t(5));
            store.save_run(&done).unwrap();
            let mut live = Run::new("run_b", "bot-chat", t(6));
            live.start(t(6));
            store.save_run(&live).unwrap();
        }
        let store = Store::open(&dir, t(10)).unwrap();
        assert_eq!(store.sessions().unwrap()[0].title, "Bot Chat");
        let done = store.run("run_a").unwrap().unwrap();
        assert_eq!(
            (done.status(), done.output()),
            (RunStatus::Completed, Some("ok"))
        );
        let live = store.run("run_b").unwrap().unwrap();
        assert_eq!(live.status(), RunStatus::Interrupted);
        assert_eq!(live.error(), Some(RESTART_ERROR));
        assert_eq!(live.to_json()["last_event"], "run.interrupted");
        assert!(store.run("run_none").unwrap().is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn stored_times_out_of_range_read_back_without_panicking() {
        let store = Store::in_memory(t(0)).unwrap();
        // 9e999 is how SQL writes +infinity into a REAL.
        for (id, created, updated) in [
            ("run_inf", "9e999", "-9e999"),
            ("run_huge", "1e300", "-1.5"),
        ] {
            store
                .db()
                .execute_batch(&format!(
                    "INSERT INTO runs (run_id, session_id, status, created_at, updated_at)
                     VALUES ('{id}', 's', 'completed', {created}, {updated})"
                ))
                .unwrap();
        }
        let inf = store.run("run_inf").unwrap().unwrap();
        assert_eq!(inf.created_at(), Timestamp::from_nanos(u64::MAX));
        assert_eq!(inf.updated_at(), Timestamp::EPOCH);
        let huge = store.run("run_huge").unwrap().unwrap();
        assert_eq!(huge.created_at(), Timestamp::from_nanos(u64::MAX));
        assert_eq!(huge.updated_at(), Timestamp::EPOCH);
        assert!(huge.to_json()["created_at"].is_number());
        assert_eq!(stored_time(f64::NAN), Timestamp::EPOCH);
        assert_eq!(stored_time(1.5), Timestamp::from_nanos(1_500_000_000));
    }
}
