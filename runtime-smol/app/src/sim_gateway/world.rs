//! The simulated gateway's world: plain data and a sans-IO request handler.
//!
//! [`SimWorld::handle`] turns one [`SimRequest`] into one [`SimResponse`] at a given instant;
//! the HTTP layer only converts to and from hyper and sleeps the response's delay. The world
//! draws nothing at random itself: its link ids and nonces come from the [`IdSource`] it is
//! given.

use super::consent;
use crate::net::guard::Refusal;
use connop_core::tool_gateway::{AccountStatus, ConnectorRow, MintStatus};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The connectors the simulated gateway lists and mints by default (SPEC §6.1), in list order.
pub const CATALOG: [&str; 6] = [
    "gmail",
    "notion",
    "slack",
    "github",
    "linear",
    "google_calendar",
];

/// The status reason of a mint row for a name the gateway does not list.
pub const UNKNOWN_CONNECTOR: &str = "unknown connector";

/// How many unused nonces an account keeps (one per consent page shown): an old tab's form
/// stops working after this many newer ones.
const MAX_NONCES: usize = 8;

/// The status reason of an account whose consent page was denied.
pub const USER_DENIED: &str = "user denied access";

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
    /// A script step names neither a status nor an HTTP failure.
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

/// Where a world's link ids and nonces come from. A link id is `ca_<connector>_` and
/// [`IdSource::account`]; whoever knows a pending link's id can open its consent page, so the
/// server's source is unguessable (`RandomIds`, 128 random bits each); tests that name
/// accounts give the world [`NumberedIds`].
pub trait IdSource: Send + std::fmt::Debug {
    /// What follows `ca_<connector>_` in the id of an account made by the `mint`-th mint call
    /// (counted from 1).
    fn account(&mut self, mint: usize) -> String;
    /// A fresh one-time nonce for a consent page's form.
    fn nonce(&mut self) -> String;
}

/// Guessable ids for tests: `ca_<connector>_<n>`, `n` the mint call that made the account,
/// and nonces counted from 1. Never what a listener uses.
#[derive(Clone, Debug, Default)]
pub struct NumberedIds {
    nonces: u64,
}

impl IdSource for NumberedIds {
    fn account(&mut self, mint: usize) -> String {
        mint.to_string()
    }

    fn nonce(&mut self) -> String {
        self.nonces += 1;
        format!("nonce{}", self.nonces)
    }
}

/// How many accounts the world keeps: the newest ones.
pub const ACCOUNT_LIMIT: usize = 10_000;
/// How many requests the log keeps: the last ones (SPEC §12.2).
pub const LOG_LIMIT: usize = 10_000;
/// How much of a request's body the log keeps.
pub const LOG_BODY_LIMIT: usize = 4096;

/// One HTTP request as the world sees it (and as `GET /sim/log` reports it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The raw query string without `?`; empty when there is none.
    pub query: String,
    /// Headers in arrival order, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body as text (lossy UTF-8).
    pub body: String,
}

impl SimRequest {
    /// A request with no headers and no body; `target` may carry a `?query`.
    pub fn new(method: &str, target: &str) -> Self {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        SimRequest {
            method: method.to_owned(),
            path: path.to_owned(),
            query: query.to_owned(),
            headers: Vec::new(),
            body: String::new(),
        }
    }

    /// Adds a header (the name is lower-cased).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_owned()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = body.into();
        self
    }

    /// The request as the log keeps it: the `Authorization` value redacted, the body cut at
    /// [`LOG_BODY_LIMIT`] bytes (on a character boundary).
    fn for_log(&self) -> SimRequest {
        let headers = self
            .headers
            .iter()
            .map(|(name, value)| {
                if name.eq_ignore_ascii_case("authorization") {
                    (name.clone(), "[redacted]".to_owned())
                } else {
                    (name.clone(), value.clone())
                }
            })
            .collect();
        let mut end = self.body.len().min(LOG_BODY_LIMIT);
        while !self.body.is_char_boundary(end) {
            end -= 1;
        }
        SimRequest {
            method: self.method.clone(),
            path: self.path.clone(),
            query: self.query.clone(),
            headers,
            body: self.body[..end].to_owned(),
        }
    }

    /// The first value of a header, by case-insensitive name.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The log entry: `{"method", "path", "query", "headers", "body"}`; headers are an object
    /// of lower-cased names (repeated names joined with `, `).
    pub fn to_json(&self) -> Value {
        let mut headers = Map::new();
        for (name, value) in &self.headers {
            let name = name.to_ascii_lowercase();
            match headers.get_mut(&name) {
                Some(Value::String(prev)) => {
                    prev.push_str(", ");
                    prev.push_str(value);
                }
                _ => {
                    headers.insert(name, Value::String(value.clone()));
                }
            }
        }
        json!({
            "method": self.method,
            "path": self.path,
            "query": self.query,
            "headers": headers,
            "body": self.body,
        })
    }
}

/// One answer of the world: what the HTTP layer sends after waiting `delay`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimResponse {
    /// The HTTP status.
    pub status: u16,
    /// Extra headers (`content-type` included), lower-cased names.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
    /// How long to wait before answering (a queued fault's `delay_ms`).
    pub delay: Duration,
    /// Close the connection after `delay` without answering (a queued fault's `reset`); the
    /// status, headers and body are then never sent.
    pub reset: bool,
}

