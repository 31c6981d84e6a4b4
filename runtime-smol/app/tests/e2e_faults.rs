//! Fault injection against the real `connop gateway` binary and the simulated tool gateway
//! (docs/contract.md#simulated-tool-gateway, here in the test process on loopback): the binary
//! reaches it through `CONNECTOR_GATEWAY_URL`, the tests drive it only through its HTTP controls
//! (`/sim/faults`, `/sim/log`, `/sim/reset`) and read the binary's memory from `/proc`. Short
//! deadlines and ticks (`--deadline`, `--tick`) keep the whole file to a few seconds per test.
//!
//! 1. **Stalls** — account reads that answer after their timeout, and a mint slower than the
//!    deadline: each operation settles `deadline` no later than its deadline plus one tick,
//!    every row `not_connected`, with at most one read in flight per row and no card for an
//!    operation that settled in prepare; reads slowed below their timeout still connect.
//! 2. **Connection resets** (the gateway closes the socket without answering) — a transport
//!    failure: an account read is retried once (exactly two requests from a fresh binary, a
//!    dropped retry moves nothing and writes no detail), a list dropped every time sees two to
//!    four requests and ends in 5034, and the mint is sent exactly once even over warm
//!    connections, ending in the error text of docs/contract.md#prepare with the registry entry
//!    closed.
//! 3. **5xx storm** (500/503 on every route) — the watched operation settles by its deadline
//!    plus one tick; reads stay within one per row per tick plus its one retry; meanwhile a
//!    status RPC is answered in milliseconds, a list fails fast with 5034 and a mint fails
//!    once with `answered HTTP 500`; no read of a settled row follows.
//! 4. **429 storm with Retry-After** — every live row backs off a whole second: about six
//!    reads in 2.5 s instead of about a hundred; a 429 is not retried (list, mint); the
//!    operation settles by its deadline plus one tick and status stays prompt.
//! 5. **Garbage bodies** — non-JSON, truncated, wrong-shaped and out-of-set mint answers each
//!    give the text of docs/contract.md#prepare around an invalid-response reason, after one mint;
//!    48 MiB answers are abandoned at the client's 4 MiB limit with the binary's peak RSS bounded;
//!    garbage account and list answers move nothing or give 5034; the binary never panics.
//! 6. **A client that disconnects mid-operation** — a half-closed client still gets the
//!    settle frame (`interrupt`) and then its manage answer; a vanished one's operation is
//!    closed at once (4004 to the key's next owner, who opens a new operation at once) and is
//!    never read again; a vanish during a stalled mint frees the key at once and the late
//!    mint answer is dropped; 40 vanished clients leave no session, key or socket, and
//!    4000 short connections leave the resident size flat.
//! 7. **Oversized lines** — 64 MiB without a newline is refused with `-32600` (`the line is
//!    longer than 1 MiB`) while the binary's peak RSS grows by about 1 MiB; the transport
//!    goes on; a line cut by the end of the input is refused and the connection closes
//!    cleanly.
//! 8. **A flood on one transport** — 20,000 pipelined requests written before any answer is
//!    read: no deadlock, exactly one answer each, the immediate ones in request order, the
//!    ones that wait for the tool gateway each once, and the peak RSS bounded.

mod support;

use connop_app::sim_gateway::{SimOptions, SimToolGateway};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};
use support::{BOUND, Client, Gateway, Lines, accepted_sockets, decide_link, open_fds, proc_kib};

const TOKEN: &str = "e2e-faults-token";
const FAILED_PREFIX: &str = "The connector gateway request failed: ";
const FAILED_SUFFIX: &str =
    ". If this persists, the user can manage connections in the connector portal.";
/// Wake-up slack allowed on top of "deadline plus one tick" on a shared 2-core machine.
const SLACK: f64 = 0.4;
/// How fast a request that never waits for the tool gateway must be answered while the
/// gateway is failing.
const PROMPT: Duration = Duration::from_millis(500);

// ---- the simulated tool gateway, driven only through its HTTP test controls ----------------

/// A simulated tool gateway on loopback, in this process; the binary reaches it through
/// `CONNECTOR_GATEWAY_URL`, the test through `/sim/faults`, `/sim/log` and `/sim/reset`.
struct Sim {
    _server: SimToolGateway,
    url: String,
}

impl Sim {
    fn start() -> Self {
        let server = SimToolGateway::start(SimOptions::default().token(TOKEN)).expect("sim starts");
        let url = server.url();
        Sim {
            _server: server,
            url,
        }
    }

    /// `connop gateway` against this simulated gateway.
    fn gateway(&self, args: &[&str]) -> Gateway {
        Gateway::start_against(&self.url, TOKEN, args)
    }

    /// The binary with `--deadline` and `--tick` in seconds, spelled from the values the test
    /// checks its timings against.
    fn timed(&self, deadline: f64, tick: f64) -> Gateway {
        let (deadline, tick) = (deadline.to_string(), tick.to_string());
        self.gateway(&["--deadline", &deadline, "--tick", &tick])
    }

    fn post(&self, path: &str, body: &Value) {
        use isahc::ReadResponseExt;
        let request = isahc::Request::post(format!("{}{path}", self.url))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .expect("a request");
        let mut response = isahc::send(request).expect("the sim answers");
        let text = response.text().unwrap_or_default();
        assert_eq!(response.status().as_u16(), 200, "POST {path}: {text}");
    }

    /// Queues faults (`POST /sim/faults`).
    fn faults(&self, faults: Value) {
        self.post("/sim/faults", &json!({ "faults": faults }));
    }

