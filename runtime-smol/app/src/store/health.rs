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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;
    use connop_core::run::RunStatus;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// The real SQLite store, made to fail as an unreachable server while `away` is set.
    struct Failing {
        inner: SqliteStore,
        away: AtomicBool,
    }

    impl Failing {
        fn call<'a, T: Send + 'a>(&'a self, call: StoreFuture<'a, T>) -> StoreFuture<'a, T> {
            if self.away.load(Ordering::Acquire) {
                return Box::pin(std::future::ready(Err(StoreError::Unreachable {
                    target: "test".into(),
                    source: std::io::ErrorKind::ConnectionRefused.into(),
                })));
            }
            call
        }
    }

    impl Store for Failing {
        fn sessions<'a>(
            &'a self,
            after: Option<&'a SessionCursor>,
            limit: u32,
        ) -> StoreFuture<'a, SessionPage> {
            self.call(self.inner.sessions(after, limit))
        }
        fn session<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionRow>> {
            self.call(self.inner.session(id))
        }
        fn create_session<'a>(&'a self, row: &'a SessionRow) -> StoreFuture<'a, bool> {
            self.call(self.inner.create_session(row))
        }
        fn begin_turn<'a>(&'a self, m: &'a NewMessage<'a>) -> StoreFuture<'a, Vec<Message>> {
            self.call(self.inner.begin_turn(m))
        }
        fn add_message<'a>(&'a self, m: &'a NewMessage<'a>) -> StoreFuture<'a, ()> {
            self.call(self.inner.add_message(m))
        }
        fn start_run<'a>(&'a self, start: &'a NewRun<'a>) -> StoreFuture<'a, Started> {
            self.call(self.inner.start_run(start))
        }
        fn remember<'a>(&'a self, key: &'a Keyed<'a>) -> StoreFuture<'a, Option<FirstAnswer>> {
            self.call(self.inner.remember(key))
        }
        fn run<'a>(&'a self, run_id: &'a str) -> StoreFuture<'a, Option<Run>> {
            self.call(self.inner.run(run_id))
        }
        fn apply<'a>(
            &'a self,
            run_id: &'a str,
            change: RunChange<'a>,
            now: Timestamp,
        ) -> StoreFuture<'a, Option<(Run, Applied)>> {
            self.call(self.inner.apply(run_id, change, now))
        }
        fn events<'a>(&'a self, id: &'a str, from: u32, n: u32) -> StoreFuture<'a, Vec<RunEvent>> {
            self.call(self.inner.events(id, from, n))
        }
        fn route_stop<'a>(&'a self, run_id: &'a str) -> StoreFuture<'a, ()> {
            self.call(self.inner.route_stop(run_id))
        }
        fn forget_expired_keys(&self, now: Timestamp) -> StoreFuture<'_, u64> {
            self.call(self.inner.forget_expired_keys(now))
        }
        fn ping(&self) -> StoreFuture<'_, ()> {
            self.call(self.inner.ping())
        }
        fn active_runs(&self) -> StoreFuture<'_, Vec<String>> {
            self.call(self.inner.active_runs())
        }
        fn leave(&self) -> StoreFuture<'_, ()> {
            self.call(self.inner.leave())
        }
    }

    fn t(s: u64) -> Timestamp {
        Timestamp::from_secs(1_800_000_000 + s)
    }

    /// Waits (at most 10 s) until `health` satisfies `done`, woken by its changes.
    async fn until(health: &Health, done: impl Fn(&Health) -> bool) {
        let waited = async {
            loop {
                let listener = health.changed.listen();
                if done(health) {
                    return;
                }
                listener.await;
            }
        };
        futures_lite::future::or(waited, async {
            smol::Timer::after(Duration::from_secs(10)).await;
            panic!("the store's state did not change within 10 s");
        })
        .await
    }

    #[test]
    fn an_outage_fails_calls_at_once_stops_turns_and_ends_what_it_left_once_back() {
        smol::block_on(async {
            let signals = Arc::new(RunSignals::default());
            let failing = Arc::new(Failing {
                inner: SqliteStore::in_memory(signals.clone(), t(0)).unwrap(),
                away: AtomicBool::new(false),
            });
            let health = Arc::new(Health::default());
            let store = Guarded::new(failing.clone(), health.clone(), signals.clone());
            // One run whose turn runs here, one whose end was never stored.
            for id in ["run_here", "run_owed"] {
                let run = Run::new(id, "s", t(1));
                let start = NewRun {
                    run: &run,
                    message: "m",
                    author: None,
                    key: None,
                };
                store.start_run(&start).await.unwrap();
                store.apply(id, RunChange::Start, t(2)).await.unwrap();
            }
            let here = signals.run_here("run_here");

            // A check that passes changes nothing.
            health.failed(&StoreError::Timeout {
                target: "test".into(),
                what: "a statement",
                after: Duration::from_secs(10),
            });
            until(&health, |h| *h.state() == State::Up).await;
            assert!(!here.store_failed());

            failing.away.store(true, Ordering::Release);
            let refused = store.run("run_here").await.unwrap_err();
            assert!(refused.is_outage(), "{refused}");
            until(&health, |h| h.down().is_some()).await;
            assert!(matches!(
                store.run("run_here").await,
                Err(StoreError::Unavailable(_))
            ));
            here.stopped().await;
            assert!(
                here.store_failed(),
                "the turn here was stopped for the outage"
            );

            let watch = signals.watch("run_owed");
            let ended = watch.listen();
            failing.away.store(false, Ordering::Release);
            health.until_up().await;
            // Ended once the store is back: the run nobody runs; the one here is its turn's.
            futures_lite::future::or(ended, async {
                smol::Timer::after(Duration::from_secs(10)).await;
                panic!("the owed run was not ended within 10 s");
            })
            .await;
            let owed = store.run("run_owed").await.unwrap().unwrap();
            assert_eq!(
                (owed.status(), owed.error()),
                (RunStatus::Interrupted, Some(STORE_FAILED_ERROR))
            );
            let mine = store.run("run_here").await.unwrap().unwrap();
            assert_eq!(mine.status(), RunStatus::Running);
        });
    }
}
