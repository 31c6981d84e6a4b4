//! Faults through the simulated tool gateway over real HTTP, on both runtimes: 500s, 429s
//! with Retry-After, answers slower than the read timeout, malformed bodies, a refused
//! connection. Every operation still settles by its deadline plus one tick, a failed mint
//! returns the error text of docs/contract.md#prepare, and the gateway's request log shows what was
//! sent.

use connop_app::sim_gateway::SimRequest;
use connop_blocking::{SharedRegistry, ToolContext};
use connop_core::flow::{Event, Surface};
use connop_core::tool_gateway::{AsyncToolGateway, BlockingToolGateway};
use connop_core::wire::ClientConfig;
use connop_fixtures::ScriptedToolGateway;
use connop_tests::table::{Backend, OverHttp, Runtime};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

const FAILED_PREFIX: &str = "The connector gateway request failed: ";
const FAILED_SUFFIX: &str =
    ". If this persists, the user can manage connections in the connector portal.";
/// Generous slack on top of "deadline plus one tick" for a shared, noisy machine.
const SLACK: Duration = Duration::from_millis(750);

struct Outcome {
    result: Value,
    elapsed: Duration,
}

fn run_with(
    runtime: Runtime,
    blocking: Arc<dyn BlockingToolGateway>,
    asynchronous: Arc<dyn AsyncToolGateway>,
    args: &Value,
    tick: Duration,
    deadline: Duration,
) -> Outcome {
    let registry = SharedRegistry::new("/test/.connop");
    let events: connop_blocking::EventSink = Arc::new(|_: &Event| {});
    let started = Instant::now();
    let result = match runtime {
        Runtime::Blocking => {
            let mut ctx: ToolContext<dyn BlockingToolGateway> =
                ToolContext::new(registry.clone(), "s1", blocking);
            (
                ctx.surface,
                ctx.events,
                ctx.options.tick,
                ctx.options.deadline,
            ) = (Surface::Desktop, Some(events), tick, deadline);
            connop_blocking::manage_connections(args, &ctx).to_value()
        }
        Runtime::Smol => {
            let mut ctx: ToolContext<dyn AsyncToolGateway> =
                ToolContext::new(registry.clone(), "s1", asynchronous);
            (
                ctx.surface,
                ctx.events,
                ctx.options.tick,
                ctx.options.deadline,
            ) = (Surface::Desktop, Some(events), tick, deadline);
            smol::block_on(connop_smol::manage_connections(args, &ctx)).to_value()
        }
    };
    assert!(registry.is_empty(), "the registry entry is closed");
    Outcome {
        result,
        elapsed: started.elapsed(),
    }
}

fn run(
    http: &OverHttp,
    runtime: Runtime,
    args: &Value,
    tick: Duration,
    deadline: Duration,
) -> Outcome {
    run_with(
        runtime,
        http.blocking(),
        http.asynchronous(),
        args,
        tick,
        deadline,
    )
}

fn faults(http: &OverHttp, faults: Value) {
    http.server()
        .queue_faults(json!({ "faults": faults }))
        .expect("valid faults");
}

fn v1_requests(http: &OverHttp) -> Vec<SimRequest> {
    http.server()
        .log()
        .into_iter()
        .filter(|r| r.path.starts_with("/v1/"))
        .collect()
}

fn mints(http: &OverHttp) -> usize {
    v1_requests(http)
        .iter()
        .filter(|r| r.method == "POST")
        .count()
}

fn account_reads(http: &OverHttp) -> usize {
    v1_requests(http)
        .iter()
        .filter(|r| r.path.starts_with("/v1/connectors/accounts/"))
        .count()
}

fn connect(names: &[&str]) -> Value {
    json!({"action": "connect", "connectors": names})
}

fn both(test: impl Fn(Runtime)) {
    test(Runtime::Blocking);
    test(Runtime::Smol);
}

fn assert_failed_text(result: &Value, reason_contains: &str) {
    let error = result["error"]
        .as_str()
        .unwrap_or_else(|| panic!("an error result: {result}"));
    assert!(
        error.starts_with(FAILED_PREFIX) && error.ends_with(FAILED_SUFFIX),
        "{error}"
    );
    assert!(error.contains(reason_contains), "{error}");
}

