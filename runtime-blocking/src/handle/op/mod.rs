//! One running operation, shared by the driver that waits for its result and by every other
//! thread or task that answers the card, interrupts it, or delivers a gateway answer.
//!
//! A driver asks one question, [`OpHandle::step`]: "at the clock's now, with these answers,
//! what next?" It waits through one [`Waker`](std::task::Waker) slot, woken by any input from
//! elsewhere; the blocking driver's waker unparks its thread, smol's reschedules its task.
//!
//! By trade: `state` is what the lock guards, `shared` the handle and what it reads,
//! `inputs` the inputs from anywhere, `step` the driver's question, and `effects` the effect
//! runner (the pump). This module only presents them.
//!
//! # Invariants
//!
//! 1. **One lock, one queue.** The flow changes only by an input fed under the operation's
//!    lock. Its effects stay in the flow's own queue until taken, one by one and in order,
//!    with [`Flow::poll_effect`](connop_core::flow::Flow::poll_effect); the handle keeps no
//!    queue of its own, so a settle withdraws every call not yet taken (the core's rule).
//! 2. **One pump.** At most one thread at a time takes effects to execute them (the pump,
//!    named in the state): each is taken under the lock and executed outside it. A pump
//!    re-entered from one of its own callbacks (a card callback calling back into the handle,
//!    a gateway call settling the operation) never waits: it returns, and the outer pump runs
//!    what the inner input queued once the callback is back.
//! 3. **Calls leave at the head.** A gateway call the driver starts itself leaves the queue
//!    only at its head: taken by the driver's step while no pump runs, or handed over by the
//!    pump. No call starts ahead of an effect queued before it.
//! 4. **An input returns after its effects.** A caller whose input left effects (or found a
//!    pump running) returns only once the pump ran the queue empty after its input: every
//!    effect it caused, and every one queued before, ran (so a card answer that settles
//!    replies after the registry entry closed and the settle frame went out).
//! 5. **One wake-up slot.** A sleeping driver leaves its waker and the instant it sleeps
//!    until. An input takes the waker only when the driver must act: it moved the next
//!    wake-up earlier, it ended the operation, or (on a clock that waits for calls) it
//!    answered the last call out; otherwise the pump wakes it once the queue is empty.
//! 6. **The next wake-up is the core's.** It is asked of the flow
//!    ([`Flow::poll_timeout`](connop_core::flow::Flow::poll_timeout)) whenever it is needed,
//!    never kept: the handle keeps only the instant its driver sleeps until.
//! 7. **The result is handed over once.** [`Effect::Return`](connop_core::flow::Effect::Return)
//!    moves the frozen result out of the core into the handle, which keeps that one copy.
//! 8. **The driver finishes last.** [`Next::Finished`] comes only once the flow returned, its
//!    queue is empty, no pump runs, and no caller is still on its way back from waiting for
//!    the pump (the code a caller runs right after its input runs before the driver's
//!    caller does).

mod effects;
mod inputs;
mod shared;
mod state;
mod step;

pub use effects::{WaitThrough, waiting_through};
pub use shared::{CallStarter, EventSink, OpHandle, OpShared};
pub(crate) use shared::{OpEnv, RegistryCell, lock};
pub use state::DriverCall;
pub use step::{CallAnswer, CallsStarted, Next, StartCalls};
