//! Two small waiting primitives of the application:
//! - [`Count`]: how many things still run, and a wait until none does (shutdown waits for
//!   pending answers and event streams this way);
//! - [`Switch`]: a one-way switch a task can wait on (stop a turn, stop the transports).
//!
//! And [`random_hex`], for the session ids, tokens and names the application makes up.

use event_listener::Event;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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

/// A one-way switch: flipped once, it stays on.
#[derive(Default)]
pub struct Switch {
    on: AtomicBool,
    flipped: Event,
}

impl Switch {
    /// Turns it on and wakes every waiter.
    pub fn flip(&self) {
        self.on.store(true, Ordering::Release);
        self.flipped.notify(usize::MAX);
    }

    /// Whether it is on.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// Waits until it is on.
    pub async fn wait(&self) {
        loop {
            let listener = self.flipped.listen();
            if self.is_on() {
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

/// `n` random bytes from the operating system's random source, as lower-case hex.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    connop_blocking::random::random_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
