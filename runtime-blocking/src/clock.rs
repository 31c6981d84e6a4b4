//! Time for the core, and how a driver sleeps until a wake-up.
//!
//! The core counts time in [`Timestamp`]s it is given. A [`Clock`] says what time it is and how
//! a driver waits for a later instant: on the real clock the driver arms its own timer (a
//! `park_timeout`, an `async_io::Timer`); a virtual clock (the test fixtures') wakes the
//! driver's waker itself when the test moves time, so races between the runtime and the
//! clock are decided by the test, not by the machine's speed.

use connop_core::time::Timestamp;
use std::fmt;
use std::task::Waker;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a driver is about to sleep on, told to the clock before it sleeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nap {
    /// The operation's next wake-up, if any (none: only a change wakes it).
    pub until: Option<Timestamp>,
    /// Gateway calls the operation still waits for. A virtual clock does not move past a
    /// sleeper that still waits; the last answer wakes a driver that naps on such a clock
    /// ([`Napping::Clock`]), so that it naps again with none out. On its own timer a driver
    /// is woken by an answer only when it moves the next wake-up earlier.
    pub calls_in_flight: usize,
}

/// How a driver sleeps, as its clock says.
#[derive(Clone, Debug)]
pub enum Napping {
    /// Arm your own timer for this instant of the monotonic clock (none: no timer), and
    /// sleep until it fires or an input wakes you.
    Timer(Option<Instant>),
    /// Arm no timer: the clock wakes you when its time reaches the nap's end. Inputs wake you
    /// through this waker (it wraps yours, so the clock knows you are awake).
    Clock(Waker),
}

/// The time source of an operation.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Now, as the core counts time.
    fn now(&self) -> Timestamp;

    /// How the driver whose waker is `waker` sleeps through `nap`.
    fn nap(&self, nap: Nap, waker: &Waker) -> Napping;

    /// The driver whose waker is `waker` finished: it will not nap again.
    fn finished(&self, _waker: &Waker) {}
}

/// How late a timer may fire so that wake-ups close together share one: operations whose
/// next wake falls in the same slot of this width wake at its end, together.
pub const DEFAULT_SLACK: Duration = Duration::from_millis(10);

/// The process's clock: wall time read through the monotonic clock, so a wall-clock jump never
/// fires or delays a timer. Its timers are coalesced: a wake-up is moved to the end of its
/// slot on a grid of `slack` shared by the whole process, never earlier, at most `slack`
/// later.
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    base_instant: Instant,
    base: Timestamp,
    slack: Duration,
    /// Nanoseconds from the process's grid origin to `base_instant`: a timer instant is then
    /// integer arithmetic and one `Instant` addition.
    origin_to_base: u64,
}

/// The origin of the process's timer grid, shared by every clock so their slots coincide.
fn grid_origin() -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

impl SystemClock {
    /// A clock anchored at the current wall time, with the default slack.
    pub fn new() -> Self {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let origin = grid_origin();
        let base_instant = Instant::now();
        SystemClock {
            base_instant,
            base: Timestamp::from_unix(since_epoch),
            slack: DEFAULT_SLACK,
            origin_to_base: nanos(base_instant.saturating_duration_since(origin)),
        }
    }

    /// The same clock with another timer slack; zero turns coalescing off.
    pub fn with_slack(mut self, slack: Duration) -> Self {
        self.slack = slack;
        self
    }

    /// The timer slack.
    pub fn slack(&self) -> Duration {
        self.slack
    }

    /// The instant a timer for `at` is armed at: the end of its slot on the process's grid
    /// (`at` itself when the slack is zero or the slot is past what `Instant` holds).
    pub fn coalesced(&self, at: Instant) -> Instant {
        self.slot_end(nanos(at.saturating_duration_since(grid_origin())))
            .filter(|slot| *slot >= at)
            .unwrap_or(at)
    }

    /// The end of the slot that `since_origin` nanoseconds after the grid's origin falls in.
    fn slot_end(&self, since_origin: u64) -> Option<Instant> {
        let grid = nanos(self.slack).max(1);
        let slot = since_origin.div_ceil(grid).checked_mul(grid)?;
        grid_origin().checked_add(Duration::from_nanos(slot))
    }

