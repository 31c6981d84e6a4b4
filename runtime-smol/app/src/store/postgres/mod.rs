//! The shared store: PostgreSQL (`--database-url postgres://…`), for any number of replicas
//! of `connop gateway --http` behind a load balancer (docs/operating.md#postgresql).
//!
//! - The schema is versioned and migrated at start inside one transaction that holds an
//!   advisory lock, so replicas starting together migrate once.
//! - A change to a run is a compare-and-set on its stored status and event count: read the
//!   run, let the core decide, write the new status with the new events and a notification in
//!   one statement that matches only the run as it was read; a replica that lost the race reads
//!   the winner's run and asks the core again. Two replicas never both end a run.
//! - Every replica listens (`LISTEN`) on two channels: run events, which wake the event streams
//!   of that run on every replica, and stops, which reach the replica whose turn it is.
//! - Each replica has an id (`--replica-id`, by default `<hostname>:<http port>`), held by a
//!   session advisory lock on its listening connection while it lives: a second live process
//!   with the same id is refused, and a process that starts under the id of a dead one ends
//!   that one's unsettled runs at once, as a restart.
//! - Each replica beats a heartbeat every 2 s on its listening connection; every second it
//!   interrupts the unsettled runs of replicas silent for 10 s (`replica.rs`).
//! - `Idempotency-Key`s are one table with the key as primary key: two replicas inserting the
//!   same key at once are serialized by the database, and the second reads the first's answer.

mod pool;
mod replica;
mod shared;

pub use pool::{CONNECT_TIMEOUT, Connected, QUERY_TIMEOUT, Socket, connect};

use super::migrations::{POSTGRES, newest};
use super::{
    FirstAnswer, HISTORY_BYTES, HISTORY_MESSAGES, Health, Keyed, Message, NewMessage, NewRun,
    RunSignals, SessionCursor, SessionPage, SessionRow, Started, Store, StoreError, StoreFuture,
    stored_answer, stored_event,
};
use connop_core::run::{Applied, IDEMPOTENCY_TTL, RESTART_ERROR, Run, RunChange, RunEvent};
use connop_core::time::Timestamp;
use pool::{Pool, Pooled};
use serde_json::Value;
use shared::{Shared, read_run};
use std::sync::{Arc, Mutex};
use tokio_postgres::Row;
use tokio_postgres::config::Host;

/// Advisory lock namespaces (the first key of the two-key form); the replicas' is
/// [`REPLICA_LOCK`].
const MIGRATION_LOCK: i32 = 0x636f_6e01;

/// The connections a replica keeps at most, besides its listening one.
pub const DEFAULT_POOL_SIZE: usize = 10;

/// How to reach the database, and who this replica is.
#[derive(Clone, Debug)]
pub struct PgOptions {
    config: tokio_postgres::Config,
    target: String,
    /// This replica's id (`--replica-id`); `None`: `<hostname>:<http port>`.
    pub replica_id: Option<String>,
    /// How many pooled connections at most.
    pub pool_size: usize,
}

/// A database URL that cannot be used: the person's to fix.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseUrlError {
    /// Not a PostgreSQL URL.
    #[error(
        "--database-url must be a postgres:// URL (without it, the store is SQLite in CONNOP_HOME), not {0:?}"
    )]
    NotPostgres(String),
    /// A PostgreSQL URL that does not parse.
    #[error("--database-url cannot be read: {0}")]
    Invalid(tokio_postgres::Error),
}

impl PgOptions {
    /// Reads a `postgres://` or `postgresql://` URL (or a `key=value` connection string).
    pub fn from_url(url: &str) -> Result<Self, DatabaseUrlError> {
        let lower = url.trim_start().to_ascii_lowercase();
        let is_url = lower.starts_with("postgres://") || lower.starts_with("postgresql://");
        if !is_url && !url.contains('=') {
            // Never echo what could be a password: the scheme is enough to see the mistake.
            let scheme = url.split("://").next().unwrap_or_default();
            return Err(DatabaseUrlError::NotPostgres(format!("{scheme}://…")));
        }
        let config: tokio_postgres::Config = url.parse().map_err(DatabaseUrlError::Invalid)?;
        let target = describe(&config);
        Ok(PgOptions {
            config,
            target,
            replica_id: None,
            pool_size: DEFAULT_POOL_SIZE,
        })
    }

    /// The database, named without its password (`user@host:port/dbname`).
    pub fn target(&self) -> &str {
        &self.target
    }
}

