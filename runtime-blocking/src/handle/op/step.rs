//! The driver's one question, [`OpHandle::step`]: at the clock's now, with these answers,
//! what next?

use super::shared::OpHandle;
use super::state::DriverCall;
use connop_core::tool_gateway::{CallId, GatewayError, GatewayReply};
use std::time::Instant;

/// A gateway answer as a driver collects it.
pub type CallAnswer = (CallId, Result<GatewayReply, GatewayError>);

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
pub enum CallsStarted {
    /// Known at once (an in-process gateway, a ready future), or none: the step feeds them at
    /// the instant it read, not reading the clock again.
    AtOnce,
    /// Some took time (a call run on this thread): the step reads the clock again.
    AfterWaiting,
}

/// How a driver starts the calls its step hands out: drains `calls`, puts the answers known at
/// once in `answers`, and says how they came. It runs outside the operation's lock (a call
/// may reach the operation), within [`OpHandle::step`].
pub type StartCalls<'a> =
    dyn FnMut(&mut Vec<DriverCall>, &mut Vec<CallAnswer>) -> CallsStarted + 'a;

impl OpHandle {
    /// The driver's one question: at the clock's now, feed `answers` (drained), fire the
    /// timers that are due, run the effects that caused, and say what next. Calls the driver
    /// starts itself (an operation started without a
    /// [`CallStarter`](super::CallStarter)) go to `start`, through `calls`, and the answers
    /// it knows at once are fed in this same step: a parked tick whose reads answer at once is
    /// one step, one clock read. A driver that sleeps registers `waker` here: any later input
    /// wakes it.
    pub fn step(
        &self,
        answers: &mut Vec<CallAnswer>,
        calls: &mut Vec<DriverCall>,
        start: &mut StartCalls<'_>,
        waker: &std::task::Waker,
    ) -> Next {
        let env = &self.0.env;
        let clock = &*env.clock;
        let driver_calls = env.calls.is_none();
        let mut now = clock.now();
        loop {
            let mut state = self.lock();
            // Running: the driver's own changes need no wake-up.
            state.waker = None;
            // An effect other than a call this step took: it pumps, starting with that one.
            let mut first = None;
            for (id, answer) in answers.drain(..) {
                let fed = state.flow.handle_gateway(id, answer, now);
                debug_assert!(fed.is_ok(), "a reply of the wrong kind: {fed:?}");
                state.take_calls(driver_calls, calls, &mut first);
            }
            // The next wake-up as the flow says now; `None` once a timeout fed here moved it.
            let mut wake = Some(state.flow.poll_timeout().map(|wake| wake.at));
            if wake.flatten().is_some_and(|at| at <= now) {
                state.flow.handle_timeout(now);
                state.take_calls(driver_calls, calls, &mut first);
                wake = None;
            }
            if !state.for_driver.is_empty() {
                calls.append(&mut state.for_driver);
            }
            if state.for_driver.capacity() > 0 {
                // Handed over by another thread's pump, which is rare: keep no room for it.
                state.for_driver = Vec::new();
            }
            // The driver's own calls at the head of the queue (another thread's input queued
            // them) need no pump: they are taken here, under the lock this step holds anyway.
            state.take_calls(driver_calls, calls, &mut first);
            if first.is_some() {
                drop(state);
                self.run_pump(first);
                now = clock.now();
                continue;
            }
            let pumped_elsewhere = state.pump.is_some();
            let ran_all = state.ran_all();
            // A caller still on its way back from waiting for a pump (to its host's lock, as
            // Python's GIL) wakes the driver when it is back: the code it runs right after its
            // input must run before the driver's caller does, as in a single-lock host. Calls
            // this step took itself start first, even then.
            let own_calls = !calls.is_empty() && ran_all;
            if !own_calls && state.is_finished() && state.waiting == 0 {
                drop(state);
                clock.finished(waker);
                return Next::Finished;
            }
            // Calls start when nothing is queued before them, or when another thread's pump
            // (which handed some over) runs the rest; their answers, often known at once, are
            // fed on the next turn of this loop.
            if !calls.is_empty() && (ran_all || pumped_elsewhere) {
                drop(state);
                if start(calls, answers) == CallsStarted::AfterWaiting {
                    now = clock.now();
                }
                continue;
            }
            if ran_all || pumped_elsewhere {
                // Nothing to run, or another thread runs it and wakes us when done.
                let until = match wake {
                    Some(until) => until,
                    None => state.flow.poll_timeout().map(|wake| wake.at),
                };
                return Next::Sleep(state.park(clock, waker, until));
            }
            // Read only here: a steady tick never pumps.
            state.pump = Some(std::thread::current().id());
            drop(state);
            self.run_pump(None);
            now = clock.now();
        }
    }
}