#[test]
fn a_mint_answered_500_is_never_retried_and_returns_the_gateway_error() {
    both(|runtime| {
        let http = OverHttp::start();
        http.set_world(&ScriptedToolGateway::new());
        faults(&http, json!([{"route": "mint", "status": 500, "count": 5}]));
        let out = run(
            &http,
            runtime,
            &connect(&["gmail"]),
            Duration::from_millis(10),
            Duration::from_secs(5),
        );
        assert_failed_text(&out.result, "HTTP 500");
        assert_eq!(mints(&http), 1, "{runtime:?}: the mint is never retried");
        assert_eq!(account_reads(&http), 0);
    });
}

#[test]
fn mint_failures_of_every_kind_return_the_gateway_error_text() {
    both(|runtime| {
        let http = OverHttp::start();
        let cases = [
            (
                json!({"route": "mint", "status": 200, "body": "{not json"}),
                "invalid response",
            ),
            (
                json!({"route": "mint", "status": 404}),
                "does not offer this route",
            ),
            (
                json!({"route": "mint", "status": 401}),
                "refused the credentials",
            ),
            (
                json!({"route": "mint", "status": 429, "retry_after_ms": 2000}),
                "rate limiting",
            ),
        ];
        for (fault, reason) in cases {
            http.set_world(&ScriptedToolGateway::new());
            faults(&http, json!([fault]));
            let out = run(
                &http,
                runtime,
                &connect(&["gmail", "notion"]),
                Duration::from_millis(10),
                Duration::from_secs(5),
            );
            assert_failed_text(&out.result, reason);
            assert_eq!(
                mints(&http),
                1,
                "{runtime:?} {reason}: one mint, never retried"
            );
        }
    });
}

#[test]
fn a_refused_connection_fails_the_mint_without_panicking() {
    both(|runtime| {
        // A port with nothing listening.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = ClientConfig::new(format!("http://127.0.0.1:{port}"), Some("t".into()));
        let blocking =
            Arc::new(connop_blocking::http::HttpToolGateway::new(config.clone()).unwrap());
        let asynchronous = Arc::new(connop_smol::http::AsyncHttpToolGateway::new(config).unwrap());
        let out = run_with(
            runtime,
            blocking,
            asynchronous,
            &connect(&["gmail"]),
            Duration::from_millis(10),
            Duration::from_secs(5),
        );
        assert_failed_text(&out.result, "");
        assert!(
            out.elapsed < Duration::from_secs(5),
            "{runtime:?}: {:?}",
            out.elapsed
        );
    });
}

#[test]
fn account_reads_answered_500_are_retried_once_and_the_operation_still_settles() {
    both(|runtime| {
        let http = OverHttp::start();
        http.set_world(&ScriptedToolGateway::new().flips(&[("gmail", 4)]));
        // The first two reads (one read and its retry) fail; later reads succeed.
        faults(
            &http,
            json!([{"route": "account", "status": 500, "count": 2}]),
        );
        let out = run(
            &http,
            runtime,
            &connect(&["gmail"]),
            Duration::from_millis(10),
            Duration::from_secs(5),
        );
        assert_eq!(
            out.result["settled_by"], "all_resolved",
            "{runtime:?}: {}",
            out.result
        );
        assert_eq!(out.result["targets"][0]["state"], "connected");
        assert_eq!(
            account_reads(&http),
            4,
            "{runtime:?}: the failed read was retried once"
        );
    });
}

#[test]
fn a_429_backs_off_every_live_target_until_retry_after() {
    both(|runtime| {
        let http = OverHttp::start();
        http.set_world(&ScriptedToolGateway::new());
        // The first account read (gmail) is rate limited for 2 s; the deadline comes first.
        faults(
            &http,
            json!([{"route": "account", "status": 429, "retry_after_ms": 2000, "count": 1}]),
        );
        let tick = Duration::from_millis(10);
        let deadline = Duration::from_millis(900);
        let out = run(
            &http,
            runtime,
            &connect(&["gmail", "notion"]),
            tick,
            deadline,
        );
        assert_eq!(out.result["settled_by"], "deadline");
        assert!(
            out.elapsed < deadline + tick + SLACK,
            "{runtime:?}: {:?}",
            out.elapsed
        );
        // One tick read both (gmail got the 429); then nobody was read again. Without the
        // back-off on every live target, notion would have been read ~90 more times.
        assert_eq!(account_reads(&http), 2, "{runtime:?}");
    });
}

