//! Time as a parameter. The core never reads a clock: every input carries `now`.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time: whole nanoseconds since the UNIX epoch.
///
/// Integer nanoseconds keep virtual-time arithmetic exact, so a simulation that adds the same
/// durations reaches the same instants byte for byte. The wire carries float seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The UNIX epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// From whole nanoseconds since the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    /// From whole seconds since the epoch.
    pub const fn from_secs(secs: u64) -> Self {
        Timestamp(secs.saturating_mul(1_000_000_000))
    }

    /// From a duration since the epoch (what `SystemTime::duration_since(UNIX_EPOCH)` gives).
    pub fn from_unix(since_epoch: Duration) -> Self {
        Timestamp(u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Float seconds since the epoch, as the wire carries them.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, rhs: Duration) -> Timestamp {
        let nanos = u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(nanos))
    }
}

impl Sub<Timestamp> for Timestamp {
    type Output = Duration;
    fn sub(self, rhs: Timestamp) -> Duration {
        self.saturating_since(rhs)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_is_exact_and_saturating() {
        let t = Timestamp::from_secs(1_800_000_000);
        let later = t + Duration::from_millis(10);
        assert_eq!(later - t, Duration::from_millis(10));
        assert_eq!(t - later, Duration::ZERO);
        assert_eq!(later.to_string(), "1800000000.010000000");
        assert_eq!(
            Timestamp::from_nanos(u64::MAX) + Duration::from_secs(1),
            Timestamp::from_nanos(u64::MAX)
        );
        assert_eq!(t.as_secs_f64(), 1_800_000_000.0);
    }
}
