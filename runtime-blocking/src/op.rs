//! One running operation, shared between the thread or task that waits for its result and
//! every other thread that answers the card, interrupts it, or delivers a gateway answer.
//!
//! Every change goes through [`OpHandle::apply`]: lock the flow, feed one input, unlock, then
//! **pump**: take the flow's effects one by one, in order, and execute each outside the lock. One thread pumps at a time; a caller that finds another pump running waits
//! until its own effects have been executed, so a card answer that settles the operation
//! replies only after the registry entry is closed and the settle frame is written (SPEC §4).
//! A pump re-entered from one of its own callbacks (the card callback calling back into the
//! handle, a gateway call settling the operation) never waits: the outer pump runs what the
//! inner call queued, after the callback returns.

use crate::registry::SharedRegistry;
use connop_core::card::{CardAnswer, CardReply};
use connop_core::contract::{Actor, SettleReason, TargetState};
use connop_core::error::CallerError;
use connop_core::flow::{Effect, Event, Flow};
use connop_core::operation::{ChangeRecord, OpId, Patch, Text};
use connop_core::payload::OperationView;
use connop_core::registry::RegistryEntry;
use connop_core::time::Timestamp;
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::{CallId, GatewayCall, GatewayError, GatewayReply};
use event_listener::{Event as Signal, Listener};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::ThreadId;

use crate::clock::Clock;

/// Receives the operation's events: the card request and every update frame. It runs on the
/// pumping thread and must not block for long; it may call back into the [`OpHandle`].
pub type EventSink = Arc<dyn Fn(&Event) + Send + Sync>;

/// Starts a gateway call for an operation. The starter eventually delivers the answer with
/// [`OpHandle::deliver`] (possibly before `start` returns, for an instant in-process gateway).
pub trait CallStarter: Send + Sync {
    /// Starts `call`; its answer goes to `op.deliver(id, …)`.
    fn start(&self, op: &OpHandle, id: CallId, call: GatewayCall);
}

/// What an operation needs from its host while it runs.
pub struct OpEnv {
    /// Where it registers (card path).
    pub registry: SharedRegistry,
    /// The card callback and update frames; `None` on the links path.
    pub events: Option<EventSink>,
    /// How gateway calls run.
    pub calls: Arc<dyn CallStarter>,
    /// Wall time for the core.
    pub clock: Clock,
}

struct State {
    flow: Flow,
    /// Effects executed so far; an input's effects are done once `executed` plus the flow's
    /// withdrawn count reaches the flow's queued count right after that input.
    executed: u64,
    pump: Option<ThreadId>,
    result: Option<ToolResult>,
    /// The result as JSON, serialized by the thread that executed the `Return` effect when a
    /// blocking driver sleeps on another thread (see [`OpHandle::take_result_json`]).
    result_json: Option<serde_json::Value>,
}

/// The shared part of one operation.
pub struct OpShared {
    state: Mutex<State>,
    op_id: Option<OpId>,
    env: OpEnv,
    /// The pump executed more effects.
    executed: Signal,
    /// A blocking driver parked on this operation: woken with std's futex-based `unpark`,
    /// the cheapest wake there is for a thread that sleeps a whole tick.
    parked: Mutex<Option<std::thread::Thread>>,
    /// An async driver waiting on this operation; taken out while it runs, so its own changes
    /// never reschedule it.
    waker: Mutex<Option<std::task::Waker>>,
    /// Set on every change, cleared by the driver before it reads the state.
    dirty: std::sync::atomic::AtomicBool,
    /// The blocking driver returns the result as JSON (see [`OpHandle::take_result_json`]).
    driver_wants_json: std::sync::atomic::AtomicBool,
}

/// The next move of a blocking driver ([`OpHandle::driver_step`]).
#[derive(Debug)]
pub enum DriverStep {
    /// The tool call returned ([`OpHandle::result`]) and nothing is left to run.
    Finished,
    /// A timer is due.
    FireTimers,
    /// Nothing to do until this instant (`None`: until woken).
    Sleep(Option<std::time::Instant>),
}

