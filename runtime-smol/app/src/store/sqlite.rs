//! The embedded store: SQLite at `CONNOP_HOME/state.db`, for one gateway.
//!
//! One gateway per file: the store holds an exclusive lock on `CONNOP_HOME/state.lock` while
//! it is open (its pid written inside), so a second `gateway --http` on the same home is
//! refused instead of racing the first. `state.db` is created 0600 whatever the umask, and
//! SQLite gives its `-wal` and `-shm` files the database's mode.
//!
//! Every statement is short, on one connection behind a lock; a change to a run (its status
//! and its events) is one transaction, so a crash never leaves a status without its event.
//! Because nothing else can hold the store, a run found unsettled at open was left by a dead
//! process: it is marked `interrupted` with `The gateway restarted before this run settled.`

use super::migrations::{SQLITE, newest};
use super::{
    FirstAnswer, HISTORY_BYTES, HISTORY_MESSAGES, Keyed, Message, NewMessage, NewRun, RunSignals,
    SessionCursor, SessionPage, SessionRow, Started, Store, StoreError, StoreFuture, stored_answer,
    stored_count, stored_event, stored_time,
};
use connop_core::run::{
    Applied, IDEMPOTENCY_TTL, RESTART_ERROR, Run, RunChange, RunEvent, RunRecord, RunStatus,
};
use connop_core::time::Timestamp;
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde_json::Value;
use std::fs::{File, OpenOptions, Permissions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// The mode of the store's files: chat text is its owner's alone.
const FILE_MODE: u32 = 0o600;

/// The SQLite store.
pub struct SqliteStore {
    db: Mutex<Connection>,
    signals: Arc<RunSignals>,
    /// Held while open: one gateway per file.
    _lock: Option<File>,
}

impl SqliteStore {
    /// Opens (creating if needed) `home/state.db`, refused while another process holds it;
    /// migrates its schema and marks every run an earlier process left unsettled
    /// `interrupted`.
    pub fn open(home: &Path, signals: Arc<RunSignals>, now: Timestamp) -> Result<Self, StoreError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(home)
            .map_err(|source| StoreError::CreateHome {
                path: home.to_path_buf(),
                source,
            })?;
        let path = home.join("state.db");
        let lock = hold_lock(&home.join("state.lock"), &path)?;
        for file in ["state.db", "state.db-wal", "state.db-shm"] {
            let file = home.join(file);
            let create = file == path;
            private_file(&file, create)
                .map_err(|source| StoreError::File { path: file, source })?;
        }
        let db = Connection::open(&path).map_err(|source| StoreError::Open {
            path: path.clone(),
            source,
        })?;
        Self::init(db, signals, Some(lock), now)
    }

    /// An in-memory store (tests).
    pub fn in_memory(signals: Arc<RunSignals>, now: Timestamp) -> Result<Self, StoreError> {
        Self::init(Connection::open_in_memory()?, signals, None, now)
    }

    fn init(
        mut db: Connection,
        signals: Arc<RunSignals>,
        lock: Option<File>,
        now: Timestamp,
    ) -> Result<Self, StoreError> {
        // WAL with synchronous=NORMAL: a crashed process loses nothing committed (what the
        // restart recovery needs); only a power cut may lose the last commits. Five writes
        // per run made full syncs the bottleneck (911 vs 2,963 runs per second).
        db.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")?;
        migrate(&mut db)?;
        let store = SqliteStore {
            db: Mutex::new(db),
            signals,
            _lock: lock,
        };
        let unsettled: Vec<String> = {
            let db = store.db();
            let mut statement = db.prepare(
                "SELECT run_id FROM runs WHERE status IN ('queued', 'running', 'stopping')",
            )?;
            let ids = statement.query_map([], |r| r.get(0))?;
            ids.collect::<Result<_, _>>()?
        };
        for run_id in unsettled {
            store.apply_now(&run_id, RunChange::Interrupt(RESTART_ERROR), now)?;
        }
        Ok(store)
    }

    fn db(&self) -> MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn apply_now(
        &self,
        run_id: &str,
        change: RunChange<'_>,
        now: Timestamp,
    ) -> Result<Option<(Run, Applied)>, StoreError> {
        let applied = {
            let mut db = self.db();
            let tx = db.transaction()?;
            let Some(mut run) = read_run(&tx, run_id)? else {
                return Ok(None);
            };
            let applied = run.apply(change, now);
            if applied.changed {
                write_run(&tx, &run, &applied.events)?;
                tx.commit()?;
            }
            (run, applied)
        };
        if applied.1.changed {
            self.signals.changed(run_id);
        }
        Ok(Some(applied))
    }
}

