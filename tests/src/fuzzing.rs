//! The bodies of the fuzz targets of the application's listeners, shared by the `fuzz/` crate
//! (libFuzzer drives them) and by the corpus replay test (the normal test command runs every
//! committed input through them). They live here, beside the core's in
//! `connop_fixtures::fuzzing`, because they reach the application (`connop_app`).
//!
//! Each takes arbitrary bytes and panics only when a property fails.

use connop_app::api::executor::TurnExecutor;
use connop_app::api::{Api, ApiConfig};
use connop_app::cli::connect::returns::{Return, target_of};
use connop_app::net::guard::{Accepts, Guard, Refusal};
use connop_app::sim_gateway::{
    IdSource, NumberedIds, SimAccount, SimRequest, SimResponse, SimWorld,
};
use connop_app::store::Database;
use connop_core::flow::Input;
use connop_core::operation::Text;
use connop_fixtures::fuzzing::{FuzzTarget, Reached};
use connop_fixtures::{ScriptedToolGateway, Sim};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The fuzz targets of the listeners.
pub const TARGETS: [FuzzTarget; 3] = [
    (
        "http_api_request",
        http_api_request,
        &["unbuildable", "served", "refused"],
    ),
    ("consent_form", consent_form, &["decided", "undecided"]),
    ("return_params", return_params, &["named", "unnamed"]),
];

// ---- http_api_request -----------------------------------------------------------------------

/// The address the fuzzed API believes it is bound to.
const BOUND: &str = "127.0.0.1:8642";

/// The key of the keyed API.
const KEY: &str = "fuzz-key";

/// Every status the HTTP API answers with (the API's and the guard's).
const STATUSES: [u16; 12] = [200, 201, 202, 400, 401, 403, 404, 405, 409, 413, 415, 421];

/// One API on a SQLite store in a fresh folder, and a connection of its own to that store.
struct Store {
    api: Arc<Api>,
    home: PathBuf,
    /// Read-only: its `data_version` moves whenever the API commits a change.
    reader: Mutex<rusqlite::Connection>,
}

impl Store {
    /// A number that moves whenever another connection (the API's) commits a change.
    fn version(&self) -> i64 {
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        reader
            .query_row("PRAGMA data_version", [], |row| row.get(0))
            .expect("the store's data version")
    }
}

/// Two APIs (without a key, and with [`KEY`]), opened once per process.
struct Apis {
    keyless: Store,
    keyed: Store,
}

fn apis() -> &'static Apis {
    static APIS: OnceLock<Apis> = OnceLock::new();
    APIS.get_or_init(|| {
        let open = |key: Option<&str>| {
            let home = std::env::temp_dir().join(format!(
                "connop-fuzz-api-{}-{}",
                std::process::id(),
                connop_app::sync::random_hex(6)
            ));
            let config = ApiConfig {
                database: Database::Sqlite { home: home.clone() },
                api_key: key.map(str::to_owned),
                executor: TurnExecutor::Echo,
                max_body: 4096,
                allow_hosts: vec!["api.example.test".to_owned()],
            };
            let bound: SocketAddr = BOUND.parse().expect("an address");
            let api = smol::block_on(Api::open(config, bound)).expect("the store opens");
            let reader = rusqlite::Connection::open_with_flags(
                home.join("state.db"),
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .expect("the store reads");
            Store {
                api,
                home,
                reader: Mutex::new(reader),
            }
        };
        Apis {
            keyless: open(None),
            keyed: open(Some(KEY)),
        }
    })
}

