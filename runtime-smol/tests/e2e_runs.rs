//! Runs, sessions and session chat over HTTP, end to end against the real binary (seed 003 and
//! SPEC §9.1–§9.2). Waits are event streams and channel receives with generous bounds.

mod support;

use isahc::ReadResponseExt;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};
use support::{BOUND, connop, spawn_announcing, wait_bounded};

const AUTHOR: &str = r#"{"id": "bot:cto", "name": "cto", "is_bot": true}"#;

fn author() -> Value {
    serde_json::from_str(AUTHOR).unwrap()
}

/// A fresh CONNOP_HOME.
fn home() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "connop-runs-{}",
        connop_blocking::clock::random_hex(6)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running `connop gateway --http` with its API's URL.
struct Api {
    child: Option<Child>,
    url: String,
    key: Option<String>,
}

impl Api {
    fn start(home: &Path, args: &[&str]) -> Self {
        let mut command = connop();
        command
            .args(["gateway", "--http", "127.0.0.1:0"])
            .args(args)
            .env("CONNOP_HOME", home)
            // A tool gateway nobody serves: no embedded simulated one, one listening line.
            .env("CONNECTOR_GATEWAY_URL", "http://127.0.0.1:9")
            .env("CONNECTOR_GATEWAY_TOKEN", "unused")
            .stdin(Stdio::null());
        let (child, listening, _) = spawn_announcing(&mut command);
        let url = listening.recv_timeout(BOUND).expect("the API listens");
        let key = args
            .windows(2)
            .find(|w| w[0] == "--api-key")
            .map(|w| w[1].to_owned());
        Api {
            child: Some(child),
            url,
            key,
        }
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut builder = isahc::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.url));
        if let Some(key) = &self.key {
            builder = builder.header("Authorization", format!("Bearer {key}"));
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let mut response = isahc::send(builder.body(body.unwrap_or("").to_owned()).unwrap())
            .expect("the API answers");
        let text = response.text().unwrap_or_default();
        (
            response.status().as_u16(),
            serde_json::from_str(&text).unwrap_or(Value::Null),
        )
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.request("GET", path, None, &[])
    }

    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.request("POST", path, Some(&body.to_string()), &[])
    }

    fn create_session(&self, id: &str, title: &str, source: &str) {
        let (status, _) = self.post(
            "/api/sessions",
            &json!({"session_id": id, "title": title, "source": source}),
        );
        assert_eq!(status, 201);
    }

    /// The run's event stream: `(event, data)` pairs as they arrive, on a thread.
    fn events(&self, run_id: &str) -> Receiver<(String, Value)> {
        let url = format!("{}/v1/runs/{run_id}/events", self.url);
        let key = self.key.clone();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut builder = isahc::Request::get(url);
            if let Some(key) = key {
                builder = builder.header("Authorization", format!("Bearer {key}"));
            }
            let Ok(response) = isahc::send(builder.body(()).unwrap()) else {
                return;
            };
            let mut event = String::new();
            for line in BufReader::new(response.into_body())
                .lines()
                .map_while(Result::ok)
            {
                if let Some(name) = line.strip_prefix("event: ") {
                    event = name.to_owned();
                } else if let Some(data) = line.strip_prefix("data: ") {
                    let _ = tx.send((
                        event.clone(),
                        serde_json::from_str(data).unwrap_or(Value::Null),
                    ));
                }
            }
        });
        rx
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().map_or(0, Child::id).to_string();
        assert!(
            std::process::Command::new("kill")
                .args([signal, &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    fn wait(mut self) -> (std::process::ExitStatus, Duration) {
        let started = Instant::now();
        let status = wait_bounded(self.child.take().unwrap());
        (status, started.elapsed())
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Events until the terminal one.
fn until_terminal(events: &Receiver<(String, Value)>) -> Vec<(String, Value)> {
    let mut seen = Vec::new();
    loop {
        let event = events.recv_timeout(BOUND).expect("the next event");
        let done = [
            "run.completed",
            "run.failed",
            "run.cancelled",
            "run.interrupted",
        ]
        .contains(&event.0.as_str());
        seen.push(event);
        if done {
            return seen;
        }
    }
}

fn no_delivery_records(home: &Path) {
    let dir = home.join("runtime").join("bot_live_delivery");
    let records = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
    assert_eq!(records, 0, "no delivery record under {}", dir.display());
}

/// A desktop viewer lease on the Bot Chat, advertising a delivery consumer.
fn viewer_lease(home: &Path) -> connop_smol::app::lease::Lease {
    let metadata = json!({"live_session_id": "live-1", "bot_live_delivery_consumer": true});
    connop_smol::app::lease::try_acquire(home, "bot-chat", "desktop", metadata, 0)
        .expect("the viewer lease")
}

#[test]
fn test_a_peer_turn_into_a_bot_chat_without_an_authority_runs_here() {
    for (target, open_in_desktop) in [("scratch", true), ("bot-chat", true), ("bot-chat", false)] {
        let home = home();
        let api = Api::start(&home, &["--agent-cmd", "printf 'ran here'"]);
        api.create_session("bot-chat", "Bot Chat", "desktop");
        api.create_session("scratch", "", "api_server");
        let lease = open_in_desktop.then(|| viewer_lease(&home));
        let (status, body) = api.post(
            &format!("/api/sessions/{target}/chat"),
            &json!({"message": "ping", "author": author()}),
        );
        assert_eq!(status, 200, "{target}: {body}");
        assert_eq!(body["object"], "connop.session.chat.completion");
        assert_eq!(body["message"]["content"], "ran here");
        no_delivery_records(&home);
        drop(lease);
        let _ = std::fs::remove_dir_all(&home);
    }
}

#[test]
fn test_a_peer_run_into_a_bot_chat_without_an_authority_runs_here() {
    for target in ["scratch", "bot-chat"] {
        let home = home();
        let api = Api::start(&home, &["--agent-cmd", "printf 'ran here'"]);
        api.create_session("bot-chat", "Bot Chat", "desktop");
        api.create_session("scratch", "", "api_server");
        let lease = viewer_lease(&home);
        let (status, body) = api.post(
            "/v1/runs",
            &json!({"input": "ping", "session_id": target, "author": author()}),
        );
        assert_eq!(status, 202, "{body}");
        assert_eq!(body["status"], "started");
        let run_id = body["run_id"].as_str().unwrap().to_owned();
        assert!(run_id.starts_with("run_") && run_id.len() == 36);
        until_terminal(&api.events(&run_id));
        let (_, run) = api.get(&format!("/v1/runs/{run_id}"));
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["output"], "ran here");
        assert_eq!(run["object"], "connop.run");
        assert_eq!(run["session_id"], target);
        no_delivery_records(&home);
        lease.release().expect("the lease is released");
        let _ = std::fs::remove_dir_all(&home);
    }
}

#[test]
fn test_gateway_shutdown_reports_a_live_owned_run_as_interrupted() {
    let home = home();
    let api = Api::start(&home, &["--agent-cmd", "sleep 30"]);
    api.create_session("bot-chat", "Bot Chat", "desktop");
    let (_, body) = api.post(
        "/v1/runs",
        &json!({"input": "ping", "session_id": "bot-chat"}),
    );
    let run_id = body["run_id"].as_str().unwrap().to_owned();
    let events = api.events(&run_id);
    assert_eq!(events.recv_timeout(BOUND).unwrap().0, "run.started");
    api.signal("-TERM");
    let seen = until_terminal(&events);
    let terminal: Vec<&str> = seen.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(terminal, ["run.interrupted"]);
    assert_eq!(seen[0].1["error"], "Gateway shutdown interrupted the run.");
    assert!(
        events.recv_timeout(Duration::from_secs(2)).is_err(),
        "the stream ended after the terminal event"
    );
    let (status, took) = api.wait();
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(1), "exited after {took:?}");

    // After a restart the run still reads the shutdown's text.
    let again = Api::start(&home, &[]);
    let (_, run) = again.get(&format!("/v1/runs/{run_id}"));
    assert_eq!(run["status"], "interrupted");
    assert_eq!(run["error"], "Gateway shutdown interrupted the run.");
    drop(again);
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn a_run_left_unsettled_by_a_dead_gateway_reads_interrupted_after_a_restart() {
    let home = home();
    let api = Api::start(&home, &["--agent-cmd", "sleep 30"]);
    let (_, body) = api.post("/v1/runs", &json!({"input": "ping"}));
    let run_id = body["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        api.events(&run_id).recv_timeout(BOUND).unwrap().0,
        "run.started"
    );
    api.signal("-KILL");
    let _ = api.wait();
    let again = Api::start(&home, &[]);
    let (_, run) = again.get(&format!("/v1/runs/{run_id}"));
    assert_eq!(run["status"], "interrupted");
    assert_eq!(
        run["error"],
        "The gateway restarted before this run settled."
    );
    drop(again);
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn a_stop_cancels_a_running_run_and_changes_nothing_on_a_terminal_one() {
    let home = home();
    let api = Api::start(&home, &["--agent-cmd", "sleep 30"]);
    let (_, body) = api.post("/v1/runs", &json!({"input": "ping"}));
    let run_id = body["run_id"].as_str().unwrap().to_owned();
    let events = api.events(&run_id);
    assert_eq!(events.recv_timeout(BOUND).unwrap().0, "run.started");
    let started = Instant::now();
    let (status, stopped) = api.post(&format!("/v1/runs/{run_id}/stop"), &json!({}));
    assert_eq!(status, 200);
    assert!(
        ["stopping", "cancelled"].contains(&stopped["status"].as_str().unwrap()),
        "{stopped}"
    );
    let seen = until_terminal(&events);
    assert_eq!(seen.last().unwrap().0, "run.cancelled");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the agent command was killed"
    );
    let (_, run) = api.get(&format!("/v1/runs/{run_id}"));
    assert_eq!(run["status"], "cancelled");
    let (status, again) = api.post(&format!("/v1/runs/{run_id}/stop"), &json!({}));
    assert_eq!(
        (status, again["status"].as_str()),
        (200, Some("cancelled")),
        "a terminal run is left as it is"
    );
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn runs_complete_fail_and_stream_their_events_in_order() {
    let home = home();
    let api = Api::start(
        &home,
        &[
            "--agent-cmd",
            "read line; case \"$line\" in *boom*) echo 'agent exploded' >&2; exit 2;; *) echo reply;; esac",
        ],
    );
    let (_, body) = api.post(
        "/v1/runs",
        &json!({"input": [{"role": "user", "content": "hello"}]}),
    );
    let run_id = body["run_id"].as_str().unwrap().to_owned();
    let seen = until_terminal(&api.events(&run_id));
    let names: Vec<&str> = seen.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names, ["run.started", "message.delta", "run.completed"]);
    assert_eq!(seen[1].1["delta"], "reply");
    assert_eq!(seen[2].1["output"], "reply");
    assert_eq!(seen[2].1["run_id"], run_id.as_str());
    // A late subscriber gets the events replayed from the start.
    let late: Vec<String> = until_terminal(&api.events(&run_id))
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    assert_eq!(late, ["run.started", "message.delta", "run.completed"]);

    let (_, body) = api.post("/v1/runs", &json!({"input": "boom"}));
    let run_id = body["run_id"].as_str().unwrap().to_owned();
    let seen = until_terminal(&api.events(&run_id));
    assert_eq!(seen.last().unwrap().0, "run.failed");
    let (_, run) = api.get(&format!("/v1/runs/{run_id}"));
    assert_eq!(
        (run["status"].as_str(), run["error"].as_str()),
        (Some("failed"), Some("agent exploded"))
    );
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn bad_requests_404s_idempotency_and_the_api_key() {
    let home = home();
    let api = Api::start(&home, &["--api-key", "sekret"]);
    let (status, body) = api.request("POST", "/v1/runs", Some("{nope"), &[]);
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (400, Some("Invalid JSON"))
    );
    let (status, body) = api.post("/v1/runs", &json!({}));
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (400, Some("Missing 'input' field"))
    );
    let (status, body) = api.post("/v1/runs", &json!({"input": "  "}));
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (400, Some("No user message found in input"))
    );
    let (status, body) = api.post(
        "/v1/runs",
        &json!({"input": "hi", "author": {"id": "", "name": "x", "is_bot": true}}),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_author"))
    );
    let (status, body) = api.get("/v1/runs/run_missing");
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (404, Some("Run not found: run_missing"))
    );
    let (status, _) = api.post("/api/sessions/nobody/chat", &json!({"message": "hi"}));
    assert_eq!(status, 404);
    let (status, _) = api.post("/api/sessions", &json!({"session_id": "dup"}));
    assert_eq!(status, 201);
    let (status, _) = api.post("/api/sessions", &json!({"session_id": "dup"}));
    assert_eq!(status, 409);

    let body = json!({"input": "same"}).to_string();
    let (first_status, first) = api.request(
        "POST",
        "/v1/runs",
        Some(&body),
        &[("Idempotency-Key", "k1")],
    );
    let (again_status, again) = api.request(
        "POST",
        "/v1/runs",
        Some(&body),
        &[("Idempotency-Key", "k1")],
    );
    assert_eq!((first_status, again_status), (202, 202));
    assert_eq!(
        first, again,
        "the same key and body replay the first answer"
    );
    let other = json!({"input": "other"}).to_string();
    let (status, body) = api.request(
        "POST",
        "/v1/runs",
        Some(&other),
        &[("Idempotency-Key", "k1")],
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("idempotency_key_conflict"))
    );

    let anonymous = Api {
        child: None,
        url: api.url.clone(),
        key: None,
    };
    assert_eq!(anonymous.get("/api/sessions").0, 401);
    assert_eq!(anonymous.get("/health").0, 200, "/health needs no key");
    let wrong = Api {
        child: None,
        url: api.url.clone(),
        key: Some("wrong".into()),
    };
    assert_eq!(wrong.get("/api/sessions").0, 401);
    let _ = std::fs::remove_dir_all(&home);
}