/// Takes the store's lock, or says which process holds it.
fn hold_lock(path: &Path, database: &Path) -> Result<File, StoreError> {
    let failed = |source| StoreError::File {
        path: path.to_path_buf(),
        source,
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(FILE_MODE)
        .open(path)
        .map_err(failed)?;
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => break,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(StoreError::InUse {
                    path: database.to_path_buf(),
                    pid: text.trim().parse().ok(),
                });
            }
            Err(e) => return Err(failed(e.into())),
        }
    }
    file.set_len(0).map_err(failed)?;
    file.rewind().map_err(failed)?;
    writeln!(file, "{}", std::process::id()).map_err(failed)?;
    Ok(file)
}

/// Makes `path` a file of mode 0600: created so if `create` and missing (no umask can widen
/// it), narrowed if it exists.
fn private_file(path: &Path, create: bool) -> std::io::Result<()> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(FILE_MODE)
        .open(path)
    {
        Ok(file) => file.set_permissions(Permissions::from_mode(FILE_MODE)),
        Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Applies the versions the file lacks, each in one transaction.
fn migrate(db: &mut Connection) -> Result<(), StoreError> {
    let found: i64 = db.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let known = newest(SQLITE);
    if found > known {
        return Err(StoreError::SchemaTooNew { found, known });
    }
    for migration in SQLITE.iter().filter(|m| m.version > found) {
        let applied = (|| {
            let tx = db.transaction()?;
            tx.execute_batch(migration.sql)?;
            tx.execute_batch(&format!("PRAGMA user_version = {}", migration.version))?;
            tx.commit()
        })();
        applied.map_err(|e| StoreError::Migration {
            version: migration.version,
            name: migration.name,
            source: Box::new(e.into()),
        })?;
    }
    Ok(())
}

fn read_run(db: &Connection, run_id: &str) -> Result<Option<Run>, StoreError> {
    let row = db
        .prepare_cached(
            "SELECT run_id, session_id, status, created_at, updated_at, output, error, last_event, events
             FROM runs WHERE run_id = ?1",
        )?
        .query_row(params![run_id], |r| {
            Ok((
                RunRecord {
                    run_id: r.get(0)?,
                    session_id: r.get(1)?,
                    status: RunStatus::Queued,
                    created_at: stored_time(r.get(3)?),
                    updated_at: stored_time(r.get(4)?),
                    output: r.get(5)?,
                    error: r.get(6)?,
                    last_event: r.get(7)?,
                    events: stored_count(r.get(8)?),
                },
                r.get::<_, String>(2)?,
            ))
        })
        .optional()?;
    let Some((mut record, status)) = row else {
        return Ok(None);
    };
    record.status = RunStatus::parse(&status).ok_or(StoreError::Unreadable {
        what: "a run status",
        value: status,
    })?;
    Ok(Some(Run::restore(record)))
}

fn write_run(db: &Transaction<'_>, run: &Run, events: &[RunEvent]) -> Result<(), StoreError> {
    db.prepare_cached(
        "UPDATE runs SET status = ?2, updated_at = ?3, output = ?4, error = ?5, last_event = ?6, events = ?7
         WHERE run_id = ?1",
    )?
    .execute(params![
        run.run_id(),
        run.status().as_str(),
        run.updated_at().as_secs_f64(),
        run.output(),
        run.error(),
        run.last_event(),
        run.event_count(),
    ])?;
    let mut insert = db.prepare_cached(
        "INSERT INTO run_events (run_id, seq, event, data) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for event in events {
        insert.execute(params![
            run.run_id(),
            event.seq,
            event.event,
            event.data.to_string()
        ])?;
    }
    Ok(())
}

/// The latest messages of a session, oldest first: [`HISTORY_MESSAGES`] at most, whose texts
/// add up to [`HISTORY_BYTES`] at most.
fn history(db: &Connection, session_id: &str) -> Result<Vec<Message>, StoreError> {
    let mut statement = db.prepare_cached(
        "SELECT role, content FROM (
             SELECT id, role, content,
                 sum(length(CAST(content AS BLOB))) OVER (ORDER BY id DESC) AS upto
             FROM (SELECT id, role, content FROM messages WHERE session_id = ?1
                   ORDER BY id DESC LIMIT ?2))
         WHERE upto <= ?3 ORDER BY id",
    )?;
    let budget = i64::try_from(HISTORY_BYTES).unwrap_or(i64::MAX);
    let rows = statement.query_map(params![session_id, HISTORY_MESSAGES, budget], |r| {
        Ok(Message {
            role: r.get(0)?,
            content: r.get(1)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn insert_message(db: &Connection, message: &NewMessage<'_>) -> Result<(), StoreError> {
    db.prepare_cached(
        "INSERT INTO messages (session_id, role, content, author, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        message.session_id,
        message.role,
        message.content,
        message.author.map(Value::to_string),
        message.now.as_secs_f64()
    ])?;
    Ok(())
}

/// Records `keyed` unless its key is taken by a live entry; answers the entry that took it.
fn take_key(db: &Transaction<'_>, keyed: &Keyed<'_>) -> Result<Option<FirstAnswer>, StoreError> {
    let cutoff = expiry(keyed.now);
    db.prepare_cached("DELETE FROM idempotency_keys WHERE key = ?1 AND created_at < ?2")?
        .execute(params![keyed.key, cutoff])?;
    let inserted = db
        .prepare_cached(
            "INSERT INTO idempotency_keys (key, body, status, answer, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (key) DO NOTHING",
        )?
        .execute(params![
            keyed.key,
            keyed.first.body,
            keyed.first.status,
            keyed.first.answer.to_string(),
            keyed.now.as_secs_f64()
        ])?;
    if inserted == 1 {
        return Ok(None);
    }
    let (body, status, answer): (String, i64, String) = db
        .prepare_cached("SELECT body, status, answer FROM idempotency_keys WHERE key = ?1")?
        .query_row(params![keyed.key], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
    stored_answer(body, status, &answer).map(Some)
}

/// The creation time before which a key has expired.
fn expiry(now: Timestamp) -> f64 {
    now.as_secs_f64() - IDEMPOTENCY_TTL.as_secs_f64()
}

fn session_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        session_id: r.get(0)?,
        title: r.get(1)?,
        source: r.get(2)?,
        created_at: r.get(3)?,
    })
}

/// A future of work already done (SQLite answers at once).
fn done<'a, T: Send + 'a>(result: Result<T, StoreError>) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(result))
}

