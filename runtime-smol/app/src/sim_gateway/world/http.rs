//! One request and one answer as plain data: what the HTTP layer hands the world and sends
//! back, and how a request is kept in the log.

use crate::net::guard::Refusal;
use crate::sim_gateway::consent;
use serde_json::{Map, Value, json};
use std::time::Duration;

/// How much of a request's body the log keeps.
pub const LOG_BODY_LIMIT: usize = 4096;

/// One HTTP request as the world sees it (and as `GET /sim/log` reports it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The raw query string without `?`; empty when there is none.
    pub query: String,
    /// Headers in arrival order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body as text (lossy UTF-8).
    pub body: String,
}

impl SimRequest {
    /// A request with no headers and no body; `target` may carry a `?query`.
    pub fn new(method: &str, target: &str) -> Self {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        SimRequest {
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            headers: Vec::new(),
            body: String::new(),
        }
    }

    /// Adds a header (the name is lower-cased).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_owned()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = body.into();
        self
    }

    /// The request as the log keeps it: the `Authorization` value redacted, the body cut at
    /// [`LOG_BODY_LIMIT`] bytes (on a character boundary).
    pub(super) fn for_log(&self) -> SimRequest {
        let headers = self
            .headers
            .iter()
            .map(|(name, value)| {
                if name.eq_ignore_ascii_case("authorization") {
                    (name.clone(), "[redacted]".to_owned())
                } else {
                    (name.clone(), value.clone())
                }
            })
            .collect();
        let mut end = self.body.len().min(LOG_BODY_LIMIT);
        while !self.body.is_char_boundary(end) {
            end -= 1;
        }
        SimRequest {
            method: self.method.clone(),
            path: self.path.clone(),
            query: self.query.clone(),
            headers,
            body: self.body[..end].to_owned(),
        }
    }

    /// The first value of a header, by case-insensitive name.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The log entry: `{"method", "path", "query", "headers", "body"}`; headers are an object
    /// of lower-cased names (repeated names joined with `, `).
    pub fn to_json(&self) -> Value {
        let mut headers = Map::new();
        for (name, value) in &self.headers {
            let name = name.to_ascii_lowercase();
            match headers.get_mut(&name) {
                Some(Value::String(prev)) => {
                    prev.push_str(", ");
                    prev.push_str(value);
                }
                _ => {
                    headers.insert(name, Value::String(value.clone()));
                }
            }
        }
        json!({
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": headers,
            "body": self.body,
        })
    }
}

/// One answer of the world: what the HTTP layer sends after waiting `delay`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimResponse {
    /// The HTTP status.
    pub status: u16,
    /// Extra headers (`content-type` included), lower-cased names.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
    /// How long to wait before answering (a queued fault's `delay_ms`).
    pub delay: Duration,
    /// Close the connection after `delay` without answering (a queued fault's `reset`); the
    /// status, headers and body are then never sent.
    pub reset: bool,
}

impl SimResponse {
    /// The answer to a request the listener refused before the world saw it: a page on the
    /// consent routes (a person's browser shows it), `{"error", "detail"}` elsewhere.
    pub fn refused(path: &str, refusal: &Refusal) -> Self {
        let status = refusal.status().as_u16();
        let mut response = if path.starts_with("/connect/") {
            let title = match refusal {
                Refusal::Host { .. } | Refusal::NoHost { .. } => "Wrong address",
                Refusal::Origin { .. } => "Not allowed from another site",
                Refusal::ContentType { .. } => "Not a consent form",
                Refusal::TooLarge { .. } => "Too large",
                Refusal::Timeout => "Too slow",
            };
            Self::html(status, consent::message_page(title, &refusal.to_string()))
        } else {
            Self::json(
                status,
                &json!({"error": refusal.code(), "detail": refusal.to_string()}),
            )
        };
        if refusal.closes() {
            response.headers.push(("connection".into(), "close".into()));
        }
        response
    }

    pub(super) fn json(status: u16, body: &Value) -> Self {
        SimResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string(),
            delay: Duration::ZERO,
            reset: false,
        }
    }

    /// A page for the person's browser. No other page may frame it: a consent page shown
    /// inside someone else's page could have its Approve clicked through.
    pub(super) fn html(status: u16, body: String) -> Self {
        SimResponse {
            status,
            headers: vec![
                ("content-type".into(), "text/html; charset=utf-8".into()),
                ("x-frame-options".into(), "DENY".into()),
                (
                    "content-security-policy".into(),
                    "frame-ancestors 'none'".into(),
                ),
            ],
            body,
            delay: Duration::ZERO,
            reset: false,
        }
    }

    pub(super) fn error(status: u16, error: &str) -> Self {
        Self::json(status, &json!({ "error": error }))
    }

    pub(super) fn bad_request(detail: &str) -> Self {
        Self::json(400, &json!({ "error": "bad_request", "detail": detail }))
    }

    pub(super) fn ok() -> Self {
        Self::json(200, &json!({ "ok": true }))
    }

    /// The body parsed as JSON (`Value::Null` when it does not parse).
    pub fn json_body(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// The first value of a header, by case-insensitive name.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Whether an `Authorization` header value carries the gateway's token: always when it has
/// none.
pub(in crate::sim_gateway) fn authorized(token: Option<&str>, authorization: Option<&str>) -> bool {
    match token {
        None => true,
        Some(token) => authorization
            .and_then(|value| value.strip_prefix("Bearer "))
            .is_some_and(|given| given == token),
    }
}
