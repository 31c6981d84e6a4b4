//! Return hints through the real binary (docs/contract.md#return-hints): how long after a person's
//! consent decision the operation knows, at the default 1 s tick.
//!
//! - **desktop**: `connop gateway` on stdio; a JSON-RPC client plays the desktop app: when
//!   the vendor's decision is made it calls `connection.returned` (as the app does when its
//!   `returnTo` deep link opens) and waits for the `connection.update` frame of that row.
//! - **terminal**: `connop connect` with its loopback return URL; the browser's way back is
//!   a GET of that URL (the gateway's redirect, followed as a browser does; or sent by hand
//!   while the simulated gateway does not redirect yet), and the card's change is its line
//!   on stderr (off a terminal the card prints one line per change from the same event).
//! - **baseline**: desktop without `connection.returned`: the next tick sees the decision.
//!
//! Each approval waits a random part of a tick first, so decisions land at every phase of
//! the tick. The clock runs from just before the deciding request to the frame or line.
//!
//! `cargo bench -p connop-app --bench return_latency [-- N [desktop|terminal|baseline]]` (N
//! approvals per mode, default 200; the baseline takes N/10; a mode name runs only it).
//! `BENCH_DEBUG=1` prints every line skipped while waiting for the next expected one. Goal: p99 under 50 ms in both modes.

use connop_app::sim_gateway::{SimOptions, SimToolGateway};
use connop_core::tool_gateway::SIMULATED_CATALOG;
use isahc::ReadResponseExt;
use isahc::config::{Configurable, RedirectPolicy};
use serde_json::{Value, json};
use std::fmt::Display;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

const TOKEN: &str = "return-latency-token";
/// Any single wait of the benchmark; past it the run is broken, not slow.
const BOUND: Duration = Duration::from_secs(30);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(200);
    let only = args
        .iter()
        .find(|a| ["desktop", "terminal", "baseline"].contains(&a.as_str()));
    let runs = |mode: &str| only.is_none_or(|only| only == mode);
    let sim = SimToolGateway::start(SimOptions::default().token(TOKEN)).expect("sim starts");
    let mut rng = Rng(0x5eed_1234_abcd_0001);

    if runs("desktop") {
        let desktop = desktop(&sim, n, true, &mut rng);
        report(
            "desktop: approval -> connection.update (connection.returned)",
            &desktop,
        );
    }
    if runs("terminal") {
        let terminal = terminal(&sim, n, &mut rng);
        report(
            "terminal: approval -> card change (loopback return)",
            &terminal,
        );
    }
    if runs("baseline") {
        let baseline = desktop(&sim, (n / 10).max(10), false, &mut rng);
        report(
            "baseline: approval -> connection.update (no return hint)",
            &baseline,
        );
    }
}

// ---- the person's decision ------------------------------------------------------------------

/// The person approves at the vendor. With the consent form (docs/contract.md#consent-page) the
/// page's one-time nonce is POSTed with `decision=approve`; with the older simulated gateway,
/// opening the link approves. Returns when the deciding request started and where the gateway sends
/// the browser back (a 303's `Location`), if it does. Every approval goes through here, so the
/// benchmark follows whichever consent page the gateway serves.
fn approve(link: &str) -> (Instant, Option<String>) {
    let client = isahc::HttpClient::builder()
        .redirect_policy(RedirectPolicy::None)
        .build()
        .expect("an HTTP client");
    let started = Instant::now();
    let mut page = client.get(link).expect("the consent page");
    let body = page.text().unwrap_or_default();
    let Some(nonce) = hidden_value(&body, "nonce") else {
        // No form: the GET was the decision.
        return (started, location(&page));
    };
    let decided = Instant::now();
    let form = format!("decision=approve&nonce={nonce}");
    let request = isahc::Request::post(link)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .expect("a request");
    let answer = client.send(request).expect("the decision");
    (decided, location(&answer))
}

fn location<B>(response: &isahc::http::Response<B>) -> Option<String> {
    if !response.status().is_redirection() {
        return None;
    }
    response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// `<input type="hidden" name="<name>" value="...">`'s value.
fn hidden_value(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("name=\"{name}\""))?;
    let rest = &html[at..];
    let start = rest.find("value=\"")? + "value=\"".len();
    let end = rest[start..].find('"')?;
    Some(rest[start..start + end].to_owned())
}

// ---- the binary ---------------------------------------------------------------------------

/// `connop <args>` against the simulated gateway, at the default tick.
fn connop(sim: &SimToolGateway, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_connop"));
    command
        .args(args)
        .args(["--tick", "1", "--deadline", "300"])
        .env("CONNECTOR_GATEWAY_URL", sim.url())
        .env("CONNECTOR_GATEWAY_TOKEN", TOKEN);
    command
}

/// The lines a child writes to one pipe, each with when it was read.
struct Lines<T>(Receiver<(T, Instant)>);

impl<T: Display + Send + 'static> Lines<T> {
    fn follow(pipe: impl Read + Send + 'static, parse: fn(String) -> T) -> Self {
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let at = Instant::now();
                if tx.send((parse(line), at)).is_err() {
                    break;
                }
            }
        });
        Lines(lines)
    }

    /// The next line that satisfies `want`, with when it was read (others are dropped).
    fn until(&self, what: &str, want: impl Fn(&T) -> bool) -> (T, Instant) {
        let end = Instant::now() + BOUND;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let (line, at) = self
                .0
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {what} within {BOUND:?}"));
            if want(&line) {
                return (line, at);
            }
            if std::env::var("BENCH_DEBUG").is_ok() {
                eprintln!("skipped: {line}");
            }
        }
    }
}

// ---- desktop: connop gateway over stdio --------------------------------------------------------

