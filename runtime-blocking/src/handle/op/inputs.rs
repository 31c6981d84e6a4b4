//! The inputs from anywhere: a card answer, Continue, an interrupt, a host's move, a gateway
//! answer. Each is fed under the lock; its caller then runs the effects it left (or waits for
//! the pump that does) and wakes the driver if it must act.

use super::effects::WAIT_THROUGH;
use super::shared::OpHandle;
use connop_core::card::{CardAnswer, CardReply};
use connop_core::contract::{Actor, SettleReason, TargetState};
use connop_core::error::CallerError;
use connop_core::flow::Flow;
use connop_core::operation::{ChangeRecord, OpId, Patch, Text};
use connop_core::time::Timestamp;
use connop_core::tool_gateway::{CallId, GatewayCall, GatewayError, GatewayReply};

impl OpHandle {
    /// A card answer (docs/contract.md#card-answers). Returns after the effects it caused were
    /// executed.
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

    /// Registers a detached operation
    /// ([`ToolContext::detached`](crate::handle::ToolContext::detached)) under its session key
    /// (and `profile`, when given): refused, with the open operation's id, when the session
    /// has an unsettled one; the operation then goes on unregistered. Only for a detached
    /// operation that has not settled.
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

    /// Settles `all_resolved` if every target resolved; returns whether this call settled.
    pub fn settle_if_all_resolved(&self) -> bool {
        self.apply(|flow, now| flow.handle_settle_if_all_resolved(now))
    }

    /// The browser came back from the vendor (docs/contract.md#return-hints): reads the named live
    /// row (every live row when `None`) at once, or right after the read it has out. Returns
    /// whether a live row was there to read; an unknown name is refused. The driver wakes for the
    /// reads this starts, like for any other input.
    pub fn return_hint(&self, target: Option<&str>) -> Result<bool, CallerError> {
        self.apply(|flow, now| flow.handle_return_hint(target, now))
    }

    /// A gateway answer, from whatever ran the call.
    pub fn deliver(&self, id: CallId, result: Result<GatewayReply, GatewayError>) {
        let fed = self.apply(|flow, now| flow.handle_gateway(id, result, now));
        debug_assert!(fed.is_ok(), "a reply of the wrong kind: {fed:?}");
    }

    /// Feeds one input under the lock, then executes what it left (or waits for the pump
    /// that does), wakes the driver, and returns the input's own answer.
    fn apply<R>(&self, input: impl FnOnce(&mut Flow, Timestamp) -> R) -> R {
        let (answer, mark, waker) = {
            let mut state = self.lock();
            let now = self.0.env.clock.now();
            let answer = input(&mut state.flow, now);
            // Nothing to run: the driver's waker is taken under this same lock if the input
            // changed what it napped on (`moves_driver`). The operation ended: it is taken
            // now too, and the driver woken before the effects run, so that they run while
            // its thread wakes (a wake-up costs more than they do); a driver that finds them
            // still running sleeps again, and the pump wakes it. Not for a caller holding its
            // host's lock (see [`waiting_through`](super::waiting_through)): that driver
            // returns only once the lock is free, and the lock stays taken while the effects
            // run. Otherwise the pump wakes it once the effects ran.
            let ran_all = state.ran_all();
            let waker = if state.waker.is_some()
                && ((ran_all && state.moves_driver())
                    || (state.flow.has_returned() && WAIT_THROUGH.get().is_none()))
            {
                state.waker.take()
            } else {
                None
            };
            (answer, (!ran_all).then_some(state.drained), waker)
        };
        if let Some(waker) = waker {
            waker.wake();
        }
        if let Some(mark) = mark {
            self.pump_until(mark);
        }
        answer
    }
}