impl Store for SqliteStore {
    fn sessions<'a>(
        &'a self,
        after: Option<&'a SessionCursor>,
        limit: u32,
    ) -> StoreFuture<'a, SessionPage> {
        done((|| {
            let db = self.db();
            let with_position = |r: &rusqlite::Row<'_>| Ok((session_row(r)?, r.get(4)?));
            // One more than asked: whether there is a next page.
            let read = i64::from(limit) + 1;
            let rows: Vec<(SessionRow, i64)> = match after {
                None => db
                    .prepare_cached(
                        "SELECT session_id, title, source, created_at, rowid FROM sessions
                         ORDER BY created_at, rowid LIMIT ?1",
                    )?
                    .query_map(params![read], with_position)?
                    .collect::<Result<_, _>>()?,
                Some(cursor) => db
                    .prepare_cached(
                        "SELECT session_id, title, source, created_at, rowid FROM sessions
                         WHERE (created_at, rowid) > (?1, ?2)
                         ORDER BY created_at, rowid LIMIT ?3",
                    )?
                    .query_map(
                        params![cursor.created_at, cursor.position, read],
                        with_position,
                    )?
                    .collect::<Result<_, _>>()?,
            };
            Ok(SessionPage::from_rows(rows, limit))
        })())
    }

    fn session<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<SessionRow>> {
        done((|| {
            Ok(self
                .db()
                .prepare_cached(
                    "SELECT session_id, title, source, created_at FROM sessions WHERE session_id = ?1",
                )?
                .query_row(params![session_id], session_row)
                .optional()?)
        })())
    }

    fn create_session<'a>(&'a self, row: &'a SessionRow) -> StoreFuture<'a, bool> {
        done((|| {
            let changed = self
                .db()
                .prepare_cached(
                    "INSERT OR IGNORE INTO sessions (session_id, title, source, created_at) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![row.session_id, row.title, row.source, row.created_at])?;
            Ok(changed == 1)
        })())
    }

    fn begin_turn<'a>(&'a self, message: &'a NewMessage<'a>) -> StoreFuture<'a, Vec<Message>> {
        done((|| {
            let mut db = self.db();
            let tx = db.transaction()?;
            let before = history(&tx, message.session_id)?;
            insert_message(&tx, message)?;
            tx.commit()?;
            Ok(before)
        })())
    }

    fn add_message<'a>(&'a self, message: &'a NewMessage<'a>) -> StoreFuture<'a, ()> {
        done(insert_message(&self.db(), message))
    }

    fn start_run<'a>(&'a self, start: &'a NewRun<'a>) -> StoreFuture<'a, Started> {
        done((|| {
            let mut db = self.db();
            let tx = db.transaction()?;
            if let Some(keyed) = &start.key {
                if let Some(first) = take_key(&tx, keyed)? {
                    return Ok(Started::Taken(first));
                }
            }
            let run = start.run;
            let now = run.created_at();
            tx.prepare_cached(
                "INSERT OR IGNORE INTO sessions (session_id, title, source, created_at) VALUES (?1, '', 'api_server', ?2)",
            )?
            .execute(params![run.session_id(), now.as_secs_f64()])?;
            let before = history(&tx, run.session_id())?;
            insert_message(
                &tx,
                &NewMessage {
                    session_id: run.session_id(),
                    role: "user",
                    content: start.message,
                    author: start.author,
                    now,
                },
            )?;
            tx.prepare_cached(
                "INSERT INTO runs (run_id, session_id, status, created_at, updated_at, events)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                run.run_id(),
                run.session_id(),
                run.status().as_str(),
                now.as_secs_f64(),
                run.updated_at().as_secs_f64(),
                run.event_count()
            ])?;
            tx.commit()?;
            Ok(Started::Run(before))
        })())
    }

    fn remember<'a>(&'a self, keyed: &'a Keyed<'a>) -> StoreFuture<'a, Option<FirstAnswer>> {
        done((|| {
            let mut db = self.db();
            let tx = db.transaction()?;
            let taken = take_key(&tx, keyed)?;
            tx.commit()?;
            Ok(taken)
        })())
    }

    fn run<'a>(&'a self, run_id: &'a str) -> StoreFuture<'a, Option<Run>> {
        done(read_run(&self.db(), run_id))
    }

    fn apply<'a>(
        &'a self,
        run_id: &'a str,
        change: RunChange<'a>,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<(Run, Applied)>> {
        done(self.apply_now(run_id, change, now))
    }

    fn events<'a>(
        &'a self,
        run_id: &'a str,
        from: u32,
        limit: u32,
    ) -> StoreFuture<'a, Vec<RunEvent>> {
        done((|| {
            let db = self.db();
            let mut statement = db.prepare_cached(
                "SELECT seq, event, data FROM run_events WHERE run_id = ?1 AND seq >= ?2 \
                 ORDER BY seq LIMIT ?3",
            )?;
            let rows = statement.query_map(params![run_id, from, limit], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })?;
            let mut events = Vec::new();
            for row in rows {
                let (seq, name, data) = row?;
                events.push(stored_event(seq, &name, &data)?);
            }
            Ok(events)
        })())
    }

    fn route_stop<'a>(&'a self, _run_id: &'a str) -> StoreFuture<'a, ()> {
        // Every run of this store runs in this process.
        done(Ok(()))
    }

    fn forget_expired_keys(&self, now: Timestamp) -> StoreFuture<'_, u64> {
        done((|| {
            let gone = self
                .db()
                .prepare_cached("DELETE FROM idempotency_keys WHERE created_at < ?1")?
                .execute(params![expiry(now)])?;
            Ok(gone as u64)
        })())
    }

    fn ping(&self) -> StoreFuture<'_, ()> {
        done((|| {
            self.db()
                .query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
                    r.get::<_, i64>(0)
                })?;
            Ok(())
        })())
    }

    fn active_runs(&self) -> StoreFuture<'_, Vec<String>> {
        done((|| {
            let db = self.db();
            let mut statement = db.prepare_cached(
                "SELECT run_id FROM runs WHERE status IN ('queued', 'running', 'stopping')",
            )?;
            let ids = statement.query_map([], |r| r.get(0))?;
            Ok(ids.collect::<Result<_, _>>()?)
        })())
    }

    fn leave(&self) -> StoreFuture<'_, ()> {
        done(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn t(s: u64) -> Timestamp {
        Timestamp::from_secs(1_800_000_000 + s)
    }

    fn dir() -> std::path::PathBuf {
        std::env::temp_dir().join(format!("connop-store-{}", crate::sync::random_hex(6)))
    }

    fn signals() -> Arc<RunSignals> {
        Arc::default()
    }

    #[test]
    fn a_second_open_is_refused_with_the_holder_and_the_files_are_private() {
        let dir = dir();
        let first = SqliteStore::open(&dir, signals(), t(0)).unwrap();
        let refused = SqliteStore::open(&dir, signals(), t(1))
            .err()
            .expect("refused");
        assert!(
            matches!(&refused, StoreError::InUse { pid: Some(pid), .. } if *pid == std::process::id()),
            "{refused:?}"
        );
        let text = refused.to_string();
        assert!(
            text.contains("state.db") && text.contains("--database-url"),
            "{text}"
        );
        smol::block_on(first.create_session(&SessionRow {
            session_id: "s".into(),
            title: String::new(),
            source: "x".into(),
            created_at: 1.0,
        }))
        .unwrap();
        for file in ["state.db", "state.db-wal", "state.db-shm", "state.lock"] {
            let mode = std::fs::metadata(dir.join(file)).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o600, "{file}");
        }
        drop(first);
        SqliteStore::open(&dir, signals(), t(2)).expect("free again once closed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_database_of_before_versioning_migrates_and_replays_its_terminal_events() {
        let dir = dir();
        std::fs::create_dir_all(&dir).unwrap();
        {
            let db = Connection::open(dir.join("state.db")).unwrap();
            db.execute_batch(SQLITE[0].sql).unwrap();
            db.execute_batch(
                "INSERT INTO runs (run_id, session_id, status, created_at, updated_at, output, error, last_event)
                 VALUES ('run_done', 's', 'completed', 1.0, 2.0, 'hi', NULL, 'run.completed'),
                        ('run_live', 's', 'running', 1.0, 2.0, NULL, NULL, 'run.started')",
            )
            .unwrap();
        }
        let store = SqliteStore::open(&dir, signals(), t(5)).unwrap();
        smol::block_on(async {
            let done = store.events("run_done", 0, u32::MAX).await.unwrap();
            assert_eq!(done.len(), 1);
            assert_eq!(done[0].event, "run.completed");
            assert_eq!(done[0].data["output"], "hi");
            let live = store.run("run_live").await.unwrap().unwrap();
            assert_eq!(live.status(), RunStatus::Interrupted);
            assert_eq!(live.error(), Some(RESTART_ERROR));
            let names: Vec<_> = store
                .events("run_live", 0, u32::MAX)
                .await
                .unwrap()
                .into_iter()
                .map(|e| (e.seq, e.event))
                .collect();
            assert_eq!(names, [(0, "run.interrupted")]);
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn stored_times_out_of_range_read_back_without_panicking() {
        let store = SqliteStore::in_memory(signals(), t(0)).unwrap();
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
        smol::block_on(async {
            let inf = store.run("run_inf").await.unwrap().unwrap();
            assert_eq!(inf.created_at(), Timestamp::from_nanos(u64::MAX));
            assert_eq!(inf.updated_at(), Timestamp::EPOCH);
            let huge = store.run("run_huge").await.unwrap().unwrap();
            assert_eq!(huge.created_at(), Timestamp::from_nanos(u64::MAX));
            assert_eq!(huge.updated_at(), Timestamp::EPOCH);
            assert!(huge.to_json()["created_at"].is_number());
        });
        assert_eq!(stored_time(f64::NAN), Timestamp::EPOCH);
        assert_eq!(stored_time(1.5), Timestamp::from_nanos(1_500_000_000));
    }
}
