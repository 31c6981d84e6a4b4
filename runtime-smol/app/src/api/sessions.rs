//! Sessions and session chat (docs/http-api.md#sessions): `GET`/`POST /api/sessions` and
//! `POST /api/sessions/{id}/chat`, which runs one turn with the session's latest history
//! (see [`HISTORY_MESSAGES`](crate::store::HISTORY_MESSAGES)).
//!
//! `GET /api/sessions` answers a page: `{"sessions": [...], "next_cursor": "…" | null}`,
//! oldest first, [`SESSIONS_PAGE`] sessions unless `?limit=N` asks for another number (at
//! most [`SESSIONS_PAGE_MAX`]: more is read as the maximum). `?cursor=C`, with the
//! `next_cursor` of a page, asks for the page after it; `next_cursor` is `null` on the last.
//! A `limit` that is not a positive integer is 400 `invalid_limit`; a cursor this API did not
//! make is 400 `invalid_cursor`.

use super::error::ApiError;
use super::executor::{Turn, TurnOutcome};
use super::input::valid_author;
use super::server::{Api, HandlerAnswer};
use crate::store::Store as _;
use crate::store::{NewMessage, SessionCursor, SessionRow};
use crate::sync::random_hex;
use hyper::StatusCode;
use serde_json::{Value, json};

/// Sessions in a page when `limit` is not given.
pub const SESSIONS_PAGE: u32 = 100;

/// The most sessions in a page.
pub const SESSIONS_PAGE_MAX: u32 = 1000;

/// The page `GET /api/sessions?…` asks for: where it starts, and how many at most.
fn page_of(query: Option<&str>) -> Result<(Option<SessionCursor>, u32), ApiError> {
    let mut cursor = None;
    let mut limit = SESSIONS_PAGE;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(value).decode_utf8_lossy();
        match name {
            "limit" => {
                limit = value
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| ApiError::InvalidLimit(value.clone().into_owned()))?
                    .min(u64::from(SESSIONS_PAGE_MAX)) as u32;
            }
            "cursor" => {
                let parsed = SessionCursor::parse(&value)
                    .ok_or_else(|| ApiError::InvalidCursor(value.clone().into_owned()))?;
                cursor = Some(parsed);
            }
            _ => {}
        }
    }
    Ok((cursor, limit))
}

impl Api {
    pub(super) async fn list_sessions(&self, query: Option<&str>) -> HandlerAnswer {
        let (cursor, limit) = page_of(query)?;
        let page = self.store.sessions(cursor.as_ref(), limit).await?;
        let sessions: Vec<Value> = page.rows.iter().map(SessionRow::to_json).collect();
        let next = page.next.map(|c| c.encode());
        Ok((
            StatusCode::OK,
            json!({ "sessions": sessions, "next_cursor": next }),
        ))
    }

    pub(super) async fn create_session(&self, body: &[u8]) -> HandlerAnswer {
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

    pub(super) async fn chat(&self, session_id: &str, body: &[u8]) -> HandlerAnswer {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_asked_with_a_limit_and_a_cursor() {
        assert_eq!(page_of(None).unwrap(), (None, SESSIONS_PAGE));
        assert_eq!(page_of(Some("limit=5")).unwrap(), (None, 5));
        assert_eq!(
            page_of(Some("limit=1000000")).unwrap(),
            (None, SESSIONS_PAGE_MAX)
        );
        let cursor = SessionCursor {
            created_at: 1.5,
            position: 7,
        };
        let query = format!("other=x&cursor={}&limit=2", cursor.encode());
        assert_eq!(page_of(Some(&query)).unwrap(), (Some(cursor), 2));
        for bad in ["limit=0", "limit=-1", "limit=x", "limit="] {
            assert!(
                matches!(page_of(Some(bad)), Err(ApiError::InvalidLimit(_))),
                "{bad}"
            );
        }
        for bad in ["cursor=", "cursor=zz", "cursor=0123"] {
            assert!(
                matches!(page_of(Some(bad)), Err(ApiError::InvalidCursor(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_cursor_reads_back_as_it_was_made() {
        for (created_at, position) in [(0.0, 0), (1_800_000_000.123_456, 42), (-1.0, i64::MAX)] {
            let cursor = SessionCursor {
                created_at,
                position,
            };
            assert_eq!(SessionCursor::parse(&cursor.encode()), Some(cursor));
        }
    }
}
