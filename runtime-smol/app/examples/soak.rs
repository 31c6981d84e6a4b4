//! Soak test of the release `connop gateway` binary (docs/operating.md#limits): long uptime under
//! the load a month next to other users' processes brings, with RSS and open file descriptors
//! sampled each minute.
//!
//! `cargo run --release -p connop-app --example soak -- [SECS]` (default 600). It builds the
//! release binary if needed, starts `connop gateway --listen unix:… --http 127.0.0.1:0
//! --agent-cmd …` on the embedded simulated tool gateway, and for SECS seconds runs:
//!
//! - 100 JSON-RPC sessions cycling connect → card → answer (skip, Continue) → settle, one in
//!   ten on a listed connector (its account is minted and read), the rest on a name the
//!   gateway does not list (no account is made, so the simulated gateway stays the same size);
//! - 20 transports that open an operation and vanish (the operation must settle `interrupt`);
//! - a client that never reads, flooding requests until its transport is closed past the
//!   output bound, then coming back;
//! - 500 runs a minute through the agent command, one in ten stopped at once, a third followed
//!   on their event stream to the end and a fifth dropped after the first event; the agent
//!   leaves a child behind one run in four (the run's end must take it).
//!
//! Then it checks that every operation settled, every run is terminal, no agent process is
//! left, and the gateway exits 0 on SIGTERM; and prints the samples.

use isahc::ReadResponseExt;
use isahc::config::Configurable;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SESSIONS: usize = 100;
const VANISHING: usize = 20;
const RUNS_PER_MINUTE: u64 = 500;
const READ_BOUND: Duration = Duration::from_secs(60);

/// What the load did, counted as it goes.
#[derive(Default)]
struct Counts {
    ops_started: AtomicU64,
    ops_settled: AtomicU64,
    ops_failed: AtomicU64,
    vanished: AtomicU64,
    flood_closes: AtomicU64,
    runs_started: AtomicU64,
    runs_stopped: AtomicU64,
    streams_followed: AtomicU64,
    streams_dropped: AtomicU64,
    errors: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A fresh folder for the gateway's home, socket and agent script.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("connop-soak-{}", connop_app::sync::random_hex(6)));
    std::fs::create_dir_all(&dir).expect("a scratch folder");
    dir
}

/// The release binary beside this example, built first if needed.
fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the example's path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/examples");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(cargo)
        .args(["build", "--release", "-p", "connop-app", "--bin", "connop"])
        .status()
        .expect("cargo runs");
    assert!(built.success(), "the connop binary builds");
    dir.join("connop")
}

/// The agent command: reads the turn, leaves a child behind one run in four, answers after
/// up to 0.3 s.
fn agent_script(dir: &Path) -> PathBuf {
    let script = dir.join("agent.sh");
    std::fs::write(
        &script,
        "cat > /dev/null\n\
         if [ $(( $$ % 4 )) -eq 0 ]; then sh -c 'sleep 60' soak-agent-child & fi\n\
         sleep 0.$(( $$ % 4 ))\n\
         echo \"ok $$\"\n",
    )
    .expect("the agent script");
    script
}

/// The processes whose command line names `marker` (agent commands and their children), but
/// `gateway`, whose own `--agent-cmd` names it too.
fn processes_naming(marker: &str, gateway: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != gateway)
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                == Some("Z");
            !zombie
                && String::from_utf8_lossy(&cmdline)
                    .replace('\0', " ")
                    .contains(marker)
        })
        .collect()
}

