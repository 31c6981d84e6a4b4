//! 1,000 concurrent runs with the echo executor against the real `connop gateway --http`:
//! every run must complete (none lost); prints runs per second and the time to completion.
//!
//! `cargo bench -p connop-smol --bench runs_load [-- RUNS]` (default 1,000).

use futures_lite::AsyncReadExt;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000);
    let home = std::env::temp_dir().join(format!("connop-runs-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    let mut child = Command::new(env!("CARGO_BIN_EXE_connop"))
        .args(["gateway", "--http", "127.0.0.1:0"])
        .env("CONNOP_HOME", &home)
        .env("CONNECTOR_GATEWAY_URL", "http://127.0.0.1:9")
        .env("CONNECTOR_GATEWAY_TOKEN", "unused")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("connop runs");
    let stderr = child.stderr.take().expect("stderr");
    let url = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix("listening ").map(str::to_owned))
        .expect("the API listens");
    let client = isahc::HttpClient::builder()
        .max_connections_per_host(64)
        .build()
        .expect("a client");

    let started = Instant::now();
    let outcomes: Vec<(Duration, Value)> = smol::block_on(async {
        let tasks: Vec<_> = (0..runs)
            .map(|i| {
                let (client, url) = (client.clone(), url.clone());
                smol::spawn(async move {
                    let sent = Instant::now();
                    let body = json!({"input": format!("ping {i}"), "session_id": format!("load-{}", i % 50)}).to_string();
                    let mut response = client.post_async(format!("{url}/v1/runs"), body).await.expect("POST");
                    let mut text = String::new();
                    response.body_mut().read_to_string(&mut text).await.expect("body");
                    let created: Value = serde_json::from_str(&text).expect("json");
                    let run_id = created["run_id"].as_str().expect("a run id").to_owned();
                    // Follow the run's event stream to its terminal event.
                    let mut events = client.get_async(format!("{url}/v1/runs/{run_id}/events")).await.expect("events");
                    let mut stream = String::new();
                    events.body_mut().read_to_string(&mut stream).await.expect("stream");
                    let done = sent.elapsed();
                    let mut status = client.get_async(format!("{url}/v1/runs/{run_id}")).await.expect("GET");
                    let mut text = String::new();
                    status.body_mut().read_to_string(&mut text).await.expect("body");
                    (done, serde_json::from_str::<Value>(&text).expect("json"))
                })
            })
            .collect();
        let mut outcomes = Vec::with_capacity(runs);
        for task in tasks {
            outcomes.push(task.await);
        }
        outcomes
    });
    let wall = started.elapsed();
    let completed = outcomes
        .iter()
        .filter(|(_, run)| run["status"] == "completed")
        .count();
    let right_output = outcomes
        .iter()
        .enumerate()
        .filter(|(i, (_, run))| run["output"] == format!("ping {i}"))
        .count();
    let mut times: Vec<Duration> = outcomes.iter().map(|(t, _)| *t).collect();
    times.sort();
    let pct = |p: f64| times[((p / 100.0) * (times.len() - 1) as f64).round() as usize];
    println!("{runs} concurrent runs, echo executor, one gateway");
    println!("completed {completed}/{runs}, with the right output {right_output}/{runs}");
    println!(
        "wall {:.3} s = {:.0} runs per second",
        wall.as_secs_f64(),
        runs as f64 / wall.as_secs_f64()
    );
    println!(
        "time from POST to the terminal event: median {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(50.0).as_secs_f64() * 1e3,
        pct(99.0).as_secs_f64() * 1e3,
        times.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&home);
    if completed != runs || right_output != runs {
        std::process::exit(1);
    }
}
