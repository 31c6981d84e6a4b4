//! Tool gateways for a Python host: connop's own HTTP client, or any Python object with the
//! original client's three methods, and how their calls run.

use crate::convert::from_py;
use crate::errors::GatewayClientError;
use connop_blocking::http::HttpToolGateway;
use connop_blocking::{CallAnswer, CallQueue, CallsStarted, DriverCall, OnAnswer, OpHandle};
use connop_core::flow::CallPurpose;
use connop_core::tool_gateway::{
    Account, BlockingToolGateway, ConnectorRow, GatewayCall, GatewayError, GatewayReply, MintRow,
};
use connop_core::wire::ClientConfig;
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyType};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// connop's HTTP client of the tool gateway. Its calls run in Rust on a worker thread per
/// operation, without the GIL.
#[pyclass(module = "connop", name = "HttpGateway", frozen)]
pub struct PyHttpGateway {
    pub(crate) inner: Arc<HttpToolGateway>,
}

#[pymethods]
impl PyHttpGateway {
    /// A client for the gateway at `url` (`http://` or `https://`), sending `token` as its
    /// bearer token on every request. Both are required: a `ValueError` for an empty token or
    /// a URL of another kind.
    #[new]
    #[pyo3(signature = (url, token))]
    fn new(url: &str, token: &str) -> PyResult<Self> {
        let url = url.trim();
        let host = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""));
        if host.is_none_or(str::is_empty) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "url must be the gateway's http:// or https:// URL, not {url:?}"
            )));
        }
        if token.trim().is_empty() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "token must be the gateway's bearer token, not empty (HttpGateway.from_env() \
                 reads CONNECTOR_GATEWAY_URL and CONNECTOR_GATEWAY_TOKEN instead)",
            ));
        }
        let config = ClientConfig::new(url, Some(token.to_owned()));
        let inner =
            HttpToolGateway::new(config).map_err(|e| GatewayClientError::new_err(e.to_string()))?;
        Ok(PyHttpGateway {
            inner: Arc::new(inner),
        })
    }

    /// The gateway `CONNECTOR_GATEWAY_URL` and `CONNECTOR_GATEWAY_TOKEN` name, or `None`
    /// when the URL is unset. An agent host's way in: with the URL set and no token it still
    /// builds, and each of its calls fails with an authorization error, without sending.
    #[staticmethod]
    fn from_env() -> PyResult<Option<Self>> {
        let inner =
            HttpToolGateway::from_env().map_err(|e| GatewayClientError::new_err(e.to_string()))?;
        Ok(inner.map(|inner| PyHttpGateway {
            inner: Arc::new(inner),
        }))
    }

    /// Where it sends.
    #[getter]
    fn url(&self) -> String {
        self.inner.config().base_url.to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "HttpGateway({:?})",
            self.inner.config().base_url.as_ref() as &str
        )
    }
}

/// A Python object with `list_connectors(*, timeout)`, `connections(connectors, *,
/// reinitiate, return_to, op)` and `account_status(connection_id, *, timeout)`, answering in
/// the original client's shapes (snake_case rows; `None` for an unknown account). Each call
/// holds the GIL while the object runs. An exception, or an answer of the wrong shape, is a
/// failure of that call (transport or invalid response), never a crash.
pub struct PyGateway {
    obj: Py<PyAny>,
}

impl PyGateway {
    pub fn new(obj: Py<PyAny>) -> Self {
        PyGateway { obj }
    }
}

