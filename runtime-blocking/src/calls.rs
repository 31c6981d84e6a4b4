//! How the blocking runtime runs gateway calls.
//!
//! - [`InlineCalls`]: on the thread that pumps the effect. Right only for an in-process
//!   gateway that answers at once: while a call runs there, the deadline cannot fire and an
//!   input waits for the call.
//! - [`WorkerCalls`]: off the operation's thread, on the threads of one process-wide pool, so
//!   the operation settles at once on an interrupt, a card answer or the deadline while a
//!   call is out. An operation's calls start in the order it made them, each as soon as a
//!   thread is free, never behind another of its calls still out: a stalled read of one row
//!   holds back no other row's reads (docs/contract.md#return-hints). A call whose answer the flow
//!   no longer awaits (it settled) is not started. A thread is busy only while it runs calls: a
//!   thousand parked operations whose reads answer in a millisecond share a few threads, and
//!   none is started per operation.

use crate::handle::{CallStarter, OpHandle};
use connop_core::tool_gateway::{
    BlockingToolGateway, CallId, GatewayCall, GatewayError, GatewayReply,
};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Runs each call on the pumping thread.
pub struct InlineCalls(pub Arc<dyn BlockingToolGateway>);

impl CallStarter for InlineCalls {
    fn start(&self, op: &OpHandle, id: CallId, call: GatewayCall) {
        let result = self.0.call(&call);
        op.deliver(id, result);
    }
}

/// Runs an operation's calls on the process's call pool, started in order and none waiting
/// for another, and delivers each answer to the operation (whose effects then run on the
/// pool's thread).
pub struct WorkerCalls(CallQueue);

/// What becomes of a call's answer.
pub type OnAnswer =
    Box<dyn Fn(&OpHandle, CallId, Result<GatewayReply, GatewayError>) + Send + Sync>;

/// One operation's calls, run on the process's call pool (started in order, none waiting
/// for another); each answer goes to `on_answer`. [`WorkerCalls`] delivers it to the
/// operation; a driver that wants the answers fed on its own thread (so the effects they
/// cause run there) collects them.
pub struct CallQueue(Arc<Calls>);

/// One operation's calls not yet run, and the pool threads taking them.
struct Calls {
    gateway: Arc<dyn BlockingToolGateway>,
    queue: Mutex<Queue>,
    on_answer: OnAnswer,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<(OpHandle, CallId, GatewayCall)>,
    /// Pool threads given this queue and not in a call: a call queued while one is free
    /// waits for no other. A thread given the queue ends its turn when none is waiting.
    free: usize,
}

impl WorkerCalls {
    /// Calls through `gateway`.
    pub fn new(gateway: Arc<dyn BlockingToolGateway>) -> Self {
        WorkerCalls(CallQueue::new(
            gateway,
            Box::new(|op, id, result| op.deliver(id, result)),
        ))
    }
}

impl CallStarter for WorkerCalls {
    fn start(&self, op: &OpHandle, id: CallId, call: GatewayCall) {
        self.0.start(op, id, call);
    }
}

impl CallQueue {
    /// Calls through `gateway`; each answer goes to `on_answer`, on the pool's thread.
    pub fn new(gateway: Arc<dyn BlockingToolGateway>, on_answer: OnAnswer) -> Self {
        CallQueue(Arc::new(Calls {
            gateway,
            queue: Mutex::new(Queue::default()),
            on_answer,
        }))
    }

    /// Starts `call` after the operation's earlier ones started: on a free thread of this
    /// queue, or on one more.
    pub fn start(&self, op: &OpHandle, id: CallId, call: GatewayCall) {
        let mut queue = lock(&self.0.queue);
        queue.waiting.push_back((op.clone(), id, call));
        if queue.free > 0 {
            return;
        }
        queue.free += 1;
        drop(queue);
        if !pool().submit(self.0.clone()) {
            // No thread could be started: run the calls here rather than lose them.
            self.0.run();
        }
    }
}

impl Calls {
    /// One runner: takes the queued calls one at a time until none is left. A runner about
    /// to enter a call while others wait and no runner is free hands them one more first:
    /// a burst of calls (a tick's reads) queued before the first runner woke must not wait
    /// behind its first call.
    fn run(self: &Arc<Self>) {
        let mut queue = lock(&self.queue);
        loop {
            let Some((op, id, call)) = queue.waiting.pop_front() else {
                queue.free -= 1;
                return;
            };
            // Handing off, this runner's free place passes to the one it hands them to.
            let hand_off = queue.free == 1 && !queue.waiting.is_empty();
            if !hand_off {
                queue.free -= 1;
            }
            drop(queue);
            if hand_off && !pool().submit(self.clone()) {
                // No thread could be started: the others wait for this runner, as before.
                lock(&self.queue).free -= 1;
            }
            if op.awaits(id) {
                let result = self.gateway.call(&call);
                (self.on_answer)(&op, id, result);
            }
            queue = lock(&self.queue);
            queue.free += 1;
        }
    }
}

/// How long an idle pool thread waits for work before it ends.
const IDLE: Duration = Duration::from_secs(10);

/// The process's call threads: started when every one is busy, ended after [`IDLE`] without
/// work.
struct Pool {
    state: Mutex<PoolState>,
    work: Condvar,
}

#[derive(Default)]
struct PoolState {
    /// Operations whose queues wait for a thread.
    ready: VecDeque<Arc<Calls>>,
    /// Threads waiting for work.
    idle: usize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(PoolState::default()),
        work: Condvar::new(),
    })
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pool {
    /// Hands `calls` to a thread; `false` when none is idle and none could be started.
    fn submit(&'static self, calls: Arc<Calls>) -> bool {
        let mut state = lock(&self.state);
        if state.idle > state.ready.len() {
            state.ready.push_back(calls);
            drop(state);
            self.work.notify_one();
            return true;
        }
        drop(state);
        let started = std::thread::Builder::new()
            .name("connop-gateway-calls".into())
            .spawn(move || {
                calls.run();
                self.serve();
            });
        started.is_ok()
    }

    /// A pool thread's life after its first queue: take the next, or end after [`IDLE`]
    /// without one.
    fn serve(&self) {
        let mut state = lock(&self.state);
        loop {
            if let Some(calls) = state.ready.pop_front() {
                drop(state);
                calls.run();
                state = lock(&self.state);
                continue;
            }
            state.idle += 1;
            let (next, waited) = self
                .work
                .wait_timeout(state, IDLE)
                .unwrap_or_else(|p| p.into_inner());
            state = next;
            state.idle -= 1;
            if waited.timed_out() && state.ready.is_empty() {
                return;
            }
        }
    }
}
