//! One running operation, shared by the driver that waits for its result and by every other
//! thread or task that answers the card, interrupts it, or delivers a gateway answer.
//!
//! Every input goes through one lock: feed it to the flow, then drain every effect it caused
//! out of the flow into the handle's queue (the core's drain rule). The effects are then
//! **pumped**: taken one by one, in order, and executed outside the lock. One thread pumps at a
//! time. A caller whose input caused effects returns only once they ran, so a card answer that
//! settles the operation replies after the registry entry closed and the settle frame went out
//! (SPEC §4). A pump re-entered from one of its own callbacks (the card callback calling back
//! into the handle, a gateway call settling the operation) never waits: the outer pump runs
//! what the inner call queued, once the callback returns.
//!
//! A driver asks one question, [`OpHandle::step`]: "at the clock's now, with these answers,
//! what next?" It waits through one [`Waker`] slot, woken by any input from elsewhere; the
//! blocking driver's waker unparks its thread, smol's reschedules its task.

use crate::clock::{Clock, Nap, Napping};
use connop_core::card::{CardAnswer, CardReply};
use connop_core::contract::{Actor, SettleReason, TargetState};
use connop_core::error::CallerError;
use connop_core::flow::{CallPurpose, Effect, Event, Flow};
use connop_core::operation::TargetRow;
use connop_core::operation::{ChangeRecord, OpId, Patch, Text};
use connop_core::payload::{CardRequest, OperationResult, OperationView};
use connop_core::registry::{Registry, RegistryEntry};
use connop_core::time::Timestamp;
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::{CallId, GatewayCall, GatewayError, GatewayReply};
use event_listener::{Event as Signal, Listener};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Waker;
use std::thread::ThreadId;
use std::time::Instant;

/// Receives the operation's events: the card request and every update frame. It runs on the
/// pumping thread and must not block for long; it may call back into the [`OpHandle`].
pub type EventSink = Arc<dyn Fn(&Event) + Send + Sync>;

/// A gateway answer as a driver collects it.
pub type Answer = (CallId, Result<GatewayReply, GatewayError>);

/// A gateway call handed to the driver to start.
pub type DriverCall = (CallId, GatewayCall);

/// Starts a gateway call for an operation. The starter eventually delivers the answer with
/// [`OpHandle::deliver`] (possibly before `start` returns, for an instant in-process gateway),
/// or hands it to the driver's next [`OpHandle::step`].
pub trait CallStarter: Send + Sync {
    /// Starts `call`; its answer goes back to `op`.
    fn start(&self, op: &OpHandle, id: CallId, call: GatewayCall);
}

/// How a thread waits for another thread's pump: given the wait, it runs it.
pub type WaitThrough = fn(&mut (dyn FnMut() + Send));

thread_local! {
    /// This thread's [`WaitThrough`], set for the span of [`waiting_through`].
    static WAIT_THROUGH: Cell<Option<WaitThrough>> = const { Cell::new(None) };
}

/// Runs `inputs` (calls on operation handles) so that, should one of them wait for another
/// thread's pump, the wait runs through `through`.
///
/// For a host whose callers hold a lock the pump's callbacks also take, like Python's GIL
/// (the card and update callbacks run Python). Such a caller keeps its lock for the input
/// and for the effects it runs itself, and lets it go only to wait: so the code it runs
/// right after the input still runs before a driver that the input woke takes the lock,
/// as in a single-lock host; and it never deadlocks with a pump on another thread.
pub fn waiting_through<R>(through: WaitThrough, inputs: impl FnOnce() -> R) -> R {
    struct Restore(Option<WaitThrough>);
    impl Drop for Restore {
        fn drop(&mut self) {
            WAIT_THROUGH.set(self.0);
        }
    }
    let _restore = Restore(WAIT_THROUGH.replace(Some(through)));
    inputs()
}

/// The process's registry of open operations, as the handle stores itself in it.
pub(crate) type RegistryCell = Arc<Mutex<Registry<OpHandle>>>;

/// How an operation refers to its registry: weakly, since the registry holds the operation
/// (open, or settled and kept), and the two must not keep each other alive once the host has
/// dropped both.
pub(crate) type RegistryRef = std::sync::Weak<Mutex<Registry<OpHandle>>>;

