//! A client of the real `connop` binary for end-to-end tests: pipes, a reader thread that
//! sorts answers by id and keeps events, stderr watched for `listening …` lines. Every wait
//! is a channel receive with a generous bound; nothing sleeps to synchronize.

#![allow(dead_code)]

pub mod http_api;
pub mod pg_cluster;
pub mod stores;
pub mod terminal;
pub mod webdriver;

use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long any single wait may take before the test fails.
pub const BOUND: Duration = Duration::from_secs(10);

/// The binary under test.
pub fn connop() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_connop"));
    command
        .env_remove("CONNECTOR_GATEWAY_URL")
        .env_remove("CONNECTOR_GATEWAY_TOKEN");
    command
}

#[derive(Default)]
struct Inbox {
    /// Answers by id; several answers may share an id (`null` for framing errors).
    answers: HashMap<String, std::collections::VecDeque<Value>>,
    events: Vec<Value>,
    waiters: Vec<Sender<()>>,
}

/// Lines from one transport (the binary's stdout, or a socket), sorted into answers by id
/// and events in order.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Inbox>>);

impl Lines {
    /// Reads lines from `reader` on a thread until it ends.
    pub fn spawn_reader(reader: impl std::io::Read + Send + 'static) -> Self {
        let lines = Lines::default();
        let inbox = lines.0.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { break };
                let Ok(value) = serde_json::from_str::<Value>(&line) else {
                    panic!("a line that is not JSON: {line}");
                };
                let mut inbox = inbox.lock().unwrap();
                if value.get("method") == Some(&json!("event")) {
                    inbox.events.push(value["params"].clone());
                } else {
                    inbox
                        .answers
                        .entry(value["id"].to_string())
                        .or_default()
                        .push_back(value);
                }
                for waiter in inbox.waiters.drain(..) {
                    let _ = waiter.send(());
                }
            }
        });
        lines
    }

    fn wait_for<T>(&self, what: &str, mut found: impl FnMut(&mut Inbox) -> Option<T>) -> T {
        let deadline = Instant::now() + BOUND;
        loop {
            let (tx, rx) = channel();
            {
                let mut inbox = self.0.lock().unwrap();
                if let Some(t) = found(&mut inbox) {
                    return t;
                }
                inbox.waiters.push(tx);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if rx.recv_timeout(left).is_err() && Instant::now() >= deadline {
                panic!("no {what} within {BOUND:?}");
            }
        }
    }

    /// The answer to request `id`.
    pub fn answer(&self, id: u64) -> Value {
        self.wait_for(&format!("answer to request {id}"), |inbox| {
            inbox
                .answers
                .get_mut(&id.to_string())
                .and_then(|q| q.pop_front())
        })
    }

    /// The code of the next error answered with a `null` id (a line that could not be read).
    pub fn null_id_error(&self) -> i64 {
        let answer = self.wait_for("an answer with a null id", |inbox| {
            inbox.answers.get_mut("null").and_then(|q| q.pop_front())
        });
        answer["error"]["code"].as_i64().unwrap_or(0)
    }

    /// Whether request `id` has been answered yet (without waiting).
    pub fn answered(&self, id: u64) -> bool {
        self.0
            .lock()
            .unwrap()
            .answers
            .get(&id.to_string())
            .is_some_and(|q| !q.is_empty())
    }

    /// Whether any answer with a null id came so far (without waiting).
    pub fn answered_null(&self) -> bool {
        self.answered_id("null")
    }

    fn answered_id(&self, id: &str) -> bool {
        self.0
            .lock()
            .unwrap()
            .answers
            .get(id)
            .is_some_and(|q| !q.is_empty())
    }

    /// Waits for an event of `kind` for session `session_id`; returns its params.
    pub fn event_for_session(&self, kind: &str, session_id: &str) -> Value {
        self.wait_for(&format!("{kind} event of {session_id}"), |inbox| {
            inbox
                .events
                .iter()
                .find(|e| e["type"] == kind && e["session_id"] == session_id)
                .cloned()
        })
    }

    /// Waits for an event of `kind` whose params (`type`, `session_id`, `payload`) satisfy
    /// `want`; returns them.
    pub fn event_where(&self, kind: &str, want: impl Fn(&Value) -> bool) -> Value {
        self.wait_for(&format!("{kind} event"), |inbox| {
            inbox
                .events
                .iter()
                .find(|e| e["type"] == kind && want(e))
                .cloned()
        })
    }

    /// Waits for an event of `kind` whose payload satisfies `want`; returns its params.
    pub fn event(&self, kind: &str, want: impl Fn(&Value) -> bool) -> Value {
        self.wait_for(&format!("{kind} event"), |inbox| {
            inbox
                .events
                .iter()
                .find(|e| e["type"] == kind && want(&e["payload"]))
                .cloned()
        })
    }

    /// Every event of `kind` received so far.
    pub fn events(&self, kind: &str) -> Vec<Value> {
        self.0
            .lock()
            .unwrap()
            .events
            .iter()
            .filter(|e| e["type"] == kind)
            .cloned()
            .collect()
    }
}

