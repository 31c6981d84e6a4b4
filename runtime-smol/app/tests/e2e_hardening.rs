//! docs/operating.md#limits against the real binary: listeners that outlive accept errors, a client
//! that never reads, notifications, unix sockets in use, non-loopback addresses, body caps,
//! percent-decoded paths, agent process groups, the lease lock's wait, private files.
//! Waits are channel receives, event streams and bounded polls of `/proc`; nothing sleeps to
//! synchronize.

mod support;

use isahc::ReadResponseExt;
use isahc::config::Configurable;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{BOUND, Client, Gateway, Lines, connop, output_bounded, wait_bounded};

/// A fresh folder under the temp dir (created).
fn scratch(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "connop-hard-{what}-{}",
        connop_app::sync::random_hex(6)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The binary with a hosted tool gateway nobody serves (no embedded one) and `home`.
fn offline(home: &Path) -> Command {
    let mut command = connop();
    command
        .env("CONNOP_HOME", home)
        .env("CONNECTOR_GATEWAY_URL", "http://127.0.0.1:9")
        .env("CONNECTOR_GATEWAY_TOKEN", "unused");
    command
}

/// Waits until `done` holds, looking every 10 ms, for at most `bound`.
fn wait_until(what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {bound:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a process with this pid is still there (a zombie is gone).
fn process_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        !matches!(state, Some("Z" | "X"))
    })
}

