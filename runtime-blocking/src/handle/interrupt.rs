//! The host's interrupt handle: the user pressed stop, or the host shuts down. Triggering it
//! settles every operation attached to it `interrupt`, at once.

use super::op::{OpHandle, OpShared, lock};
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

    /// Interrupts every attached operation, and every one attached later until
    /// [`reset`](Self::reset).
    pub fn trigger(&self) {
        let ops = {
            let mut state = lock(&self.0);
            state.triggered = true;
            std::mem::take(&mut state.ops)
        };
        for op in ops.iter().filter_map(Weak::upgrade) {
            OpHandle(op).interrupt();
        }
    }

    /// Clears the trigger (a new turn).
    pub fn reset(&self) {
        lock(&self.0).triggered = false;
    }

    /// Whether it is triggered.
    pub fn is_triggered(&self) -> bool {
        lock(&self.0).triggered
    }

    /// Attaches an operation: interrupted at once if the token is already triggered.
    pub fn attach(&self, op: &OpHandle) {
        let now = {
            let mut state = lock(&self.0);
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
