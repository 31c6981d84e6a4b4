//! The tool gateway's client over a host's own HTTP transport: every rule of the API (routes,
//! bodies, pagination, status mapping, retries) is the core's exchange; the host's transport
//! only moves each request it yields, and the host adds its credentials per request.

use crate::convert::{from_py, to_py};
use connop_core::tool_gateway::{
    Account, BlockingToolGateway, ConnectorRow, GatewayCall, GatewayError, GatewayReply,
    MintRequest, MintRow,
};
use connop_core::wire::{self, ClientConfig, Exchange, TransportError};
use pyo3::exceptions::{PyKeyboardInterrupt, PyTimeoutError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The client's Python parts: what sends, where to, with which credentials.
pub struct TransportGateway {
    /// `request(method, url, *, headers, json, timeout)` → a response with `status_code`,
    /// `text` (or `json()`) and optionally `headers`.
    transport: Py<PyAny>,
    /// `()` → the gateway's origin, or `None` when there is none.
    endpoint_resolver: Py<PyAny>,
    /// `(url)` → the headers (credentials) to add to a request to `url`.
    header_provider: Option<Py<PyAny>>,
}

impl BlockingToolGateway for TransportGateway {
    fn call(&self, call: &GatewayCall) -> Result<GatewayReply, GatewayError> {
        let Some(_inside) = crate::enter_python() else {
            return Err(GatewayError::Transport(
                "the Python interpreter is shutting down".into(),
            ));
        };
        Python::try_attach(|py| {
            let origin = self
                .endpoint_resolver
                .bind(py)
                .call0()
                .map_err(|e| raised(py, "the endpoint resolver", e))?;
            if origin.is_none() {
                return Err(GatewayError::Transport(
                    "no connector gateway endpoint is configured".into(),
                ));
            }
            let origin: String = origin
                .extract()
                .map_err(|_| GatewayError::Transport("the endpoint resolver gave no URL".into()))?;
            let config = ClientConfig::with_host_credentials(origin);
            Ok(Exchange::run(&config, call, |request| {
                self.send(py, request)
            }))
        })
        .unwrap_or_else(|| {
            Err(GatewayError::Transport(
                "the Python interpreter is shutting down".into(),
            ))
        })?
    }
}

impl TransportGateway {
    /// Sends one request through the host's transport.
    fn send(&self, py: Python<'_>, request: &wire::HttpRequest) -> wire::HttpAnswer {
        let failed = |what: &str, e: PyErr| TransportError::Failed(format!("{what}: {e}"));
        let headers = PyDict::new(py);
        for (name, value) in &request.headers {
            headers
                .set_item(*name, value)
                .map_err(|e| failed("a header", e))?;
        }
        if let Some(provider) = &self.header_provider {
            let extra = provider
                .bind(py)
                .call1((&request.url,))
                .map_err(|e| failed("the header provider raised", e))?;
            if !extra.is_none() {
                headers
                    .call_method1("update", (extra,))
                    .map_err(|e| failed("the header provider gave no headers", e))?;
            }
        }
        let kwargs = PyDict::new(py);
        let set = |key: &str, value: Bound<'_, PyAny>| {
            kwargs
                .set_item(key, value)
                .map_err(|e| failed("an argument", e))
        };
        set("headers", headers.into_any())?;
        let body = match &request.body {
            Some(text) => {
                let value: Value = serde_json::from_str(text)
                    .map_err(|e| TransportError::Failed(format!("the body: {e}")))?;
                to_py(py, &value).map_err(|e| failed("the body", e))?
            }
            None => py.None().into_bound(py),
        };
        set("json", body)?;
        set(
            "timeout",
            pyo3::types::PyFloat::new(py, request.timeout.as_secs_f64()).into_any(),
        )?;
        let response = self
            .transport
            .bind(py)
            .call_method(
                "request",
                (request.method.as_str(), &request.url),
                Some(&kwargs),
            )
            .map_err(|e| {
                if e.is_instance_of::<PyTimeoutError>(py) {
                    TransportError::TimedOut
                } else {
                    if e.is_instance_of::<PyKeyboardInterrupt>(py) {
                        // SAFETY: the GIL is held; this only flags the signal again.
                        unsafe { pyo3::ffi::PyErr_SetInterrupt() };
                    }
                    TransportError::Failed(format!("the transport raised {e}"))
                }
            })?;
        response_of(&response)
    }
}

/// The parts of a transport's response the API reads.
fn response_of(response: &Bound<'_, PyAny>) -> wire::HttpAnswer {
    let bad = |what: &str| TransportError::Failed(format!("the transport's response has {what}"));
    let status: u16 = response
        .getattr("status_code")
        .and_then(|s| s.extract())
        .map_err(|_| bad("no HTTP status_code"))?;
    let text = response
        .getattr("text")
        .ok()
        .filter(|t| t.is_instance_of::<PyString>());
    let body = match text {
        Some(text) => text
            .extract::<String>()
            .map_err(|_| bad("a text that is not UTF-8"))?,
        None => {
            let parsed = response
                .call_method0("json")
                .map_err(|_| bad("neither text nor json()"))?;
            from_py(&parsed, "json()")
                .map_err(|_| bad("a json() that is not JSON data"))?
                .to_string()
        }
    };
    let retry_after = response
        .getattr("headers")
        .ok()
        .and_then(|h| h.call_method1("get", ("Retry-After",)).ok())
        .and_then(|v| v.extract::<String>().ok());
    Ok(wire::HttpResponse {
        status,
        retry_after,
        body: body.into_bytes(),
    })
}

