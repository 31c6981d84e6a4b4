//! `connop connect` and `connop connectors` for a person (docs/operating.md#connop-connect),
//! through the real binary off a terminal: every exit status, the up-front connector check,
//! one-line errors on stderr that name what to fix, and the summary (or the model result with
//! `--json`) on stdout. The keyboard's exit statuses are in `e2e_connect.rs` (pseudo-terminal).

mod support;

use connop_app::sim_gateway::{SimOptions, SimToolGateway};
use serde_json::{Value, json};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::{connop, output_bounded, spawn_logging, wait_bounded};

/// `connop <args>` against the tool gateway at `url` with `token`, stdin closed.
fn against(url: &str, token: &str, args: &[&str]) -> Command {
    let mut command = connop();
    command
        .env("CONNECTOR_GATEWAY_URL", url)
        .env("CONNECTOR_GATEWAY_TOKEN", token)
        .args(args)
        .stdin(Stdio::null());
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The stderr lines that are not logs.
fn said(out: &Output) -> Vec<String> {
    text(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("connop: "))
        .map(str::to_owned)
        .collect()
}

fn sim() -> SimToolGateway {
    SimToolGateway::start(SimOptions::default().token("t0ken")).unwrap()
}

fn mints(sim: &SimToolGateway) -> usize {
    sim.log()
        .iter()
        .filter(|r| r.path == "/v1/connectors/connections")
        .count()
}

#[test]
fn exit_0_when_every_target_connected_with_a_summary_on_stdout() {
    let out = output_bounded(
        connop()
            .args(["connect", "gmail", "notion", "--sim-auto", "0.2"])
            .stdin(Stdio::null()),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "gmail   connected\nnotion  connected\n");
}

#[test]
fn exit_3_when_settled_with_a_target_not_connected() {
    let sim = sim();
    sim.apply_state(
        json!({"mint": {"notion": {"status": "failed", "statusReason": "quota exceeded"}}}),
    )
    .unwrap();
    let out = output_bounded(&mut against(
        &sim.url(),
        "t0ken",
        &["connect", "gmail", "notion", "--deadline", "0.5"],
    ));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "gmail   not connected\nnotion  failed: quota exceeded\n"
    );
    // With --json, stdout is the model result and nothing else.
    let out = output_bounded(&mut against(
        &sim.url(),
        "t0ken",
        &["connect", "gmail", "--deadline", "0.3", "--json"],
    ));
    assert_eq!(out.status.code(), Some(3));
    let result: Value = serde_json::from_slice(&out.stdout).expect("one JSON result");
    assert_eq!(result["settled_by"], "deadline");
    assert_eq!(result["targets"][0]["state"], "not_connected");
}

#[test]
fn exit_2_for_an_unknown_connector_within_a_second_with_nothing_minted() {
    let sim = sim();
    let started = Instant::now();
    let out = output_bounded(&mut against(
        &sim.url(),
        "t0ken",
        &["connect", "gmail", "gmial"],
    ));
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        said(&out),
        ["connop: unknown connector 'gmial' (did you mean 'gmail'?)"]
    );
    assert!(out.stdout.is_empty());
    assert_eq!(mints(&sim), 0, "nothing minted");
    // A name nothing is close to lists what there is.
    let out = output_bounded(&mut against(&sim.url(), "t0ken", &["connect", "dropbox"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(said(&out)[0].contains("connop connectors` lists them: gmail, notion"));
    // The embedded tool gateway checks the same way.
    let out = output_bounded(connop().args(["connect", "notoin"]).stdin(Stdio::null()));
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown connector 'notoin' (did you mean 'notion'?)"));
    // So does a bad flag.
    let out = output_bounded(connop().args(["connect", "gmail", "--deadline", "-1"]));
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn exit_1_for_a_tool_gateway_failure_with_one_line_that_names_the_fix() {
    let sim = sim();
    let url = sim.url();
    let cases: [(&str, &str, &str); 3] = [
        (
            "http://127.0.0.1:1",
            "t",
            "cannot reach the tool gateway at http://127.0.0.1:1",
        ),
        (&url, "wrong", "refused CONNECTOR_GATEWAY_TOKEN (HTTP 401)"),
        (&url, "", "CONNECTOR_GATEWAY_TOKEN is unset"),
    ];
    for (url, token, expected) in cases {
        let out = output_bounded(&mut against(url, token, &["connect", "gmail"]));
        assert_eq!(out.status.code(), Some(1), "{url} {token:?}");
        let lines = said(&out);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains(expected), "{lines:?}");
        assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    }
    assert_eq!(mints(&sim), 0);
    // A failed mint: the operation's error, told as what the gateway answered.
    sim.queue_faults(json!({"faults": [{"route": "mint", "status": 503}]}))
        .unwrap();
    let out = output_bounded(&mut against(&url, "t0ken", &["connect", "gmail"]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        said(&out),
        [format!(
            "connop: the tool gateway at {url} answered HTTP 503 to the mint request: try \
             again later, or check CONNECTOR_GATEWAY_URL"
        )]
    );
    // With --json the model result still comes out on stdout.
    sim.queue_faults(json!({"faults": [{"route": "mint", "status": 500}]}))
        .unwrap();
    let out = output_bounded(&mut against(&url, "t0ken", &["connect", "gmail", "--json"]));
    assert_eq!(out.status.code(), Some(1));
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(result["error"].as_str().unwrap().contains("HTTP 500"));
}

/// Runs `connect` off a terminal until its card is out, sends `signal`, and returns the
/// exit status and stdout.
fn signalled(signal: &str) -> (Option<i32>, String) {
    let sim = sim();
    let mut command = against(&sim.url(), "t0ken", &["connect", "gmail", "notion"]);
    command.stdout(Stdio::piped());
    let (mut child, _, log) = spawn_logging(&mut command);
    log.wait_for("the card", |l| l.starts_with("connop · op "));
    let mut stdout = child.stdout.take().unwrap();
    let kill = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = wait_bounded(child);
    let mut out = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
    (status.code(), out)
}

#[test]
fn exit_130_on_sigint_and_143_on_sigterm() {
    let (code, out) = signalled("-INT");
    assert_eq!(code, Some(130));
    assert_eq!(out, "gmail   not connected\nnotion  not connected\n");
    let (code, _) = signalled("-TERM");
    assert_eq!(code, Some(143));
    // The terminal closed: the operation settles `interrupt` and says so, as for the others.
    let (code, out) = signalled("-HUP");
    assert_eq!(code, Some(129));
    assert_eq!(out, "gmail   not connected\nnotion  not connected\n");
}

#[test]
fn connectors_lists_the_connected_state() {
    let sim = sim();
    sim.apply_state(json!({"connected": ["notion"]})).unwrap();
    let out = output_bounded(&mut against(&sim.url(), "t0ken", &["connectors"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.starts_with("gmail            not connected\nnotion           connected\n"),
        "{shown}"
    );
    assert_eq!(shown.lines().count(), 6);
    // A hosted tool gateway keeps its accounts from one command to the next: nothing to say.
    assert!(
        !text(&out.stderr).contains("each command starts its own"),
        "{}",
        text(&out.stderr)
    );
    let out = output_bounded(&mut against(&sim.url(), "t0ken", &["connectors", "--json"]));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        listed["connectors"][1],
        json!({"connector": "notion", "enabled": true, "connected": true})
    );
    let out = output_bounded(&mut against(&sim.url(), "nope", &["connectors"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(said(&out)[0].contains("CONNECTOR_GATEWAY_TOKEN"));
}