/// A cloneable, thread-safe handle on a running operation: the SPEC §11 operation handle.
#[derive(Clone)]
pub struct OpHandle(pub(crate) Arc<OpShared>);

impl std::fmt::Debug for OpHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpHandle")
            .field("op_id", &self.0.op_id)
            .finish()
    }
}

impl RegistryEntry for OpHandle {
    fn op_id(&self) -> OpId {
        self.0.op_id.unwrap_or_else(|| OpId::from_entropy([0; 6]))
    }
    fn is_settled(&self) -> bool {
        self.0
            .lock()
            .flow
            .operation()
            .is_some_and(|op| op.is_settled())
    }
}

impl OpHandle {
    /// Wraps a freshly started flow. Nothing runs until [`pump`](Self::pump).
    pub fn new(flow: Flow, env: OpEnv) -> Self {
        let op_id = flow.operation().map(|op| op.op_id());
        let state = State {
            flow,
            executed: 0,
            pump: None,
            result: None,
            result_json: None,
        };
        OpHandle(Arc::new(OpShared {
            state: Mutex::new(state),
            op_id,
            env,
            executed: Signal::new(),
            parked: Mutex::new(None),
            waker: Mutex::new(None),
            dirty: std::sync::atomic::AtomicBool::new(false),
            driver_wants_json: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// The operation id (none for a status call or refused arguments).
    pub fn op_id(&self) -> Option<OpId> {
        self.0.op_id
    }

    /// The operation view (SPEC §3.2): live rows while open, the frozen snapshot with links
    /// once settled.
    pub fn view(&self) -> Option<OperationView> {
        self.0.lock().flow.view()
    }

    /// Whether the operation settled.
    pub fn is_settled(&self) -> bool {
        RegistryEntry::is_settled(self)
    }

    /// The tool result, once returned.
    pub fn result(&self) -> Option<ToolResult> {
        self.0.lock().result.clone()
    }

    /// The tool result as JSON, taken out once it was returned: `None` before, once taken, or
    /// unless a blocking driver that returns JSON slept on another thread than the one that
    /// settled the operation (then serialize [`result`](Self::result)).
    pub fn take_result_json(&self) -> Option<serde_json::Value> {
        self.0.lock().result_json.take()
    }

    /// A card answer (SPEC §5.6). Returns after the effects it caused were executed.
    pub fn respond(&self, answer: &CardAnswer) -> Result<CardReply, CallerError> {
        self.apply(|flow, now| flow.handle_card_answer(answer, now))
    }

    /// Continue: settles `continue` unless everything resolved.
    pub fn continue_(&self) -> Result<CardReply, CallerError> {
        self.apply(|flow, now| flow.handle_continue(now))
    }

    /// Interrupt: settles `interrupt` at once. Returns whether this settled it.
    pub fn interrupt(&self) -> bool {
        self.apply(|flow, now| flow.handle_interrupt(now))
    }

    /// The compare-and-set settle; returns whether this call won.
    pub fn settle(&self, reason: SettleReason) -> bool {
        self.apply(|flow, now| flow.handle_settle(reason, now))
    }

    /// Moves a target (the seeds' seam); the watcher wakes.
    pub fn transition(
        &self,
        name: &str,
        to: TargetState,
        actor: Actor,
        patch: Patch,
    ) -> Result<Option<ChangeRecord>, CallerError> {
        self.apply(|flow, now| flow.handle_transition(name, to, actor, patch, now))
    }

    /// Replaces a target's link and detail with no state change.
    pub fn refresh(
        &self,
        name: &str,
        connect_url: Option<Text>,
        detail: Option<Text>,
        actor: Actor,
    ) -> Result<ChangeRecord, CallerError> {
        self.apply(|flow, now| flow.handle_refresh(name, connect_url, detail, actor, now))
    }

    /// A gateway answer, from whatever ran the call.
    pub fn deliver(&self, id: CallId, result: Result<GatewayReply, GatewayError>) {
        let outcome = self.apply(|flow, now| flow.handle_gateway(id, result, now));
        debug_assert!(outcome.is_ok(), "a reply of the wrong kind: {outcome:?}");
    }

    /// Whether the flow still waits for the answer to `id` (a call it no longer awaits must
    /// not start: the operation settled).
    pub fn awaits(&self, id: CallId) -> bool {
        self.0.lock().flow.awaits(id)
    }

    /// Fires the timers that are due.
    pub fn fire_timers(&self) {
        self.apply(|flow, now| flow.handle_timeout(now));
    }

    /// The next wake-up as an instant of the host's monotonic clock, if any.
    pub fn next_wake(&self) -> Option<std::time::Instant> {
        self.next_wake_with_reason().map(|(at, _)| at)
    }

    /// The next wake-up and why (a runtime may batch tick wake-ups; never the deadline).
    pub fn next_wake_with_reason(
        &self,
    ) -> Option<(std::time::Instant, connop_core::flow::WakeReason)> {
        let wake = self.0.lock().flow.poll_timeout()?;
        Some((self.0.env.clock.instant_of(wake.at), wake.reason))
    }

    /// What a blocking driver does next, read under one lock: stop (the result is in), fire
    /// the due timers, or sleep until the next wake-up (`None`: until woken).
    pub fn driver_step(&self) -> DriverStep {
        let state = self.0.lock();
        if state.flow.is_done() && state.result.is_some() {
            return DriverStep::Finished;
        }
        match state.flow.poll_timeout() {
            None => DriverStep::Sleep(None),
            Some(wake) => {
                let at = self.0.env.clock.instant_of(wake.at);
                if std::time::Instant::now() >= at {
                    DriverStep::FireTimers
                } else {
                    DriverStep::Sleep(Some(at))
                }
            }
        }
    }

    /// Whether the tool call returned and nothing is left to run.
    pub fn is_finished(&self) -> bool {
        let state = self.0.lock();
        state.result.is_some() && state.flow.is_done()
    }

    /// The clock the operation runs on.
    pub fn clock(&self) -> &Clock {
        &self.0.env.clock
    }

    /// Feeds one input under the lock, then executes what it caused (or waits for the pump
    /// that does), and returns the input's own answer.
    pub fn apply<R>(&self, input: impl FnOnce(&mut Flow, Timestamp) -> R) -> R {
        let (answer, mark) = {
            let mut state = self.0.lock();
            let now = self.0.env.clock.now();
            let answer = input(&mut state.flow, now);
            (answer, state.flow.effect_counts().0)
        };
        self.pump_until(mark);
        // Last, once this input's effects ran and no lock of the operation is held any more:
        // a driver woken earlier could preempt this thread while it still holds one. Also
        // covers an input that moved only the next wake-up (the last read of a tick plans the
        // next one): the driver re-arms.
        self.wake_driver();
        answer
    }

    /// Executes queued effects (the start of an operation, or after a timer).
    pub fn pump(&self) {
        let mark = self.0.lock().flow.effect_counts().0;
        self.pump_until(mark);
    }

    fn pump_until(&self, mark: u64) {
        let me = std::thread::current().id();
        loop {
            let listener;
            {
                let mut state = self.0.lock();
                if state.executed + state.flow.effect_counts().1 >= mark {
                    return;
                }
                match state.pump {
                    None => state.pump = Some(me),
                    // Re-entered from our own callback: the outer loop runs it.
                    Some(pump) if pump == me => return,
                    Some(_) => {
                        listener = self.0.executed.listen();
                        drop(state);
                        listener.wait();
                        continue;
                    }
                }
            }
            self.run_pump();
        }
    }

    /// The pump: executes the flow's effects in order, outside the lock, until none is left.
    fn run_pump(&self) {
        loop {
            let effect = {
                let mut state = self.0.lock();
                match state.flow.poll_effect() {
                    Some(effect) => effect,
                    None => {
                        state.pump = None;
                        drop(state);
                        self.0.executed.notify(usize::MAX);
                        return;
                    }
                }
            };
            self.execute(effect);
            self.0.lock().executed += 1;
            self.0.executed.notify(usize::MAX);
        }
    }

    fn execute(&self, effect: Effect) {
        let env = &self.0.env;
        match effect {
            Effect::Register { key, op_id } => {
                let answer = env.registry.open(&key, op_id, self.clone());
                let mut state = self.0.lock();
                let now = env.clock.now();
                state.flow.handle_registered(answer, now);
            }
            Effect::Call { id, call } => env.calls.start(self, id, call),
            Effect::Emit(event) => {
                if let Some(sink) = &env.events {
                    sink(&event);
                }
            }
            Effect::Close { key, op_id } => env.registry.close(&key, op_id),
            // The waiting caller is woken when the input that caused this returns (see
            // `apply`): waking it here would have it contend for the lock the pump still needs.
            Effect::Return(result) => {
                // For a blocking caller asleep on another thread, serialized here, on the
                // thread that settles the operation and whose memory is warm, rather than by
                // the caller just woken from a long sleep. Not for an async driver: its
                // executor thread is warm, and one interrupt settling thousands of operations
                // would hold all their results as JSON at once.
                let json = self
                    .driver_wants_json_from_here()
                    .then(|| result.to_value());
                let mut state = self.0.lock();
                state.result = Some(*result);
                state.result_json = json;
            }
            // `Effect` is non-exhaustive: one this driver predates has nothing to run here.
            _ => {}
        }
    }

    /// Whether a blocking driver that returns the result as JSON is parked on a thread other
    /// than this one.
    fn driver_wants_json_from_here(&self) -> bool {
        use std::sync::atomic::Ordering;
        if !self.0.driver_wants_json.load(Ordering::Acquire) {
            return false;
        }
        let parked = self.0.parked.lock().unwrap_or_else(|p| p.into_inner());
        parked
            .as_ref()
            .is_some_and(|t| t.id() != std::thread::current().id())
    }

    /// Wakes whoever drives the operation: an async driver through its stored waker, or a
    /// blocking driver parked on its thread.
    fn wake_driver(&self) {
        use std::sync::atomic::Ordering;
        self.0.dirty.store(true, Ordering::Release);
        let parked = self
            .0
            .parked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // The driver's own changes need no wake-up: it reads the state before it parks.
        if let Some(thread) = parked.filter(|t| t.id() != std::thread::current().id()) {
            thread.unpark();
        }
        let waker = self
            .0
            .waker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// For an async driver: clears the change flag before it reads the state, so any change
    /// made after this call is seen by [`poll_changed`](Self::poll_changed).
    pub fn clear_changed(&self) {
        self.0
            .dirty
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// For an async driver: ready once something changed since [`clear_changed`]; otherwise
    /// registers the task's waker (no allocation).
    ///
    /// [`clear_changed`]: Self::clear_changed
    pub fn poll_changed(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        use std::sync::atomic::Ordering;
        {
            let mut slot = self.0.waker.lock().unwrap_or_else(|p| p.into_inner());
            match slot.as_mut() {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => *slot = Some(cx.waker().clone()),
            }
        }
        if self.0.dirty.load(Ordering::Acquire) {
            self.stop_waiting();
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    }

    /// For an async driver that stops waiting (it is about to run): forget its waker.
    pub fn stop_waiting(&self) {
        self.0
            .waker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
    }

    /// Registers the calling thread as the operation's blocking driver, woken by
    /// [`std::thread::Thread::unpark`] on every change; `wants_json`: it returns the result
    /// as JSON, so the thread that settles the operation serializes it.
    pub(crate) fn park_here(&self, wants_json: bool) {
        self.0
            .driver_wants_json
            .store(wants_json, std::sync::atomic::Ordering::Release);
        *self.0.parked.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::thread::current());
    }

    /// A weak reference, for interrupt tokens that must not keep an operation alive.
    pub fn downgrade(&self) -> Weak<OpShared> {
        Arc::downgrade(&self.0)
    }
}

impl OpShared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in a callback must not wedge every later call on the operation.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
