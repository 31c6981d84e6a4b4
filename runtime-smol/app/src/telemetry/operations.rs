//! Operations and tool-gateway calls as the logs and metrics see them: an operation's
//! opening and its end (op_id, reason, duration, states), every change at `debug`, and every
//! failed tool-gateway call (route, status or transport error, retried or not), at most one
//! line per operation every [`FAILURE_LOG_EVERY`] with the rest counted.

use super::metrics::{ENDED_FAILED, ENDED_LINKS, metrics};
use connop_blocking::{EventSink, ToolContext};
use connop_core::flow::Event;
use connop_core::operation::Text;
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::{
    AsyncToolGateway, GatewayCall, GatewayError, GatewayFuture, GatewayReply, GatewayRoute,
};
use connop_core::wire::{failure_status, outcome_label};
use connop_smol::driver::run_to_end;
use serde_json::Value;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// An operation logs at most one failed tool-gateway call this often; the calls in between
/// are counted and the count rides the next line (and the operation's last line).
pub const FAILURE_LOG_EVERY: Duration = Duration::from_secs(10);

/// Runs one `manage_connections` tool call as [`connop_smol::driver::manage_connections`] does,
/// with its operation logged and counted, and its tool-gateway calls observed.
pub async fn manage_connections(
    args: &Value,
    context: &ToolContext<dyn AsyncToolGateway>,
) -> ToolResult {
    let mut context = context.clone();
    let started = Instant::now();
    context.events = context.events.take().map(logged_events);
    let op = context.start(args, None);
    let Some(op_id) = op.op_id() else {
        // A status call or refused arguments: no operation to follow.
        return run_to_end(&op, &context.gateway).await;
    };
    let opened = op.view();
    let targets = opened
        .as_ref()
        .map(|view| join(view.targets.iter().map(|t| t.name.to_string())))
        .unwrap_or_default();
    tracing::info!(
        target: "connop::operation",
        op_id = %op_id,
        session_key = %context.session_key,
        surface = ?context.surface,
        targets,
        "operation opened",
    );
    metrics().operations_open.inc();
    let observed = Arc::new(ObservedToolGateway::new(
        context.gateway.clone(),
        op_id.to_string(),
    ));
    let gateway: Arc<dyn AsyncToolGateway> = observed.clone();
    let result = run_to_end(&op, &gateway).await;
    let took = started.elapsed();
    let duration_ms = took.as_millis() as u64;
    let suppressed = observed.suppressed_total();
    let view = op.view();
    let states = view
        .as_ref()
        .map(|view| {
            join(
                view.targets
                    .iter()
                    .map(|t| format!("{}={}", t.name, t.state)),
            )
        })
        .unwrap_or_default();
    match (view.as_ref().and_then(|v| v.settled_by), &result) {
        (Some(reason), _) => {
            tracing::info!(
                target: "connop::operation",
                op_id = %op_id,
                reason = reason.as_str(),
                duration_ms,
                states,
                suppressed_failures = suppressed,
                "operation settled",
            );
            metrics().operation_ended(reason.as_str());
        }
        (None, ToolResult::Error(error)) => {
            tracing::warn!(
                target: "connop::operation",
                op_id = %op_id,
                duration_ms,
                states,
                error = error.as_str(),
                suppressed_failures = suppressed,
                "operation closed without settling",
            );
            metrics().operation_ended(ENDED_FAILED);
        }
        (None, _) => {
            tracing::info!(
                target: "connop::operation",
                op_id = %op_id,
                duration_ms,
                states,
                "operation returned its links",
            );
            metrics().operation_ended(ENDED_LINKS);
        }
    }
    result
}

fn join(items: impl Iterator<Item = String>) -> String {
    let mut text = String::new();
    for (i, item) in items.enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&item);
    }
    text
}

/// The card and every update frame at `debug`, then on to the session's own sink.
fn logged_events(sink: EventSink) -> EventSink {
    Arc::new(move |event: &Event| {
        match event {
            Event::Request(card) => {
                tracing::debug!(target: "connop::operation", op_id = %card.op_id, "card shown");
            }
            Event::Update(frame) => match &frame.change {
                Some(change) => tracing::debug!(
                    target: "connop::operation",
                    op_id = %frame.view.op_id,
                    seq = frame.view.seq,
                    target = %change.target,
                    from = change.from.as_str(),
                    to = change.to.as_str(),
                    actor = change.actor.as_str(),
                    "target moved",
                ),
                None => tracing::debug!(
                    target: "connop::operation",
                    op_id = %frame.view.op_id,
                    seq = frame.view.seq,
                    "settle frame",
                ),
            },
            _ => {}
        }
        sink(event);
    })
}

