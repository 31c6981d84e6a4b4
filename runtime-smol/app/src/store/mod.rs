//! The store of the HTTP API (docs/http-api.md#overview, docs/operating.md#limits and #postgresql):
//! sessions and their messages, runs with every event, and `Idempotency-Key`s. It is the source of
//! truth: a finished run lives only here, and `GET` and event streams read it.
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

mod error;
pub mod health;
mod interface;
mod migrations;
pub mod postgres;
mod signals;
pub mod sqlite;

pub use error::StoreError;
pub use health::{Guarded, Health};
pub(crate) use interface::stored_time;
pub use interface::{
    FirstAnswer, HISTORY_BYTES, HISTORY_MESSAGES, Keyed, Message, NewMessage, NewRun,
    SessionCursor, SessionPage, SessionRow, Started, Store, StoreFuture,
};
use interface::{stored_answer, stored_count, stored_event};
pub use signals::{RunSignals, Running, Watch};

use connop_core::time::Timestamp;
use std::path::PathBuf;
use std::sync::Arc;

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

#[cfg(test)]
mod contract;
