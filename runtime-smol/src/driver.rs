//! The smol runtime: one operation as a future. Gateway calls run concurrently inside that
//! future (no task per call); the timer is one `async_io::Timer`, re-armed from each
//! [`OpHandle::step`]; any input from another thread or task wakes it through the waker the
//! step registered (no allocation per wait).

use connop_blocking::{Answer, DriverCall, Next, OpHandle, ResultForm, ToolContext};
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::{AsyncToolGateway, BoxFuture, CallId, GatewayError, GatewayReply};
use futures_lite::future::poll_fn;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

type CallFuture = BoxFuture<'static, Result<GatewayReply, GatewayError>>;

/// Drives an operation until its tool call returns, and returns the result. Its gateway
/// calls (those the driver starts) go to `gateway`, each as a future polled inside this one.
pub async fn run_to_end(op: &OpHandle, gateway: &Arc<dyn AsyncToolGateway>) -> ToolResult {
    let mut in_flight: Vec<(CallId, CallFuture)> = Vec::new();
    let mut answers: Vec<Answer> = Vec::new();
    let mut calls: Vec<DriverCall> = Vec::new();
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
            match op.step(&mut answers, &mut calls, cx.waker()) {
                Next::Finished => return Poll::Ready(()),
                Next::Sleep(at) => {
                    if !calls.is_empty() {
                        for (id, call) in calls.drain(..) {
                            let gateway = gateway.clone();
                            let future: CallFuture =
                                Box::pin(async move { gateway.call(&call).await });
                            in_flight.push((id, future));
                        }
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
    // Kept typed: one interrupt may settle thousands of operations before their tasks run,
    // and their results should not all be held as JSON at once.
    let op = context.start(args, None, ResultForm::Typed);
    run_to_end(&op, &context.gateway).await
}
