//! The watcher's clock (docs/contract.md#watcher and #return-hints): each live row on its own tick,
//! the list fallback for rows without a connection id, the 429 back-off, the re-read at once after
//! a change. What the flow does when a read is due is `watching`.

use super::wake::{Wake, WakeReason};
use crate::time::Timestamp;
use crate::tool_gateway::CallId;
use std::time::Duration;

/// The shortest account-read timeout.
pub const MIN_READ_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest account-read timeout.
pub const MAX_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A read's timeout: the time left to the deadline, clamped to [1 s, 10 s].
pub fn read_timeout(deadline_at: Timestamp, now: Timestamp) -> Duration {
    (deadline_at - now).clamp(MIN_READ_TIMEOUT, MAX_READ_TIMEOUT)
}

/// One reader's clock: a row's account reads, or the list fallback shared by the rows
/// without a connection id. Each has its own tick, so a slow read holds back only itself.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Slot {
    /// The read in flight, if any (at most one).
    pub(super) in_flight: Option<CallId>,
    /// Read once more as soon as the read in flight answers (a change or a hint came while
    /// it was out).
    pub(super) again: bool,
    /// When the next read is due, while none is in flight.
    pub(super) next_at: Option<Timestamp>,
}

impl Slot {
    /// Wants a read now: at once if idle, right after the answer if one is in flight.
    pub(super) fn hurry(&mut self, now: Timestamp) {
        if self.in_flight.is_some() {
            self.again = true;
        } else {
            self.next_at = Some(self.next_at.map_or(now, |t| t.min(now)));
        }
    }

    /// The read answered: the next one is a tick later, or at once if one was asked for.
    pub(super) fn answered(&mut self, tick: Duration, now: Timestamp) {
        self.in_flight = None;
        let at = if std::mem::take(&mut self.again) {
            now
        } else {
            now + tick
        };
        self.next_at = Some(at);
    }

    /// When this slot reads next, given the back-off, unless a read is in flight.
    pub(super) fn due(&self, backoff_until: Option<Timestamp>) -> Option<Wake> {
        if self.in_flight.is_some() {
            return None;
        }
        let at = self.next_at?;
        Some(match backoff_until {
            Some(until) if until > at => Wake {
                at: until,
                reason: WakeReason::Backoff,
            },
            _ => Wake {
                at,
                reason: WakeReason::Tick,
            },
        })
    }
}

/// The watcher's bookkeeping.
#[derive(Debug, Default)]
pub(super) struct Watcher {
    /// Per row: its account reads.
    pub(super) rows: Vec<Slot>,
    /// The list fallback, for the live rows without a connection id.
    pub(super) list: Slot,
    /// After a 429: no read of any row before this.
    pub(super) backoff_until: Option<Timestamp>,
    /// The reader read last (`rows.len()` is the list fallback): with calls one at a time,
    /// the next of the readers due at once is the one after it, so every row gets its read
    /// of the tick before any is read twice.
    pub(super) last_read: usize,
}

impl Watcher {
    pub(super) fn new(rows: usize) -> Self {
        Watcher {
            rows: vec![Slot::default(); rows],
            // As if the list fallback, last in the order, was read last: row 0 comes first.
            last_read: rows,
            ..Watcher::default()
        }
    }

    /// The first read of every row happens at once after the card.
    pub(super) fn start(&mut self, now: Timestamp) {
        for slot in self.rows.iter_mut().chain(std::iter::once(&mut self.list)) {
            slot.next_at = Some(now);
        }
    }

    /// An effective change: every row's next read happens at once, not a tick later (a row
    /// whose read is out reads again when it answers).
    pub(super) fn wake(&mut self, now: Timestamp) {
        for slot in self.rows.iter_mut().chain(std::iter::once(&mut self.list)) {
            slot.hurry(now);
        }
    }

    /// After a 429, the instant before which no row is read.
    pub(super) fn backoff_until(&self) -> Option<Timestamp> {
        self.backoff_until
    }

    /// Settled: every read in flight is forgotten and nothing is due.
    pub(super) fn clear(&mut self) {
        for slot in self.rows.iter_mut().chain(std::iter::once(&mut self.list)) {
            *slot = Slot::default();
        }
    }

    /// The earliest read due among the live rows (the list fallback counts when a live row
    /// has no connection id), with its reason.
    pub(super) fn next_wake(&self, op: &crate::operation::Operation) -> Option<Wake> {
        let Some(backoff) = self.backoff_until else {
            // The common case (a parked tick asks it every time): every slot reads for the
            // tick, so the earliest idle slot's instant is the answer.
            let mut earliest: Option<Timestamp> = None;
            self.each_reader(op, |slot| {
                if let (None, Some(at)) = (slot.in_flight, slot.next_at) {
                    earliest = Some(earliest.map_or(at, |e| e.min(at)));
                }
            });
            return earliest.map(|at| Wake {
                at,
                reason: WakeReason::Tick,
            });
        };
        let mut earliest: Option<Wake> = None;
        self.each_reader(op, |slot| {
            earliest = earlier(earliest, slot.due(Some(backoff)));
        });
        earliest
    }

    /// Calls `f` on the slot of each live row with a connection id, in row order, then on the
    /// list fallback's if a live row has none.
    pub(super) fn each_reader(&self, op: &crate::operation::Operation, mut f: impl FnMut(&Slot)) {
        let mut need_list = false;
        for (row, slot) in op.rows().iter().zip(&self.rows) {
            if !row.state.is_live() {
                continue;
            }
            if row.connection_id.is_none() {
                need_list = true;
                continue;
            }
            f(slot);
        }
        if need_list {
            f(&self.list);
        }
    }
}

/// The earlier of two wakes; on a tie, the first.
fn earlier(a: Option<Wake>, b: Option<Wake>) -> Option<Wake> {
    match (a, b) {
        (Some(a), Some(b)) if b.at < a.at => Some(b),
        (Some(a), _) => Some(a),
        (None, b) => b,
    }
}
