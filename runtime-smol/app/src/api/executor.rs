//! Turn executors: what answers a chat turn or a run.
//!
//! - `echo` (the default): the reply is the message.
//! - `--agent-cmd CMD`: CMD runs per turn through `sh -c`, gets
//!   `{"session_id", "message", "history"}` as JSON on stdin; its stdout with trailing
//!   newlines removed is the reply; a non-zero exit fails the turn with its stderr.
//!
//! An agent command runs in its own process group, and the whole group is ended (SIGTERM,
//! then SIGKILL after [`KILL_GRACE`]) when the turn is stopped, when it fails, when its shell
//! exits (nothing it left behind outlives the turn), and at shutdown. Its stdin is written
//! while its stdout and stderr are read, so no input size can deadlock it, and its stdout is
//! capped at [`MAX_AGENT_OUTPUT`]. A reply holding a NUL character fails the turn (no store
//! keeps one); in an error, a NUL is shown as U+FFFD.

use super::input::storable;
use crate::store::Message;
use crate::telemetry::metrics;
use futures_lite::io::{AsyncRead, AsyncReadExt};
use futures_lite::{AsyncWriteExt, FutureExt as _};
use rustix::process::{Pid, Signal};
use serde_json::json;
use std::collections::HashSet;
use std::future::Future;
use std::os::unix::process::CommandExt as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The most an agent command may write to stdout (16 MiB); past it the turn fails with
/// `agent output exceeded 16 MiB`.
pub const MAX_AGENT_OUTPUT: usize = 16 << 20;

/// How long an agent command's group has between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// The most of an agent command's stderr kept for the error (the rest is read and dropped).
const MAX_STDERR_KEPT: usize = 64 << 10;

/// The error of a turn whose agent command replied with a NUL character, which no store keeps.
const NUL_REPLY: &str =
    "the agent command's reply holds a NUL character (U+0000), which is not stored";

/// Who answers turns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TurnExecutor {
    /// The reply is the message.
    Echo,
    /// A shell command per turn.
    Command(String),
}

/// One turn to answer.
#[derive(Clone, Debug)]
pub struct Turn {
    /// The session.
    pub session_id: String,
    /// The user's message.
    pub message: String,
    /// The session's earlier messages.
    pub history: Vec<Message>,
}

/// How a turn ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TurnOutcome {
    /// The reply.
    Reply(String),
    /// The turn failed, with why.
    Failed(String),
    /// The turn was stopped before it answered (its command's group, if any, was ended).
    Stopped,
}

impl TurnExecutor {
    /// Answers `turn`, unless `stop` completes first.
    pub async fn answer(&self, turn: &Turn, stop: impl Future<Output = ()>) -> TurnOutcome {
        match self {
            TurnExecutor::Echo => {
                futures_lite::future::or(
                    async { TurnOutcome::Reply(turn.message.clone()) },
                    async {
                        stop.await;
                        TurnOutcome::Stopped
                    },
                )
                .await
            }
            TurnExecutor::Command(command) => run_command(command, turn, stop).await,
        }
    }
}

/// The process groups of agent commands still running, for [`end_all_agent_commands`].
static GROUPS: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

fn groups<R>(f: impl FnOnce(&mut HashSet<i32>) -> R) -> R {
    let mut groups = GROUPS.lock().unwrap_or_else(PoisonError::into_inner);
    f(groups.get_or_insert_with(HashSet::new))
}

/// SIGKILLs every agent command's group still running: the last thing a shutting-down
/// process does, when the grace of [`KILL_GRACE`] no longer fits before its exit.
pub fn end_all_agent_commands() {
    let left: Vec<i32> = groups(|g| g.drain().collect());
    for raw in left {
        if let Some(pgid) = Pid::from_raw(raw) {
            let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
        }
    }
}

/// One agent command's process group (its leader is the `sh`, and its pid is the group's
/// id), counted while it runs. Dropped with members left (the turn's future dropped), it
/// ends them: SIGTERM now, SIGKILL after the grace from a thread of its own.
struct Group {
    pgid: Pid,
    /// Set once nothing of the group is left: its id may then belong to another group, which
    /// must never be signalled.
    gone: AtomicBool,
}

impl Group {
    fn new(pgid: Pid) -> Self {
        groups(|g| g.insert(pgid.as_raw_nonzero().get()));
        metrics().agent_commands_running.inc();
        Group {
            pgid,
            gone: AtomicBool::new(false),
        }
    }

    /// Whether any process of the group is left.
    fn alive(&self) -> bool {
        rustix::process::test_kill_process_group(self.pgid).is_ok()
    }

