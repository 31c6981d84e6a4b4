//! Sessions and session chat (SPEC §9.2): `GET`/`POST /api/sessions` and
//! `POST /api/sessions/{id}/chat`, which runs one turn with the session's history.

use super::error::ApiError;
use super::executor::{Turn, TurnOutcome};
use super::input::valid_author;
use super::{Answer, Api};
use crate::app::store::{NewMessage, SessionRow};
use crate::app::sync::random_hex;
use hyper::StatusCode;
use serde_json::{Value, json};

impl Api {
    pub(super) async fn list_sessions(&self) -> Answer {
        let rows = self.store.sessions().await?;
        let sessions: Vec<Value> = rows.iter().map(SessionRow::to_json).collect();
        Ok((StatusCode::OK, json!({ "sessions": sessions })))
    }

    pub(super) async fn create_session(&self, body: &[u8]) -> Answer {
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
        if !self.store.create_session(&row).await? {
            return Err(ApiError::SessionExists(row.session_id));
        }
        Ok((StatusCode::CREATED, row.to_json()))
    }

    pub(super) async fn chat(&self, session_id: &str, body: &[u8]) -> Answer {
        let body = serde_json::from_slice::<Value>(body).map_err(|_| ApiError::InvalidJson)?;
        if self.store.session(session_id).await?.is_none() {
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
        let user = NewMessage {
            session_id,
            role: "user",
            content: message,
            author: body.get("author").filter(|a| !a.is_null()),
            now: self.clock.now(),
        };
        let history = self.store.begin_turn(&user).await?;
        let turn = Turn {
            session_id: session_id.to_owned(),
            message: message.to_owned(),
            history,
        };
        let never = futures_lite::future::pending();
        match self.executor.answer(&turn, never).await {
            TurnOutcome::Reply(reply) => {
                let answer = NewMessage {
                    session_id,
                    role: "assistant",
                    content: &reply,
                    author: None,
                    now: self.clock.now(),
                };
                self.store.add_message(&answer).await?;
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
}
