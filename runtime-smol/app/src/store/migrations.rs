//! The versioned schemas. Each store applies the versions it lacks, in order, each in one
//! transaction, when it opens: SQLite counts them in `PRAGMA user_version`, PostgreSQL in a
//! `schema_migrations` table, under an advisory lock so replicas starting together migrate
//! once. A version is never edited once released: a change is a new version.

/// One version of a schema.
pub(super) struct Migration {
    /// The version it brings the schema to (1, 2, …).
    pub version: i64,
    /// What it does, for the record and for errors.
    pub name: &'static str,
    /// The statements.
    pub sql: &'static str,
}

/// SQLite. Version 1 is the schema of the first release (created by `IF NOT EXISTS`, so a
/// database from before versioning is at version 1 after it); version 2 keeps run events and
/// idempotency keys, and gives every terminal run of before its terminal event back; version
/// 3 indexes sessions by creation time, for listing them a page at a time.
pub(super) const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "sessions, messages and runs",
        sql: "CREATE TABLE IF NOT EXISTS sessions (
                 session_id TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '',
                 source TEXT NOT NULL DEFAULT '', created_at REAL NOT NULL);
             CREATE TABLE IF NOT EXISTS messages (
                 id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
                 role TEXT NOT NULL, content TEXT NOT NULL, author TEXT, created_at REAL NOT NULL);
             CREATE TABLE IF NOT EXISTS runs (
                 run_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, status TEXT NOT NULL,
                 created_at REAL NOT NULL, updated_at REAL NOT NULL,
                 output TEXT, error TEXT, last_event TEXT);",
    },
    Migration {
        version: 2,
        name: "run events and idempotency keys",
        sql: "ALTER TABLE runs ADD COLUMN events INTEGER NOT NULL DEFAULT 0;
             CREATE TABLE run_events (
                 run_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL,
                 data TEXT NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID;
             CREATE TABLE idempotency_keys (
                 key TEXT PRIMARY KEY, body TEXT NOT NULL, status INTEGER NOT NULL,
                 answer TEXT NOT NULL, created_at REAL NOT NULL);
             CREATE INDEX idempotency_keys_age ON idempotency_keys (created_at);
             CREATE INDEX messages_session ON messages (session_id, id);
             CREATE INDEX runs_active ON runs (status)
                 WHERE status IN ('queued', 'running', 'stopping');
             INSERT INTO run_events (run_id, seq, event, data)
                 SELECT run_id, 0, last_event, CASE
                     WHEN output IS NOT NULL THEN json_object('event', last_event,
                         'run_id', run_id, 'timestamp', updated_at, 'output', output)
                     WHEN error IS NOT NULL THEN json_object('event', last_event,
                         'run_id', run_id, 'timestamp', updated_at, 'error', error)
                     ELSE json_object('event', last_event, 'run_id', run_id,
                         'timestamp', updated_at) END
                 FROM runs WHERE last_event IS NOT NULL
                     AND status IN ('completed', 'failed', 'cancelled', 'interrupted');
             UPDATE runs SET events = 1 WHERE last_event IS NOT NULL
                 AND status IN ('completed', 'failed', 'cancelled', 'interrupted');",
    },
    Migration {
        version: 3,
        name: "sessions in order of creation",
        // The rowid is part of every index entry: the index serves (created_at, rowid).
        sql: "CREATE INDEX sessions_order ON sessions (created_at);",
    },
];

/// PostgreSQL. Times are float seconds since the epoch as in SQLite, except the replicas'
/// heartbeats, which are the database's own clock (replicas' clocks may disagree). Event
/// data is `TEXT`, not `JSONB`, so it reads back byte for byte, keys in their order.
pub(super) const POSTGRES: &[Migration] = &[Migration {
    version: 1,
    name: "sessions, messages, runs, run events, idempotency keys and replicas",
    sql: "CREATE TABLE sessions (
             session_id TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '',
             source TEXT NOT NULL DEFAULT '', created_at DOUBLE PRECISION NOT NULL,
             position BIGINT GENERATED ALWAYS AS IDENTITY);
         CREATE INDEX sessions_order ON sessions (created_at, position);
         CREATE TABLE messages (
             id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session_id TEXT NOT NULL,
             role TEXT NOT NULL, content TEXT NOT NULL, author TEXT,
             created_at DOUBLE PRECISION NOT NULL);
         CREATE INDEX messages_session ON messages (session_id, id);
         CREATE TABLE runs (
             run_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, status TEXT NOT NULL,
             created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL,
             output TEXT, error TEXT, last_event TEXT, events INTEGER NOT NULL DEFAULT 0,
             replica TEXT NOT NULL);
         CREATE INDEX runs_active ON runs (replica)
             WHERE status IN ('queued', 'running', 'stopping');
         CREATE TABLE run_events (
             run_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL,
             data TEXT NOT NULL, PRIMARY KEY (run_id, seq));
         CREATE TABLE idempotency_keys (
             key TEXT PRIMARY KEY, body TEXT NOT NULL, status SMALLINT NOT NULL,
             answer TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL);
         CREATE INDEX idempotency_keys_age ON idempotency_keys (created_at);
         CREATE TABLE replicas (
             replica_id TEXT PRIMARY KEY,
             started_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
             heartbeat_at TIMESTAMPTZ NOT NULL);",
}];

/// The newest version of a list.
pub(super) fn newest(migrations: &[Migration]) -> i64 {
    migrations.last().map_or(0, |m| m.version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_count_up_from_one_without_gaps() {
        for list in [SQLITE, POSTGRES] {
            for (i, migration) in list.iter().enumerate() {
                assert_eq!(migration.version, i as i64 + 1, "{}", migration.name);
            }
        }
        assert_eq!(newest(SQLITE), 3);
    }
}