/// A JSON-RPC client over any writer.
pub struct Client<W: Write> {
    writer: Option<W>,
    next_id: u64,
    /// What came back.
    pub lines: Lines,
}

impl<W: Write> Client<W> {
    /// A client writing to `writer`, reading `lines`.
    pub fn new(writer: W, lines: Lines) -> Self {
        Client {
            writer: Some(writer),
            next_id: 1,
            lines,
        }
    }

    /// Sends a request without waiting; returns its id.
    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.raw(&line.to_string());
        id
    }

    /// Writes a raw line.
    pub fn raw(&mut self, line: &str) {
        let writer = self.writer.as_mut().expect("the client is open");
        writer.write_all(line.as_bytes()).expect("write");
        writer.write_all(b"\n").expect("write");
        writer.flush().expect("flush");
    }

    /// Writes raw bytes (no newline added).
    pub fn raw_bytes(&mut self, bytes: &[u8]) {
        let writer = self.writer.as_mut().expect("the client is open");
        writer.write_all(bytes).expect("write");
        writer.flush().expect("flush");
    }

    /// Closes the writing side (EOF for the peer).
    pub fn close(&mut self) {
        self.writer.take();
    }

    /// Sends a request and waits for its answer.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        self.lines.answer(id)
    }
}

/// A running `connop gateway` with a client on its stdio.
pub struct Gateway {
    /// The process (taken when waited for).
    pub child: Option<Child>,
    /// The stdio client.
    pub client: Client<ChildStdin>,
    listening: Receiver<String>,
    stderr_lines: StderrLog,
}

impl Gateway {
    /// Starts `connop gateway` with these extra arguments.
    pub fn start(args: &[&str]) -> Self {
        Gateway::start_with(connop(), args)
    }

    /// Starts `connop gateway` with these extra arguments against the tool gateway at `url`
    /// (`CONNECTOR_GATEWAY_URL`) with bearer `token`: no embedded simulated gateway.
    pub fn start_against(url: &str, token: &str, args: &[&str]) -> Self {
        let mut command = connop();
        command
            .env("CONNECTOR_GATEWAY_URL", url)
            .env("CONNECTOR_GATEWAY_TOKEN", token);
        Gateway::start_with(command, args)
    }

    /// Starts `command` (the binary, or a wrapper that execs it with the arguments it is
    /// given) with `gateway` and these arguments.
    pub fn start_command(command: Command, args: &[&str]) -> Self {
        Gateway::start_with(command, args)
    }

    fn start_with(mut command: Command, args: &[&str]) -> Self {
        command
            .arg("gateway")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let (mut child, listening, stderr_lines) = spawn_logging(&mut command);
        let lines = Lines::spawn_reader(child.stdout.take().expect("stdout"));
        let stdin = child.stdin.take().expect("stdin");
        Gateway {
            child: Some(child),
            client: Client::new(stdin, lines),
            listening,
            stderr_lines,
        }
    }