impl SimResponse {
    /// The answer to a request the listener refused before the world saw it: a page on the
    /// consent routes (a person's browser shows it), `{"error", "detail"}` elsewhere.
    pub fn refused(path: &str, refusal: &Refusal) -> Self {
        let status = refusal.status().as_u16();
        let mut response = if path.starts_with("/connect/") {
            let title = match refusal {
                Refusal::Host { .. } | Refusal::NoHost { .. } => "Wrong address",
                Refusal::Origin { .. } => "Not allowed from another site",
                Refusal::ContentType { .. } => "Not a consent form",
                Refusal::TooLarge { .. } => "Too large",
                Refusal::Timeout => "Too slow",
            };
            Self::html(status, consent::message_page(title, &refusal.to_string()))
        } else {
            Self::json(
                status,
                &json!({"error": refusal.code(), "detail": refusal.to_string()}),
            )
        };
        if refusal.closes() {
            response.headers.push(("connection".into(), "close".into()));
        }
        response
    }

    fn json(status: u16, body: &Value) -> Self {
        SimResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.to_string(),
            delay: Duration::ZERO,
            reset: false,
        }
    }

    /// A page for the person's browser. No other page may frame it: a consent page shown
    /// inside someone else's page could have its Approve clicked through.
    fn html(status: u16, body: String) -> Self {
        SimResponse {
            status,
            headers: vec![
                ("content-type".into(), "text/html; charset=utf-8".into()),
                ("x-frame-options".into(), "DENY".into()),
                (
                    "content-security-policy".into(),
                    "frame-ancestors 'none'".into(),
                ),
            ],
            body,
            delay: Duration::ZERO,
            reset: false,
        }
    }

    fn error(status: u16, error: &str) -> Self {
        Self::json(status, &json!({ "error": error }))
    }

    fn bad_request(detail: &str) -> Self {
        Self::json(400, &json!({ "error": "bad_request", "detail": detail }))
    }

    fn ok() -> Self {
        Self::json(200, &json!({ "ok": true }))
    }

    /// The body parsed as JSON (`Value::Null` when it does not parse).
    pub fn json_body(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// The first value of a header, by case-insensitive name.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One account of the simulated gateway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimAccount {
    /// `ca_<slug>_<token>`, the token from the world's [`IdSource`] (`0` for accounts made by
    /// `/sim/state`).
    pub connection_id: String,
    /// The connector slug.
    pub connector: String,
    /// Its own status (what a read answers when no script or flip applies).
    pub status: AccountStatus,
    /// Its own status reason.
    pub status_reason: Option<String>,
    /// When it was made.
    pub created: Instant,
    /// When its status last changed.
    pub updated: Instant,
    /// When auto-complete makes it active, if it is still pending then.
    pub auto_at: Option<Instant>,
    /// How many authorized account reads asked for it (faulted ones included).
    pub reads: usize,
    /// Whether it was minted with a connect link (its consent page can decide it).
    pub link: bool,
    /// The `returnTo` of the mint that made it.
    pub return_to: Option<String>,
    /// The nonces its consent pages handed out and not used yet (the newest few).
    pub nonces: Vec<String>,
}

#[derive(Clone, Debug)]
struct ForcedMint {
    status: MintStatus,
    status_reason: Option<String>,
    connection_id: Option<bool>,
}

#[derive(Clone, Debug)]
enum ScriptStep {
    Status(AccountStatus, Option<String>),
    Http(HttpFailure),
}

#[derive(Clone, Debug)]
struct HttpFailure {
    status: Option<u16>,
    retry_after_ms: Option<u64>,
    body: Option<String>,
}

#[derive(Clone, Debug)]
struct Fault {
    failure: HttpFailure,
    delay: Duration,
    reset: bool,
    remaining: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    List = 0,
    Mint = 1,
    Account = 2,
}

/// The simulated gateway's state: catalog, accounts, knobs, queued faults and the request log.
#[derive(Debug)]
pub struct SimWorld {
    base_url: String,
    /// Where link ids and nonces come from.
    ids: Box<dyn IdSource>,
    token: Option<String>,
    auto_complete: Option<Duration>,
    epoch: (Instant, SystemTime),
    listed: Vec<String>,
    /// The newest [`ACCOUNT_LIMIT`] accounts, oldest first.
    accounts: VecDeque<SimAccount>,
    forced: BTreeMap<String, ForcedMint>,
    flips: BTreeMap<String, usize>,
    scripts: BTreeMap<String, Vec<ScriptStep>>,
    status_reason: Option<String>,
    connection_ids: bool,
    faults: [VecDeque<Fault>; 3],
    mints: usize,
    /// The last [`LOG_LIMIT`] requests, redacted and cut (SPEC §12.2).
    log: VecDeque<SimRequest>,
}

