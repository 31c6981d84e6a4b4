//! The smol driver's timers, coalesced: a wake-up is filed under its instant (the clock has
//! already moved it to the end of its slack slot, so thousands of operations share a few
//! instants), and one thread sleeps until the earliest instant and wakes every waker filed
//! under it. One wake-up per slot, not per operation, and no per-operation timer to re-arm
//! in a reactor on every tick.
//!
//! A slot does not hold the driver's waker itself but its [`Alarm`], which the driver empties
//! when it ends: a wake-up filed far ahead (an operation's deadline, five minutes out) must
//! not keep a finished operation's whole task allocated until then.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::Waker;
use std::thread::Thread;
use std::time::Instant;

/// One driver's way to be woken by the timers: filed under every slot it asked for, emptied
/// when the driver ends (see [`AlarmGuard`]).
#[derive(Default)]
pub(crate) struct Alarm {
    waker: Mutex<Option<Waker>>,
}

impl Alarm {
    fn waker(&self) -> MutexGuard<'_, Option<Waker>> {
        self.waker.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fire(&self) {
        if let Some(waker) = self.waker().as_ref() {
            waker.wake_by_ref();
        }
    }
}

/// A driver's [`Alarm`], emptied when the driver ends (finished or dropped).
pub(crate) struct AlarmGuard(Arc<Alarm>);

impl AlarmGuard {
    pub(crate) fn new() -> Self {
        AlarmGuard(Arc::new(Alarm::default()))
    }

    /// Wakes `waker` at `at` (or a little after, never before).
    pub(crate) fn wake_at(&self, at: Instant, waker: &Waker) {
        {
            let mut slot = self.0.waker();
            if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
                *slot = Some(waker.clone());
            }
        }
        file(at, &self.0);
    }
}

impl Drop for AlarmGuard {
    fn drop(&mut self) {
        self.0.waker().take();
    }
}

type Filed = Vec<Arc<Alarm>>;

struct Slots {
    due: BTreeMap<Instant, Filed>,
    /// Emptied vectors, kept for the next slots (a steady tick allocates nothing).
    spare: Vec<Filed>,
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

/// Files `alarm` under `at`.
fn file(at: Instant, alarm: &Arc<Alarm>) {
    let timers = timers();
    let earliest = {
        let mut slots = lock(timers);
        let earliest = slots.due.keys().next().is_none_or(|first| at < *first);
        let Slots { due, spare } = &mut *slots;
        due.entry(at)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push(alarm.clone());
        earliest
    };
    if earliest {
        timers.thread.unpark();
    }
}

/// The timer thread: waits for the earliest slot, wakes its wakers outside the lock.
fn run() {
    let timers = timers();
    let mut firing: Vec<Filed> = Vec::new();
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
        for mut alarms in firing.drain(..) {
            for alarm in alarms.drain(..) {
                alarm.fire();
            }
            let mut slots = lock(timers);
            if slots.spare.len() < 64 {
                slots.spare.push(alarms);
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
        let alarms: Vec<AlarmGuard> = (0..3).map(|_| AlarmGuard::new()).collect();
        for alarm in &alarms {
            alarm.wake_at(later, &waker);
        }
        // Filed after a later slot, an earlier one still fires first.
        let early = AlarmGuard::new();
        early.wake_at(sooner, &waker);
        let first = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
        assert!(first >= sooner && first < later, "{:?}", first - start);
        for _ in 0..3 {
            let woke = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
            assert!(woke >= later, "{:?}", woke - start);
        }
    }

    #[test]
    fn an_ended_driver_leaves_no_waker_in_a_slot_far_ahead() {
        let (tx, _rx) = channel();
        let tell = Arc::new(Tell(Mutex::new(tx)));
        let waker = Waker::from(tell.clone());
        let alarm = AlarmGuard::new();
        alarm.wake_at(Instant::now() + Duration::from_secs(300), &waker);
        drop(waker);
        assert_eq!(
            Arc::strong_count(&tell),
            2,
            "the alarm holds the waker while it lives"
        );
        drop(alarm);
        assert_eq!(
            Arc::strong_count(&tell),
            1,
            "a slot five minutes ahead still holds an ended driver's waker"
        );
    }
}
