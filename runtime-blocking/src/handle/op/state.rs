//! What the operation's lock guards: the flow, and the little the handle adds to it (who
//! pumps, who waits, the driver's waker and nap, the result once returned).

use crate::clock::{Clock, Nap, Napping};
use connop_core::flow::{Effect, Flow};
use connop_core::time::Timestamp;
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::{CallId, GatewayCall};
use std::task::Waker;
use std::thread::ThreadId;
use std::time::Instant;

/// A gateway call handed to the driver to start.
pub type DriverCall = (CallId, GatewayCall);

pub(super) struct State {
    /// The operation: its effect queue and next wake-up are the handle's too.
    pub(super) flow: Flow,
    /// How many times a pump ran the flow's queue empty and stopped: a caller whose input
    /// left effects waits until this moves past its value at the input.
    pub(super) drained: u64,
    /// The thread pumping, if any.
    pub(super) pump: Option<ThreadId>,
    /// Boxed as the core returns it: a running operation carries one word for it.
    pub(super) result: Option<Box<ToolResult>>,
    /// Callers waiting for another thread's pump to run their effects: the pump signals
    /// progress only when there are some.
    pub(super) waiting: usize,
    /// The driver's one waker slot: filled when it goes to sleep, taken by the first input
    /// that needs it awake.
    pub(super) waker: Option<Waker>,
    /// Until when the driver sleeps, while its waker is in the slot.
    pub(super) nap: NapEnd,
    /// The driver sleeps on a clock that wakes it itself ([`Napping::Clock`], a virtual
    /// clock), which must hear when its calls are all back.
    pub(super) on_clock: bool,
    /// Calls for the driver to start, taken by a pump on another thread.
    pub(super) for_driver: Vec<DriverCall>,
}

impl State {
    pub(super) fn new(flow: Flow) -> Self {
        State {
            flow,
            drained: 0,
            pump: None,
            result: None,
            waiting: 0,
            waker: None,
            nap: NapEnd::NONE,
            on_clock: false,
            for_driver: Vec::new(),
        }
    }

    /// Whether every effect so far ran: none queued, and no pump running one.
    pub(super) fn ran_all(&self) -> bool {
        self.pump.is_none() && !self.flow.has_effects()
    }

    /// Whether an input that left no effect changes what the sleeping driver napped on. An
    /// input that moves the next wake-up no earlier (a tick's later reads answered on another
    /// thread) lets it sleep on. On a virtual clock the last call answered wakes it anyway:
    /// it naps again with none out, which that clock waits for before it moves time.
    pub(super) fn moves_driver(&self) -> bool {
        if self.on_clock && self.flow.calls_in_flight() == 0 {
            return true;
        }
        match (self.flow.poll_timeout(), self.nap.get()) {
            (Some(wake), Some(until)) => wake.at < until,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// The driver's step takes the calls it starts itself at the head of the flow's queue,
    /// while no pump runs. The first other effect is taken too, into `first`, and the step
    /// becomes the pump that runs it: what follows it waits behind it.
    #[inline]
    pub(super) fn take_calls(
        &mut self,
        driver_calls: bool,
        calls: &mut Vec<DriverCall>,
        first: &mut Option<Effect>,
    ) {
        // A tick's account reads mostly cause nothing: no call out of line for an empty queue.
        if driver_calls && self.flow.has_effects() && self.pump.is_none() {
            self.take_calls_from_queue(calls, first);
        }
    }

    /// [`State::take_calls`] when the flow has effects and no pump runs.
    fn take_calls_from_queue(&mut self, calls: &mut Vec<DriverCall>, first: &mut Option<Effect>) {
        while let Some(effect) = self.flow.poll_effect() {
            match effect {
                Effect::Call { id, call } => calls.push((id, call)),
                other => {
                    *first = Some(other);
                    self.pump = Some(std::thread::current().id());
                    return;
                }
            }
        }
    }

    /// Whether the driver may return: the flow returned, every effect ran, the result is here.
    pub(super) fn is_finished(&self) -> bool {
        self.result.is_some() && self.flow.is_done() && self.pump.is_none()
    }

    /// The driver goes to sleep until `until` (the flow's next wake-up): its clock says how,
    /// and its waker takes the slot.
    pub(super) fn park(
        &mut self,
        clock: &dyn Clock,
        waker: &Waker,
        until: Option<Timestamp>,
    ) -> Option<Instant> {
        let nap = Nap {
            until,
            calls_in_flight: self.flow.calls_in_flight(),
        };
        self.nap = NapEnd::of(until);
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

/// Until when a driver sleeps, in one word (an `Option<Timestamp>` takes two): a parked
/// operation's state, which its tick reads from memory gone cold, grows by no more.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct NapEnd(u64);

impl NapEnd {
    /// Until woken.
    const NONE: NapEnd = NapEnd(u64::MAX);

    /// A nap until the reserved value (the year 2554) is kept as one until woken: it changes
    /// nothing the driver does.
    fn of(until: Option<Timestamp>) -> Self {
        until.map_or(NapEnd::NONE, |at| NapEnd(at.as_nanos()))
    }

    fn get(self) -> Option<Timestamp> {
        (self != NapEnd::NONE).then(|| Timestamp::from_nanos(self.0))
    }
}