impl SimWorld {
    /// The initial world. `base_url` (`http://<addr>`) prefixes connect links; `token`, when
    /// set, is required on every `/v1/...` and `/sim/...` route; `auto_complete` makes minted
    /// accounts active that long after their mint; `ids` names accounts and makes nonces.
    pub fn new(
        base_url: &str,
        token: Option<String>,
        auto_complete: Option<Duration>,
        ids: Box<dyn IdSource>,
    ) -> Self {
        SimWorld {
            base_url: base_url.trim_end_matches('/').to_owned(),
            ids,
            token,
            auto_complete,
            epoch: (Instant::now(), SystemTime::now()),
            listed: CATALOG.iter().map(|s| (*s).to_owned()).collect(),
            accounts: VecDeque::new(),
            forced: BTreeMap::new(),
            flips: BTreeMap::new(),
            scripts: BTreeMap::new(),
            status_reason: None,
            connection_ids: true,
            faults: Default::default(),
            mints: 0,
            log: VecDeque::new(),
        }
    }

    /// Back to the initial world (same address, token, auto-complete and id source); the log
    /// is cleared.
    pub fn reset(&mut self) {
        let epoch = self.epoch;
        let ids = std::mem::replace(&mut self.ids, Box::new(NumberedIds::default()));
        *self = SimWorld::new(&self.base_url, self.token.take(), self.auto_complete, ids);
        self.epoch = epoch;
    }

