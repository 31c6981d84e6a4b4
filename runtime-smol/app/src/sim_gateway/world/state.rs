//! The world's data and its one entry point: the catalog, the accounts, the knobs tests set,
//! the queued faults and the request log, and [`SimWorld::handle`], which logs a request and
//! sends it to its route.

use super::dates::rfc3339;
use super::faults::{FaultQueues, ForcedMint, ScriptedRead};
use super::http::{SimRequest, SimResponse, authorized};
use super::ids::{IdSource, NumberedIds};
use connop_core::tool_gateway::{AccountStatus, SIMULATED_CATALOG};
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant, SystemTime};

/// The status reason of a mint row for a name the gateway does not list.
pub const UNKNOWN_CONNECTOR: &str = "unknown connector";

/// The status reason of an account whose consent page was denied.
pub const USER_DENIED: &str = "user denied access";

/// How many accounts the world keeps: the newest ones.
pub const ACCOUNT_LIMIT: usize = 10_000;
/// How many requests the log keeps: the last ones (docs/contract.md#simulated-tool-gateway).
pub const LOG_LIMIT: usize = 10_000;

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

/// The simulated gateway's state: catalog, accounts, knobs, queued faults and the request log.
#[derive(Debug)]
pub struct SimWorld {
    /// `http://<addr>`, the prefix of every connect link.
    pub(super) base_url: String,
    /// Where link ids and nonces come from.
    pub(super) ids: Box<dyn IdSource>,
    token: Option<String>,
    auto_complete: Option<Duration>,
    /// The same moment as an `Instant` and on the wall clock: how timestamps are written.
    epoch: (Instant, SystemTime),
    /// What the list shows and the mint accepts, in order.
    pub(super) listed: Vec<String>,
    /// The newest [`ACCOUNT_LIMIT`] accounts, oldest first.
    pub(super) accounts: VecDeque<SimAccount>,
    /// Forced mint answers, by connector.
    pub(super) forced: BTreeMap<String, ForcedMint>,
    /// From which read on a connector's accounts answer `active`.
    pub(super) flips: BTreeMap<String, usize>,
    /// The successive answers of a connector's account reads.
    pub(super) scripts: BTreeMap<String, Vec<ScriptedRead>>,
    /// The reason on every answer that has none of its own.
    pub(super) status_reason: Option<String>,
    /// Whether mint rows carry a `connectionId`.
    pub(super) connection_ids: bool,
    pub(super) faults: FaultQueues,
    /// How many mint calls were made.
    pub(super) mints: usize,
    /// The last [`LOG_LIMIT`] requests, redacted and cut (docs/contract.md#simulated-tool-gateway).
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
            listed: SIMULATED_CATALOG.iter().map(|s| (*s).to_owned()).collect(),
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
    pub(super) fn add_account(&mut self, account: SimAccount) {
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
    pub(super) fn unauthorized(&self, request: &SimRequest) -> Option<SimResponse> {
        if authorized(self.token.as_deref(), request.header_value("authorization")) {
            return None;
        }
        let mut res = SimResponse::error(401, "unauthorized");
        res.headers
            .push(("www-authenticate".into(), "Bearer".into()));
        Some(res)
    }

    /// The id of `slug`'s account made by the `n`-th mint call (`n` 0: by `/sim/state`), made
    /// now with `status` unless it exists.
    pub(super) fn new_account(
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

    /// Makes active every pending account whose auto-complete time has come.
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

    /// The connector's newest active account.
    pub(super) fn active_account_of(&self, slug: &str) -> Option<&SimAccount> {
        self.accounts
            .iter()
            .rev()
            .find(|a| a.connector == slug && a.status == AccountStatus::Active)
    }

    /// One account by id, to change it.
    pub(super) fn account_mut(&mut self, connection_id: &str) -> Option<&mut SimAccount> {
        self.accounts
            .iter_mut()
            .find(|a| a.connection_id == connection_id)
    }

    /// An instant as the wall-clock timestamp answers carry.
    pub(super) fn wall(&self, at: Instant) -> String {
        let (base, wall) = self.epoch;
        let t = match at.checked_duration_since(base) {
            Some(d) => wall + d,
            None => wall - base.duration_since(at),
        };
        rfc3339(t)
    }
}

/// Sets an account's status and reason as of `now`; a pending auto-complete no longer applies.
pub(super) fn set_status(
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
