//! What a subcommand shares with its process: the profile, the signals it watches, and
//! the lines it writes to stdout and stderr.

use crate::error::{AppError, EnvironmentError};
use async_signal::{Signal, Signals};
use connop_core::operation::Text;
use std::io::Write as _;

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

/// Says `listening <url>` on stderr (docs/protocol.md#transports: how a client that asked for port
/// 0 learns the port). Not `eprintln!`: a stderr nobody reads (a closed pipe, a full disk) is no
/// reason to stop serving, let alone to panic.
pub fn announce_listening(url: std::fmt::Arguments<'_>) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "listening {url}");
}

/// Writes `text` and a newline to stdout, and flushes. Not `println!`: a stdout whose reader
/// went away is an error exit, not a panic.
pub(crate) fn print_stdout(what: &'static str, text: &str) -> Result<(), AppError> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{text}")
        .and_then(|()| stdout.flush())
        .map_err(|source| EnvironmentError::Stdout { what, source }.into())
}