struct Rpc {
    child: Child,
    stdin: std::process::ChildStdin,
    lines: Lines<Value>,
    next_id: u64,
}

impl Rpc {
    fn start(sim: &SimToolGateway) -> Self {
        let mut child = connop(sim, &["gateway"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("connop runs");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let lines = Lines::follow(stdout, |line| {
            serde_json::from_str(&line).expect("a JSON line")
        });
        Rpc {
            child,
            stdin,
            lines,
            next_id: 1,
        }
    }

    fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").expect("write");
        self.stdin.flush().expect("flush");
        id
    }

    fn until(&self, what: &str, want: impl Fn(&Value) -> bool) -> (Value, Instant) {
        self.lines.until(what, want)
    }

    fn event(&self, kind: &str, want: impl Fn(&Value) -> bool) -> (Value, Instant) {
        self.until(kind, |l| {
            l["method"] == "event" && l["params"]["type"] == kind && want(&l["params"]["payload"])
        })
    }

    fn stop(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

/// One operation at a time over every catalog connector; each row is approved, then (with
/// `hint`) `connection.returned` names it; the clock stops at its `connected` frame.
fn desktop(sim: &SimToolGateway, n: usize, hint: bool, rng: &mut Rng) -> Vec<Duration> {
    let mut rpc = Rpc::start(sim);
    let id = rpc.send(
        "session.create",
        json!({"session_id": "bench", "source": "desktop"}),
    );
    rpc.until("session.create", |l| l["id"] == id);
    let mut samples = Vec::with_capacity(n);
    while samples.len() < n {
        // A fresh world: an account connected last round would make the mint answer active.
        sim.reset();
        let manage = rpc.send(
            "connectors.manage",
            json!({"session_id": "bench", "args": {"action": "connect", "connectors": SIMULATED_CATALOG}}),
        );
        let (card, _) = rpc.event("connection.request", |_| true);
        let op_id = card["params"]["payload"]["op_id"].clone();
        for row in card["params"]["payload"]["targets"]
            .as_array()
            .expect("targets")
        {
            let name = row["name"].as_str().expect("name").to_owned();
            let link = row["connect_url"].as_str().expect("a link").to_owned();
            std::thread::sleep(rng.part_of_a_tick());
            let (decided, _back) = approve(&link);
            if hint {
                rpc.send(
                    "connection.returned",
                    json!({"session_id": "bench", "op_id": op_id, "target": name}),
                );
            }
            let (_, seen) = rpc.event("connection.update", |p| {
                p["target"] == name.as_str() && p["to"] == "connected"
            });
            if samples.len() < n {
                samples.push(seen - decided);
            }
        }
        rpc.until("the manage answer", |l| l["id"] == manage);
    }
    rpc.stop();
    samples
}

// ---- terminal: connop connect with its loopback return URL -----------------------------------

/// One `connop connect` per round over every catalog connector; each row is approved, the
/// browser comes back to the return URL, and the clock stops at the row's change line.
fn terminal(sim: &SimToolGateway, n: usize, rng: &mut Rng) -> Vec<Duration> {
    let browser = isahc::HttpClient::builder()
        .redirect_policy(RedirectPolicy::None)
        .build()
        .expect("an HTTP client");
    let mut samples = Vec::with_capacity(n);
    while samples.len() < n {
        sim.reset();
        let mut child = connop(sim, &["connect"])
            .args(SIMULATED_CATALOG)
            .arg("--json")
            .env("CONNOP_RETURN_URL", "loopback")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("connop connect runs");
        let lines = Lines::follow(child.stderr.take().expect("stderr"), |line| line);
        let (up, _) = lines.until("the return listener", |l| {
            l.contains("listener up") && l.contains("return:")
        });
        let return_url = up[up.find("return:").expect("return:") + 7..]
            .split_whitespace()
            .next()
            .expect("a URL")
            .trim_matches('"')
            .to_owned();
        let (card, _) = lines.until("the card", |l| l.starts_with("card:"));
        for (name, link) in links(&card) {
            let connection_id = link.rsplit('/').next().unwrap_or_default().to_owned();
            std::thread::sleep(rng.part_of_a_tick());
            let (decided, back) = approve(&link);
            // The browser follows the gateway's redirect; while it sends none, the return is
            // what it would have been.
            let back = back.unwrap_or_else(|| {
                format!("{return_url}?connection_id={connection_id}&status=active")
            });
            let mut page = browser
                .get(back.as_str())
                .unwrap_or_else(|e| panic!("the return URL {back} answers: {e}"));
            let _ = page.text();
            let change = format!("{name}: initiated -> connected");
            let (_, seen) = lines.until(&change, |l| l.starts_with(&change));
            if samples.len() < n {
                samples.push(seen - decided);
            }
        }
        let status = child.wait().expect("connect exits");
        assert!(status.success(), "connop connect failed: {status}");
    }
    samples
}

/// `(name, link)` of each row of a `card: name state link, …` line.
fn links(card: &str) -> Vec<(String, String)> {
    card.trim_start_matches("card:")
        .split(", ")
        .filter_map(|row| {
            let mut words = row.split_whitespace();
            let name = words.next()?.to_owned();
            let link = words.find(|w| w.contains("/connect/"))?.to_owned();
            Some((name, link))
        })
        .collect()
}

// ---- figures -------------------------------------------------------------------------------

fn report(what: &str, samples: &[Duration]) {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
    println!(
        "{what}: n={} median {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms.len(),
        at(0.5),
        at(0.99),
        ms[ms.len() - 1]
    );
}

/// SplitMix64: the same phases on every run.
struct Rng(u64);

impl Rng {
    /// A wait uniform in [0, 1 s) at millisecond resolution.
    fn part_of_a_tick(&mut self) -> Duration {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Duration::from_millis((z ^ (z >> 31)) % 1_000)
    }
}