fn no_result() -> ToolResult {
    ToolResult::Error("the operation ended without a result".into())
}

/// Locks a mutex, even one a panicking callback poisoned: one failed callback must not wedge
/// every later call on the operation or the registry.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What an operation needs from its host while it runs.
pub(crate) struct OpEnv {
    /// Where it registers (card path); gone when the host dropped it.
    pub(crate) registry: RegistryRef,
    /// The card callback and update frames; `None` on the links path.
    pub(crate) events: Option<EventSink>,
    /// How gateway calls run; `None`: the driver starts them (they come out of its step).
    pub(crate) calls: Option<Arc<dyn CallStarter>>,
    /// What time it is, and how a driver sleeps.
    pub(crate) clock: Arc<dyn Clock>,
}

struct State {
    /// Changed only through [`State::feed`], which forgets `wake`.
    flow: Flow,
    /// The flow's next wake-up as last asked, while no input has reached the flow since: a
    /// parked tick asks once (to sleep), not again when it wakes to see what is due.
    wake: AskedWake,
    /// Effects drained from the flow and not yet taken by the pump, in order.
    queue: VecDeque<Effect>,
    /// Effects drained from the flow so far; an input's effects are done once `executed`
    /// reaches the value `fed` had right after that input.
    fed: u64,
    /// Effects executed (or dropped: calls the flow no longer awaits) so far.
    executed: u64,
    /// The thread pumping, if any.
    pump: Option<ThreadId>,
    /// Boxed as the core returns it: a running operation carries one word for it.
    result: Option<Box<ToolResult>>,
    /// Callers waiting for another thread's pump to run their effects: the pump signals
    /// progress only when there are some.
    waiting: usize,
    /// The driver's one waker slot: filled when it goes to sleep, taken by the first input
    /// that needs it awake.
    waker: Option<Waker>,
    /// The driver sleeps on a clock that wakes it itself ([`Napping::Clock`], a virtual
    /// clock), which must hear when its calls are all back.
    on_clock: bool,
    /// Calls for the driver to start, popped by a pump on another thread.
    for_driver: Vec<DriverCall>,
}

impl State {
    /// Feeds the flow one input (the only way this handle changes it).
    fn feed<R>(&mut self, input: impl FnOnce(&mut Flow) -> R) -> R {
        self.wake = AskedWake::UNKNOWN;
        input(&mut self.flow)
    }

    /// When the flow next needs a timeout input: asked again only after an input.
    fn next_wake(&mut self) -> Option<Timestamp> {
        if self.wake == AskedWake::UNKNOWN {
            self.wake = AskedWake::of(self.flow.poll_timeout().map(|wake| wake.at));
        }
        self.wake.get()
    }

