//! Whether the store can be used, and what the gateway does while it cannot.
//!
//! [`Guarded`] wraps the store every handler uses. A call that fails as an outage
//! ([`StoreError::is_outage`]: the server away, a broken connection, a full disk) makes the
//! store check itself with [`Store::ping`]. If the check fails too, the store is **down**:
//! - one `warn` line says so (not one per request);
//! - every call fails at once with [`StoreError::Unavailable`] (the API answers 503) instead
//!   of waiting on a server that is away;
//! - every turn running here is stopped, its agent command's group ended, and its run is
//!   ended `interrupted` with [`STORE_FAILED_ERROR`] once its end can be stored;
//! - the store is checked again every [`PROBE_EVERY`].
//!
//! When a check passes, the store is up again: one line says so, and every active run this
//! process owns whose turn no longer runs here (an end that was never stored) is ended the
//! same way. A check that passes at once (one broken connection among good ones) changes
//! nothing.

use super::{FirstAnswer, Keyed, NewMessage, NewRun, RunSignals, SessionPage, SessionRow};
use super::{Message, SessionCursor, Started, Store, StoreError, StoreFuture};
use connop_blocking::SystemClock;
use connop_core::run::{Applied, Run, RunChange, RunEvent, STORE_FAILED_ERROR};
use connop_core::time::Timestamp;
use event_listener::Event;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often a store that is down is checked.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// Where the store stands.
#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// In use.
    Up,
    /// A call failed as an outage: a check is under way; calls still go through.
    Checking,
    /// The check failed: calls fail at once, until a check passes.
    Down {
        /// Since when.
        since: Instant,
        /// What the failed check said.
        why: String,
    },
}

/// The store's state, shared by the guard, the store's own background work (a PostgreSQL
/// replica's listener and heartbeat report their failures here) and the turns waiting for
/// the store to come back.
pub struct Health {
    state: Mutex<State>,
    /// Notified on every change of state.
    changed: Event,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            state: Mutex::new(State::Up),
            changed: Event::new(),
        }
    }
}

impl Health {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, state: State) {
        *self.state() = state;
        self.changed.notify(usize::MAX);
    }

    /// A call failed with `error`: an outage makes the store check itself (once at a time).
    pub fn failed(&self, error: &StoreError) {
        if !error.is_outage() {
            return;
        }
        let mut state = self.state();
        if *state == State::Up {
            *state = State::Checking;
            drop(state);
            self.changed.notify(usize::MAX);
        }
    }

    /// Why the store is down, while it is.
    pub fn down(&self) -> Option<String> {
        match &*self.state() {
            State::Down { why, .. } => Some(why.clone()),
            State::Up | State::Checking => None,
        }
    }

    /// Returns once the store is not down (at once when it is not).
    pub async fn until_up(&self) {
        loop {
            let listener = self.changed.listen();
            if self.down().is_none() {
                return;
            }
            listener.await;
        }
    }

    /// Returns once a check is asked for.
    async fn until_checking(&self) {
        loop {
            let listener = self.changed.listen();
            if *self.state() == State::Checking {
                return;
            }
            listener.await;
        }
    }
}

/// The store as handlers use it: calls fail at once while it is down, and outages are noticed
/// (see the module's text). Dropping it ends its watch.
pub struct Guarded {
    inner: Arc<dyn Store>,
    health: Arc<Health>,
    _watch: smol::Task<()>,
}

impl Guarded {
    /// Guards `inner`, whose background work reports to `health`; `signals` are this
    /// process's turns, stopped when the store goes down.
    pub fn new(inner: Arc<dyn Store>, health: Arc<Health>, signals: Arc<RunSignals>) -> Self {
        let watch = smol::spawn(watch(inner.clone(), health.clone(), signals));
        Guarded {
            inner,
            health,
            _watch: watch,
        }
    }

    /// The store's state.
    pub fn health(&self) -> &Arc<Health> {
        &self.health
    }

    /// `call` on the store, unless it is down; an outage it answers is reported.
    fn guard<'a, T: Send + 'a>(
        &'a self,
        call: impl FnOnce(&'a dyn Store) -> StoreFuture<'a, T> + Send + 'a,
    ) -> StoreFuture<'a, T> {
        Box::pin(async move {
            if let Some(why) = self.health.down() {
                return Err(StoreError::Unavailable(why));
            }
            let answer = call(&*self.inner).await;
            if let Err(error) = &answer {
                self.health.failed(error);
            }
            answer
        })
    }
}

