//! A client of `connop gateway --http` for end-to-end tests: the process, requests, and event
//! streams read on a thread. Every wait is a channel receive with a generous bound.

use super::stores::Place;
use super::{BOUND, connop, spawn_announcing, wait_bounded};
use isahc::ReadResponseExt;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The terminal events of a run.
pub const TERMINAL: [&str; 4] = [
    "run.completed",
    "run.failed",
    "run.cancelled",
    "run.interrupted",
];

/// A running `connop gateway --http` with its API's URL.
pub struct Api {
    /// The process (taken when waited for).
    pub child: Option<Child>,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// The API key it requires, if any.
    pub key: Option<String>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Api {
    /// `connop gateway --http 127.0.0.1:0` on `place`'s store, as replica `a`.
    pub fn start(place: &Place, args: &[&str]) -> Self {
        Api::start_as(place, "a", args)
    }

    /// The same, as replica `replica` (PostgreSQL only: SQLite has one gateway).
    pub fn start_as(place: &Place, replica: &str, args: &[&str]) -> Self {
        Api::start_with(connop(), place, replica, args)
    }

    /// The same from `command` (a wrapper that sets the umask, say).
    pub fn start_with(mut command: Command, place: &Place, replica: &str, args: &[&str]) -> Self {
        Api::listening(Api::spawn(&mut command, place, replica, args), args)
    }

    /// Several replicas of `place`'s store, started at once (PostgreSQL).
    pub fn start_replicas(place: &Place, replicas: &[&str], args: &[&str]) -> Vec<Self> {
        let spawned: Vec<_> = replicas
            .iter()
            .map(|replica| Api::spawn(&mut connop(), place, replica, args))
            .collect();
        spawned
            .into_iter()
            .map(|spawned| Api::listening(spawned, args))
            .collect()
    }

    /// A spawned gateway once it listens.
    pub fn listening(
        (child, listening, stderr): (Child, Receiver<String>, Arc<Mutex<Vec<String>>>),
        args: &[&str],
    ) -> Self {
        let url = listening.recv_timeout(BOUND).unwrap_or_else(|_| {
            panic!(
                "the API listens; stderr: {:?}",
                stderr.lock().unwrap().clone()
            )
        });
        let key = args
            .windows(2)
            .find(|w| w[0] == "--api-key")
            .map(|w| w[1].to_owned());
        Api {
            child: Some(child),
            url,
            key,
            stderr,
        }
    }

    /// A client of the API at `url` with `key`, and no process of its own.
    pub fn client(url: &str, key: Option<&str>) -> Self {
        Api {
            child: None,
            url: url.to_owned(),
            key: key.map(str::to_owned),
            stderr: Arc::default(),
        }
    }

    /// Spawns the gateway without waiting for it to listen.
    pub fn spawn(
        command: &mut Command,
        place: &Place,
        replica: &str,
        args: &[&str],
    ) -> (Child, Receiver<String>, Arc<Mutex<Vec<String>>>) {
        spawn_announcing(Self::command(command, place, replica, args))
    }

    /// `command` set up as [`Api::spawn`] runs it, not yet started.
    pub fn command<'a>(
        command: &'a mut Command,
        place: &Place,
        replica: &str,
        args: &[&str],
    ) -> &'a mut Command {
        command
            .args(["gateway", "--http", "127.0.0.1:0"])
            .args(place.store_args(replica))
            .args(args)
            .env("CONNOP_HOME", place.home())
            // A tool gateway nobody serves: no embedded simulated one, one listening line.
            .env("CONNECTOR_GATEWAY_URL", "http://127.0.0.1:9")
            .env("CONNECTOR_GATEWAY_TOKEN", "unused")
            .stdin(Stdio::null())
    }

    /// What the process wrote to stderr so far.
    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// One request; the status and the JSON body (`null` if none).
    pub fn request(
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
        // A program's write: JSON, with no Origin (a test that means another type says so).
        if body.is_some_and(|b| !b.is_empty())
            && !headers
                .iter()
                .any(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        {
            builder = builder.header("Content-Type", "application/json");
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

    /// `GET path`.
    pub fn get(&self, path: &str) -> (u16, Value) {
        self.request("GET", path, None, &[])
    }

    /// `POST path` with a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.request("POST", path, Some(&body.to_string()), &[])
    }

    /// `POST /v1/runs`, answered 202; the run id.
    pub fn start_run(&self, body: &Value) -> String {
        let (status, answer) = self.post("/v1/runs", body);
        assert_eq!(status, 202, "{answer}");
        answer["run_id"].as_str().expect("a run id").to_owned()
    }

    /// `GET /v1/runs/{id}`.
    pub fn run(&self, run_id: &str) -> Value {
        let (status, run) = self.get(&format!("/v1/runs/{run_id}"));
        assert_eq!(status, 200, "{run}");
        run
    }

    /// Creates a session (201).
    pub fn create_session(&self, id: &str, title: &str, source: &str) {
        let body = serde_json::json!({"session_id": id, "title": title, "source": source});
        let (status, answer) = self.post("/api/sessions", &body);
        assert_eq!(status, 201, "{answer}");
    }

    /// The run's event stream: `(event, data)` pairs as they arrive, on a thread.
    pub fn events(&self, run_id: &str) -> Receiver<(String, Value)> {
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

    /// Sends `signal` (`-TERM`, `-KILL`) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().to_string();
        assert!(
            Command::new("kill")
                .args([signal, &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// Waits for the exit; the status and how long it took.
    pub fn wait(mut self) -> (std::process::ExitStatus, Duration) {
        let started = Instant::now();
        let status = wait_bounded(self.child.take().expect("running"));
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

/// Events until the terminal one (within `bound` each).
pub fn until_terminal_within(
    events: &Receiver<(String, Value)>,
    bound: Duration,
) -> Vec<(String, Value)> {
    let mut seen = Vec::new();
    loop {
        let event = events
            .recv_timeout(bound)
            .unwrap_or_else(|_| panic!("no next event within {bound:?} after {seen:?}"));
        let done = TERMINAL.contains(&event.0.as_str());
        seen.push(event);
        if done {
            return seen;
        }
    }
}

/// Events until the terminal one.
pub fn until_terminal(events: &Receiver<(String, Value)>) -> Vec<(String, Value)> {
    until_terminal_within(events, BOUND)
}

/// The names of events.
pub fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(e, _)| e.as_str()).collect()
}

/// Waits until process `pid` is gone (reaped, or never a zombie of ours for long), within the
/// bound; whether it went.
pub fn process_ends(pid: u32, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Gone, or a zombie: it runs no more.
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        if stat.is_empty() || state == Some('Z') {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        // No event tells when another process's child ends: look again shortly.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pid an agent command wrote to `file`, once it is there (within the bound).
pub fn wait_for_pid(file: &std::path::Path) -> u32 {
    let deadline = Instant::now() + BOUND;
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if let Ok(pid) = text.trim().parse() {
            return pid;
        }
        assert!(Instant::now() < deadline, "a pid in {}", file.display());
        // Written by another process tree: look again shortly.
        std::thread::sleep(Duration::from_millis(20));
    }
}
