//! The smol runtime: one operation as a future. Gateway calls run concurrently inside that
//! future (no task per call), the timer is an `async_io::Timer` re-armed from the core's
//! next wake-up, and any change made from another thread or task wakes it.

use connop_blocking::{CallStarter, OpHandle, ToolContext};
use connop_core::gateway::{
    AsyncGateway, BoxFuture, CallId, GatewayCall, GatewayError, GatewayReply,
};
use connop_core::tool::ToolResult;
use event_listener::Event as Signal;
use futures_lite::future::poll_fn;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;

type CallFuture = BoxFuture<'static, Result<GatewayReply, GatewayError>>;

/// Hands an operation's gateway calls to its driver future.
pub struct SmolCalls {
    gateway: Arc<dyn AsyncGateway>,
    queue: Mutex<Vec<(CallId, GatewayCall)>>,
    queued: Signal,
}

impl SmolCalls {
    /// Calls through `gateway`.
    pub fn new(gateway: Arc<dyn AsyncGateway>) -> Self {
        SmolCalls {
            gateway,
            queue: Mutex::new(Vec::new()),
            queued: Signal::new(),
        }
    }

    fn take(&self) -> Vec<(CallId, GatewayCall)> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl CallStarter for SmolCalls {
    fn start(&self, _op: &OpHandle, id: CallId, call: GatewayCall) {
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, call));
        self.queued.notify(1);
    }
}

enum Woke {
    Answer(usize, Result<GatewayReply, GatewayError>),
    Timer,
    Changed,
}

/// Drives an operation until its tool call returns.
pub async fn run_to_end(op: &OpHandle, calls: &SmolCalls) -> ToolResult {
    op.pump();
    let mut in_flight: Vec<(CallId, CallFuture)> = Vec::new();
    let mut timer = async_io::Timer::never();
    let mut armed = None;
    loop {
        let mut changed = op.listen();
        let mut queued = calls.queued.listen();
        for (id, call) in calls.take() {
            let gateway = calls.gateway.clone();
            in_flight.push((id, Box::pin(async move { gateway.call(&call).await })));
        }
        if op.is_finished() {
            break;
        }
        let wake = op.next_wake();
        if wake != armed {
            match wake {
                Some(at) => timer.set_at(at),
                None => timer = async_io::Timer::never(),
            }
            armed = wake;
        }
        let woke = poll_fn(|cx| {
            for (i, (_, call)) in in_flight.iter_mut().enumerate() {
                if let Poll::Ready(answer) = call.as_mut().poll(cx) {
                    return Poll::Ready(Woke::Answer(i, answer));
                }
            }
            if Pin::new(&mut timer).poll(cx).is_ready() {
                return Poll::Ready(Woke::Timer);
            }
            if Pin::new(&mut changed).poll(cx).is_ready()
                || Pin::new(&mut queued).poll(cx).is_ready()
            {
                return Poll::Ready(Woke::Changed);
            }
            Poll::Pending
        })
        .await;
        match woke {
            Woke::Answer(i, answer) => {
                let (id, _) = in_flight.swap_remove(i);
                op.deliver(id, answer);
            }
            Woke::Timer => {
                armed = None;
                op.fire_timers();
            }
            Woke::Changed => {}
        }
    }
    op.result()
        .unwrap_or_else(|| ToolResult::Error("the operation ended without a result".into()))
}

/// Runs one `manage_connections` tool call as a future and returns its result as JSON. On
/// the card path it completes when the operation settles; other threads and tasks reach it
/// through the registry's [`OpHandle`] or the context's interrupt handle.
pub async fn manage_connections(args: &Value, context: &ToolContext<dyn AsyncGateway>) -> Value {
    run_tool_call(args, context).await.to_value()
}

/// [`manage_connections`], returning the typed result.
pub async fn run_tool_call(args: &Value, context: &ToolContext<dyn AsyncGateway>) -> ToolResult {
    let calls = Arc::new(SmolCalls::new(context.gateway.clone()));
    let op = context.start(args, calls.clone());
    run_to_end(&op, &calls).await
}