/// Every row of every table of the store in `home`, as text: what "nothing changed" compares.
fn store_rows(home: &std::path::Path) -> Vec<String> {
    let db = rusqlite::Connection::open_with_flags(
        home.join("state.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("the store reads");
    let mut tables: Vec<String> = db
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .expect("the tables");
    // Replicas' heartbeats move by themselves.
    tables.retain(|t| t != "replicas");
    let mut rows = Vec::new();
    for table in tables {
        let mut statement = db
            .prepare(&format!("SELECT * FROM \"{table}\""))
            .expect("a table");
        let columns = statement.column_count();
        let read = statement
            .query_map([], |row| {
                let cells: Vec<String> = (0..columns)
                    .map(|i| format!("{:?}", row.get_ref(i)))
                    .collect();
                Ok(format!("{table}: {}", cells.join(" | ")))
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .expect("the rows");
        rows.extend(read);
    }
    rows.sort();
    rows
}

/// The request an input spells: a flags byte (bit 0: the keyed API), then
/// `METHOD TARGET\n`, header lines `Name: value\n` up to an empty line, and the body.
fn spelled(data: &[u8]) -> Option<(bool, hyper::Request<Full<Bytes>>)> {
    let (&flags, rest) = data.split_first()?;
    let end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
    let line = String::from_utf8_lossy(&rest[..end]).into_owned();
    let (method, target) = line.split_once(' ')?;
    let mut builder = hyper::Request::builder().method(method).uri(target);
    let mut rest = rest.get(end + 1..).unwrap_or_default();
    loop {
        let end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
        let header = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or_default();
        if header.is_empty() {
            break;
        }
        let colon = header.iter().position(|b| *b == b':')?;
        let value = header[colon + 1..].trim_ascii_start();
        builder = builder.header(&header[..colon], value);
    }
    let request = builder.body(Full::new(Bytes::copy_from_slice(rest))).ok()?;
    Some((flags & 1 == 1, request))
}

/// Answers one request with `api` in-process; the status and, for a JSON answer, its body
/// (an event stream is not followed).
fn answer(api: &Arc<Api>, request: hyper::Request<Full<Bytes>>) -> (u16, Value) {
    smol::block_on(async {
        let response = api.answer(request).await;
        let status = response.status().as_u16();
        let json = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == b"application/json");
        let body = if json {
            response
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default()
        } else {
            Bytes::new()
        };
        (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
    })
}

/// Waits (at most 10 s) until run `id` is terminal: a store that still changes by itself
/// cannot show what a later request changed.
fn settle(api: &Arc<Api>, id: &str) {
    let started = Instant::now();
    loop {
        let request = hyper::Request::get(format!("/v1/runs/{id}"))
            .header("host", BOUND)
            .header("authorization", format!("Bearer {KEY}"))
            .body(Full::new(Bytes::new()))
            .expect("a request");
        let (status, run) = answer(api, request);
        let active = ["queued", "running", "stopping"]
            .iter()
            .any(|s| run["status"] == *s);
        if status != 200 || !active {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "run {id} never ended: {run}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// An HTTP API request (method, target, headers: `Host`, `Origin`, `Content-Type`,
/// `Idempotency-Key`, …; body) through the API's guard, key check, parsing and routing,
/// without a socket. The answer's status is one the API documents, and a request refused
/// changes nothing in the store (a refused run with a valid `Idempotency-Key` may only
/// remember its answer).
pub fn http_api_request(data: &[u8]) -> Reached {
    let Some((keyed, request)) = spelled(data) else {
        return "unbuildable";
    };
    let apis = apis();
    let store = if keyed { &apis.keyed } else { &apis.keyless };
    let api = &store.api;
    let keyed_run = request.method() == hyper::Method::POST
        && request.uri().path().trim_end_matches('/') == "/v1/runs"
        && request
            .headers()
            .get("idempotency-key")
            .is_some_and(|k| connop_core::run::idempotency_key(k.as_bytes()).is_ok());
    let guarded = Guard::new(BOUND.parse().expect("an address"), &[]).admit(
        request.method(),
        request.uri(),
        request.headers(),
        Accepts::Json,
    );
    // Every row only where some may change on a refusal: the cheap version number otherwise.
    let before = (store.version(), keyed_run.then(|| store_rows(&store.home)));
    let (status, body) = answer(api, request);
    assert!(STATUSES.contains(&status), "status {status}: {body}");
    if let Err(refusal) = &guarded {
        // The API's own guard knows no more names than this one, and refuses the same.
        if !matches!(refusal, Refusal::Host { .. }) {
            assert_eq!(status, refusal.status().as_u16(), "{refusal}: {body}");
        }
    }
    if status == 201 {
        // What shows a refusal changed nothing sees this change.
        assert_ne!(
            before.0,
            store.version(),
            "a session was made unseen: {body}"
        );
    }
    if let Some(id) = body["run_id"].as_str() {
        settle(api, id);
    }
    if status >= 400 {
        match before {
            (_, Some(rows)) => {
                let unkeyed = |rows: Vec<String>| -> Vec<String> {
                    rows.into_iter()
                        .filter(|r| !r.starts_with("idempotency_keys:"))
                        .collect()
                };
                assert_eq!(
                    unkeyed(rows),
                    unkeyed(store_rows(&store.home)),
                    "a refused request ({status} {body}) changed the store"
                );
            }
            (version, None) => assert_eq!(
                version,
                store.version(),
                "a refused request ({status} {body}) changed the store"
            ),
        }
        return "refused";
    }
    "served"
}

// ---- consent_form ---------------------------------------------------------------------------

/// Where the fuzzed gateway is.
const SIM: &str = "127.0.0.1:7000";

/// What one fuzzed consent request sends, by a selector byte: its `Origin` (bits 0-1: none,
/// the gateway's own, another site's, `null`) and `Content-Type` (bits 2-3: the form's, the
/// form's with a charset, `text/plain`, none).
fn consent_headers(selector: u8) -> (Option<&'static str>, Option<&'static str>) {
    let origin = match selector & 0b11 {
        0 => None,
        1 => Some(OWN_ORIGIN),
        2 => Some("http://evil.example"),
        _ => Some("null"),
    };
    let content_type = match (selector >> 2) & 0b11 {
        0 => Some("application/x-www-form-urlencoded"),
        1 => Some("application/x-www-form-urlencoded; charset=UTF-8"),
        2 => Some("text/plain"),
        _ => None,
    };
    (origin, content_type)
}

/// The fuzzed gateway's own origin.
const OWN_ORIGIN: &str = "http://127.0.0.1:7000";

/// The consent form (and the link's nonces) through the guard and the simulated gateway's
/// world: requests separated by `0xff`, each a selector byte (its `Origin` and
/// `Content-Type`; bit 4: show the page first, for a fresh nonce; bit 5: post to an unknown
/// link) and a form body in which `NONCE` stands for the newest nonce a page handed out and
/// `OLD` for the first. The guard refuses every foreign origin and every other type; the
/// world decides at most once, only with a nonce its page handed out and a decision; every
/// refused request leaves the account as it was.
pub fn consent_form(data: &[u8]) -> Reached {
    let guard = Guard::new(SIM.parse().expect("an address"), &[]);
    let ids: Box<dyn IdSource> = Box::new(NumberedIds::default());
    let mut world = SimWorld::new(&format!("http://{SIM}"), None, None, ids);
    let now = Instant::now();
    let minted = world.handle(
        SimRequest::new("POST", "/v1/connectors/connections").body(
            json!({"connectors": ["gmail"], "reinitiate": false,
                   "returnTo": "http://127.0.0.1:9/returned?op=1"})
            .to_string(),
        ),
        now,
    );
    let id = minted.json_body()["results"][0]["connectionId"]
        .as_str()
        .expect("a pending link")
        .to_owned();
    let show = |world: &mut SimWorld| -> Option<String> {
        let page = world.handle(SimRequest::new("GET", &format!("/connect/{id}")), now);
        let marker = r#"name="nonce" value=""#;
        let start = page.body.find(marker)? + marker.len();
        page.body[start..].split('"').next().map(str::to_owned)
    };
    let old = show(&mut world).unwrap_or_default();
    let mut newest = old.clone();
    let mut decisions = 0;
    for chunk in data.split(|b| *b == 0xff) {
        let Some((&selector, body)) = chunk.split_first() else {
            continue;
        };
        if selector & 0x10 != 0 {
            if let Some(nonce) = show(&mut world) {
                newest = nonce;
            }
        }
        let body = String::from_utf8_lossy(body)
            .replace("NONCE", &newest)
            .replace("OLD", &old);
        let (origin, content_type) = consent_headers(selector);
        // Another site's page, or one whose body is not the form's.
        let must_refuse = origin.is_some_and(|o| o != OWN_ORIGIN)
            || (!body.is_empty() && !content_type.is_some_and(|t| t.contains("form-urlencoded")));
        let target = if selector & 0x20 != 0 {
            "/connect/ca_gmail_9".to_owned()
        } else {
            format!("/connect/{id}")
        };
        let mut request = hyper::Request::post(&target).header("host", SIM);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let request = request
            .header("content-length", body.len())
            .body(())
            .expect("a request");
        let admitted = guard.admit(
            request.method(),
            request.uri(),
            request.headers(),
            Accepts::Form,
        );
        let refused_by_guard = admitted.is_err();
        assert_eq!(
            refused_by_guard, must_refuse,
            "selector {selector:#x}: {admitted:?}"
        );
        let before: Option<SimAccount> = world.account(&id).cloned();
        if let Err(refusal) = admitted {
            // What the listener answers instead: a page, with the guard's status.
            let page = SimResponse::refused(&target, &refusal);
            assert_eq!(page.status, refusal.status().as_u16());
            continue;
        }
        let answer = world.handle(
            SimRequest::new("POST", &target)
                .header("content-type", content_type.unwrap_or(""))
                .body(body),
            now,
        );
        let after = world.account(&id).cloned();
        let (was, is) = (
            before.as_ref().map(|a| a.status),
            after.as_ref().map(|a| a.status),
        );
        match answer.status {
            200 | 303 => {
                decisions += 1;
                assert_ne!(was, is, "a decision that changed nothing: {}", answer.body);
                if let Some(location) = answer.header_value("location") {
                    assert!(
                        location.bytes().all(|b| b.is_ascii_graphic()),
                        "{location:?}"
                    );
                }
            }
            _ => assert_eq!(before, after, "refused ({}) yet changed", answer.status),
        }
        assert!(decisions <= 1, "decided twice");
    }
    if decisions == 1 {
        "decided"
    } else {
        "undecided"
    }
}

// ---- return_params --------------------------------------------------------------------------

/// The return URL's query strings, one per line, through the return listener's parsing and
/// the hint each makes, delivered to a live two-target operation whose accounts never
/// connect: a return only ever asks for a read, so no target is ever connected by one, and
/// the operation settles by its deadline with the core's invariants holding throughout.
pub fn return_params(data: &[u8]) -> Reached {
    let text = String::from_utf8_lossy(data).into_owned();
    let returns: Vec<Return> = text.split('\n').take(16).map(Return::from_query).collect();
    let named = returns.iter().any(|r| r.connection_id.is_some());
    let scheduled = returns.clone();
    let report = Sim::new(ScriptedToolGateway::new())
        .tick(60.0)
        .deadline(5.0)
        .on_card(move |_, ctl| {
            for (i, back) in scheduled.iter().enumerate() {
                let target: Option<Text> = target_of(back, |id| {
                    ctl.flow.operation()?.target_with_connection(id).cloned()
                });
                let at = Duration::from_millis(100 * (i as u64 + 1));
                ctl.after(at, Input::ReturnHint { target });
            }
        })
        .run(json!({"action": "connect", "connectors": ["gmail", "notion"]}));
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let states = report.states();
    assert!(
        states.values().all(|s| s != "connected"),
        "a return connected a target by itself: {states:?}"
    );
    assert_eq!(report.json()["settled_by"], "deadline", "{}", report.json());
    if named { "named" } else { "unnamed" }
}