#[test]
fn answers_slower_than_the_read_timeout_do_not_hold_the_deadline() {
    both(|runtime| {
        let http = OverHttp::start();
        http.set_world(&ScriptedToolGateway::new());
        // Every account read takes 4 s; the read timeout is clamped to 1 s; the deadline is
        // 1.5 s away.
        faults(
            &http,
            json!([{"route": "account", "delay_ms": 4000, "count": 100}]),
        );
        let tick = Duration::from_millis(10);
        let deadline = Duration::from_millis(1500);
        let out = run(&http, runtime, &connect(&["gmail"]), tick, deadline);
        assert_eq!(out.result["settled_by"], "deadline");
        assert_eq!(out.result["targets"][0]["state"], "not_connected");
        assert!(
            out.elapsed < deadline + tick + SLACK,
            "{runtime:?}: {:?}",
            out.elapsed
        );
    });
}

#[test]
fn malformed_account_bodies_move_nothing_and_the_operation_settles_by_its_deadline() {
    both(|runtime| {
        let http = OverHttp::start();
        http.set_world(&ScriptedToolGateway::new().flips(&[("gmail", 1)]));
        faults(
            &http,
            json!([{"route": "account", "status": 200, "body": "{\"status\": \"zombie\"", "count": 1000}]),
        );
        let tick = Duration::from_millis(20);
        let deadline = Duration::from_millis(400);
        let out = run(&http, runtime, &connect(&["gmail"]), tick, deadline);
        assert_eq!(
            out.result["settled_by"], "deadline",
            "{runtime:?}: {}",
            out.result
        );
        assert!(
            out.elapsed < deadline + tick + SLACK,
            "{runtime:?}: {:?}",
            out.elapsed
        );
        assert!(account_reads(&http) >= 2);
    });
}

#[test]
fn every_request_carries_the_token_and_the_content_type() {
    both(|runtime| {
        let http = OverHttp::start();
        http.set_world(
            &ScriptedToolGateway::new()
                .flips(&[("gmail", 2)])
                .listed(Some(&["gmail"])),
        );
        let out = run(
            &http,
            runtime,
            &json!({"action": "reconnect", "connectors": ["gmail", "notion"]}),
            Duration::ZERO,
            Duration::from_secs(5),
        );
        assert!(out.result.get("error").is_none(), "{}", out.result);
        let requests = v1_requests(&http);
        assert!(
            requests.len() >= 3,
            "a list, a mint and reads: {}",
            requests.len()
        );
        for request in requests {
            let header = |name: &str| {
                request
                    .headers
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.as_str())
            };
            // The gateway requires `Bearer table-token` (a wrong one is a 401, and the
            // operation above would have failed); its log shows the header redacted.
            assert_eq!(
                header("authorization"),
                Some("[redacted]"),
                "{} {}",
                request.method,
                request.path
            );
            assert_eq!(
                header("content-type"),
                Some("application/json"),
                "{} {}",
                request.method,
                request.path
            );
        }
    });
}

#[test]
fn a_wrong_token_is_an_auth_error_before_any_card() {
    both(|runtime| {
        let http = OverHttp::start();
        http.set_world(&ScriptedToolGateway::new());
        let config = ClientConfig::new(http.server().url(), Some("not-the-token".into()));
        let blocking =
            Arc::new(connop_blocking::http::HttpToolGateway::new(config.clone()).unwrap());
        let asynchronous = Arc::new(connop_smol::http::AsyncHttpToolGateway::new(config).unwrap());
        let out = run_with(
            runtime,
            blocking,
            asynchronous,
            &connect(&["gmail"]),
            Duration::ZERO,
            Duration::from_secs(5),
        );
        assert_failed_text(&out.result, "HTTP 401");
    });
}
