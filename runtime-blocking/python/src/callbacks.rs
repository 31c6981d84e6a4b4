//! A Python host's callbacks as the operation's event sink: `on_card` gets the card request,
//! `on_update` every update frame, and an exception `on_card` raises waits for the thread
//! that waits on the operation.

use crate::convert::to_py;
use connop_blocking::EventSink;
use connop_core::flow::Event;
use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};

/// Where an exception `on_card` raised waits for the waiting thread, which settles the
/// operation `interrupt` and raises it: a card that could not be shown is never waited for.
#[derive(Clone)]
pub struct CardFailure {
    error: Arc<Mutex<Option<PyErr>>>,
    waiting: std::thread::Thread,
}

impl CardFailure {
    /// A slot for the call waiting on this thread.
    pub fn new() -> Self {
        CardFailure {
            error: Arc::default(),
            waiting: std::thread::current(),
        }
    }

    /// Keeps the first exception and wakes the waiting thread.
    fn put(&self, error: PyErr) {
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(error);
        self.waiting.unpark();
    }

    /// The exception, once.
    pub fn take(&self) -> Option<PyErr> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The card callback and the update callback as one event sink. `on_card` gets the card
/// request (`connection.request`'s payload) once; `on_update` every update frame, or, with
/// `updates_for` (a container of operation ids), only the frames of the operations in it,
/// asked frame by frame: a frame no one asked for is never built, and an id added while the
/// operation runs gets its frames from then on. They run with the GIL on the waiting thread
/// (gateway answers are fed there), or on the thread whose input caused them. An exception
/// in `on_card` goes to `card_failure`; one in `on_update` is reported as unraisable and
/// changes nothing (a missed frame is repaired by the next, which carries the whole view).
pub fn events(
    on_card: Option<Py<PyAny>>,
    on_update: Option<Py<PyAny>>,
    updates_for: Option<Py<PyAny>>,
    card_failure: Option<CardFailure>,
) -> EventSink {
    Arc::new(move |event: &Event| {
        let callback = match (event, &on_card, &on_update) {
            (Event::Request(_), Some(callback), _) | (Event::Update(_), _, Some(callback)) => {
                callback
            }
            _ => return,
        };
        // Not once the interpreter began to exit (a daemon thread may still pump then).
        let Some(_inside) = crate::exit::enter() else {
            return;
        };
        let _ = Python::try_attach(|py| {
            if let (Event::Update(frame), Some(wanted)) = (event, &updates_for) {
                let wanted = wanted.bind(py);
                // Nobody waiting is the common case: no id to build and hash then.
                if wanted.len().is_ok_and(|n| n == 0)
                    || !wanted.contains(frame.view.op_id.as_str()).unwrap_or(false)
                {
                    return;
                }
            }
            // A payload is built only for a callback that takes it.
            let payload = match event {
                Event::Request(card) => serde_json::to_value(card),
                Event::Update(frame) => serde_json::to_value(frame),
                _ => return,
            };
            let Ok(payload) = payload else { return };
            let callback = callback.bind(py);
            let outcome = to_py(py, &payload).and_then(|payload| callback.call1((payload,)));
            let Err(error) = outcome else { return };
            if error.is_instance_of::<PyKeyboardInterrupt>(py) {
                // SAFETY: the GIL is held; this only flags the signal again.
                unsafe { pyo3::ffi::PyErr_SetInterrupt() };
            } else if let (Event::Request(_), Some(failure)) = (event, &card_failure) {
                failure.put(error);
            } else {
                error.write_unraisable(py, Some(callback));
            }
        });
    })
}