    /// Back to the initial world: no faults, no accounts, an empty log.
    fn reset(&self) {
        self.post("/sim/reset", &json!({}));
    }

    /// Every tool-gateway API request received so far (`GET /sim/log`, `/v1` routes only).
    fn log(&self) -> Vec<Value> {
        use isahc::ReadResponseExt;
        let request = isahc::Request::get(format!("{}/sim/log", self.url))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .body(())
            .expect("a request");
        let mut response = isahc::send(request).expect("the sim answers");
        let body: Value = serde_json::from_str(&response.text().expect("a body")).expect("JSON");
        body["requests"]
            .as_array()
            .expect("requests")
            .iter()
            .filter(|r| r["path"].as_str().is_some_and(|p| p.starts_with("/v1/")))
            .cloned()
            .collect()
    }

    /// Polls the log until `done` holds (bounded); returns that log.
    fn wait_log(&self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let until = Instant::now() + BOUND;
        loop {
            let log = self.log();
            if done(&log) {
                return log;
            }
            assert!(
                Instant::now() < until,
                "no {what} in the sim log within {BOUND:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn is_mint(r: &Value) -> bool {
    r["method"] == "POST" && r["path"] == "/v1/connectors/connections"
}

fn is_list(r: &Value) -> bool {
    r["method"] == "GET" && r["path"] == "/v1/connectors"
}

fn is_read(r: &Value) -> bool {
    r["path"]
        .as_str()
        .is_some_and(|p| p.starts_with("/v1/connectors/accounts/"))
}

fn count(log: &[Value], which: fn(&Value) -> bool) -> usize {
    log.iter().filter(|r| which(r)).count()
}

/// Reads of one account.
fn reads_of(log: &[Value], connection_id: &str) -> usize {
    let path = format!("/v1/connectors/accounts/{connection_id}");
    log.iter().filter(|r| r["path"] == path.as_str()).count()
}

// ---- the gateway protocol ----------------------------------------------------------------------

fn create<W: Write>(c: &mut Client<W>, params: Value) -> Value {
    let answer = c.call("session.create", params);
    assert!(answer["result"].is_object(), "session.create: {answer}");
    answer["result"].clone()
}

fn desktop<W: Write>(c: &mut Client<W>, sid: &str) {
    create(c, json!({"session_id": sid, "source": "desktop"}));
}

/// Sends `connectors.manage` connect for `names`; returns the request id.
fn connect<W: Write>(c: &mut Client<W>, sid: &str, names: &[&str]) -> u64 {
    c.send(
        "connectors.manage",
        json!({"session_id": sid, "args": {"action": "connect", "connectors": names}}),
    )
}

/// Connects `name` in session `sid`, opens its link (the user consents at the vendor), and
/// returns the tool result.
fn connect_at_the_vendor<W: Write>(c: &mut Client<W>, sid: &str, name: &str) -> Value {
    let manage = connect(c, sid, &[name]);
    let card = c.lines.event_where("connection.request", |e| {
        e["session_id"] == sid && e["payload"]["targets"][0]["name"] == name
    });
    let link = card["payload"]["targets"][0]["connect_url"]
        .as_str()
        .expect("a link");
    assert_eq!(decide_link(link, "approve"), 200);
    c.lines.answer(manage)["result"].clone()
}

/// The card of session `sid` whose first target is `first`: `(op_id, connection id of the
/// first target)`.
fn card(lines: &Lines, sid: &str, first: &str) -> (String, String) {
    let card = lines.event_where("connection.request", |e| {
        e["session_id"] == sid && e["payload"]["targets"][0]["name"] == first
    });
    let payload = &card["payload"];
    let id = payload["targets"][0]["connection_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a connection id: {payload}"))
        .to_owned();
    (payload["op_id"].as_str().expect("op_id").to_owned(), id)
}

fn states(result: &Value) -> Vec<String> {
    result["targets"]
        .as_array()
        .unwrap_or_else(|| panic!("targets: {result}"))
        .iter()
        .map(|t| t["state"].as_str().unwrap_or("").to_owned())
        .collect()
}

/// Asserts a settle by the deadline, no later than the deadline plus one tick (and slack);
/// returns the lag behind the deadline in seconds.
fn assert_deadline_settle(result: &Value, tick: f64) -> f64 {
    assert_eq!(result["settled_by"], "deadline", "{result}");
    assert_eq!(result["status"], "settled", "{result}");
    let lag = result["settled_at"].as_f64().expect("settled_at")
        - result["deadline_at"].as_f64().expect("deadline_at");
    assert!(
        (-0.001..=tick + SLACK).contains(&lag),
        "settled {lag:.3} s after the deadline: {result}"
    );
    assert!(
        states(result).iter().all(|s| s == "not_connected"),
        "{result}"
    );
    lag
}

/// The reason inside the error text of docs/contract.md#prepare.
fn failed_reason(result: &Value) -> String {
    let text = result["error"]
        .as_str()
        .unwrap_or_else(|| panic!("an error result: {result}"));
    let reason = text
        .strip_prefix(FAILED_PREFIX)
        .and_then(|t| t.strip_suffix(FAILED_SUFFIX))
        .unwrap_or_else(|| panic!("not the gateway error text: {text}"));
    reason.to_owned()
}

fn tcp(addr: &str) -> (Client<TcpStream>, TcpStream) {
    let stream = TcpStream::connect(addr).expect("the listener accepts");
    let lines = Lines::spawn_reader(stream.try_clone().expect("clone"));
    let client = Client::new(stream.try_clone().expect("clone"), lines);
    (client, stream)
}

/// `tcp://127.0.0.1:PORT` → (`127.0.0.1:PORT`, PORT).
fn tcp_addr(listening: &str) -> (String, u16) {
    let addr = listening
        .strip_prefix("tcp://")
        .unwrap_or_else(|| panic!("a tcp listener: {listening}"));
    let port = addr
        .rsplit_once(':')
        .expect("a port")
        .1
        .parse()
        .expect("a port");
    (addr.to_owned(), port)
}

/// `session.create` until the id (or key) is free again: the binary frees it when it has read
/// the end of the transport that owned it. Bounded.
fn create_when_free<W: Write>(c: &mut Client<W>, params: Value) -> Value {
    let until = Instant::now() + BOUND;
    loop {
        let answer = c.call("session.create", params.clone());
        if answer["result"].is_object() {
            return answer["result"].clone();
        }
        assert_eq!(
            answer["error"]["message"], "session already exists",
            "{answer}"
        );
        assert!(
            Instant::now() < until,
            "{params} still taken after {BOUND:?}"
        );
        std::thread::yield_now();
    }
}

fn assert_no_panic(gw: &mut Gateway) {
    assert!(gw.is_running(), "the binary exited: {:?}", gw.stderr());
    let stderr = gw.stderr().join("\n");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

// ---- 1. stalls ------------------------------------------------------------------------------

#[test]
fn stalls_longer_than_the_read_timeout_settle_by_the_deadline_plus_one_tick() {
    const DEADLINE: f64 = 2.0;
    const TICK: f64 = 0.05;
    let sim = Sim::start();
    let mut gw = sim.timed(DEADLINE, TICK);
    let c = &mut gw.client;
    desktop(c, "s1");

    // Every account read stalls 5 s: past its timeout (the time left, clamped to [1 s, 10 s]).
    sim.faults(json!([{"route": "account", "delay_ms": 5000, "count": 1000}]));
    let sent = Instant::now();
    let manage = connect(c, "s1", &["gmail"]);
    let (_, gmail) = card(&c.lines, "s1", "gmail");
    let result = c.lines.answer(manage)["result"].clone();
    let took = sent.elapsed().as_secs_f64();
    let lag = assert_deadline_settle(&result, TICK);
    assert!(
        took <= DEADLINE + TICK + SLACK,
        "answered after {took:.3} s"
    );
    // One read in flight per row: later ticks never pile reads onto the stalled one (its one
    // retry may start when it times out, which is at the deadline).
    let reads = reads_of(&sim.log(), &gmail);
    assert!((1..=2).contains(&reads), "{reads} reads of the stalled row");
    eprintln!(
        "stalled reads: settled {lag:.3} s after the deadline, answered after {took:.3} s, {reads} reads"
    );

    // A mint slower than the deadline: the deadline still fires in prepare.
    sim.reset();
    sim.faults(json!([{"route": "mint", "delay_ms": 2100}]));
    let sent = Instant::now();
    let manage = connect(c, "s1", &["notion"]);
    let result = c.lines.answer(manage)["result"].clone();
    let took = sent.elapsed().as_secs_f64();
    let lag = assert_deadline_settle(&result, TICK);
    assert!(
        took <= DEADLINE + TICK + SLACK,
        "answered after {took:.3} s"
    );
    assert!(
        c.lines
            .events("connection.request")
            .iter()
            .all(|e| e["payload"]["targets"][0]["name"] != "notion"),
        "no card for an operation that settled in prepare"
    );
    eprintln!("stalled mint: settled {lag:.3} s after the deadline, answered after {took:.3} s");

    // Slow answers within the timeout: the right result, before the deadline.
    sim.faults(json!([{"route": "account", "delay_ms": 300, "count": 3}]));
    let sent = Instant::now();
    let result = connect_at_the_vendor(c, "s1", "slack");
    let took = sent.elapsed().as_secs_f64();
    assert_eq!(result["settled_by"], "all_resolved", "{result}");
    assert_eq!(states(&result), ["connected"]);
    assert!(took < DEADLINE, "answered after {took:.3} s");
    eprintln!("slow reads: connected after {took:.3} s");

    // The stalled mint's late answer was dropped: its account was never read.
    let log = sim.log();
    assert!(
        !log.iter().any(|r| r["path"]
            .as_str()
            .is_some_and(|p| p.contains("accounts/ca_notion_"))),
        "{log:?}"
    );
    assert_no_panic(&mut gw);
}

// ---- 2. connection resets ---------------------------------------------------------------------

/// A fresh binary, one desktop session `s1` and a connect of `name` whose account reads the
/// gateway drops `resets` times: the number of reads in the first tick (a 30 s tick, so every
/// read but the first is a retry) and the row as the status RPC shows it then. A fresh binary
/// has no pooled connection, so each of these requests goes out on a new one and the log
/// counts the binary's own attempts.
fn reads_under_resets(sim: &Sim, name: &str, resets: usize) -> (usize, Value) {
    let mut gw = sim.timed(20.0, 30.0);
    let c = &mut gw.client;
    desktop(c, "s1");
    sim.faults(json!([{"route": "account", "reset": true, "count": resets}]));
    let manage = connect(c, "s1", &[name]);
    let (op_id, id) = card(&c.lines, "s1", name);
    sim.wait_log("a read and its retry", |log| reads_of(log, &id) >= 2);
    let view = c.call(
        "connectors.operation.status",
        json!({"session_id": "s1", "op_id": op_id}),
    );
    let row = view["result"]["targets"][0].clone();
    let cont = json!({"session_id": "s1", "op_id": op_id, "result": {"settled_by": "continue"}});
    assert_eq!(
        c.call("connection.respond", cont)["result"]["settled"],
        true
    );
    assert_eq!(c.lines.answer(manage)["result"]["settled_by"], "continue");
    assert_no_panic(&mut gw);
    (reads_of(&sim.log(), &id), row)
}

#[test]
fn connection_resets_are_transport_failures_reads_retry_once_and_the_mint_never_retries() {
    let sim = Sim::start();

    // One dropped read: retried at once, and the retry's answer (pending) is what counts.
    let (reads, row) = reads_under_resets(&sim, "gmail", 1);
    assert_eq!(reads, 2, "one read and its one retry");
    assert_eq!(row["state"], "initiated", "{row}");
    // Two: the read fails as a transport error, which moves nothing and writes no detail;
    // no third attempt in the tick.
    let (reads, row) = reads_under_resets(&sim, "notion", 2);
    assert_eq!(reads, 2, "one read and its one retry");
    assert_eq!(row["state"], "initiated", "{row}");
    assert!(row.get("detail").is_none(), "{row}");

    // On warm connections. The list is a read: it gets its one retry, and curl itself may
    // resend once a request whose reused connection died before any answer byte, so a
    // gateway that drops everything sees two to four requests, never more.
    let mut gw = sim.timed(20.0, 30.0);
    let c = &mut gw.client;
    desktop(c, "s1");
    let listed = c.call("connectors.list", json!({"session_id": "s1"}));
    assert_eq!(listed["result"]["available"], true, "{listed}");
    let lists = count(&sim.log(), is_list);
    sim.faults(json!([{"route": "list", "reset": true, "count": 10}]));
    let failed = c.call("connectors.list", json!({"session_id": "s1"}));
    assert_eq!(failed["error"]["code"], 5034, "{failed}");
    let message = failed["error"]["message"].as_str().unwrap_or("").to_owned();
    assert!(
        !message.contains("answered HTTP"),
        "a transport failure: {message}"
    );
    let list_requests = count(&sim.log(), is_list) - lists;
    assert!(
        (2..=4).contains(&list_requests),
        "{list_requests} list requests"
    );
    sim.reset();

    // The mint is sent once, even after earlier mints and reads left connections to reuse.
    let manage = connect(c, "s1", &["github"]);
    card(&c.lines, "s1", "github");
    c.call("session.interrupt", json!({"session_id": "s1"}));
    assert_eq!(c.lines.answer(manage)["result"]["settled_by"], "interrupt");
    let mints = count(&sim.log(), is_mint);
    sim.faults(json!([{"route": "mint", "reset": true, "count": 1}]));
    let result = c.call(
        "connectors.manage",
        json!({"session_id": "s1", "args": {"action": "connect", "connectors": ["slack"]}}),
    )["result"]
        .clone();
    let reason = failed_reason(&result);
    assert!(
        !reason.contains("answered HTTP") && !reason.contains("invalid response"),
        "a transport failure: {reason}"
    );
    assert_eq!(
        count(&sim.log(), is_mint),
        mints + 1,
        "the mint was sent again"
    );
    eprintln!(
        "resets: list dropped 10 times -> {list_requests} requests, {message}; mint: {reason}"
    );

    // The failed prepare closed the registry entry: the session opens a new operation at once.
    let manage = connect(c, "s1", &["slack"]);
    card(&c.lines, "s1", "slack");
    let interrupted = c.call("session.interrupt", json!({"session_id": "s1"}));
    assert_eq!(interrupted["result"]["interrupted"], true);
    assert_eq!(c.lines.answer(manage)["result"]["settled_by"], "interrupt");
    assert_no_panic(&mut gw);
}

// ---- 3./4. storms ---------------------------------------------------------------------------

/// While a storm runs: a request that never calls the tool gateway is answered at once.
fn assert_responsive<W: Write>(c: &mut Client<W>, sid: &str, op_id: &str) -> Duration {
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let started = Instant::now();
        let view = c.call(
            "connectors.operation.status",
            json!({"session_id": sid, "op_id": op_id}),
        );
        let took = started.elapsed();
        assert_eq!(view["result"]["settled"], false, "{view}");
        assert!(
            took < PROMPT,
            "a status answered after {took:?} during the storm"
        );
        slowest = slowest.max(took);
    }
    slowest
}

#[test]
fn a_5xx_storm_settles_by_the_deadline_keeps_the_binary_responsive_and_bounds_the_reads() {
    const DEADLINE: f64 = 2.0;
    const TICK: f64 = 0.05;
    let sim = Sim::start();
    let mut gw = sim.timed(DEADLINE, TICK);
    let c = &mut gw.client;
    desktop(c, "storm");
    let sent = Instant::now();
    let manage = connect(c, "storm", &["gmail", "notion"]);
    let (op_id, gmail) = card(&c.lines, "storm", "gmail");
    // From here every route answers 500 or 503.
    sim.faults(json!([
        {"route": "account", "status": 500, "count": 5000},
        {"route": "account", "status": 503, "count": 5000},
        {"route": "list", "status": 503, "count": 5000},
        {"route": "mint", "status": 500, "count": 5000},
    ]));

    desktop(c, "probe");
    let slowest = assert_responsive(c, "storm", &op_id);
    let started = Instant::now();
    let failed = c.call("connectors.list", json!({"session_id": "probe"}));
    assert_eq!(failed["error"]["code"], 5034, "{failed}");
    assert!(
        started.elapsed() < PROMPT,
        "a failing list took {:?}",
        started.elapsed()
    );
    let mints = count(&sim.log(), is_mint);
    let refused = c.call(
        "connectors.manage",
        json!({"session_id": "probe", "args": {"action": "connect", "connectors": ["slack"]}}),
    )["result"]
        .clone();
    assert_eq!(
        failed_reason(&refused),
        "the connector gateway answered HTTP 500"
    );
    assert_eq!(
        count(&sim.log(), is_mint),
        mints + 1,
        "the mint is not retried"
    );

    let result = c.lines.answer(manage)["result"].clone();
    let took = sent.elapsed().as_secs_f64();
    let lag = assert_deadline_settle(&result, TICK);
    assert!(
        took <= DEADLINE + TICK + SLACK,
        "answered after {took:.3} s"
    );

    // One read per row per tick, each with its one retry: at most 2 × 2 × (ticks + 1).
    let log = sim.log();
    let reads = count(&log, is_read);
    let bound = 2 * 2 * ((DEADLINE / TICK) as usize + 2);
    assert!(
        (8..=bound).contains(&reads),
        "{reads} account reads in a {DEADLINE} s storm (bound {bound})"
    );
    let lists = count(&log, is_list);
    assert_eq!(
        lists, 2,
        "the probe's list and its one retry; the watcher never lists"
    );
    eprintln!(
        "5xx storm: {reads} reads (bound {bound}), slowest status {slowest:?}, settled {lag:.3} s after the deadline"
    );

    // After the settle, no read of its rows: a later operation runs several ticks meanwhile.
    sim.reset();
    let manage = connect(c, "probe", &["linear"]);
    let (_, linear) = card(&c.lines, "probe", "linear");
    sim.wait_log("five reads of the later row", |log| {
        reads_of(log, &linear) >= 5
    });
    assert_eq!(reads_of(&sim.log(), &gmail), 0, "a read after the settle");
    c.call("session.interrupt", json!({"session_id": "probe"}));
    assert_eq!(c.lines.answer(manage)["result"]["settled_by"], "interrupt");
    assert_no_panic(&mut gw);
}

#[test]
fn a_429_storm_backs_off_by_retry_after_and_settles_by_the_deadline() {
    const DEADLINE: f64 = 2.5;
    const TICK: f64 = 0.05;
    let sim = Sim::start();
    let mut gw = sim.timed(DEADLINE, TICK);
    let c = &mut gw.client;
    // Account reads answer 429 with Retry-After: 1 from the start.
    sim.faults(json!([
        {"route": "account", "status": 429, "retry_after_ms": 1000, "count": 10000},
    ]));
    desktop(c, "storm");
    let sent = Instant::now();
    let manage = connect(c, "storm", &["gmail", "notion"]);
    let (op_id, _) = card(&c.lines, "storm", "gmail");
    sim.faults(json!([
        {"route": "list", "status": 429, "retry_after_ms": 1000, "count": 10000},
        {"route": "mint", "status": 429, "retry_after_ms": 1000, "count": 10000},
    ]));

    desktop(c, "probe");
    let slowest = assert_responsive(c, "storm", &op_id);
    let lists = count(&sim.log(), is_list);
    let failed = c.call("connectors.list", json!({"session_id": "probe"}));
    assert_eq!(failed["error"]["code"], 5034, "{failed}");
    assert_eq!(
        count(&sim.log(), is_list),
        lists + 1,
        "a 429 is not retried"
    );
    let mints = count(&sim.log(), is_mint);
    let refused = c.call(
        "connectors.manage",
        json!({"session_id": "probe", "args": {"action": "connect", "connectors": ["slack"]}}),
    )["result"]
        .clone();
    assert_eq!(
        failed_reason(&refused),
        "the connector gateway is rate limiting requests (retry after 1.000 s)"
    );
    assert_eq!(count(&sim.log(), is_mint), mints + 1);

    let result = c.lines.answer(manage)["result"].clone();
    let took = sent.elapsed().as_secs_f64();
    let lag = assert_deadline_settle(&result, TICK);
    assert!(
        took <= DEADLINE + TICK + SLACK,
        "answered after {took:.3} s"
    );
    // Both rows back off a whole second after each 429: reads at about 0 s, 1 s and 2 s.
    // Without the back-off the tick would have made about a hundred.
    let reads = count(&sim.log(), is_read);
    let bound = 2 * ((DEADLINE / 1.0).ceil() as usize + 1);
    assert!(
        (2..=bound).contains(&reads),
        "{reads} account reads in a {DEADLINE} s 429 storm (bound {bound})"
    );
    eprintln!(
        "429 storm: {reads} reads (bound {bound}), slowest status {slowest:?}, settled {lag:.3} s after the deadline"
    );
    assert_no_panic(&mut gw);
}

// ---- 5. garbage bodies ------------------------------------------------------------------------

/// A connect in session `g` whose mint is answered 200 with `body`: the error text of
/// docs/contract.md#prepare, one mint; returns the reason inside the text.
fn refused_mint<W: Write>(sim: &Sim, c: &mut Client<W>, body: String) -> String {
    let mints = count(&sim.log(), is_mint);
    sim.faults(json!([{"route": "mint", "status": 200, "body": body}]));
    let result = c.call(
        "connectors.manage",
        json!({"session_id": "g", "args": {"action": "connect", "connectors": ["gmail"]}}),
    )["result"]
        .clone();
    assert_eq!(count(&sim.log(), is_mint), mints + 1, "one mint");
    failed_reason(&result)
}

#[test]
fn garbage_bodies_fail_the_mint_with_the_gateway_error_text_and_nothing_panics() {
    let sim = Sim::start();
    let mut gw = sim.timed(5.0, 0.05);
    let pid = gw.pid();
    let c = &mut gw.client;
    desktop(c, "g");
    let cases: [(&str, String); 6] = [
        (
            "not JSON",
            "<html><body>502 Bad Gateway</body></html>".into(),
        ),
        (
            "truncated",
            r#"{"results": [{"connector": "gmail", "status": "initi"#.into(),
        ),
        ("not an object", "[1, 2, 3]".into()),
        ("no results list", r#"{"results": 5}"#.into()),
        (
            "a status outside the set",
            r#"{"results": [{"connector": "gmail", "status": "sideways"}]}"#.into(),
        ),
        (
            "a row of the wrong type",
            r#"{"results": ["gmail"]}"#.into(),
        ),
    ];
    for (what, body) in cases {
        let reason = refused_mint(&sim, c, body);
        eprintln!("{what}: {reason}");
        assert!(
            reason.starts_with("the connector gateway sent an invalid response: "),
            "{what}: {reason}"
        );
    }
    // 48 MiB answers, garbage or well-formed: abandoned past the client's 4 MiB limit.
    let base = proc_kib(pid, "VmHWM");
    let pad = "x".repeat(48 << 20);
    for body in [pad.clone(), format!(r#"{{"results": [], "pad": "{pad}"}}"#)] {
        let reason = refused_mint(&sim, c, body);
        assert_eq!(reason, "the answer is larger than 4 MiB");
    }
    let peak = proc_kib(pid, "VmHWM");
    eprintln!("huge answers: VmHWM {base} KiB -> {peak} KiB");
    assert!(
        peak < base + 24 * 1024,
        "the binary's peak RSS grew from {base} KiB to {peak} KiB"
    );

    // Garbage account answers move nothing; the row connects once the reads make sense.
    sim.faults(json!([{"route": "account", "status": 200, "body": "{\"status\": ", "count": 3}]));
    let result = connect_at_the_vendor(c, "g", "notion");
    assert_eq!(result["settled_by"], "all_resolved", "{result}");
    assert_eq!(states(&result), ["connected"]);

    // And a garbage list is a 5034, not a crash.
    sim.faults(json!([{"route": "list", "status": 200, "body": "{\"items\": {}}"}]));
    let failed = c.call("connectors.list", json!({"session_id": "g"}));
    assert_eq!(failed["error"]["code"], 5034, "{failed}");

    assert_no_panic(&mut gw);
    let c = &mut gw.client;
    create(c, json!({"session_id": "still-here"}));
}

// ---- 6. a client that disconnects mid-operation ----------------------------------------------

#[test]
fn a_client_that_disconnects_mid_operation_interrupts_it_and_leaks_nothing() {
    let sim = Sim::start();
    let mut gw = sim.gateway(&[
        "--stdio",
        "--listen",
        "tcp:127.0.0.1:0",
        "--deadline",
        "30",
        "--tick",
        "0.05",
    ]);
    let (addr, port) = tcp_addr(&gw.listening());

    // Half-closed (EOF) mid-operation: the operation settles `interrupt` and the pending
    // manage still gets that answer before the binary closes the connection.
    let (mut a, stream) = tcp(&addr);
    create(
        &mut a,
        json!({"session_id": "a", "session_key": "ka", "source": "desktop"}),
    );
    let manage = connect(&mut a, "a", &["gmail"]);
    let (_, gmail) = card(&a.lines, "a", "gmail");
    sim.wait_log("a read of the row", |log| reads_of(log, &gmail) >= 1);
    stream.shutdown(Shutdown::Write).expect("half-close");
    let result = a.lines.answer(manage)["result"].clone();
    assert_eq!(result["settled_by"], "interrupt", "{result}");
    assert_eq!(states(&result), ["not_connected"]);
    // docs/protocol.md#sessions: closing interrupts, then forgets the session, so its owner still
    // gets the settle frame, written before the manage answer (every line before it is read by
    // now).
    let frames = a.lines.events("connection.update");
    let settle = frames
        .iter()
        .find(|f| f["payload"]["settled"] == true)
        .unwrap_or_else(|| panic!("no settle frame before the answer: {frames:?}"));
    assert_eq!(settle["payload"]["settled_by"], "interrupt", "{settle}");

    // Gone for good mid-operation: the key's operation is closed (settled, well before its
    // 30 s deadline, so by the interrupt) and the key opens a new operation at once.
    let (mut b, stream) = tcp(&addr);
    create(
        &mut b,
        json!({"session_id": "b", "session_key": "kb", "source": "desktop"}),
    );
    connect(&mut b, "b", &["notion"]);
    let (op_id, notion) = card(&b.lines, "b", "notion");
    sim.wait_log("a read of the row", |log| reads_of(log, &notion) >= 1);
    stream.shutdown(Shutdown::Both).expect("close");
    let c = &mut gw.client;
    create_when_free(
        c,
        json!({"session_id": "b2", "session_key": "kb", "source": "desktop"}),
    );
    let status = c.call(
        "connectors.operation.status",
        json!({"session_id": "b2", "op_id": op_id}),
    );
    assert_eq!(status["error"]["code"], 4004, "{status}");
    let settled_reads = reads_of(&sim.log(), &notion);
    let manage = connect(c, "b2", &["slack"]);
    let (_, slack) = card(&c.lines, "b2", "slack");
    sim.wait_log("five reads of the new row", |log| {
        reads_of(log, &slack) >= 5
    });
    assert_eq!(
        reads_of(&sim.log(), &notion),
        settled_reads,
        "a read after the settle"
    );
    c.call("session.interrupt", json!({"session_id": "b2"}));
    assert_eq!(c.lines.answer(manage)["result"]["settled_by"], "interrupt");

    // Gone during prepare (the mint stalls): the key is free at once, the late mint answer is
    // dropped (its account is never read).
    sim.faults(json!([{"route": "mint", "delay_ms": 1000}]));
    let (mut p, stream) = tcp(&addr);
    create(
        &mut p,
        json!({"session_id": "p", "session_key": "kp", "source": "desktop"}),
    );
    let mints = count(&sim.log(), is_mint);
    connect(&mut p, "p", &["github"]);
    sim.wait_log("the stalled mint", |log| count(log, is_mint) > mints);
    stream.shutdown(Shutdown::Both).expect("close");
    let c = &mut gw.client;
    create_when_free(
        c,
        json!({"session_id": "p2", "session_key": "kp", "source": "desktop"}),
    );
    let manage = connect(c, "p2", &["linear"]);
    let (_, linear) = card(&c.lines, "p2", "linear");
    sim.wait_log("reads of the new row", |log| reads_of(log, &linear) >= 1);

    // Many clients vanish with an operation open and its manage pending: every session id
    // and key is free again, and the binary keeps no socket of theirs.
    let pid = gw.pid();
    let fds = open_fds(pid);
    for i in 0..40 {
        let (mut x, stream) = tcp(&addr);
        let sid = format!("x{i}");
        create(&mut x, json!({"session_id": sid, "source": "desktop"}));
        connect(&mut x, &sid, &["google_calendar"]);
        card(&x.lines, &sid, "google_calendar");
        stream.shutdown(Shutdown::Both).expect("close");
    }
    let c = &mut gw.client;
    for i in 0..40 {
        create_when_free(c, json!({"session_id": format!("x{i}")}));
    }
    let until = Instant::now() + BOUND;
    while !accepted_sockets(port).is_empty() {
        assert!(
            Instant::now() < until,
            "sockets of closed clients kept: {:?}",
            accepted_sockets(port)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let after = open_fds(pid);
    eprintln!("disconnects: fds {fds} -> {after}");
    // Idle pooled connections to the tool gateway may differ by a few; 40 kept transports
    // would not.
    assert!(after <= fds + 8, "open fds {fds} -> {after}");

    // Thousands of short connections leave nothing behind: the resident size stays flat.
    let cycle = |n: usize| {
        for _ in 0..n {
            let stream = TcpStream::connect(&addr).expect("connect");
            stream.set_read_timeout(Some(BOUND)).expect("timeout");
            (&stream)
                .write_all(b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"session.create\"}\n")
                .expect("write");
            let mut answer = String::new();
            BufReader::new(&stream)
                .read_line(&mut answer)
                .expect("an answer");
            assert!(answer.contains("session_key"), "{answer}");
        }
    };
    cycle(500);
    let rss = proc_kib(pid, "VmRSS");
    let started = Instant::now();
    cycle(4000);
    let grown = proc_kib(pid, "VmRSS").saturating_sub(rss);
    eprintln!(
        "4000 connections in {:?}: VmRSS +{grown} KiB",
        started.elapsed()
    );
    assert!(
        grown < 1024,
        "VmRSS grew {grown} KiB over 4000 closed connections"
    );
    c.call("session.interrupt", json!({"session_id": "p2"}));
    assert_eq!(c.lines.answer(manage)["result"]["settled_by"], "interrupt");
    assert!(
        !sim.log().iter().any(|r| r["path"]
            .as_str()
            .is_some_and(|p| p.contains("accounts/ca_github_"))),
        "the dropped mint's account was read"
    );
    assert_no_panic(&mut gw);
}

// ---- 7. oversized lines -------------------------------------------------------------------------

#[test]
fn an_oversized_line_is_refused_with_bounded_memory_and_the_transport_stays_usable() {
    let sim = Sim::start();
    let mut gw = sim.gateway(&["--stdio", "--listen", "tcp:127.0.0.1:0"]);
    let (addr, _) = tcp_addr(&gw.listening());
    let pid = gw.pid();
    let (mut t, mut stream) = tcp(&addr);
    create(&mut t, json!({"session_id": "warm"}));
    let base = proc_kib(pid, "VmHWM");

    // 64 MiB without a newline, 1 MiB at a time; a binary that stopped reading would make a
    // write time out.
    stream.set_write_timeout(Some(BOUND)).expect("timeout");
    let started = Instant::now();
    stream
        .write_all(
            br#"{"jsonrpc": "2.0", "id": 1, "method": "session.create", "params": {"pad": ""#,
        )
        .expect("write");
    let chunk = vec![b'x'; 1 << 20];
    let mut rss_max = 0;
    for i in 0..64 {
        stream.write_all(&chunk).expect("the binary keeps reading");
        if i % 8 == 7 {
            rss_max = rss_max.max(proc_kib(pid, "VmRSS"));
        }
    }
    stream.write_all(b"\"}}\n").expect("write");
    assert_eq!(t.lines.null_id_error(), -32600);
    let took = started.elapsed();
    let peak = proc_kib(pid, "VmHWM");
    eprintln!(
        "64 MiB line: VmHWM {base} -> {peak} KiB, VmRSS max {rss_max} KiB, refused after {took:?}"
    );
    assert!(
        peak < base + 16 * 1024,
        "the binary's peak RSS grew from {base} KiB to {peak} KiB"
    );
    assert!(!t.lines.answered(1), "the oversized request is not served");
    // The same transport goes on.
    let after = t.call("session.create", json!({"session_id": "after"}));
    assert_eq!(after["result"]["session_id"], "after", "{after}");

    // An oversized line cut by the end of the input: refused, then a clean close.
    let mut cut = TcpStream::connect(&addr).expect("connect");
    cut.set_read_timeout(Some(BOUND)).expect("timeout");
    cut.write_all(&vec![b'y'; 4 << 20]).expect("write");
    cut.shutdown(Shutdown::Write).expect("half-close");
    let mut answer = String::new();
    cut.read_to_string(&mut answer)
        .expect("the binary closes the connection");
    let lines: Vec<Value> = answer
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(lines.len(), 1, "{answer}");
    assert_eq!(lines[0]["error"]["code"], -32600);
    assert_eq!(
        lines[0]["error"]["message"],
        "the line is longer than 1 MiB"
    );
    assert_eq!(lines[0]["id"], Value::Null);

    let c = &mut gw.client;
    create(c, json!({"session_id": "stdio"}));
    assert_no_panic(&mut gw);
}

// ---- 8. a flood on one transport ------------------------------------------------------------------

#[test]
fn twenty_thousand_pipelined_requests_get_one_answer_each_in_order() {
    const N: u64 = 20_000;
    let sim = Sim::start();
    let mut gw = sim.gateway(&["--stdio", "--listen", "tcp:127.0.0.1:0"]);
    let (addr, _) = tcp_addr(&gw.listening());
    let pid = gw.pid();
    let stream = TcpStream::connect(&addr).expect("connect");
    stream.set_write_timeout(Some(BOUND)).expect("timeout");
    stream.set_read_timeout(Some(BOUND)).expect("timeout");
    let base = proc_kib(pid, "VmHWM");

    // Request i (id i + 1): a session, its status (4004), an unknown method, its interrupt
    // (nothing open), and a stranger's interrupt (4001); every 1000th a list, which waits for
    // the tool gateway and may overtake or be overtaken.
    let mut requests = Vec::new();
    for i in 0..N {
        let sid = format!("f{}", i - i % 5);
        let (method, params) = match i % 5 {
            0 => ("session.create", json!({"session_id": sid})),
            1 => (
                "connectors.operation.status",
                json!({"session_id": sid, "op_id": "0123456789ab"}),
            ),
            2 => ("no.such.method", json!({})),
            3 => ("session.interrupt", json!({"session_id": sid})),
            _ if i % 1000 == 4 => ("connectors.list", json!({"session_id": sid})),
            _ => ("session.interrupt", json!({"session_id": "nobody"})),
        };
        let line = json!({"jsonrpc": "2.0", "id": i + 1, "method": method, "params": params});
        requests.extend_from_slice(line.to_string().as_bytes());
        requests.push(b'\n');
    }
    let started = Instant::now();
    let mut writer = stream.try_clone().expect("clone");
    let writing = std::thread::spawn(move || writer.write_all(&requests).map(|()| requests.len()));
    // Nothing is read until every request is written: a binary that stopped reading while its
    // answers pile up would make the write time out.
    let written = writing
        .join()
        .expect("the writer")
        .expect("every request is written");
    let wrote = started.elapsed();

    let mut seen = vec![false; N as usize + 1];
    let mut last_immediate = 0;
    let mut lists = 0;
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    for _ in 0..N {
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .expect("an answer within the bound");
        let answer: Value = serde_json::from_str(&line).expect("JSON");
        let id = answer["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("an id: {answer}"));
        assert!(
            !std::mem::replace(&mut seen[id as usize], true),
            "two answers to {id}"
        );
        let i = id - 1;
        match i % 5 {
            0 => assert_eq!(answer["result"]["session_id"], format!("f{i}"), "{answer}"),
            1 => assert_eq!(answer["error"]["code"], 4004, "{answer}"),
            2 => assert_eq!(answer["error"]["code"], -32601, "{answer}"),
            3 => assert_eq!(answer["result"]["interrupted"], false, "{answer}"),
            _ if i % 1000 == 4 => {
                assert_eq!(answer["result"]["available"], true, "{answer}");
                lists += 1;
                continue;
            }
            _ => assert_eq!(answer["error"]["code"], 4001, "{answer}"),
        }
        assert!(id > last_immediate, "answer {id} after {last_immediate}");
        last_immediate = id;
    }
    let took = started.elapsed();
    assert_eq!(lists, N / 1000);
    assert!(seen[1..].iter().all(|s| *s));
    let peak = proc_kib(pid, "VmHWM");
    eprintln!(
        "flood: {N} requests ({written} bytes) written in {wrote:?}, all answered in {took:?}; VmHWM {base} -> {peak} KiB"
    );
    assert!(
        peak < base + 64 * 1024,
        "the binary's peak RSS grew from {base} KiB to {peak} KiB"
    );
    // Nothing more, and the transport still serves.
    assert!(reader.buffer().is_empty(), "an answer too many");
    let mut c = Client::new(
        stream.try_clone().expect("clone"),
        Lines::spawn_reader(reader.into_inner()),
    );
    let again = c.call("session.create", json!({"session_id": "again"}));
    assert_eq!(again["result"]["session_id"], "again", "{again}");
    assert_no_panic(&mut gw);
}