impl BlockingToolGateway for PyGateway {
    fn call(&self, call: &GatewayCall) -> Result<GatewayReply, GatewayError> {
        // Calls run on the pool's threads, which may still be running when the interpreter
        // shuts down: then the call fails instead of touching a finalized interpreter.
        let Some(_inside) = crate::enter_python() else {
            return Err(shutting_down());
        };
        Python::try_attach(|py| {
            let obj = self.obj.bind(py);
            let kwargs = PyDict::new(py);
            let answer = match call {
                GatewayCall::List { timeout } => {
                    set(&kwargs, "timeout", timeout.map(|t| t.as_secs_f64()))?;
                    invoke(obj, "list_connectors", (), &kwargs)?
                }
                GatewayCall::Mint(mint) => {
                    let names: Vec<&str> = mint.connectors.iter().map(|n| &**n).collect();
                    set(&kwargs, "reinitiate", mint.reinitiate)?;
                    // Only when they ride the mint (the desktop surface): the original's
                    // client doubles take neither elsewhere.
                    if let Some(return_to) = mint.return_to.as_deref() {
                        set(&kwargs, "return_to", return_to)?;
                    }
                    if let Some(op) = &mint.op {
                        set(&kwargs, "op", op.as_str())?;
                    }
                    let names = PyList::new(py, names).map_err(|e| failed(py, e))?;
                    invoke(obj, "connections", (names,), &kwargs)?
                }
                GatewayCall::Account {
                    connection_id,
                    timeout,
                } => {
                    set(&kwargs, "timeout", timeout.as_secs_f64())?;
                    invoke(obj, "account_status", (&**connection_id,), &kwargs)?
                }
            };
            let answer = from_py(&answer, "answer")
                .map_err(|e| GatewayError::invalid(format!("the answer is not JSON data: {e}")))?;
            match call {
                GatewayCall::List { .. } => list_rows(answer).map(GatewayReply::Connectors),
                GatewayCall::Mint(_) => mint_rows(answer).map(GatewayReply::Minted),
                GatewayCall::Account { .. } => account(answer).map(GatewayReply::Account),
            }
        })
        .unwrap_or_else(|| Err(shutting_down()))
    }
}

/// A call made while the interpreter shuts down: a transport failure, as a raised exception.
fn shutting_down() -> GatewayError {
    GatewayError::Transport("the Python interpreter is shutting down".into())
}

fn set<'py, V: IntoPyObject<'py>>(
    kwargs: &Bound<'py, PyDict>,
    key: &str,
    value: V,
) -> Result<(), GatewayError> {
    kwargs
        .set_item(key, value)
        .map_err(|e| failed(kwargs.py(), e))
}

fn invoke<'py>(
    obj: &Bound<'py, PyAny>,
    method: &str,
    args: impl pyo3::call::PyCallArgs<'py>,
    kwargs: &Bound<'py, PyDict>,
) -> Result<Bound<'py, PyAny>, GatewayError> {
    obj.call_method(method, args, Some(kwargs))
        .map_err(|e| failed(obj.py(), e))
}

/// The source of `connop.RateLimited`: an exception a gateway object raises for the gateway's
/// HTTP 429, with the wait it asked for in seconds (`None`: the default).
const RATE_LIMITED: &std::ffi::CStr = c"
class RateLimited(ConnopError):
    \"\"\"The tool gateway refused a call for now (HTTP 429). A gateway object raises it; the
    operation then reads no account of any row for ``retry_after`` seconds (1 s when
    ``None``), as for connop's own client.\"\"\"

    def __init__(self, message='rate limited', retry_after=None):
        super().__init__(message)
        self.retry_after = retry_after
";

static RATE_LIMITED_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `connop.RateLimited`, made on first use.
pub fn rate_limited_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    RATE_LIMITED_TYPE
        .get_or_try_init(py, || {
            let namespace = PyDict::new(py);
            namespace.set_item("ConnopError", py.get_type::<crate::errors::ConnopError>())?;
            namespace.set_item("__name__", "connop")?;
            py.run(RATE_LIMITED, Some(&namespace), None)?;
            let made = namespace
                .get_item("RateLimited")?
                .ok_or_else(|| PyRuntimeError::new_err("RateLimited was not made"))?;
            Ok(made.cast_into::<PyType>()?.unbind())
        })
        .map(|t| t.bind(py))
}

