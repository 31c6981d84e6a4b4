//! `manage_connections` for a Python host: the blocking driver's loop on the calling thread,
//! with the GIL released while it waits, and Ctrl-C heard on the main thread.

use crate::callbacks::{CardFailure, events};
use crate::convert::from_py;
use crate::gateway::{PyCalls, PyGateway, PyHttpGateway, seconds};
use crate::handle::{PyInterrupt, PyRegistry, default_registry};
use connop_blocking::{Next, OpHandle, ToolContext};
use connop_core::flow::{MIN_TICK, OperationOptions, Surface};
use connop_core::tool::{Dialect, ToolResult};
use connop_core::tool_gateway::BlockingToolGateway;
use pyo3::exceptions::{PyException, PyKeyboardInterrupt, PyTypeError, PyValueError};
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

thread_local! {
    /// Whether this OS thread is Python's main thread, asked once per thread (every tool
    /// call wants it; a thread's identity does not change).
    static ON_MAIN_THREAD: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Whether this thread is Python's main thread.
fn on_main_thread(py: Python<'_>) -> PyResult<bool> {
    if let Some(known) = ON_MAIN_THREAD.get() {
        return Ok(known);
    }
    let this: u64 = py.import("_thread")?.call_method0("get_ident")?.extract()?;
    let main = MAIN_THREAD.get() == Some(&this);
    ON_MAIN_THREAD.set(Some(main));
    Ok(main)
}

/// The surfaces a caller may name, and the messaging name that stands for every chat
/// platform (links, as `cli`).
const SURFACES: [&str; 5] = ["", "desktop", "tui", "cli", "messaging"];

/// `surface`, one of [`SURFACES`]; anything else is a `ValueError` that lists them and says
/// which was probably meant.
fn surface_of(surface: &str) -> PyResult<Surface> {
    if SURFACES.contains(&surface) {
        return Ok(Surface::parse(surface));
    }
    let named: Vec<&str> = SURFACES[1..].to_vec();
    let hint = connop_core::tool::did_you_mean(surface, &named)
        .map(|meant| format!(" (did you mean '{meant}'?)"))
        .unwrap_or_default();
    Err(PyValueError::new_err(format!(
        "surface must be '' (unset: a card when on_card is given), 'desktop' or 'tui' (a \
         card), or 'cli' or 'messaging' (links, no card), not '{surface}'{hint}"
    )))
}

/// A callback argument: callable, or `None`.
fn callable(value: Option<Py<PyAny>>, py: Python<'_>, what: &str) -> PyResult<Option<Py<PyAny>>> {
    match value {
        Some(callback) if !callback.bind(py).is_callable() => Err(PyTypeError::new_err(format!(
            "{what} must be a callable or None, not {}",
            type_name(callback.bind(py))
        ))),
        other => Ok(other),
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".into())
}

/// The methods a gateway object answers.
const GATEWAY_METHODS: [&str; 3] = ["list_connectors", "connections", "account_status"];

/// `gateway`: connop's HTTP client, or an object with at least one of the gateway methods
/// (one it lacks is a failed call of that kind). `None`, a URL string, a class instead of an
/// instance, or an object with none of them is a `TypeError`.
fn gateway_of(gateway: &Bound<'_, PyAny>) -> PyResult<Arc<dyn BlockingToolGateway>> {
    if let Ok(http) = gateway.extract::<PyRef<'_, PyHttpGateway>>() {
        return Ok(http.inner.clone());
    }
    if let Ok(client) = gateway.cast::<crate::transport::PyTransportGateway>() {
        // The host's transport through connop's rules (its Python runs on this thread).
        return Ok(client.get().inner.clone());
    }
    let wanted = "gateway must be a connop.HttpGateway or an object with the methods \
                  list_connectors, connections and account_status";
    if gateway.is_none() {
        return Err(PyTypeError::new_err(format!("{wanted}, not None")));
    }
    if gateway.cast::<PyString>().is_ok() {
        return Err(PyTypeError::new_err(format!(
            "{wanted}, not a str (for a gateway's URL, pass connop.HttpGateway(url, token))"
        )));
    }
    if let Ok(class) = gateway.cast::<pyo3::types::PyType>() {
        let name = class.name().map(|n| n.to_string()).unwrap_or_default();
        return Err(PyTypeError::new_err(format!(
            "{wanted}, not the class {name} itself (pass an instance: {name}(...))"
        )));
    }
    let has_one = GATEWAY_METHODS.iter().any(|method| {
        gateway
            .getattr(*method)
            .is_ok_and(|attribute| attribute.is_callable())
    });
    if !has_one {
        return Err(PyTypeError::new_err(format!(
            "{wanted}; a {} has none of them",
            type_name(gateway)
        )));
    }
    Ok(Arc::new(PyGateway::new(gateway.clone().unbind())))
}

/// The tool's arguments: a dict (JSON data) or its JSON text.
pub fn args_of(args: &Bound<'_, PyAny>) -> PyResult<Value> {
    match args.cast::<PyString>() {
        Ok(text) => serde_json::from_str(&text.to_cow()?)
            .map_err(|e| PyValueError::new_err(format!("args is not JSON: {e}"))),
        Err(_) => from_py(args, "args"),
    }
}

/// The tool's refusal (its JSON result) of arguments the core rejects, or of valid ones
/// while the host says connectors are not available; `None` when the call may go on.
pub fn refusal(args: &Value, dialect: Dialect, available: bool) -> Option<String> {
    let text = match connop_core::tool::parse_args_in(args, dialect) {
        Err(err) => err.to_string(),
        Ok(_) if !available => connop_core::tool::UNAVAILABLE_TEXT.to_owned(),
        Ok(_) => return None,
    };
    Some(ToolResult::Error(text).to_json())
}

/// The tool's JSON result when its gateway client could not be built: `reason` says why.
pub fn gateway_failed(reason: &str, dialect: Dialect) -> String {
    ToolResult::Error(connop_core::tool::gateway_failed_text(&reason, dialect)).to_json()
}

/// `tick`: a finite number of seconds >= 0, at least [`MIN_TICK`].
fn tick_of(tick: f64) -> PyResult<Duration> {
    Ok(seconds(tick, "tick")?.max(MIN_TICK))
}

/// Runs one `manage_connections` tool call on this thread and returns its JSON result.
///
/// `args`: `{"action", "connectors", "force"}` (or that as JSON text), JSON data nested at most
/// 127 deep. `surface`: `""` (unset) or `desktop` or `tui` show a card when `on_card` is given,
/// and the call blocks until the operation settles; `cli` and `messaging` (a chat platform)
/// return the links at once. `on_card` gets the card request once: an exception it raises
/// settles the operation `interrupt` at once and is raised here. `on_update` gets every update
/// frame (with `updates_for`, a container of operation ids, only the frames of the operations
/// in it, checked frame by frame); an exception it raises is reported as unraisable. `tick`: seconds between a row's
/// reads, at least 0.01 (a smaller one, 0 included, reads every 0.01 s). `gateway`: an
/// `HttpGateway`, or any object with `list_connectors`, `connections` and `account_status`;
/// or, instead, `gateway_factory`: called with no argument once the arguments passed the
/// check, so a refused call builds no client, and an exception it raises is the tool's
/// "gateway failed" result. `hosted_names` answers the misroute check instead of the
/// connector list. `calls`: `"worker"` (the default: calls run off the waiting thread, on a
/// shared pool, so the deadline, an interrupt and a card answer never wait for a slow call,
/// nor one row's read for another's; their answers are fed on the waiting thread) or
/// `"inline"` (a gateway object's calls on the waiting thread: only for one that answers at
/// once; reads then go out one at a time, each with the time then left, none once the
/// deadline came; an `HttpGateway`'s calls stay off it). The GIL is released while the call
/// waits; Ctrl-C on the main thread settles the operation `interrupt` and the call returns
/// that result. `dialect`: `"connop"` (the default) or `"original"` (the original agent
/// system's words and argument forms); `available=False` refuses valid arguments. An
/// argument of the wrong type or value is a `TypeError`/`ValueError` naming it, before
/// anything runs. The contract: docs/python.md.
#[pyfunction]
#[pyo3(signature = (
    args, *, session_key, gateway=None, gateway_factory=None, surface="", on_card=None,
    on_update=None, updates_for=None,
    tick=1.0,
    deadline=300.0, local_catalog=Vec::new(), hosted_names=None, tool_call_id=None,
    return_to=None, desktop_return_to=None, interrupt=None, registry=None,
    agent_session_id=None, calls=None, dialect=None, available=true
))]
#[allow(clippy::too_many_arguments)]
pub fn manage_connections(
    py: Python<'_>,
    args: &Bound<'_, PyAny>,
    session_key: &str,
    gateway: Option<&Bound<'_, PyAny>>,
    gateway_factory: Option<&Bound<'_, PyAny>>,
    surface: &str,
    on_card: Option<Py<PyAny>>,
    on_update: Option<Py<PyAny>>,
    updates_for: Option<Py<PyAny>>,
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
    let args = args_of(args)?;
    let surface = surface_of(surface)?;
    let on_card = callable(on_card, py, "on_card")?;
    let on_update = callable(on_update, py, "on_update")?;
    let hosted_names = callable(hosted_names, py, "hosted_names")?;
    let tick = tick_of(tick)?;
    let deadline = seconds(deadline, "deadline")?;
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
    let dialect = crate::compat::dialect(dialect)?;
    let gateway = match (gateway, gateway_factory) {
        (Some(_), Some(_)) => {
            return Err(PyTypeError::new_err(
                "pass gateway or gateway_factory, not both",
            ));
        }
        (Some(gateway), None) => gateway.clone(),
        (None, Some(factory)) => {
            if !factory.is_callable() {
                return Err(PyTypeError::new_err(format!(
                    "gateway_factory must be a callable, not {}",
                    type_name(factory)
                )));
            }
            // The arguments first: a refused call builds no client.
            if let Some(refusal) = refusal(&args, dialect, available) {
                return Ok(refusal);
            }
            match factory.call0() {
                Ok(gateway) => gateway,
                // Any `Exception` is the gateway's failure, told to the model; Ctrl-C and
                // `SystemExit` stay the host's.
                Err(error) if error.is_instance_of::<PyException>(py) => {
                    return Ok(gateway_failed(&error.value(py).str()?.to_cow()?, dialect));
                }
                Err(error) => return Err(error),
            }
        }
        (None, None) => py.None().into_bound(py),
    };
    // An HTTP client's calls wait on the network: never on the waiting thread.
    let inline = inline && gateway.extract::<PyRef<'_, PyHttpGateway>>().is_err();
    let gateway = gateway_of(&gateway)?;
    let registry = registry.map_or_else(|| default_registry().clone(), |r| r.inner.clone());
    let mut context: ToolContext<dyn BlockingToolGateway> =
        ToolContext::new(registry, session_key, gateway.clone());
    context.surface = surface;
    let card_failure = CardFailure::new();
    context.events = on_card.map(|card| {
        events(
            Some(card),
            on_update,
            updates_for,
            Some(card_failure.clone()),
        )
    });
    context.options = OperationOptions {
        tick,
        deadline,
        local_catalog: local_catalog.iter().map(|n| n.as_str().into()).collect(),
    };
    context.tool_call_id = tool_call_id.map(Into::into);
    context.return_to = return_to.map(Into::into);
    if let Some(name) = desktop_return_to {
        context.desktop_return_to = name.into();
    }
    context.interrupt = interrupt.map(|i| i.inner.clone());
    context.agent_session_id = agent_session_id.map(Into::into);
    context.dialect = dialect;
    context.available = available;
    // Calls on this thread run one at a time: the watcher hands them out so.
    context.serial_calls = inline;
    // No call starter: the calls come out of the driver's step (see `PyCalls`).
    context.calls = None;
    let calls = PyCalls::new(gateway, inline, hosted_names, std::thread::current());

    let main = on_main_thread(py)?;
    let op = context.start(&args, None);
    let signal = crate::exit::detach(py, || drive(&op, &calls, main, &card_failure));
    let result = op.finished_result();
    match signal {
        // Ctrl-C is the stop button: the operation settled `interrupt`, and that is the answer.
        // An exception from `on_card` settled it too, and is raised.
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
fn drive(op: &OpHandle, calls: &PyCalls, main: bool, card_failure: &CardFailure) -> Option<PyErr> {
    let waker = connop_blocking::driver::thread_waker();
    let (mut answers, mut started) = (Vec::new(), Vec::new());
    let mut signal = None;
    loop {
        calls.collect(&mut answers);
        let mut start =
            |started: &mut Vec<_>, answers: &mut Vec<_>| calls.start(op, started, answers);
        let next = op.step(&mut answers, &mut started, &mut start, &waker);
        if let Some(error) = card_failure.take() {
            // The card could not be shown, so nobody would answer it: settles now, and the
            // next step finishes.
            op.interrupt();
            signal.get_or_insert(error);
            if matches!(next, Next::Sleep(_)) {
                continue;
            }
        }
        let until = match next {
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
