//! The interpreter's exit, with connop's threads still out.
//!
//! While CPython (before 3.14) finalizes, a thread other than the finalizing one that takes
//! the GIL is ended on the spot by `pthread_exit`. With Rust frames on its stack (a daemon
//! thread inside `manage_connections`, a call-pool thread running a gateway object) that
//! unwinding cannot pass them, and the process aborts. So every place this module takes the
//! GIL from a thread that let it go goes through a gate, and the gate closes before the
//! interpreter finalizes: an `atexit` hook ([`close`]) shuts it and waits for the threads
//! already through it to be done.
//!
//! Past the closed gate, a thread that was waiting without the GIL (a daemon thread's call,
//! a host thread's read) never takes it back: it stays parked, as CPython 3.14 parks its own
//! daemon threads, until the process ends. Python code the module would have called (a
//! gateway object's method, `on_card`, `on_update`, `hosted_names`) is not called: the
//! gateway call fails, the callback is skipped. The thread that runs the exit passes the gate
//! as before, so an exit hook registered after this module's (hooks run last registered
//! first) may still use connop.

use pyo3::prelude::*;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// Set by the `atexit` hook: the gate is shut.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Threads through the gate and not yet done: taking the GIL, or running Python code this
/// module called.
static INSIDE: AtomicUsize = AtomicUsize::new(0);
/// The thread that ran the hook: it runs the exit, which never ends it.
static EXITING_THREAD: OnceLock<ThreadId> = OnceLock::new();

/// How long the exit waits for Python code this module called to return. Code that runs
/// longer (a gateway method in a slow request) is left to the process's end; it cannot be
/// stopped from outside.
const WAIT_AT_EXIT: Duration = Duration::from_secs(1);

/// A thread through the gate; done when dropped.
pub struct Inside(());

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether this thread is the one running the interpreter's exit.
fn is_exiting_thread() -> bool {
    EXITING_THREAD.get() == Some(&std::thread::current().id())
}

/// Through the gate before taking the GIL to run Python code; `None` once the exit began.
/// Hold the guard until the Python code returned.
pub fn enter() -> Option<Inside> {
    INSIDE.fetch_add(1, Ordering::SeqCst);
    let inside = Inside(());
    (!EXITING.load(Ordering::SeqCst) || is_exiting_thread()).then_some(inside)
}

/// Through the gate before taking the GIL back; once the exit began, never returns (the
/// thread parks until the process ends). Drop the guard once the GIL is held.
fn reattach() -> Inside {
    match enter() {
        Some(inside) => inside,
        None => loop {
            std::thread::park();
        },
    }
}

/// `py.detach(f)`, taking the GIL back through the gate: a thread whose `f` returns after
/// the exit began stays parked instead.
pub fn detach<T, F>(py: Python<'_>, f: F) -> T
where
    F: Send + FnOnce() -> T,
    T: Send,
{
    let (value, inside) = py.detach(|| {
        let value = f();
        (value, reattach())
    });
    drop(inside);
    value
}

/// The `atexit` hook's work: shuts the gate, then waits (up to [`WAIT_AT_EXIT`]) for the
/// threads through it to be done. Runs without the GIL, which they may need.
pub fn close() {
    let _ = EXITING_THREAD.set(std::thread::current().id());
    EXITING.store(true, Ordering::SeqCst);
    let until = Instant::now() + WAIT_AT_EXIT;
    while INSIDE.load(Ordering::SeqCst) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1));
    }
}
