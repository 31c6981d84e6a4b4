//! The world answered without HTTP.

use super::http::LOG_BODY_LIMIT;
use super::state::{ACCOUNT_LIMIT, LOG_LIMIT};
use super::{IdSource, NumberedIds, SimRequest, SimWorld};
use connop_core::tool_gateway::AccountStatus;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

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