    /// Whether an input that caused no effect changes what a sleeping driver napped on,
    /// `asked` being the next wake-up as asked before the input. A driver sleeps for that
    /// wake-up (or a later one asked since: an input that moved it later did not wake it);
    /// an input that moves it no earlier (a tick's later reads answered on another thread)
    /// lets it sleep on. On a virtual clock the last call answered wakes it anyway: it naps
    /// again with none out, which that clock waits for before it moves time.
    fn moves_driver(&mut self, asked: AskedWake) -> bool {
        if asked == AskedWake::UNKNOWN || (self.on_clock && self.flow.calls_in_flight() == 0) {
            return true;
        }
        match (self.next_wake(), asked.get()) {
            (Some(at), Some(slept_for)) => at < slept_for,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// The drain rule: after every input, every effect it caused leaves the flow, in order.
    fn drain(&mut self) {
        while let Some(effect) = self.flow.poll_effect() {
            self.queue.push_back(effect);
            self.fed += 1;
        }
    }

    /// The drain rule, in the driver's step: a call the driver starts itself goes straight to
    /// it while nothing is queued before it and no pump runs (a steady tick queues nothing).
    #[inline]
    fn drain_to_driver(&mut self, driver_calls: bool, calls: &mut Vec<DriverCall>) {
        // A tick's account reads mostly cause nothing: no call out of line for an empty queue.
        if self.flow.has_effects() {
            self.drain_effects_to_driver(driver_calls, calls);
        }
    }

    /// [`State::drain_to_driver`] when the flow has effects.
    fn drain_effects_to_driver(&mut self, driver_calls: bool, calls: &mut Vec<DriverCall>) {
        while let Some(effect) = self.flow.poll_effect() {
            self.fed += 1;
            match effect {
                Effect::Call { id, call }
                    if driver_calls && self.queue.is_empty() && self.pump.is_none() =>
                {
                    self.executed += 1;
                    calls.push((id, call));
                }
                other => self.queue.push_back(other),
            }
        }
    }

    /// A burst (the mint's frames, the card) is over: a parked operation keeps no more queue
    /// than a quiet tick needs (none, when its driver takes its calls from the step).
    fn settle_queue(&mut self, driver_calls: bool) {
        if !self.queue.is_empty() {
            return;
        }
        if driver_calls && self.queue.capacity() > 0 {
            self.queue = VecDeque::new();
        } else if self.queue.capacity() > 4 {
            self.queue.shrink_to(4);
        }
    }

    fn is_finished(&self) -> bool {
        self.result.is_some() && self.flow.is_done() && self.executed == self.fed
    }

    /// The driver goes to sleep until `until` (the flow's next wake-up): its clock says how,
    /// and its waker takes the slot.
    fn park(
        &mut self,
        clock: &dyn Clock,
        waker: &Waker,
        until: Option<Timestamp>,
    ) -> Option<Instant> {
        let nap = Nap {
            until,
            calls_in_flight: self.flow.calls_in_flight(),
        };
        match clock.nap(nap, waker) {
            Napping::Timer(at) => {
                match &self.waker {
                    Some(stored) if stored.will_wake(waker) => {}
                    _ => self.waker = Some(waker.clone()),
                }
                self.on_clock = false;
                at
            }
            Napping::Clock(wrapped) => {
                self.waker = Some(wrapped);
                self.on_clock = true;
                None
            }
        }
    }
}

/// A next wake-up as asked of the flow, in one word (an `Option<Option<Timestamp>>` takes
/// two): a parked operation's state, which its tick reads from memory gone cold, grows by
/// no more than the answer.
#[derive(Clone, Copy, PartialEq, Eq)]
struct AskedWake(u64);

impl AskedWake {
    /// Not asked since the last input.
    const UNKNOWN: AskedWake = AskedWake(u64::MAX - 1);
    /// Asked: no wake-up.
    const NONE: AskedWake = AskedWake(u64::MAX);

    /// A wake-up at either reserved value (the year 2554) is kept as none, or asked again:
    /// neither changes what the driver does.
    fn of(at: Option<Timestamp>) -> Self {
        at.map_or(AskedWake::NONE, |at| AskedWake(at.as_nanos()))
    }

    fn get(self) -> Option<Timestamp> {
        (self != AskedWake::NONE).then(|| Timestamp::from_nanos(self.0))
    }
}

/// The shared part of one operation.
pub struct OpShared {
    state: Mutex<State>,
    op_id: Option<OpId>,
    env: OpEnv,
    /// The pump executed more effects: callers waiting for theirs look again.
    progress: Signal,
}

/// What a driver does next ([`OpHandle::step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Next {
    /// The tool call returned; nothing is left to run.
    Finished,
    /// Sleep until the waker is woken, or until this instant of the monotonic clock.
    Sleep(Option<Instant>),
}

/// How the answers a driver's start gave came ([`OpHandle::step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// Known at once (an in-process gateway, a ready future), or none: the step feeds them at
    /// the instant it read, not reading the clock again.
    AtOnce,
    /// Some took time (a call run on this thread): the step reads the clock again.
    AfterWaiting,
}

/// How a driver starts the calls its step hands out: drains `calls`, puts the answers known at
/// once in `answers`, and says how they came. It runs outside the operation's lock (a call
/// may reach the operation), within [`OpHandle::step`].
pub type StartCalls<'a> = dyn FnMut(&mut Vec<DriverCall>, &mut Vec<Answer>) -> Started + 'a;

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
        self.lock()
            .flow
            .operation()
            .is_some_and(|op| op.is_settled())
    }
}

