//! What a host laying another system's module layout over connop reads from the core: the
//! contract as data, the one lookup of the transition table, the tool's argument check and
//! its texts in either dialect. The host builds its own names from these; it decides nothing.

use crate::enums::{PyKind, PyTargetState};
use connop_core::contract::{self, Actor, Kind, SettleReason, TargetAction, TargetState};
use connop_core::tool::{self, Dialect};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::{Value, json};

/// A dialect by name: `connop` (connop's own words) or `original` (the original agent
/// system's words and argument forms).
pub fn dialect(name: Option<&str>) -> PyResult<Dialect> {
    match name {
        None | Some("connop") => Ok(Dialect::Connop),
        Some("original") => Ok(Dialect::Original),
        Some(other) => Err(PyValueError::new_err(format!(
            "dialect must be 'connop' or 'original', not {other:?}"
        ))),
    }
}

/// The contract as data: every member of each vocabulary as `[python name, wire value]`
/// (`kinds`, `states`, `actors`, `actions`, `settle_reasons`), the `resolved` states, and
/// the transition table's `edges` as `[kind, from, to, actor]`.
#[pyfunction]
pub fn contract_table(py: Python<'_>) -> PyResult<Py<PyAny>> {
    fn members<T: Copy>(all: &[T], name: impl Fn(T) -> &'static str) -> Value {
        all.iter().map(|&m| json!([name(m), name(m)])).collect()
    }
    let settle_reasons: Value = SettleReason::ALL
        .iter()
        .map(|r| {
            // `continue` is a Python keyword: its member is `continue_`.
            let python = match r {
                SettleReason::Continue => "continue_",
                other => other.as_str(),
            };
            json!([python, r.as_str()])
        })
        .collect();
    let edges: Value = Kind::ALL
        .iter()
        .flat_map(|&kind| {
            contract::edges(kind).iter().map(move |(from, to, actor)| {
                json!([kind.as_str(), from.as_str(), to.as_str(), actor.as_str()])
            })
        })
        .collect();
    let resolved: Value = TargetState::ALL
        .iter()
        .filter(|s| s.is_resolved())
        .map(|s| Value::from(s.as_str()))
        .collect();
    let table = json!({
        "kinds": members(&Kind::ALL, Kind::as_str),
        "states": members(&TargetState::ALL, TargetState::as_str),
        "actors": members(&Actor::ALL, Actor::as_str),
        "actions": members(&TargetAction::ALL, TargetAction::as_str),
        "settle_reasons": settle_reasons,
        "resolved": resolved,
        "edges": edges,
    });
    Ok(crate::convert::to_py(py, &table)?.unbind())
}

/// The one actor the transition table allows to move a target of `kind` from `from_` to
/// `to`, as its wire name, or `None` when no edge leads there.
#[pyfunction]
pub fn allowed(
    kind: &Bound<'_, PyAny>,
    from_: &Bound<'_, PyAny>,
    to: &Bound<'_, PyAny>,
) -> PyResult<Option<&'static str>> {
    let kind = PyKind::extract(kind)?;
    let from = PyTargetState::extract(from_)?;
    let to = PyTargetState::extract(to)?;
    Ok(contract::allowed_actor(kind, from, to).map(Actor::as_str))
}

/// Checks a tool call's arguments before any client is built: the refusal as the tool's
/// JSON result, or `None` when the call may go on. `available=False` refuses valid
/// arguments with the session's "not available" text.
#[pyfunction]
#[pyo3(signature = (args, *, dialect=None, available=true))]
pub fn check_args(
    args: &Bound<'_, PyAny>,
    dialect: Option<&str>,
    available: bool,
) -> PyResult<Option<String>> {
    let dialect = self::dialect(dialect)?;
    Ok(crate::tool::refusal(
        &crate::tool::args_of(args)?,
        dialect,
        available,
    ))
}

/// The tool's JSON result when the gateway cannot be reached (its client could not be
/// built, say): `reason` says why.
#[pyfunction]
#[pyo3(signature = (reason, *, dialect=None))]
pub fn gateway_failed(reason: &str, dialect: Option<&str>) -> PyResult<String> {
    Ok(crate::tool::gateway_failed(reason, self::dialect(dialect)?))
}

/// The tool's model-facing declaration in `dialect` (`name`, `description`, `parameters`).
#[pyfunction]
#[pyo3(signature = (*, dialect=None))]
pub fn tool_schema(py: Python<'_>, dialect: Option<&str>) -> PyResult<Py<PyAny>> {
    let schema = tool::schema(self::dialect(dialect)?);
    Ok(crate::convert::to_py(py, &schema)?.unbind())
}

/// The surface a host's platform name stands for: `""`, `desktop`, `tui`, `cli`, or
/// `messaging` for any other (a chat platform: links, no card).
#[pyfunction]
pub fn surface_of_platform(platform: &str) -> String {
    connop_core::flow::Surface::of_platform(platform)
        .as_str()
        .to_owned()
}

/// A variable of the process's environment, or `None`: what `os.environ.get(name)` answers
/// (Python's `os.environ` writes through to the process's), without the exception Python
/// raises and catches inside for an unset one. A host layer reads a few of these on every
/// tool call.
#[pyfunction]
#[pyo3(name = "_getenv")]
pub fn getenv(name: &str) -> Option<std::ffi::OsString> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return None;
    }
    std::env::var_os(name)
}
