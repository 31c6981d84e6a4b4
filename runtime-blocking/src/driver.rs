//! The blocking driver: `manage_connections(args, context)` on the calling thread.
//!
//! The thread loops on [`OpHandle::step`] and parks as it says: until woken (its waker
//! unparks it) or until the next wake-up, one re-armable deadline, never sliced.

use crate::calls::WorkerCalls;
use crate::handle::{CallStarter, CallsStarted, Next, OpHandle, ToolContext};
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::BlockingToolGateway;
use serde_json::Value;
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::Instant;

/// Runs one `manage_connections` tool call on the calling thread and returns its result. On
/// the card path it blocks until the operation settles; other threads reach it through the
/// registry's [`OpHandle`] or the context's [`Interrupt`](crate::Interrupt).
///
/// The result comes back typed, as the core froze it: the host serializes it as it needs
/// ([`ToolResult::to_json`] for text, [`ToolResult::to_value`] for a value), after it has
/// it: a `serde_json::Value` built here, a map and a string per key, would cost a caller woken
/// from a long sleep about as much again as the wake-up, in memory gone cold.
pub fn manage_connections(
    args: &Value,
    context: &ToolContext<dyn BlockingToolGateway>,
) -> ToolResult {
    // The pool's queue only when the context does not name its own way of running calls.
    let calls = context
        .calls
        .is_none()
        .then(|| Arc::new(WorkerCalls::new(context.gateway.clone())) as Arc<dyn CallStarter>);
    run_to_end(&context.start(args, calls))
}

/// Drives an operation on this thread until its tool call returns, and returns the result.
pub fn run_to_end(op: &OpHandle) -> ToolResult {
    run(op);
    op.finished_result()
}

/// A waker that unparks the calling thread: what a driver loop on this thread (this one, or a
/// host's own, as the Python module's) waits with between steps.
pub fn thread_waker() -> Waker {
    Waker::from(Arc::new(Unpark(std::thread::current())))
}

/// Unparks the driving thread.
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// The loop of [`run_to_end`]. `unpark` leaves a token when it comes before `park`, so no
/// wake-up is lost between the step and the park.
fn run(op: &OpHandle) {
    let waker = thread_waker();
    let (mut answers, mut calls) = (Vec::new(), Vec::new());
    // This driver's calls go to a starter: none come out of its steps.
    let mut start = |calls: &mut Vec<_>, _: &mut Vec<_>| {
        debug_assert!(calls.is_empty(), "calls for a blocking driver");
        CallsStarted::AtOnce
    };
    loop {
        match op.step(&mut answers, &mut calls, &mut start, &waker) {
            Next::Finished => return,
            Next::Sleep(Some(at)) => {
                std::thread::park_timeout(at.saturating_duration_since(Instant::now()))
            }
            Next::Sleep(None) => std::thread::park(),
        }
    }
}
