//! docs/operating.md#logs and #metrics against the real binary: logs on stderr (never stdout) with
//! `RUST_LOG` and `--log-format`, an operation's life at `debug`, a refused token as a line naming
//! the route and the status (rate-limited per operation, never the token itself), and `GET
//! /metrics` in the Prometheus text format, read by a strict parser.

#[path = "support/prometheus.rs"]
mod prometheus;
mod support;

use isahc::ReadResponseExt;
use serde_json::{Value, json};
use std::process::Stdio;
use support::{BOUND, Gateway, connop, output_bounded, spawn_logging};

/// `connop sim-gateway` with a token; its URL and the process.
struct SimGateway {
    child: std::process::Child,
    url: String,
}

impl SimGateway {
    fn start(token: &str) -> Self {
        let mut command = connop();
        command.args(["sim-gateway", "--listen", "127.0.0.1:0", "--token", token]);
        let (child, listening, _) = spawn_logging(&mut command);
        let url = listening
            .recv_timeout(BOUND)
            .expect("the sim gateway listens");
        SimGateway { child, url }
    }

    fn post(&self, path: &str, token: &str, body: Value) {
        let request = isahc::Request::post(format!("{}{path}", self.url))
            .header("Authorization", format!("Bearer {token}"))
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .unwrap();
        let response = isahc::send(request).unwrap();
        assert!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
    }
}

impl Drop for SimGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get(url: &str, key: Option<&str>) -> (u16, String, String) {
    let mut builder = isahc::Request::get(url);
    if let Some(key) = key {
        builder = builder.header("Authorization", format!("Bearer {key}"));
    }
    let mut response = isahc::send(builder.body(()).unwrap()).unwrap();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (response.status().as_u16(), kind, response.text().unwrap())
}

