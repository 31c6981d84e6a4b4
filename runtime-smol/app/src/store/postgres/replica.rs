//! A replica's life on the shared database: its listening connection, its heartbeat, and the
//! sweep of dead replicas' runs.
//!
//! - **Listening**: one connection outside the pool holds the replica id's advisory lock and
//!   `LISTEN`s for run events (wake this process's event streams of that run) and stops (flip
//!   the switch of a turn running here). If it breaks, it is made again after a second; then
//!   every stream reads the store again and every turn here whose run reads `stopping` is
//!   stopped, so nothing missed while it was down is lost.
//! - **Heartbeat**: every [`HEARTBEAT_EVERY`] the replica writes the database's clock into its
//!   row, on the listening connection so request traffic never delays it.
//! - **Sweep**: every second each replica looks for non-terminal runs whose replica's
//!   heartbeat is older than [`REPLICA_DEAD_AFTER`] (or gone) and interrupts each with
//!   [`REPLICA_LOST_ERROR`]. Survivors may race on a run; the compare-and-set of
//!   [`Shared::apply`] lets exactly one write its terminal event.
//!
//! Every statement here is answered within [`QUERY_TIMEOUT`](super::QUERY_TIMEOUT), and a
//! listening connection that breaks or a heartbeat that fails is reported to the store's
//! [`Health`](crate::store::Health), which checks whether the database went away.

use super::pool::connect;
use super::pool::timed;
use super::shared::{EVENTS_CHANNEL, REPLICA_LOCK, STOPS_CHANNEL, Shared, read_run};
use crate::store::StoreError;
use connop_blocking::SystemClock;
use connop_core::run::{HEARTBEAT_EVERY, REPLICA_DEAD_AFTER, REPLICA_LOST_ERROR, RunChange};
use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;
use tokio_postgres::{AsyncMessage, Client};

/// How often a replica looks for dead replicas' runs.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How long a replica id held by another process is tried again before the start is
/// refused: the server frees the id of a process that just died when it notices.
const ID_GRACE: Duration = Duration::from_secs(3);

/// How long a broken listening connection waits before it is made again.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// The listening connection: its client (heartbeats go through it) and the task driving it,
/// which ends when the connection does.
struct Listening {
    client: Arc<Client>,
    driver: smol::Task<()>,
}

/// Connects the listening connection, takes the replica's id and listens, then beats once;
/// answers the tasks that keep listening and beating.
pub(super) async fn start(
    shared: &Arc<Shared>,
) -> Result<(smol::Task<()>, smol::Task<()>), StoreError> {
    // A process that died a moment ago may still hold the id until the server notices.
    let given_up = std::time::Instant::now() + ID_GRACE;
    let listening = loop {
        match listen(shared).await {
            Err(StoreError::ReplicaInUse(_)) if std::time::Instant::now() < given_up => {
                smol::Timer::after(Duration::from_millis(100)).await;
            }
            other => break other?,
        }
    };
    let beating: Arc<Mutex<Option<Arc<Client>>>> =
        Arc::new(Mutex::new(Some(listening.client.clone())));
    beat(shared, &listening.client).await?;
    let listener = smol::spawn(keep_listening(shared.clone(), listening, beating.clone()));
    let heartbeat = smol::spawn(keep_beating(shared.clone(), beating));
    Ok((listener, heartbeat))
}

