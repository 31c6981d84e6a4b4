//! The tool gateway API, `/v1/...`: list the connectors, mint connect links, read an
//! account; each answer possibly replaced by a queued fault.

use super::faults::{ScriptedRead, failure_response};
use super::http::{SimRequest, SimResponse};
use super::state::{SimWorld, UNKNOWN_CONNECTOR};
use crate::sim_gateway::consent;
use connop_core::tool_gateway::{
    AccountStatus, ConnectorRow, GatewayRoute, MintStatus, ReadScript, ScriptedAnswer,
};
use serde_json::{Map, Value, json};
use std::time::Instant;

impl SimWorld {
    /// A `/v1/...` request: counted, possibly faulted, then answered by its route.
    pub(super) fn api(&mut self, request: &SimRequest, now: Instant) -> SimResponse {
        if let Some(refused) = self.unauthorized(request) {
            return refused;
        }
        let Some((route, id)) = GatewayRoute::of_path(&request.path) else {
            return SimResponse::error(404, "not_found");
        };
        let method = route.method().as_str();
        if request.method != method {
            let mut res = SimResponse::error(405, "method_not_allowed");
            res.headers.push(("allow".into(), method.into()));
            return res;
        }
        // Every authorized request on a route counts, faulted or not.
        match route {
            GatewayRoute::Mint => self.mints += 1,
            GatewayRoute::Account => {
                if let Some(account) = self.account_mut(id) {
                    account.reads += 1;
                }
            }
            GatewayRoute::List => {}
        }
        let fault = self.faults.take(route);
        let mut response = match &fault {
            Some(fault) if fault.failure.status.is_some() || fault.failure.body.is_some() => {
                failure_response(route, &fault.failure)
            }
            _ => match route {
                GatewayRoute::List => self.list(),
                GatewayRoute::Mint => self.mint(&request.body, now),
                GatewayRoute::Account => self.read_account(id),
            },
        };
        if let Some(fault) = fault {
            response.delay = fault.delay;
            response.reset = fault.reset;
        }
        response
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

    fn read_account(&self, id: &str) -> SimResponse {
        let Some(account) = self.account(id) else {
            return SimResponse::error(404, "connection_not_found");
        };
        let global = self.status_reason.clone();
        let script = ReadScript {
            reads: self
                .scripts
                .get(&account.connector)
                .map_or(&[][..], Vec::as_slice),
            flip: self.flips.get(&account.connector).copied(),
        };
        let (status, reason) = match script.answer(account.reads) {
            ScriptedAnswer::Read(ScriptedRead::Status(status, reason)) => {
                (*status, reason.clone().or(global))
            }
            ScriptedAnswer::Read(ScriptedRead::Http(failure)) => {
                return failure_response(GatewayRoute::Account, failure);
            }
            ScriptedAnswer::Status(status) => (status, global),
            ScriptedAnswer::Unscripted => {
                (account.status, account.status_reason.clone().or(global))
            }
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
}
