//! The registry, operation handles and interrupt tokens, reachable from any Python thread.
//! An input (a move, a card answer, a settle, an interrupt) keeps the GIL while it runs and
//! lets it go only to wait for another thread's pump, which may be running a callback into
//! Python: so the caller's next line runs before the thread the input woke runs Python
//! again, as it would if the operation were Python code. Reads release the GIL.

use crate::callbacks::events;
use crate::convert::{from_py, to_py};
use crate::enums::{PyActor, PyKind, PySettleReason, PyTargetAction, PyTargetState};
use crate::errors::{OperationAlreadyOpen, caller_error};
use crate::gateway::seconds;
use connop_blocking::{Interrupt, OpHandle, SharedRegistry, ToolContext};
use connop_core::card::CardAnswer;
use connop_core::contract::{Kind, TargetAction};
use connop_core::flow::Surface;
use connop_core::operation::{ChangeRecord, OpId, Patch, Target, Text};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use serde_json::{Value, json};
use std::sync::{Arc, OnceLock};

/// Runs inputs to operations with the GIL held, letting it go only while waiting for another
/// thread's pump (see the module docs).
fn holding_gil<R>(inputs: impl FnOnce() -> R) -> R {
    connop_blocking::handle::waiting_through(release_gil, inputs)
}

fn release_gil(wait: &mut (dyn FnMut() + Send)) {
    Python::attach(|py| crate::exit::detach(py, wait));
}

/// How many settled operations a registry keeps readable by `get` after they settled: each
/// session's latest, for the sessions whose operations settled most recently.
pub const KEPT_SETTLED: usize = 64;

/// The process's registry: one open operation per session key.
pub fn default_registry() -> &'static SharedRegistry {
    static REGISTRY: OnceLock<SharedRegistry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        SharedRegistry::keeping_settled(
            std::env::var("CONNOP_HOME").unwrap_or_else(|_| "default".into()),
            KEPT_SETTLED,
        )
    })
}

/// One open operation per session key; settled ones stay readable by `get` (see
/// [`KEPT_SETTLED`]). `Registry()` is a registry of its own (a test's, say); the module-level
/// `current` and `get` read the process's.
#[pyclass(module = "connop", name = "Registry", frozen)]
#[derive(Clone)]
pub struct PyRegistry {
    pub(crate) inner: SharedRegistry,
}

#[pymethods]
impl PyRegistry {
    /// An empty registry; `profile` defaults to `CONNOP_HOME`.
    #[new]
    #[pyo3(signature = (profile=None))]
    fn new(profile: Option<String>) -> Self {
        let profile = profile
            .or_else(|| std::env::var("CONNOP_HOME").ok())
            .unwrap_or_else(|| "default".into());
        PyRegistry {
            inner: SharedRegistry::keeping_settled(profile, KEPT_SETTLED),
        }
    }

    /// The process's own registry, the one `manage_connections` uses by default.
    #[staticmethod]
    fn default() -> Self {
        PyRegistry {
            inner: default_registry().clone(),
        }
    }

    /// The session's unsettled operation, or `None`.
    fn current(&self, py: Python<'_>, session_key: &str) -> Option<PyOperation> {
        crate::exit::detach(py, || self.inner.current(session_key)).map(PyOperation::from)
    }

    /// The session's operation with that id, open or settled, or `None`. A settled one is
    /// forgotten once a newer operation of the session settled, or 64 operations of other
    /// sessions settled after it.
    fn get(&self, py: Python<'_>, session_key: &str, op_id: &str) -> Option<PyOperation> {
        let op_id = OpId::parse(op_id)?;
        crate::exit::detach(py, || self.inner.get(session_key, op_id)).map(PyOperation::from)
    }

