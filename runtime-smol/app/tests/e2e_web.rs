//! Web pages and other local processes against the loopback listeners, through the real
//! binary: the HTTP API (`gateway --http`), the simulated tool gateway (`sim-gateway`),
//! `connect`'s return URL and a JSON-RPC TCP listener. A foreign `Host` (DNS rebinding), a
//! cross-site write, an HTTP request on the JSON-RPC protocol, bodies too large or too slow,
//! a malformed `Idempotency-Key` or `returnTo`: each is refused before it changes anything.
//! Requests are written by hand on a socket where a client library would fix what the test
//! means to send. Waits are socket reads with a bound; nothing sleeps to synchronize.

mod support;

use connop_app::net::guard::READ_TIMEOUT;
use connop_app::sim_gateway::{SimOptions, SimToolGateway};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use support::http_api::Api;
use support::stores::{Place, StoreKind};
use support::{BOUND, Gateway, StderrLog, connop, output_bounded, spawn_logging};

const TOKEN: &str = "web-token";

/// One answer read off a socket.
#[derive(Debug)]
struct Answer {
    /// `None`: the server closed the connection without answering.
    status: Option<u16>,
    head: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Reads one HTTP answer from `stream` (its head, then `Content-Length` bytes of body), or
/// the end of the connection; at most `bound`.
fn read_answer(stream: &mut TcpStream, bound: Duration) -> Answer {
    let deadline = Instant::now() + bound;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    let head_end = loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break Some(end + 4);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let received = || String::from_utf8_lossy(&bytes).into_owned();
        assert!(
            !left.is_zero(),
            "no answer within {bound:?}: {:?}",
            received()
        );
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut chunk) {
            Ok(0) => break None,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            // A reset after the server gave up: the end, too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break None,
            Err(e) => panic!(
                "no answer within {bound:?} ({e}), received {:?}",
                received()
            ),
        }
    };
    let Some(head_end) = head_end else {
        assert!(
            bytes.is_empty(),
            "a partial answer: {:?}",
            String::from_utf8_lossy(&bytes)
        );
        return Answer {
            status: None,
            head: String::new(),
            body: String::new(),
        };
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).into_owned();
    let mut answer = Answer {
        status: head.split_whitespace().nth(1).and_then(|s| s.parse().ok()),
        head,
        body: String::new(),
    };
    let length: usize = answer
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = bytes[head_end..].to_vec();
    while body.len() < length {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no whole body within {bound:?}");
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    answer.body = String::from_utf8_lossy(&body).into_owned();
    answer
}

/// `http://127.0.0.1:PORT…` → `127.0.0.1:PORT`.
fn authority(url: &str) -> String {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    rest.split('/').next().unwrap_or(rest).to_owned()
}

/// Sends `head` (the request line and headers, each ending in CRLF, without the blank line),
/// then `body`, on a fresh connection to `url`'s authority; the answer.
fn send(url: &str, head: &str, body: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(authority(url)).expect("the listener answers");
    let mut request = format!("{head}\r\n").into_bytes();
    request.extend_from_slice(body);
    // A server that answers before reading everything may close mid-write.
    let _ = stream.write_all(&request);
    read_answer(&mut stream, BOUND)
}

/// A request with `Content-Length` set from `body`.
fn request(
    method: &str,
    url: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    send(url, &head, body.as_bytes())
}

/// `connop sim-gateway --token` with `args`, and its URL.
struct SimProcess {
    child: Child,
    url: String,
    _log: StderrLog,
}

impl SimProcess {
    fn start(args: &[&str]) -> Self {
        let mut command = connop();
        command
            .args(["sim-gateway", "--listen", "127.0.0.1:0", "--token", TOKEN])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let (child, listening, log) = spawn_logging(&mut command);
        let url = listening
            .recv_timeout(BOUND)
            .unwrap_or_else(|_| panic!("the simulated gateway listens: {:?}", log.lines()));
        SimProcess {
            child,
            url,
            _log: log,
        }
    }

    fn host(&self) -> String {
        authority(&self.url)
    }

    /// A JSON request with the token, from no page at all.
    fn json(&self, method: &str, path: &str, body: &Value) -> Answer {
        let auth = format!("Bearer {TOKEN}");
        request(
            method,
            &self.url,
            path,
            &self.host(),
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            &if body.is_null() {
                String::new()
            } else {
                body.to_string()
            },
        )
    }

