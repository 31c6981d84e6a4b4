//! This process's side of the runs: who is watching which run's events (an event stream
//! waits here, and re-reads the store when woken), and the stop switches of the runs whose
//! turns run here. A store wakes watchers after it wrote a change; PostgreSQL's listener also
//! wakes them for changes other replicas wrote, and flips a switch for a stop that arrived on
//! another replica. When the store goes away, every turn running here is stopped with a mark
//! saying so: its run then ends `interrupted` with
//! [`STORE_FAILED_ERROR`](connop_core::run::STORE_FAILED_ERROR) once the store is back, not
//! `cancelled` as by a person's stop.

use crate::sync::Switch;
use event_listener::{Event, EventListener};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Watchers and stop switches, by run id.
#[derive(Default)]
pub struct RunSignals {
    watched: Mutex<HashMap<String, Arc<Event>>>,
    running: Mutex<HashMap<String, Arc<Stop>>>,
}

/// A turn's stop switch, and whether the store's failure flipped it.
#[derive(Default)]
struct Stop {
    switch: Switch,
    store_failed: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RunSignals {
    /// Starts watching `run_id`; the watch ends when dropped.
    pub fn watch(self: &Arc<Self>, run_id: &str) -> Watch {
        let event = lock(&self.watched)
            .entry(run_id.to_owned())
            .or_default()
            .clone();
        Watch {
            signals: self.clone(),
            run_id: run_id.to_owned(),
            event,
        }
    }

    /// Run `run_id` changed: its watchers read the store again.
    pub fn changed(&self, run_id: &str) {
        if let Some(event) = lock(&self.watched).get(run_id) {
            event.notify(usize::MAX);
        }
    }

    /// Anything may have changed (a listener reconnected): every watcher reads again.
    pub fn changed_all(&self) {
        for event in lock(&self.watched).values() {
            event.notify(usize::MAX);
        }
    }

    /// The turn of `run_id` runs here until the guard drops; its switch is flipped by a stop.
    pub fn run_here(self: &Arc<Self>, run_id: &str) -> Running {
        let stop = Arc::new(Stop::default());
        lock(&self.running).insert(run_id.to_owned(), stop.clone());
        Running {
            signals: self.clone(),
            run_id: run_id.to_owned(),
            stop,
        }
    }

    /// Stops the turn of `run_id` if it runs here; whether it does.
    pub fn stop_here(&self, run_id: &str) -> bool {
        match lock(&self.running).get(run_id) {
            Some(stop) => {
                stop.switch.flip();
                true
            }
            None => false,
        }
    }

    /// The store went away: stops every turn running here, marked so; answers their runs.
    pub fn store_failed(&self) -> Vec<String> {
        let running = lock(&self.running);
        for stop in running.values() {
            stop.store_failed.store(true, Ordering::Release);
            stop.switch.flip();
        }
        running.keys().cloned().collect()
    }

    /// The runs whose turns run here.
    pub fn running_here(&self) -> Vec<String> {
        lock(&self.running).keys().cloned().collect()
    }

    /// Whether the turn of `run_id` runs here (or its end is still to be stored).
    pub fn is_running_here(&self, run_id: &str) -> bool {
        lock(&self.running).contains_key(run_id)
    }
}

/// A watch on one run's changes.
pub struct Watch {
    signals: Arc<RunSignals>,
    run_id: String,
    event: Arc<Event>,
}

impl Watch {
    /// A listener for the next change: take it before reading the store, so a change written
    /// between the read and the wait still wakes.
    pub fn listen(&self) -> EventListener {
        self.event.listen()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut watched = lock(&self.signals.watched);
        // The map's and this one's: nobody else watches (clones are made under the lock).
        if Arc::strong_count(&self.event) == 2 {
            watched.remove(&self.run_id);
        }
    }
}

/// A turn running here.
pub struct Running {
    signals: Arc<RunSignals>,
    run_id: String,
    stop: Arc<Stop>,
}

impl Running {
    /// Completes once the run is stopped (or the gateway shuts down, or the store went away).
    pub async fn stopped(&self) {
        self.stop.switch.wait().await
    }

    /// Whether the store's failure stopped the turn.
    pub fn store_failed(&self) -> bool {
        self.stop.store_failed.load(Ordering::Acquire)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        lock(&self.signals.running).remove(&self.run_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_wake_on_their_run_and_go_away_with_the_last_watcher() {
        let signals = Arc::new(RunSignals::default());
        let a = signals.watch("run_a");
        let a2 = signals.watch("run_a");
        let b = signals.watch("run_b");
        let (la, lb) = (a.listen(), b.listen());
        signals.changed("run_a");
        smol::block_on(la);
        assert!(
            futures_lite::future::block_on(futures_lite::future::poll_once(lb)).is_none(),
            "run_b was not woken"
        );
        drop(a);
        assert!(lock(&signals.watched).contains_key("run_a"));
        drop(a2);
        drop(b);
        assert!(lock(&signals.watched).is_empty());
    }

    #[test]
    fn a_stop_reaches_only_a_turn_running_here() {
        let signals = Arc::new(RunSignals::default());
        assert!(!signals.stop_here("run_a"));
        let running = signals.run_here("run_a");
        assert_eq!(signals.running_here(), ["run_a"]);
        assert!(signals.stop_here("run_a"));
        smol::block_on(running.stopped());
        assert!(!running.store_failed(), "a person's stop");
        drop(running);
        assert!(signals.running_here().is_empty());
    }

    #[test]
    fn the_store_failing_stops_every_turn_here_marked_so() {
        let signals = Arc::new(RunSignals::default());
        let (a, b) = (signals.run_here("run_a"), signals.run_here("run_b"));
        let mut stopped = signals.store_failed();
        stopped.sort();
        assert_eq!(stopped, ["run_a", "run_b"]);
        for running in [&a, &b] {
            smol::block_on(running.stopped());
            assert!(running.store_failed());
        }
        assert!(signals.is_running_here("run_a"));
        drop(a);
        assert!(!signals.is_running_here("run_a"));
    }
}
