//! What the world is told to answer instead of its own state: forced mint answers, scripted
//! account reads and the faults queued per route.

use super::http::SimResponse;
use connop_core::tool_gateway::{AccountStatus, GatewayRoute, MintStatus};
use serde_json::{Map, Value};
use std::collections::VecDeque;
use std::time::Duration;

/// A mint answer `/sim/state`'s `mint` forces for one connector.
#[derive(Clone, Debug)]
pub(super) struct ForcedMint {
    pub(super) status: MintStatus,
    pub(super) status_reason: Option<String>,
    /// Whether the row carries a `connectionId`; `None`: as the world's `connectionIds` says.
    pub(super) connection_id: Option<bool>,
}

/// One answer of a connector's read script.
#[derive(Clone, Debug)]
pub(super) enum ScriptedRead {
    /// This status (and reason) instead of the account's own.
    Status(AccountStatus, Option<String>),
    /// An HTTP failure instead of any account.
    Http(HttpFailure),
}

/// An answer other than the route's own: a status, a verbatim body, a `Retry-After`.
#[derive(Clone, Debug)]
pub(super) struct HttpFailure {
    pub(super) status: Option<u16>,
    pub(super) retry_after_ms: Option<u64>,
    pub(super) body: Option<String>,
}

/// One queued fault: what the next `remaining` requests on its route get.
#[derive(Clone, Debug)]
pub(super) struct Fault {
    pub(super) failure: HttpFailure,
    pub(super) delay: Duration,
    pub(super) reset: bool,
    pub(super) remaining: usize,
}

/// The faults queued on each route (in [`GatewayRoute::ALL`]'s order), used in the order
/// queued.
#[derive(Debug, Default)]
pub(super) struct FaultQueues([VecDeque<Fault>; 3]);

impl FaultQueues {
    /// Queues a fault after those already queued on its route; one for no request is dropped.
    pub(super) fn push(&mut self, route: GatewayRoute, fault: Fault) {
        if fault.remaining > 0 {
            self.0[route as usize].push_back(fault);
        }
    }

    /// The fault the next request on `route` gets, if one is queued; counts it used.
    pub(super) fn take(&mut self, route: GatewayRoute) -> Option<Fault> {
        let queue = &mut self.0[route as usize];
        let front = queue.front_mut()?;
        front.remaining -= 1;
        let fault = front.clone();
        if front.remaining == 0 {
            queue.pop_front();
        }
        Some(fault)
    }
}

/// The answer a failure gives instead of the route's own: its body verbatim, or a JSON
/// `{"error"}` named after the status.
pub(super) fn failure_response(route: GatewayRoute, failure: &HttpFailure) -> SimResponse {
    let status = failure.status.unwrap_or(200);
    let mut response = match &failure.body {
        Some(body) => SimResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.clone(),
            delay: Duration::ZERO,
            reset: false,
        },
        None => {
            let mut body = Map::new();
            let error = match status {
                401 => "unauthorized",
                403 => "forbidden",
                404 if route == GatewayRoute::Account => "connection_not_found",
                404 => "not_found",
                429 => "rate_limited",
                500.. => "internal_error",
                _ => "simulated_fault",
            };
            body.insert("error".into(), error.into());
            if let (429, Some(ms)) = (status, failure.retry_after_ms) {
                body.insert("retryAfterMs".into(), ms.into());
            }
            SimResponse::json(status, &Value::Object(body))
        }
    };
    if let (429, Some(ms)) = (status, failure.retry_after_ms) {
        // Retry-After is whole seconds: round up so a client never retries early.
        response
            .headers
            .push(("retry-after".into(), ms.div_ceil(1000).to_string()));
    }
    response
}
