//! Wall time for the core, read from a monotonic clock so a wall-clock jump never fires or
//! delays a timer.

use connop_core::time::Timestamp;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Maps the core's [`Timestamp`]s onto this process's monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base_instant: Instant,
    base: Timestamp,
}

impl Clock {
    /// A clock anchored at the current wall time.
    pub fn new() -> Self {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Clock {
            base_instant: Instant::now(),
            base: Timestamp::from_unix(since_epoch),
        }
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

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Fills `bytes` from the operating system's cryptographic random source.
pub fn random_bytes(bytes: &mut [u8]) {
    use std::io::Read;
    let from_os = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(bytes));
    if from_os.is_err() {
        // No /dev/urandom: std's per-process random hash keys still make ids unpredictable.
        use std::hash::{BuildHasher, RandomState};
        for chunk in bytes.chunks_mut(8) {
            let n = RandomState::new().hash_one(Instant::now());
            chunk.copy_from_slice(&n.to_le_bytes()[..chunk.len()]);
        }
    }
}

/// Six random bytes, for an op id.
pub fn entropy() -> [u8; 6] {
    let mut bytes = [0u8; 6];
    random_bytes(&mut bytes);
    bytes
}

/// `n` random bytes as lower-case hex (session ids, tokens).
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    random_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_instants_agree() {
        let clock = Clock::new();
        let now = clock.now();
        let later = now + Duration::from_millis(250);
        let gap = clock.instant_of(later) - clock.instant_of(now);
        assert_eq!(gap, Duration::from_millis(250));
        assert_ne!(entropy(), entropy());
    }

    #[test]
    fn the_farthest_timestamp_maps_to_a_far_instant() {
        let clock = Clock::new();
        let far = clock.instant_of(Timestamp::from_nanos(u64::MAX));
        assert!(far > clock.instant_of(clock.now()) + Duration::from_secs(100 * 365 * 86_400));
    }
}
