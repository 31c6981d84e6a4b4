//! The host's interrupt handle: the user pressed stop, or the host shuts down. Triggering it
//! settles every operation attached to it `interrupt`, at once.

use crate::op::{OpHandle, OpShared};
use std::sync::{Arc, Mutex, Weak};

#[derive(Default)]
struct State {
    triggered: bool,
    ops: Vec<Weak<OpShared>>,
}

/// A cloneable interrupt token for one turn (or one host).
#[derive(Clone, Default)]
pub struct Interrupt(Arc<Mutex<State>>);

impl Interrupt {
    /// A token not yet triggered.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Interrupts every attached operation, and every one attached later until
    /// [`reset`](Self::reset).
    pub fn trigger(&self) {
        let ops = {
            let mut state = self.lock();
            state.triggered = true;
            std::mem::take(&mut state.ops)
        };
        for op in ops.iter().filter_map(Weak::upgrade) {
            OpHandle(op).interrupt();
        }
    }

    /// Clears the trigger (a new turn).
    pub fn reset(&self) {
        self.lock().triggered = false;
    }

    /// Whether it is triggered.
    pub fn is_triggered(&self) -> bool {
        self.lock().triggered
    }

    /// Attaches an operation: interrupted at once if the token is already triggered.
    pub fn attach(&self, op: &OpHandle) {
        let now = {
            let mut state = self.lock();
            state.ops.retain(|w| w.strong_count() > 0);
            if !state.triggered {
                state.ops.push(op.downgrade());
            }
            state.triggered
        };
        if now {
            op.interrupt();
        }
    }
}

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interrupt")
            .field("triggered", &self.is_triggered())
            .finish()
    }
}
