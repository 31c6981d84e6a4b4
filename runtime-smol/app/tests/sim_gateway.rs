//! The simulated tool gateway (docs/contract.md#simulated-tool-gateway) over real HTTP, driven with
//! isahc's blocking client.

use connop_app::sim_gateway::{SimOptions, SimRequest, SimToolGateway};
use connop_core::tool_gateway::SIMULATED_CATALOG;
use isahc::config::Configurable;
use isahc::prelude::*;
use isahc::{HttpClient, Request};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// One answer, read to the end.
struct Answer {
    status: u16,
    headers: isahc::http::HeaderMap,
    text: String,
    local: Option<SocketAddr>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// A client for one gateway; sends the token when the gateway has one.
struct Client {
    http: HttpClient,
    base: String,
    token: Option<String>,
}

impl Client {
    fn new(sim: &SimToolGateway) -> Self {
        let http = HttpClient::builder()
            .proxy(None)
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        Client {
            http,
            base: sim.url(),
            token: sim.token().map(str::to_owned),
        }
    }

    fn send(&self, method: &str, target: &str, body: Option<&str>, token: Option<&str>) -> Answer {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{target}", self.base))
            .header("Content-Type", "application/json");
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        let request = request.body(body.unwrap_or("").to_owned()).unwrap();
        let mut response = self.http.send(request).unwrap();
        Answer {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            text: response.text().unwrap(),
            local: response.local_addr(),
        }
    }

    fn get(&self, target: &str) -> Answer {
        self.send("GET", target, None, self.token.as_deref())
    }

    fn post(&self, target: &str, body: Value) -> Answer {
        self.send(
            "POST",
            target,
            Some(&body.to_string()),
            self.token.as_deref(),
        )
    }

    fn list(&self) -> Value {
        let answer = self.get("/v1/connectors?limit=50");
        assert_eq!(answer.status, 200, "{}", answer.text);
        answer.json()
    }

    fn mint(&self, connectors: &[&str], reinitiate: bool) -> Value {
        let answer = self.post(
            "/v1/connectors/connections",
            json!({"connectors": connectors, "reinitiate": reinitiate}),
        );
        assert_eq!(answer.status, 200, "{}", answer.text);
        answer.json()
    }

    fn account(&self, id: &str) -> Answer {
        self.get(&format!("/v1/connectors/accounts/{id}"))
    }

    fn status_of(&self, id: &str) -> Value {
        let answer = self.account(id);
        assert_eq!(answer.status, 200, "{}", answer.text);
        answer.json()["status"].clone()
    }

    /// Opens a consent page and answers its form (`approve` or `deny`) as a browser would.
    fn decide(&self, id: &str, decision: &str) -> Answer {
        let page = self.send("GET", &format!("/connect/{id}"), None, None);
        assert_eq!(page.status, 200, "{}", page.text);
        let nonce = nonce_of(&page.text);
        self.form(id, &format!("nonce={nonce}&decision={decision}"))
    }

    /// Posts a form body to a consent link.
    fn form(&self, id: &str, body: &str) -> Answer {
        let request = Request::builder()
            .method("POST")
            .uri(format!("{}/connect/{id}", self.base))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(body.to_owned())
            .unwrap();
        let mut response = self.http.send(request).unwrap();
        Answer {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            text: response.text().unwrap(),
            local: response.local_addr(),
        }
    }