impl OpHandle {
    /// Wraps a freshly started flow; its first effects are drained and wait for a driver.
    pub(crate) fn new(flow: Flow, env: OpEnv) -> Self {
        let op_id = flow.operation().map(|op| op.op_id());
        let mut state = State {
            flow,
            wake: AskedWake::UNKNOWN,
            queue: VecDeque::new(),
            fed: 0,
            executed: 0,
            pump: None,
            result: None,
            waiting: 0,
            waker: None,
            on_clock: false,
            for_driver: Vec::new(),
        };
        state.drain();
        OpHandle(Arc::new(OpShared {
            state: Mutex::new(state),
            op_id,
            env,
            progress: Signal::new(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.0.state)
    }

    /// The operation id (none for a status call or refused arguments).
    pub fn op_id(&self) -> Option<OpId> {
        self.0.op_id
    }

    /// The operation view (SPEC §3.2): live rows while open, the frozen snapshot with links
    /// once settled.
    pub fn view(&self) -> Option<OperationView> {
        self.lock().flow.view()
    }

    /// Whether the operation settled.
    pub fn is_settled(&self) -> bool {
        RegistryEntry::is_settled(self)
    }

    /// The tool result, once returned (the frozen result: every read gives the same).
    pub fn result(&self) -> Option<ToolResult> {
        self.lock().result.as_deref().cloned()
    }

    /// What a driver returns once the operation finished: the frozen result, or an error
    /// saying there is none (a flow that ended without returning, which it should not).
    pub fn finished_result(&self) -> ToolResult {
        self.result().unwrap_or_else(no_result)
    }

    /// The clock the operation runs on.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.0.env.clock
    }

    // ----- inputs from anywhere ---------------------------------------------------------

    /// A card answer (SPEC §5.6). Returns after the effects it caused were executed.
    pub fn respond(&self, answer: &CardAnswer) -> Result<CardReply, CallerError> {
        self.apply(|flow, now| flow.handle_card_answer(answer, now))
    }

    /// A card answer from a host's own API: as [`respond`](Self::respond), but an answer
    /// naming a target the operation does not have is refused, nothing moved.
    pub fn respond_naming_targets(&self, answer: &CardAnswer) -> Result<CardReply, CallerError> {
        self.apply(|flow, now| flow.handle_card_answer_naming_targets(answer, now))
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

    /// Registers a detached operation ([`ToolContext::detached`](super::ToolContext::detached))
    /// under its session key (and `profile`, when given): refused, with the open operation's
    /// id, when the session has an unsettled one; the operation then goes on unregistered.
    /// Only for a detached operation that has not settled.
    pub fn register(&self, profile: Option<Text>) -> Result<Result<(), OpId>, CallerError> {
        self.apply(|flow, _| flow.handle_register(profile))?;
        let state = self.lock();
        Ok(state.flow.registration().unwrap_or(Ok(())))
    }

    /// One pass of the watcher over a detached operation, its reads run on this thread by
    /// `call`, one at a time, each answer fed before the next read starts (the core's
    /// [`Flow::handle_observe`]). `call` may reach the operation (a card answer landing
    /// during a read): no lock is held while it runs.
    pub fn observe(
        &self,
        call: &mut dyn FnMut(&GatewayCall) -> Result<GatewayReply, GatewayError>,
    ) -> Result<(), CallerError> {
        self.apply(|flow, now| flow.handle_observe(now))?;
        loop {
            let calls = std::mem::take(&mut self.lock().for_driver);
            if calls.is_empty() {
                return Ok(());
            }
            for (id, request) in calls {
                if self.awaits(id) {
                    let answer = call(&request);
                    self.deliver(id, answer);
                }
            }
        }
    }

    /// Removes the operation's registry entry, if the entry is still this operation (a late
    /// close never evicts a newer one). It goes on unregistered.
    pub fn close_registration(&self) {
        let Some(op_id) = self.0.op_id else { return };
        let key = self.lock().flow.registry_key().clone();
        if let Some(registry) = self.0.env.registry.upgrade() {
            let closed = lock(&registry).close(&key, op_id);
            drop(closed);
        }
    }

    /// The session key it registers under.
    pub fn session_key(&self) -> Text {
        self.lock().flow.registry_key().session_key.clone()
    }

    /// Settles `all_resolved` if every target resolved; returns whether this call settled.
    pub fn settle_if_all_resolved(&self) -> bool {
        self.apply(|flow, now| flow.handle_settle_if_all_resolved(now))
    }

    /// Replaces what a local MCP server's row needs from the environment (no move).
    pub fn set_required_env(
        &self,
        name: &str,
        env: Option<serde_json::Value>,
    ) -> Result<(), CallerError> {
        self.lock().flow.set_required_env(name, env)
    }

    /// The card request as it would be now (the card path emits it once).
    pub fn card_request(&self) -> Option<CardRequest> {
        self.lock().flow.card_request()
    }

    /// The operation as its host reads it at any time: the live rows while open, the frozen
    /// snapshot once settled.
    pub fn host_result(&self) -> Option<OperationResult> {
        self.lock().flow.host_result()
    }

    /// One row as it stands, and when the watcher reads it next at the earliest (after a
    /// 429), if it holds it back.
    pub fn target(&self, name: &str) -> Option<(TargetRow, Option<Timestamp>)> {
        let state = self.lock();
        let row = state.flow.operation()?.row(name)?.clone();
        Some((row, state.flow.next_read_at(name)))
    }

    /// The rows' names, in order.
    pub fn target_names(&self) -> Vec<Text> {
        let state = self.lock();
        state
            .flow
            .operation()
            .map(|op| op.rows().iter().map(|r| r.name.clone()).collect())
            .unwrap_or_default()
    }

    /// The browser came back from the vendor (SPEC §12.1): reads the named live row (every
    /// live row when `None`) at once, or right after the read it has out. Returns whether a
    /// live row was there to read; an unknown name is refused. The driver wakes for the
    /// reads this starts, like for any other input.
    pub fn return_hint(&self, target: Option<&str>) -> Result<bool, CallerError> {
        self.apply(|flow, now| flow.handle_return_hint(target, now))
    }

    /// The target whose row holds `connection_id`, if any: a loopback return names the
    /// account; [`return_hint`](Self::return_hint) then names this target, or none (every
    /// live row) when no row holds it.
    pub fn target_of_connection(&self, connection_id: &str) -> Option<Text> {
        let state = self.lock();
        let op = state.flow.operation()?;
        op.target_with_connection(connection_id).cloned()
    }

    /// A gateway answer, from whatever ran the call.
    pub fn deliver(&self, id: CallId, result: Result<GatewayReply, GatewayError>) {
        let fed = self.apply(|flow, now| flow.handle_gateway(id, result, now));
        debug_assert!(fed.is_ok(), "a reply of the wrong kind: {fed:?}");
    }

    /// Whether the flow still waits for the answer to `id` (a call it no longer awaits must
    /// not start: the operation settled).
    pub fn awaits(&self, id: CallId) -> bool {
        self.lock().flow.awaits(id)
    }

    /// Feeds one input under the lock, then executes what it caused (or waits for the pump
    /// that does), wakes the driver, and returns the input's own answer.
    fn apply<R>(&self, input: impl FnOnce(&mut Flow, Timestamp) -> R) -> R {
        let (answer, mark, waker) = {
            let mut state = self.lock();
            let now = self.0.env.clock.now();
            let asked = state.wake;
            let answer = state.feed(|flow| input(flow, now));
            state.drain();
            // Nothing to run: the driver's waker is taken under this same lock if the input
            // changed what it napped on (`moves_driver`). The operation is settled: it is
            // taken now too, and the driver woken before the effects run, so that they run
            // while its thread wakes (a wake-up costs more than they do); a driver that finds
            // them still running sleeps again, and the pump wakes it. Not for a caller holding
            // its host's lock (see [`waiting_through`]): that driver returns only once the
            // lock is free, and the lock stays taken while the effects run. Otherwise the pump
            // wakes it once the effects ran.
            let ran_all = state.executed == state.fed;
            let settled = state.flow.is_done() && WAIT_THROUGH.get().is_none();
            let waker = if (ran_all && state.moves_driver(asked)) || settled {
                state.waker.take()
            } else {
                None
            };
            (answer, (!ran_all).then_some(state.fed), waker)
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        if let Some(mark) = mark {
            self.pump_until(mark);
        }
        answer
    }

    // ----- the driver -------------------------------------------------------------------

    /// The driver's one question: at the clock's now, feed `answers` (drained), fire the
    /// timers that are due, run the effects that caused, and say what next. Calls the driver
    /// starts itself (an operation started without a [`CallStarter`]) go to `start`, through
    /// `calls`, and the answers it knows at once are fed in this same step: a parked tick
    /// whose reads answer at once is one step, one clock read. A driver that sleeps registers
    /// `waker` here: any later input wakes it.
    pub fn step(
        &self,
        answers: &mut Vec<Answer>,
        calls: &mut Vec<DriverCall>,
        start: &mut StartCalls<'_>,
        waker: &Waker,
    ) -> Next {
        let env = &self.0.env;
        let clock = &*env.clock;
        let driver_calls = env.calls.is_none();
        let mut now = clock.now();
        loop {
            let mut state = self.lock();
            // Running: the driver's own changes need no wake-up.
            state.waker = None;
            for (id, answer) in answers.drain(..) {
                let fed = state.feed(|flow| flow.handle_gateway(id, answer, now));
                debug_assert!(fed.is_ok(), "a reply of the wrong kind: {fed:?}");
                state.drain_to_driver(driver_calls, calls);
            }
            // The wake-up it slept for, unless an input moved it since.
            if state.next_wake().is_some_and(|at| at <= now) {
                state.feed(|flow| flow.handle_timeout(now));
                state.drain_to_driver(driver_calls, calls);
            }
            if !state.for_driver.is_empty() {
                calls.append(&mut state.for_driver);
            }
            if state.for_driver.capacity() > 0 {
                // Handed over by another thread's pump, which is rare: keep no room for it.
                state.for_driver = Vec::new();
            }
            if driver_calls && state.pump.is_none() {
                // The driver's own calls at the head of the queue need no pump: they are
                // taken here, under the lock this step holds anyway.
                while let Some(Effect::Call { .. }) = state.queue.front() {
                    if let Some(Effect::Call { id, call }) = state.queue.pop_front() {
                        state.executed += 1;
                        calls.push((id, call));
                    }
                }
            }
            let ran_all = state.executed == state.fed;
            let pumped_elsewhere = state.pump.is_some();
            // A caller still on its way back from waiting for a pump (to its host's lock, as
            // Python's GIL) wakes the driver when it is back: the code it runs right after its
            // input must run before the driver's caller does, as in a single-lock host. Calls
            // this step took itself start first, even then.
            let own_calls = !calls.is_empty() && ran_all && !pumped_elsewhere;
            if !own_calls && state.is_finished() && state.waiting == 0 {
                drop(state);
                clock.finished(waker);
                return Next::Finished;
            }
            // Calls start when nothing is queued before them, or when another thread's pump
            // (which handed some over) runs the rest; their answers, often known at once, are
            // fed on the next turn of this loop.
            if !calls.is_empty() && (ran_all || pumped_elsewhere) {
                state.settle_queue(driver_calls);
                drop(state);
                if start(calls, answers) == Started::AfterWaiting {
                    now = clock.now();
                }
                continue;
            }
            if ran_all || pumped_elsewhere {
                // Nothing to run, or another thread runs it and wakes us when done.
                state.settle_queue(driver_calls);
                let until = state.next_wake();
                return Next::Sleep(state.park(clock, waker, until));
            }
            // Read only here: a steady tick never pumps.
            state.pump = Some(std::thread::current().id());
            drop(state);
            self.run_pump();
            now = clock.now();
        }
    }

    /// Runs every effect queued so far on this thread (or waits for the pump that does).
    pub(crate) fn run_queued(&self) {
        let mark = self.lock().fed;
        self.pump_until(mark);
    }

    /// Why the flow made call `id`, while it still awaits the answer: a call starter that
    /// answers some reads itself tells them apart by it.
    pub fn call_purpose(&self, id: CallId) -> Option<CallPurpose> {
        self.lock().flow.call_purpose(id)
    }

    // ----- the pump ---------------------------------------------------------------------

    fn pump_until(&self, mark: u64) {
        let me = std::thread::current().id();
        loop {
            let listener;
            {
                let mut state = self.lock();
                if state.executed >= mark {
                    return;
                }
                match state.pump {
                    None => state.pump = Some(me),
                    // Re-entered from our own callback: the outer pump runs it.
                    Some(pump) if pump == me => return,
                    Some(_) => {
                        listener = self.0.progress.listen();
                        state.waiting += 1;
                        drop(state);
                        let mut listener = Some(listener);
                        let mut wait = || {
                            if let Some(listener) = listener.take() {
                                listener.wait();
                            }
                        };
                        match WAIT_THROUGH.get() {
                            Some(through) => through(&mut wait),
                            None => wait(),
                        }
                        let waker = {
                            let mut state = self.lock();
                            state.waiting -= 1;
                            // The last caller back lets a finished driver return (see `step`).
                            let last = state.waiting == 0 && state.is_finished();
                            if last { state.waker.take() } else { None }
                        };
                        if let Some(waker) = waker {
                            waker.wake();
                        }
                        continue;
                    }
                }
            }
            self.run_pump();
        }
    }

    /// The pump: executes the queued effects in order, outside the lock, until none is left;
    /// then gives the pump up and wakes the driver.
    fn run_pump(&self) {
        let mut ran = 0;
        loop {
            let effect = {
                let mut state = self.lock();
                state.executed += ran;
                let next = loop {
                    match state.queue.pop_front() {
                        // Withdrawn: the flow settled before this call started.
                        Some(Effect::Call { id, .. }) if !state.flow.awaits(id) => {
                            state.executed += 1;
                        }
                        // The driver starts it: handed over under this lock.
                        Some(Effect::Call { id, call }) if self.0.env.calls.is_none() => {
                            state.executed += 1;
                            state.for_driver.push((id, call));
                        }
                        other => break other,
                    }
                };
                let signal = state.waiting > 0;
                match next {
                    Some(effect) => (effect, signal),
                    None => {
                        state.pump = None;
                        state.settle_queue(self.0.env.calls.is_none());
                        let waker = state.waker.take();
                        drop(state);
                        if signal {
                            self.0.progress.notify(usize::MAX);
                        }
                        if let Some(waker) = waker {
                            waker.wake();
                        }
                        return;
                    }
                }
            };
            let (effect, signal) = effect;
            if signal {
                self.0.progress.notify(usize::MAX);
            }
            self.execute(effect);
            ran = 1;
        }
    }

    fn execute(&self, effect: Effect) {
        let env = &self.0.env;
        match effect {
            Effect::Register { key, .. } => {
                // A registry the host dropped can hold nothing: the operation goes on
                // unregistered, as after a close.
                let answer = match env.registry.upgrade() {
                    Some(registry) => lock(&registry).open(key, self.clone()),
                    None => Ok(()),
                };
                let mut state = self.lock();
                let now = env.clock.now();
                state.feed(|flow| flow.handle_registered(answer, now));
                state.drain();
            }
            Effect::Call { id, call } => match &env.calls {
                Some(starter) => starter.start(self, id, call),
                // Taken for the driver when popped (see `run_pump`).
                None => lock(&self.0.state).for_driver.push((id, call)),
            },
            Effect::Emit(event) => {
                if let Some(sink) = &env.events {
                    sink(&event);
                }
            }
            Effect::Close { key, op_id } => {
                // Dropped outside the registry's lock: the last reference to an operation
                // may be the registry's.
                if let Some(registry) = env.registry.upgrade() {
                    let forgotten = lock(&registry).close_settled(&key, op_id);
                    drop(forgotten);
                }
            }
            Effect::Return(result) => self.lock().result = Some(result),
            // An effect of a newer core than this runtime knows.
            unknown => debug_assert!(false, "an unknown effect: {unknown:?}"),
        }
    }

    /// A weak reference, for interrupt tokens that must not keep an operation alive.
    pub(crate) fn downgrade(&self) -> Weak<OpShared> {
        Arc::downgrade(&self.0)
    }
}
