//! The smol driver's timers, coalesced: a wake-up is filed under its instant (the clock has
//! already moved it to the end of its slack slot, so thousands of operations share a few
//! instants), and one thread sleeps until the earliest instant and wakes every waker filed
//! under it. One wake-up per slot, not per operation, and no per-operation timer to re-arm
//! in a reactor on every tick.
//!
//! A slot holds the drivers' wakers themselves: firing one touches only the task it wakes, which
//! the executor is about to run anyway (no cell of its own to visit first, often on a page
//! nothing else of the operation needs). A driver that ends takes back a wake-up it filed ahead
//! ([`Alarm`]): one filed far out (an operation's deadline, five minutes away) must not keep
//! a finished operation's whole task allocated until then.
//!
//! A due slot is **relayed**: the timer thread wakes one of its drivers and leaves the rest to
//! the first driver that runs next ([`relay`]), which wakes them from the executor's own thread.
//! Woken one by one from this thread, an executor that keeps up goes back to sleep between
//! two wakers and is woken again for each (a futex wake and two context switches per
//! operation, every tick); woken from its own thread, a whole slot costs it one wake-up. If no
//! driver runs within [`GRACE`] (an executor stalled), the timer thread wakes the rest itself.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::task::Waker;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a relayed slot waits for a driver to wake the rest of it before the timer thread
/// does.
pub(crate) const GRACE: Duration = Duration::from_millis(2);

/// A driver's filed wake-up, taken back when the driver ends (finished or dropped) or moves
/// it earlier.
#[derive(Default)]
pub(crate) struct Alarm {
    /// The latest instant filed and not known to have fired, with the identity of the waker
    /// filed under it (a clone kept here too would cost two more atomic writes on the task per
    /// tick). The identity stays unique while it matters: while filed, the slot's clone keeps
    /// that waker's data allocated; after, it names the waker of the task this alarm lives
    /// in, which an executor keeps allocated as long as the task, so no other waker takes it.
    armed: Option<(Instant, WakerId)>,
}

/// Which waker: what [`Waker::will_wake`] compares.
#[derive(Clone, Copy, PartialEq, Eq)]
struct WakerId {
    data: usize,
    vtable: usize,
}

impl WakerId {
    fn of(waker: &Waker) -> Self {
        WakerId {
            data: waker.data() as usize,
            vtable: std::ptr::from_ref(waker.vtable()) as usize,
        }
    }
}

impl Alarm {
    pub(crate) fn new() -> Self {
        Alarm::default()
    }

    /// Wakes `waker` at `at` (or a little after, never before).
    pub(crate) fn wake_at(&mut self, at: Instant, waker: &Waker) {
        if let Some((filed, old)) = self.armed.take() {
            if filed == at && old == WakerId::of(waker) {
                self.armed = Some((filed, old));
                return;
            }
            // Filed later than the new one: take it back now. One filed earlier fires
            // soon (a spurious wake-up the driver ignores) and holds the task only until then.
            if filed > at {
                unfile(filed, old);
            }
        }
        let filed = waker.clone();
        let id = WakerId::of(&filed);
        file(at, filed);
        self.armed = Some((at, id));
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        if let Some((at, id)) = self.armed.take() {
            unfile(at, id);
        }
    }
}

type Filed = Vec<Waker>;

#[derive(Default)]
struct Slots {
    due: BTreeMap<Instant, Filed>,
    /// Emptied vectors, kept for the next slots (a steady tick allocates nothing).
    spare: Vec<Filed>,
    /// Due slots left for a driver to wake, with when they were handed over.
    relayed: Vec<(Instant, Filed)>,
}

struct Timers {
    slots: Mutex<Slots>,
    /// `relayed` is not empty: a driver's [`relay`] has work (read without the lock).
    relaying: AtomicBool,
    thread: Thread,
}

static TIMERS: OnceLock<Timers> = OnceLock::new();

fn timers() -> &'static Timers {
    TIMERS.get_or_init(|| {
        let thread = std::thread::Builder::new()
            .name("connop-timers".into())
            .spawn(run)
            .expect("the timer thread starts");
        Timers {
            slots: Mutex::new(Slots::default()),
            relaying: AtomicBool::new(false),
            thread: thread.thread().clone(),
        }
    })
}

