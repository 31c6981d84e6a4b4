//! The status RPC over one stdio transport of the real `connop gateway` binary: round trips
//! per second with a window of requests in flight, and the latency of one request at a time.
//!
//! `cargo bench -p connop-app --bench status_rpc [-- N]` (N requests per measurement,
//! default 200,000). Goals: at least 50,000 round trips per second, p99 under 1 ms.

use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

/// The id of an answer line, without parsing the whole line.
fn id_of(line: &str) -> Option<u64> {
    let start = line.find("\"id\":")? + 5;
    let digits: String = line[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn main() {
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(200_000);
    let mut child = Command::new(env!("CARGO_BIN_EXE_connop"))
        .arg("gateway")
        .env_remove("CONNECTOR_GATEWAY_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("connop runs");
    let mut stdin = std::io::BufWriter::new(child.stdin.take().expect("stdin"));
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = channel::<(Option<u64>, String, Instant)>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let at = Instant::now();
            let id = if line.contains("\"method\":\"event\"") {
                None
            } else {
                id_of(&line)
            };
            if tx.send((id, line, at)).is_err() {
                break;
            }
        }
    });
    let mut send = |id: u64, method: &str, params: &serde_json::Value, flush: bool| {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{line}").expect("write");
        if flush {
            stdin.flush().expect("flush");
        }
    };
    send(
        1,
        "session.create",
        &json!({"session_id": "bench", "source": "desktop"}),
        true,
    );
    let manage = json!({"session_id": "bench", "args": {"action": "connect", "connectors": ["gmail", "notion"]}});
    send(2, "connectors.manage", &manage, true);
    let op_id = loop {
        let (_, line, _) = rx.recv_timeout(Duration::from_secs(10)).expect("the card");
        if line.contains("connection.request") {
            let v: serde_json::Value = serde_json::from_str(&line).expect("json");
            break v["params"]["payload"]["op_id"]
                .as_str()
                .expect("op_id")
                .to_owned();
        }
    };
    let status = json!({"session_id": "bench", "op_id": op_id});

    // Throughput: a window of requests in flight.
    let window = 256u64;
    let first = 100u64;
    let started = Instant::now();
    let mut sent = 0u64;
    let mut received = 0u64;
    while received < n {
        while sent < n && sent - received < window {
            sent += 1;
            // The last request of a batch flushes it.
            let last = sent == n || sent - received == window;
            send(
                first + sent - 1,
                "connectors.operation.status",
                &status,
                last,
            );
        }
        let (id, line, _) = rx.recv_timeout(Duration::from_secs(10)).expect("an answer");
        if id.is_some() {
            assert!(line.contains("\"result\""), "{line}");
            received += 1;
        }
    }
    let took = started.elapsed();
    let per_second = n as f64 / took.as_secs_f64();

    // Latency: one request at a time.
    let samples = (n / 10).max(1_000);
    let mut latencies = Vec::with_capacity(samples as usize);
    let base = first + n + 10;
    for i in 0..samples {
        let at = Instant::now();
        send(base + i, "connectors.operation.status", &status, true);
        loop {
            let (id, _, when) = rx.recv_timeout(Duration::from_secs(10)).expect("an answer");
            if id == Some(base + i) {
                latencies.push(when - at);
                break;
            }
        }
    }
    latencies.sort();
    let pct = |p: f64| latencies[((p / 100.0) * (latencies.len() - 1) as f64).round() as usize];
    println!(
        "status RPC over one stdio transport of connop gateway (one open operation, 2 targets)"
    );
    println!(
        "throughput: {n} round trips with {window} in flight in {:.3} s = {:.0} per second (goal >= 50000)",
        took.as_secs_f64(),
        per_second
    );
    println!(
        "latency, one at a time ({samples} samples): median {:.1} µs, p99 {:.1} µs, max {:.1} µs (goal p99 < 1000 µs)",
        pct(50.0).as_secs_f64() * 1e6,
        pct(99.0).as_secs_f64() * 1e6,
        latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1e6)
    );
    let _ = child.kill();
    let _ = child.wait();
}