fn status_kib(pid: u32, field: &str) -> u64 {
    connop_fixtures::measure::proc_status_kib(Some(pid), field).unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The gateway process and what it announced.
struct Gateway {
    child: Child,
    http: String,
    socket: String,
    key: String,
}

/// `CONNOP_SOAK_HEAPTRACK=FILE` records the gateway's heap with heaptrack's preload library
/// into FILE (raw; read it with `heaptrack_interpret < FILE | gzip > FILE.gz` and
/// `heaptrack_print FILE.gz`), to find what grows.
fn heap_profile() -> Vec<(&'static str, String)> {
    match std::env::var("CONNOP_SOAK_HEAPTRACK") {
        Ok(file) => vec![
            (
                "LD_PRELOAD",
                "/usr/lib/heaptrack/libheaptrack_preload.so".to_owned(),
            ),
            ("DUMP_HEAPTRACK_OUTPUT", file),
        ],
        Err(_) => Vec::new(),
    }
}

fn start_gateway(binary: &Path, dir: &Path) -> Gateway {
    let socket = dir.join("gateway.sock").display().to_string();
    let key = connop_app::sync::random_hex(16);
    let agent = format!("sh {}", agent_script(dir).display());
    let mut child = Command::new(binary)
        .args(["gateway", "--listen", &format!("unix:{socket}")])
        .args([
            "--http",
            "127.0.0.1:0",
            "--api-key",
            &key,
            "--agent-cmd",
            &agent,
        ])
        .env("CONNOP_HOME", dir.join("home"))
        .env("RUST_LOG", "warn")
        .envs(heap_profile())
        .env_remove("CONNECTOR_GATEWAY_URL")
        .env_remove("CONNECTOR_GATEWAY_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the gateway starts");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut warnings = 0u64;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("listening ") {
                let _ = tx.send(addr.to_owned());
            } else if warnings < 20 {
                // The first warnings, for the record (the flood's closes among them).
                warnings += 1;
                eprintln!("gateway: {line}");
            }
        }
    });
    let mut http = String::new();
    for _ in 0..3 {
        let addr = rx.recv_timeout(READ_BOUND).expect("a listening line");
        if addr.starts_with("http://") {
            http = addr; // the last one: the simulated gateway comes first
        }
    }
    Gateway {
        child,
        http,
        socket,
        key,
    }
}

// ------------------------------------------------------------------ JSON-RPC

/// A blocking JSON-RPC connection that reads its own lines.
struct Rpc {
    stream: UnixStream,
    lines: BufReader<UnixStream>,
    next_id: u64,
}

impl Rpc {
    fn connect(socket: &str) -> std::io::Result<Self> {
        let stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(READ_BOUND))?;
        stream.set_write_timeout(Some(READ_BOUND))?;
        let lines = BufReader::new(stream.try_clone()?);
        Ok(Rpc {
            stream,
            lines,
            next_id: 1,
        })
    }

    fn send(&mut self, method: &str, params: Value) -> std::io::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.stream.write_all(format!("{line}\n").as_bytes())?;
        Ok(id)
    }

    /// Reads lines until `done` says a line is the one; returns it.
    fn until(&mut self, mut done: impl FnMut(&Value) -> bool) -> std::io::Result<Value> {
        loop {
            let mut line = String::new();
            if self.lines.read_line(&mut line)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if done(&value) {
                return Ok(value);
            }
        }
    }

    fn answer(&mut self, id: u64) -> std::io::Result<Value> {
        self.until(|v| v["id"] == id)
    }
}

/// A connector for the next operation: one in ten is listed (its account is minted and read).
fn connector(cycle: u64, session: usize) -> &'static str {
    if (cycle + session as u64) % 10 == 0 {
        ["gmail", "notion", "slack", "github"][session % 4]
    } else {
        "soak-unlisted"
    }
}

/// One session cycling connect → card → answer → settle until `stop`.
fn session_loop(socket: &str, n: usize, stop: &AtomicBool, counts: &Counts) -> std::io::Result<()> {
    let mut rpc = Rpc::connect(socket)?;
    let session = format!("soak-{n}");
    let id = rpc.send(
        "session.create",
        json!({"session_id": session, "source": "desktop"}),
    )?;
    rpc.answer(id)?;
    let mut cycle = 0u64;
    while !stop.load(Ordering::Relaxed) {
        cycle += 1;
        let name = connector(cycle, n);
        let manage = rpc.send(
            "connectors.manage",
            json!({"session_id": session, "args": {"action": "connect", "connectors": [name]}}),
        )?;
        bump(&counts.ops_started);
        let card =
            rpc.until(|v| v["params"]["type"] == "connection.request" || v["id"] == manage)?;
        if card["id"] == manage {
            bump(&counts.ops_failed); // settled or failed in prepare: no card
            continue;
        }
        let op_id = card["params"]["payload"]["op_id"].clone();
        let respond = rpc.send(
            "connection.respond",
            json!({"session_id": session, "op_id": op_id,
                   "result": {"targets": [{"name": name, "status": "skipped"}], "settled_by": "continue"}}),
        )?;
        let mut answered = (false, false);
        while answered != (true, true) {
            let line = rpc.until(|v| v["id"] == respond || v["id"] == manage)?;
            if line["id"] == manage {
                if line["result"]["settled_by"].is_string() {
                    bump(&counts.ops_settled);
                } else {
                    bump(&counts.ops_failed);
                }
                answered.0 = true;
            } else {
                answered.1 = true;
            }
        }
        std::thread::sleep(Duration::from_millis(
            200 + (cycle * 37 + n as u64 * 11) % 400,
        ));
    }
    Ok(())
}

