//! Runs (SPEC §9.1): `POST /v1/runs` starts one (replayed for a repeated `Idempotency-Key`),
//! `GET /v1/runs/{id}` reads it, `POST /v1/runs/{id}/stop` stops it. A run's lifecycle is
//! [`connop_core::run::Run`]'s; here it is stored on every change and its subscribers woken.

use super::error::ApiError;
use super::executor::{Turn, TurnOutcome};
use super::input::{user_message, valid_author};
use super::{Answer, Api, lock};
use crate::app::telemetry;
use connop_blocking::clock::random_hex;
use connop_blocking::sync::Switch;
use connop_core::run::{Run, StopOutcome, run_id};
use hyper::StatusCode;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// A run being tracked: its state, a signal for its subscribers, and its stop switch.
pub(super) struct RunCell {
    pub(super) run: Mutex<Run>,
    pub(super) changed: event_listener::Event,
    pub(super) stop: Switch,
}

impl RunCell {
    pub(super) fn new(run: Run) -> Self {
        RunCell {
            run: Mutex::new(run),
            changed: event_listener::Event::new(),
            stop: Switch::default(),
        }
    }
}

/// The first answer to an `Idempotency-Key`, replayed for the same body.
pub(super) struct FirstAnswer {
    body: String,
    status: StatusCode,
    answer: Value,
}

impl Api {
    pub(super) fn create_run(
        self: &Arc<Self>,
        body: &[u8],
        idempotency_key: Option<String>,
    ) -> Answer {
        let text = String::from_utf8_lossy(body).into_owned();
        if let Some(key) = &idempotency_key {
            if let Some(first) = lock(&self.idempotency).get(key) {
                if first.body != text {
                    return Err(ApiError::IdempotencyConflict);
                }
                return Ok((first.status, first.answer.clone()));
            }
        }
        // Refusals are replayed too: the same key and body always get the same answer.
        let (status, answer) = self.start_run(body).unwrap_or_else(|e| e.answer());
        if let Some(key) = idempotency_key {
            let first = FirstAnswer {
                body: text,
                status,
                answer: answer.clone(),
            };
            lock(&self.idempotency).insert(key, first);
        }
        Ok((status, answer))
    }

    fn start_run(self: &Arc<Self>, body: &[u8]) -> Answer {
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
        self.ensure_session(&session_id)?;
        let turn = self.turn(&session_id, &message, body.get("author"))?;
        let mut entropy = [0u8; 16];
        connop_blocking::clock::random_bytes(&mut entropy);
        let run = Run::new(run_id(entropy), session_id, self.clock.now());
        self.store.save_run(&run)?;
        telemetry::run_started(&run); // logs and metrics (SPEC §12.5)
        let id = run.run_id().to_owned();
        let cell = Arc::new(RunCell::new(run));
        lock(&self.runs).insert(id.clone(), cell.clone());
        smol::spawn(self.clone().execute(cell, turn)).detach();
        Ok((
            StatusCode::ACCEPTED,
            json!({"run_id": id, "status": "started"}),
        ))
    }

    /// Applies one change to a run, stores it, and wakes its subscribers.
    pub(super) fn update(&self, cell: &RunCell, change: impl FnOnce(&mut Run)) {
        {
            let mut run = lock(&cell.run);
            change(&mut run);
            let _ = self.store.save_run(&run);
        }
        cell.changed.notify(usize::MAX);
    }

    async fn execute(self: Arc<Self>, cell: Arc<RunCell>, turn: Turn) {
        let now = self.clock.now();
        self.update(&cell, |run| {
            run.start(now);
        });
        let outcome = self.executor.answer(&turn, cell.stop.wait()).await;
        let now = self.clock.now();
        if let TurnOutcome::Reply(reply) = &outcome {
            let _ = self
                .store
                .add_message(&turn.session_id, "assistant", reply, None, now);
        }
        self.update(&cell, |run| {
            match outcome {
                // The executors answer in one piece: the reply is one delta, then the end.
                TurnOutcome::Reply(reply) => {
                    run.delta(&reply, now);
                    run.complete(&reply, now)
                }
                TurnOutcome::Failed(e) => run.fail(&e, now),
                TurnOutcome::Stopped => run.cancelled(now),
            };
        });
        telemetry::run_finished(&lock(&cell.run)); // logs and metrics (SPEC §12.5)
    }

    /// A run this process is tracking.
    pub(super) fn cell(&self, id: &str) -> Option<Arc<RunCell>> {
        lock(&self.runs).get(id).cloned()
    }

    pub(super) fn get_run(&self, id: &str) -> Answer {
        if let Some(cell) = self.cell(id) {
            return Ok((StatusCode::OK, lock(&cell.run).to_json()));
        }
        match self.store.run(id)? {
            Some(run) => Ok((StatusCode::OK, run.to_json())),
            None => Err(ApiError::RunNotFound(id.to_owned())),
        }
    }

    pub(super) fn stop_run(&self, id: &str) -> Answer {
        let Some(cell) = self.cell(id) else {
            return self.get_run(id);
        };
        let now = self.clock.now();
        let mut outcome = StopOutcome::Unchanged;
        self.update(&cell, |run| outcome = run.stop(now));
        if outcome == StopOutcome::Stopping {
            cell.stop.flip();
        }
        Ok((StatusCode::OK, lock(&cell.run).to_json()))
    }
}