    /// Opens an operation the host moves itself: registered under `session_key` before this
    /// returns; no gateway call, no watcher, no timer (the deadline is recorded, not
    /// enforced). `targets` are names, or `(name, kind, action)`
    /// tuples. Raises `OperationAlreadyOpen` when the session has one open.
    #[pyo3(signature = (session_key, targets, *, deadline=300.0, on_update=None, interrupt=None))]
    fn open(
        &self,
        session_key: &str,
        targets: &Bound<'_, PyAny>,
        deadline: f64,
        on_update: Option<Py<PyAny>>,
        interrupt: Option<PyRef<'_, PyInterrupt>>,
    ) -> PyResult<PyOperation> {
        if let Some(callback) = &on_update {
            if !callback.bind(targets.py()).is_callable() {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "on_update must be a callable or None",
                ));
            }
        }
        let targets = parse_targets(targets)?;
        let mut context: ToolContext<()> =
            ToolContext::new(self.inner.clone(), session_key, Arc::new(()));
        context.options.deadline = seconds(deadline, "deadline")?;
        context.surface = Surface::Unset;
        context.events = on_update.map(|update| events(None, Some(update), None, None));
        context.interrupt = interrupt.map(|i| i.inner.clone());
        match holding_gil(|| context.open(targets)) {
            Ok(op) => Ok(PyOperation::from(op)),
            Err(refused) => Err(OperationAlreadyOpen::new_err((
                refused.message,
                refused.open.map(|id| id.as_str().to_owned()),
            ))),
        }
    }

    /// Makes an operation that exists before it is registered: the host moves, settles and
    /// reads it, and registers it when it wants (`Operation.register()`). Nothing settles it
    /// but the host: not every target resolving (`settle_if_all_resolved()`), not its
    /// deadline (recorded only). `targets` are names, `(name, kind, action)` tuples, or
    /// `{"name", "kind"?, "action"?, "instructions"?, "required_env"?}` mappings.
    /// `on_update` gets every change's update frame.
    #[pyo3(signature = (session_key, targets, *, deadline=300.0, tool_call_id=None, on_update=None))]
    fn detached(
        &self,
        session_key: &str,
        targets: &Bound<'_, PyAny>,
        deadline: f64,
        tool_call_id: Option<String>,
        on_update: Option<Py<PyAny>>,
    ) -> PyResult<PyOperation> {
        let (targets, envs) = host_targets(targets)?;
        let mut context: ToolContext<()> =
            ToolContext::new(self.inner.clone(), session_key, Arc::new(()));
        context.options.deadline = seconds(deadline, "deadline")?;
        context.surface = Surface::Unset;
        context.tool_call_id = tool_call_id.map(Into::into);
        context.events = on_update.map(|update| events(None, Some(update), None, None));
        let op = context.detached(targets);
        for (name, env) in envs {
            op.set_required_env(&name, Some(env))
                .map_err(caller_error)?;
        }
        Ok(PyOperation::from(op))
    }

    /// The same entries seen from another profile (its sessions; operations registered
    /// under it): a host serving several profiles in one process.
    fn for_profile(&self, profile: String) -> Self {
        PyRegistry {
            inner: self.inner.for_profile(profile),
        }
    }

    /// Forgets every entry (a test's fresh start); their operations go on unregistered.
    fn clear(&self, py: Python<'_>) {
        py.detach(|| self.inner.clear());
    }

    /// How many operations are open (settled ones kept for `get` are not counted).
    fn __len__(&self, py: Python<'_>) -> usize {
        crate::exit::detach(py, || self.inner.len())
    }

    fn __repr__(&self) -> String {
        format!("Registry(profile={:?})", self.inner.profile())
    }
}

fn parse_targets(targets: &Bound<'_, PyAny>) -> PyResult<Vec<Target>> {
    // A bare name is a list of one, as the tool's `connectors` takes it, not a string to
    // iterate.
    if let Ok(name) = targets.cast::<PyString>() {
        let name = checked_name(&name.to_cow()?)?;
        return Ok(vec![Target::connector(&name, TargetAction::Connect)]);
    }
    let mut out: Vec<Target> = Vec::new();
    for item in targets.try_iter()? {
        let item = item?;
        if let Ok(name) = item.cast::<PyString>() {
            let name = checked_name(&name.to_cow()?)?;
            if !out.iter().any(|t| t.name == name) {
                out.push(Target::connector(&name, TargetAction::Connect));
            }
            continue;
        }
        let parts = item.cast::<PyTuple>().map_err(|_| {
            PyValueError::new_err("a target is a name or a (name, kind, action) tuple")
        })?;
        let name = checked_name(&parts.get_item(0)?.extract::<String>()?)?;
        if out.iter().any(|t| t.name == name) {
            continue;
        }
        let kind = match parts.len() {
            0 | 1 => Kind::Connector,
            _ => PyKind::extract(&parts.get_item(1)?)?,
        };
        let action = match parts.len() {
            0..=2 => TargetAction::Connect,
            _ => PyTargetAction::extract(&parts.get_item(2)?)?,
        };
        out.push(Target {
            name,
            kind,
            action,
            instructions: None,
        });
    }
    Ok(out)
}

/// What local MCP servers need from the environment, by target name.
type RequiredEnvs = Vec<(Text, Value)>;