/// A transport that opens an operation and vanishes, again and again.
fn vanishing_loop(
    socket: &str,
    n: usize,
    stop: &AtomicBool,
    counts: &Counts,
) -> std::io::Result<()> {
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        let mut rpc = Rpc::connect(socket)?;
        let session = format!("vanish-{n}-{round}");
        let id = rpc.send(
            "session.create",
            json!({"session_id": session, "source": "desktop"}),
        )?;
        rpc.answer(id)?;
        let manage = rpc.send(
            "connectors.manage",
            json!({"session_id": session, "args": {"action": "connect", "connectors": ["soak-unlisted"]}}),
        )?;
        bump(&counts.ops_started);
        rpc.until(|v| v["params"]["type"] == "connection.request" || v["id"] == manage)?;
        drop(rpc); // gone, with its operation open
        bump(&counts.vanished);
        std::thread::sleep(Duration::from_millis(
            300 + (round * 53 + n as u64 * 7) % 700,
        ));
    }
    Ok(())
}

/// A client that floods requests and never reads, until the gateway closes it; then again.
fn flood_loop(socket: &str, stop: &AtomicBool, counts: &Counts) {
    let request = json!({"jsonrpc": "2.0", "id": "f".repeat(2000),
                         "method": "connectors.operation.status",
                         "params": {"session_id": "flood", "op_id": "000000000000"}})
    .to_string()
        + "\n";
    let batch = request.repeat(200);
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = UnixStream::connect(socket) else {
            return;
        };
        let _ = stream.set_write_timeout(Some(READ_BOUND));
        let create = json!({"jsonrpc": "2.0", "id": 1, "method": "session.create",
                            "params": {"session_id": "flood"}});
        let _ = stream.write_all(format!("{create}\n").as_bytes());
        while !stop.load(Ordering::Relaxed) && stream.write_all(batch.as_bytes()).is_ok() {}
        if !stop.load(Ordering::Relaxed) {
            bump(&counts.flood_closes);
        }
        drop(stream);
        std::thread::sleep(Duration::from_secs(5));
    }
}

// ------------------------------------------------------------------ runs

fn http(
    method: &str,
    url: &str,
    key: &str,
    body: Option<Value>,
) -> Result<(u16, Value), isahc::Error> {
    let request = isahc::Request::builder()
        .method(method)
        .uri(url)
        .header("Authorization", format!("Bearer {key}"))
        .header("Content-Type", "application/json")
        .timeout(READ_BOUND)
        .body(body.map(|b| b.to_string()).unwrap_or_default())
        .map_err(isahc::Error::from)?;
    let mut response = isahc::send(request)?;
    let text = response.text().unwrap_or_default();
    Ok((
        response.status().as_u16(),
        serde_json::from_str(&text).unwrap_or(Value::Null),
    ))
}

/// Follows a run's event stream: to its end, or only to its first event.
fn follow(gw: &Gateway, run_id: &str, to_the_end: bool) -> bool {
    let request = isahc::Request::get(format!("{}/v1/runs/{run_id}/events", gw.http))
        .header("Authorization", format!("Bearer {}", gw.key))
        .timeout(READ_BOUND)
        .body(())
        .map_err(isahc::Error::from);
    let Ok(response) = request.and_then(isahc::send) else {
        return false;
    };
    let mut events = 0;
    for line in BufReader::new(response.into_body()).lines() {
        let Ok(line) = line else { return false };
        if line.starts_with("data: ") {
            events += 1;
            if !to_the_end {
                return true; // dropped mid-stream
            }
        }
    }
    events > 0
}

