//! The smol runtime: one operation as a future. Gateway calls run concurrently inside that
//! future (no task per call); its next wake-up is filed with the coalesced timers (one wake
//! for every operation due in the same slot); any input from another thread or task wakes it
//! through the waker [`OpHandle::step`] registered (no allocation per wait).

use connop_blocking::{CallAnswer, CallsStarted, DriverCall, Next, OpHandle, ToolContext};
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::{AsyncToolGateway, CallId, GatewayFuture};
use futures_lite::future::poll_fn;
use serde_json::Value;
use std::cell::RefCell;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Drives an operation until its tool call returns, and returns the result. Its gateway
/// calls (those the driver starts) go to `gateway`, each as a future polled inside this one.
pub async fn run_to_end(op: &OpHandle, gateway: &Arc<dyn AsyncToolGateway>) -> ToolResult {
    drive(op, gateway).await;
    op.finished_result()
}

thread_local! {
    /// The answers and calls a driver's poll passes around, shared by every operation the
    /// thread drives: a poll starts them empty and leaves them empty unless its operation
    /// finished, so one pair, warm in the cache, serves them all; a pair per operation would be
    /// two more cache lines for a parked operation's tick to load from cold memory.
    static SCRATCH: RefCell<(Vec<CallAnswer>, Vec<DriverCall>)> =
        const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The driver's loop: steps the operation until it finished.
async fn drive(op: &OpHandle, gateway: &Arc<dyn AsyncToolGateway>) {
    let mut in_flight: Vec<(CallId, GatewayFuture)> = Vec::new();
    // The wake-up filed with the timers, taken back when this ends.
    let mut alarm = crate::timers::Alarm::new();
    poll_fn(|cx| {
        crate::timers::relay();
        SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut scratch) => {
                let (answers, calls) = &mut *scratch;
                // Left over only by an operation that finished (calls it no longer awaits)
                // or a poll that panicked half-way: never for this operation.
                answers.clear();
                calls.clear();
                poll_step(op, gateway, cx, &mut in_flight, answers, calls, &mut alarm)
            }
            // A driver polled from inside another's poll (a gateway future that blocks on
            // an executor): buffers of its own.
            Err(_) => poll_step(
                op,
                gateway,
                cx,
                &mut in_flight,
                &mut Vec::new(),
                &mut Vec::new(),
                &mut alarm,
            ),
        })
    })
    .await;
}

/// One poll of [`drive`]: steps until the operation finished or sleeps. Returns with
/// `answers` and `calls` empty unless it finished.
fn poll_step(
    op: &OpHandle,
    gateway: &Arc<dyn AsyncToolGateway>,
    cx: &mut Context<'_>,
    in_flight: &mut Vec<(CallId, GatewayFuture)>,
    answers: &mut Vec<CallAnswer>,
    calls: &mut Vec<DriverCall>,
    alarm: &mut crate::timers::Alarm,
) -> Poll<()> {
    if !in_flight.is_empty() {
        in_flight.retain_mut(|(id, call)| match Pin::new(call).poll(cx) {
            Poll::Ready(answer) => {
                answers.push((*id, answer));
                false
            }
            Poll::Pending => true,
        });
    }
    let waker = cx.waker();
    let mut start = |calls: &mut Vec<DriverCall>, answers: &mut Vec<CallAnswer>| {
        start_calls(
            gateway,
            &mut Context::from_waker(waker),
            calls,
            answers,
            in_flight,
        )
    };
    match op.step(answers, calls, &mut start, waker) {
        Next::Finished => Poll::Ready(()),
        Next::Sleep(at) => {
            if let Some(at) = at {
                // Already past (the step just fired what was due at its own now): the
                // timers wake us at once.
                alarm.wake_at(at, waker);
            }
            Poll::Pending
        }
    }
}

/// Starts `calls`, each polled once: an answer known at once joins `answers`, the others
/// `in_flight` (their wakers registered).
fn start_calls(
    gateway: &Arc<dyn AsyncToolGateway>,
    cx: &mut Context<'_>,
    calls: &mut Vec<DriverCall>,
    answers: &mut Vec<CallAnswer>,
    in_flight: &mut Vec<(CallId, GatewayFuture)>,
) -> CallsStarted {
    for (id, call) in calls.drain(..) {
        match gateway.call(call) {
            GatewayFuture::Ready(Some(answer)) => answers.push((id, answer)),
            mut pending => match Pin::new(&mut pending).poll(cx) {
                Poll::Ready(answer) => answers.push((id, answer)),
                Poll::Pending => in_flight.push((id, pending)),
            },
        }
    }
    CallsStarted::AtOnce
}

/// Runs one `manage_connections` tool call as a future and returns its result. On the card
/// path it completes when the operation settles; other threads and tasks reach it through
/// the registry's [`OpHandle`] or the context's interrupt handle.
///
/// The result comes back typed, as the core froze it: the host serializes it as it needs
/// ([`ToolResult::to_json`] for text, [`ToolResult::to_value`] for a value), after it has
/// it: a `serde_json::Value` built here, a map and a string per key, would cost an executor
/// just woken about as much again as the wake-up, in memory gone cold.
pub async fn manage_connections(
    args: &Value,
    context: &ToolContext<dyn AsyncToolGateway>,
) -> ToolResult {
    run_to_end(&context.start(args, None), &context.gateway).await
}
