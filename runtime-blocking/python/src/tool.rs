//! `manage_connections` for a Python host: the blocking driver's loop on the calling thread,
//! with the GIL released while it waits, and Ctrl-C heard on the main thread.

use crate::convert::{from_py, to_py};
use crate::gateway::{PyCalls, PyGateway, PyHttpGateway, seconds};
use crate::handle::{PyInterrupt, PyRegistry, default_registry};
use connop_blocking::{EventSink, Next, OpHandle, ToolContext};
use connop_core::flow::{Event, Surface};
use connop_core::tool_gateway::BlockingToolGateway;
use pyo3::exceptions::{PyKeyboardInterrupt, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use serde_json::Value;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How often the main thread looks for a pending signal while it waits. Python runs signal
/// handlers on the main thread only, and only when that thread holds the GIL; other threads
/// never slice their sleep.
const SIGNAL_CHECK: Duration = Duration::from_millis(20);

/// The main thread's Python identity (`threading.main_thread().ident`), where Python runs
/// signal handlers.
pub static MAIN_THREAD: OnceLock<u64> = OnceLock::new();

/// Whether this thread is Python's main thread.
fn on_main_thread(py: Python<'_>) -> PyResult<bool> {
    let this: u64 = py.import("_thread")?.call_method0("get_ident")?.extract()?;
    Ok(MAIN_THREAD.get() == Some(&this))
}

/// The card callback and the update callback as one event sink. `on_card` gets the card
/// request (`connection.request`'s payload) once; `on_update` every update frame. They run
/// with the GIL on the waiting thread (gateway answers are fed there), or on the thread whose
/// input caused them; an exception in them is reported as unraisable and changes nothing.
pub fn events(on_card: Option<Py<PyAny>>, on_update: Option<Py<PyAny>>) -> EventSink {
    Arc::new(move |event: &Event| {
        // A payload is built only for a callback that takes it.
        let (callback, payload) = match (event, &on_card, &on_update) {
            (Event::Request(card), Some(callback), _) => (callback, serde_json::to_value(card)),
            (Event::Update(frame), _, Some(callback)) => (callback, serde_json::to_value(frame)),
            _ => return,
        };
        let Ok(payload) = payload else { return };
        // Not after the interpreter began shutting down (a daemon thread may still pump then).
        let _ = Python::try_attach(|py| {
            let callback = callback.bind(py);
            let outcome = to_py(py, &payload).and_then(|payload| callback.call1((payload,)));
            if let Err(error) = outcome {
                if error.is_instance_of::<PyKeyboardInterrupt>(py) {
                    // SAFETY: the GIL is held; this only flags the signal again.
                    unsafe { pyo3::ffi::PyErr_SetInterrupt() };
                } else {
                    error.write_unraisable(py, Some(callback));
                }
            }
        });
    })
}

/// Runs one `manage_connections` tool call on this thread and returns its JSON result.
///
/// `args`: `{"action", "connectors", "force"}` (or that as JSON text). `surface`: `desktop`,
/// `tui`, `cli`, a messaging platform, or empty; with `on_card` and a surface that has a
/// card, the call blocks until the operation settles (the card path), otherwise it returns
/// the links at once. `on_card` gets the card request once, `on_update` every update frame.
/// `gateway`: an `HttpGateway`, or any object with `list_connectors`, `connections` and
/// `account_status`. `hosted_names` answers the misroute check instead of the connector
/// list. `calls`: `"worker"` (the default: calls run off the waiting thread, on a shared pool,
/// so the deadline, an interrupt and a card answer never wait for a slow call, nor one row's
/// read for another's; their answers are fed on the waiting thread) or `"inline"` (on the
/// waiting thread: only for a gateway that answers at once; reads then go out one at a time,
/// each with the time then left, none once the deadline came). The GIL is released while the
/// call waits; Ctrl-C on the main thread settles the operation `interrupt` and the call
/// returns that result. `dialect`: `"connop"` (the default) or `"original"` (the original
/// agent system's words and argument forms); `available=False` refuses valid arguments.
#[pyfunction]
#[pyo3(signature = (
    args, *, session_key, gateway, surface="", on_card=None, on_update=None, tick=1.0,
    deadline=300.0, local_catalog=Vec::new(), hosted_names=None, tool_call_id=None,
    return_to=None, desktop_return_to=None, interrupt=None, registry=None,
    agent_session_id=None, calls=None, dialect=None, available=true
))]
#[allow(clippy::too_many_arguments)]
pub fn manage_connections(
    py: Python<'_>,
    args: &Bound<'_, PyAny>,
    session_key: &str,
    gateway: &Bound<'_, PyAny>,
    surface: &str,
    on_card: Option<Py<PyAny>>,
    on_update: Option<Py<PyAny>>,
    tick: f64,
    deadline: f64,
    local_catalog: Vec<String>,
    hosted_names: Option<Py<PyAny>>,
    tool_call_id: Option<String>,
    return_to: Option<String>,
    desktop_return_to: Option<String>,
    interrupt: Option<PyRef<'_, PyInterrupt>>,
    registry: Option<PyRef<'_, PyRegistry>>,
    agent_session_id: Option<String>,
    calls: Option<&str>,
    dialect: Option<&str>,
    available: bool,
) -> PyResult<String> {
    let args: Value = match args.cast::<PyString>() {
        Ok(text) => serde_json::from_str(&text.to_cow()?)
            .map_err(|e| PyValueError::new_err(format!("args is not JSON: {e}")))?,
        Err(_) => from_py(args)?,
    };
    let gateway: Arc<dyn BlockingToolGateway> = match gateway.extract::<PyRef<'_, PyHttpGateway>>()
    {
        Ok(http) => http.inner.clone(),
        Err(_) => match gateway.cast::<crate::transport::PyTransportGateway>() {
            // The host's transport through connop's rules (its Python runs on this thread).
            Ok(client) => client.get().inner.clone(),
            Err(_) => Arc::new(PyGateway::new(gateway.clone().unbind())),
        },
    };
    let inline = match calls {
        None => false,
        Some("inline") => true,
        Some("worker") => false,
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "calls must be 'inline' or 'worker', not {other:?}"
            )));
        }
    };
    let registry = registry.map_or_else(|| default_registry().clone(), |r| r.inner.clone());
    let mut context: ToolContext<dyn BlockingToolGateway> =
        ToolContext::new(registry, session_key, gateway.clone());
    context.surface = Surface::parse(surface);
    context.events = on_card.map(|card| events(Some(card), on_update));
    context.tick = seconds(tick, "tick")?;
    context.deadline = seconds(deadline, "deadline")?;
    context.local_catalog = local_catalog.iter().map(|n| n.as_str().into()).collect();
    context.tool_call_id = tool_call_id.map(Into::into);
    context.return_to = return_to.map(Into::into);
    if let Some(name) = desktop_return_to {
        context.desktop_return_to = name.into();
    }
    context.interrupt = interrupt.map(|i| i.inner.clone());
    context.agent_session_id = agent_session_id.map(Into::into);
    context.dialect = crate::compat::dialect(dialect)?;
    context.available = available;
    // Calls on this thread run one at a time: the watcher hands them out so.
    context.serial_calls = inline;
    // No call starter: the calls come out of the driver's step (see `PyCalls`).
    context.calls = None;
    let calls = PyCalls::new(gateway, inline, hosted_names, std::thread::current());

    let main = on_main_thread(py)?;
    let op = context.start(&args, None);
    let signal = py.detach(|| drive(&op, &calls, main));
    let result = op.finished_result();
    match signal {
        // Ctrl-C is the stop button: the operation settled `interrupt`, and that is the answer.
        Some(error) if !error.is_instance_of::<PyKeyboardInterrupt>(py) => Err(error),
        _ => Ok(result.to_json()),
    }
}