/// `user@host:port/dbname`, never the password.
fn describe(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = config
                .get_ports()
                .get(i)
                .or(config.get_ports().first())
                .copied()
                .unwrap_or(5432);
            match host {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(path) => format!("{}:{port}", path.display()),
            }
        })
        .collect();
    format!(
        "{}@{}/{}",
        config.get_user().unwrap_or("(user)"),
        hosts.join(","),
        config.get_dbname().unwrap_or("(database)")
    )
}

/// The replica id when none is given: this host and the HTTP port, stable across restarts of
/// the same gateway and unique among gateways on one host.
fn default_replica_id(http_port: u16) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "connop".to_owned());
    format!("{host}:{http_port}")
}

/// The PostgreSQL store of one replica.
pub struct PgStore {
    shared: Arc<Shared>,
    /// The listener and the heartbeat; dropped on leave.
    tasks: Mutex<Vec<smol::Task<()>>>,
}

impl PgStore {
    /// Connects, migrates, takes the replica's id (refused if a live process holds it),
    /// listens, beats once, and ends the runs a dead process of the same id left unsettled.
    pub async fn open(
        options: &PgOptions,
        signals: Arc<RunSignals>,
        health: Arc<Health>,
        http_port: u16,
        now: Timestamp,
    ) -> Result<Self, StoreError> {
        let replica = options
            .replica_id
            .clone()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| default_replica_id(http_port));
        let pool = Pool::new(
            options.config.clone(),
            options.target.clone(),
            options.pool_size,
        );
        migrate(&pool).await?;
        let shared = Arc::new(Shared {
            pool,
            signals,
            health,
            replica,
        });
        let (listener, heartbeat) = replica::start(&shared).await?;
        let mine: Vec<String> = {
            let mut db = shared.pool.get().await?;
            let rows = db
                .query(
                    "SELECT run_id FROM runs WHERE status IN ('queued', 'running', 'stopping') AND replica = $1",
                    &[&shared.replica],
                )
                .await?;
            rows.iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?
        };
        for run_id in mine {
            shared
                .apply(&run_id, RunChange::Interrupt(RESTART_ERROR), now)
                .await?;
        }
        Ok(PgStore {
            shared,
            tasks: Mutex::new(vec![listener, heartbeat]),
        })
    }

    /// This replica's id.
    pub fn replica_id(&self) -> &str {
        &self.shared.replica
    }
}

/// Applies the versions the database lacks, in one transaction under an advisory lock.
async fn migrate(pool: &Pool) -> Result<(), StoreError> {
    let mut db = pool.get().await?;
    db.begin().await?;
    db.batch(&format!(
        "SELECT pg_advisory_xact_lock({MIGRATION_LOCK}, 0)"
    ))
    .await?;
    db.batch(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version BIGINT PRIMARY KEY, name TEXT NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())",
    )
    .await?;
    let found: i64 = db
        .query_opt(
            "SELECT coalesce(max(version), 0)::BIGINT FROM schema_migrations",
            &[],
        )
        .await?
        .map(|row| row.try_get(0))
        .transpose()?
        .unwrap_or(0);
    let known = newest(POSTGRES);
    if found > known {
        db.rollback().await?;
        return Err(StoreError::SchemaTooNew { found, known });
    }
    for migration in POSTGRES.iter().filter(|m| m.version > found) {
        let applied = async {
            db.batch(migration.sql).await?;
            db.execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                &[&migration.version, &migration.name],
            )
            .await
        };
        applied.await.map_err(|e| StoreError::Migration {
            version: migration.version,
            name: migration.name,
            source: Box::new(e),
        })?;
    }
    db.commit().await
}