/// Starts runs at RUNS_PER_MINUTE across `workers` threads; returns every run id.
fn runs_loop(
    gw: &Gateway,
    worker: u64,
    workers: u64,
    stop: &AtomicBool,
    counts: &Counts,
    ids: &Mutex<Vec<String>>,
) {
    let every = Duration::from_secs_f64(60.0 * workers as f64 / RUNS_PER_MINUTE as f64);
    let mut next = Instant::now() + every.mul_f64(worker as f64 / workers as f64);
    let mut n = worker;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        next += every;
        n += workers;
        let started = http(
            "POST",
            &format!("{}/v1/runs", gw.http),
            &gw.key,
            Some(
                json!({"input": format!("turn {n}"), "session_id": format!("soak-runs-{}", n % 50)}),
            ),
        );
        let run_id = match started {
            Ok((202, answer)) => answer["run_id"].as_str().unwrap_or_default().to_owned(),
            _ => {
                bump(&counts.errors);
                continue;
            }
        };
        bump(&counts.runs_started);
        ids.lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(run_id.clone());
        match n % 30 {
            0..=2 => {
                let stopped = http(
                    "POST",
                    &format!("{}/v1/runs/{run_id}/stop", gw.http),
                    &gw.key,
                    None,
                );
                if stopped.is_ok() {
                    bump(&counts.runs_stopped);
                }
            }
            3..=18 => {
                // A third to the end, a fifth dropped after the first event.
                let to_the_end = n % 30 <= 12;
                let counter = if to_the_end {
                    &counts.streams_followed
                } else {
                    &counts.streams_dropped
                };
                if follow(gw, &run_id, to_the_end) {
                    bump(counter);
                }
            }
            _ => {}
        }
    }
}

// ------------------------------------------------------------------ the soak

