//! The test controls, `/sim/...`: set the world's state, queue faults, set one account, read
//! the log, reset. A malformed body changes nothing and says what is wrong and where.

use super::faults::{Fault, ForcedMint, HttpFailure, ScriptedRead};
use super::http::{SimRequest, SimResponse};
use super::state::{SimAccount, SimWorld, set_status};
use connop_core::tool_gateway::{AccountStatus, GatewayRoute, MintStatus};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Why a test-control body (`/sim/state`, `/sim/faults`, `/sim/accounts/<id>`) was refused;
/// nothing changed. Answered as 400 `{"error": "bad_request", "detail": <this text>}`.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The body does not parse.
    #[error("the body is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// A value has the wrong shape: `<what> is not <expected>`.
    #[error("{what} is not {expected}")]
    Shape {
        /// The value, as the body names it (`'flips'`, `faults[2]`, …).
        what: String,
        /// What it should be (`an object`, `a count`, …).
        expected: &'static str,
    },
    /// `/sim/state` has a key the world does not know.
    #[error("unknown state key '{0}'")]
    UnknownStateKey(String),
    /// A status that is not one of the enumerated ones.
    #[error("unknown status '{0}'")]
    UnknownStatus(String),
    /// A script's read (a step, in the control body's words) names neither a status nor an HTTP
    /// failure.
    #[error("a step has no 'status' or 'http'")]
    StepWithoutStatus,
    /// The error of a nested value, with where it is (`scripts.gmail`, `faults[0]`, …).
    #[error("{at}: {error}")]
    At {
        /// Where in the body.
        at: String,
        /// What is wrong there.
        error: Box<ControlError>,
    },
}

fn shape(what: impl Into<String>, expected: &'static str) -> ControlError {
    ControlError::Shape {
        what: what.into(),
        expected,
    }
}

fn at(at: impl Into<String>) -> impl FnOnce(ControlError) -> ControlError {
    let at = at.into();
    move |error| ControlError::At {
        at,
        error: Box::new(error),
    }
}

impl SimWorld {
    /// A `/sim/<rest>` request, once its token is checked.
    pub(super) fn control(
        &mut self,
        request: &SimRequest,
        rest: &str,
        now: Instant,
    ) -> SimResponse {
        let method = request.method.as_str();
        let body = || -> Result<Value, ControlError> {
            if request.body.trim().is_empty() {
                return Ok(Value::Object(Map::new()));
            }
            Ok(serde_json::from_str(&request.body)?)
        };
        let done = |result: Result<(), ControlError>| match result {
            Ok(()) => SimResponse::ok(),
            Err(error) => SimResponse::bad_request(&error.to_string()),
        };
        match (method, rest) {
            ("POST", "state") => done(body().and_then(|b| self.apply_state(&b, now))),
            ("POST", "faults") => done(body().and_then(|b| self.queue_faults(&b))),
            ("POST", "reset") => {
                self.reset();
                SimResponse::ok()
            }
            ("GET", "log") => SimResponse::json(200, &self.log_json()),
            ("POST", _) if rest.starts_with("accounts/") => {
                let id = &rest["accounts/".len()..];
                match body() {
                    Err(error) => SimResponse::bad_request(&error.to_string()),
                    Ok(b) => match self.set_account(id, &b, now) {
                        Ok(true) => SimResponse::ok(),
                        Ok(false) => SimResponse::error(404, "connection_not_found"),
                        Err(error) => SimResponse::bad_request(&error.to_string()),
                    },
                }
            }
            _ => SimResponse::error(404, "not_found"),
        }
    }