/// Counts and times every call through it, and logs the failed ones (rate-limited).
pub struct ObservedToolGateway {
    inner: Arc<dyn AsyncToolGateway>,
    /// Shared with the futures of calls still running.
    log: Arc<CallLog>,
}

/// What an [`ObservedToolGateway`] logs under, and what it held back.
struct CallLog {
    /// Whose calls these are: an op id, or the name of what calls outside an operation.
    scope: String,
    failures: Mutex<FailureLog>,
}

#[derive(Default)]
struct FailureLog {
    last: Option<Instant>,
    /// Failures not logged since the last line.
    suppressed: u64,
    /// Failures not logged at all.
    suppressed_total: u64,
}

impl ObservedToolGateway {
    /// Observes `inner`'s calls on behalf of `scope` (an op id, `connectors.list`, …).
    pub fn new(inner: Arc<dyn AsyncToolGateway>, scope: impl Into<String>) -> Self {
        ObservedToolGateway {
            inner,
            log: Arc::new(CallLog {
                scope: scope.into(),
                failures: Mutex::default(),
            }),
        }
    }

    /// How many failures were counted and not logged, in all.
    pub fn suppressed_total(&self) -> u64 {
        self.log.failures().suppressed_total
    }
}

impl CallLog {
    fn failures(&self) -> std::sync::MutexGuard<'_, FailureLog> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn observe(&self, call: &Called, result: &Result<GatewayReply, GatewayError>, took: Duration) {
        metrics().tool_gateway_call(call.route.name(), outcome_label(result), took);
        let took_ms = took.as_millis() as u64;
        let error = match result {
            Ok(_) => {
                tracing::debug!(
                    target: "connop::tool_gateway",
                    scope = %self.scope,
                    route = call.route.endpoint(),
                    took_ms,
                    "tool-gateway call answered",
                );
                return;
            }
            Err(error) => error,
        };
        // The one line allowed now, with the count of those held back before it.
        let suppressed = {
            let mut log = self.failures();
            let now = Instant::now();
            if log
                .last
                .is_some_and(|last| now.duration_since(last) < FAILURE_LOG_EVERY)
            {
                log.suppressed += 1;
                log.suppressed_total += 1;
                return;
            }
            log.last = Some(now);
            std::mem::take(&mut log.suppressed)
        };
        let connection_id = call.connection_id.as_deref();
        // The exchange gives ≥ 500 and transport failures one retry, never the mint's: a
        // retryable error that came back was the retry's too. (The error does not say whether
        // an account read timed out, which is not retried: it is counted as one that failed
        // early.)
        let retried = error.is_retryable() && call.route.retries(false);
        match error {
            GatewayError::RateLimited { retry_after } => {
                tracing::warn!(
                    target: "connop::tool_gateway",
                    scope = %self.scope,
                    route = call.route.endpoint(),
                    connection_id,
                    status = 429,
                    retry_after_s = retry_after.as_secs_f64(),
                    suppressed,
                    "tool gateway is rate limiting: backing off",
                )
            }
            _ => tracing::warn!(
                target: "connop::tool_gateway",
                scope = %self.scope,
                route = call.route.endpoint(),
                connection_id,
                status = failure_status(error),
                error = %error,
                retried,
                took_ms,
                suppressed,
                "tool-gateway call failed",
            ),
        }
    }
}

impl AsyncToolGateway for ObservedToolGateway {
    fn call(&self, call: GatewayCall) -> GatewayFuture {
        let started = Instant::now();
        let seen = Called::of(&call);
        match self.inner.call(call) {
            // An in-process gateway's answer stays ready: no future is made for it.
            GatewayFuture::Ready(Some(result)) => {
                self.log.observe(&seen, &result, started.elapsed());
                GatewayFuture::ready(result)
            }
            answer => {
                let log = self.log.clone();
                GatewayFuture::pending(async move {
                    let result = answer.await;
                    log.observe(&seen, &result, started.elapsed());
                    result
                })
            }
        }
    }
}

/// What the logs and metrics need of a call, kept while it runs.
struct Called {
    route: GatewayRoute,
    connection_id: Option<Text>,
}

impl Called {
    fn of(call: &GatewayCall) -> Self {
        Called {
            route: call.route(),
            connection_id: match call {
                GatewayCall::Account { connection_id, .. } => Some(connection_id.clone()),
                _ => None,
            },
        }
    }
}
