//! The HTTP API's error answers, OpenAI-style: `{"error": {"message", "type", "code"}}`.
//! The caller's mistakes are `invalid_request_error` (4xx); a failed turn or store is
//! `server_error` (5xx).

use crate::net::guard::Refusal;
use crate::store::StoreError;
use connop_core::run::IdempotencyKeyError;
use hyper::StatusCode;
use serde_json::{Value, json};

/// Why a request was not answered with what it asked for.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No `Authorization: Bearer <key>`, or the wrong key.
    #[error("Invalid API key")]
    InvalidApiKey,
    /// A method and path the API does not serve.
    #[error("No route for {method} {path}")]
    NoRoute {
        /// The method.
        method: String,
        /// The path.
        path: String,
    },
    /// A path the API serves, asked with a method it does not serve there.
    #[error("{method} is not allowed on {path}: use {allow}")]
    MethodNotAllowed {
        /// The method.
        method: String,
        /// The path.
        path: String,
        /// The methods the path serves (the `Allow` header).
        allow: &'static str,
    },
    /// Refused by the listener's guard before the request was served: a foreign `Host` or
    /// `Origin`, a body of the wrong type, too large (`--max-body`) or too slow.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// An `Idempotency-Key` that is not 1 to 255 printable ASCII characters.
    #[error(transparent)]
    InvalidIdempotencyKey(#[from] IdempotencyKeyError),
    /// A path whose segments do not percent-decode to UTF-8.
    #[error("The path {0} does not decode to UTF-8")]
    BadPath(String),
    /// The body is not a JSON object.
    #[error("Invalid JSON")]
    InvalidJson,
    /// A path or a body holding a NUL character, which no store keeps.
    #[error("Text may not hold the NUL character (U+0000)")]
    NulCharacter,
    /// `?limit=` that is not a positive integer.
    #[error("limit must be a positive integer, not {0:?}")]
    InvalidLimit(String),
    /// `?cursor=` that is not a `next_cursor` this API answered.
    #[error("cursor {0:?} is not a next_cursor of this API")]
    InvalidCursor(String),
    /// A run without `input`.
    #[error("Missing 'input' field")]
    MissingInput,
    /// A run whose `input` holds no user message.
    #[error("No user message found in input")]
    NoUserMessage,
    /// An `author` that is not `{"id": non-empty, "name": str, "is_bot": bool}`.
    #[error("invalid_author")]
    InvalidAuthor,
    /// A chat turn without a `message`.
    #[error("Missing 'message' field")]
    MissingMessage,
    /// `POST /api/sessions` with an id that exists.
    #[error("Session already exists: {0}")]
    SessionExists(String),
    /// A chat turn into a session that does not exist.
    #[error("Session not found: {0}")]
    SessionNotFound(String),
    /// A run id the API does not know.
    #[error("Run not found: {0}")]
    RunNotFound(String),
    /// An `Idempotency-Key` already used with another body.
    #[error("Idempotency-Key reused with a different body")]
    IdempotencyConflict,
    /// The turn's executor failed, with its reason.
    #[error("{0}")]
    TurnFailed(String),
    /// The turn was stopped before it answered.
    #[error("The turn was stopped.")]
    TurnStopped,
    /// The work behind the request ended without an answer.
    #[error("The request was abandoned before it was answered.")]
    Abandoned,
    /// The store failed. One that is away is answered 503 with a message of its own: where
    /// the database is stays in the log.
    #[error("{}", store_message(.0))]
    Store(#[from] StoreError),
}

/// What a client is told of a failed store.
fn store_message(error: &StoreError) -> String {
    if error.is_outage() {
        "The store is unavailable: its database cannot be reached. Try again once it is back."
            .to_owned()
    } else {
        error.to_string()
    }
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidApiKey => StatusCode::UNAUTHORIZED,
            ApiError::NoRoute { .. } | ApiError::SessionNotFound(_) | ApiError::RunNotFound(_) => {
                StatusCode::NOT_FOUND
            }
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::InvalidJson
            | ApiError::NulCharacter
            | ApiError::InvalidLimit(_)
            | ApiError::InvalidCursor(_)
            | ApiError::MissingInput
            | ApiError::NoUserMessage
            | ApiError::InvalidAuthor
            | ApiError::MissingMessage
            | ApiError::InvalidIdempotencyKey(_)
            | ApiError::BadPath(_) => StatusCode::BAD_REQUEST,
            ApiError::Refused(refusal) => refusal.status(),
            ApiError::SessionExists(_) | ApiError::IdempotencyConflict => StatusCode::CONFLICT,
            ApiError::Store(e) if e.is_outage() => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::TurnFailed(_) | ApiError::Abandoned | ApiError::Store(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ApiError::TurnStopped => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The machine-readable `code`.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidApiKey => "invalid_api_key",
            ApiError::NoRoute { .. } => "not_found",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::InvalidJson => "invalid_json",
            ApiError::NulCharacter => "nul_character",
            ApiError::InvalidLimit(_) => "invalid_limit",
            ApiError::InvalidCursor(_) => "invalid_cursor",
            ApiError::Refused(refusal) => refusal.code(),
            ApiError::InvalidIdempotencyKey(_) => "invalid_idempotency_key",
            ApiError::BadPath(_) => "invalid_path",
            ApiError::MissingInput => "missing_input",
            ApiError::NoUserMessage => "no_user_message",
            ApiError::InvalidAuthor => "invalid_author",
            ApiError::MissingMessage => "missing_message",
            ApiError::SessionExists(_) => "session_exists",
            ApiError::SessionNotFound(_) => "session_not_found",
            ApiError::RunNotFound(_) => "run_not_found",
            ApiError::IdempotencyConflict => "idempotency_key_conflict",
            ApiError::TurnFailed(_) => "turn_failed",
            ApiError::TurnStopped => "turn_stopped",
            ApiError::Store(e) if e.is_outage() => "store_unavailable",
            ApiError::Abandoned | ApiError::Store(_) => "internal_error",
        }
    }

    /// The status and the body.
    pub fn answer(&self) -> (StatusCode, Value) {
        let status = self.status();
        let kind = if status.is_server_error() {
            "server_error"
        } else {
            "invalid_request_error"
        };
        let body =
            json!({"error": {"message": self.to_string(), "type": kind, "code": self.code()}});
        (status, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_openai_style_with_the_type_by_blame() {
        assert_eq!(
            ApiError::RunNotFound("run_x".into()).answer(),
            (
                StatusCode::NOT_FOUND,
                json!({"error": {"message": "Run not found: run_x", "type": "invalid_request_error", "code": "run_not_found"}})
            )
        );
        assert_eq!(
            ApiError::TurnStopped.answer(),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": {"message": "The turn was stopped.", "type": "server_error", "code": "turn_stopped"}})
            )
        );
        let (status, body) = ApiError::TurnFailed("boom".into()).answer();
        assert_eq!(
            (status.as_u16(), &body["error"]["type"]),
            (500, &json!("server_error"))
        );
        assert_eq!(ApiError::InvalidApiKey.status(), StatusCode::UNAUTHORIZED);
    }
}