    /// The timer instant for the core's `at`: [`instant_of`](Self::instant_of) then
    /// [`coalesced`](Self::coalesced), in integer arithmetic on the common path.
    pub fn timer_at(&self, at: Timestamp) -> Instant {
        let after = at.as_nanos().saturating_sub(self.base.as_nanos());
        self.origin_to_base
            .checked_add(after)
            .and_then(|since| self.slot_end(since))
            .unwrap_or_else(|| self.coalesced(self.instant_of(at)))
    }

    /// Now, as the core counts time.
    pub fn now(&self) -> Timestamp {
        self.base + self.base_instant.elapsed()
    }

    /// The monotonic instant of a core timestamp. A timestamp further ahead than this
    /// platform's `Instant` reaches (a deadline or a back-off of centuries, from a flag or a
    /// gateway's `Retry-After`) maps to an instant that is still centuries away, never a panic.
    pub fn instant_of(&self, at: Timestamp) -> Instant {
        let mut after = at - self.base;
        loop {
            if let Some(instant) = self.base_instant.checked_add(after) {
                return instant;
            }
            // Ends: `base_instant + 0` always exists.
            after /= 2;
        }
    }
}

/// A duration in nanoseconds, saturating (u64 nanoseconds reach 584 years).
fn nanos(d: Duration) -> u64 {
    d.as_secs()
        .checked_mul(1_000_000_000)
        .and_then(|n| n.checked_add(u64::from(d.subsec_nanos())))
        .unwrap_or(u64::MAX)
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        SystemClock::now(self)
    }

    fn nap(&self, nap: Nap, _waker: &Waker) -> Napping {
        Napping::Timer(nap.until.map(|at| self.timer_at(at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_instants_agree() {
        let clock = SystemClock::new();
        let now = clock.now();
        let later = now + Duration::from_millis(250);
        let gap = clock.instant_of(later) - clock.instant_of(now);
        assert_eq!(gap, Duration::from_millis(250));
    }

    #[test]
    fn the_farthest_timestamp_maps_to_a_far_instant() {
        let clock = SystemClock::new();
        let far = clock.instant_of(Timestamp::from_nanos(u64::MAX));
        assert!(far > clock.instant_of(clock.now()) + Duration::from_secs(100 * 365 * 86_400));
    }

    #[test]
    fn coalesced_wakes_are_never_early_and_at_most_the_slack_late() {
        let clock = SystemClock::new();
        let now = Instant::now();
        let mut slots = std::collections::BTreeSet::new();
        for micros in (0..50_000).step_by(997) {
            let at = now + Duration::from_micros(micros);
            let armed = clock.coalesced(at);
            assert!(armed >= at && armed - at <= DEFAULT_SLACK, "{micros} µs");
            slots.insert(armed);
        }
        // 51 wake-ups over 50 ms share at most 6 slots of 10 ms.
        assert!(slots.len() <= 6, "{} slots", slots.len());
        // The integer path agrees with instant-then-grid, to the nanosecond.
        for micros in [0, 1, 9_999, 10_000, 10_001, 123_456_789] {
            let at = clock.now() + Duration::from_micros(micros);
            assert_eq!(clock.timer_at(at), clock.coalesced(clock.instant_of(at)));
        }
        let exact = clock.with_slack(Duration::ZERO);
        assert_eq!(
            exact.coalesced(now + Duration::from_micros(3)),
            now + Duration::from_micros(3)
        );
        // Past 584 years the grid's nanoseconds leave u64: the wake stays exact.
        let farthest = now + Duration::from_secs(1 << 40);
        assert!(clock.coalesced(farthest) >= farthest);
    }

    #[test]
    fn the_system_clock_leaves_the_timer_to_the_driver() {
        let clock = SystemClock::new().with_slack(Duration::ZERO);
        let at = clock.now() + Duration::from_secs(2);
        let waker = Waker::noop();
        let nap = Nap {
            until: Some(at),
            calls_in_flight: 0,
        };
        let armed = |napping: Napping| match napping {
            Napping::Timer(at) => at,
            Napping::Clock(_) => panic!("the system clock wakes no one itself"),
        };
        assert_eq!(armed(clock.nap(nap, waker)), Some(clock.instant_of(at)));
        let nap = Nap {
            until: None,
            calls_in_flight: 1,
        };
        assert_eq!(armed(clock.nap(nap, waker)), None);
    }
}