    fn control(&self, target: &str, body: Value) {
        let answer = self.send(
            "POST",
            target,
            Some(&body.to_string()),
            self.token.as_deref(),
        );
        assert_eq!(answer.status, 200, "{target}: {}", answer.text);
        assert_eq!(answer.json(), json!({"ok": true}));
    }
}

/// The one-time nonce a consent page's form carries.
fn nonce_of(page: &str) -> String {
    let marker = r#"<input type="hidden" name="nonce" value=""#;
    let start = page
        .find(marker)
        .unwrap_or_else(|| panic!("no nonce: {page}"))
        + marker.len();
    page[start..].split('"').next().unwrap().to_owned()
}

fn start() -> (SimToolGateway, Client) {
    start_with(SimOptions::default())
}

/// The tests here name accounts (`ca_gmail_1`): the gateway numbers them by mint call.
fn start_with(options: SimOptions) -> (SimToolGateway, Client) {
    let sim = SimToolGateway::start(options.numbered_ids()).unwrap();
    let client = Client::new(&sim);
    (sim, client)
}

fn sim_log_paths(client: &Client) -> Vec<String> {
    let log = client.get("/sim/log").json();
    log["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .collect()
}

fn row(connector: &str, connected: bool) -> Value {
    json!({"connector": connector, "enabled": true, "connected": connected})
}

#[test]
fn the_list_shows_the_catalog() {
    let (sim, client) = start();
    assert!(sim.url().starts_with("http://127.0.0.1:"));
    assert_eq!(sim.url(), format!("http://{}", sim.addr()));
    let list = client.list();
    let items: Vec<Value> = SIMULATED_CATALOG.iter().map(|c| row(c, false)).collect();
    assert_eq!(list, json!({"items": items, "nextCursor": null}));
}

#[test]
fn mints_number_accounts_by_call_and_link_to_the_consent_page() {
    let (sim, client) = start();
    let url = sim.url();
    let first = client.mint(&["gmail", "notion"], false);
    assert_eq!(
        first,
        json!({
            "results": [
                {"connector": "gmail", "connectUrl": format!("{url}/connect/ca_gmail_1"),
                 "status": "initiated", "connectionId": "ca_gmail_1"},
                {"connector": "notion", "connectUrl": format!("{url}/connect/ca_notion_1"),
                 "status": "initiated", "connectionId": "ca_notion_1"},
            ],
            "summary": {"requested": 2, "active": 0, "initiated": 2, "failed": 0},
        })
    );
    let second = client.mint(&["gmail"], false);
    assert_eq!(second["results"][0]["connectionId"], "ca_gmail_2");
    assert_eq!(
        second["results"][0]["connectUrl"],
        format!("{url}/connect/ca_gmail_2")
    );
    assert_eq!(sim.with_world(|w| w.mint_count()), 2);
}

#[test]
fn accounts_have_the_documented_shape() {
    let (_sim, client) = start();
    client.mint(&["gmail"], false);
    let answer = client.account("ca_gmail_1");
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let account = answer.json();
    let keys: Vec<&str> = account
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "connectionId",
            "connector",
            "status",
            "label",
            "active",
            "createdAt",
            "updatedAt"
        ]
    );
    assert_eq!(account["connectionId"], "ca_gmail_1");
    assert_eq!(account["connector"], "gmail");
    assert_eq!(account["status"], "pending");
    assert_eq!(account["active"], false);
    assert_eq!(account["label"], "gmail (simulated)");
    let created = account["createdAt"].as_str().unwrap();
    assert!(created.len() == 24 && created.ends_with('Z'), "{created}");
    let parsed = connop_core::tool_gateway::Account::from_json(&account).unwrap();
    assert_eq!(&*parsed.connection_id, "ca_gmail_1");

    let missing = client.account("ca_nope_9");
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json(), json!({"error": "connection_not_found"}));
}

