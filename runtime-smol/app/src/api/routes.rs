//! From a request to its handler, in this order: the listener's [`Guard`] (its `Host`, and
//! for a write its JSON body type and `Origin`); `/health`, open to all; a body declared over
//! its cap (413, before the key is looked at); the API key, checked in constant time; the
//! body, read up to its cap and within the read timeout; the path's segments percent-decoded
//! and matched. Every answer is JSON but the event stream and `/metrics`.
//!
//! [`Guard`]: crate::net::guard::Guard

use super::error::ApiError;
use super::input::{body_holds_nul, storable};
use super::runs::to_the_end;
use super::server::{Api, Streaming};
use crate::net::guard::{self, Accepts};
use crate::telemetry;
use connop_core::run::idempotency_key;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;

/// A response body: one JSON value, or an event stream.
pub type Body = BoxBody<Bytes, Infallible>;

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

/// The answer to an error: its JSON, `Allow` for a 405, and `Connection: close` when part of
/// the body was never read.
fn error_response(error: &ApiError) -> Response<Body> {
    let (status, body) = error.answer();
    let mut response = full(status, &body);
    let headers = response.headers_mut();
    match error {
        ApiError::MethodNotAllowed { allow, .. } => {
            headers.insert(
                hyper::header::ALLOW,
                hyper::header::HeaderValue::from_static(allow),
            );
        }
        ApiError::Refused(refusal) if refusal.closes() => {
            headers.insert(
                hyper::header::CONNECTION,
                hyper::header::HeaderValue::from_static("close"),
            );
        }
        // The store is checked again every second.
        _ if status == StatusCode::SERVICE_UNAVAILABLE => {
            headers.insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static("1"),
            );
        }
        _ => {}
    }
    response
}

impl Api {
    /// Answers one request in-process, as a connection of the listener would, guard first (no
    /// socket: the fuzz targets call this). An event stream's body is what the caller reads of
    /// it.
    pub async fn answer<B>(self: &Arc<Self>, request: hyper::Request<B>) -> hyper::Response<Body>
    where
        B: hyper::body::Body<Data = hyper::body::Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let streaming = Streaming::default();
        self.clone().respond(request, &streaming).await
    }

    /// Answers one request of a connection (and of [`Api::answer`], with no socket);
    /// `streaming` holds the connection's event stream, if any.
    pub(super) async fn respond<B>(
        self: Arc<Self>,
        request: Request<B>,
        streaming: &Streaming,
    ) -> Response<Body>
    where
        B: hyper::body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = request.into_parts();
        let admitted = self
            .guard
            .admit(&parts.method, &parts.uri, &parts.headers, Accepts::Json);
        if let Err(refusal) = admitted {
            return error_response(&refusal.into());
        }
        let path = parts.uri.path().trim_end_matches('/').to_owned();
        if path == "/health" {
            return full(StatusCode::OK, &json!({"status": "ok"}));
        }
        if let Err(refusal) = guard::declared_within(&parts.headers, self.max_body) {
            return error_response(&refusal.into());
        }
        if let Some(key) = &self.api_key {
            if !bearer_matches(parts.headers.get(hyper::header::AUTHORIZATION), key) {
                return error_response(&ApiError::InvalidApiKey);
            }
        }
        let answer = match guard::read_body(&parts.headers, body, self.max_body).await {
            Ok(body) => self.route(&parts, &path, &body, streaming).await,
            Err(refusal) => Err(refusal.into()),
        };
        match answer {
            Ok(Reply::Json(status, body)) => full(status, &body),
            Ok(Reply::Raw(response)) => response,
            Err(error) => error_response(&error),
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
        // No text the API stores may hold a NUL, wherever it comes from: refused before
        // anything is read or stored, the same on both stores.
        if !segments.iter().all(|s| storable(s)) || body_holds_nul(body) {
            return Err(ApiError::NulCharacter);
        }
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let answer = match (&parts.method, segments.as_slice()) {
            (&Method::POST, ["v1", "runs"]) => {
                // Checked, not skipped: a key read as none would run a repeated request twice.
                let idempotency_key = match parts.headers.get("idempotency-key") {
                    Some(raw) => Some(idempotency_key(raw.as_bytes())?.to_owned()),
                    None => None,
                };
                let work = self.clone().create_run(body.to_vec(), idempotency_key);
                to_the_end(work).await
            }
            (&Method::GET, ["v1", "runs", id]) => self.get_run(id).await,
            (&Method::POST, ["v1", "runs", id, "stop"]) => {
                to_the_end(self.clone().stop_run((*id).to_owned())).await
            }
            (&Method::GET, ["v1", "runs", id, "events"]) => {
                return Ok(Reply::Raw(self.events(id, streaming).await));
            }
            (&Method::GET, ["api", "sessions"]) => self.list_sessions(parts.uri.query()).await,
            (&Method::POST, ["api", "sessions"]) => self.create_session(body).await,
            (&Method::POST, ["api", "sessions", id, "chat"]) => self.chat(id, body).await,
            (&Method::GET, ["metrics"]) => return Ok(Reply::Raw(metrics_text())),
            (method, route) => {
                let (method, path) = (method.to_string(), path.to_owned());
                return Err(match allowed(route) {
                    Some(allow) => ApiError::MethodNotAllowed {
                        method,
                        path,
                        allow,
                    },
                    None => ApiError::NoRoute { method, path },
                });
            }
        };
        let (status, body) = answer?;
        Ok(Reply::Json(status, body))
    }
}

/// The methods a route serves, for a request that asked it with another (405 and `Allow`).
fn allowed(route: &[&str]) -> Option<&'static str> {
    match route {
        ["v1", "runs"] | ["v1", "runs", _, "stop"] | ["api", "sessions", _, "chat"] => Some("POST"),
        ["v1", "runs", _] | ["v1", "runs", _, "events"] | ["metrics"] => Some("GET"),
        ["api", "sessions"] => Some("GET, POST"),
        _ => None,
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
    fn a_served_path_asked_with_another_method_names_the_methods_it_takes() {
        assert_eq!(allowed(&["v1", "runs"]), Some("POST"));
        assert_eq!(allowed(&["v1", "runs", "run_1"]), Some("GET"));
        assert_eq!(allowed(&["v1", "runs", "run_1", "events"]), Some("GET"));
        assert_eq!(allowed(&["v1", "runs", "run_1", "stop"]), Some("POST"));
        assert_eq!(allowed(&["api", "sessions"]), Some("GET, POST"));
        assert_eq!(allowed(&["api", "sessions", "s", "chat"]), Some("POST"));
        assert_eq!(allowed(&["metrics"]), Some("GET"));
        assert_eq!(allowed(&["v1", "nothing"]), None);
    }

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
