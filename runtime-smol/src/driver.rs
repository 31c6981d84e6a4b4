//! The smol runtime: one operation as a future. Gateway calls run concurrently inside that
//! future (no task per call); the timer is one `async_io::Timer`, re-armed from each
//! [`OpHandle::step`]; any input from another thread or task wakes it through the waker the
//! step registered (no allocation per wait).

use connop_blocking::{Answer, CallStarter, Next, OpHandle, ResultForm, ToolContext};
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::{
    AsyncToolGateway, BoxFuture, CallId, GatewayCall, GatewayError, GatewayReply,
};
use futures_lite::future::poll_fn;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Instant;

type CallFuture = BoxFuture<'static, Result<GatewayReply, GatewayError>>;

/// Hands an operation's gateway calls to its driver future.
pub struct SmolCalls {
    gateway: Arc<dyn AsyncToolGateway>,
    queue: Mutex<Vec<(CallId, GatewayCall)>>,
}

impl SmolCalls {
    /// Calls through `gateway`.
    pub fn new(gateway: Arc<dyn AsyncToolGateway>) -> Self {
        SmolCalls {
            gateway,
            queue: Mutex::new(Vec::new()),
        }
    }

    /// Starts every queued call as a future owned by the driver; whether there was any.
    fn start_queued(&self, in_flight: &mut Vec<(CallId, CallFuture)>) -> bool {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let started = !queue.is_empty();
        for (id, call) in queue.drain(..) {
            let gateway = self.gateway.clone();
            let future: CallFuture = Box::pin(async move { gateway.call(&call).await });
            in_flight.push((id, future));
        }
        started
    }
}

impl CallStarter for SmolCalls {
    fn start(&self, _op: &OpHandle, id: CallId, call: GatewayCall) {
        // The pump that runs this wakes the driver when it ends, or is the driver's own step.
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, call));
    }
}

/// Drives an operation until its tool call returns, and returns the result.
pub async fn run_to_end(op: &OpHandle, calls: &SmolCalls) -> ToolResult {
    let mut in_flight: Vec<(CallId, CallFuture)> = Vec::new();
    let mut answers: Vec<Answer> = Vec::new();
    let mut timer = async_io::Timer::never();
    let mut armed: Option<Instant> = None;
    poll_fn(|cx| {
        loop {
            in_flight.retain_mut(|(id, call)| match call.as_mut().poll(cx) {
                Poll::Ready(answer) => {
                    answers.push((*id, answer));
                    false
                }
                Poll::Pending => true,
            });
            match op.step(&mut answers, cx.waker()) {
                Next::Finished => return Poll::Ready(()),
                Next::Sleep(at) => {
                    if calls.start_queued(&mut in_flight) {
                        continue;
                    }
                    if at != armed {
                        match at {
                            Some(at) => timer.set_at(at),
                            None => timer = async_io::Timer::never(),
                        }
                        armed = at;
                    }
                    if Pin::new(&mut timer).poll(cx).is_ready() {
                        armed = None;
                        continue;
                    }
                    return Poll::Pending;
                }
            }
        }
    })
    .await;
    op.result()
        .unwrap_or_else(|| ToolResult::Error("the operation ended without a result".into()))
}

/// Runs one `manage_connections` tool call as a future and returns its result as JSON. On
/// the card path it completes when the operation settles; other threads and tasks reach it
/// through the registry's [`OpHandle`] or the context's interrupt handle.
pub async fn manage_connections(
    args: &Value,
    context: &ToolContext<dyn AsyncToolGateway>,
) -> Value {
    run_tool_call(args, context).await.to_value()
}

/// [`manage_connections`], returning the typed result.
pub async fn run_tool_call(
    args: &Value,
    context: &ToolContext<dyn AsyncToolGateway>,
) -> ToolResult {
    let calls = Arc::new(SmolCalls::new(context.gateway.clone()));
    // Kept typed: one interrupt may settle thousands of operations before their tasks run,
    // and their results should not all be held as JSON at once.
    let op = context.start(args, calls.clone(), ResultForm::Typed);
    run_to_end(&op, &calls).await
}