/// An exception from one of the host's callables, as the call's failure.
fn raised(py: Python<'_>, what: &str, error: PyErr) -> GatewayError {
    if error.is_instance_of::<PyKeyboardInterrupt>(py) {
        // SAFETY: the GIL is held; this only flags the signal again.
        unsafe { pyo3::ffi::PyErr_SetInterrupt() };
    }
    GatewayError::Transport(format!("{what} raised {error}"))
}

/// The tool gateway's client over the host's own HTTP transport. `transport.request(method,
/// url, *, headers, json, timeout)` sends one request and returns a response with
/// `status_code`, `text` (or `json()`) and optionally `headers`; raising `TimeoutError` means
/// the request timed out. `endpoint_resolver()` names the gateway's origin (or `None`);
/// `header_provider(url)` gives the credentials to add to each request. Every rule of the
/// API is connop's; a tool call runs its calls on its own thread, one at a time.
#[pyclass(module = "connop", name = "TransportGateway", subclass, frozen)]
pub struct PyTransportGateway {
    pub(crate) inner: Arc<TransportGateway>,
}

#[pymethods]
impl PyTransportGateway {
    #[new]
    #[pyo3(signature = (*, transport, endpoint_resolver, header_provider=None))]
    fn new(
        transport: Py<PyAny>,
        endpoint_resolver: Py<PyAny>,
        header_provider: Option<Py<PyAny>>,
    ) -> Self {
        PyTransportGateway {
            inner: Arc::new(TransportGateway {
                transport,
                endpoint_resolver,
                header_provider,
            }),
        }
    }

    /// The connector list: the rows as the gateway sent them.
    #[pyo3(signature = (*, timeout=None))]
    fn list_connectors(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Py<PyAny>> {
        let timeout = timeout
            .map(|t| crate::gateway::seconds(t, "timeout"))
            .transpose()?;
        match self.call(py, &GatewayCall::List { timeout })? {
            GatewayReply::Connectors(rows) => {
                let rows: Vec<Value> = rows.into_iter().map(|r: ConnectorRow| r.raw).collect();
                Ok(to_py(py, &Value::Array(rows))?.unbind())
            }
            other => Err(mismatch(&other)),
        }
    }

    /// One mint for every name: `{"results": [...]}` with snake_case rows.
    #[pyo3(signature = (connectors, *, reinitiate=false, return_to=None, op=None))]
    fn connections(
        &self,
        py: Python<'_>,
        connectors: Vec<String>,
        reinitiate: bool,
        return_to: Option<String>,
        op: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let request = MintRequest {
            connectors: connectors.iter().map(|c| c.as_str().into()).collect(),
            reinitiate,
            return_to: return_to.map(Into::into),
            op: op.as_deref().and_then(connop_core::operation::OpId::parse),
        };
        match self.call(py, &GatewayCall::Mint(Box::new(request)))? {
            GatewayReply::Minted(rows) => {
                let results: Vec<Value> = rows.iter().map(mint_row).collect();
                Ok(to_py(py, &json!({"results": results}))?.unbind())
            }
            other => Err(mismatch(&other)),
        }
    }

    /// One account, snake_case, or `None` while the gateway does not know it.
    #[pyo3(signature = (connection_id, *, timeout=None))]
    fn account_status(
        &self,
        py: Python<'_>,
        connection_id: &str,
        timeout: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        let timeout = match timeout {
            Some(t) => crate::gateway::seconds(t, "timeout")?,
            None => wire::DEFAULT_TIMEOUT,
        };
        let call = GatewayCall::Account {
            connection_id: connection_id.into(),
            timeout,
        };
        match self.call(py, &call)? {
            GatewayReply::Account(None) => Ok(py.None()),
            GatewayReply::Account(Some(account)) => Ok(to_py(py, &account_row(&account))?.unbind()),
            other => Err(mismatch(&other)),
        }
    }
}

impl PyTransportGateway {
    /// Runs a call on this thread (the transport is Python code: the GIL stays held).
    fn call(&self, py: Python<'_>, call: &GatewayCall) -> PyResult<GatewayReply> {
        self.inner
            .call(call)
            .map_err(|e| crate::gateway::call_error(py, e))
    }
}

fn mismatch(reply: &GatewayReply) -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err(format!(
        "the gateway answered a {} reply to another call",
        reply.route().name()
    ))
}

fn text(value: &Option<connop_core::operation::Text>) -> Value {
    value.as_deref().map_or(Value::Null, Value::from)
}

fn mint_row(row: &MintRow) -> Value {
    let mut out = Map::new();
    out.insert("connector".into(), Value::from(&*row.connector));
    out.insert("status".into(), Value::from(row.status.as_str()));
    for (key, value) in [
        ("connect_url", &row.connect_url),
        ("connection_id", &row.connection_id),
        ("status_reason", &row.status_reason),
    ] {
        if value.is_some() {
            out.insert(key.into(), text(value));
        }
    }
    Value::Object(out)
}

fn account_row(account: &Account) -> Value {
    json!({
        "connection_id": &*account.connection_id,
        "connector": &*account.connector,
        "status": account.status.as_str(),
        "status_reason": text(&account.status_reason),
    })
}
