//! The smol driver's timers, coalesced: a wake-up is filed under its instant (the clock has
//! already moved it to the end of its slack slot, so thousands of operations share a few
//! instants), and one thread sleeps until the earliest instant and wakes every waker filed
//! under it. One wake-up per slot, not per operation, and no per-operation timer to re-arm
//! in a reactor on every tick.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::task::Waker;
use std::thread::Thread;
use std::time::Instant;

struct Slots {
    due: BTreeMap<Instant, Vec<Waker>>,
    /// Emptied vectors, kept for the next slots (a steady tick allocates nothing).
    spare: Vec<Vec<Waker>>,
}

struct Timers {
    slots: Mutex<Slots>,
    thread: Thread,
}

fn timers() -> &'static Timers {
    static TIMERS: OnceLock<Timers> = OnceLock::new();
    TIMERS.get_or_init(|| {
        let thread = std::thread::Builder::new()
            .name("connop-timers".into())
            .spawn(run)
            .expect("the timer thread starts");
        Timers {
            slots: Mutex::new(Slots {
                due: BTreeMap::new(),
                spare: Vec::new(),
            }),
            thread: thread.thread().clone(),
        }
    })
}

fn lock(timers: &Timers) -> MutexGuard<'_, Slots> {
    timers.slots.lock().unwrap_or_else(|p| p.into_inner())
}

/// Wakes `waker` at `at` (or a little after, never before).
pub(crate) fn wake_at(at: Instant, waker: &Waker) {
    let timers = timers();
    let earliest = {
        let mut slots = lock(timers);
        let earliest = slots.due.keys().next().is_none_or(|first| at < *first);
        let Slots { due, spare } = &mut *slots;
        due.entry(at)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push(waker.clone());
        earliest
    };
    if earliest {
        timers.thread.unpark();
    }
}

/// The timer thread: waits for the earliest slot, wakes its wakers outside the lock.
fn run() {
    let timers = timers();
    let mut firing: Vec<Vec<Waker>> = Vec::new();
    loop {
        let next = {
            let mut slots = lock(timers);
            let now = Instant::now();
            while let Some(entry) = slots.due.first_entry() {
                if *entry.key() > now {
                    break;
                }
                firing.push(entry.remove());
            }
            slots.due.keys().next().copied()
        };
        for mut wakers in firing.drain(..) {
            for waker in wakers.drain(..) {
                waker.wake();
            }
            let mut slots = lock(timers);
            if slots.spare.len() < 64 {
                slots.spare.push(wakers);
            }
        }
        match next {
            Some(at) => std::thread::park_timeout(at.saturating_duration_since(Instant::now())),
            None => std::thread::park(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::mpsc::{Sender, channel};
    use std::task::Wake;
    use std::time::Duration;

    struct Tell(Mutex<Sender<Instant>>);

    impl Wake for Tell {
        fn wake(self: Arc<Self>) {
            let _ = self.0.lock().unwrap().send(Instant::now());
        }
    }

    #[test]
    fn every_waker_of_a_slot_wakes_at_or_after_it() {
        let (tx, rx) = channel();
        let waker = Waker::from(Arc::new(Tell(Mutex::new(tx))));
        let start = Instant::now();
        let later = start + Duration::from_millis(60);
        let sooner = start + Duration::from_millis(20);
        for _ in 0..3 {
            wake_at(later, &waker);
        }
        // Filed after a later slot, an earlier one still fires first.
        wake_at(sooner, &waker);
        let first = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
        assert!(first >= sooner && first < later, "{:?}", first - start);
        for _ in 0..3 {
            let woke = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
            assert!(woke >= later, "{:?}", woke - start);
        }
    }
}
