//! Where a transport's lines wait for its writer, bounded: a client that sends and never
//! reads gets its transport closed once the bound is passed, instead of growing the process.

use crate::sync::Switch;
use crate::telemetry::metrics;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The default bound on a transport's queued output (16 MiB).
pub const DEFAULT_MAX_OUTPUT: usize = 16 << 20;

/// Where a transport's lines go: answers and events, in order, to its writer. The bytes
/// queued and not yet written are bounded: past the bound nothing more is queued and the
/// transport closes.
#[derive(Clone)]
pub struct Outbox {
    lines: async_channel::Sender<String>,
    pub(super) budget: Arc<Budget>,
}

pub(super) struct Budget {
    queued: AtomicUsize,
    limit: usize,
    /// On once the bound was passed: the transport closes.
    pub(super) over: Switch,
}

impl Budget {
    /// `size` bytes left the queue (written, or dropped).
    pub(super) fn release(&self, size: usize) {
        self.queued.fetch_sub(size, Ordering::AcqRel);
        metrics().queued_output_bytes.dec_by(size as i64);
    }
}

impl Outbox {
    /// An outbox holding at most `limit` bytes, and the receiving end its writer reads.
    pub fn new(limit: usize) -> (Outbox, async_channel::Receiver<String>) {
        let (lines, receiver) = async_channel::unbounded();
        let budget = Arc::new(Budget {
            queued: AtomicUsize::new(0),
            limit,
            over: Switch::default(),
        });
        (Outbox { lines, budget }, receiver)
    }

    /// Queues a line. A closed transport drops it; one past its bound drops it and closes.
    pub fn send(&self, line: String) {
        let budget = &self.budget;
        if budget.over.is_on() {
            return;
        }
        let size = line.len() + 1;
        let before = budget.queued.fetch_add(size, Ordering::AcqRel);
        metrics().queued_output_bytes.inc_by(size as i64);
        if before + size > budget.limit {
            budget.release(size);
            budget.over.flip();
            return;
        }
        if self.lines.try_send(line).is_err() {
            budget.release(size);
        }
    }

    /// Whether the bound was passed.
    pub fn is_over(&self) -> bool {
        self.budget.over.is_on()
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> usize {
        self.budget.queued.load(Ordering::Acquire)
    }
}
