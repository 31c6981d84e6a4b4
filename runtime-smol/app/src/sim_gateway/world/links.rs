//! The consent links, `/connect/<id>`: the page a person's browser opens and the form it
//! posts, deciding a pending account once.

use super::http::SimResponse;
use super::state::{SimAccount, SimWorld, USER_DENIED, set_status};
use crate::sim_gateway::consent;
use connop_core::tool_gateway::AccountStatus;
use std::time::Instant;

/// How many unused nonces an account keeps (one per consent page shown): an old tab's form
/// stops working after this many newer ones.
const MAX_NONCES: usize = 8;

impl SimWorld {
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
    pub(super) fn consent_page(&mut self, id: &str) -> SimResponse {
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
    pub(super) fn consent_decision(&mut self, id: &str, body: &str, now: Instant) -> SimResponse {
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
