//! Turn executors: what answers a chat turn or a run.
//!
//! - `echo` (the default): the reply is the message.
//! - `--agent-cmd CMD`: CMD runs per turn through `sh -c`, gets
//!   `{"session_id", "message", "history"}` as JSON on stdin; its stdout with trailing
//!   newlines removed is the reply; a non-zero exit fails the turn with its stderr; a stop
//!   kills it.

use crate::app::store::Message;
use futures_lite::AsyncWriteExt;
use serde_json::json;
use std::future::Future;

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
    /// The turn was stopped before it answered (its command, if any, was killed).
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
            TurnExecutor::Command(command) => {
                futures_lite::future::or(run_command(command, turn), async {
                    stop.await;
                    TurnOutcome::Stopped
                })
                .await
            }
        }
    }
}

/// Runs the command; dropping the future kills it.
async fn run_command(command: &str, turn: &Turn) -> TurnOutcome {
    let mut child = match async_process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(async_process::Stdio::piped())
        .stdout(async_process::Stdio::piped())
        .stderr(async_process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return TurnOutcome::Failed(format!("cannot run the agent command: {e}")),
    };
    let history: Vec<_> = turn
        .history
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    let input = json!({"session_id": turn.session_id, "message": turn.message, "history": history})
        .to_string();
    if let Some(mut stdin) = child.stdin.take() {
        // A command that does not read its stdin is fine: ignore a broken pipe.
        let _ = stdin.write_all(input.as_bytes()).await;
        let _ = stdin.close().await;
    }
    match child.output().await {
        Ok(output) if output.status.success() => {
            let reply = String::from_utf8_lossy(&output.stdout);
            TurnOutcome::Reply(reply.trim_end_matches(['\n', '\r']).to_owned())
        }
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
            TurnOutcome::Failed(if stderr.is_empty() {
                format!("the agent command failed ({})", output.status)
            } else {
                stderr
            })
        }
        Err(e) => TurnOutcome::Failed(format!("the agent command failed: {e}")),
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
