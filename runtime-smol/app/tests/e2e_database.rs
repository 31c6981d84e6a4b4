//! The store against a PostgreSQL server that goes away, end to end: start-up against a server
//! that accepts and never answers gives up in about 10 s; error lines say what to fix and never
//! the password; a server stopped mid-run ends the runs with an error and stops their agent
//! commands, the gateway answers 503 meanwhile (saying so once in its log), and work is
//! accepted again once the server is back.
//!
//! The tests that stop and start a server run it themselves from the distribution's binaries
//! (`support::pg_cluster`); without them they are reported ignored, with the reason.

#![cfg_attr(not(connop_postgres_server_tests), allow(dead_code, unused_imports))]

mod support;

use serde_json::{Value, json};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::http_api::{Api, process_ends, until_terminal};
use support::pg_cluster::Cluster;
use support::{BOUND, connop, output_bounded, spawn_announcing};

/// The error of a run the store failed under.
const STORE_FAILED: &str = "The store failed while this run was active.";

fn scratch(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "connop-db-{what}-{}",
        connop_app::sync::random_hex(6)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `connop gateway --http 127.0.0.1:0` on the database at `url`, with a tool gateway nobody
/// serves and `home` as `CONNOP_HOME`.
fn gateway(home: &Path, url: &str, args: &[&str]) -> Command {
    let mut command = connop();
    command
        .args(["gateway", "--http", "127.0.0.1:0", "--database-url", url])
        .args(args)
        .env("CONNOP_HOME", home)
        .env("CONNECTOR_GATEWAY_URL", "http://127.0.0.1:9")
        .env("CONNECTOR_GATEWAY_TOKEN", "unused")
        .stdin(Stdio::null());
    command
}

/// Waits for `child` at most `bound`; `None` (and the child killed) when it is still running.
fn wait_within(mut child: Child, bound: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        // Another process's exit has no event to wait on here: look again shortly.
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn start_up_against_a_server_that_accepts_and_never_answers_gives_up_in_about_10_seconds() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    // Accepts every connection and holds it, answering nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in silent.incoming() {
            held.push(stream);
        }
    });
    let home = scratch("silent");
    let password = "hunter2-never-echoed";
    let url = format!("postgres://app:{password}@127.0.0.1:{port}/connop");
    let started = Instant::now();
    let mut child = gateway(&home, &url, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let status = wait_within(child, Duration::from_secs(30));
    let took = started.elapsed();
    let mut text = String::new();
    let _ = stderr.read_to_string(&mut text);
    let status = status.unwrap_or_else(|| panic!("still waiting after {took:?}; stderr: {text}"));
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        took >= Duration::from_secs(8) && took < Duration::from_secs(20),
        "gave up after {took:?}"
    );
    let line = text
        .lines()
        .rfind(|l| l.starts_with("connop: "))
        .unwrap_or("");
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(line.contains("no answer within 10 s"), "{text}");
    assert!(!text.contains(password), "{text}");
    let _ = std::fs::remove_dir_all(home);
}