    /// Every request received so far, in order.
    pub fn log(&self) -> impl ExactSizeIterator<Item = &SimRequest> + '_ {
        self.log.iter()
    }

    /// `{"requests": [...]}`, the body of `GET /sim/log`.
    pub fn log_json(&self) -> Value {
        json!({ "requests": self.log.iter().map(SimRequest::to_json).collect::<Vec<_>>() })
    }

    /// Every account kept (the newest 10,000), in creation order.
    pub fn accounts(&self) -> &VecDeque<SimAccount> {
        &self.accounts
    }

    /// Adds an account; past [`ACCOUNT_LIMIT`], the oldest is forgotten (its link then reads
    /// as unknown, as an expired link would at a hosted gateway): a gateway left running
    /// for a month keeps a bounded world.
    fn add_account(&mut self, account: SimAccount) {
        if self.accounts.len() == ACCOUNT_LIMIT {
            self.accounts.pop_front();
        }
        self.accounts.push_back(account);
    }

    /// One account by id.
    pub fn account(&self, connection_id: &str) -> Option<&SimAccount> {
        self.accounts
            .iter()
            .find(|a| a.connection_id == connection_id)
    }

    /// How many mint calls were made.
    pub fn mint_count(&self) -> usize {
        self.mints
    }

    /// Answers one request at `now` and logs it.
    pub fn handle(&mut self, request: SimRequest, now: Instant) -> SimResponse {
        if self.log.len() == LOG_LIMIT {
            self.log.pop_front();
        }
        self.log.push_back(request.for_log());
        let response = self.answer(request, now);
        if matches!(response.status, 401 | 413) {
            // A refused request's body is not kept: a flood of refused posts costs nothing.
            if let Some(entry) = self.log.back_mut() {
                entry.body = String::new();
            }
        }
        response
    }

    /// The answer to one request, once it is logged.
    fn answer(&mut self, request: SimRequest, now: Instant) -> SimResponse {
        self.auto_complete_until(now);
        let path = request.path.as_str();
        if path == "/v1" || path.starts_with("/v1/") {
            return self.api(&request, now);
        }
        if let Some(id) = path.strip_prefix("/connect/") {
            return match request.method.as_str() {
                "GET" => self.consent_page(id),
                "POST" => self.consent_decision(id, &request.body, now),
                _ => {
                    let mut res = SimResponse::error(405, "method_not_allowed");
                    res.headers.push(("allow".into(), "GET, POST".into()));
                    res
                }
            };
        }
        if let Some(rest) = path.strip_prefix("/sim/") {
            // The token guards the control routes too: only `/connect/*` (the person's
            // browser) is open.
            if let Some(refused) = self.unauthorized(&request) {
                return refused;
            }
            return self.control(&request, rest, now);
        }
        SimResponse::error(404, "not_found")
    }

    /// `Some(401)` when a token is set and the request does not carry it.
    fn unauthorized(&self, request: &SimRequest) -> Option<SimResponse> {
        if authorized(self.token.as_deref(), request.header_value("authorization")) {
            return None;
        }
        let mut res = SimResponse::error(401, "unauthorized");
        res.headers
            .push(("www-authenticate".into(), "Bearer".into()));
        Some(res)
    }

    fn api(&mut self, request: &SimRequest, now: Instant) -> SimResponse {
        if let Some(refused) = self.unauthorized(request) {
            return refused;
        }
        let path = request.path.as_str();
        let (route, method) = if path == "/v1/connectors" {
            (Route::List, "GET")
        } else if path == "/v1/connectors/connections" {
            (Route::Mint, "POST")
        } else if path.starts_with("/v1/connectors/accounts/") {
            (Route::Account, "GET")
        } else {
            return SimResponse::error(404, "not_found");
        };
        if request.method != method {
            let mut res = SimResponse::error(405, "method_not_allowed");
            res.headers.push(("allow".into(), method.into()));
            return res;
        }
        let id = path.strip_prefix("/v1/connectors/accounts/").unwrap_or("");
        // Every authorized request on a route counts, faulted or not.
        match route {
            Route::Mint => self.mints += 1,
            Route::Account => {
                if let Some(account) = self.account_mut(id) {
                    account.reads += 1;
                }
            }
            Route::List => {}
        }
        let fault = self.take_fault(route);
        let mut response = match &fault {
            Some(fault) if fault.failure.status.is_some() || fault.failure.body.is_some() => {
                failure_response(route, &fault.failure)
            }
            _ => match route {
                Route::List => self.list(),
                Route::Mint => self.mint(&request.body, now),
                Route::Account => self.read_account(id),
            },
        };
        if let Some(fault) = fault {
            response.delay = fault.delay;
            response.reset = fault.reset;
        }
        response
    }

    fn take_fault(&mut self, route: Route) -> Option<Fault> {
        let queue = &mut self.faults[route as usize];
        let front = queue.front_mut()?;
        front.remaining -= 1;
        let fault = front.clone();
        if front.remaining == 0 {
            queue.pop_front();
        }
        Some(fault)
    }

    fn list(&self) -> SimResponse {
        let items: Vec<Value> = self
            .listed
            .iter()
            .map(|name| {
                let connected = self.active_account_of(name).is_some();
                let mut row = ConnectorRow::new(name, true, connected);
                let latest = self.accounts.iter().rev().find(|a| &a.connector == name);
                if let Some(reason) = latest.and_then(|a| a.status_reason.as_deref()) {
                    row = row.with_status_reason(reason);
                }
                row.raw
            })
            .collect();
        SimResponse::json(200, &json!({ "items": items, "nextCursor": null }))
    }

    fn mint(&mut self, body: &str, now: Instant) -> SimResponse {
        let n = self.mints;
        let Ok(body) = serde_json::from_str::<Value>(body) else {
            return SimResponse::bad_request("the body is not JSON");
        };
        let Some(connectors) = body.get("connectors").and_then(Value::as_array) else {
            return SimResponse::bad_request("'connectors' is not an array");
        };
        let Some(connectors) = connectors
            .iter()
            .map(|c| c.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
        else {
            return SimResponse::bad_request("'connectors' holds a non-string");
        };
        let reinitiate = match body.get("reinitiate") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return SimResponse::bad_request("'reinitiate' is not a boolean"),
        };
        // Checked here, so that no decision can later meet a return URL it cannot send the
        // browser to.
        let return_to = match body.get("returnTo") {
            None | Some(Value::Null) => None,
            Some(Value::String(r)) => match consent::check_return_to(r) {
                Ok(()) => Some(r.as_str()),
                Err(refused) => return SimResponse::bad_request(&refused.to_string()),
            },
            Some(_) => return SimResponse::bad_request("'returnTo' is not a string"),
        };
        let results: Vec<Value> = connectors
            .iter()
            .map(|slug| self.mint_row(slug, reinitiate, return_to, n, now))
            .collect();
        let count = |status: &str| results.iter().filter(|r| r["status"] == status).count();
        let summary = json!({
            "requested": results.len(),
            "active": count("active"),
            "initiated": count("initiated"),
            "failed": count("failed"),
        });
        SimResponse::json(200, &json!({ "results": results, "summary": summary }))
    }

    fn mint_row(
        &mut self,
        slug: &str,
        reinitiate: bool,
        return_to: Option<&str>,
        n: usize,
        now: Instant,
    ) -> Value {
        let mut row = Map::new();
        row.insert("connector".into(), slug.into());
        if !self.listed.iter().any(|l| l == slug) {
            row.insert("status".into(), "failed".into());
            row.insert("statusReason".into(), UNKNOWN_CONNECTOR.into());
            return Value::Object(row);
        }
        let active = self
            .active_account_of(slug)
            .map(|a| a.connection_id.clone());
        let (status, reason, give_id) = match self.forced.get(slug) {
            Some(forced) => (
                forced.status,
                forced.status_reason.clone().or(self.status_reason.clone()),
                forced
                    .connection_id
                    .unwrap_or(self.connection_ids && forced.status != MintStatus::Failed),
            ),
            None => (
                if active.is_some() && !reinitiate {
                    MintStatus::Active
                } else {
                    MintStatus::Initiated
                },
                self.status_reason.clone(),
                self.connection_ids,
            ),
        };
        let id = match status {
            MintStatus::Active => Some(match active.clone() {
                Some(id) => id,
                None => self.new_account(slug, n, AccountStatus::Active, None, now),
            }),
            MintStatus::Initiated => {
                let id = self.new_account(slug, n, AccountStatus::Pending, None, now);
                if let Some(account) = self.account_mut(&id) {
                    account.link = true;
                    account.return_to = return_to.map(str::to_owned);
                }
                row.insert(
                    "connectUrl".into(),
                    format!("{}/connect/{id}", self.base_url).into(),
                );
                Some(id)
            }
            MintStatus::Failed => give_id
                .then(|| self.new_account(slug, n, AccountStatus::Failed, reason.clone(), now)),
        };
        row.insert("status".into(), status.as_str().into());
        if let (true, Some(id)) = (give_id, id) {
            row.insert("connectionId".into(), id.into());
        }
        if let Some(reason) = reason {
            row.insert("statusReason".into(), reason.into());
        }
        if reinitiate && active.is_some() && status == MintStatus::Initiated {
            row.insert("reinitiated".into(), true.into());
        }
        Value::Object(row)
    }

    fn new_account(
        &mut self,
        slug: &str,
        n: usize,
        status: AccountStatus,
        status_reason: Option<String>,
        now: Instant,
    ) -> String {
        let id = if n == 0 {
            format!("ca_{slug}_0")
        } else {
            format!("ca_{slug}_{}", self.ids.account(n))
        };
        if self.account(&id).is_none() {
            let auto_at = match status {
                // A delay past what `Instant` holds (`--auto-complete 1e19`) never completes.
                AccountStatus::Pending => self.auto_complete.and_then(|d| now.checked_add(d)),
                _ => None,
            };
            self.add_account(SimAccount {
                connection_id: id.clone(),
                connector: slug.to_owned(),
                status,
                status_reason,
                created: now,
                updated: now,
                auto_at,
                reads: 0,
                link: false,
                return_to: None,
                nonces: Vec::new(),
            });
        }
        id
    }

    fn read_account(&self, id: &str) -> SimResponse {
        let Some(account) = self.account(id) else {
            return SimResponse::error(404, "connection_not_found");
        };
        let nth = account.reads.max(1);
        let global = self.status_reason.clone();
        let script = self
            .scripts
            .get(&account.connector)
            .filter(|s| !s.is_empty());
        let (status, reason) = if let Some(script) = script {
            match &script[nth.min(script.len()) - 1] {
                ScriptStep::Status(status, reason) => (*status, reason.clone().or(global)),
                ScriptStep::Http(failure) => return failure_response(Route::Account, failure),
            }
        } else if let Some(flip) = self.flips.get(&account.connector) {
            let status = if nth >= *flip {
                AccountStatus::Active
            } else {
                AccountStatus::Pending
            };
            (status, global)
        } else {
            (account.status, account.status_reason.clone().or(global))
        };
        let mut body = Map::new();
        body.insert("connectionId".into(), account.connection_id.clone().into());
        body.insert("connector".into(), account.connector.clone().into());
        body.insert("status".into(), status.as_str().into());
        if let Some(reason) = reason {
            body.insert("statusReason".into(), reason.into());
        }
        body.insert(
            "label".into(),
            consent::account_label(&account.connector).into(),
        );
        body.insert("active".into(), (status == AccountStatus::Active).into());
        body.insert("createdAt".into(), self.wall(account.created).into());
        body.insert("updatedAt".into(), self.wall(account.updated).into());
        SimResponse::json(200, &Value::Object(body))
    }

    /// Why a link can no longer decide anything, as a page title and text; `None` while it
    /// can (a pending account minted with a link and not superseded by a newer mint).
    fn stale_link(&self, account: &SimAccount) -> Option<(String, String)> {
        let (name, _) = consent::catalog_entry(&account.connector);
        match account.status {
            AccountStatus::Pending => {}
            AccountStatus::Active => {
                return Some((
                    format!("{name} is already connected"),
                    "This link was already used. You can close this tab.".to_owned(),
                ));
            }
            AccountStatus::Failed if account.status_reason.as_deref() == Some(USER_DENIED) => {
                return Some((
                    format!("Access to {name} was denied"),
                    "This link was already used to deny access. Start a new connection \
                     from the app to try again."
                        .to_owned(),
                ));
            }
            other => {
                return Some((
                    "This link is no longer valid".to_owned(),
                    format!(
                        "The {name} connection is {}. Start a new connection from the app.",
                        other.as_str()
                    ),
                ));
            }
        }
        if !account.link {
            return Some((
                "This link is not valid".to_owned(),
                "This connection was not started from a connect link.".to_owned(),
            ));
        }
        let newer = self
            .accounts
            .iter()
            .skip_while(|a| a.connection_id != account.connection_id)
            .skip(1)
            .any(|a| a.connector == account.connector && a.link);
        newer.then(|| {
            (
                "This link was replaced".to_owned(),
                format!(
                    "A newer link to connect {name} was made after this one. Use the newest \
                     link the app shows."
                ),
            )
        })
    }

    /// `GET /connect/<id>`: the consent form, or why the link decides nothing. Never changes
    /// an account (a link previewer may fetch it).
    fn consent_page(&mut self, id: &str) -> SimResponse {
        let Some(account) = self.account(id) else {
            return unknown_link(id);
        };
        if let Some((title, text)) = self.stale_link(account) {
            return SimResponse::html(200, consent::message_page(&title, &text));
        }
        let nonce = self.ids.nonce();
        let Some(account) = self.account_mut(id) else {
            return unknown_link(id);
        };
        if account.nonces.len() >= MAX_NONCES {
            account.nonces.remove(0);
        }
        account.nonces.push(nonce.clone());
        let page = consent::consent_page(&consent::ConsentForm {
            connection_id: id,
            connector: &account.connector,
            requester: account.return_to.as_deref(),
            nonce: &nonce,
        });
        let mut response = SimResponse::html(200, page);
        response
            .headers
            .push(("cache-control".into(), "no-store".into()));
        response
    }

    /// `POST /connect/<id>`: decides once with a nonce the page handed out.
    fn consent_decision(&mut self, id: &str, body: &str, now: Instant) -> SimResponse {
        let Some(account) = self.account(id) else {
            return unknown_link(id);
        };
        if let Some((title, text)) = self.stale_link(account) {
            return SimResponse::html(409, consent::message_page(&title, &text));
        }
        let (nonce, decision) = consent::parse_form(body);
        let Some(account) = self.account_mut(id) else {
            return unknown_link(id);
        };
        let known = nonce
            .as_ref()
            .is_some_and(|n| account.nonces.iter().any(|k| k == n));
        let Some(decision) = decision.filter(|_| known) else {
            let text = if known {
                "The form did not say Approve or Deny. Nothing was changed."
            } else {
                "This form is out of date or was not sent by the consent page. Nothing was \
                 changed: open the link again."
            };
            return SimResponse::html(400, consent::message_page("Bad request", text));
        };
        account.nonces.clear();
        let (name, _) = consent::catalog_entry(&account.connector);
        let (status, reason, title, text) = match decision {
            consent::Decision::Approve => (
                AccountStatus::Active,
                None,
                format!("{name} is connected"),
                "You approved access. You can close this tab and go back to the app.",
            ),
            consent::Decision::Deny => (
                AccountStatus::Failed,
                Some(USER_DENIED.to_owned()),
                format!("Access to {name} was denied"),
                "You denied access. You can close this tab and go back to the app.",
            ),
        };
        set_status(account, status, reason, now);
        let return_to = account
            .return_to
            .clone()
            .filter(|url| consent::is_loopback_http(url));
        let location = return_to
            .map(|url| consent::with_outcome(&url, id, status.as_str()))
            // A URL the mint let through always is; a page beats an answer HTTP cannot carry.
            .filter(|location| location.bytes().all(|b| b.is_ascii_graphic()));
        match location {
            Some(location) => {
                let mut response = SimResponse::html(303, consent::message_page(&title, text));
                response.headers.push(("location".into(), location));
                response
            }
            None => SimResponse::html(200, consent::message_page(&title, text)),
        }
    }

    fn control(&mut self, request: &SimRequest, rest: &str, now: Instant) -> SimResponse {
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
                    for (slug, steps) in map {
                        let steps = steps
                            .as_array()
                            .ok_or_else(|| shape(format!("scripts.{slug}"), "an array"))?;
                        let steps = steps
                            .iter()
                            .map(parse_step)
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(at(format!("scripts.{slug}")))?;
                        out.insert(slug.clone(), steps);
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
            let route = match obj.get("route").and_then(Value::as_str) {
                Some("list") => Route::List,
                Some("mint") => Route::Mint,
                Some("account") => Route::Account,
                _ => {
                    return Err(shape(format!("faults[{i}].route"), "list, mint or account"));
                }
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
            if fault.remaining > 0 {
                self.faults[route as usize].push_back(fault);
            }
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

    fn auto_complete_until(&mut self, now: Instant) {
        for account in &mut self.accounts {
            if let Some(at) = account.auto_at.filter(|at| *at <= now) {
                if account.status == AccountStatus::Pending {
                    set_status(account, AccountStatus::Active, None, at);
                }
                account.auto_at = None;
            }
        }
    }

    fn active_account_of(&self, slug: &str) -> Option<&SimAccount> {
        self.accounts
            .iter()
            .rev()
            .find(|a| a.connector == slug && a.status == AccountStatus::Active)
    }

    fn account_mut(&mut self, connection_id: &str) -> Option<&mut SimAccount> {
        self.accounts
            .iter_mut()
            .find(|a| a.connection_id == connection_id)
    }

    fn wall(&self, at: Instant) -> String {
        let (base, wall) = self.epoch;
        let t = match at.checked_duration_since(base) {
            Some(d) => wall + d,
            None => wall - base.duration_since(at),
        };
        rfc3339(t)
    }
}

/// Whether an `Authorization` header value carries the gateway's token: always when it has
/// none.
pub(super) fn authorized(token: Option<&str>, authorization: Option<&str>) -> bool {
    match token {
        None => true,
        Some(token) => authorization
            .and_then(|value| value.strip_prefix("Bearer "))
            .is_some_and(|given| given == token),
    }
}

fn set_status(
    account: &mut SimAccount,
    status: AccountStatus,
    reason: Option<String>,
    now: Instant,
) {
    account.status = status;
    account.status_reason = reason;
    account.updated = now;
    account.auto_at = None;
}

fn failure_response(route: Route, failure: &HttpFailure) -> SimResponse {
    let status = failure.status.unwrap_or(200);
    let mut response = match &failure.body {
        Some(body) => SimResponse {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.clone(),
            delay: Duration::ZERO,
            reset: false,
        },
        None => {
            let mut body = Map::new();
            let error = match status {
                401 => "unauthorized",
                403 => "forbidden",
                404 if route == Route::Account => "connection_not_found",
                404 => "not_found",
                429 => "rate_limited",
                500.. => "internal_error",
                _ => "simulated_fault",
            };
            body.insert("error".into(), error.into());
            if let (429, Some(ms)) = (status, failure.retry_after_ms) {
                body.insert("retryAfterMs".into(), ms.into());
            }
            SimResponse::json(status, &Value::Object(body))
        }
    };
    if let (429, Some(ms)) = (status, failure.retry_after_ms) {
        // Retry-After is whole seconds: round up so a client never retries early.
        response
            .headers
            .push(("retry-after".into(), ms.div_ceil(1000).to_string()));
    }
    response
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

fn parse_step(step: &Value) -> Result<ScriptStep, ControlError> {
    let status =
        |s: &str| AccountStatus::parse(s).ok_or_else(|| ControlError::UnknownStatus(s.to_owned()));
    match step {
        Value::String(s) => Ok(ScriptStep::Status(status(s)?, None)),
        Value::Object(obj) if obj.contains_key("http") => {
            let failure = parse_failure(obj, "http")?;
            Ok(ScriptStep::Http(failure))
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
            Ok(ScriptStep::Status(status(s)?, reason))
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

/// The 404 page of a link no account has.
fn unknown_link(id: &str) -> SimResponse {
    SimResponse::html(
        404,
        consent::message_page(
            "Unknown link",
            &format!(
                "No connection {id} is waiting for consent. Check the link, or start a new connection from the app."
            ),
        ),
    )
}

/// RFC 3339 UTC with milliseconds, e.g. `2024-05-01T12:00:00.123Z`.
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (y, m, day) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let leap = UNIX_EPOCH + Duration::from_millis(951_782_400_250);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.250Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_735_689_599);
        assert_eq!(rfc3339(t), "2024-12-31T23:59:59.000Z");
    }

    #[test]
    fn an_auto_complete_too_far_ahead_never_completes_instead_of_overflowing() {
        let now = Instant::now();
        let mut world = SimWorld::new(
            "http://sim",
            None,
            Some(Duration::MAX),
            Box::new(NumberedIds::default()),
        );
        let mint = SimRequest::new("POST", "/v1/connectors/connections")
            .body(r#"{"connectors": ["gmail"], "reinitiate": false}"#);
        assert_eq!(world.handle(mint, now).status, 200);
        let account = world.account("ca_gmail_1").unwrap();
        assert_eq!(
            (account.status, account.auto_at),
            (AccountStatus::Pending, None)
        );
    }

    /// The `detail` of each refused control body names the value and where it is.
    #[test]
    fn refused_control_bodies_say_what_and_where() {
        let now = Instant::now();
        let mut world = SimWorld::new("http://sim", None, None, Box::new(NumberedIds::default()));
        let mut detail = |path: &str, body: &str| {
            let response = world.handle(SimRequest::new("POST", path).body(body), now);
            assert_eq!(response.status, 400, "{path} {body}");
            response.json_body()["detail"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        };
        let cases = [
            ("/sim/state", "[1]", "the state is not an object"),
            ("/sim/state", r#"{"x": 1}"#, "unknown state key 'x'"),
            (
                "/sim/state",
                r#"{"listed": [1]}"#,
                "'listed' is not an array of strings",
            ),
            (
                "/sim/state",
                r#"{"flips": {"gmail": -1}}"#,
                "flips.gmail is not a count",
            ),
            (
                "/sim/state",
                r#"{"scripts": {"gmail": ["nope"]}}"#,
                "scripts.gmail: unknown status 'nope'",
            ),
            (
                "/sim/state",
                r#"{"scripts": {"gmail": [{"http": 1000}]}}"#,
                "scripts.gmail: 'http' 1000 is not an HTTP status",
            ),
            (
                "/sim/state",
                r#"{"scripts": {"gmail": [{}]}}"#,
                "scripts.gmail: a step has no 'status' or 'http'",
            ),
            (
                "/sim/state",
                r#"{"mint": {"gmail": {"status": "x"}}}"#,
                "mint.gmail: unknown status 'x'",
            ),
            (
                "/sim/state",
                r#"{"mint": {"gmail": {"status": "active", "connectionId": 1}}}"#,
                "mint.gmail.connectionId is not a boolean",
            ),
            ("/sim/faults", "{}", "'faults' is not an array"),
            (
                "/sim/faults",
                r#"{"faults": [{"route": "mint", "reset": 1}]}"#,
                "faults[0]: 'reset' is not a bool",
            ),
            (
                "/sim/faults",
                r#"{"faults": [{"route": "x"}]}"#,
                "faults[0].route is not list, mint or account",
            ),
            (
                "/sim/faults",
                r#"{"faults": [{"route": "list", "delay_ms": "1"}]}"#,
                "faults[0]: 'delay_ms' is not a non-negative integer",
            ),
            (
                "/sim/accounts/ca_x",
                r#"{"status": "x"}"#,
                "unknown status 'x'",
            ),
        ];
        for (path, body, expected) in cases {
            assert_eq!(detail(path, body), expected, "{path} {body}");
        }
        assert!(detail("/sim/state", "{").starts_with("the body is not JSON: "));
    }

    #[test]
    fn the_world_answers_without_http() {
        let now = Instant::now();
        let mut world = SimWorld::new(
            "http://sim",
            None,
            Some(Duration::from_secs(2)),
            Box::new(NumberedIds::default()),
        );
        let mint = SimRequest::new("POST", "/v1/connectors/connections")
            .body(r#"{"connectors": ["gmail"], "reinitiate": false}"#);
        let res = world.handle(mint, now);
        assert_eq!(
            res.json_body()["results"][0]["connectUrl"],
            "http://sim/connect/ca_gmail_1"
        );
        let read = || SimRequest::new("GET", "/v1/connectors/accounts/ca_gmail_1");
        assert_eq!(world.handle(read(), now).json_body()["status"], "pending");
        let later = now + Duration::from_secs(2);
        assert_eq!(world.handle(read(), later).json_body()["status"], "active");
        assert_eq!(world.account("ca_gmail_1").unwrap().reads, 2);
        assert_eq!(world.log().len(), 3);
    }

    #[test]
    fn the_world_keeps_the_newest_accounts() {
        let mut world = SimWorld::new(
            "http://127.0.0.1:9",
            None,
            None,
            Box::new(NumberedIds::default()),
        );
        let now = Instant::now();
        let mint = || {
            SimRequest::new("POST", "/v1/connectors/connections")
                .body(r#"{"connectors": ["gmail"], "reinitiate": true}"#)
        };
        for _ in 0..ACCOUNT_LIMIT + 3 {
            assert_eq!(world.handle(mint(), now).status, 200);
        }
        assert_eq!(world.accounts().len(), ACCOUNT_LIMIT);
        assert!(
            world.account("ca_gmail_3").is_none(),
            "the oldest are forgotten"
        );
        assert!(world.account("ca_gmail_4").is_some());
        let newest = format!("ca_gmail_{}", ACCOUNT_LIMIT + 3);
        assert!(world.account(&newest).is_some());
    }

    #[test]
    fn the_log_keeps_the_last_requests_with_their_bodies_cut() {
        let mut world = SimWorld::new(
            "http://127.0.0.1:9",
            None,
            None,
            Box::new(NumberedIds::default()),
        );
        let now = Instant::now();
        for n in 0..LOG_LIMIT + 5 {
            world.handle(SimRequest::new("GET", &format!("/nowhere/{n}")), now);
        }
        assert_eq!(world.log().len(), LOG_LIMIT);
        let first = world.log().next().unwrap();
        assert_eq!(first.path, "/nowhere/5", "the oldest requests go first");
        let mut world = SimWorld::new(
            "http://127.0.0.1:9",
            None,
            None,
            Box::new(NumberedIds::default()),
        );
        let body = format!("{}é{}", "a".repeat(LOG_BODY_LIMIT - 1), "b".repeat(9000));
        world.handle(SimRequest::new("POST", "/nowhere").body(body), now);
        let kept = &world.log().next().unwrap().body;
        assert_eq!(
            kept.len(),
            LOG_BODY_LIMIT - 1,
            "cut before the split character"
        );
    }

    #[test]
    fn a_reset_fault_still_handles_the_request_but_asks_for_no_answer() {
        let now = Instant::now();
        let mut world = SimWorld::new("http://sim", None, None, Box::new(NumberedIds::default()));
        let faults = json!({"faults": [{"route": "mint", "reset": true, "delay_ms": 5}]});
        world.queue_faults(&faults).unwrap();
        let mint = || {
            SimRequest::new("POST", "/v1/connectors/connections")
                .body(r#"{"connectors": ["gmail"], "reinitiate": false}"#)
        };
        let res = world.handle(mint(), now);
        assert!(res.reset);
        assert_eq!(res.delay, Duration::from_millis(5));
        assert!(
            world.account("ca_gmail_1").is_some(),
            "the mint was handled"
        );
        assert!(!world.handle(mint(), now).reset, "one fault, one reset");
        let bad = json!({"faults": [{"route": "mint", "reset": "yes"}]});
        assert!(
            world
                .queue_faults(&bad)
                .unwrap_err()
                .to_string()
                .contains("'reset'")
        );
    }

    /// The world names nothing itself: a source given to it names every link and nonce.
    #[test]
    fn a_world_names_links_and_nonces_from_the_source_it_is_given() {
        #[derive(Debug)]
        struct Fixed(u32);
        impl IdSource for Fixed {
            fn account(&mut self, _mint: usize) -> String {
                self.0 += 1;
                format!("fixed{}", self.0)
            }
            fn nonce(&mut self) -> String {
                "n-fixed".to_owned()
            }
        }
        let now = Instant::now();
        let mut world = SimWorld::new("http://sim", None, None, Box::new(Fixed(0)));
        let mint = SimRequest::new("POST", "/v1/connectors/connections")
            .body(r#"{"connectors": ["gmail", "notion"], "reinitiate": false}"#);
        let ids: Vec<Value> = world.handle(mint, now).json_body()["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["connectionId"].clone())
            .collect();
        assert_eq!(ids, [json!("ca_gmail_fixed1"), json!("ca_notion_fixed2")]);
        let page = world.handle(SimRequest::new("GET", "/connect/ca_gmail_fixed1"), now);
        assert!(page.body.contains(r#"value="n-fixed""#), "{}", page.body);
        world.reset();
        let mint = SimRequest::new("POST", "/v1/connectors/connections")
            .body(r#"{"connectors": ["gmail"], "reinitiate": false}"#);
        let after = world.handle(mint, now).json_body();
        assert_eq!(
            after["results"][0]["connectionId"], "ca_gmail_fixed3",
            "a reset keeps the source"
        );
    }
}