    /// Applies a `POST /sim/state` body (see the module docs). Keys that are absent keep their
    /// value; an unknown key or a malformed value changes nothing and is an error.
    pub fn apply_state(&mut self, state: &Value, now: Instant) -> Result<(), ControlError> {
        let obj = state
            .as_object()
            .ok_or_else(|| shape("the state", "an object"))?;
        let mut connected = None;
        let mut listed = None;
        let mut forced = None;
        let mut flips = None;
        let mut scripts = None;
        let mut status_reason = None;
        let mut connection_ids = None;
        for (key, value) in obj {
            match key.as_str() {
                "connected" => connected = Some(slugs(value, key)?),
                "listed" => listed = Some(slugs(value, key)?),
                "mint" => forced = Some(parse_forced(value)?),
                "flips" => {
                    let map = value
                        .as_object()
                        .ok_or_else(|| shape("'flips'", "an object"))?;
                    let mut out = BTreeMap::new();
                    for (slug, n) in map {
                        let n = n
                            .as_u64()
                            .ok_or_else(|| shape(format!("flips.{slug}"), "a count"))?;
                        out.insert(slug.clone(), n as usize);
                    }
                    flips = Some(out);
                }
                "scripts" => {
                    let map = value
                        .as_object()
                        .ok_or_else(|| shape("'scripts'", "an object"))?;
                    let mut out = BTreeMap::new();
                    for (slug, reads) in map {
                        let reads = reads
                            .as_array()
                            .ok_or_else(|| shape(format!("scripts.{slug}"), "an array"))?;
                        let reads = reads
                            .iter()
                            .map(parse_read)
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(at(format!("scripts.{slug}")))?;
                        out.insert(slug.clone(), reads);
                    }
                    scripts = Some(out);
                }
                "statusReason" => status_reason = Some(optional_string(value, key)?),
                "connectionIds" => {
                    connection_ids = Some(
                        value
                            .as_bool()
                            .ok_or_else(|| shape("'connectionIds'", "a boolean"))?,
                    )
                }
                other => return Err(ControlError::UnknownStateKey(other.to_owned())),
            }
        }
        if let Some(connected) = connected {
            for account in &mut self.accounts {
                if account.status == AccountStatus::Active
                    && !connected.contains(&account.connector)
                {
                    set_status(account, AccountStatus::Inactive, None, now);
                }
            }
            for slug in &connected {
                if self.active_account_of(slug).is_some() {
                    continue;
                }
                let id = format!("ca_{slug}_0");
                match self.account_mut(&id) {
                    Some(account) => set_status(account, AccountStatus::Active, None, now),
                    None => {
                        self.new_account(slug, 0, AccountStatus::Active, None, now);
                    }
                }
            }
        }
        if let Some(listed) = listed {
            self.listed = listed;
        }
        if let Some(forced) = forced {
            self.forced = forced;
        }
        if let Some(flips) = flips {
            self.flips = flips;
        }
        if let Some(scripts) = scripts {
            self.scripts = scripts;
        }
        if let Some(reason) = status_reason {
            self.status_reason = reason;
        }
        if let Some(ids) = connection_ids {
            self.connection_ids = ids;
        }
        Ok(())
    }

    /// Queues the faults of a `POST /sim/faults` body, after any already queued on a route.
    pub fn queue_faults(&mut self, body: &Value) -> Result<(), ControlError> {
        let faults = body
            .get("faults")
            .and_then(Value::as_array)
            .ok_or_else(|| shape("'faults'", "an array"))?;
        let mut parsed = Vec::new();
        for (i, fault) in faults.iter().enumerate() {
            let obj = fault
                .as_object()
                .ok_or_else(|| shape(format!("faults[{i}]"), "an object"))?;
            let route = obj.get("route").and_then(Value::as_str);
            let Some(route) = route.and_then(GatewayRoute::parse) else {
                return Err(shape(format!("faults[{i}].route"), "list, mint or account"));
            };
            let here = || at(format!("faults[{i}]"));
            let failure = parse_failure(obj, "status").map_err(here())?;
            let delay_ms = optional_u64(obj.get("delay_ms"), "delay_ms").map_err(here())?;
            let count = optional_u64(obj.get("count"), "count")
                .map_err(here())?
                .unwrap_or(1);
            let reset = match obj.get("reset") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(reset)) => *reset,
                Some(_) => return Err(here()(shape("'reset'", "a bool"))),
            };
            parsed.push((
                route,
                Fault {
                    failure,
                    delay: Duration::from_millis(delay_ms.unwrap_or(0)),
                    reset,
                    remaining: count as usize,
                },
            ));
        }
        for (route, fault) in parsed {
            self.faults.push(route, fault);
        }
        Ok(())
    }

    /// Sets one account from a `POST /sim/accounts/<id>` body `{"status", "statusReason"?}`.
    /// With a `"connector"` key an unknown id is created; otherwise it answers `Ok(false)`.
    pub fn set_account(
        &mut self,
        id: &str,
        body: &Value,
        now: Instant,
    ) -> Result<bool, ControlError> {
        let status = body.get("status").and_then(Value::as_str).unwrap_or("");
        let status = AccountStatus::parse(status)
            .ok_or_else(|| ControlError::UnknownStatus(status.to_owned()))?;
        let reason = optional_string(
            body.get("statusReason").unwrap_or(&Value::Null),
            "statusReason",
        )?;
        let connector =
            optional_string(body.get("connector").unwrap_or(&Value::Null), "connector")?;
        match self.account_mut(id) {
            Some(account) => {
                set_status(account, status, reason, now);
                Ok(true)
            }
            None => match connector {
                Some(connector) => {
                    self.add_account(SimAccount {
                        connection_id: id.to_owned(),
                        connector,
                        status,
                        status_reason: reason,
                        created: now,
                        updated: now,
                        auto_at: None,
                        reads: 0,
                        link: false,
                        return_to: None,
                        nonces: Vec::new(),
                    });
                    Ok(true)
                }
                None => Ok(false),
            },
        }
    }
}