impl Shared {
    /// Compare-and-set: the run as read, changed as the core decides, written only if it is
    /// still as read; otherwise read again. Each lost race means the run moved on, which it
    /// can do only a few times before it is terminal and nothing changes it: the loop ends.
    async fn apply(
        &self,
        run_id: &str,
        change: RunChange<'_>,
        now: Timestamp,
    ) -> Result<Option<(Run, Applied)>, StoreError> {
        let mut db = self.pool.get().await?;
        loop {
            let Some(mut run) = read_run(&mut db, run_id).await? else {
                return Ok(None);
            };
            let (was, count) = (run.status(), count_param(run.event_count()));
            let applied = run.apply(change, now);
            if !applied.changed {
                return Ok(Some((run, applied)));
            }
            let seqs: Vec<i32> = applied.events.iter().map(|e| count_param(e.seq)).collect();
            let names: Vec<&str> = applied.events.iter().map(|e| e.event).collect();
            let data: Vec<String> = applied.events.iter().map(|e| e.data.to_string()).collect();
            let written = db
                .query(
                    "WITH updated AS (
                         UPDATE runs SET status = $4, updated_at = $5, output = $6, error = $7,
                             last_event = $8, events = $9
                         WHERE run_id = $1 AND status = $2 AND events = $3 RETURNING run_id),
                     inserted AS (
                         INSERT INTO run_events (run_id, seq, event, data)
                         SELECT updated.run_id, e.seq, e.event, e.data
                         FROM updated, unnest($10::INTEGER[], $11::TEXT[], $12::TEXT[])
                             AS e(seq, event, data))
                     SELECT pg_notify('connop_run_events', run_id) FROM updated",
                    &[
                        &run_id,
                        &was.as_str(),
                        &count,
                        &run.status().as_str(),
                        &run.updated_at().as_secs_f64(),
                        &run.output(),
                        &run.error(),
                        &run.last_event(),
                        &count_param(run.event_count()),
                        &seqs,
                        &names,
                        &data,
                    ],
                )
                .await?;
            if !written.is_empty() {
                drop(db);
                self.signals.changed(run_id);
                return Ok(Some((run, applied)));
            }
        }
    }
}

/// An event count or seq as the `INTEGER` column holds it.
fn count_param(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// The latest messages of a session, oldest first: [`HISTORY_MESSAGES`] at most, whose texts
/// add up to [`HISTORY_BYTES`] at most.
async fn history(db: &mut Pooled<'_>, session_id: &str) -> Result<Vec<Message>, StoreError> {
    let budget = i64::try_from(HISTORY_BYTES).unwrap_or(i64::MAX);
    let rows = db
        .query(
            "SELECT role, content FROM (
                 SELECT id, role, content,
                     sum(octet_length(content)) OVER (ORDER BY id DESC) AS upto
                 FROM (SELECT id, role, content FROM messages WHERE session_id = $1
                       ORDER BY id DESC LIMIT $2) AS latest) AS sized
             WHERE upto <= $3 ORDER BY id",
            &[&session_id, &i64::from(HISTORY_MESSAGES), &budget],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Message {
                role: r.try_get(0)?,
                content: r.try_get(1)?,
            })
        })
        .collect()
}

async fn insert_message(db: &mut Pooled<'_>, message: &NewMessage<'_>) -> Result<(), StoreError> {
    let author = message.author.map(Value::to_string);
    db.execute(
        "INSERT INTO messages (session_id, role, content, author, created_at) VALUES ($1, $2, $3, $4, $5)",
        &[
            &message.session_id,
            &message.role,
            &message.content,
            &author,
            &message.now.as_secs_f64(),
        ],
    )
    .await?;
    Ok(())
}

/// Records `keyed` unless a live entry has its key; answers that entry. Inside a
/// transaction: a concurrent insert of the same key waits for this one to end, then reads it.
async fn take_key(
    db: &mut Pooled<'_>,
    keyed: &Keyed<'_>,
) -> Result<Option<FirstAnswer>, StoreError> {
    let now = keyed.now.as_secs_f64();
    db.execute(
        "DELETE FROM idempotency_keys WHERE key = $1 AND created_at < $2",
        &[&keyed.key, &(now - IDEMPOTENCY_TTL.as_secs_f64())],
    )
    .await?;
    let status = i16::try_from(keyed.first.status).unwrap_or(i16::MAX);
    let inserted = db
        .execute(
            "INSERT INTO idempotency_keys (key, body, status, answer, created_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (key) DO NOTHING",
            &[
                &keyed.key,
                &keyed.first.body,
                &status,
                &keyed.first.answer.to_string(),
                &now,
            ],
        )
        .await?;
    if inserted == 1 {
        return Ok(None);
    }
    let Some(row) = db
        .query_opt(
            "SELECT body, status, answer FROM idempotency_keys WHERE key = $1",
            &[&keyed.key],
        )
        .await?
    else {
        return Ok(None);
    };
    let status: i16 = row.try_get(1)?;
    let answer: String = row.try_get(2)?;
    stored_answer(row.try_get(0)?, status.into(), &answer).map(Some)
}