/// Checks the store whenever a call failed as an outage; while the check fails, the store is
/// down (turns here stopped, one line logged) and checked every [`PROBE_EVERY`]; once back,
/// the runs it owes an end are ended.
async fn watch(store: Arc<dyn Store>, health: Arc<Health>, signals: Arc<RunSignals>) {
    let clock = SystemClock::new();
    loop {
        health.until_checking().await;
        let error = match store.ping().await {
            Ok(()) => {
                health.set(State::Up);
                continue;
            }
            Err(error) => error,
        };
        let since = Instant::now();
        health.set(State::Down {
            since,
            why: error.to_string(),
        });
        let stopped = signals.store_failed();
        tracing::warn!(
            target: "connop::store",
            error = %error,
            turns_stopped = stopped.len(),
            "the store is unavailable: requests that need it are answered 503, and the turns running here are stopped, until it is back",
        );
        loop {
            smol::Timer::after(PROBE_EVERY).await;
            if store.ping().await.is_ok() {
                break;
            }
        }
        health.set(State::Up);
        tracing::warn!(
            target: "connop::store",
            down_s = since.elapsed().as_secs_f64(),
            "the store is available again",
        );
        end_owed_runs(&*store, &signals, &clock).await;
    }
}

/// Ends every active run this process owns whose turn does not run here: its end was never
/// stored.
async fn end_owed_runs(store: &dyn Store, signals: &RunSignals, clock: &SystemClock) {
    let Ok(active) = store.active_runs().await else {
        return;
    };
    for run_id in active
        .iter()
        .filter(|run_id| !signals.is_running_here(run_id))
    {
        let ended = store
            .apply(
                run_id,
                RunChange::Interrupt(STORE_FAILED_ERROR),
                clock.now(),
            )
            .await;
        if let Ok(Some((run, applied))) = ended {
            if applied.changed {
                tracing::info!(
                    target: "connop::run",
                    run_id = run.run_id(),
                    error = STORE_FAILED_ERROR,
                    "run ended: the store failed while it was active",
                );
            }
        }
    }
}

impl Store for Guarded {
    fn sessions<'a>(
        &'a self,
        after: Option<&'a SessionCursor>,
        limit: u32,
    ) -> StoreFuture<'a, SessionPage> {
        self.guard(move |s| s.sessions(after, limit))
    }

    fn session<'a>(&'a self, session_id: &'a str) -> StoreFuture<'a, Option<SessionRow>> {
        self.guard(move |s| s.session(session_id))
    }

    fn create_session<'a>(&'a self, row: &'a SessionRow) -> StoreFuture<'a, bool> {
        self.guard(move |s| s.create_session(row))
    }

    fn begin_turn<'a>(&'a self, message: &'a NewMessage<'a>) -> StoreFuture<'a, Vec<Message>> {
        self.guard(move |s| s.begin_turn(message))
    }

    fn add_message<'a>(&'a self, message: &'a NewMessage<'a>) -> StoreFuture<'a, ()> {
        self.guard(move |s| s.add_message(message))
    }

    fn start_run<'a>(&'a self, start: &'a NewRun<'a>) -> StoreFuture<'a, Started> {
        self.guard(move |s| s.start_run(start))
    }

    fn remember<'a>(&'a self, key: &'a Keyed<'a>) -> StoreFuture<'a, Option<FirstAnswer>> {
        self.guard(move |s| s.remember(key))
    }

    fn run<'a>(&'a self, run_id: &'a str) -> StoreFuture<'a, Option<Run>> {
        self.guard(move |s| s.run(run_id))
    }

    fn apply<'a>(
        &'a self,
        run_id: &'a str,
        change: RunChange<'a>,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<(Run, Applied)>> {
        self.guard(move |s| s.apply(run_id, change, now))
    }

    fn events<'a>(
        &'a self,
        run_id: &'a str,
        from: u32,
        limit: u32,
    ) -> StoreFuture<'a, Vec<RunEvent>> {
        self.guard(move |s| s.events(run_id, from, limit))
    }

    fn route_stop<'a>(&'a self, run_id: &'a str) -> StoreFuture<'a, ()> {
        self.guard(move |s| s.route_stop(run_id))
    }

    fn forget_expired_keys(&self, now: Timestamp) -> StoreFuture<'_, u64> {
        self.guard(move |s| s.forget_expired_keys(now))
    }

    fn ping(&self) -> StoreFuture<'_, ()> {
        self.inner.ping()
    }

    fn active_runs(&self) -> StoreFuture<'_, Vec<String>> {
        self.guard(|s| s.active_runs())
    }

    fn leave(&self) -> StoreFuture<'_, ()> {
        self.guard(|s| s.leave())
    }
}