    /// Ends the whole group: SIGTERM, then SIGKILL to whatever is left after the grace.
    /// Returns the signal that ended it (`None`: nothing was left to end). `leader`, when
    /// given, is reaped on the way: until it is, its zombie keeps the group alive.
    async fn end(&self, mut leader: Option<&mut async_process::Child>) -> Option<&'static str> {
        if self.gone.load(Ordering::Acquire)
            || rustix::process::kill_process_group(self.pgid, Signal::TERM).is_err()
        {
            self.gone.store(true, Ordering::Release);
            return None;
        }
        let deadline = Instant::now() + KILL_GRACE;
        while Instant::now() < deadline {
            if let Some(leader) = leader.as_mut() {
                let _ = leader.try_status();
            }
            if !self.alive() {
                self.gone.store(true, Ordering::Release);
                return Some("SIGTERM");
            }
            smol::Timer::after(Duration::from_millis(20)).await;
        }
        let _ = rustix::process::kill_process_group(self.pgid, Signal::KILL);
        // Nothing outlives SIGKILL.
        self.gone.store(true, Ordering::Release);
        Some("SIGKILL")
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        groups(|g| g.remove(&self.pgid.as_raw_nonzero().get()));
        metrics().agent_commands_running.dec();
        if !self.gone.load(Ordering::Acquire)
            && rustix::process::kill_process_group(self.pgid, Signal::TERM).is_ok()
        {
            let pgid = self.pgid;
            let pid = pgid.as_raw_nonzero().get();
            tracing::info!(
                target: "connop::agent",
                pid,
                signal = "SIGTERM",
                "agent command ended: its turn was dropped (the caller went away)",
            );
            std::thread::spawn(move || {
                std::thread::sleep(KILL_GRACE);
                if rustix::process::kill_process_group(pgid, Signal::KILL).is_ok() {
                    tracing::info!(
                        target: "connop::agent",
                        pid,
                        signal = "SIGKILL",
                        "agent command ended: it outlived SIGTERM by the grace",
                    );
                }
            });
        }
    }
}

/// Why reading stdout stopped before its end.
struct TooMuchOutput;

/// Reads `from` to its end, at most `cap` bytes; past the cap, stops reading.
async fn read_capped(
    mut from: impl AsyncRead + Unpin,
    cap: usize,
) -> Result<Vec<u8>, TooMuchOutput> {
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(kept),
            Ok(n) => {
                if kept.len() + n > cap {
                    return Err(TooMuchOutput);
                }
                kept.extend_from_slice(&chunk[..n]);
            }
        }
    }
}

/// Reads `from` to its end, keeping the first `keep` bytes.
async fn read_keeping(mut from: impl AsyncRead + Unpin, keep: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; 16 << 10];
    loop {
        match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = keep.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&chunk[..room]);
            }
        }
    }
}

/// How the command's own run ended (unless stopped).
enum Ended {
    Exited {
        status: std::process::ExitStatus,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    },
    TooMuchOutput,
    Wait(std::io::Error),
}

