//! Concurrent runs with the echo executor against the real `connop gateway --http`, on each
//! store: one SQLite gateway, one PostgreSQL replica, three PostgreSQL replicas. Every run must
//! complete (none lost); for each setup it prints runs per second and the time from the POST to
//! the terminal event (median, p99, max).
//!
//! `cargo bench -p connop-app --bench runs_load [-- RUNS]` (default 1,000 runs, all at once).
//! The PostgreSQL setups run when `CONNOP_BENCH_DATABASE_URL` (or `CONNOP_TEST_DATABASE_URL`)
//! names a server, each in a fresh database; `scripts/with-postgres cargo bench …` starts one.
//! With several replicas, run `i` is made on replica `i mod n` and its events are streamed from
//! the next one, as behind a load balancer: every stream follows a run of another replica.

use connop_app::store::postgres::{PgOptions, connect};
use futures_lite::AsyncReadExt;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the runs are stored.
#[derive(Clone, Copy)]
enum Setup {
    Sqlite,
    Postgres { replicas: usize },
}

impl Setup {
    fn name(self) -> String {
        match self {
            Setup::Sqlite => "SQLite, one gateway".into(),
            Setup::Postgres { replicas: 1 } => "PostgreSQL, one replica".into(),
            Setup::Postgres { replicas } => format!("PostgreSQL, {replicas} replicas"),
        }
    }
}

/// What one setup measured.
struct Figures {
    runs: usize,
    completed: usize,
    wall: Duration,
    times: Vec<Duration>,
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000);
    let server = std::env::var("CONNOP_BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("CONNOP_TEST_DATABASE_URL"))
        .ok()
        .filter(|u| !u.is_empty());
    let mut setups = vec![Setup::Sqlite];
    match &server {
        Some(_) => setups.extend([
            Setup::Postgres { replicas: 1 },
            Setup::Postgres { replicas: 3 },
        ]),
        None => eprintln!(
            "runs_load: PostgreSQL skipped; set CONNOP_BENCH_DATABASE_URL=postgres://… (or run under scripts/with-postgres)"
        ),
    }
    println!("{runs} concurrent runs, echo executor");
    println!(
        "{:<28} {:>9} {:>8} {:>7} {:>10} {:>8} {:>8}",
        "store", "completed", "wall s", "runs/s", "median ms", "p99 ms", "max ms"
    );
    let mut lost = false;
    for setup in setups {
        let figures = measure(setup, runs, server.as_deref());
        lost |= figures.completed != figures.runs;
        let mut times = figures.times;
        times.sort();
        let pct = |p: f64| {
            times
                .get(((p / 100.0) * (times.len().saturating_sub(1)) as f64).round() as usize)
                .map_or(0.0, |d| d.as_secs_f64() * 1e3)
        };
        println!(
            "{:<28} {:>9} {:>8.3} {:>7.0} {:>10.1} {:>8.1} {:>8.1}",
            setup.name(),
            format!("{}/{}", figures.completed, figures.runs),
            figures.wall.as_secs_f64(),
            figures.runs as f64 / figures.wall.as_secs_f64(),
            pct(50.0),
            pct(99.0),
            pct(100.0),
        );
    }
    if lost {
        std::process::exit(1);
    }
}

/// Starts the setup's gateways, sends the runs, and stops the gateways.
fn measure(setup: Setup, runs: usize, server: Option<&str>) -> Figures {
    let home = std::env::temp_dir().join(format!(
        "connop-runs-load-{}",
        connop_app::sync::random_hex(6)
    ));
    let (database, replicas) = match setup {
        Setup::Sqlite => (None, 1),
        Setup::Postgres { replicas } => {
            let server = server.expect("a PostgreSQL server");
            let name = format!("connop_bench_{}", connop_app::sync::random_hex(6));
            admin(server, &format!("CREATE DATABASE {name}"));
            (Some((server, name)), replicas)
        }
    };
    let mut gateways: Vec<(Child, String)> = (0..replicas)
        .map(|i| {
            let mut command = Command::new(env!("CARGO_BIN_EXE_connop"));
            command
                .args(["gateway", "--http", "127.0.0.1:0"])
                .env("CONNOP_HOME", home.join(i.to_string()))
                .env("CONNECTOR_GATEWAY_URL", "http://127.0.0.1:9")
                .env("CONNECTOR_GATEWAY_TOKEN", "unused")
                .stdin(Stdio::null())
                .stderr(Stdio::piped());
            if let Some((server, name)) = &database {
                command
                    .args(["--database-url", &with_database(server, name)])
                    .args(["--replica-id", &format!("bench-{i}")]);
            }
            let mut child = command.spawn().expect("connop runs");
            let stderr = child.stderr.take().expect("stderr");
            let url = BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .find_map(|line| line.strip_prefix("listening ").map(str::to_owned))
                .expect("the API listens");
            (child, url)
        })
        .collect();
    let urls: Vec<String> = gateways.iter().map(|(_, url)| url.clone()).collect();
    let client = isahc::HttpClient::builder()
        .max_connections_per_host(64)
        .build()
        .expect("a client");

    let started = Instant::now();
    let outcomes: Vec<(Duration, Value)> = smol::block_on(async {
        let tasks: Vec<_> = (0..runs)
            .map(|i| {
                let client = client.clone();
                let made = urls[i % urls.len()].clone();
                let streamed = urls[(i + 1) % urls.len()].clone();
                smol::spawn(async move {
                    let sent = Instant::now();
                    let body = json!({"input": format!("ping {i}"), "session_id": format!("load-{}", i % 50)}).to_string();
                    let request = isahc::Request::post(format!("{made}/v1/runs"))
                        .header("Content-Type", "application/json")
                        .body(body)
                        .expect("a request");
                    let mut response = client.send_async(request).await.expect("POST");
                    let mut text = String::new();
                    response.body_mut().read_to_string(&mut text).await.expect("body");
                    let created: Value = serde_json::from_str(&text).expect("json");
                    let run_id = created["run_id"].as_str().expect("a run id").to_owned();
                    // Follow the run's event stream to its terminal event.
                    let mut events = client.get_async(format!("{streamed}/v1/runs/{run_id}/events")).await.expect("events");
                    let mut stream = String::new();
                    events.body_mut().read_to_string(&mut stream).await.expect("stream");
                    let done = sent.elapsed();
                    let mut status = client.get_async(format!("{made}/v1/runs/{run_id}")).await.expect("GET");
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
        .enumerate()
        .filter(|(i, (_, run))| {
            run["status"] == "completed" && run["output"] == format!("ping {i}")
        })
        .count();
    for (child, _) in &mut gateways {
        let _ = child.kill();
        let _ = child.wait();
    }
    if let Some((server, name)) = &database {
        admin(
            server,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        );
    }
    let _ = std::fs::remove_dir_all(&home);
    Figures {
        runs,
        completed,
        wall,
        times: outcomes.into_iter().map(|(t, _)| t).collect(),
    }
}

/// `url` with its database replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = rest.split('/').next().unwrap_or_default();
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("{scheme}://{authority}/{name}{query}")
}

/// Runs statements on the server's database.
fn admin(url: &str, sql: &str) {
    smol::block_on(async {
        let options = PgOptions::from_url(url).expect("a postgres URL");
        let config: tokio_postgres::Config = url.parse().expect("a postgres URL");
        let (client, connection) = connect(&config, options.target())
            .await
            .expect("the server answers");
        let driver = smol::spawn(async move {
            let _ = connection.await;
        });
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        drop(client);
        driver.await;
    })
}