    /// Mints `connector`; its connection id.
    fn mint(&self, connector: &str) -> String {
        let answer = self.json(
            "POST",
            "/v1/connectors/connections",
            &json!({"connectors": [connector], "reinitiate": true}),
        );
        assert_eq!(answer.status, Some(200), "{answer:?}");
        answer.json()["results"][0]["connectionId"]
            .as_str()
            .expect("a connection id")
            .to_owned()
    }

    fn status_of(&self, id: &str) -> String {
        let answer = self.json(
            "GET",
            &format!("/v1/connectors/accounts/{id}"),
            &Value::Null,
        );
        assert_eq!(answer.status, Some(200), "{answer:?}");
        answer.json()["status"].as_str().unwrap_or("").to_owned()
    }

    /// The nonce of a freshly shown consent page of `id`.
    fn nonce(&self, id: &str) -> String {
        let page = request(
            "GET",
            &self.url,
            &format!("/connect/{id}"),
            &self.host(),
            &[],
            "",
        );
        assert_eq!(page.status, Some(200), "{page:?}");
        let marker = r#"<input type="hidden" name="nonce" value=""#;
        let start = page.body.find(marker).expect("a consent form") + marker.len();
        page.body[start..].split('"').next().unwrap().to_owned()
    }

    /// Posts the consent form of `id` with `origin` (if any).
    fn decide(&self, id: &str, origin: Option<&str>) -> Answer {
        let body = format!("nonce={}&decision=approve", self.nonce(id));
        let mut headers = vec![("Content-Type", "application/x-www-form-urlencoded")];
        if let Some(origin) = origin {
            headers.push(("Origin", origin));
        }
        request(
            "POST",
            &self.url,
            &format!("/connect/{id}"),
            &self.host(),
            &headers,
            &body,
        )
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `connop connect gmail` against an in-process simulated gateway with a loopback return URL;
/// the process and the URL it serves.
struct Connecting {
    child: Child,
    url: String,
    sim: SimToolGateway,
    log: StderrLog,
}

impl Connecting {
    fn start() -> Self {
        let sim = SimToolGateway::start(SimOptions::default().token(TOKEN)).expect("sim starts");
        let mut command = connop();
        command
            .env("CONNECTOR_GATEWAY_URL", sim.url())
            .env("CONNECTOR_GATEWAY_TOKEN", TOKEN)
            .env("CONNOP_RETURN_URL", "loopback")
            .args(["connect", "gmail", "--tick", "60", "--deadline", "60"])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let (child, _listening, log) = spawn_logging(&mut command);
        let line = log.wait_for("the return listener", |l| {
            l.contains("listener up") && l.contains("return:")
        });
        let start = line.find("return:").expect("return:") + "return:".len();
        let url = line[start..]
            .split_whitespace()
            .next()
            .expect("a URL")
            .trim_matches('"')
            .to_owned();
        log.wait_for("the card", |l| l.starts_with("connop · op "));
        Connecting {
            child,
            url,
            sim,
            log,
        }
    }

    /// How many times the tool gateway read an account so far.
    fn reads(&self) -> usize {
        self.sim
            .log()
            .iter()
            .filter(|r| r.path.starts_with("/v1/connectors/accounts/"))
            .count()
    }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The HTTP API on a fresh SQLite store with `args`.
fn api(args: &[&str]) -> (Api, Place) {
    let place = Place::new(StoreKind::Sqlite);
    (Api::start(&place, args), place)
}

fn session_ids(api: &Api) -> Vec<String> {
    let (status, sessions) = api.get("/api/sessions");
    assert_eq!(status, 200, "{sessions}");
    sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn every_listener_refuses_a_host_it_was_not_bound_for() {
    let (api, _place) = api(&[]);
    let host = authority(&api.url);
    let port = host.rsplit_once(':').unwrap().1.to_owned();
    // A page of attacker.example whose name now resolves to 127.0.0.1 (DNS rebinding).
    let rebound = format!("attacker.example:{port}");
    let refused = request("GET", &api.url, "/api/sessions", &rebound, &[], "");
    assert_eq!(refused.status, Some(421), "{refused:?}");
    let message = refused.json()["error"]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(message.contains(&rebound), "{message}");
    assert_eq!(refused.json()["error"]["code"], "misdirected_host");
    for served in [
        host.clone(),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        "127.0.0.1".to_owned(),
        format!("[::1]:{port}"),
    ] {
        let answer = request("GET", &api.url, "/api/sessions", &served, &[], "");
        assert_eq!(answer.status, Some(200), "{served}: {answer:?}");
    }
    for refused_host in [
        "localhost.attacker.example".to_owned(),
        format!("127.0.0.1.nip.io:{port}"),
        format!("[::2]:{port}"),
        String::new(),
    ] {
        let answer = request("GET", &api.url, "/health", &refused_host, &[], "");
        assert_eq!(answer.status, Some(421), "{refused_host:?}: {answer:?}");
    }

    // The simulated gateway: a rebound page must not read a consent page's nonce.
    let sim = SimProcess::start(&[]);
    let id = sim.mint("gmail");
    let sim_port = sim.host().rsplit_once(':').unwrap().1.to_owned();
    let rebound = format!("attacker.example:{sim_port}");
    let page = request(
        "GET",
        &sim.url,
        &format!("/connect/{id}"),
        &rebound,
        &[],
        "",
    );
    assert_eq!(page.status, Some(421), "{page:?}");
    assert!(!page.body.contains("nonce"), "{}", page.body);
    assert!(page.body.contains("attacker.example"), "{}", page.body);
    let auth = format!("Bearer {TOKEN}");
    let list = request(
        "GET",
        &sim.url,
        "/v1/connectors",
        &rebound,
        &[("Authorization", &auth)],
        "",
    );
    assert_eq!(list.status, Some(421), "{list:?}");

    // `connect`'s return URL.
    let connecting = Connecting::start();
    let path = format!("/returned?connection_id={id}&status=active");
    let reads = connecting.reads();
    let back = request(
        "GET",
        &connecting.url,
        &path,
        &format!(
            "attacker.example:{}",
            authority(&connecting.url).rsplit_once(':').unwrap().1
        ),
        &[],
        "",
    );
    assert_eq!(back.status, Some(421), "{back:?}");
    let ok = request(
        "GET",
        &connecting.url,
        &path,
        &authority(&connecting.url),
        &[],
        "",
    );
    assert_eq!(ok.status, Some(200), "{ok:?}");
    // The accepted return reads the account at once; the refused one read nothing.
    let asked = Instant::now();
    while connecting.reads() < reads + 1 {
        assert!(asked.elapsed() < BOUND, "{:?}", connecting.log.lines());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn cross_site_writes_to_the_http_api_are_refused_and_its_own_origin_is_served() {
    let marker = std::env::temp_dir().join(format!(
        "connop-web-agent-{}",
        connop_app::sync::random_hex(6)
    ));
    let agent = format!("cat >> {}; echo done", marker.display());
    let (api, _place) = api(&["--agent-cmd", &agent]);
    let host = authority(&api.url);
    let run = |session: &str| json!({"input": "from a page", "session_id": session}).to_string();
    let post = |path: &str, headers: &[(&str, &str)], body: &str| {
        request("POST", &api.url, path, &host, headers, body)
    };
    // What a page's `fetch(…, {mode: 'no-cors', body})` or form sends.
    for content_type in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonp",
    ] {
        let answer = post(
            "/v1/runs",
            &[("Content-Type", content_type)],
            &run("xs-type"),
        );
        assert_eq!(answer.status, Some(415), "{content_type}: {answer:?}");
        assert_eq!(answer.json()["error"]["code"], "unsupported_media_type");
        assert!(
            answer.json()["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("application/json"),
            "{answer:?}"
        );
    }
    let answer = post("/v1/runs", &[], &run("xs-none"));
    assert_eq!(
        answer.status,
        Some(415),
        "a body without a type: {answer:?}"
    );
    for origin in [
        "http://evil.example",
        "null",
        "http://127.0.0.1:1",
        "https://evil.example",
    ] {
        let answer = post(
            "/v1/runs",
            &[("Content-Type", "application/json"), ("Origin", origin)],
            &run("xs-origin"),
        );
        assert_eq!(answer.status, Some(403), "{origin}: {answer:?}");
        assert_eq!(answer.json()["error"]["code"], "cross_origin_write");
    }
    // Session chat and session creation, the same.
    api.create_session("chat-me", "Bot Chat", "api_server");
    let chat = post(
        "/api/sessions/chat-me/chat",
        &[("Content-Type", "text/plain")],
        &json!({"message": "hi"}).to_string(),
    );
    assert_eq!(chat.status, Some(415), "{chat:?}");
    let made = post(
        "/api/sessions",
        &[
            ("Content-Type", "application/json"),
            ("Origin", "http://evil.example"),
        ],
        &json!({"session_id": "xs-session"}).to_string(),
    );
    assert_eq!(made.status, Some(403), "{made:?}");
    assert_eq!(
        session_ids(&api),
        ["chat-me"],
        "no refused write made a session"
    );
    assert!(!marker.exists(), "no agent command ran");

    // Programs (no Origin) and the listener's own origin are served.
    let own = format!("http://{host}");
    for headers in [
        vec![("Content-Type", "application/json")],
        vec![
            ("Content-Type", "application/json; charset=utf-8"),
            ("Origin", own.as_str()),
        ],
    ] {
        let answer = post("/v1/runs", &headers, &run("served"));
        assert_eq!(answer.status, Some(202), "{headers:?}: {answer:?}");
    }
    // A stop carries no body, and needs no type.
    let id = api.start_run(&json!({"input": "x", "session_id": "served"}));
    let stop = post(&format!("/v1/runs/{id}/stop"), &[], "");
    assert_eq!(stop.status, Some(200), "{stop:?}");
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn cross_site_writes_to_the_simulated_gateway_are_refused_and_its_own_form_decides() {
    let sim = SimProcess::start(&[]);
    let auth = format!("Bearer {TOKEN}");
    let mint = json!({"connectors": ["gmail"], "reinitiate": true}).to_string();
    let text = request(
        "POST",
        &sim.url,
        "/v1/connectors/connections",
        &sim.host(),
        &[("Authorization", &auth), ("Content-Type", "text/plain")],
        &mint,
    );
    assert_eq!(text.status, Some(415), "{text:?}");
    let foreign = request(
        "POST",
        &sim.url,
        "/v1/connectors/connections",
        &sim.host(),
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Origin", "http://evil.example"),
        ],
        &mint,
    );
    assert_eq!(foreign.status, Some(403), "{foreign:?}");
    let state = request(
        "POST",
        &sim.url,
        "/sim/state",
        &sim.host(),
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        r#"{"connected": ["gmail"]}"#,
    );
    assert_eq!(state.status, Some(415), "{state:?}");

    // The consent form: another site's page, or a sandboxed one (`Origin: null`), decides
    // nothing even with a valid nonce; the page's own form does.
    let id = sim.mint("gmail");
    for origin in ["http://evil.example", "null", "http://localhost:1"] {
        let refused = sim.decide(&id, Some(origin));
        assert_eq!(refused.status, Some(403), "{origin}: {refused:?}");
        assert!(
            refused.body.contains("Nothing was changed"),
            "{}",
            refused.body
        );
        assert_eq!(sim.status_of(&id), "pending", "{origin}");
    }
    let own = format!("http://{}", sim.host());
    let decided = sim.decide(&id, Some(&own));
    assert_eq!(decided.status, Some(200), "{decided:?}");
    assert_eq!(sim.status_of(&id), "active");
    // A program posting the form (no Origin) still decides.
    let id = sim.mint("notion");
    assert_eq!(sim.decide(&id, None).status, Some(200));
    assert_eq!(sim.status_of(&id), "active");
}

#[test]
fn a_keyless_http_api_stays_loopback_only_and_says_any_local_process_may_use_it() {
    let place = Place::new(StoreKind::Sqlite);
    let offline = |args: &[&str]| {
        let mut command = connop();
        command
            .env("CONNOP_HOME", place.home())
            .env("CONNECTOR_GATEWAY_URL", "http://127.0.0.1:9")
            .env("CONNECTOR_GATEWAY_TOKEN", "unused")
            .arg("gateway")
            .args(args)
            .stdin(Stdio::null());
        output_bounded(&mut command)
    };
    let out = offline(&["--http", "0.0.0.0:0", "--allow-remote"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--api-key"), "{stderr}");
    // --allow-host only ever widens a listener that --allow-remote opened.
    let out = offline(&["--http", "127.0.0.1:0", "--allow-host", "api.example.test"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = offline(&[
        "--http",
        "127.0.0.1:0",
        "--allow-remote",
        "--allow-host",
        "api.example.test",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--api-key"), "{stderr}");

    // Keyless on loopback: served, and the start-up says who can use it. With a key it does
    // not; the line would come before the listener's `listener up`.
    let start = |args: &[&str]| {
        let home = Place::new(StoreKind::Sqlite);
        let mut command = connop();
        command
            .env("CONNOP_HOME", home.home())
            .env("CONNECTOR_GATEWAY_URL", "http://127.0.0.1:9")
            .env("CONNECTOR_GATEWAY_TOKEN", "unused")
            .args(["gateway", "--http", "127.0.0.1:0"])
            .args(args)
            .stdin(Stdio::null());
        let (child, listening, log) = spawn_logging(&mut command);
        let url = listening.recv_timeout(BOUND).expect("the API listens");
        log.wait_for("the listener up", |l| {
            l.contains("listener up") && l.contains("http:")
        });
        ((Killed(child), home), url, log)
    };
    let (_keyless, _, log) = start(&[]);
    let said = log.wait_for("who may use it", |l| l.contains("any local process"));
    assert!(
        said.contains("--api-key") && said.contains("WARN"),
        "{said}"
    );
    let (_keyed, url, log) = start(&[
        "--api-key",
        "k",
        "--allow-remote",
        "--allow-host",
        "API.example.test",
    ]);
    assert!(
        !log.lines().iter().any(|l| l.contains("any local process")),
        "{:?}",
        log.lines()
    );
    let keyed = Api::client(&url, Some("k"));
    let port = authority(&keyed.url).rsplit_once(':').unwrap().1.to_owned();
    let get = |host: &str| {
        request(
            "GET",
            &keyed.url,
            "/api/sessions",
            host,
            &[("Authorization", "Bearer k")],
            "",
        )
    };
    assert_eq!(get(&format!("api.example.test:{port}")).status, Some(200));
    assert_eq!(get("api.example.test").status, Some(200));
    assert_eq!(get(&format!("other.example.test:{port}")).status, Some(421));
}

#[test]
fn consent_link_ids_are_unguessable() {
    let sim = SimProcess::start(&[]);
    let ids: Vec<String> = (0..3).map(|_| sim.mint("gmail")).collect();
    for id in &ids {
        let token = id.strip_prefix("ca_gmail_").expect("ca_<connector>_…");
        assert_eq!(token.len(), 32, "128 bits in hex: {id}");
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{id}"
        );
    }
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "{ids:?}"
    );
    // The ids of old are nobody's.
    for guess in ["ca_gmail_1", "ca_gmail_2", "ca_gmail_3"] {
        let page = request(
            "GET",
            &sim.url,
            &format!("/connect/{guess}"),
            &sim.host(),
            &[],
            "",
        );
        assert_eq!(page.status, Some(404), "{guess}");
    }
}

#[test]
fn an_http_request_on_a_json_rpc_listener_is_closed_unanswered_and_runs_nothing() {
    let sim = SimToolGateway::start(SimOptions::default().token(TOKEN)).expect("sim starts");
    let gw = Gateway::start_against(&sim.url(), TOKEN, &["--listen", "tcp:127.0.0.1:0"]);
    let addr = gw.listening();
    let addr = addr.strip_prefix("tcp://").expect("tcp://").to_owned();
    // What a page's `fetch('http://127.0.0.1:PORT/', {method: 'POST', mode: 'no-cors', body})`
    // sends: its headers, then the page's lines.
    let body = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "session.create", "params": {"session_id": "web"}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "connectors.manage", "params": {"session_id": "web", "args": {"action": "connect", "connectors": ["gmail"]}}}),
    ]
    .map(|line| format!("{line}\n"))
    .concat();
    for request_line in ["POST / HTTP/1.1", "GET /x?y HTTP/1.0", "PUT * HTTP/2.0"] {
        let mut stream = TcpStream::connect(&addr).unwrap();
        let request = format!(
            "{request_line}\r\nHost: {addr}\r\nOrigin: http://evil.example\r\nContent-Type: text/plain\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let answer = read_answer(&mut stream, BOUND);
        assert_eq!(answer.status, None, "{request_line}: {answer:?}");
        gw.stderr_line("the warning", |l| {
            l.contains("WARN") && l.contains("HTTP request")
        });
    }
    // A JSON-RPC client on the same listener is served as before.
    let mut stream = TcpStream::connect(&addr).unwrap();
    stream
        .write_all(
            format!(
                "{}\n",
                json!({"jsonrpc": "2.0", "id": 7, "method": "session.create", "params": {"session_id": "web"}})
            )
            .as_bytes(),
        )
        .unwrap();
    stream.set_read_timeout(Some(BOUND)).unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while stream.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let answer: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(answer["id"], 7, "{answer}");
    assert!(
        answer.get("error").is_none(),
        "the session was free: {answer}"
    );
    let mints = sim
        .log()
        .iter()
        .filter(|r| r.path == "/v1/connectors/connections")
        .count();
    assert_eq!(mints, 0, "nothing in the HTTP requests ran");
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Headers announcing a body of 400 MB, and only the first bytes of it.
fn huge(method: &str, path: &str, host: &str, extra: &str) -> String {
    format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Content-Length: 400000000\r\n")
}

/// Sends a chunked body of 2 MiB in 64 KiB chunks (or until the server stops reading).
fn chunked(url: &str, head: &str) -> Answer {
    let mut stream = TcpStream::connect(authority(url)).unwrap();
    stream
        .write_all(format!("{head}Transfer-Encoding: chunked\r\n\r\n").as_bytes())
        .unwrap();
    let chunk = format!("{:x}\r\n{}\r\n", 64 << 10, "x".repeat(64 << 10));
    for _ in 0..32 {
        if stream.write_all(chunk.as_bytes()).is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n");
    read_answer(&mut stream, BOUND)
}

#[test]
fn bodies_past_the_cap_are_refused_before_authentication_on_every_listener() {
    let sim = SimProcess::start(&[]);
    let json = "Content-Type: application/json\r\n";
    for path in ["/v1/connectors/connections", "/sim/state"] {
        let answer = send(&sim.url, &huge("POST", path, &sim.host(), json), b"{");
        assert_eq!(answer.status, Some(413), "{path}: {answer:?}");
        let head = format!("POST {path} HTTP/1.1\r\nHost: {}\r\n{json}", sim.host());
        let answer = chunked(&sim.url, &head);
        assert_eq!(answer.status, Some(413), "{path} chunked: {answer:?}");
    }
    let form = "Content-Type: application/x-www-form-urlencoded\r\n";
    let answer = send(
        &sim.url,
        &huge("POST", "/connect/x", &sim.host(), form),
        b"n",
    );
    assert_eq!(answer.status, Some(413), "{answer:?}");

    let (api, _place) = api(&["--api-key", "k"]);
    let host = authority(&api.url);
    let answer = send(&api.url, &huge("POST", "/v1/runs", &host, json), b"{");
    assert_eq!(answer.status, Some(413), "{answer:?}");
    assert_eq!(answer.json()["error"]["code"], "body_too_large");

    let connecting = Connecting::start();
    let host = authority(&connecting.url);
    let answer = send(&connecting.url, &huge("GET", "/returned", &host, ""), b"x");
    assert_eq!(answer.status, Some(413), "{answer:?}");
    let answer = chunked(
        &connecting.url,
        &format!("GET /returned HTTP/1.1\r\nHost: {host}\r\n"),
    );
    assert_eq!(answer.status, Some(413), "chunked: {answer:?}");
}

#[test]
fn a_request_that_stalls_is_answered_408_or_closed_within_the_read_timeout() {
    let sim = SimProcess::start(&[]);
    let (api, _place) = api(&[]);
    let connecting = Connecting::start();
    let started = Instant::now();
    let bound = READ_TIMEOUT + Duration::from_secs(8);
    // Each stalls its body (10 of 100 bytes) and its headers (no blank line), all at once.
    let stalls = [
        (
            &sim.url,
            "POST /v1/connectors/connections",
            "application/json",
        ),
        (
            &sim.url,
            "POST /connect/x",
            "application/x-www-form-urlencoded",
        ),
        (&api.url, "POST /v1/runs", "application/json"),
        (&connecting.url, "GET /returned", "text/plain"),
    ]
    .map(|(url, line, content_type)| {
        let host = authority(url);
        let mut body = TcpStream::connect(&host).unwrap();
        body.write_all(
            format!(
                "{line} HTTP/1.1\r\nHost: {host}\r\nContent-Type: {content_type}\r\n\
                 Content-Length: 100\r\n\r\n0123456789"
            )
            .as_bytes(),
        )
        .unwrap();
        let mut head = TcpStream::connect(&host).unwrap();
        head.write_all(format!("{line} HTTP/1.1\r\nHost: {host}\r\n").as_bytes())
            .unwrap();
        (line, body, head)
    });
    for (line, mut body, mut head) in stalls {
        let answer = read_answer(&mut body, bound);
        assert_eq!(answer.status, Some(408), "{line}: {answer:?}");
        assert_eq!(answer.header("connection"), Some("close"), "{line}");
        let answer = read_answer(&mut head, bound);
        assert!(
            matches!(answer.status, None | Some(408)),
            "{line}: {answer:?}"
        );
    }
    let took = started.elapsed();
    assert!(
        took >= READ_TIMEOUT - Duration::from_secs(1),
        "not before the timeout: {took:?}"
    );
}

#[test]
fn idempotency_keys_must_be_printable_ascii_of_at_most_255_bytes() {
    let (api, _place) = api(&[]);
    let host = authority(&api.url);
    let body = json!({"input": "x", "session_id": "keys"}).to_string();
    let with_key = |key: &[u8]| {
        let mut head = format!(
            "POST /v1/runs HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nIdempotency-Key: ",
            body.len()
        )
        .into_bytes();
        head.extend_from_slice(key);
        head.extend_from_slice(b"\r\n\r\n");
        head.extend_from_slice(body.as_bytes());
        let mut stream = TcpStream::connect(&host).unwrap();
        stream.write_all(&head).unwrap();
        read_answer(&mut stream, BOUND)
    };
    let long = "k".repeat(256);
    let tab = b"a\tb".to_vec();
    for bad in [
        "é".as_bytes().to_vec(),
        b"\xff\xfe".to_vec(),
        long.as_bytes().to_vec(),
        tab,
        Vec::new(),
    ] {
        for _ in 0..2 {
            let answer = with_key(&bad);
            assert_eq!(answer.status, Some(400), "{bad:?}: {answer:?}");
            assert_eq!(answer.json()["error"]["code"], "invalid_idempotency_key");
        }
    }
    let (status, runs) = api.get("/api/sessions");
    assert_eq!(status, 200);
    assert!(
        !runs.to_string().contains("\"keys\""),
        "no run was made: {runs}"
    );
    // The longest key there may be, and one with every printable character, replay.
    let longest = "k".repeat(255);
    let printable: String = (0x20u8..0x7f).map(char::from).collect::<String>();
    for key in [longest.as_str(), printable.trim()] {
        let first = with_key(key.as_bytes());
        assert_eq!(first.status, Some(202), "{first:?}");
        let again = with_key(key.as_bytes());
        assert_eq!(again.json()["run_id"], first.json()["run_id"], "replayed");
    }
}

#[test]
fn a_return_to_the_gateway_would_not_redirect_to_is_refused_at_the_mint() {
    let sim = SimProcess::start(&[]);
    let mint = |return_to: &str| {
        sim.json(
            "POST",
            "/v1/connectors/connections",
            &json!({"connectors": ["gmail"], "reinitiate": true, "returnTo": return_to}),
        )
    };
    for refused in [
        "http://127.0.0.1:9/r\r\nSet-Cookie: a=b",
        "http://127.0.0.1:9/r\n",
        "http://127.0.0.1:9/\u{7f}",
        "http://127.0.0.1:9/é",
        "http://example.com/r",
        "https://127.0.0.1/r",
        "javascript:alert(1)",
        "connop desktop",
        "",
    ] {
        let answer = mint(refused);
        assert_eq!(answer.status, Some(400), "{refused:?}: {answer:?}");
        let detail = answer.json()["detail"].as_str().unwrap_or("").to_owned();
        assert!(detail.contains("returnTo"), "{detail}");
    }
    let long = format!("http://127.0.0.1:9/{}", "a".repeat(4096));
    assert_eq!(mint(&long).status, Some(400));
    for accepted in [
        "connop-desktop",
        "hermes-desktop-dev",
        "http://127.0.0.1:9/r?x=1#f",
    ] {
        let answer = mint(accepted);
        assert_eq!(answer.status, Some(200), "{accepted}: {answer:?}");
        let id = answer.json()["results"][0]["connectionId"]
            .as_str()
            .unwrap()
            .to_owned();
        let decided = sim.decide(&id, None);
        assert!(
            matches!(decided.status, Some(200 | 303)) && !decided.body.is_empty(),
            "{accepted}: {decided:?}"
        );
    }
}

/// `connop gateway --help` and `sim-gateway --help` say what --allow-host does.
#[test]
fn the_help_names_allow_host() {
    for command in ["gateway", "sim-gateway"] {
        let out = output_bounded(connop().args([command, "--help"]));
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(help.contains("--allow-host"), "{command}: {help}");
    }
}