    /// The next `listening <addr>` the process announced.
    pub fn listening(&self) -> String {
        self.listening
            .recv_timeout(BOUND)
            .expect("a listening line on stderr")
    }

    /// What the process wrote to stderr so far.
    pub fn stderr(&self) -> Vec<String> {
        self.stderr_lines.lines()
    }

    /// Waits for a stderr line that satisfies `want`; returns it.
    pub fn stderr_line(&self, what: &str, want: impl Fn(&str) -> bool) -> String {
        self.stderr_lines.wait_for(what, want)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Whether the process is still running (it has not exited, by a panic or otherwise).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| child.try_wait().is_ok_and(|status| status.is_none()))
    }

    /// Closes stdin and waits for the exit, returning the status and how long it took.
    pub fn close_stdin_and_wait(mut self) -> (std::process::ExitStatus, Duration) {
        let started = Instant::now();
        self.client.close();
        let status = wait_bounded(self.child.take().expect("running"));
        (status, started.elapsed())
    }

    /// Waits for the exit (after a signal, say), returning the status and how long it took.
    pub fn wait(mut self) -> (std::process::ExitStatus, Duration) {
        let started = Instant::now();
        let status = wait_bounded(self.child.take().expect("running"));
        (status, started.elapsed())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Spawns a command with stderr piped: every `listening <addr>` line it announces arrives on
/// the receiver, and every stderr line is kept.
pub fn spawn_announcing(
    command: &mut Command,
) -> (Child, Receiver<String>, Arc<Mutex<Vec<String>>>) {
    let (child, listening, log) = spawn_logging(command);
    let kept: Arc<Mutex<Vec<String>>> = Arc::default();
    let copy = kept.clone();
    std::thread::spawn(move || {
        let mut seen = 0;
        loop {
            let (lines, ended) = log.after(seen);
            seen += lines.len();
            copy.lock().unwrap().extend(lines);
            if ended {
                break;
            }
        }
    });
    (child, listening, kept)
}

/// The lines so far, and whether stderr ended.
type Kept = Mutex<(Vec<String>, bool)>;

/// Every stderr line of a process, kept, with waits for a line to come.
#[derive(Clone, Default)]
pub struct StderrLog(Arc<(Kept, Condvar)>);

impl StderrLog {
    fn push(&self, line: Option<String>) {
        let (lines, changed) = &*self.0;
        let mut lines = lines.lock().unwrap();
        match line {
            Some(line) => lines.0.push(line),
            None => lines.1 = true,
        }
        changed.notify_all();
    }

    /// The lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.0.0.lock().unwrap().0.clone()
    }

    /// The lines after the first `seen`, once there is one (or stderr ended, then `true`).
    fn after(&self, seen: usize) -> (Vec<String>, bool) {
        let (lines, changed) = &*self.0;
        let mut lines = lines.lock().unwrap();
        while lines.0.len() <= seen && !lines.1 {
            lines = changed.wait(lines).unwrap();
        }
        (lines.0[seen..].to_vec(), lines.1)
    }

    /// Waits (at most [`BOUND`]) for a line that satisfies `want`; returns it.
    pub fn wait_for(&self, what: &str, want: impl Fn(&str) -> bool) -> String {
        self.wait_for_explained(what, want, String::new)
    }

    /// [`wait_for`](Self::wait_for), adding `explain()` (what else the test knows, taken only
    /// on failure) to the panic message.
    pub fn wait_for_explained(
        &self,
        what: &str,
        want: impl Fn(&str) -> bool,
        explain: impl FnOnce() -> String,
    ) -> String {
        let deadline = Instant::now() + BOUND;
        let (lines, changed) = &*self.0;
        let mut guard = lines.lock().unwrap();
        loop {
            if let Some(line) = guard.0.iter().find(|l| want(l)) {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || guard.1 {
                let seen = guard.0.clone();
                // Not while holding the lock: the reader thread still takes it.
                drop(guard);
                panic!(
                    "no stderr line with {what} within {BOUND:?}: {seen:#?}{}",
                    explain()
                );
            }
            guard = changed.wait_timeout(guard, left).unwrap().0;
        }
    }
}

/// Spawns a command with stderr piped: every `listening <addr>` line it announces arrives on
/// the receiver, and every stderr line is kept in the log.
pub fn spawn_logging(command: &mut Command) -> (Child, Receiver<String>, StderrLog) {
    let mut child = command
        .stderr(Stdio::piped())
        .spawn()
        .expect("the connop binary starts");
    let (listening_tx, listening) = channel();
    let log = StderrLog::default();
    let kept = log.clone();
    let stderr = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(addr) = line.strip_prefix("listening ") {
                let _ = listening_tx.send(addr.to_owned());
            }
            kept.push(Some(line));
        }
        kept.push(None);
    });
    (child, listening, log)
}

