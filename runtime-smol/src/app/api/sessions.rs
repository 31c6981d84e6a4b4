//! Sessions and session chat (SPEC §9.2): `GET`/`POST /api/sessions` and
//! `POST /api/sessions/{id}/chat`, which runs one turn with the session's history.

use super::error::ApiError;
use super::executor::{Turn, TurnOutcome};
use super::input::valid_author;
use super::store::{SessionRow, StoreError};
use super::{Answer, Api};
use connop_blocking::clock::random_hex;
use hyper::StatusCode;
use serde_json::{Value, json};

impl Api {
    pub(super) fn list_sessions(&self) -> Answer {
        let rows = self.store.sessions()?;
        let sessions: Vec<Value> = rows.iter().map(SessionRow::to_json).collect();
        Ok((StatusCode::OK, json!({ "sessions": sessions })))
    }

    pub(super) fn create_session(&self, body: &[u8]) -> Answer {
        let body: Value = if body.is_empty() {
            json!({})
        } else {
            match serde_json::from_slice(body) {
                Ok(v @ Value::Object(_)) => v,
                _ => return Err(ApiError::InvalidJson),
            }
        };
        let text = |key: &str| {
            body.get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let row = SessionRow {
            session_id: text("session_id")
                .map_or_else(|| format!("session_{}", random_hex(8)), str::to_owned),
            title: text("title").unwrap_or("").to_owned(),
            source: text("source").unwrap_or("api_server").to_owned(),
            created_at: self.clock.now().as_secs_f64(),
        };
        if !self.store.create_session(&row)? {
            return Err(ApiError::SessionExists(row.session_id));
        }
        Ok((StatusCode::CREATED, row.to_json()))
    }

    /// Creates the session a run names if it does not exist yet.
    pub(super) fn ensure_session(&self, session_id: &str) -> Result<(), StoreError> {
        if self.store.session(session_id)?.is_none() {
            let row = SessionRow {
                session_id: session_id.to_owned(),
                title: String::new(),
                source: "api_server".into(),
                created_at: self.clock.now().as_secs_f64(),
            };
            self.store.create_session(&row)?;
        }
        Ok(())
    }

    pub(super) async fn chat(&self, session_id: &str, body: &[u8]) -> Answer {
        let body = serde_json::from_slice::<Value>(body).map_err(|_| ApiError::InvalidJson)?;
        if self.store.session(session_id)?.is_none() {
            return Err(ApiError::SessionNotFound(session_id.to_owned()));
        }
        let message = body
            .get("message")
            .and_then(Value::as_str)
            .filter(|m| !m.trim().is_empty())
            .ok_or(ApiError::MissingMessage)?;
        if !valid_author(body.get("author")) {
            return Err(ApiError::InvalidAuthor);
        }
        let turn = self.turn(session_id, message, body.get("author"))?;
        let never = futures_lite::future::pending();
        match self.executor.answer(&turn, never).await {
            TurnOutcome::Reply(reply) => {
                self.store
                    .add_message(session_id, "assistant", &reply, None, self.clock.now())?;
                Ok((
                    StatusCode::OK,
                    json!({"object": "connop.session.chat.completion", "session_id": session_id,
                           "message": {"role": "assistant", "content": reply}}),
                ))
            }
            TurnOutcome::Failed(e) => Err(ApiError::TurnFailed(e)),
            TurnOutcome::Stopped => Err(ApiError::TurnStopped),
        }
    }

    /// Records the user's message and builds the turn with the history before it.
    pub(super) fn turn(
        &self,
        session_id: &str,
        message: &str,
        author: Option<&Value>,
    ) -> Result<Turn, StoreError> {
        let history = self.store.history(session_id)?;
        self.store
            .add_message(session_id, "user", message, author, self.clock.now())?;
        Ok(Turn {
            session_id: session_id.to_owned(),
            message: message.to_owned(),
            history,
        })
    }
}