fn lock(timers: &Timers) -> MutexGuard<'_, Slots> {
    timers.slots.lock().unwrap_or_else(|p| p.into_inner())
}

/// Files `waker` under `at`.
fn file(at: Instant, waker: Waker) {
    let timers = timers();
    let earliest = {
        let mut slots = lock(timers);
        let earliest = slots.due.keys().next().is_none_or(|first| at < *first);
        let Slots { due, spare, .. } = &mut *slots;
        due.entry(at)
            .or_insert_with(|| spare.pop().unwrap_or_default())
            .push(waker);
        earliest
    };
    if earliest {
        timers.thread.unpark();
    }
}

/// Keeps an emptied slot vector for the next slots (a bounded number of them).
fn keep_spare(spare: &mut Vec<Filed>, filed: Filed) {
    if spare.len() < 64 {
        spare.push(filed);
    }
}

/// Takes back the filing of the waker `id` names under `at`, if that slot has not come due
/// yet.
fn unfile(at: Instant, id: WakerId) {
    let Some(timers) = TIMERS.get() else { return };
    let taken = {
        let mut slots = lock(timers);
        let Some(filed) = slots.due.get_mut(&at) else {
            return;
        };
        let Some(i) = filed.iter().position(|w| WakerId::of(w) == id) else {
            return;
        };
        let taken = filed.swap_remove(i);
        if filed.is_empty() {
            let filed = slots.due.remove(&at).unwrap_or_default();
            keep_spare(&mut slots.spare, filed);
        }
        taken
    };
    // Dropped outside the lock: it may be the task's last reference.
    drop(taken);
}

/// Wakes the drivers of every relayed slot, from the calling driver's thread. Called by
/// every driver each time it runs: one relaxed load when there is nothing to relay.
pub(crate) fn relay() {
    if let Some(timers) = TIMERS.get() {
        relay_from(timers);
    }
}

/// [`relay`] on `timers`; says how many drivers it woke.
fn relay_from(timers: &Timers) -> usize {
    if !timers.relaying.load(Ordering::Relaxed) {
        return 0;
    }
    let relayed = {
        let mut slots = lock(timers);
        timers.relaying.store(false, Ordering::Relaxed);
        slots.take_relayed()
    };
    let woken = relayed.iter().map(|(_, wakers)| wakers.len()).sum();
    wake_all(timers, relayed.into_iter().map(|(_, wakers)| wakers));
    woken
}

/// Wakes every waker of `batches`, outside the lock, and keeps their emptied vectors.
fn wake_all(timers: &Timers, batches: impl IntoIterator<Item = Filed>) {
    for mut wakers in batches {
        for waker in wakers.drain(..) {
            waker.wake();
        }
        keep_spare(&mut lock(timers).spare, wakers);
    }
}

impl Slots {
    /// What a driver's [`relay`] wakes: every slot relayed and not yet taken.
    fn take_relayed(&mut self) -> Vec<(Instant, Filed)> {
        std::mem::take(&mut self.relayed)
    }

    /// The timer thread's decision at `now`, on no clock of its own (so that the tests decide
    /// `now`): each due slot gives one driver to `leaders` and is relayed with the rest;
    /// relayed slots no driver took within [`GRACE`] go to `firing`. Returns the instant to
    /// look again (`None`: nothing filed) and whether slots wait for a driver's [`relay`].
    fn fire_due(
        &mut self,
        now: Instant,
        leaders: &mut Vec<Waker>,
        firing: &mut Vec<Filed>,
    ) -> (Option<Instant>, bool) {
        let Slots {
            due,
            relayed,
            spare,
        } = self;
        while let Some(entry) = due.first_entry() {
            if *entry.key() > now {
                break;
            }
            let mut wakers = entry.remove();
            if let Some(leader) = wakers.pop() {
                leaders.push(leader);
            }
            if wakers.is_empty() {
                // A slot of one: its vector is kept like any other.
                keep_spare(spare, wakers);
            } else {
                relayed.push((now, wakers));
            }
        }
        // Not taken in time: the timer thread wakes them.
        let stale = relayed
            .iter()
            .position(|(at, _)| now.saturating_duration_since(*at) < GRACE)
            .unwrap_or(relayed.len());
        firing.extend(relayed.drain(..stale).map(|(_, wakers)| wakers));
        let grace = relayed.first().map(|(at, _)| *at + GRACE);
        let next = match (due.keys().next().copied(), grace) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (next, !relayed.is_empty())
    }
}