/// The blocking driver's loop: feed the answers that arrived, step, start the calls it hands
/// out (`calls`), park until the next wake-up, an answer or a change. On the main thread the
/// park is cut every [`SIGNAL_CHECK`] to run Python's signal handlers, just before parking
/// again: a wake-up goes straight to the step that finishes, without taking the GIL. An
/// exception from a handler (Ctrl-C's `KeyboardInterrupt`) interrupts the operation and is
/// returned once it finished.
fn drive(op: &OpHandle, calls: &PyCalls, main: bool) -> Option<PyErr> {
    let waker = connop_blocking::driver::thread_waker();
    let (mut answers, mut started) = (Vec::new(), Vec::new());
    let mut signal = None;
    loop {
        calls.collect(&mut answers);
        let mut start = |started: &mut Vec<_>, answers: &mut Vec<_>| {
            calls.start(op, started, answers)
        };
        let until = match op.step(&mut answers, &mut started, &mut start, &waker) {
            Next::Finished => return signal,
            Next::Sleep(until) => until,
        };
        let left = until.map(|at| at.saturating_duration_since(Instant::now()));
        if !main || signal.is_some() {
            match left {
                Some(left) => std::thread::park_timeout(left),
                None => std::thread::park(),
            }
            continue;
        }
        if let Err(error) = Python::attach(|py| py.check_signals()) {
            signal = Some(error);
            // Settles now; the next step finishes.
            op.interrupt();
            continue;
        }
        std::thread::park_timeout(left.map_or(SIGNAL_CHECK, |left| left.min(SIGNAL_CHECK)));
    }
}