fn parse_failure(obj: &Map<String, Value>, status_key: &str) -> Result<HttpFailure, ControlError> {
    let status = optional_u64(obj.get(status_key), status_key)?;
    if let Some(s) = status {
        if !(100..=999).contains(&s) {
            return Err(shape(format!("'{status_key}' {s}"), "an HTTP status"));
        }
    }
    Ok(HttpFailure {
        status: status.map(|s| s as u16),
        retry_after_ms: optional_u64(obj.get("retry_after_ms"), "retry_after_ms")?,
        body: optional_string(obj.get("body").unwrap_or(&Value::Null), "body")?,
    })
}

fn parse_read(read: &Value) -> Result<ScriptedRead, ControlError> {
    let status =
        |s: &str| AccountStatus::parse(s).ok_or_else(|| ControlError::UnknownStatus(s.to_owned()));
    match read {
        Value::String(s) => Ok(ScriptedRead::Status(status(s)?, None)),
        Value::Object(obj) if obj.contains_key("http") => {
            let failure = parse_failure(obj, "http")?;
            Ok(ScriptedRead::Http(failure))
        }
        Value::Object(obj) => {
            let s = obj
                .get("status")
                .and_then(Value::as_str)
                .ok_or(ControlError::StepWithoutStatus)?;
            let reason = optional_string(
                obj.get("statusReason").unwrap_or(&Value::Null),
                "statusReason",
            )?;
            Ok(ScriptedRead::Status(status(s)?, reason))
        }
        _ => Err(shape("a step", "a string or an object")),
    }
}

fn parse_forced(value: &Value) -> Result<BTreeMap<String, ForcedMint>, ControlError> {
    let map = value
        .as_object()
        .ok_or_else(|| shape("'mint'", "an object"))?;
    let mut out = BTreeMap::new();
    for (slug, forced) in map {
        let status = forced.get("status").and_then(Value::as_str).unwrap_or("");
        let status = MintStatus::parse(status).ok_or_else(|| {
            at(format!("mint.{slug}"))(ControlError::UnknownStatus(status.to_owned()))
        })?;
        let status_reason = optional_string(
            forced.get("statusReason").unwrap_or(&Value::Null),
            "statusReason",
        )?;
        let connection_id = match forced.get("connectionId") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err(shape(format!("mint.{slug}.connectionId"), "a boolean")),
        };
        out.insert(
            slug.clone(),
            ForcedMint {
                status,
                status_reason,
                connection_id,
            },
        );
    }
    Ok(out)
}

fn slugs(value: &Value, key: &str) -> Result<Vec<String>, ControlError> {
    value
        .as_array()
        .and_then(|a| {
            a.iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| shape(format!("'{key}'"), "an array of strings"))
}

fn optional_string(value: &Value, key: &str) -> Result<Option<String>, ControlError> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        _ => Err(shape(format!("'{key}'"), "a string")),
    }
}

fn optional_u64(value: Option<&Value>, key: &str) -> Result<Option<u64>, ControlError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| shape(format!("'{key}'"), "a non-negative integer")),
    }
}
