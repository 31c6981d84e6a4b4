//! # connop (Python)
//!
//! The Python module `connop`: connection operations run by `connop-blocking` on the
//! caller's thread, with the GIL released while they wait. Every rule is the core's; this
//! crate only carries Python objects in and out:
//!
//! - `manage_connections(args, *, session_key, gateway, …) -> str` (`src/tool.rs`);
//! - the registry, operation handles and interrupt tokens (`src/handle.rs`);
//! - the host's card and update callbacks as the operation's event sink (`src/callbacks.rs`);
//! - tool gateways: connop's HTTP client, or any Python object with the original client's
//!   three methods (`src/gateway.rs`);
//! - the contract's enums (`src/enums.rs`) and exceptions (`src/errors.rs`).
//!
//! The stub `connop.pyi` beside this crate's manifest types the module for Python tools;
//! `docs/python.md` is the contract it follows.

mod callbacks;
mod compat;
mod convert;
mod enums;
mod errors;
mod exit;
mod gateway;
mod handle;
mod tool;
mod transport;

use pyo3::prelude::*;

/// The process's registry: the session's unsettled operation, or `None`.
#[pyfunction]
fn current(py: Python<'_>, session_key: &str) -> Option<handle::PyOperation> {
    exit::detach(py, || handle::default_registry().current(session_key))
        .map(handle::PyOperation::from)
}

/// The process's registry: the session's operation with that id, open or settled (see
/// `Registry.get` for when a settled one is forgotten).
#[pyfunction]
fn get(py: Python<'_>, session_key: &str, op_id: &str) -> Option<handle::PyOperation> {
    let op_id = connop_core::operation::OpId::parse(op_id)?;
    exit::detach(py, || handle::default_registry().get(session_key, op_id))
        .map(handle::PyOperation::from)
}

pub(crate) use exit::enter as enter_python;

/// Registered with `atexit`: see [`exit`].
#[pyfunction]
fn close_for_exit(py: Python<'_>) {
    py.detach(exit::close);
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
         connop's core. The contract the module follows (arguments, returns, exceptions, \
         threads, payloads, limits) is docs/python.md in connop's repository.",
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
    m.add_function(wrap_pyfunction!(compat::surface_of_platform, m)?)?;
    m.add_function(wrap_pyfunction!(compat::getenv, m)?)?;
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
