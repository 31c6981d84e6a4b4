//! The effect runner, the pump: takes the flow's effects one by one, in order, and executes
//! each outside the lock; and how a caller waits for another thread's pump.

use super::shared::{OpHandle, lock};
use connop_core::flow::Effect;
use event_listener::Listener;
use std::cell::Cell;

/// How a thread waits for another thread's pump: given the wait, it runs it.
pub type WaitThrough = fn(&mut (dyn FnMut() + Send));

thread_local! {
    /// This thread's [`WaitThrough`], set for the span of [`waiting_through`].
    pub(super) static WAIT_THROUGH: Cell<Option<WaitThrough>> = const { Cell::new(None) };
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

impl OpHandle {
    /// Runs every effect queued so far on this thread (or waits for the pump that does).
    pub(crate) fn run_queued(&self) {
        let mark = {
            let state = self.lock();
            if state.ran_all() {
                return;
            }
            state.drained
        };
        self.pump_until(mark);
    }

    /// Returns once a pump ran the queue empty after `mark` (the state's `drained` when the
    /// caller's input left effects): pumps itself when no one does, waits for the pump
    /// otherwise, and returns at once when re-entered from its own pump's callback.
    pub(super) fn pump_until(&self, mark: u64) {
        let me = std::thread::current().id();
        loop {
            {
                let mut state = self.lock();
                if state.drained > mark {
                    return;
                }
                match state.pump {
                    None => state.pump = Some(me),
                    // Re-entered from our own callback: the outer pump runs it.
                    Some(pump) if pump == me => return,
                    Some(_) => {
                        let listener = self.0.progress.listen();
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
            self.run_pump(None);
        }
    }

    /// The pump, on the thread named in the state: executes `first` (an effect already taken),
    /// then the flow's queued effects in order, outside the lock, until none is left; then
    /// gives the pump up, tells the waiting callers and wakes the driver. A call the driver
    /// starts itself is handed over to it as it is taken.
    pub(super) fn run_pump(&self, mut first: Option<Effect>) {
        let driver_calls = self.0.env.calls.is_none();
        loop {
            let effect = match first.take() {
                Some(effect) => effect,
                None => {
                    let mut state = self.lock();
                    let next = loop {
                        match state.flow.poll_effect() {
                            // The driver starts it: handed over under this lock.
                            Some(Effect::Call { id, call }) if driver_calls => {
                                state.for_driver.push((id, call));
                            }
                            other => break other,
                        }
                    };
                    match next {
                        Some(effect) => effect,
                        None => {
                            state.pump = None;
                            state.drained += 1;
                            let signal = state.waiting > 0;
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
                }
            };
            self.execute(effect);
        }
    }

    fn execute(&self, effect: Effect) {
        let env = &self.0.env;
        match effect {
            Effect::Register { key, .. } => {
                // A registry the host dropped can hold nothing: the operation goes on
                // unregistered, as after a close.
                // Operations the registry retired are let go here, outside its lock.
                let (answer, retired) = match env.registry.upgrade() {
                    Some(registry) => lock(&registry).open_retiring(key, self.clone()),
                    None => (Ok(()), Vec::new()),
                };
                drop(retired);
                let mut state = self.lock();
                let now = env.clock.now();
                state.flow.handle_registered(answer, now);
            }
            Effect::Call { id, call } => match &env.calls {
                Some(starter) => starter.start(self, id, call),
                // Handed over as it is taken (see `run_pump`); one taken first comes here.
                None => self.lock().for_driver.push((id, call)),
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
}
