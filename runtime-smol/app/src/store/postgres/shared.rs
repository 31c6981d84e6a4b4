//! What the PostgreSQL store and its replica tasks (the listener, the heartbeat) share: the
//! pool and the replica's name, the channels and the lock they use, and how a run is read.

use super::pool::{Pool, Pooled};
use crate::store::{Health, RunSignals, StoreError, stored_count, stored_time};
use connop_core::run::{Run, RunRecord, RunStatus};
use std::sync::Arc;

/// The channel that carries run ids whose runs changed.
pub(super) const EVENTS_CHANNEL: &str = "connop_run_events";
/// The channel that carries run ids to stop.
pub(super) const STOPS_CHANNEL: &str = "connop_run_stops";
/// Advisory lock namespace of the replicas' ids (the first key of the two-key form).
pub(super) const REPLICA_LOCK: i32 = 0x636f_6e02;

/// What the store and its background tasks share.
pub(super) struct Shared {
    pub(super) pool: Pool,
    pub(super) signals: Arc<RunSignals>,
    /// Where the listener and the heartbeat report a failed connection.
    pub(super) health: Arc<Health>,
    pub(super) replica: String,
}

/// The run `run_id`, if it is stored.
pub(super) async fn read_run(db: &mut Pooled<'_>, run_id: &str) -> Result<Option<Run>, StoreError> {
    let Some(row) = db
        .query_opt(
            "SELECT run_id, session_id, status, created_at, updated_at, output, error, last_event, events
             FROM runs WHERE run_id = $1",
            &[&run_id],
        )
        .await?
    else {
        return Ok(None);
    };
    let status: String = row.try_get(2)?;
    let status = RunStatus::parse(&status).ok_or(StoreError::Unreadable {
        what: "a run status",
        value: status,
    })?;
    Ok(Some(Run::restore(RunRecord {
        run_id: row.try_get(0)?,
        session_id: row.try_get(1)?,
        status,
        created_at: stored_time(row.try_get(3)?),
        updated_at: stored_time(row.try_get(4)?),
        output: row.try_get(5)?,
        error: row.try_get(6)?,
        last_event: row.try_get(7)?,
        events: stored_count(row.try_get::<_, i32>(8)?.into()),
    })))
}
