//! A count of things still running, and a way to wait until there are none (shutdown waits
//! for event streams and pending answers this way).

use event_listener::Event;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many are running.
#[derive(Default)]
pub struct Count {
    n: AtomicUsize,
    zero: Event,
}

/// Held while one is running; dropping it counts it out.
pub struct CountGuard(Arc<Count>);

impl Count {
    /// Counts one in until the guard drops.
    pub fn enter(self: &Arc<Self>) -> CountGuard {
        self.n.fetch_add(1, Ordering::AcqRel);
        CountGuard(self.clone())
    }

    /// How many are running.
    pub fn get(&self) -> usize {
        self.n.load(Ordering::Acquire)
    }

    /// Waits until none is running.
    pub async fn wait_zero(&self) {
        loop {
            let listener = self.zero.listen();
            if self.get() == 0 {
                return;
            }
            listener.await;
        }
    }
}

impl Drop for CountGuard {
    fn drop(&mut self) {
        if self.0.n.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.zero.notify(usize::MAX);
        }
    }
}
