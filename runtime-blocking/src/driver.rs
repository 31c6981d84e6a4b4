//! The blocking driver: `manage_connections(args, context)` on the calling thread.
//!
//! The thread loops on [`OpHandle::step`] and parks as it says: until woken (its waker
//! unparks it) or until the next wake-up, one re-armable deadline, never sliced.

use crate::calls::WorkerCalls;
use crate::handle::{CallStarter, Next, OpHandle, ResultForm, ToolContext};
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::BlockingToolGateway;
use serde_json::Value;
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::Instant;

/// Runs one `manage_connections` tool call on the calling thread and returns its result as
/// JSON. On the card path it blocks until the operation settles; other threads reach it
/// through the registry's [`OpHandle`] or the context's [`Interrupt`](crate::Interrupt).
pub fn manage_connections(args: &Value, context: &ToolContext<dyn BlockingToolGateway>) -> Value {
    let op = start_tool_call(args, context, ResultForm::Json);
    run(&op);
    op.finished_result_json()
}

/// [`manage_connections`], returning the typed result.
pub fn run_tool_call(args: &Value, context: &ToolContext<dyn BlockingToolGateway>) -> ToolResult {
    run_to_end(&start_tool_call(args, context, ResultForm::Typed))
}

fn start_tool_call(
    args: &Value,
    context: &ToolContext<dyn BlockingToolGateway>,
    form: ResultForm,
) -> OpHandle {
    let calls: Arc<dyn CallStarter> = Arc::new(WorkerCalls::new(context.gateway.clone()));
    context.start(args, Some(calls), form)
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
    loop {
        match op.step(&mut answers, &mut calls, &waker) {
            Next::Finished => return,
            // This driver's calls go to a starter: none come out of its steps.
            Next::Start => debug_assert!(calls.is_empty(), "calls for a blocking driver"),
            Next::Sleep(Some(at)) => {
                std::thread::park_timeout(at.saturating_duration_since(Instant::now()))
            }
            Next::Sleep(None) => std::thread::park(),
        }
    }
}
