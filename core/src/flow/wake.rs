//! When the flow wants to be woken, and why: its next watcher tick, the end of a back-off,
//! or its deadline.

use crate::time::Timestamp;

/// Why the flow wants to be woken.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeReason {
    /// The next watcher tick (or an immediate re-read after a change).
    Tick,
    /// The end of a 429 back-off, later than the next tick.
    Backoff,
    /// The operation deadline.
    Deadline,
}

/// The next wake-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wake {
    /// When.
    pub at: Timestamp,
    /// Why.
    pub reason: WakeReason,
}