#[test]
#[cfg_attr(
    not(connop_postgres_server_tests),
    ignore = "install the distribution's postgresql package to run the tests that own a server"
)]
fn error_lines_say_what_to_fix_and_never_the_password() {
    let cluster = Cluster::start();
    let home = scratch("errors");
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = nobody.local_addr().unwrap().port();
    drop(nobody);
    let right = cluster.password.clone();
    let cases: Vec<(String, &str, Vec<String>)> = vec![
        (
            cluster.url("postgres", Some("wrong-secret-4711"), "postgres"),
            "wrong-secret-4711",
            vec![
                "authentication failed for user \"postgres\"".into(),
                "check the user and password".into(),
            ],
        ),
        (
            cluster.url("ghost", Some("ghost-secret-0815"), "postgres"),
            "ghost-secret-0815",
            vec!["unknown user \"ghost\"".into()],
        ),
        (
            cluster.url("postgres", Some(&right), "nosuchdb"),
            &right,
            vec!["unknown database \"nosuchdb\"".into()],
        ),
        (
            cluster.url("postgres", None, "postgres"),
            &right,
            vec!["asks for a password".into()],
        ),
        (
            format!("postgres://postgres:refused-secret-99@127.0.0.1:{closed_port}/postgres"),
            "refused-secret-99",
            vec![
                format!("127.0.0.1:{closed_port}"),
                "connection refused".into(),
            ],
        ),
    ];
    for (url, password, wanted) in cases {
        let out = output_bounded(&mut gateway(&home, &url, &[]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {stderr}");
        let line = stderr
            .lines()
            .rfind(|l| l.starts_with("connop: "))
            .unwrap_or("");
        for want in &wanted {
            assert!(line.contains(want.as_str()), "{want:?} in {line:?}");
        }
        assert!(!line.contains("db error"), "{line}");
        assert!(!stderr.contains(password), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(home);
}

/// The store's default connect timeout (`CONNECT_TIMEOUT` of the PostgreSQL pool).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// An agent command: a message with `quick` in it is answered `done`; any other starts a
/// `sleep` whose pid goes to `pids`, and waits for it.
fn agent(pids: &Path) -> String {
    format!(
        "input=$(cat); case \"$input\" in *quick*) echo done;; *) sleep 300 & echo $! >> '{}'; wait;; esac",
        pids.display()
    )
}

/// The pids in `file`, once there are `n`.
fn pids(file: &Path, n: usize) -> Vec<u32> {
    let deadline = Instant::now() + BOUND;
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.len() >= n {
            return pids;
        }
        assert!(Instant::now() < deadline, "{n} agent commands started");
        // Written by another process tree: look again shortly.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (within the bound) until the gateway's stderr has a line that satisfies `want`.
fn said(api: &Api, what: &str, want: impl Fn(&str) -> bool) {
    said_within(api, what, BOUND, want);
}

/// [`said`] within `bound`.
fn said_within(api: &Api, what: &str, bound: Duration, want: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + bound;
    while !api.stderr().iter().any(|l| want(l)) {
        assert!(
            Instant::now() < deadline,
            "no line saying {what}: {:#?}",
            api.stderr()
        );
        // The lines are read on another thread: look again shortly.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One request with a bound on how long it may take; the status, the body and the time.
fn timed(api: &Api, method: &str, path: &str, body: Option<&Value>) -> (u16, Value, Duration) {
    use isahc::ReadResponseExt;
    use isahc::config::Configurable;
    let mut request = isahc::Request::builder()
        .method(method)
        .uri(format!("{}{path}", api.url))
        .timeout(Duration::from_secs(30));
    if body.is_some() {
        // Writes with a body take JSON only.
        request = request.header("content-type", "application/json");
    }
    let request = request
        .body(body.map(Value::to_string).unwrap_or_default())
        .unwrap();
    let started = Instant::now();
    let mut response = isahc::send(request).expect("the gateway answers");
    let took = started.elapsed();
    let text = response.text().unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    (response.status().as_u16(), body, took)
}

#[test]
#[cfg_attr(
    not(connop_postgres_server_tests),
    ignore = "install the distribution's postgresql package to run the tests that own a server"
)]
fn a_database_stopped_mid_run_ends_the_runs_and_their_agents_and_work_resumes_when_it_returns() {
    let mut cluster = Cluster::start();
    let home = scratch("outage");
    let pid_file = home.join("agents");
    let agent = agent(&pid_file);
    let url = cluster.superuser_url();
    let mut command = gateway(
        &home,
        &url,
        &["--replica-id", "outage", "--agent-cmd", &agent],
    );
    let api = Api::listening(spawn_announcing(&mut command), &[]);
    let runs: Vec<String> = (0..2)
        .map(|i| api.start_run(&json!({"input": format!("slow {i}")})))
        .collect();
    let agents = pids(&pid_file, 2);
    for run in &runs {
        assert_eq!(api.run(run)["status"], "running");
    }

    cluster.stop();
    for pid in &agents {
        assert!(
            process_ends(*pid, Duration::from_secs(20)),
            "agent {pid} still runs with the database gone; stderr: {:#?}",
            api.stderr()
        );
    }
    // The gateway answers: its health, and 503 at once for what needs the store.
    let (status, _, _) = timed(&api, "GET", "/health", None);
    assert_eq!(status, 200);
    for _ in 0..3 {
        let (status, body, took) = timed(&api, "GET", &format!("/v1/runs/{}", runs[0]), None);
        assert_eq!(
            (status, &body["error"]["code"]),
            (503, &json!("store_unavailable")),
            "{body}"
        );
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
        let (status, body, took) = timed(&api, "POST", "/v1/runs", Some(&json!({"input": "x"})));
        assert_eq!(status, 503, "{body}");
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
    }
    for run in &runs {
        said(&api, &format!("that {run} could not be stored"), |l| {
            l.contains("could not be stored") && l.contains(run.as_str())
        });
    }
    let lines = api.stderr();
    let outages = lines
        .iter()
        .filter(|l| l.contains("the store is unavailable"))
        .count();
    assert_eq!(outages, 1, "one line for the outage: {lines:#?}");

    cluster.start_again();
    let deadline = Instant::now() + Duration::from_secs(30);
    for run in &runs {
        loop {
            let (status, body, _) = timed(&api, "GET", &format!("/v1/runs/{run}"), None);
            if status == 200 && body["status"] != "running" {
                assert_eq!(
                    (&body["status"], &body["error"]),
                    (&json!("interrupted"), &json!(STORE_FAILED)),
                    "{body}"
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{run} ended once the database is back: {status} {body}; stderr: {:#?}",
                api.stderr()
            );
            // The gateway finds the database back on its own: look again shortly.
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    said(&api, "the store's return", |l| {
        l.contains("the store is available again")
    });
    // Work is accepted again.
    let quick = api.start_run(&json!({"input": "quick"}));
    let events = until_terminal(&api.events(&quick));
    let (event, data) = events.last().unwrap();
    assert_eq!(
        (event.as_str(), &data["output"]),
        ("run.completed", &json!("done"))
    );
    api.signal("-TERM");
    let (status, _) = api.wait();
    assert_eq!(status.code(), Some(0));
    let _ = std::fs::remove_dir_all(home);
}

#[test]
#[cfg_attr(
    not(connop_postgres_server_tests),
    ignore = "install the distribution's postgresql package to run the tests that own a server"
)]
fn a_frozen_database_is_given_up_on_within_the_timeouts_then_answered_503_at_once_and_shutdown_does_not_wait()
 {
    let cluster = Cluster::start();
    let home = scratch("frozen");
    let url = cluster.superuser_url();
    let mut command = gateway(&home, &url, &["--replica-id", "frozen"]);
    let api = Api::listening(spawn_announcing(&mut command), &[]);
    api.create_session("before", "t", "desktop");

    cluster.freeze();
    // A statement on a pooled connection, then a check on a fresh one: each has its timeout.
    let (status, body, took) = timed(&api, "GET", "/api/sessions", None);
    assert_eq!(status, 503, "{body}");
    assert!(took < Duration::from_secs(15), "answered after {took:?}");
    // The failed statement starts the store's check, on a fresh connection, which gives up
    // after the store's connect timeout (10 s): the line comes then.
    said_within(&api, "the outage", CONNECT_TIMEOUT + BOUND, |l| {
        l.contains("the store is unavailable")
    });
    for _ in 0..3 {
        let (status, _, took) = timed(&api, "GET", "/api/sessions", None);
        assert_eq!(status, 503);
        assert!(took < Duration::from_secs(2), "answered after {took:?}");
    }

    cluster.thaw();
    said(&api, "the store's return", |l| {
        l.contains("the store is available again")
    });
    let (status, listed, _) = timed(&api, "GET", "/api/sessions", None);
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["sessions"][0]["session_id"], "before");

    // Frozen again, not noticed yet: a shutdown does not wait on it.
    cluster.freeze();
    api.signal("-TERM");
    let (status, took) = api.wait();
    assert_eq!(status.code(), Some(0));
    assert!(took < Duration::from_secs(3), "exited after {took:?}");
    let _ = std::fs::remove_dir_all(home);
}
