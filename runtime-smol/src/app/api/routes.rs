//! From a request to its handler: `/health` open to all, the API key checked on every other
//! route, the body read, the path matched; every answer JSON but the event stream.

use super::error::ApiError;
use super::runs::to_the_end;
use super::{Api, Streaming};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
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
            let given = parts
                .headers
                .get(hyper::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok());
            if given != Some(&format!("Bearer {key}")) {
                let (status, body) = ApiError::InvalidApiKey.answer();
                return full(status, &body);
            }
        }
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let segments: Vec<&str> = path.split('/').skip(1).collect();
        let idempotency_key = parts
            .headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let answer = match (&parts.method, segments.as_slice()) {
            (&Method::POST, ["v1", "runs"]) => {
                let work = self.clone().create_run(body.to_vec(), idempotency_key);
                to_the_end(work).await
            }
            (&Method::GET, ["v1", "runs", id]) => self.get_run(id).await,
            (&Method::POST, ["v1", "runs", id, "stop"]) => {
                to_the_end(self.clone().stop_run((*id).to_owned())).await
            }
            (&Method::GET, ["v1", "runs", id, "events"]) => {
                return self.events(id, streaming).await;
            }
            (&Method::GET, ["api", "sessions"]) => self.list_sessions().await,
            (&Method::POST, ["api", "sessions"]) => self.create_session(&body).await,
            (&Method::POST, ["api", "sessions", id, "chat"]) => self.chat(id, &body).await,
            _ => Err(ApiError::NoRoute {
                method: parts.method.to_string(),
                path: path.clone(),
            }),
        };
        let (status, body) = answer.unwrap_or_else(|e| e.answer());
        full(status, &body)
    }
}