/// One HTTP request; the status and the body as JSON (`null` when it is not JSON).
fn http(method: &str, url: &str, key: Option<&str>, body: impl Into<isahc::Body>) -> (u16, Value) {
    let mut builder = isahc::Request::builder()
        .method(method)
        .uri(url)
        .header("Content-Type", "application/json");
    if let Some(key) = key {
        builder = builder.header("Authorization", format!("Bearer {key}"));
    }
    let mut response = isahc::send(builder.body(body).unwrap()).expect("the API answers");
    let text = response.text().unwrap_or_default();
    (
        response.status().as_u16(),
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

/// A JSON-RPC client on a unix socket.
fn unix_client(path: &str) -> Client<UnixStream> {
    let stream = UnixStream::connect(path).expect("the socket answers");
    let lines = Lines::spawn_reader(stream.try_clone().unwrap());
    Client::new(stream, lines)
}

/// A JSON-RPC client on a TCP address (`127.0.0.1:PORT`).
fn tcp_client(addr: &str) -> Client<std::net::TcpStream> {
    let stream = std::net::TcpStream::connect(addr).expect("the listener answers");
    let lines = Lines::spawn_reader(stream.try_clone().unwrap());
    Client::new(stream, lines)
}

#[test]
fn every_listener_keeps_accepting_after_running_out_of_file_descriptors() {
    let dir = scratch("fds");
    let sock = dir.join("g.sock");
    // About 30 descriptors are free once the gateway is up.
    let mut command = Command::new("sh");
    command
        .args(["-c", r#"ulimit -n 64 && exec "$0" "$@""#])
        .arg(env!("CARGO_BIN_EXE_connop"))
        .env("CONNOP_HOME", dir.join("home"))
        .env("CONNECTOR_GATEWAY_URL", "http://127.0.0.1:9")
        .env("CONNECTOR_GATEWAY_TOKEN", "unused");
    let mut gw = Gateway::start_command(
        command,
        &[
            "--listen",
            "tcp:127.0.0.1:0",
            "--listen",
            &format!("unix:{}", sock.display()),
            "--http",
            "127.0.0.1:0",
        ],
    );
    let tcp = gw.listening();
    let tcp = tcp.strip_prefix("tcp://").unwrap().to_owned();
    let _unix = gw.listening();
    let api = gw.listening();
    // More connections than descriptors: the kernel queues what the gateway cannot accept.
    let held: Vec<std::net::TcpStream> = (0..80)
        .map(|_| std::net::TcpStream::connect(&tcp).unwrap())
        .collect();
    let pid = gw.pid();
    wait_until("the gateway out of descriptors", BOUND, || {
        support::open_fds(pid) >= 63
    });
    drop(held);
    // The gateway frees their descriptors; every listener serves again.
    let mut over_tcp = tcp_client(&tcp);
    let created = over_tcp.call("session.create", json!({"session_id": "after-tcp"}));
    assert_eq!(created["result"]["session_id"], "after-tcp", "{created}");
    let mut over_unix = unix_client(sock.to_str().unwrap());
    let created = over_unix.call("session.create", json!({"session_id": "after-unix"}));
    assert_eq!(created["result"]["session_id"], "after-unix", "{created}");
    let (status, body) = http("GET", &format!("{api}/health"), None, ());
    assert_eq!((status, body), (200, json!({"status": "ok"})));
    gw.stderr_line("accept failed", |l| l.contains("accept failed"));
    gw.stderr_line("accepting again", |l| l.contains("accepting again"));
    assert!(gw.is_running());
}

#[test]
fn a_client_that_never_reads_is_closed_past_the_output_bound_and_its_operation_settles() {
    let dir = scratch("flood");
    let sock = dir.join("g.sock");
    let sock = sock.to_str().unwrap().to_owned();
    let gw = Gateway::start(&["--listen", &format!("unix:{sock}")]);
    let _ = gw.listening(); // the embedded tool gateway
    let _ = gw.listening();
    let baseline = support::proc_kib(gw.pid(), "VmRSS");
    let mut stream = UnixStream::connect(&sock).unwrap();
    // A session whose operation waits on the card, then requests whose answers (about
    // 130 bytes each, some 45 MiB in all) are never read.
    let open = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "session.create",
               "params": {"session_id": "flood", "session_key": "k-flood", "source": "desktop"}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "connectors.manage",
               "params": {"session_id": "flood", "args": {"action": "connect", "connectors": ["gmail"]}}}),
    ];
    for line in open {
        stream.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
    // Read until the card shows (the operation is open), then never again.
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    while !line.contains("connection.request") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the card comes");
    }
    // Each answer echoes its request's 8 KB id: some 32 MiB of answers in all.
    let request = json!({"jsonrpc": "2.0", "id": "i".repeat(8000),
                         "method": "connectors.operation.status",
                         "params": {"session_id": "flood", "op_id": "000000000000"}})
    .to_string()
        + "\n";
    let batch = request.repeat(100);
    let writer = std::thread::spawn(move || {
        let mut sent = 0usize;
        while sent < 40 && stream.write_all(batch.as_bytes()).is_ok() {
            sent += 1;
        }
        sent
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(writer.join().unwrap()));
    let batches = rx.recv_timeout(BOUND).expect("the writer is done");
    assert!(
        batches < 40,
        "the gateway stopped reading ({batches} of 40 batches)"
    );
    let closing = gw.stderr_line("the bound's log line", |l| {
        l.contains("transport output over its limit")
    });
    assert!(closing.contains("limit_bytes=16777216"), "{closing}");
    gw.stderr_line("the transport closed with its reason", |l| {
        l.contains("transport closed") && l.contains("queued output over its limit")
    });
    // Its session closed: the operation settled `interrupt`.
    let settled = gw.stderr_line("the operation settled", |l| l.contains("operation settled"));
    assert!(settled.contains(r#"reason="interrupt""#), "{settled}");
    let peak = support::proc_kib(gw.pid(), "VmHWM");
    eprintln!("peak RSS {peak} KiB from {baseline} KiB");
    assert!(
        peak < baseline + 64 * 1024,
        "peak RSS {peak} KiB from {baseline} KiB"
    );
    // The key is free again, and the gateway serves others.
    let mut again = unix_client(&sock);
    let created = again.call(
        "session.create",
        json!({"session_id": "next", "session_key": "k-flood"}),
    );
    assert_eq!(created["result"]["session_key"], "k-flood", "{created}");
}

#[test]
fn notifications_are_carried_out_unanswered_and_only_jsonrpc_2_0_is_served() {
    let mut gw = Gateway::start(&[]);
    let c = &mut gw.client;
    c.raw(r#"{"jsonrpc": "2.0", "method": "session.create", "params": {"session_id": "n1"}}"#);
    c.raw(r#"{"jsonrpc": "2.0", "method": "no.such.method"}"#);
    c.raw(r#"{"jsonrpc": "2.0", "method": "session.create", "params": [1]}"#);
    // The notification ran: its session exists.
    let again = c.call("session.create", json!({"session_id": "n1"}));
    assert_eq!(
        again["error"]["message"], "session already exists",
        "{again}"
    );
    // Answers go out in the order the lines came: none came for the notifications.
    assert!(!c.lines.answered_null(), "a notification was answered");
    c.raw(r#"{"jsonrpc": "1.0", "id": 77, "method": "session.create"}"#);
    let refused = c.lines.answer(77);
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
}

#[test]
fn a_unix_socket_another_process_answers_on_is_refused_and_a_stale_one_replaced() {
    let dir = scratch("sock");
    let sock = dir.join("live.sock");
    let addr = format!("unix:{}", sock.display());
    let first = Gateway::start(&["--listen", &addr]);
    let _ = first.listening();
    let _ = first.listening();
    let second = output_bounded(
        connop()
            .args(["gateway", "--listen", &addr])
            .stdin(Stdio::null()),
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("address in use"), "{stderr}");
    // The first still owns it.
    let mut client = unix_client(sock.to_str().unwrap());
    let created = client.call("session.create", json!({"session_id": "still-here"}));
    assert_eq!(created["result"]["session_id"], "still-here");

    // A socket file nobody answers on (its process died) is replaced.
    let stale = dir.join("stale.sock");
    drop(UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let replaced = Gateway::start(&["--listen", &format!("unix:{}", stale.display())]);
    let _ = replaced.listening();
    assert_eq!(replaced.listening(), format!("unix://{}", stale.display()));
    let mut client = unix_client(stale.to_str().unwrap());
    let created = client.call("session.create", json!({"session_id": "replaced"}));
    assert_eq!(created["result"]["session_id"], "replaced");

    // A gateway that ends cleanly takes its socket file with it.
    drop(client);
    let kill = Command::new("kill")
        .args(["-TERM", &replaced.pid().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let (status, _) = replaced.wait();
    assert!(status.success(), "{status:?}");
    assert!(!stale.exists(), "the socket file outlived its gateway");
}

#[test]
fn non_loopback_addresses_are_refused_without_allow_remote() {
    let home = scratch("remote");
    let refused = |args: &[&str], what: &str| {
        let out = output_bounded(
            offline(&home)
                .arg("gateway")
                .args(args)
                .stdin(Stdio::null()),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(what) && stderr.contains("--allow-remote"),
            "{stderr}"
        );
    };
    refused(&["--listen", "tcp:0.0.0.0:0"], "no authentication");
    refused(&["--listen", "tcp:[::]:0"], "no authentication");
    refused(&["--http", "0.0.0.0:0"], "no --api-key");
    // A keyless API is anyone's who reaches it: loopback only, --allow-remote or not.
    refused(&["--http", "0.0.0.0:0", "--allow-remote"], "no --api-key");
    // With a key, or when allowed, they start.
    for args in [
        &["--http", "0.0.0.0:0", "--api-key", "k"][..],
        &["--listen", "tcp:0.0.0.0:0", "--allow-remote"][..],
    ] {
        let gw = Gateway::start_command(offline(&home), args);
        assert!(gw.listening().contains("0.0.0.0:"), "{args:?}");
    }
    // The simulated tool gateway's /sim controls are guarded by its token only.
    let out = output_bounded(
        offline(&home)
            .args(["sim-gateway", "--listen", "0.0.0.0:0"])
            .stdin(Stdio::null()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no --token") && stderr.contains("--allow-remote"),
        "{stderr}"
    );
    for args in [
        &["sim-gateway", "--listen", "0.0.0.0:0", "--token", "t"][..],
        &["sim-gateway", "--listen", "0.0.0.0:0", "--allow-remote"][..],
    ] {
        let mut command = offline(&home);
        command.args(args).stdin(Stdio::null());
        let (mut child, listening, _log) = support::spawn_logging(&mut command);
        let url = listening.recv_timeout(BOUND).expect("a listening line");
        assert!(url.contains("0.0.0.0:"), "{args:?}: {url}");
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn request_bodies_past_the_cap_are_refused_with_413() {
    let home = scratch("body");
    let gw = Gateway::start_command(offline(&home), &["--http", "127.0.0.1:0"]);
    let url = gw.listening();
    let input = "x".repeat(2 << 20);
    let body = json!({"input": input}).to_string();
    let (status, answer) = http("POST", &format!("{url}/v1/runs"), None, body.clone());
    assert_eq!(status, 413, "{answer}");
    assert_eq!(answer["error"]["code"], "body_too_large");
    // Without a Content-Length: the cap holds as the body arrives.
    let addr = url.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(
            format!(
                "POST /v1/runs HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
                 Transfer-Encoding: chunked\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 64 << 10, "x".repeat(64 << 10));
    for _ in 0..24 {
        if stream.write_all(chunk.as_bytes()).is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n");
    stream.set_read_timeout(Some(BOUND)).unwrap();
    let mut status_line = String::new();
    BufReader::new(stream).read_line(&mut status_line).unwrap();
    assert!(status_line.starts_with("HTTP/1.1 413"), "{status_line}");
    // A raised cap lets the same body through.
    let raised = Gateway::start_command(
        offline(&scratch("body2")),
        &["--http", "127.0.0.1:0", "--max-body", "4194304"],
    );
    let url = raised.listening();
    let (status, answer) = http("POST", &format!("{url}/v1/runs"), None, body);
    assert_eq!(status, 202, "{answer}");
}

#[test]
fn path_segments_are_percent_decoded_so_peer_dm_reaches_any_bot_chat() {
    let home = scratch("paths");
    let gw = Gateway::start_command(offline(&home), &["--http", "127.0.0.1:0"]);
    let url = gw.listening();
    let id = "bot chat: a/b é?";
    let (status, _) = http(
        "POST",
        &format!("{url}/api/sessions"),
        None,
        json!({"session_id": id, "title": "Bot Chat"}).to_string(),
    );
    assert_eq!(status, 201);
    let encoded = "bot%20chat%3A%20a%2Fb%20%C3%A9%3F";
    let (status, answer) = http(
        "POST",
        &format!("{url}/api/sessions/{encoded}/chat"),
        None,
        json!({"message": "hi"}).to_string(),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["session_id"], id);
    let out = output_bounded(connop().args([
        "peer",
        "dm",
        "mini",
        "hello there",
        "--url",
        &url,
        "--json",
    ]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&printed["session_id"], &printed["reply"]),
        (&json!(id), &json!("hello there"))
    );
    let (status, _) = http("POST", &format!("{url}/api/sessions/%FF/chat"), None, "{}");
    assert_eq!(status, 400, "a path that is not UTF-8");
}

/// `--http` with `--agent-cmd CMD`, and where runs are read.
struct Runs {
    gw: Gateway,
    url: String,
}

impl Runs {
    fn start(agent: &str) -> Self {
        let gw = Gateway::start_command(
            offline(&scratch("agent")),
            &["--http", "127.0.0.1:0", "--agent-cmd", agent],
        );
        let url = gw.listening();
        Runs { gw, url }
    }

    fn run(&self, input: &str) -> String {
        let (status, answer) = http(
            "POST",
            &format!("{}/v1/runs", self.url),
            None,
            json!({"input": input}).to_string(),
        );
        assert_eq!(status, 202, "{answer}");
        answer["run_id"].as_str().unwrap().to_owned()
    }

    /// The run's events from the start until the terminal one (the stream ends there).
    fn events(&self, run_id: &str) -> Vec<(String, Value)> {
        let url = format!("{}/v1/runs/{run_id}/events", self.url);
        let request = isahc::Request::get(url)
            .timeout(BOUND + Duration::from_secs(5))
            .body(())
            .unwrap();
        let response = isahc::send(request).unwrap();
        let mut events = Vec::new();
        let mut name = String::new();
        for line in BufReader::new(response.into_body()).lines() {
            let line = line.expect("the stream ends after its terminal event");
            if let Some(event) = line.strip_prefix("event: ") {
                name = event.to_owned();
            } else if let Some(data) = line.strip_prefix("data: ") {
                events.push((name.clone(), serde_json::from_str(data).unwrap()));
            }
        }
        events
    }

    fn terminal(&self, run_id: &str) -> (String, Value) {
        self.events(run_id).pop().expect("a terminal event")
    }

    fn stop(&self, run_id: &str) {
        let (status, _) = http(
            "POST",
            &format!("{}/v1/runs/{run_id}/stop", self.url),
            None,
            (),
        );
        assert_eq!(status, 200);
    }
}

/// Reads the pid an agent command wrote to `file`, once it is there.
fn pid_in(file: &Path) -> u32 {
    let mut pid = None;
    wait_until("the agent's child pid", BOUND, || {
        pid = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok());
        pid.is_some()
    });
    pid.unwrap_or_default()
}

/// An agent command whose child ignores SIGTERM and writes its pid to `file` (the pid is
/// written once the child exists), then waits.
fn stubborn_child(file: &Path) -> String {
    format!(
        "(trap '' TERM; exec sleep 300) & echo $! > {tmp} && mv {tmp} {file}; sleep 300",
        tmp = format!("{}.tmp", file.display()),
        file = file.display()
    )
}

#[test]
fn a_stopped_run_ends_its_whole_process_group_even_a_child_that_ignores_sigterm() {
    let dir = scratch("stop");
    let pidfile = dir.join("child.pid");
    let runs = Runs::start(&stubborn_child(&pidfile));
    let id = runs.run("go");
    let child = pid_in(&pidfile);
    assert!(process_alive(child));
    runs.stop(&id);
    assert_eq!(runs.terminal(&id).0, "run.cancelled");
    wait_until("the child is gone", BOUND, || !process_alive(child));
    let line = runs.gw.stderr_line("the stop's log line", |l| {
        l.contains("agent command stopped with its turn")
    });
    assert!(line.contains("SIGKILL"), "{line}");
}

#[test]
fn a_failed_run_ends_what_its_command_left_behind() {
    let dir = scratch("fail");
    let pidfile = dir.join("child.pid");
    let runs = Runs::start(&format!(
        "sleep 300 & echo $! > {0}.tmp && mv {0}.tmp {0}; echo broke >&2; exit 3",
        pidfile.display()
    ));
    let id = runs.run("go");
    let (event, data) = runs.terminal(&id);
    assert_eq!(
        (event.as_str(), &data["error"]),
        ("run.failed", &json!("broke"))
    );
    let child = pid_in(&pidfile);
    wait_until("the child is gone", BOUND, || !process_alive(child));
    runs.gw.stderr_line("the exit's log line", |l| {
        l.contains("agent command exited") && l.contains("code=3")
    });
}

#[test]
fn a_chat_whose_caller_goes_away_ends_its_command_and_says_so() {
    // The chat answers in the request: a caller that hangs up drops the turn, and with it
    // the command's process group (logged like every other end of an agent command).
    let dir = scratch("hangup");
    let pidfile = dir.join("child.pid");
    let runs = Runs::start(&stubborn_child(&pidfile));
    let (status, _) = http(
        "POST",
        &format!("{}/api/sessions", runs.url),
        None,
        json!({"session_id": "hangup"}).to_string(),
    );
    assert_eq!(status, 201);
    let addr = runs.url.trim_start_matches("http://").to_owned();
    let body = json!({"message": "wait"}).to_string();
    let mut caller = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        caller,
        "POST /api/sessions/hangup/chat HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let child = pid_in(&pidfile);
    drop(caller);
    wait_until("the child is gone", BOUND, || !process_alive(child));
    let line = runs.gw.stderr_line("the drop's log line", |l| {
        l.contains("agent command ended: its turn was dropped")
    });
    assert!(line.contains("SIGTERM"), "{line}");
    runs.gw.stderr_line("the SIGKILL's log line", |l| {
        l.contains("agent command ended: it outlived SIGTERM")
    });
}

#[test]
fn shutdown_ends_every_agent_process_group() {
    let dir = scratch("shutdown");
    let pidfile = dir.join("child.pid");
    let runs = Runs::start(&stubborn_child(&pidfile));
    let id = runs.run("go");
    let child = pid_in(&pidfile);
    let Runs { gw, url } = runs;
    assert!(
        Command::new("kill")
            .args(["-TERM", &gw.pid().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let (status, took) = gw.wait();
    assert_eq!(status.code(), Some(0));
    assert!(took < Duration::from_secs(3), "exited after {took:?}");
    wait_until("the child is gone", BOUND, || !process_alive(child));
    let _ = (id, url);
}

#[test]
fn a_large_input_to_a_command_that_writes_before_it_reads_does_not_deadlock() {
    // 200 KB out before a byte is read; 100 KB in: both past a pipe's 64 KiB.
    let runs = Runs::start("head -c 200000 /dev/zero | tr '\\0' x; cat > /dev/null");
    let id = runs.run(&"y".repeat(100_000));
    let (event, data) = runs.terminal(&id);
    assert_eq!(event, "run.completed");
    assert_eq!(data["output"].as_str().map(str::len), Some(200_000));
}

#[test]
fn an_agent_writing_more_than_16_mib_fails_the_run() {
    let runs = Runs::start("head -c 17000000 /dev/zero | tr '\\0' x");
    let id = runs.run("go");
    let (event, data) = runs.terminal(&id);
    assert_eq!(
        (event.as_str(), &data["error"]),
        ("run.failed", &json!("agent output exceeded 16 MiB"))
    );
}

#[test]
fn the_lease_lock_is_waited_for_at_most_5_seconds() {
    let home = scratch("lock");
    let first = output_bounded(offline(&home).args(["lease", "list"]));
    assert!(first.status.success());
    let lock = std::fs::File::open(home.join("runtime").join("active_sessions.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let started = Instant::now();
    let child = offline(&home)
        .args(["lease", "list"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    let mut child = child;
    let mut pipe = child.stderr.take().unwrap();
    let status = wait_bounded(child);
    let took = started.elapsed();
    pipe.read_to_string(&mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("SESSION_COORDINATION_UNAVAILABLE")
            && stderr.contains("not released within 5 s"),
        "{stderr}"
    );
    assert!(
        took >= Duration::from_millis(4900) && took < Duration::from_secs(8),
        "{took:?}"
    );
}

#[test]
fn connop_home_and_the_lease_files_are_private_whatever_the_umask() {
    for umask in ["022", "0277", "000"] {
        let base = scratch("modes");
        let home = base.join("home");
        let mut child = Command::new("sh")
            .args(["-c", &format!(r#"umask {umask} && exec "$0" "$@""#)])
            .arg(env!("CARGO_BIN_EXE_connop"))
            .args(["lease", "hold", "s1"])
            .env("CONNOP_HOME", &home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("\"session_id\":\"s1\""), "{line}");
        let mode = |p: PathBuf| std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        let runtime = home.join("runtime");
        assert_eq!(
            (
                mode(home.clone()),
                mode(runtime.clone()),
                mode(runtime.join("active_sessions.lock")),
                mode(runtime.join("active_sessions.json")),
            ),
            (0o700, 0o700, 0o600, 0o600),
            "umask {umask}"
        );
        drop(child.stdin.take());
        assert!(wait_bounded(child).success());
    }
}
