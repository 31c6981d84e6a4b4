//! The smol runtime: one operation as a future. Gateway calls run concurrently inside that
//! future (no task per call), the timer is an `async_io::Timer` re-armed from the core's
//! next wake-up, and any change made from another thread or task wakes it through a stored
//! waker (no allocation per wait).

use connop_blocking::{CallStarter, OpHandle, ToolContext};
use connop_core::flow::WakeReason;
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::{
    AsyncToolGateway, BoxFuture, CallId, GatewayCall, GatewayError, GatewayReply,
};
use futures_lite::future::poll_fn;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Poll;
use std::time::{Duration, Instant};

type CallFuture = BoxFuture<'static, Result<GatewayReply, GatewayError>>;

/// Tick wake-ups at least this far away are rounded up to a shared grid, so one executor
/// wake-up serves every operation whose tick falls in the same slot. Deadlines are exact.
const BATCH_AFTER: Duration = Duration::from_millis(250);
/// The grid of batched tick wake-ups (at most 4 % of a 250 ms wait).
const BATCH_GRID: Duration = Duration::from_millis(10);

fn batched(at: Instant, reason: WakeReason, now: Instant) -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    if reason == WakeReason::Deadline || at.saturating_duration_since(now) < BATCH_AFTER {
        return at;
    }
    let origin = *ORIGIN.get_or_init(Instant::now);
    let since = at.saturating_duration_since(origin).as_nanos();
    let grid = BATCH_GRID.as_nanos();
    let slots = since.div_ceil(grid);
    // A slot past what `Instant` holds is not batched: the exact instant is never earlier.
    u64::try_from(slots * grid)
        .ok()
        .and_then(|nanos| origin.checked_add(Duration::from_nanos(nanos)))
        .unwrap_or(at)
}

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

    /// Starts every queued call as a future owned by the driver.
    fn start_queued(&self, in_flight: &mut Vec<(CallId, CallFuture)>) {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        for (id, call) in queue.drain(..) {
            let gateway = self.gateway.clone();
            // Through `call`, which a gateway may override (hooks, latency, one box).
            let future: CallFuture = Box::pin(async move { gateway.call(&call).await });
            in_flight.push((id, future));
        }
    }
}

impl CallStarter for SmolCalls {
    fn start(&self, _op: &OpHandle, id: CallId, call: GatewayCall) {
        // The pump that runs this wakes the driver when it ends.
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, call));
    }
}

enum Woke {
    Answers,
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
        // Cleared before reading the state: a change after this point wakes the poll below.
        op.clear_changed();
        calls.start_queued(&mut in_flight);
        if op.is_finished() {
            break;
        }
        let now = Instant::now();
        let wake = op.next_wake_with_reason();
        if let Some((at, _)) = wake {
            if at <= now {
                op.fire_timers();
                continue;
            }
        }
        let wake = wake.map(|(at, reason)| batched(at, reason, now));
        if wake != armed {
            match wake {
                Some(at) => timer.set_at(at),
                None => timer = async_io::Timer::never(),
            }
            armed = wake;
        }
        let woke = poll_fn(|cx| {
            let mut answered = false;
            let mut i = 0;
            while i < in_flight.len() {
                if let Poll::Ready(answer) = in_flight[i].1.as_mut().poll(cx) {
                    let (id, _) = in_flight.swap_remove(i);
                    op.deliver(id, answer);
                    answered = true;
                } else {
                    i += 1;
                }
            }
            if answered {
                op.stop_waiting();
                return Poll::Ready(Woke::Answers);
            }
            if Pin::new(&mut timer).poll(cx).is_ready() {
                op.stop_waiting();
                return Poll::Ready(Woke::Timer);
            }
            op.poll_changed(cx).map(|()| Woke::Changed)
        })
        .await;
        match woke {
            Woke::Answers | Woke::Changed => {}
            Woke::Timer => {
                armed = None;
                op.fire_timers();
            }
        }
    }
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
    let (op, calls) = start_tool_call(args, context);
    run_to_end(&op, &calls).await.to_value()
}

/// [`manage_connections`], returning the typed result.
pub async fn run_tool_call(
    args: &Value,
    context: &ToolContext<dyn AsyncToolGateway>,
) -> ToolResult {
    let (op, calls) = start_tool_call(args, context);
    run_to_end(&op, &calls).await
}

fn start_tool_call(
    args: &Value,
    context: &ToolContext<dyn AsyncToolGateway>,
) -> (OpHandle, Arc<SmolCalls>) {
    let calls = Arc::new(SmolCalls::new(context.gateway.clone()));
    let op = context.start(args, calls.clone());
    (op, calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_distant_tick_wakes_are_batched_and_never_earlier() {
        let now = Instant::now();
        let near = now + Duration::from_millis(100);
        assert_eq!(batched(near, WakeReason::Tick, now), near);
        let far = now + Duration::from_millis(1_003);
        let tick = batched(far, WakeReason::Tick, now);
        assert!(tick >= far && tick < far + BATCH_GRID);
        assert_eq!(batched(far, WakeReason::Deadline, now), far);
        let backoff = batched(far, WakeReason::Backoff, now);
        assert!(backoff >= far && backoff < far + BATCH_GRID);
        // Past 584 years the grid's nanoseconds leave u64: the wake stays exact.
        let farthest = now + Duration::from_secs(1 << 40);
        assert!(batched(farthest, WakeReason::Tick, now) >= farthest);
    }
}
