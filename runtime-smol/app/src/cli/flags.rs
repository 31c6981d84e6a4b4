//! The values of the flags the subcommands share: durations in seconds, and the tick.

use crate::error::UsageError;
use std::time::Duration;

/// A duration flag's value (`--deadline 0.5`): a usage error naming the flag when it is
/// negative, not a number, or too large.
pub fn seconds(flag: &'static str, value: f64) -> Result<Duration, UsageError> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        if value.is_finite() && value > 0.0 {
            UsageError::SecondsTooLarge { flag, value }
        } else {
            UsageError::Seconds { flag, value }
        }
    })
}

pub use connop_core::flow::MIN_TICK;

/// `--tick`: [`seconds`], and at least [`MIN_TICK`].
pub fn tick(value: f64) -> Result<Duration, UsageError> {
    let tick = seconds("tick", value)?;
    if tick < MIN_TICK {
        return Err(UsageError::TickTooShort {
            value,
            min: MIN_TICK,
        });
    }
    Ok(tick)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_name_their_flag_when_refused() {
        assert_eq!(seconds("tick", 0.25).ok(), Some(Duration::from_millis(250)));
        for bad in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let error = seconds("deadline", bad).expect_err("refused");
            assert!(
                error
                    .to_string()
                    .starts_with("--deadline must be a non-negative"),
                "{error}"
            );
        }
        for huge in [1e20, 1e300] {
            let error = seconds("deadline", huge).expect_err("refused");
            assert!(
                error.to_string().starts_with("--deadline is too large: "),
                "{error}"
            );
        }
        assert_eq!(
            seconds("deadline", 1e300).unwrap_err().to_string(),
            "--deadline is too large: 1e300 seconds"
        );
    }

    #[test]
    fn a_tick_too_short_to_pause_between_reads_is_refused() {
        assert_eq!(tick(0.01).ok(), Some(MIN_TICK));
        assert_eq!(tick(1.0).ok(), Some(Duration::from_secs(1)));
        for short in [0.0, 0.001, 0.009] {
            let error = tick(short).expect_err("refused");
            assert_eq!(
                error.to_string(),
                format!(
                    "--tick must be at least 0.01 seconds (each live row is read once per \
                     tick), not {short}"
                )
            );
        }
        assert!(
            tick(-1.0)
                .unwrap_err()
                .to_string()
                .starts_with("--tick must be a non-negative")
        );
    }
}