/// The timer thread: waits for the earliest slot; wakes one driver of each due slot and
/// relays the rest ([`relay`]); wakes itself what no driver took within [`GRACE`].
fn run() {
    let timers = timers();
    let mut firing: Vec<Filed> = Vec::new();
    let mut leaders: Vec<Waker> = Vec::new();
    loop {
        let next = {
            let mut slots = lock(timers);
            let (next, relaying) = slots.fire_due(Instant::now(), &mut leaders, &mut firing);
            timers.relaying.store(relaying, Ordering::Relaxed);
            next
        };
        for leader in leaders.drain(..) {
            leader.wake();
        }
        wake_all(timers, firing.drain(..));
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

    /// `n` drivers' wake-ups, each filed under `at` with `waker`.
    fn filed(n: usize, at: Instant, waker: &Waker) -> Vec<Alarm> {
        (0..n)
            .map(|_| {
                let mut alarm = Alarm::new();
                alarm.wake_at(at, waker);
                alarm
            })
            .collect()
    }

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
        let _alarms = filed(3, later, &waker);
        // Filed after a later slot, an earlier one still fires first.
        let mut early = Alarm::new();
        early.wake_at(sooner, &waker);
        let first = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
        assert!(first >= sooner && first < later, "{:?}", first - start);
        for _ in 0..3 {
            let woke = rx.recv_timeout(Duration::from_secs(5)).expect("woken");
            assert!(woke >= later, "{:?}", woke - start);
        }
    }

    /// `n` copies of `waker` filed straight into `slots` under `at`.
    fn filed_in(slots: &mut Slots, n: usize, at: Instant, waker: &Waker) {
        slots
            .due
            .entry(at)
            .or_default()
            .extend((0..n).map(|_| waker.clone()));
    }

    #[test]
    fn a_due_slot_gives_one_driver_to_the_timer_thread_and_waits_the_grace_for_a_relay() {
        let mut slots = Slots::default();
        let at = Instant::now() + Duration::from_secs(60);
        filed_in(&mut slots, 3, at, Waker::noop());
        let (mut leaders, mut firing) = (Vec::new(), Vec::new());
        let tiny = Duration::from_nanos(1);

        let (next, relaying) = slots.fire_due(at - tiny, &mut leaders, &mut firing);
        assert_eq!(
            (next, relaying, leaders.len(), firing.len()),
            (Some(at), false, 0, 0)
        );

        let (next, relaying) = slots.fire_due(at, &mut leaders, &mut firing);
        assert_eq!(leaders.len(), 1, "one driver woken by the timer thread");
        assert!(firing.is_empty(), "the rest left for a driver");
        assert_eq!((next, relaying), (Some(at + GRACE), true));

        let (next, relaying) = slots.fire_due(at + GRACE - tiny, &mut leaders, &mut firing);
        assert!(firing.is_empty(), "not before the grace");
        assert_eq!((next, relaying), (Some(at + GRACE), true));

        // The first driver to run takes the rest, to wake them on its own thread.
        let taken = slots.take_relayed();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].1.len(), 2);
        let (next, relaying) = slots.fire_due(at + GRACE, &mut leaders, &mut firing);
        assert_eq!((next, relaying, firing.len()), (None, false, 0));
    }

    #[test]
    fn a_relayed_slot_no_driver_took_goes_to_the_timer_thread_at_the_grace() {
        let mut slots = Slots::default();
        let at = Instant::now() + Duration::from_secs(60);
        filed_in(&mut slots, 4, at, Waker::noop());
        let later = at + Duration::from_secs(1);
        filed_in(&mut slots, 2, later, Waker::noop());
        let (mut leaders, mut firing) = (Vec::new(), Vec::new());
        let _ = slots.fire_due(at, &mut leaders, &mut firing);
        let (next, relaying) = slots.fire_due(at + GRACE, &mut leaders, &mut firing);
        assert_eq!(leaders.len(), 1);
        assert_eq!(firing.len(), 1, "the stale slot, whole");
        assert_eq!(firing[0].len(), 3);
        assert_eq!((next, relaying), (Some(later), false), "then the next slot");
        assert!(
            slots.take_relayed().is_empty(),
            "a late relay finds nothing to wake twice"
        );
    }

    /// Tells the thread that woke it.
    struct Who(Mutex<Sender<std::thread::ThreadId>>);

    impl Wake for Who {
        fn wake(self: Arc<Self>) {
            let _ = self.0.lock().unwrap().send(std::thread::current().id());
        }
    }

    #[test]
    fn a_relay_wakes_what_it_takes_on_its_own_thread_once() {
        // A table of its own, no timer thread: this test decides every step.
        let timers = Timers {
            slots: Mutex::new(Slots::default()),
            relaying: AtomicBool::new(false),
            thread: std::thread::current(),
        };
        let (tx, rx) = channel();
        let waker = Waker::from(Arc::new(Who(Mutex::new(tx))));
        let at = Instant::now();
        filed_in(&mut lock(&timers), 3, at, &waker);
        assert_eq!(relay_from(&timers), 0, "nothing relayed yet");
        let (mut leaders, mut firing) = (Vec::new(), Vec::new());
        let (_, relaying) = lock(&timers).fire_due(at, &mut leaders, &mut firing);
        timers.relaying.store(relaying, Ordering::Relaxed);
        assert_eq!(relay_from(&timers), 2);
        let me = std::thread::current().id();
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [me, me]);
        assert_eq!(relay_from(&timers), 0, "each once");
        assert_eq!(lock(&timers).spare.len(), 1, "the emptied vector kept");
    }

    /// The wiring, in real time (who wakes what, and when, is decided above on given
    /// instants): the timer thread wakes one driver of a slot, and every driver is woken once.
    #[test]
    fn the_timer_thread_wakes_one_driver_of_a_slot_and_the_next_relay_the_rest() {
        let (tx, rx) = channel();
        let waker = Waker::from(Arc::new(Who(Mutex::new(tx))));
        // A slot of its own: no other test files under this instant.
        let at = Instant::now() + Duration::from_millis(37);
        let _alarms = filed(3, at, &waker);
        let leader = rx.recv_timeout(Duration::from_secs(5)).expect("one woken");
        assert_ne!(leader, std::thread::current().id());
        // The rest: by this relay, or by the timer thread if this thread was late.
        relay();
        for _ in 0..2 {
            rx.recv_timeout(Duration::from_secs(5))
                .expect("the rest woken");
        }
        assert!(rx.try_recv().is_err(), "each driver woken once");
    }

    #[test]
    fn a_slot_no_driver_relays_is_woken_by_the_timer_thread_after_the_grace() {
        let (tx, rx) = channel();
        let waker = Waker::from(Arc::new(Tell(Mutex::new(tx))));
        let at = Instant::now() + Duration::from_millis(41);
        let _alarms = filed(4, at, &waker);
        // No relay() here: a stalled executor must not lose the rest of the slot.
        for _ in 0..4 {
            let woke = rx
                .recv_timeout(Duration::from_secs(5))
                .expect("every driver woken");
            assert!(woke >= at);
        }
    }

    #[test]
    fn an_ended_driver_leaves_no_waker_in_a_slot_far_ahead() {
        let (tx, _rx) = channel();
        let tell = Arc::new(Tell(Mutex::new(tx)));
        let waker = Waker::from(tell.clone());
        let mut alarm = Alarm::new();
        alarm.wake_at(Instant::now() + Duration::from_secs(300), &waker);
        drop(waker);
        assert_eq!(
            Arc::strong_count(&tell),
            2,
            "the slot holds the waker while the driver lives (the guard only its identity)"
        );
        drop(alarm);
        assert_eq!(
            Arc::strong_count(&tell),
            1,
            "a slot five minutes ahead still holds an ended driver's waker"
        );
    }
}