/// Runs the command in its own process group until it ends or `stop` completes; either way
/// nothing of its group is left when this returns.
async fn run_command(command: &str, turn: &Turn, stop: impl Future<Output = ()>) -> TurnOutcome {
    let mut std_command = std::process::Command::new("sh");
    std_command.arg("-c").arg(command).process_group(0);
    // The pipes are set on the async command: it would make them inherited otherwise.
    let mut async_command = async_process::Command::from(std_command);
    async_command
        .stdin(async_process::Stdio::piped())
        .stdout(async_process::Stdio::piped())
        .stderr(async_process::Stdio::piped());
    let mut child = match async_command.spawn() {
        Ok(child) => child,
        Err(e) => return TurnOutcome::Failed(format!("cannot run the agent command: {e}")),
    };
    let started = Instant::now();
    let pid = child.id();
    let Some(pgid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return TurnOutcome::Failed(format!("the agent command got an unusable pid {pid}"));
    };
    let group = Group::new(pgid);
    tracing::debug!(
        target: "connop::agent",
        pid,
        session_id = %turn.session_id,
        "agent command started",
    );
    let history: Vec<_> = turn
        .history
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    let input = json!({"session_id": turn.session_id, "message": turn.message, "history": history})
        .to_string();
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let run = async {
        let write = async {
            if let Some(mut stdin) = stdin {
                // A command that does not read its stdin is fine: ignore a broken pipe.
                let _ = stdin.write_all(input.as_bytes()).await;
                let _ = stdin.close().await;
            }
        };
        let read_out = async {
            let Some(stdout) = stdout else {
                return Ok(Vec::new());
            };
            let read = read_capped(stdout, MAX_AGENT_OUTPUT).await;
            if read.is_err() {
                // The command is still writing: end it, so the rest of the run ends too.
                group.end(None).await;
            }
            read
        };
        let read_err = async {
            match stderr {
                Some(stderr) => read_keeping(stderr, MAX_STDERR_KEPT).await,
                None => Vec::new(),
            }
        };
        let exit = async {
            let status = child.status().await;
            // Whatever the shell left behind holds its pipes open: it ends with the turn.
            group.end(None).await;
            status
        };
        let ((((), stdout), stderr), status) = futures_lite::future::zip(
            futures_lite::future::zip(futures_lite::future::zip(write, read_out), read_err),
            exit,
        )
        .await;
        match (status, stdout) {
            (_, Err(TooMuchOutput)) => Ended::TooMuchOutput,
            (Ok(status), Ok(stdout)) => Ended::Exited {
                status,
                stdout,
                stderr,
            },
            (Err(e), _) => Ended::Wait(e),
        }
    };
    let ended = async { Some(run.await) }
        .or(async {
            stop.await;
            None
        })
        .await;
    let took_ms = started.elapsed().as_millis() as u64;
    let Some(ended) = ended else {
        let signal = group.end(Some(&mut child)).await;
        let _ = child.status().await;
        tracing::info!(
            target: "connop::agent",
            pid,
            took_ms,
            signal,
            "agent command stopped with its turn",
        );
        return TurnOutcome::Stopped;
    };
    match ended {
        Ended::TooMuchOutput => {
            tracing::warn!(
                target: "connop::agent",
                pid,
                took_ms,
                limit_bytes = MAX_AGENT_OUTPUT,
                "agent command ended: its output exceeded the limit",
            );
            TurnOutcome::Failed("agent output exceeded 16 MiB".into())
        }
        Ended::Wait(e) => {
            tracing::warn!(
                target: "connop::agent",
                pid,
                took_ms,
                error = %e,
                "agent command could not be waited for",
            );
            TurnOutcome::Failed(format!("the agent command failed: {e}"))
        }
        Ended::Exited {
            status,
            stdout,
            stderr,
        } => {
            tracing::info!(
                target: "connop::agent",
                pid,
                took_ms,
                code = status.code(),
                signal = std::os::unix::process::ExitStatusExt::signal(&status),
                stdout_bytes = stdout.len(),
                "agent command exited",
            );
            if status.success() {
                let reply = String::from_utf8_lossy(&stdout);
                let reply = reply.trim_end_matches(['\n', '\r']);
                if !storable(reply) {
                    return TurnOutcome::Failed(NUL_REPLY.into());
                }
                TurnOutcome::Reply(reply.to_owned())
            } else {
                // An error is only read: a NUL in it is shown as the replacement character.
                let stderr = String::from_utf8_lossy(&stderr)
                    .trim()
                    .replace('\0', "\u{fffd}");
                TurnOutcome::Failed(if stderr.is_empty() {
                    format!("the agent command failed ({status})")
                } else {
                    stderr
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn() -> Turn {
        Turn {
            session_id: "s1".into(),
            message: "ping".into(),
            history: vec![Message {
                role: "user".into(),
                content: "earlier".into(),
            }],
        }
    }

    fn never() -> impl Future<Output = ()> {
        futures_lite::future::pending()
    }

    #[test]
    fn echo_and_commands_answer_turns() {
        smol::block_on(async {
            assert_eq!(
                TurnExecutor::Echo.answer(&turn(), never()).await,
                TurnOutcome::Reply("ping".into())
            );
            let reads_stdin = TurnExecutor::Command(r#"python3 -c 'import json,sys; t=json.load(sys.stdin); print(t["message"] + "/" + t["history"][0]["content"])'"#.into());
            assert_eq!(
                reads_stdin.answer(&turn(), never()).await,
                TurnOutcome::Reply("ping/earlier".into())
            );
            let fails = TurnExecutor::Command("echo nope >&2; exit 3".into());
            assert_eq!(
                fails.answer(&turn(), never()).await,
                TurnOutcome::Failed("nope".into())
            );
            let stopped = TurnExecutor::Command("sleep 30".into());
            let started = std::time::Instant::now();
            assert_eq!(
                stopped.answer(&turn(), async {}).await,
                TurnOutcome::Stopped
            );
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
        });
    }
}