#[test]
fn connect_at_debug_logs_the_operations_life_on_stderr_and_keeps_stdout_for_the_result() {
    let out = output_bounded(
        connop()
            .args(["connect", "gmail", "--sim-auto", "0.2", "--json"])
            .env("RUST_LOG", "debug")
            .env(
                "CONNOP_HOME",
                std::env::temp_dir().join("connop-obs-connect"),
            )
            .stdin(Stdio::null()),
    );
    assert!(out.status.success());
    // stdout is the result, all of it.
    let result: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON value");
    let op_id = result["op_id"].as_str().unwrap();
    assert_eq!(result["settled_by"], "all_resolved");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = |what: &str| {
        stderr
            .lines()
            .find(|l| l.contains(what) && l.contains(op_id))
            .unwrap_or_else(|| panic!("no {what:?} line for {op_id}: {stderr}"))
            .to_owned()
    };
    assert!(line("operation opened").contains("targets=\"gmail\""));
    assert!(line("tool-gateway call answered").contains("POST /v1/connectors/connections"));
    let moved = line("target moved");
    assert!(
        moved.contains(r#"from="pending" to="initiated""#),
        "{moved}"
    );
    assert!(
        stderr.contains(r#"from="initiated" to="connected""#),
        "{stderr}"
    );
    let settled = line("operation settled");
    assert!(
        settled.contains(r#"reason="all_resolved""#)
            && settled.contains("duration_ms=")
            && settled.contains(r#"states="gmail=connected""#),
        "{settled}"
    );
}

#[test]
fn a_refused_token_is_a_log_line_naming_the_route_and_the_status_never_the_token() {
    let sim = SimGateway::start("the-right-token");
    let mut command = connop();
    command
        .env("CONNECTOR_GATEWAY_URL", &sim.url)
        .env("CONNECTOR_GATEWAY_TOKEN", "a-wrong-token")
        // The most verbose filter there is: the token still never shows.
        .env("RUST_LOG", "trace");
    let mut gw = Gateway::start_command(command, &[]);
    let c = &mut gw.client;
    c.call(
        "session.create",
        json!({"session_id": "s", "source": "cli"}),
    );
    let result = c.call(
        "connectors.manage",
        json!({"session_id": "s", "args": {"action": "connect", "connectors": ["gmail"]}}),
    );
    assert!(result["result"]["error"].is_string(), "{result}");
    let listed = c.call("connectors.list", json!({"session_id": "s"}));
    assert_eq!(listed["error"]["code"], 5034, "{listed}");
    let mint = gw.stderr_line("the mint's failure", |l| {
        l.contains("tool-gateway call failed") && l.contains("POST /v1/connectors/connections")
    });
    assert!(
        mint.contains("status=401") && mint.contains("retried=false"),
        "{mint}"
    );
    let list = gw.stderr_line("the list's failure", |l| {
        l.contains("tool-gateway call failed") && l.contains("scope=connectors.list")
    });
    assert!(
        list.contains("GET /v1/connectors") && list.contains("status=401"),
        "{list}"
    );
    let stderr = gw.stderr().join("\n");
    assert!(
        !stderr.contains("a-wrong-token") && !stderr.contains("the-right-token"),
        "a token was logged: {stderr}"
    );
    let (status, _) = gw.close_stdin_and_wait();
    assert!(status.success());
    drop(sim);
}

#[test]
fn failed_calls_are_logged_at_most_once_per_operation_every_10_seconds() {
    let sim = SimGateway::start("t");
    sim.post(
        "/sim/faults",
        "t",
        json!({"faults": [{"route": "account", "status": 503, "count": 100000}]}),
    );
    let mut command = connop();
    command
        .env("CONNECTOR_GATEWAY_URL", &sim.url)
        .env("CONNECTOR_GATEWAY_TOKEN", "t");
    let mut gw = Gateway::start_command(command, &["--deadline", "1.5", "--tick", "0.05"]);
    let c = &mut gw.client;
    c.call(
        "session.create",
        json!({"session_id": "s", "source": "desktop"}),
    );
    let result = c.call(
        "connectors.manage",
        json!({"session_id": "s", "args": {"action": "connect", "connectors": ["gmail"]}}),
    );
    assert_eq!(result["result"]["settled_by"], "deadline", "{result}");
    let settled = gw.stderr_line("the settle", |l| l.contains("operation settled"));
    let failures: Vec<String> = gw
        .stderr()
        .into_iter()
        .filter(|l| l.contains("tool-gateway call failed"))
        .collect();
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert!(
        failures[0].contains("status=503") && failures[0].contains("retried=true"),
        "{failures:?}"
    );
    let held: u64 = settled
        .split("suppressed_failures=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .expect("the settle line counts the failures held back");
    assert!(held >= 5, "{settled}");
}

#[test]
fn log_lines_are_json_objects_with_log_format_json() {
    let home = std::env::temp_dir().join(format!(
        "connop-obs-json-{}",
        connop_app::sync::random_hex(6)
    ));
    let mut command = connop();
    command
        .env("CONNOP_HOME", &home)
        .env("CONNECTOR_GATEWAY_URL", "http://127.0.0.1:9")
        .env("CONNECTOR_GATEWAY_TOKEN", "unused");
    let gw = Gateway::start_command(command, &["--log-format", "json", "--http", "127.0.0.1:0"]);
    let _ = gw.listening();
    let up = gw.stderr_line("listener up", |l| l.contains("listener up"));
    let up: Value = serde_json::from_str(&up).expect("a JSON log line");
    assert_eq!(
        (&up["level"], &up["target"], &up["message"]),
        (
            &json!("INFO"),
            &json!("connop::listener"),
            &json!("listener up")
        )
    );
    assert!(
        up["listener"]
            .as_str()
            .unwrap()
            .starts_with("http:127.0.0.1:")
    );
    // A RUST_LOG that is no filter is a usage error.
    let out = output_bounded(
        connop()
            .args(["lease", "list"])
            .env("RUST_LOG", "connop=[")
            .env("CONNOP_HOME", &home),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("RUST_LOG="));
}

#[test]
fn metrics_answer_the_prometheus_text_format_behind_the_api_key() {
    let home = std::env::temp_dir().join(format!(
        "connop-obs-metrics-{}",
        connop_app::sync::random_hex(6)
    ));
    let mut command = connop();
    command.env("CONNOP_HOME", &home);
    let mut gw = Gateway::start_command(
        command,
        &[
            "--stdio",
            "--http",
            "127.0.0.1:0",
            "--api-key",
            "k3y",
            "--agent-cmd",
            "cat > /dev/null; printf done",
        ],
    );
    let _ = gw.listening(); // the embedded tool gateway
    let api = gw.listening();
    // One operation on the links path, one on the card path settled by Continue.
    let c = &mut gw.client;
    c.call(
        "session.create",
        json!({"session_id": "links", "source": "cli"}),
    );
    let links = c.call(
        "connectors.manage",
        json!({"session_id": "links", "args": {"action": "connect", "connectors": ["gmail"]}}),
    );
    assert_eq!(links["result"]["status"], "initiated", "{links}");
    c.call(
        "session.create",
        json!({"session_id": "card", "source": "desktop"}),
    );
    let manage = c.send(
        "connectors.manage",
        json!({"session_id": "card", "args": {"action": "connect", "connectors": ["notion"]}}),
    );
    let card = c.lines.event_for_session("connection.request", "card");
    let op_id = card["payload"]["op_id"].clone();
    c.call(
        "connection.respond",
        json!({"session_id": "card", "op_id": op_id, "result": {"settled_by": "continue"}}),
    );
    assert_eq!(c.lines.answer(manage)["result"]["settled_by"], "continue");
    // One run through the agent command.
    let request = isahc::Request::post(format!("{api}/v1/runs"))
        .header("Authorization", "Bearer k3y")
        .header("Content-Type", "application/json")
        .body(json!({"input": "hi"}).to_string())
        .unwrap();
    let mut response = isahc::send(request).unwrap();
    let run: Value = serde_json::from_str(&response.text().unwrap()).unwrap();
    let events = get(
        &format!("{api}/v1/runs/{}/events", run["run_id"].as_str().unwrap()),
        Some("k3y"),
    );
    assert!(events.2.contains("run.completed"), "{}", events.2);

    assert_eq!(get(&format!("{api}/metrics"), None).0, 401);
    assert_eq!(get(&format!("{api}/metrics"), Some("wrong")).0, 401);
    let (status, kind, text) = get(&format!("{api}/metrics"), Some("k3y"));
    assert_eq!(status, 200);
    assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
    let families = prometheus::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let family = |name: &str, kind: &str| {
        let f = families
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no {name} in {text}"));
        assert_eq!(f.kind, kind, "{name}");
        assert!(f.help.is_some(), "{name} has help");
        f
    };
    let settled = family("connop_operations_settled_total", "counter");
    for (reason, n) in [("links", 1.0), ("continue", 1.0), ("deadline", 0.0)] {
        assert_eq!(
            settled.value("connop_operations_settled_total", &[("reason", reason)]),
            Some(n),
            "{reason}"
        );
    }
    let open = family("connop_operations_open", "gauge");
    assert_eq!(open.value("connop_operations_open", &[]), Some(0.0));
    let requests = family("connop_tool_gateway_requests_total", "counter");
    assert_eq!(
        requests.value(
            "connop_tool_gateway_requests_total",
            &[("route", "mint"), ("outcome", "ok")]
        ),
        Some(2.0)
    );
    let latency = family("connop_tool_gateway_request_duration_seconds", "histogram");
    assert_eq!(
        latency.value(
            "connop_tool_gateway_request_duration_seconds_count",
            &[("route", "mint")]
        ),
        Some(2.0)
    );
    let transports = family("connop_transports_open", "gauge");
    assert_eq!(transports.value("connop_transports_open", &[]), Some(1.0));
    family("connop_transport_queued_output_bytes", "gauge");
    let runs = family("connop_runs_total", "counter");
    assert_eq!(
        runs.value("connop_runs_total", &[("status", "completed")]),
        Some(1.0)
    );
    let started = family("connop_runs_started_total", "counter");
    assert_eq!(started.value("connop_runs_started_total", &[]), Some(1.0));
    let active = family("connop_runs_active", "gauge");
    assert_eq!(active.value("connop_runs_active", &[]), Some(0.0));
    let agents = family("connop_agent_commands_running", "gauge");
    assert_eq!(
        agents.value("connop_agent_commands_running", &[]),
        Some(0.0)
    );
}
