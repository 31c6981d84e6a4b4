//! # connop (Python)
//!
//! The Python module `connop`: connection operations run by `connop-blocking` on the
//! caller's thread, with the GIL released while they wait. Every rule is the core's; this
//! crate only carries Python objects in and out:
//!
//! - `manage_connections(args, *, session_key, gateway, …) -> str` ([`tool`]);
//! - the registry, operation handles and interrupt tokens ([`handle`]);
//! - tool gateways: connop's HTTP client, or any Python object with the original client's
//!   three methods ([`gateway`]);
//! - the contract's enums ([`enums`]) and exceptions ([`errors`]).
//!
//! The stub `connop.pyi` beside this crate's manifest types the module for Python tools.

mod compat;
mod convert;
mod enums;
mod errors;
mod gateway;
mod handle;
mod tool;
mod transport;

use pyo3::prelude::*;

/// The process's registry: the session's unsettled operation, or `None`.
#[pyfunction]
fn current(py: Python<'_>, session_key: &str) -> Option<handle::PyOperation> {
    py.detach(|| handle::default_registry().current(session_key))
        .map(handle::PyOperation::from)
}

/// The process's registry: the session's operation with that id, settled or not.
#[pyfunction]
fn get(py: Python<'_>, session_key: &str, op_id: &str) -> Option<handle::PyOperation> {
    let op_id = connop_core::operation::OpId::parse(op_id)?;
    py.detach(|| handle::default_registry().get(session_key, op_id))
        .map(handle::PyOperation::from)
}

/// Calls into Python from threads Python did not start (the call pool's), and whether the
/// interpreter is shutting down: such a thread inside Python while the interpreter finalizes
/// crashes the process (its thread state is no longer current when it lets go). `atexit`
/// closes the door and waits for those inside to leave.
mod interpreter_exit {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    static EXITING: AtomicBool = AtomicBool::new(false);
    static INSIDE: AtomicUsize = AtomicUsize::new(0);

    /// Leaves Python when dropped.
    pub struct Inside(());

    impl Drop for Inside {
        fn drop(&mut self) {
            INSIDE.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Enters Python from a foreign thread, unless the interpreter is shutting down.
    pub fn enter() -> Option<Inside> {
        INSIDE.fetch_add(1, Ordering::SeqCst);
        let inside = Inside(());
        (!EXITING.load(Ordering::SeqCst)).then_some(inside)
    }

    /// The `atexit` hook: no foreign thread enters from now on; those inside get up to a
    /// second to leave (they need the GIL, which the caller has let go).
    pub fn close() {
        EXITING.store(true, Ordering::SeqCst);
        let until = Instant::now() + Duration::from_secs(1);
        while INSIDE.load(Ordering::SeqCst) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

pub(crate) use interpreter_exit::enter as enter_python;

/// Registered with `atexit`: see [`interpreter_exit`].
#[pyfunction]
fn close_for_exit(py: Python<'_>) {
    py.detach(interpreter_exit::close);
}

#[pymodule]
fn connop(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    py.import("atexit")?
        .call_method1("register", (wrap_pyfunction!(close_for_exit, m)?,))?;
    // Whichever thread imports the module: Python names its main thread the same from all.
    let main: u64 = py
        .import("threading")?
        .call_method0("main_thread")?
        .getattr("ident")?
        .extract()?;
    let _ = tool::MAIN_THREAD.set(main);
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "__doc__",
        "connop: connection operations for AI-agent gateways, run by connop's blocking \
         runtime.\n\n``manage_connections`` runs one tool call on the calling thread and \
         releases the GIL while it waits. Other threads reach the operation through the \
         registry (``current``, ``get``), its ``Operation`` handle, or an ``Interrupt`` token. \
         Every rule (legal moves, when to settle, what the result holds) is decided by \
         connop's core.",
    )?;
    m.add_function(wrap_pyfunction!(tool::manage_connections, m)?)?;
    m.add_function(wrap_pyfunction!(current, m)?)?;
    m.add_function(wrap_pyfunction!(get, m)?)?;
    m.add_class::<handle::PyRegistry>()?;
    m.add_class::<handle::PyOperation>()?;
    m.add_class::<handle::PyInterrupt>()?;
    m.add_class::<gateway::PyHttpGateway>()?;
    m.add_class::<transport::PyTransportGateway>()?;
    m.add("RateLimited", gateway::rate_limited_type(py)?)?;
    m.add_function(wrap_pyfunction!(compat::contract_table, m)?)?;
    m.add_function(wrap_pyfunction!(compat::allowed, m)?)?;
    m.add_function(wrap_pyfunction!(compat::check_args, m)?)?;
    m.add_function(wrap_pyfunction!(compat::gateway_failed, m)?)?;
    m.add_function(wrap_pyfunction!(compat::tool_schema, m)?)?;
    m.add_class::<enums::PyTargetState>()?;
    m.add_class::<enums::PyActor>()?;
    m.add_class::<enums::PySettleReason>()?;
    m.add_class::<enums::PyKind>()?;
    m.add_class::<enums::PyTargetAction>()?;
    m.add("ConnopError", py.get_type::<errors::ConnopError>())?;
    let value_errors = errors::value_errors(py)?;
    m.add(
        "IllegalTransition",
        value_errors.illegal_transition.bind(py),
    )?;
    m.add("InvalidAnswer", value_errors.invalid_answer.bind(py))?;
    m.add("NoOperation", py.get_type::<errors::NoOperation>())?;
    m.add(
        "OperationAlreadyOpen",
        py.get_type::<errors::OperationAlreadyOpen>(),
    )?;
    m.add(
        "GatewayClientError",
        py.get_type::<errors::GatewayClientError>(),
    )?;
    Ok(())
}