#[test]
fn consent_activates_and_deny_fails() {
    let (sim, client) = start();
    client.mint(&["gmail", "notion"], false);

    let approved = client.decide("ca_gmail_1", "approve");
    assert_eq!(approved.status, 200);
    assert_eq!(
        approved.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(
        approved.text.contains("Gmail is connected"),
        "{}",
        approved.text
    );
    let account = client.account("ca_gmail_1").json();
    assert_eq!(
        (&account["status"], &account["active"]),
        (&json!("active"), &json!(true))
    );

    let denied = client.decide("ca_notion_1", "deny");
    assert_eq!(denied.status, 200);
    assert!(denied.text.contains("denied"), "{}", denied.text);
    let account = client.account("ca_notion_1").json();
    assert_eq!(account["status"], "failed");
    assert_eq!(account["statusReason"], "user denied access");
    assert_eq!(account["active"], false);

    let list = client.list();
    assert_eq!(list["items"][0], row("gmail", true));
    assert_eq!(
        list["items"][1],
        json!({"connector": "notion", "enabled": true, "connected": false,
               "statusReason": "user denied access"})
    );

    let unknown = client.send("GET", "/connect/ca_x_&1'", None, None);
    assert_eq!(unknown.status, 404);
    assert!(
        unknown.text.contains("ca_x_&amp;1&#39;"),
        "{}",
        unknown.text
    );
    drop(sim);
}

/// docs/contract.md#consent-page: a GET only shows the page (who asks, the connector, the account,
/// the scopes, two buttons); only a POST with the page's nonce decides, once.
#[test]
fn the_consent_page_shows_and_only_its_form_decides() {
    let (_sim, client) = start();
    client.post(
        "/v1/connectors/connections",
        json!({"connectors": ["gmail"], "reinitiate": false, "returnTo": "connop-desktop"}),
    );
    let page = client.send("GET", "/connect/ca_gmail_1", None, None);
    assert_eq!(page.status, 200);
    assert_eq!(page.header("cache-control"), Some("no-store"));
    // Never framed by another page (its Approve clicked through).
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(
        page.header("content-security-policy"),
        Some("frame-ancestors 'none'")
    );
    for shown in [
        "connop-desktop",
        "Gmail",
        "gmail (simulated)",
        "Send email on your behalf",
        r#"<button name="decision" value="approve">"#,
        r#"<button name="decision" value="deny">"#,
        r#"<form method="post" action="/connect/ca_gmail_1">"#,
    ] {
        assert!(page.text.contains(shown), "{shown}: {}", page.text);
    }
    // Showing it, many times, changes nothing; each showing has its own nonce.
    let again = client.send("GET", "/connect/ca_gmail_1", None, None);
    assert_ne!(nonce_of(&page.text), nonce_of(&again.text));
    assert_eq!(client.status_of("ca_gmail_1"), "pending");

    // No nonce, a made-up one, or no decision: 400 and nothing changes.
    for body in [
        "decision=approve".to_owned(),
        "nonce=0123&decision=approve".to_owned(),
        format!("nonce={}&decision=maybe", nonce_of(&page.text)),
        String::new(),
    ] {
        let refused = client.form("ca_gmail_1", &body);
        assert_eq!(refused.status, 400, "{body}: {}", refused.text);
        assert_eq!(client.status_of("ca_gmail_1"), "pending", "{body}");
    }

    // The first page's nonce still decides; the decision is final.
    let body = format!("nonce={}&decision=deny", nonce_of(&page.text));
    assert_eq!(client.form("ca_gmail_1", &body).status, 200);
    let account = client.account("ca_gmail_1").json();
    assert_eq!(
        (&account["status"], &account["statusReason"]),
        (&json!("failed"), &json!("user denied access"))
    );
    // The other page's form, a replay, and a new page all say it is decided.
    let other = format!("nonce={}&decision=approve", nonce_of(&again.text));
    for body in [other.as_str(), body.as_str()] {
        let late = client.form("ca_gmail_1", body);
        assert_eq!(late.status, 409, "{}", late.text);
        assert!(late.text.contains("denied"), "{}", late.text);
    }
    let reopened = client.send("GET", "/connect/ca_gmail_1", None, None);
    assert_eq!(reopened.status, 200);
    assert!(
        !reopened.text.contains("name=\"nonce\""),
        "{}",
        reopened.text
    );
    assert!(reopened.text.contains("already used"), "{}", reopened.text);
    assert_eq!(client.status_of("ca_gmail_1"), "failed");

    // An approved link stays approved.
    client.mint(&["notion"], false);
    client.decide("ca_notion_2", "approve");
    let page = client.send("GET", "/connect/ca_notion_2", None, None);
    assert!(page.text.contains("already connected"), "{}", page.text);
    assert_eq!(client.status_of("ca_notion_2"), "active");
    // No method but GET and POST.
    assert_eq!(
        client
            .send("PUT", "/connect/ca_notion_2", None, None)
            .status,
        405
    );
    // Without a returnTo the page names "an app".
    client.mint(&["slack"], false);
    let page = client.send("GET", "/connect/ca_slack_3", None, None);
    assert!(
        page.text.contains("An app wants to connect"),
        "{}",
        page.text
    );
}

#[test]
fn a_superseded_link_decides_nothing() {
    let (_sim, client) = start();
    client.mint(&["gmail"], false);
    let old = client.send("GET", "/connect/ca_gmail_1", None, None);
    client.mint(&["gmail"], true);
    let page = client.send("GET", "/connect/ca_gmail_1", None, None);
    assert!(page.text.contains("replaced"), "{}", page.text);
    let late = client.form(
        "ca_gmail_1",
        &format!("nonce={}&decision=approve", nonce_of(&old.text)),
    );
    assert_eq!(late.status, 409, "{}", late.text);
    assert_eq!(client.status_of("ca_gmail_1"), "pending");
    // The newest link still works.
    assert_eq!(client.decide("ca_gmail_2", "approve").status, 200);
    assert_eq!(client.status_of("ca_gmail_2"), "active");
}

/// After a decision the browser goes back to a loopback `returnTo` with the outcome; an app's
/// name gets a page (any other `returnTo` is refused at the mint).
#[test]
fn a_decision_redirects_to_a_loopback_return_url_only() {
    let (_sim, client) = start();
    let returns = [
        ("http://127.0.0.1:4567/returned?op=ab", true),
        ("http://localhost:9/r", true),
        ("http://[::1]:9/r", true),
        ("portal", false),
        ("hermes-desktop", false),
        ("connop-desktop", false),
    ];
    for (n, (return_to, redirects)) in returns.into_iter().enumerate() {
        client.post(
            "/v1/connectors/connections",
            json!({"connectors": ["gmail"], "reinitiate": true, "returnTo": return_to}),
        );
        let id = format!("ca_gmail_{}", n + 1);
        let decision = if n % 2 == 0 { "approve" } else { "deny" };
        let answer = client.decide(&id, decision);
        let status = if n % 2 == 0 { "active" } else { "failed" };
        if redirects {
            assert_eq!(answer.status, 303, "{return_to}");
            let sep = if return_to.contains('?') { '&' } else { '?' };
            assert_eq!(
                answer.header("location"),
                Some(format!("{return_to}{sep}connection_id={id}&status={status}").as_str())
            );
        } else {
            assert_eq!(answer.status, 200, "{return_to}");
            assert_eq!(answer.header("location"), None, "{return_to}");
        }
        assert_eq!(client.status_of(&id), status);
    }
}

#[test]
fn an_active_account_is_reused_unless_reinitiated() {
    let (_sim, client) = start();
    client.mint(&["gmail"], false);
    client.decide("ca_gmail_1", "approve");

    let again = client.mint(&["gmail"], false);
    assert_eq!(
        again,
        json!({
            "results": [{"connector": "gmail", "status": "active", "connectionId": "ca_gmail_1"}],
            "summary": {"requested": 1, "active": 1, "initiated": 0, "failed": 0},
        })
    );
    let fresh = client.mint(&["gmail"], true);
    let row = &fresh["results"][0];
    assert_eq!(row["status"], "initiated");
    assert_eq!(row["connectionId"], "ca_gmail_3");
    assert_eq!(row["reinitiated"], true);
    assert_eq!(client.status_of("ca_gmail_3"), "pending");
    assert_eq!(client.status_of("ca_gmail_1"), "active");
}

#[test]
fn unlisted_names_fail_as_unknown_connectors() {
    let (_sim, client) = start();
    let minted = client.mint(&["dropbox", "gmail"], false);
    assert_eq!(
        minted["results"][0],
        json!({"connector": "dropbox", "status": "failed", "statusReason": "unknown connector"})
    );
    assert_eq!(minted["results"][1]["connectionId"], "ca_gmail_1");
    assert_eq!(minted["summary"]["failed"], 1);

    client.control("/sim/state", json!({"listed": ["notion", "dropbox"]}));
    let list = client.list();
    assert_eq!(
        list["items"],
        json!([row("notion", false), row("dropbox", false)])
    );
    let minted = client.mint(&["gmail", "dropbox"], false);
    assert_eq!(minted["results"][0]["statusReason"], "unknown connector");
    assert_eq!(minted["results"][1]["connectionId"], "ca_dropbox_2");
}

#[test]
fn the_token_guards_the_api_and_the_controls_but_not_consent() {
    let (sim, client) = start_with(SimOptions::default().token("s3cret"));
    assert_eq!(sim.token(), Some("s3cret"));
    let targets = [
        ("GET", "/v1/connectors", None),
        (
            "POST",
            "/v1/connectors/connections",
            Some(r#"{"connectors": ["gmail"], "reinitiate": false}"#),
        ),
        ("GET", "/v1/connectors/accounts/ca_gmail_1", None),
        ("GET", "/sim/log", None),
        ("POST", "/sim/state", Some(r#"{"connected": ["gmail"]}"#)),
        ("POST", "/sim/faults", Some(r#"{"faults": []}"#)),
        (
            "POST",
            "/sim/accounts/ca_gmail_1",
            Some(r#"{"status": "active"}"#),
        ),
        ("POST", "/sim/reset", None),
    ];
    for (method, target, body) in targets {
        for token in [None, Some("wrong")] {
            let answer = client.send(method, target, body, token);
            assert_eq!(answer.status, 401, "{method} {target}");
            assert_eq!(answer.json(), json!({"error": "unauthorized"}));
        }
    }
    assert_eq!(sim.with_world(|w| w.mint_count()), 0);
    assert_eq!(
        client.mint(&["gmail"], false)["results"][0]["connectionId"],
        "ca_gmail_1"
    );
    assert_eq!(client.list()["items"][0]["connector"], "gmail");

    let consent = client.decide("ca_gmail_1", "approve");
    assert_eq!(consent.status, 200);
    client.control("/sim/state", json!({"connected": ["gmail", "notion"]}));
    assert_eq!(client.get("/sim/log").status, 200);
    assert_eq!(client.status_of("ca_gmail_1"), "active");
}

#[test]
fn the_log_never_shows_a_token_and_keeps_no_refused_body() {
    let (_sim, client) = start_with(SimOptions::default().token("s3cret"));
    client.list();
    let refused = "x".repeat(64 * 1024);
    let answer = client.send(
        "POST",
        "/v1/connectors/connections",
        Some(&refused),
        Some("wrong"),
    );
    assert_eq!(answer.status, 401);
    let log = client.get("/sim/log");
    assert!(!log.text.contains("s3cret"), "the token shows in the log");
    assert!(
        !log.text.contains("wrong"),
        "a refused token shows in the log"
    );
    let requests = log.json()["requests"].as_array().unwrap().clone();
    assert_eq!(requests[0]["headers"]["authorization"], "[redacted]");
    assert_eq!(requests[1]["path"], "/v1/connectors/connections");
    assert_eq!(requests[1]["body"], "", "a refused body was kept");
}

#[test]
fn faults_answer_statuses_then_run_out() {
    let (_sim, client) = start();
    client.control(
        "/sim/faults",
        json!({"faults": [
            {"route": "list", "status": 503, "count": 2},
            {"route": "list", "status": 200, "body": "{\"items\": [", "count": 1},
        ]}),
    );
    for _ in 0..2 {
        let answer = client.get("/v1/connectors");
        assert_eq!(answer.status, 503);
        assert_eq!(answer.json(), json!({"error": "internal_error"}));
    }
    let malformed = client.get("/v1/connectors");
    assert_eq!(
        (malformed.status, malformed.text.as_str()),
        (200, "{\"items\": [")
    );
    assert_eq!(client.list()["items"][0], row("gmail", false));
}

#[test]
fn a_429_fault_carries_retry_after() {
    let (_sim, client) = start();
    client.control(
        "/sim/faults",
        json!({"faults": [
            {"route": "mint", "status": 429, "retry_after_ms": 1500, "count": 1},
            {"route": "account", "status": 429, "count": 1},
        ]}),
    );
    let answer = client.post(
        "/v1/connectors/connections",
        json!({"connectors": ["gmail"], "reinitiate": false}),
    );
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-after"), Some("2"));
    assert_eq!(
        answer.json(),
        json!({"error": "rate_limited", "retryAfterMs": 1500})
    );
    // The faulted mint was call 1: the next mint is call 2.
    assert_eq!(
        client.mint(&["gmail"], false)["results"][0]["connectionId"],
        "ca_gmail_2"
    );

    let bare = client.account("ca_gmail_2");
    assert_eq!(bare.status, 429);
    assert_eq!(bare.header("retry-after"), None);
    assert_eq!(bare.json(), json!({"error": "rate_limited"}));
    assert_eq!(client.status_of("ca_gmail_2"), "pending");
}

#[test]
fn a_delay_fault_slows_one_answer_down() {
    let (_sim, client) = start();
    client.control(
        "/sim/faults",
        json!({"faults": [{"route": "list", "delay_ms": 150, "count": 1}]}),
    );
    let started = Instant::now();
    assert_eq!(client.list()["items"][0], row("gmail", false));
    assert!(started.elapsed() >= Duration::from_millis(150));
    // Used up: the next answer is the plain list again.
    assert_eq!(client.list()["items"][0], row("gmail", false));
    assert_eq!(sim_log_paths(&client).len(), 4);
}

#[test]
fn a_slow_answer_does_not_hold_up_the_others() {
    let (sim, client) = start();
    client.control(
        "/sim/faults",
        json!({"faults": [{"route": "list", "delay_ms": 1000, "count": 1}]}),
    );
    let base = sim.url();
    let slow = std::thread::spawn(move || {
        let answer = isahc::HttpClient::builder()
            .proxy(None)
            .build()
            .unwrap()
            .get(format!("{base}/v1/connectors"))
            .unwrap();
        (answer.status().as_u16(), Instant::now())
    });
    // Wait until the slow request reached the server.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !sim.log().iter().any(|r| r.path == "/v1/connectors") {
        assert!(Instant::now() < deadline, "the slow request never arrived");
        std::thread::sleep(Duration::from_millis(1));
    }
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let base = sim.url();
            std::thread::spawn(move || {
                let client = HttpClient::builder().proxy(None).build().unwrap();
                let mut ids = Vec::new();
                for _ in 0..5 {
                    let mint = Request::post(format!("{base}/v1/connectors/connections"))
                        .header("Content-Type", "application/json")
                        .body(r#"{"connectors": ["slack"], "reinitiate": true}"#)
                        .unwrap();
                    let mut answer = client.send(mint).unwrap();
                    let body: Value = serde_json::from_str(&answer.text().unwrap()).unwrap();
                    ids.push(
                        body["results"][0]["connectionId"]
                            .as_str()
                            .unwrap()
                            .to_owned(),
                    );
                }
                ids
            })
        })
        .collect();
    let mut ids: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let fast_done = Instant::now();
    ids.sort();
    let mut expected: Vec<String> = (1..=40).map(|n| format!("ca_slack_{n}")).collect();
    expected.sort();
    assert_eq!(ids, expected);
    let (status, slow_done) = slow.join().unwrap();
    assert_eq!(status, 200);
    assert!(slow_done > fast_done);
}

#[test]
fn connections_are_kept_alive() {
    let (_sim, client) = start();
    let first = client.get("/v1/connectors");
    let second = client.get("/v1/connectors");
    assert!(first.local.is_some());
    assert_eq!(first.local, second.local);
}

#[test]
fn sim_accounts_sets_one_account() {
    let (_sim, client) = start();
    client.mint(&["gmail"], false);
    client.control(
        "/sim/accounts/ca_gmail_1",
        json!({"status": "expired", "statusReason": "link ran out"}),
    );
    let account = client.account("ca_gmail_1").json();
    assert_eq!(account["status"], "expired");
    assert_eq!(account["statusReason"], "link ran out");
    client.control("/sim/accounts/ca_gmail_1", json!({"status": "revoked"}));
    let account = client.account("ca_gmail_1").json();
    assert_eq!(account["status"], "revoked");
    assert_eq!(account.get("statusReason"), None);

    let unknown = client.send(
        "POST",
        "/sim/accounts/ca_x_1",
        Some(r#"{"status": "active"}"#),
        None,
    );
    assert_eq!(unknown.status, 404);
    client.control(
        "/sim/accounts/ca_custom",
        json!({"status": "active", "connector": "linear"}),
    );
    assert_eq!(client.account("ca_custom").json()["connector"], "linear");
    assert_eq!(client.list()["items"][4], row("linear", true));

    let bad = client.send(
        "POST",
        "/sim/accounts/ca_gmail_1",
        Some(r#"{"status": "zombie"}"#),
        None,
    );
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"], "bad_request");
}

#[test]
fn the_log_records_every_request_in_order() {
    let (sim, client) = start_with(SimOptions::default().token("tok"));
    client.get("/v1/connectors?limit=50&cursor=a%2Fb");
    client.post(
        "/v1/connectors/connections",
        json!({"connectors": ["gmail"], "reinitiate": false, "returnTo": "connop-desktop", "op": "0123456789ab"}),
    );
    client.send("GET", "/connect/ca_gmail_1?from=mail", None, None);
    let log = client.get("/sim/log").json();
    let requests = log["requests"].as_array().unwrap();
    let summary: Vec<(&str, &str, &str)> = requests
        .iter()
        .map(|r| {
            (
                r["method"].as_str().unwrap(),
                r["path"].as_str().unwrap(),
                r["query"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("GET", "/v1/connectors", "limit=50&cursor=a%2Fb"),
            ("POST", "/v1/connectors/connections", ""),
            ("GET", "/connect/ca_gmail_1", "from=mail"),
            ("GET", "/sim/log", ""),
        ]
    );
    let list = &requests[0];
    assert_eq!(list["headers"]["authorization"], "[redacted]");
    assert_eq!(list["headers"]["content-type"], "application/json");
    assert_eq!(list["body"], "");
    let mint = &requests[1];
    let body: Value = serde_json::from_str(mint["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["returnTo"], "connop-desktop");
    assert_eq!(body["op"], "0123456789ab");
    assert!(requests[2]["headers"].get("authorization").is_none());
    for request in requests {
        let headers = request["headers"].as_object().unwrap();
        assert!(headers.keys().all(|k| *k == k.to_ascii_lowercase()));
    }
    // The Rust side sees the same log without adding to it.
    let rust_log = sim.log();
    assert_eq!(rust_log.len(), 4);
    assert_eq!(rust_log[1].to_json(), requests[1]);
}

#[test]
fn state_sets_connected_listed_and_forced_mints() {
    let (sim, client) = start();
    client.control(
        "/sim/state",
        json!({
            "connected": ["gmail"],
            "mint": {
                "notion": {"status": "failed", "statusReason": "quota exceeded"},
                "slack": {"status": "initiated", "connectionId": false},
                "github": {"status": "active"},
                "linear": {"status": "failed", "connectionId": true},
            },
        }),
    );
    assert_eq!(client.list()["items"][0], row("gmail", true));
    let minted = client.mint(&["gmail", "notion", "slack", "github", "linear"], false);
    let url = sim.url();
    assert_eq!(
        minted["results"],
        json!([
            {"connector": "gmail", "status": "active", "connectionId": "ca_gmail_0"},
            {"connector": "notion", "status": "failed", "statusReason": "quota exceeded"},
            {"connector": "slack", "connectUrl": format!("{url}/connect/ca_slack_1"),
             "status": "initiated"},
            {"connector": "github", "status": "active", "connectionId": "ca_github_1"},
            {"connector": "linear", "status": "failed", "connectionId": "ca_linear_1"},
        ])
    );
    assert_eq!(client.status_of("ca_gmail_0"), "active");
    assert_eq!(client.status_of("ca_github_1"), "active");
    assert_eq!(client.status_of("ca_linear_1"), "failed");
    // The hidden slack account still completes through its link.
    client.decide("ca_slack_1", "approve");
    assert_eq!(client.list()["items"][2], row("slack", true));

    // `connected` is the exact set: gmail's account goes inactive.
    client.control("/sim/state", json!({"connected": ["notion"]}));
    assert_eq!(client.status_of("ca_gmail_0"), "inactive");
    assert_eq!(client.status_of("ca_notion_0"), "active");

    let bad = client.send("POST", "/sim/state", Some(r#"{"conected": []}"#), None);
    assert_eq!(bad.status, 400);
    assert!(bad.json()["detail"].as_str().unwrap().contains("conected"));
}

#[test]
fn flips_make_accounts_active_from_the_nth_read() {
    let (_sim, client) = start();
    client.control("/sim/state", json!({"flips": {"gmail": 3}}));
    client.mint(&["gmail", "notion"], false);
    let reads: Vec<Value> = (0..4).map(|_| client.status_of("ca_gmail_1")).collect();
    assert_eq!(reads, ["pending", "pending", "active", "active"]);
    assert_eq!(client.account("ca_gmail_1").json()["active"], true);
    // Counted per account; other connectors keep their own status.
    client.mint(&["gmail"], true);
    assert_eq!(client.status_of("ca_gmail_2"), "pending");
    assert_eq!(client.status_of("ca_notion_1"), "pending");
}

#[test]
fn scripts_answer_step_by_step_and_win_over_flips() {
    let (_sim, client) = start();
    client.control(
        "/sim/state",
        json!({
            "flips": {"gmail": 1},
            "scripts": {"gmail": [
                "pending",
                {"status": "failed", "statusReason": "vendor said no"},
                {"http": 404},
                {"http": 429, "retry_after_ms": 2000},
                {"http": 500},
                "active",
            ]},
        }),
    );
    client.mint(&["gmail"], false);
    let read = || client.account("ca_gmail_1");
    assert_eq!(read().json()["status"], "pending");
    let failed = read().json();
    assert_eq!(
        (&failed["status"], &failed["statusReason"]),
        (&json!("failed"), &json!("vendor said no"))
    );
    let missing = read();
    assert_eq!(
        (missing.status, missing.json()),
        (404, json!({"error": "connection_not_found"}))
    );
    let limited = read();
    assert_eq!(limited.status, 429);
    assert_eq!(limited.header("retry-after"), Some("2"));
    assert_eq!(limited.json()["retryAfterMs"], 2000);
    assert_eq!(read().status, 500);
    assert_eq!(read().json()["status"], "active");
    assert_eq!(read().json()["status"], "active");
}

#[test]
fn a_global_status_reason_and_no_connection_ids() {
    let (sim, client) = start();
    client.control(
        "/sim/state",
        json!({"statusReason": "sandbox", "connectionIds": false}),
    );
    let minted = client.mint(&["gmail"], false);
    let url = sim.url();
    assert_eq!(
        minted["results"][0],
        json!({"connector": "gmail", "connectUrl": format!("{url}/connect/ca_gmail_1"),
               "status": "initiated", "statusReason": "sandbox"})
    );
    assert_eq!(
        client.account("ca_gmail_1").json()["statusReason"],
        "sandbox"
    );
    client.decide("ca_gmail_1", "deny");
    // The account's own reason wins over the global one.
    assert_eq!(
        client.account("ca_gmail_1").json()["statusReason"],
        "user denied access"
    );
    client.control("/sim/state", json!({"statusReason": null}));
    client.control("/sim/accounts/ca_gmail_1", json!({"status": "active"}));
    assert_eq!(
        client.account("ca_gmail_1").json().get("statusReason"),
        None
    );
}

#[test]
fn auto_complete_activates_accounts_by_themselves() {
    let after = Duration::from_millis(50);
    let (_sim, client) = start_with(SimOptions::default().auto_complete(after));
    let minted_at = Instant::now();
    client.mint(&["gmail"], false);
    let first = client.status_of("ca_gmail_1");
    if minted_at.elapsed() < after {
        assert_eq!(first, "pending");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.status_of("ca_gmail_1") != "active" {
        assert!(Instant::now() < deadline, "never auto-completed");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(minted_at.elapsed() >= after);
    assert_eq!(client.list()["items"][0], row("gmail", true));
    let account = client.account("ca_gmail_1").json();
    assert_ne!(account["createdAt"], account["updatedAt"]);

    // A denied account stays failed.
    client.mint(&["notion"], false);
    client.decide("ca_notion_2", "deny");
    let denied_at = Instant::now();
    while denied_at.elapsed() < after * 2 {
        assert_eq!(client.status_of("ca_notion_2"), "failed");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn reset_goes_back_to_the_initial_world() {
    let (sim, client) = start();
    client.control(
        "/sim/state",
        json!({"connected": ["gmail"], "listed": ["gmail"]}),
    );
    client.control(
        "/sim/faults",
        json!({"faults": [{"route": "list", "status": 500, "count": 9}]}),
    );
    client.mint(&["gmail"], true);
    client.control("/sim/reset", json!({}));
    assert!(sim.log().is_empty());
    assert_eq!(client.list()["items"].as_array().unwrap().len(), 6);
    assert_eq!(client.list()["items"][0], row("gmail", false));
    assert_eq!(
        client.mint(&["gmail"], false)["results"][0]["connectionId"],
        "ca_gmail_1"
    );
}

#[test]
fn rust_side_controls_match_the_http_ones() {
    let (sim, client) = start();
    sim.apply_state(json!({"connected": ["notion"], "flips": {"gmail": 2}}))
        .unwrap();
    assert!(sim.apply_state(json!({"flips": {"gmail": "x"}})).is_err());
    assert_eq!(client.list()["items"][1], row("notion", true));
    sim.queue_faults(json!({"faults": [{"route": "mint", "status": 502, "count": 1}]}))
        .unwrap();
    let faulted = client.post(
        "/v1/connectors/connections",
        json!({"connectors": ["gmail"]}),
    );
    assert_eq!(faulted.status, 502);
    client.mint(&["gmail"], false);
    assert!(
        sim.set_account("ca_gmail_2", json!({"status": "revoked"}))
            .expect("a valid account body")
    );
    // Flips win over the account's own status.
    assert_eq!(client.status_of("ca_gmail_2"), "pending");
    assert_eq!(client.status_of("ca_gmail_2"), "active");
    // In-process requests go through the same world and log.
    let answer = sim.handle(SimRequest::new("GET", "/v1/connectors/accounts/ca_gmail_2"));
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json_body()["status"], "active");
    assert_eq!(
        sim.with_world(|w| w.account("ca_gmail_2").unwrap().reads),
        3
    );
    assert_eq!(
        sim.log().last().unwrap().path,
        "/v1/connectors/accounts/ca_gmail_2"
    );
    sim.reset();
    assert!(sim.log().is_empty());
}

#[test]
fn bad_requests_and_unknown_routes() {
    let (_sim, client) = start();
    let bad = client.send("POST", "/v1/connectors/connections", Some("{"), None);
    assert_eq!(bad.status, 400);
    let wrong_method = client.send("POST", "/v1/connectors", Some("{}"), None);
    assert_eq!(wrong_method.status, 405);
    assert_eq!(wrong_method.header("allow"), Some("GET"));
    assert_eq!(client.get("/v1/other").status, 404);
    assert_eq!(client.get("/elsewhere").status, 404);
    let bad_fault = client.send(
        "POST",
        "/sim/faults",
        Some(r#"{"faults": [{"route": "x"}]}"#),
        None,
    );
    assert_eq!(bad_fault.status, 400);
}

#[test]
fn shutdown_closes_the_port() {
    let (sim, client) = start();
    client.list();
    let url = sim.url();
    sim.shutdown();
    let fresh = HttpClient::builder()
        .proxy(None)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    assert!(fresh.get(format!("{url}/v1/connectors")).is_err());
}

#[test]
fn serve_runs_on_a_callers_executor() {
    let (server, listener) =
        connop_app::sim_gateway::SimServer::bind(&SimOptions::default()).unwrap();
    let url = server.url();
    let (stop, stopped) = async_channel::bounded::<()>(1);
    let thread = std::thread::spawn(move || {
        smol::block_on(async {
            let serving = smol::spawn(server.serve(listener));
            let _ = stopped.recv().await;
            serving.cancel().await;
        })
    });
    let client = HttpClient::builder().proxy(None).build().unwrap();
    let mut answer = client.get(format!("{url}/v1/connectors")).unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let body: Value = serde_json::from_str(&answer.text().unwrap()).unwrap();
    assert_eq!(body["items"][0], row("gmail", false));
    drop(stop);
    thread.join().unwrap();
}
