//! The host's interrupt handle: the user pressed stop, or the host shuts down. Triggering it
//! settles every operation attached to it `interrupt`, at once.

use crate::op::{OpHandle, OpShared};
use std::sync::{Arc, Mutex, Weak};

#[derive(Default)]
struct State {
    triggered: bool,
    ops: Vec<Weak<OpShared>>,
    /// Live entries after the last prune: the next prune waits until the list doubles, so
    /// attaching stays amortized O(1) with thousands of operations on one token.
    pruned_len: usize,
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
            if state.ops.len() >= 2 * state.pruned_len.max(32) {
                state.ops.retain(|w| w.strong_count() > 0);
                state.pruned_len = state.ops.len();
            }
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
