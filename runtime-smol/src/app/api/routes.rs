//! From a request to its handler: `/health` open to all, the API key checked (in constant
//! time) on every other route, the body read up to its cap (413 past it), the path's
//! segments percent-decoded and matched; every answer JSON but the event stream and
//! `/metrics`.

use super::error::ApiError;
use super::{Api, Streaming};
use crate::app::telemetry;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited, combinators::BoxBody};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;

/// A response body: one JSON value, or an event stream.
pub(super) type Body = BoxBody<Bytes, Infallible>;

/// A JSON response.
pub(super) fn full(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The path's segments after the leading `/`, each percent-decoded (a session id may hold
/// spaces, `:`, `/` or any Unicode); `None` when a segment does not decode to UTF-8. A
/// trailing `/` is ignored.
pub(super) fn segments(path: &str) -> Option<Vec<String>> {
    let path = path.trim_end_matches('/');
    path.split('/')
        .skip(1)
        .map(|segment| {
            percent_encoding::percent_decode_str(segment)
                .decode_utf8()
                .ok()
                .map(|s| s.into_owned())
        })
        .collect()
}

/// Whether `header` is `Bearer <key>`, compared in constant time (what differs, and where,
/// takes no longer to find than what matches).
pub(super) fn bearer_matches(header: Option<&hyper::header::HeaderValue>, key: &str) -> bool {
    use subtle::ConstantTimeEq;
    let given = header
        .map(|v| v.as_bytes())
        .and_then(|v| v.strip_prefix(b"Bearer "))
        .unwrap_or_default();
    given.ct_eq(key.as_bytes()).into()
}

/// Reads a body of at most `limit` bytes: a larger one (by its `Content-Length`, or as it
/// arrives) is refused without reading further.
async fn read_body(
    headers: &hyper::HeaderMap,
    body: Incoming,
    limit: usize,
) -> Result<Bytes, ApiError> {
    let too_large = ApiError::BodyTooLarge { limit };
    let declared = headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large);
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<LengthLimitError>() => Err(too_large),
        // The client went away mid-body: what arrived is all there is.
        Err(_) => Ok(Bytes::new()),
    }
}

impl Api {
    pub(super) async fn respond(
        self: Arc<Self>,
        request: Request<Incoming>,
        streaming: &Streaming,
    ) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path().trim_end_matches('/').to_owned();
        if path == "/health" {
            return full(StatusCode::OK, &json!({"status": "ok"}));
        }
        if let Some(key) = &self.api_key {
            if !bearer_matches(parts.headers.get(hyper::header::AUTHORIZATION), key) {
                let (status, body) = ApiError::InvalidApiKey.answer();
                return full(status, &body);
            }
        }
        let answer = match read_body(&parts.headers, body, self.max_body).await {
            Ok(body) => self.route(&parts, &path, &body, streaming).await,
            Err(error) => Err(error),
        };
        match answer {
            Ok(Reply::Json(status, body)) => full(status, &body),
            Ok(Reply::Raw(response)) => response,
            Err(error) => {
                let (status, body) = error.answer();
                full(status, &body)
            }
        }
    }

    async fn route(
        self: &Arc<Self>,
        parts: &hyper::http::request::Parts,
        path: &str,
        body: &[u8],
        streaming: &Streaming,
    ) -> Result<Reply, ApiError> {
        let segments = segments(path).ok_or_else(|| ApiError::BadPath(path.to_owned()))?;
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let idempotency_key = parts
            .headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let (status, body) = match (&parts.method, segments.as_slice()) {
            (&Method::POST, ["v1", "runs"]) => self.create_run(body, idempotency_key)?,
            (&Method::GET, ["v1", "runs", id]) => self.get_run(id)?,
            (&Method::POST, ["v1", "runs", id, "stop"]) => self.stop_run(id)?,
            (&Method::GET, ["v1", "runs", id, "events"]) => {
                return Ok(Reply::Raw(self.events(id, streaming)));
            }
            (&Method::GET, ["api", "sessions"]) => self.list_sessions()?,
            (&Method::POST, ["api", "sessions"]) => self.create_session(body)?,
            (&Method::POST, ["api", "sessions", id, "chat"]) => self.chat(id, body).await?,
            (&Method::GET, ["metrics"]) => return Ok(Reply::Raw(metrics_text())),
            _ => {
                return Err(ApiError::NoRoute {
                    method: parts.method.to_string(),
                    path: path.to_owned(),
                });
            }
        };
        Ok(Reply::Json(status, body))
    }
}

/// What a route answers.
enum Reply {
    /// A status and a JSON body.
    Json(StatusCode, Value),
    /// A response of its own (the event stream, the metrics).
    Raw(Response<Body>),
}

/// `GET /metrics`: every metric in the Prometheus text format.
fn metrics_text() -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(telemetry::encode())).boxed());
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(telemetry::CONTENT_TYPE),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn path_segments_are_percent_decoded_after_the_split() {
        assert_eq!(
            segments("/api/sessions/a%20b%3Ac%2Fd%20%C3%A9/chat/"),
            Some(vec![
                "api".to_owned(),
                "sessions".to_owned(),
                "a b:c/d é".to_owned(),
                "chat".to_owned()
            ])
        );
        assert_eq!(
            segments("/v1/runs"),
            Some(vec!["v1".to_owned(), "runs".to_owned()])
        );
        assert_eq!(segments("/api/sessions/%FF/chat"), None, "not UTF-8");
    }

    #[test]
    fn only_the_exact_bearer_key_matches() {
        let header = |v: &'static str| Some(HeaderValue::from_static(v));
        assert!(bearer_matches(header("Bearer s3cret").as_ref(), "s3cret"));
        for wrong in [
            "Bearer s3cre",
            "Bearer s3cret2",
            "bearer s3cret",
            "s3cret",
            "Bearer ",
            "Basic s3cret",
        ] {
            assert!(!bearer_matches(header(wrong).as_ref(), "s3cret"), "{wrong}");
        }
        assert!(!bearer_matches(None, "s3cret"));
    }
}