/// A listed session and its position (the order of sessions created at the same time).
fn listed_row(row: &Row) -> Result<(SessionRow, i64), StoreError> {
    Ok((session_row(row)?, row.try_get(4)?))
}

fn session_row(row: &Row) -> Result<SessionRow, StoreError> {
    Ok(SessionRow {
        session_id: row.try_get(0)?,
        title: row.try_get(1)?,
        source: row.try_get(2)?,
        created_at: row.try_get(3)?,
    })
}

impl Store for PgStore {
    fn sessions<'a>(
        &'a self,
        after: Option<&'a SessionCursor>,
        limit: u32,
    ) -> StoreFuture<'a, SessionPage> {
        Box::pin(async move {
            let mut db = self.shared.pool.get().await?;
            // One more than asked: whether there is a next page.
            let read = i64::from(limit) + 1;
            let rows = match after {
                None => {
                    db.query(
                        "SELECT session_id, title, source, created_at, position FROM sessions
                         ORDER BY created_at, position LIMIT $1",
                        &[&read],
                    )
                    .await?
                }
                Some(cursor) => {
                    db.query(
                        "SELECT session_id, title, source, created_at, position FROM sessions
                         WHERE (created_at, position) > ($1, $2)
                         ORDER BY created_at, position LIMIT $3",
                        &[&cursor.created_at, &cursor.position, &read],
                    )
                    .await?
                }
            };
            let rows = rows.iter().map(listed_row).collect::<Result<_, _>>()?;
            Ok(SessionPage::from_rows(rows, limit))
        })
    }

    fn session<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<SessionRow>> {
        Box::pin(async move {
            let mut db = self.shared.pool.get().await?;
            let row = db
                .query_opt(
                    "SELECT session_id, title, source, created_at FROM sessions WHERE session_id = $1",
                    &[&session_id],
                )
                .await?;
            row.as_ref().map(session_row).transpose()
        })
    }

    fn create_session<'a>(&'a self, row: &'a SessionRow) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut db = self.shared.pool.get().await?;
            let inserted = db
                .execute(
                    "INSERT INTO sessions (session_id, title, source, created_at) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (session_id) DO NOTHING",
                    &[&row.session_id, &row.title, &row.source, &row.created_at],
                )
                .await?;
            Ok(inserted == 1)
        })
    }

    fn begin_turn<'a>(&'a self, message: &'a NewMessage<'a>) -> StoreFuture<'a, Vec<Message>> {
        Box::pin(async move {
            let mut db = self.shared.pool.get().await?;
            let before = history(&mut db, message.session_id).await?;
            insert_message(&mut db, message).await?;
            Ok(before)
        })
    }

    fn add_message<'a>(&'a self, message: &'a NewMessage<'a>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut db = self.shared.pool.get().await?;
            insert_message(&mut db, message).await
        })
    }

    fn start_run<'a>(&'a self, start: &'a NewRun<'a>) -> StoreFuture<'a, Started> {
        Box::pin(async move {
            let mut db = self.shared.pool.get().await?;
            db.begin().await?;
            if let Some(keyed) = &start.key {
                if let Some(first) = take_key(&mut db, keyed).await? {
                    db.rollback().await?;
                    return Ok(Started::Taken(first));
                }
            }
            let run = start.run;
            let now = run.created_at();
            db.execute(
                "INSERT INTO sessions (session_id, title, source, created_at) VALUES ($1, '', 'api_server', $2)
                 ON CONFLICT (session_id) DO NOTHING",
                &[&run.session_id(), &now.as_secs_f64()],
            )
            .await?;
            let before = history(&mut db, run.session_id()).await?;
            let message = NewMessage {
                session_id: run.session_id(),
                role: "user",
                content: start.message,
                author: start.author,
                now,
            };
            insert_message(&mut db, &message).await?;
            db.execute(
                "INSERT INTO runs (run_id, session_id, status, created_at, updated_at, events, replica)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &run.run_id(),
                    &run.session_id(),
                    &run.status().as_str(),
                    &now.as_secs_f64(),
                    &run.updated_at().as_secs_f64(),
                    &count_param(run.event_count()),
                    &self.shared.replica,
                ],
            )
            .await?;
            db.commit().await?;
            Ok(Started::Run(before))
        })
    }

    fn remember<'a>(&'a self, keyed: &'a Keyed<'a>) -> StoreFuture<'a, Option<FirstAnswer>> {
        Box::pin(async move {
            let mut db = self.shared.pool.get().await?;
            db.begin().await?;
            let taken = take_key(&mut db, keyed).await?;
            db.commit().await?;
            Ok(taken)
        })
    }

    fn run<'a>(&'a self, run_id: &'a str) -> StoreFuture<'a, Option<Run>> {
        Box::pin(async move {
            let mut db = self.shared.pool.get().await?;
            read_run(&mut db, run_id).await
        })
    }

    fn apply<'a>(
        &'a self,
        run_id: &'a str,
        change: RunChange<'a>,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<(Run, Applied)>> {
        Box::pin(self.shared.apply(run_id, change, now))
    }

    fn events<'a>(
        &'a self,
        run_id: &'a str,
        from: u32,
        limit: u32,
    ) -> StoreFuture<'a, Vec<RunEvent>> {
        Box::pin(async move {
            let mut db = self.shared.pool.get().await?;
            let rows = db
                .query(
                    "SELECT seq, event, data FROM run_events WHERE run_id = $1 AND seq >= $2 \
                     ORDER BY seq LIMIT $3",
                    &[&run_id, &count_param(from), &i64::from(limit)],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    let seq: i32 = r.try_get(0)?;
                    stored_event(seq.into(), r.try_get(1)?, r.try_get(2)?)
                })
                .collect()
        })
    }

    fn route_stop<'a>(&'a self, run_id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut db = self.shared.pool.get().await?;
            db.query("SELECT pg_notify('connop_run_stops', $1)", &[&run_id])
                .await?;
            Ok(())
        })
    }

    fn forget_expired_keys(&self, now: Timestamp) -> StoreFuture<'_, u64> {
        Box::pin(async move {
            let mut db = self.shared.pool.get().await?;
            let cutoff = now.as_secs_f64() - IDEMPOTENCY_TTL.as_secs_f64();
            db.execute(
                "DELETE FROM idempotency_keys WHERE created_at < $1",
                &[&cutoff],
            )
            .await
        })
    }

    fn ping(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            // A connection of its own: the pool's may all be taken, or stuck.
            let pool = &self.shared.pool;
            let (client, connection) = connect(pool.config(), pool.target()).await?;
            let driver = smol::spawn(async move {
                let _ = connection.await;
            });
            let answered = pool::timed(pool.target(), client.simple_query("SELECT 1")).await;
            drop(client);
            match answered {
                // Let it say goodbye to the server.
                Ok(_) => driver.detach(),
                // Cut off (the task dropped): the server may never answer.
                Err(_) => drop(driver),
            }
            answered.map(drop)
        })
    }

    fn active_runs(&self) -> StoreFuture<'_, Vec<String>> {
        Box::pin(async move {
            let mut db = self.shared.pool.get().await?;
            let rows = db
                .query(
                    "SELECT run_id FROM runs WHERE status IN ('queued', 'running', 'stopping') AND replica = $1",
                    &[&self.shared.replica],
                )
                .await?;
            rows.iter()
                .map(|r| r.try_get(0).map_err(StoreError::from))
                .collect()
        })
    }

    fn leave(&self) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            // No more heartbeats or sweeps from here; the listening connection closes with
            // its task, which frees the replica's id.
            let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
            for task in tasks {
                task.cancel().await;
            }
            let mut db = self.shared.pool.get().await?;
            db.execute(
                "DELETE FROM replicas WHERE replica_id = $1",
                &[&self.shared.replica],
            )
            .await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read_and_named_without_their_password() {
        let options =
            PgOptions::from_url("postgres://app:s3cret@db.example:6543/connop?connect_timeout=3")
                .unwrap();
        assert_eq!(options.target(), "app@db.example:6543/connop");
        assert!(!format!("{options:?}").is_empty());
        let socket = PgOptions::from_url("postgresql:///connop?host=/run/postgresql").unwrap();
        assert_eq!(socket.target(), "(user)@/run/postgresql:5432/connop");
        let refused = PgOptions::from_url("mysql://root:pw@h/db").unwrap_err();
        assert!(
            matches!(refused, DatabaseUrlError::NotPostgres(_)),
            "{refused}"
        );
        assert!(!refused.to_string().contains("pw"), "{refused}");
        assert!(PgOptions::from_url("postgres://h:notaport/db").is_err());
        assert!(default_replica_id(8642).ends_with(":8642"));
    }
}