/// Runs a command to its end with stdout and stderr captured, failing the test (and killing
/// the child) past the bound instead of hanging.
pub fn output_bounded(command: &mut Command) -> std::process::Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the command starts");
    let pipe = |mut p: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = p.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = pipe(Box::new(child.stdout.take().expect("stdout")));
    let stderr = pipe(Box::new(child.stderr.take().expect("stderr")));
    let status = wait_bounded(child);
    std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// Waits for a child's exit on a thread; past the bound the child is killed and the test
/// fails.
pub fn wait_bounded(mut child: Child) -> std::process::ExitStatus {
    let pid = child.id();
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    match rx.recv_timeout(BOUND) {
        Ok(status) => status.expect("wait"),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("the process did not exit within {BOUND:?}");
        }
    }
}

/// A GET with isahc (the user opening a link in a browser).
pub fn http_get(url: &str) -> u16 {
    use isahc::ReadResponseExt;
    let mut response = isahc::get(url).expect("the link answers");
    let _ = response.text();
    response.status().as_u16()
}

/// Opens a consent link and answers its form with `decision` (`approve` or `deny`), as a
/// person's browser would (docs/contract.md#consent-page); the status of the form's answer (a
/// loopback `returnTo` answers 303, which is not followed).
#[allow(dead_code)]
pub fn decide_link(url: &str, decision: &str) -> u16 {
    use isahc::ReadResponseExt;
    let page = isahc::get(url).expect("the link answers").text().unwrap();
    let marker = r#"<input type="hidden" name="nonce" value=""#;
    let start = page
        .find(marker)
        .unwrap_or_else(|| panic!("no consent form at {url}: {page}"))
        + marker.len();
    let nonce = page[start..].split('"').next().unwrap();
    let request = isahc::Request::post(url)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("nonce={nonce}&decision={decision}"))
        .unwrap();
    let mut response = isahc::send(request).expect("the form answers");
    let _ = response.text();
    response.status().as_u16()
}

/// A size field of `/proc/<pid>/status` (`VmRSS`, `VmHWM`, …) in KiB.
pub fn proc_kib(pid: u32, field: &str) -> u64 {
    connop_fixtures::measure::proc_status_kib(Some(pid), field)
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// How many file descriptors the process has open.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc fd")
        .count()
}

/// The TCP states (`/proc/net/tcp` codes, e.g. `01` established, `08` close-wait) of every
/// IPv4 socket whose local port is `port`, listening sockets excluded: on loopback these are
/// the server's side of each accepted connection that the server has not closed yet.
pub fn accepted_sockets(port: u16) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields.get(1)?.rsplit_once(':')?.1;
            let state = *fields.get(3)?;
            (u16::from_str_radix(local_port, 16).ok()? == port && state != "0A")
                .then(|| state.to_owned())
        })
        .collect()
}