/// The targets of a host's detached operation: what [`parse_targets`] takes, or mappings
/// with the card's instructions and a local MCP server's `required_env` (returned apart,
/// by target name).
fn host_targets(targets: &Bound<'_, PyAny>) -> PyResult<(Vec<Target>, RequiredEnvs)> {
    if targets.cast::<PyString>().is_ok() {
        return Ok((parse_targets(targets)?, Vec::new()));
    }
    let mut out: Vec<Target> = Vec::new();
    let mut envs: RequiredEnvs = Vec::new();
    for item in targets.try_iter()? {
        let item = item?;
        let Ok(fields) = item.cast::<PyDict>() else {
            for target in parse_targets(&PyList::new(item.py(), [item])?.into_any())? {
                if !out.iter().any(|t| t.name == target.name) {
                    out.push(target);
                }
            }
            continue;
        };
        let field = |key: &str| fields.get_item(key);
        let name = match field("name")? {
            Some(name) => checked_name(&name.extract::<String>()?)?,
            None => return Err(PyValueError::new_err("a target mapping needs a 'name'")),
        };
        let kind = match field("kind")? {
            Some(kind) => PyKind::extract(&kind)?,
            None => Kind::Connector,
        };
        let action = match field("action")? {
            Some(action) => PyTargetAction::extract(&action)?,
            None => TargetAction::Connect,
        };
        let instructions = match field("instructions")? {
            Some(text) if !text.is_none() => Some(text.extract::<String>()?.into()),
            _ => None,
        };
        if let Some(env) = field("required_env")?.filter(|e| !e.is_none()) {
            envs.push((name.clone(), from_py(&env, "required_env")?));
        }
        if !out.iter().any(|t| t.name == name) {
            out.push(Target {
                name,
                kind,
                action,
                instructions,
            });
        }
    }
    Ok((out, envs))
}