struct Sample {
    minute: u64,
    rss_kib: u64,
    fds: usize,
    ops: u64,
    runs: u64,
    agents: usize,
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.split(' ').next() == Some(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn metrics(gw: &Gateway) -> String {
    let request = isahc::Request::get(format!("{}/metrics", gw.http))
        .header("Authorization", format!("Bearer {}", gw.key))
        .body(())
        .map_err(isahc::Error::from);
    request
        .and_then(isahc::send)
        .ok()
        .and_then(|mut r| r.text().ok())
        .unwrap_or_default()
}

fn wait_until(bound: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let binary = binary();
    let dir = scratch();
    let marker = dir.display().to_string();
    let gw = Arc::new(start_gateway(&binary, &dir));
    let pid = gw.child.id();
    println!(
        "soak: {secs} s against {} (pid {pid}), home {}",
        binary.display(),
        dir.display()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let run_ids = Arc::new(Mutex::new(Vec::new()));
    let mut load: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let (errors_tx, errors): (_, Receiver<String>) = channel();
    for n in 0..SESSIONS {
        let (gw, stop, counts, errors) =
            (gw.clone(), stop.clone(), counts.clone(), errors_tx.clone());
        load.push(std::thread::spawn(move || {
            if let Err(e) = session_loop(&gw.socket, n, &stop, &counts) {
                let _ = errors.send(format!("session {n}: {e}"));
            }
        }));
    }
    for n in 0..VANISHING {
        let (gw, stop, counts, errors) =
            (gw.clone(), stop.clone(), counts.clone(), errors_tx.clone());
        load.push(std::thread::spawn(move || {
            if let Err(e) = vanishing_loop(&gw.socket, n, &stop, &counts) {
                let _ = errors.send(format!("vanishing {n}: {e}"));
            }
        }));
    }
    {
        let (gw, stop, counts) = (gw.clone(), stop.clone(), counts.clone());
        load.push(std::thread::spawn(move || {
            flood_loop(&gw.socket, &stop, &counts)
        }));
    }
    const RUN_WORKERS: u64 = 6;
    for worker in 0..RUN_WORKERS {
        let (gw, stop, counts, ids) = (gw.clone(), stop.clone(), counts.clone(), run_ids.clone());
        load.push(std::thread::spawn(move || {
            runs_loop(&gw, worker, RUN_WORKERS, &stop, &counts, &ids);
        }));
    }

    let started = Instant::now();
    let mut samples = Vec::new();
    let minutes = secs.div_ceil(60);
    for minute in 1..=minutes {
        let at = started + Duration::from_secs((minute * 60).min(secs));
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        let sample = Sample {
            minute,
            rss_kib: status_kib(pid, "VmRSS"),
            fds: open_fds(pid),
            ops: counts.ops_started.load(Ordering::Relaxed),
            runs: counts.runs_started.load(Ordering::Relaxed),
            agents: processes_naming(&marker, pid).len(),
        };
        println!(
            "minute {:>2}: RSS {:>7} KiB (anonymous {:>7} KiB), threads {:>3}, fds {:>4}, operations {:>7}, runs {:>6}, agent processes {:>3}",
            sample.minute,
            sample.rss_kib,
            status_kib(pid, "RssAnon"),
            status_kib(pid, "Threads"),
            sample.fds,
            sample.ops,
            sample.runs,
            sample.agents
        );
        samples.push(sample);
    }
    stop.store(true, Ordering::Relaxed);
    for thread in load {
        let _ = thread.join();
    }
    let load_errors: Vec<String> = errors.try_iter().collect();

    // Everything settles: operations, runs, agent processes.
    let text = metrics(&gw);
    let settled_all = wait_until(Duration::from_secs(30), || {
        let text = metrics(&gw);
        metric(&text, "connop_operations_open") == Some(0.0)
            && metric(&text, "connop_runs_active") == Some(0.0)
            && metric(&text, "connop_agent_commands_running") == Some(0.0)
    });
    let ids = run_ids.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut not_terminal = Vec::new();
    for id in &ids {
        match http("GET", &format!("{}/v1/runs/{id}", gw.http), &gw.key, None) {
            Ok((200, run))
                if ["completed", "failed", "cancelled", "interrupted"]
                    .contains(&run["status"].as_str().unwrap_or("")) => {}
            other => not_terminal.push(format!("{id}: {other:?}")),
        }
    }
    let agents_left = {
        let mut left = Vec::new();
        wait_until(Duration::from_secs(5), || {
            left = processes_naming(&marker, pid);
            left.is_empty()
        });
        left
    };
    for pid in &agents_left {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        println!(
            "left behind: pid {pid}: {} (stat: {})",
            String::from_utf8_lossy(&cmdline).replace('\0', " "),
            stat.trim()
        );
    }
    let final_text = metrics(&gw);
    let settled_by_reason: Vec<String> = final_text
        .lines()
        .filter(|l| l.starts_with("connop_operations_settled_total{"))
        .map(str::to_owned)
        .collect();
    let runs_by_status: Vec<String> = final_text
        .lines()
        .filter(|l| l.starts_with("connop_runs_total{"))
        .map(str::to_owned)
        .collect();
    let Ok(mut gateway) = Arc::try_unwrap(gw) else {
        panic!("the load threads are done");
    };
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let exit = gateway.child.wait().expect("the gateway exits");
    let mut rest = String::new();
    if let Some(mut stderr) = gateway.child.stderr.take() {
        let _ = stderr.read_to_string(&mut rest);
    }

    println!();
    let c = &counts;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "operations: {} started, {} settled through the card, {} without a card, {} left open by vanishing transports",
        load(&c.ops_started),
        load(&c.ops_settled),
        load(&c.ops_failed),
        load(&c.vanished)
    );
    println!(
        "runs: {} started ({} stopped, {} streams followed to the end, {} dropped after the first event); load errors {}",
        load(&c.runs_started),
        load(&c.runs_stopped),
        load(&c.streams_followed),
        load(&c.streams_dropped),
        load(&c.errors)
    );
    println!(
        "the never-reading client was closed {} times",
        load(&c.flood_closes)
    );
    println!("settled by reason: {settled_by_reason:?}");
    println!("runs by status: {runs_by_status:?}");
    println!(
        "at the end: operations open {:?}, runs active {:?}, agent commands running {:?} (settled: {settled_all})",
        metric(&final_text, "connop_operations_open"),
        metric(&final_text, "connop_runs_active"),
        metric(&final_text, "connop_agent_commands_running"),
    );
    println!(
        "runs not terminal: {} of {}; agent processes left: {}; gateway exit: {exit}",
        not_terminal.len(),
        ids.len(),
        agents_left.len()
    );
    for e in not_terminal
        .iter()
        .take(5)
        .chain(load_errors.iter().take(5))
    {
        println!("  {e}");
    }
    // Flat: after the first two minutes, RSS stays within 10% (judged from five minutes on).
    let mut flat = true;
    if let (Some(first), Some(last)) = (samples.get(2), samples.last()) {
        let steady: Vec<&Sample> = samples.iter().skip(2).collect();
        let max = steady.iter().map(|s| s.rss_kib).max().unwrap_or(0);
        let min = steady.iter().map(|s| s.rss_kib).min().unwrap_or(0);
        flat = samples.len() < 5 || max as f64 <= min as f64 * 1.10;
        println!(
            "RSS from minute {} to {}: {} .. {} KiB ({:+.1}% spread); fds {} .. {}",
            first.minute,
            last.minute,
            min,
            max,
            (max as f64 - min as f64) * 100.0 / min.max(1) as f64,
            steady.iter().map(|s| s.fds).min().unwrap_or(0),
            steady.iter().map(|s| s.fds).max().unwrap_or(0),
        );
    }
    let _ = text;
    let ok = settled_all
        && flat
        && not_terminal.is_empty()
        && agents_left.is_empty()
        && exit.success()
        && load_errors.is_empty();
    println!("{}", if ok { "soak: ok" } else { "soak: FAILED" });
    if !ok {
        std::process::exit(1);
    }
}
