//! The `connop` subcommands, behind the command-line parsing of `src/bin/connop.rs`: one
//! module per subcommand, and what they share (the tool gateway set-up, the profile, signals,
//! stdout). Each returns an [`AppError`], whose blame decides the exit code.

pub mod connect;
pub mod lease;
pub mod listen;
pub mod peer;
pub mod serve;
pub mod sim_gateway;
mod tool_gateway;

pub use tool_gateway::{ChosenToolGateway, choose_for_person, choose_tool_gateway};

use super::error::{AppError, EnvironmentError, UsageError};
use async_signal::{Signal, Signals};
use connop_core::flow::MIN_TICK;
use connop_core::operation::Text;
use std::io::Write as _;
use std::time::Duration;

/// The profile: `CONNOP_HOME`, else `~/.connop`.
pub fn profile() -> Text {
    match std::env::var("CONNOP_HOME") {
        Ok(home) if !home.is_empty() => home.into(),
        _ => {
            let home = std::env::var("HOME").unwrap_or_else(|_| ".".into());
            format!("{home}/.connop").into()
        }
    }
}

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

/// `--tick`: [`seconds`], and at least [`MIN_TICK`].
pub fn tick(value: f64) -> Result<Duration, UsageError> {
    let tick = seconds("tick", value)?;
    if tick < MIN_TICK {
        return Err(UsageError::TickTooShort { value });
    }
    Ok(tick)
}

/// SIGINT, SIGTERM and SIGHUP, watched from now on: each ends a server (or a held lease) the
/// same way, settling what is open and exiting 0. SIGHUP's default would kill the process
/// with nothing settled: a waiting tool call unanswered, agent commands left running. A
/// command watches them before it announces anything (a `listening` line, a lease): a
/// signal sent by whoever read that line is then caught, and no burst of accepted
/// connections can take the descriptor watching needs.
pub fn watch_signals() -> Result<Signals, EnvironmentError> {
    watch(&[Signal::Term, Signal::Int, Signal::Hup])
}

/// `signals`, watched from now on (a command a person runs at a terminal adds SIGHUP).
pub(crate) fn watch(signals: &[Signal]) -> Result<Signals, EnvironmentError> {
    Signals::new(signals.iter().copied()).map_err(EnvironmentError::Signals)
}

/// Says `listening <url>` on stderr (SPEC §7: how a client that asked for port 0 learns the
/// port). Not `eprintln!`: a stderr nobody reads (a closed pipe, a full disk) is no reason to
/// stop serving, let alone to panic.
pub fn announce_listening(url: std::fmt::Arguments<'_>) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "listening {url}");
}

/// Writes `text` and a newline to stdout, and flushes. Not `println!`: a stdout whose reader
/// went away is an error exit, not a panic.
fn print_stdout(what: &'static str, text: &str) -> Result<(), AppError> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(|source| EnvironmentError::Stdout { what, source }.into())
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