/// A target's name as the tool's arguments take it: trimmed, lower-cased, not empty.
fn checked_name(raw: &str) -> PyResult<Text> {
    connop_core::tool::target_name(raw).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A handle on one operation: moves, refreshes, settles and reads it from any thread. Every
/// change wakes the operation's watcher.
#[pyclass(module = "connop", name = "Operation", frozen)]
pub struct PyOperation {
    pub(crate) inner: OpHandle,
}

impl From<OpHandle> for PyOperation {
    fn from(inner: OpHandle) -> Self {
        PyOperation { inner }
    }
}

fn change_dict(py: Python<'_>, change: &ChangeRecord) -> PyResult<Py<PyAny>> {
    let value = json!({
        "target": &*change.target,
        "from": change.from.as_str(),
        "to": change.to.as_str(),
        "actor": change.actor.as_str(),
        "detail": change.detail.as_deref(),
    });
    Ok(to_py(py, &value)?.unbind())
}

#[pymethods]
impl PyOperation {
    /// The operation id: 12 lower-case hex characters.
    #[getter]
    fn op_id(&self) -> Option<String> {
        self.inner.op_id().map(|id| id.as_str().to_owned())
    }

    /// The change counter: one more with every change (the `seq` of its result and frames).
    #[getter]
    fn seq(&self, py: Python<'_>) -> u64 {
        crate::exit::detach(py, || self.inner.seq().unwrap_or(0))
    }

    /// Whether it settled.
    #[getter]
    fn settled(&self, py: Python<'_>) -> bool {
        crate::exit::detach(py, || self.inner.is_settled())
    }

    /// Moves target `name` to `to` by `actor`, with an optional new detail, link and
    /// connection id. Returns the change record, or `None` for a move to the state it is
    /// already in. Raises `IllegalTransition` for a move the table does not allow.
    /// Any other keyword is a field to attach to the row (a connected MCP server's
    /// `tools`, say), replacing those an earlier move attached.
    #[pyo3(signature = (name, to, actor, *, detail=None, connect_url=None, connection_id=None, **extra))]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    fn transition(
        &self,
        py: Python<'_>,
        name: &str,
        to: &Bound<'_, PyAny>,
        actor: &Bound<'_, PyAny>,
        detail: Option<String>,
        connect_url: Option<String>,
        connection_id: Option<String>,
        extra: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let to = PyTargetState::extract(to)?;
        let actor = PyActor::extract(actor)?;
        let extra = match extra {
            Some(fields) if !fields.is_empty() => match from_py(fields.as_any(), "fields")? {
                Value::Object(map) => Some(Box::new(map)),
                _ => None,
            },
            _ => None,
        };
        let patch = Patch {
            detail: detail.map(Into::into),
            connect_url: connect_url.map(Into::into),
            connection_id: connection_id.map(Into::into),
            extra,
        };
        let change =
            holding_gil(|| self.inner.transition(name, to, actor, patch)).map_err(caller_error)?;
        change.map(|c| change_dict(py, &c)).transpose()
    }

    /// Replaces target `name`'s link and detail, with no state change; returns the change
    /// record (`from == to`).
    #[pyo3(signature = (name, *, connect_url=None, detail=None, actor=None))]
    fn refresh(
        &self,
        py: Python<'_>,
        name: &str,
        connect_url: Option<String>,
        detail: Option<String>,
        actor: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let actor = match actor {
            Some(actor) => PyActor::extract(actor)?,
            None => connop_core::contract::Actor::BackendWatcher,
        };
        let change = holding_gil(|| {
            self.inner.refresh(
                name,
                connect_url.map(Into::into),
                detail.map(Into::into),
                actor,
            )
        })
        .map_err(caller_error)?;
        change_dict(py, &change)
    }

    /// Settles once: the first call wins and returns `True`; later ones return `False`.
    fn settle(&self, reason: &Bound<'_, PyAny>) -> PyResult<bool> {
        let reason = PySettleReason::extract(reason)?;
        Ok(holding_gil(|| self.inner.settle(reason)))
    }

    /// Settles `interrupt` at once; returns whether this call settled it.
    fn interrupt(&self) -> bool {
        holding_gil(|| self.inner.interrupt())
    }

    /// A card answer: `{"targets": [{"name", "status"}], "settled_by"?: "continue"}`, each
    /// status `skipped` or `approved`, each name one of the operation's targets. Returns
    /// `{"status": "ok", "settled": bool}`; raises `InvalidAnswer` (nothing moved) otherwise.
    fn respond(&self, py: Python<'_>, answer: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let answer = CardAnswer::from_json(&from_py(answer, "answer")?)
            .map_err(crate::errors::malformed_answer)?;
        let reply =
            holding_gil(|| self.inner.respond_naming_targets(&answer)).map_err(caller_error)?;
        Ok(to_py(py, &json!({"status": "ok", "settled": reply.settled}))?.unbind())
    }

    /// Continue: settles `continue` unless every target resolved. Returns whether it is
    /// settled now.
    fn continue_(&self) -> PyResult<bool> {
        let reply = holding_gil(|| self.inner.continue_()).map_err(caller_error)?;
        Ok(reply.settled)
    }

    /// The operation view (`op_id`, `seq`, `deadline_at`, `settled_at`, `settled_by`,
    /// `settled`, `targets` with links and connection ids): the live rows while open, the
    /// frozen snapshot once settled.
    fn view(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let view = crate::exit::detach(py, || self.inner.view());
        view.map(|v| {
            let value = serde_json::to_value(&v).unwrap_or(Value::Null);
            to_py(py, &value).map(Bound::unbind)
        })
        .transpose()
    }

    /// The operation as it stands, at any time: the live rows while open, the frozen
    /// snapshot once settled (what the card's panel shows after the tool returned), links
    /// and account ids included; a settled one without the card's instructions. `None` for
    /// a tool call with no operation.
    fn result(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let result = py.detach(|| self.inner.host_result());
        result
            .map(|r| {
                let value = serde_json::to_value(&r).unwrap_or(Value::Null);
                to_py(py, &value).map(Bound::unbind)
            })
            .transpose()
    }

    /// The card request (`connection.request`'s payload) as it would be now.
    fn request_payload(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let card = py.detach(|| self.inner.card_request());
        card.map(|c| {
            let value = serde_json::to_value(&c).unwrap_or(Value::Null);
            to_py(py, &value).map(Bound::unbind)
        })
        .transpose()
    }

    /// Settles `all_resolved` if every target resolved; returns whether this call settled.
    fn settle_if_all_resolved(&self) -> bool {
        holding_gil(|| self.inner.settle_if_all_resolved())
    }

    /// One row as it stands: `name, kind, action, state, detail, instructions, connect_url,
    /// connection_id, required_env, extra` (the fields moves attached), `next_read_at`
    /// (epoch seconds before which the watcher reads no row after a 429; `0.0` when
    /// none) and `snapshot` (the row as payloads show it). `None` for an unknown name.
    fn target(&self, py: Python<'_>, name: &str) -> PyResult<Option<Py<PyAny>>> {
        let Some((row, next_read_at)) = py.detach(|| self.inner.target(name)) else {
            return Ok(None);
        };
        let snapshot = serde_json::to_value(connop_core::payload::target_snapshot(&row))
            .unwrap_or(Value::Null);
        let value = json!({
            "name": &*row.name,
            "kind": row.kind.as_str(),
            "action": row.action.as_str(),
            "state": row.state.as_str(),
            "detail": row.detail_str(),
            "instructions": row.instructions().unwrap_or(""),
            "connect_url": row.connect_url.as_deref(),
            "connection_id": row.connection_id.as_deref(),
            "required_env": row.required_env(),
            "extra": row.extra(),
            "next_read_at": next_read_at.map_or(0.0, |t| t.as_secs_f64()),
            "snapshot": snapshot,
        });
        Ok(Some(to_py(py, &value)?.unbind()))
    }

    /// The targets' names, in order.
    fn target_names(&self, py: Python<'_>) -> Vec<String> {
        py.detach(|| self.inner.target_names())
            .iter()
            .map(|n| n.to_string())
            .collect()
    }

    /// Replaces what a local MCP server's row needs from the environment (`None` clears
    /// it). No move: no frame, no `seq` bump.
    fn set_required_env(&self, name: &str, env: &Bound<'_, PyAny>) -> PyResult<()> {
        let env = if env.is_none() {
            None
        } else {
            Some(from_py(env, "env")?)
        };
        self.inner.set_required_env(name, env).map_err(caller_error)
    }

    /// The session key it registers under.
    #[getter]
    fn session_key(&self) -> String {
        self.inner.session_key().to_string()
    }

    /// Registers an operation made by `Registry.detached` under its session key (and
    /// `profile`, when given). Raises `OperationAlreadyOpen` (`args == (message,
    /// open_op_id)`) while the session has an unsettled one; the operation goes on
    /// unregistered.
    #[pyo3(signature = (*, profile=None))]
    fn register(&self, profile: Option<String>) -> PyResult<()> {
        let profile = profile.map(Into::into);
        match holding_gil(|| self.inner.register(profile)).map_err(caller_error)? {
            Ok(()) => Ok(()),
            Err(open) => {
                let message =
                    connop_core::registry::already_open_text(&self.inner.session_key(), open);
                Err(OperationAlreadyOpen::new_err((
                    message,
                    open.as_str().to_owned(),
                )))
            }
        }
    }

    /// One pass of the watcher over an operation made by `Registry.detached`: each live row
    /// with an account id is read once, in order, through `gateway` (an object with
    /// `account_status(connection_id, *, timeout)`), on this thread, with the watcher's rules
    /// (the moves, late answers dropped, a 429 or a raised `RateLimited` holding every row
    /// back).
    fn observe(&self, gateway: &Bound<'_, PyAny>) -> PyResult<()> {
        let gateway = crate::gateway::PyGateway::new(gateway.clone().unbind());
        holding_gil(|| {
            self.inner.observe(&mut |call| {
                connop_core::tool_gateway::BlockingToolGateway::call(&gateway, call)
            })
        })
        .map_err(caller_error)
    }

    /// Removes its registry entry if the entry is still this operation; idempotent.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close_registration());
    }

    /// The tool call's result as JSON text, once it returned; `None` before.
    fn tool_result(&self, py: Python<'_>) -> Option<String> {
        crate::exit::detach(py, || self.inner.result()).map(|r| r.to_json())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Operation(op_id={:?}, settled={})",
            self.op_id().unwrap_or_default(),
            if self.settled(py) { "True" } else { "False" }
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .extract::<PyRef<'_, PyOperation>>()
            .is_ok_and(|o| o.inner.op_id() == self.inner.op_id())
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.op_id().hash(&mut h);
        h.finish()
    }
}

/// A turn's interrupt token: `trigger()` settles every attached operation `interrupt` at
/// once, and every one attached later until `reset()`.
#[pyclass(module = "connop", name = "Interrupt", frozen)]
#[derive(Clone)]
pub struct PyInterrupt {
    pub(crate) inner: Interrupt,
}

#[pymethods]
impl PyInterrupt {
    /// A token not yet triggered.
    #[new]
    fn new() -> Self {
        PyInterrupt {
            inner: Interrupt::new(),
        }
    }

    /// Interrupts every attached operation, now and until `reset()`.
    fn trigger(&self) {
        holding_gil(|| self.inner.trigger());
    }

    /// Clears the trigger (a new turn).
    fn reset(&self) {
        self.inner.reset();
    }

    /// Whether it is triggered.
    #[getter]
    fn triggered(&self) -> bool {
        self.inner.is_triggered()
    }

    fn __repr__(&self) -> String {
        format!(
            "Interrupt(triggered={})",
            if self.inner.is_triggered() {
                "True"
            } else {
                "False"
            }
        )
    }
}
