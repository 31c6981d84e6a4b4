//! Runs (docs/http-api.md#runs, docs/operating.md#limits and #postgresql): `POST /v1/runs` starts
//! one (replayed for a repeated `Idempotency-Key`, also after a restart or on another replica),
//! `GET /v1/runs/{id}` reads it, `POST /v1/runs/{id}/stop` stops it wherever its turn runs. A run's
//! lifecycle is [`connop_core::run::Run`]'s; every change goes through the store, which decides it
//! there and wakes the run's event streams.

use super::error::ApiError;
use super::executor::{Turn, TurnOutcome};
use super::input::{user_message, valid_author};
use super::server::{Api, HandlerAnswer};
use crate::store::Store as _;
use crate::store::{FirstAnswer, Keyed, NewMessage, NewRun, Running, Started};
use crate::sync::random_hex;
use crate::telemetry;
use connop_core::run::{Run, RunChange, RunStatus, STORE_FAILED_ERROR, run_id};
use hyper::StatusCode;
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How often a change that must be stored (a run's start and end) is tried when the store
/// refuses it (not an outage: one of those is waited out), and how long between tries.
const PERSIST_TRIES: u32 = 5;
const PERSIST_BACKOFF: Duration = Duration::from_millis(200);

/// A valid `POST /v1/runs` body.
struct RunRequest {
    message: String,
    session_id: String,
    author: Option<Value>,
}

fn parse_run(body: &[u8]) -> Result<RunRequest, ApiError> {
    let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(body) else {
        return Err(ApiError::InvalidJson);
    };
    let input = body.get("input").ok_or(ApiError::MissingInput)?;
    let message = user_message(input).ok_or(ApiError::NoUserMessage)?;
    if !valid_author(body.get("author")) {
        return Err(ApiError::InvalidAuthor);
    }
    let session_id = body
        .get("session_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map_or_else(|| format!("session_{}", random_hex(8)), str::to_owned);
    Ok(RunRequest {
        message,
        session_id,
        author: body.get("author").filter(|a| !a.is_null()).cloned(),
    })
}

/// The answer to a request whose key was taken: the first answer for the same body, a
/// conflict for another.
fn replay(first: FirstAnswer, body: &str) -> HandlerAnswer {
    if first.body != body {
        return Err(ApiError::IdempotencyConflict);
    }
    let status = StatusCode::from_u16(first.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    Ok((status, first.answer))
}

/// Runs `work` to its end even if the client goes away meanwhile: a run once stored must
/// be started, a stop once stored must be routed.
pub(super) async fn to_the_end(
    work: impl Future<Output = HandlerAnswer> + Send + 'static,
) -> HandlerAnswer {
    let (tx, rx) = async_channel::bounded(1);
    smol::spawn(async move {
        let _ = tx.send(work.await).await;
    })
    .detach();
    rx.recv().await.unwrap_or(Err(ApiError::Abandoned))
}

impl Api {
    pub(super) async fn create_run(
        self: Arc<Self>,
        body: Vec<u8>,
        idempotency_key: Option<String>,
    ) -> HandlerAnswer {
        let text = String::from_utf8_lossy(&body).into_owned();
        let now = self.clock.now();
        let request = match (parse_run(&body), &idempotency_key) {
            (Ok(request), _) => request,
            (Err(refusal), None) => return Err(refusal),
            // Refusals are remembered too: the same key and body always get the same answer.
            (Err(refusal), Some(key)) => {
                let (status, answer) = refusal.answer();
                let first = FirstAnswer {
                    body: text.clone(),
                    status: status.as_u16(),
                    answer,
                };
                let keyed = Keyed {
                    key,
                    first: &first,
                    now,
                };
                return match self.store.remember(&keyed).await? {
                    None => Ok((status, first.answer)),
                    Some(taken) => replay(taken, &text),
                };
            }
        };
        let mut entropy = [0u8; 16];
        connop_blocking::random::random_bytes(&mut entropy);
        let run = Run::new(run_id(entropy), request.session_id, now);
        let answer = json!({"run_id": run.run_id(), "status": "started"});
        let first = FirstAnswer {
            body: text.clone(),
            status: StatusCode::ACCEPTED.as_u16(),
            answer: answer.clone(),
        };
        // Before the run is stored, so a stop that comes right after finds the switch.
        let running = self.signals.run_here(run.run_id());
        let start = NewRun {
            run: &run,
            message: &request.message,
            author: request.author.as_ref(),
            key: idempotency_key.as_deref().map(|key| Keyed {
                key,
                first: &first,
                now,
            }),
        };
        match self.store.start_run(&start).await? {
            Started::Taken(taken) => replay(taken, &text),
            Started::Run(history) => {
                telemetry::run_started(&run); // logs and metrics (docs/operating.md#logs)
                let turn = Turn {
                    session_id: run.session_id().to_owned(),
                    message: request.message.clone(),
                    history,
                };
                let id = run.run_id().to_owned();
                smol::spawn(self.clone().execute(id, turn, running)).detach();
                Ok((StatusCode::ACCEPTED, answer))
            }
        }
    }

    /// Applies a change the run must not lose; the run as it stands after, if the store
    /// took it. While the store is away the change waits for it to come back (the run's turn
    /// holds its place as running here meanwhile, so nothing else ends the run first); a
    /// change the store refuses is tried [`PERSIST_TRIES`] times, then the run is ended
    /// `interrupted` with [`STORE_FAILED_ERROR`] instead. Each failure is logged once.
    async fn persist(&self, run_id: &str, mut change: RunChange<'_>) -> Option<Run> {
        let fallback = RunChange::Interrupt(STORE_FAILED_ERROR);
        let mut refused = 0;
        let mut waited = false;
        loop {
            let error = match self.store.apply(run_id, change, self.clock.now()).await {
                Ok(applied) => {
                    if waited {
                        tracing::info!(
                            target: "connop::run",
                            run_id,
                            "run stored again: the store is back",
                        );
                    }
                    return applied.map(|(run, _)| run);
                }
                Err(error) => error,
            };
            if error.is_outage() {
                if !waited {
                    tracing::error!(
                        target: "connop::run",
                        run_id,
                        error = %error,
                        "run could not be stored: the change waits until the store is back",
                    );
                    waited = true;
                }
                self.store.health().until_up().await;
            } else {
                refused += 1;
                if refused >= PERSIST_TRIES {
                    tracing::error!(
                        target: "connop::run",
                        run_id,
                        error = %error,
                        tries = refused,
                        "run could not be stored: the store refused the change",
                    );
                    if change == fallback {
                        return None;
                    }
                    // The run still ends: as the store's failure.
                    (change, refused) = (fallback, 0);
                }
            }
            smol::Timer::after(PERSIST_BACKOFF).await;
        }
    }

    async fn execute(self: Arc<Self>, run_id: String, turn: Turn, running: Running) {
        let started = self.persist(&run_id, RunChange::Start).await;
        let unstarted = match &started {
            // The store went away meanwhile, or refused the start.
            _ if running.store_failed() => Some(RunChange::Interrupt(STORE_FAILED_ERROR)),
            None => Some(RunChange::Interrupt(STORE_FAILED_ERROR)),
            // Stopped or interrupted before it started.
            Some(run) if run.status() != RunStatus::Running => Some(RunChange::Stopped),
            Some(_) => None,
        };
        if let Some(change) = unstarted {
            // The turn never runs.
            let after = self.persist(&run_id, change).await;
            drop(running);
            self.finished(&run_id, after).await;
            return;
        }
        let outcome = self.executor.answer(&turn, running.stopped()).await;
        if let TurnOutcome::Reply(reply) = &outcome {
            let message = NewMessage {
                session_id: &turn.session_id,
                role: "assistant",
                content: reply,
                author: None,
                now: self.clock.now(),
            };
            let _ = self.store.add_message(&message).await;
        }
        let change = match &outcome {
            // The store went away: the run is the gateway's to end, not the person's.
            TurnOutcome::Stopped if running.store_failed() => {
                RunChange::Interrupt(STORE_FAILED_ERROR)
            }
            // The executors answer in one piece: the reply is one delta, then the end.
            TurnOutcome::Reply(reply) => RunChange::Reply(reply),
            TurnOutcome::Failed(e) => RunChange::Fail(e),
            TurnOutcome::Stopped => RunChange::Stopped,
        };
        let after = self.persist(&run_id, change).await;
        drop(running);
        self.finished(&run_id, after).await;
    }

    /// Logs and counts a run's end (docs/operating.md#logs), once per [`telemetry::run_started`]:
    /// as the last change left it, or as the store holds it when that change did not apply (the
    /// run was already terminal, say interrupted by a shutdown).
    async fn finished(&self, run_id: &str, after: Option<Run>) {
        let run = match after {
            Some(run) => Some(run),
            None => self.store.run(run_id).await.ok().flatten(),
        };
        match run {
            Some(run) => telemetry::run_finished(&run),
            // The store cannot say how it ended: it is no longer active, all the same.
            None => {
                telemetry::metrics().runs_active.dec();
            }
        }
    }

    pub(super) async fn get_run(&self, id: &str) -> HandlerAnswer {
        match self.store.run(id).await? {
            Some(run) => Ok((StatusCode::OK, run.to_json())),
            None => Err(ApiError::RunNotFound(id.to_owned())),
        }
    }

    /// A stop: stored as the core decides, then carried to the turn, here or on the replica
    /// that runs it.
    pub(super) async fn stop_run(self: Arc<Self>, id: String) -> HandlerAnswer {
        let now = self.clock.now();
        let Some((run, _)) = self.store.apply(&id, RunChange::Stop, now).await? else {
            return Err(ApiError::RunNotFound(id));
        };
        if run.status() == RunStatus::Stopping && !self.signals.stop_here(&id) {
            self.store.route_stop(&id).await?;
        }
        Ok((StatusCode::OK, run.to_json()))
    }
}