/// A failed call as the Python exception a caller of the client's methods sees: the
/// gateway's 429 as `RateLimited` (with its wait), anything else as `ConnopError`.
pub fn call_error(py: Python<'_>, error: GatewayError) -> PyErr {
    if let GatewayError::RateLimited { retry_after } = &error {
        if let Ok(limited) = rate_limited_type(py) {
            let kwargs = PyDict::new(py);
            let made = kwargs
                .set_item("retry_after", retry_after.as_secs_f64())
                .and_then(|()| limited.call((error.to_string(),), Some(&kwargs)));
            return match made {
                Ok(exception) => PyErr::from_value(exception),
                Err(e) => e,
            };
        }
    }
    crate::errors::ConnopError::new_err(error.to_string())
}

/// The wait a raised `RateLimited` asks for: its `retry_after` in seconds; `None`, or a value
/// that is not a finite number of seconds, is the gateway's default wait.
fn retry_after_of(error: &Bound<'_, PyAny>) -> Duration {
    error
        .getattr("retry_after")
        .ok()
        .and_then(|v| v.extract::<f64>().ok())
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
        .unwrap_or(connop_core::wire::DEFAULT_RETRY_AFTER)
}

/// An exception from the gateway object: a `RateLimited` is the gateway's 429; anything else
/// is a failure of the call in transport. A Ctrl-C that landed in the object's code is raised
/// again for the waiting thread to see.
fn failed(py: Python<'_>, error: PyErr) -> GatewayError {
    if let Ok(limited) = rate_limited_type(py) {
        if error.is_instance(py, limited) {
            return GatewayError::RateLimited {
                retry_after: retry_after_of(error.value(py)),
            };
        }
    }
    let failure = GatewayError::Transport(format!("the gateway object raised {error}"));
    if error.is_instance_of::<PyKeyboardInterrupt>(py) {
        // Last, after every other Python call here: a pending signal makes the next call
        // that runs Python code raise it, and a raise inside formatting would be lost.
        // SAFETY: called with the GIL held; it only flags the pending signal.
        unsafe { pyo3::ffi::PyErr_SetInterrupt() };
    }
    failure
}

/// The original client's snake_case keys, as the core's parsers read them (camelCase keys
/// already present win). Unknown keys are kept.
fn camel(row: &Value) -> Value {
    let Value::Object(map) = row else {
        return row.clone();
    };
    let mut out = map.clone();
    for (snake, camel) in [
        ("connect_url", "connectUrl"),
        ("connection_id", "connectionId"),
        ("status_reason", "statusReason"),
        ("connection_status", "connectionStatus"),
    ] {
        if let Some(value) = map.get(snake) {
            out.entry(camel).or_insert_with(|| value.clone());
        }
    }
    Value::Object(out)
}

/// The rows of an answer that is either the list itself or an object holding it under `key`.
fn rows_of(answer: Value, key: &str, missing: &'static str) -> Result<Vec<Value>, GatewayError> {
    match answer {
        Value::Array(rows) => Ok(rows),
        Value::Object(mut map) => match map.remove(key) {
            Some(Value::Array(rows)) => Ok(rows),
            _ => Err(GatewayError::invalid(missing)),
        },
        _ => Err(GatewayError::invalid(missing)),
    }
}

/// `list_connectors` answers a list of rows (or `{"items": [...]}`). Each row is kept
/// verbatim for the status action.
fn list_rows(answer: Value) -> Result<Vec<ConnectorRow>, GatewayError> {
    let items = rows_of(answer, "items", "list_connectors answered no list of rows")?;
    items
        .into_iter()
        .map(|raw| {
            let mut row = ConnectorRow::from_json(camel(&raw))?;
            row.raw = raw;
            Ok(row)
        })
        .collect()
}

/// `connections` answers `{"results": [...], "summary": ...}` (or the list of results).
fn mint_rows(answer: Value) -> Result<Vec<MintRow>, GatewayError> {
    let results = rows_of(answer, "results", "connections answered no 'results' list")?;
    results
        .iter()
        .map(|row| MintRow::from_json(&camel(row)))
        .collect()
}

/// `account_status` answers the account, or `None` when it is unknown yet (a 404).
fn account(answer: Value) -> Result<Option<Account>, GatewayError> {
    match answer {
        Value::Null => Ok(None),
        Value::Object(_) => Account::from_json(&camel(&answer)).map(Some),
        _ => Err(GatewayError::invalid(
            "account_status answered neither an account nor None",
        )),
    }
}