async fn listen(shared: &Arc<Shared>) -> Result<Listening, StoreError> {
    let (client, mut connection) = connect(shared.pool.config(), shared.pool.target()).await?;
    let signals = shared.signals.clone();
    let driver = smol::spawn(async move {
        poll_fn(|cx| {
            loop {
                match connection.poll_message(cx) {
                    Poll::Ready(Some(Ok(AsyncMessage::Notification(note)))) => {
                        match note.channel() {
                            EVENTS_CHANNEL => signals.changed(note.payload()),
                            STOPS_CHANNEL => {
                                signals.stop_here(note.payload());
                            }
                            _ => {}
                        }
                    }
                    Poll::Ready(Some(Ok(_))) => {}
                    Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(()),
                    Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await
    });
    let target = shared.pool.target();
    let held: bool = timed(
        target,
        client.query_one(
            "SELECT pg_try_advisory_lock($1, hashtext($2))",
            &[&REPLICA_LOCK, &shared.replica],
        ),
    )
    .await?
    .try_get(0)?;
    if !held {
        return Err(StoreError::ReplicaInUse(shared.replica.clone()));
    }
    let listen = format!("LISTEN {EVENTS_CHANNEL}; LISTEN {STOPS_CHANNEL}");
    timed(target, client.batch_execute(&listen)).await?;
    Ok(Listening {
        client: Arc::new(client),
        driver,
    })
}

/// Writes the heartbeat (the row is made again if a survivor took this replica for dead).
async fn beat(shared: &Shared, client: &Client) -> Result<(), StoreError> {
    timed(
        shared.pool.target(),
        client.execute(
            "INSERT INTO replicas (replica_id, heartbeat_at) VALUES ($1, clock_timestamp())
             ON CONFLICT (replica_id) DO UPDATE SET heartbeat_at = clock_timestamp()",
            &[&shared.replica],
        ),
    )
    .await?;
    Ok(())
}

async fn keep_listening(
    shared: Arc<Shared>,
    mut listening: Listening,
    beating: Arc<Mutex<Option<Arc<Client>>>>,
) {
    loop {
        (&mut listening.driver).await;
        *beating.lock().unwrap_or_else(|p| p.into_inner()) = None;
        shared.health.failed(&StoreError::Unreachable {
            target: shared.pool.target().to_owned(),
            source: std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the listening connection closed",
            ),
        });
        listening = loop {
            smol::Timer::after(RECONNECT_AFTER).await;
            if let Ok(again) = listen(&shared).await {
                break again;
            }
        };
        *beating.lock().unwrap_or_else(|p| p.into_inner()) = Some(listening.client.clone());
        // Whatever was notified while the connection was down.
        shared.signals.changed_all();
        for run_id in shared.signals.running_here() {
            let stopped = match shared.pool.get().await {
                Ok(mut db) => read_run(&mut db, &run_id)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|run| run.status() != connop_core::run::RunStatus::Running),
                Err(_) => false,
            };
            if stopped {
                shared.signals.stop_here(&run_id);
            }
        }
    }
}

async fn keep_beating(shared: Arc<Shared>, beating: Arc<Mutex<Option<Arc<Client>>>>) {
    let clock = SystemClock::new();
    let mut since_beat = Duration::ZERO;
    loop {
        smol::Timer::after(SWEEP_EVERY).await;
        let client = beating.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(client) = client else { continue };
        since_beat += SWEEP_EVERY;
        if since_beat >= HEARTBEAT_EVERY {
            match beat(&shared, &client).await {
                Ok(()) => since_beat = Duration::ZERO,
                Err(error) => {
                    shared.health.failed(&error);
                    continue;
                }
            }
        }
        let _ = sweep(&shared, &client, &clock).await;
    }
}

/// Interrupts every non-terminal run of a replica whose heartbeat is older than
/// [`REPLICA_DEAD_AFTER`], or gone.
async fn sweep(shared: &Shared, client: &Client, clock: &SystemClock) -> Result<(), StoreError> {
    let rows = timed(
        shared.pool.target(),
        client.query(
            "SELECT run_id FROM runs r
             WHERE status IN ('queued', 'running', 'stopping') AND replica <> $1
               AND NOT EXISTS (SELECT 1 FROM replicas p WHERE p.replica_id = r.replica
                   AND p.heartbeat_at > clock_timestamp() - make_interval(secs => $2))",
            &[&shared.replica, &REPLICA_DEAD_AFTER.as_secs_f64()],
        ),
    )
    .await?;
    for row in rows {
        let run_id: String = row.try_get(0)?;
        shared
            .apply(
                &run_id,
                RunChange::Interrupt(REPLICA_LOST_ERROR),
                clock.now(),
            )
            .await?;
    }
    Ok(())
}