/// How a tool call's gateway calls run, and where the misroute check learns which names the
/// hosted gateway offers. The calls come out of the driver's step, and their answers go back
/// into it, so every effect they cause (the card, update frames) runs on the waiting thread,
/// as with the original system; only the call itself may run elsewhere.
pub struct PyCalls {
    gateway: Arc<dyn BlockingToolGateway>,
    /// `None`: inline, on the waiting thread. Otherwise the operation's queue on the call
    /// pool, whose answers arrive in `arrived`.
    pool: Option<CallQueue>,
    arrived: Arc<Mutex<Vec<CallAnswer>>>,
    /// `hosted_names()`: answers the misroute check's list read instead of the gateway.
    hosted_names: Option<Py<PyAny>>,
}

impl PyCalls {
    /// Calls on the waiting thread (`inline`), or on the call pool, which wakes `driver` with
    /// each answer.
    pub fn new(
        gateway: Arc<dyn BlockingToolGateway>,
        inline: bool,
        hosted_names: Option<Py<PyAny>>,
        driver: std::thread::Thread,
    ) -> Self {
        let arrived: Arc<Mutex<Vec<CallAnswer>>> = Arc::default();
        let pool = (!inline).then(|| {
            let arrived = arrived.clone();
            let on_answer: OnAnswer = Box::new(move |_, id, result| {
                arrived
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((id, result));
                driver.unpark();
            });
            CallQueue::new(gateway.clone(), on_answer)
        });
        PyCalls {
            gateway,
            pool,
            arrived,
            hosted_names,
        }
    }

    /// Starts the calls a step handed out: an answer run here (Python code, taking its time)
    /// joins `answers`.
    pub fn start(
        &self,
        op: &OpHandle,
        calls: &mut Vec<DriverCall>,
        answers: &mut Vec<CallAnswer>,
    ) -> CallsStarted {
        let mut started = CallsStarted::AtOnce;
        for (id, call) in calls.drain(..) {
            if let (Some(hosted), GatewayCall::List { .. }) = (&self.hosted_names, &call) {
                if op.call_purpose(id) == Some(CallPurpose::MisrouteList) {
                    let rows = crate::enter_python()
                        .and_then(|_inside| Python::try_attach(|py| hosted_rows(py, hosted)))
                        .unwrap_or_else(|| Err(shutting_down()));
                    answers.push((id, rows));
                    started = CallsStarted::AfterWaiting;
                    continue;
                }
            }
            match &self.pool {
                Some(pool) => pool.start(op, id, call),
                None => {
                    answers.push((id, self.gateway.call(&call)));
                    started = CallsStarted::AfterWaiting;
                }
            }
        }
        started
    }

    /// Moves the answers the pool delivered since into `answers`.
    pub fn collect(&self, answers: &mut Vec<CallAnswer>) {
        let mut arrived = self.arrived.lock().unwrap_or_else(|p| p.into_inner());
        answers.append(&mut arrived);
    }
}

/// The names `hosted_names()` gives, as list rows; `None` (or an exception) is a failed read,
/// which misroutes nothing.
fn hosted_rows(py: Python<'_>, hosted: &Py<PyAny>) -> Result<GatewayReply, GatewayError> {
    let answer = hosted.bind(py).call0().map_err(|e| failed(py, e))?;
    if answer.is_none() {
        return Err(GatewayError::Transport(
            "the hosted connector names are unknown".into(),
        ));
    }
    let mut rows = Vec::new();
    for name in answer.try_iter().map_err(|e| failed(py, e))? {
        let name: String = name
            .and_then(|n| n.extract())
            .map_err(|_| GatewayError::invalid("hosted_names gave a name that is not a str"))?;
        rows.push(ConnectorRow::new(&name, true, false));
    }
    Ok(GatewayReply::Connectors(rows))
}

/// A timeout in seconds from Python, checked.
pub fn seconds(value: f64, what: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "{what} must be a finite number of seconds >= 0"
        ))
    })
}
