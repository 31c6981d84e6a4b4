//! Runs, sessions and session chat over HTTP, end to end against the real binary (seed 003,
//! docs/http-api.md#runs and #sessions, and the store items of docs/operating.md#files and
//! #limits), one suite on both stores: every test runs as `sqlite::…` and as `postgres::…` (the
//! latter ignored, with the reason, unless `CONNOP_TEST_DATABASE_URL` names a server). Waits are
//! event streams and channel receives with generous bounds.

mod support;

use serde_json::{Value, json};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::http_api::{Api, names, process_ends, until_terminal};
use support::stores::{Place, StoreKind};
use support::{BOUND, connop, proc_kib, spawn_logging, wait_bounded};

const AUTHOR: &str = r#"{"id": "bot:cto", "name": "cto", "is_bot": true}"#;

fn author() -> Value {
    serde_json::from_str(AUTHOR).unwrap()
}

fn no_delivery_records(home: &Path) {
    let dir = home.join("runtime").join("bot_live_delivery");
    let records = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
    assert_eq!(records, 0, "no delivery record under {}", dir.display());
}

/// A desktop viewer lease on the Bot Chat, advertising a delivery consumer.
fn viewer_lease(home: &Path) -> connop_app::lease::Lease {
    let metadata = json!({"live_session_id": "live-1", "bot_live_delivery_consumer": true});
    connop_app::lease::try_acquire(home, "bot-chat", "desktop", metadata, 0)
        .expect("the viewer lease")
}

/// An agent command that writes its pid to `file` and sleeps (its shell becomes the sleep).
fn sleeper(file: &Path) -> String {
    format!("echo $$ >> '{}'; exec sleep 30", file.display())
}

/// The pids `sleeper` wrote, once there are `n`.
fn pids(file: &Path, n: usize) -> Vec<u32> {
    let deadline = Instant::now() + BOUND;
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let pids: Vec<u32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.len() >= n {
            return pids;
        }
        assert!(Instant::now() < deadline, "{n} agent commands started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

on_both_stores! {
    fn test_a_peer_turn_into_a_bot_chat_without_an_authority_runs_here(kind: StoreKind) {
        for (target, open_in_desktop) in [("scratch", true), ("bot-chat", true), ("bot-chat", false)] {
            let place = Place::new(kind);
            let api = Api::start(&place, &["--agent-cmd", "printf 'ran here'"]);
            api.create_session("bot-chat", "Bot Chat", "desktop");
            api.create_session("scratch", "", "api_server");
            let lease = open_in_desktop.then(|| viewer_lease(place.home()));
            let (status, body) = api.post(
                &format!("/api/sessions/{target}/chat"),
                &json!({"message": "ping", "author": author()}),
            );
            assert_eq!(status, 200, "{target}: {body}");
            assert_eq!(body["object"], "connop.session.chat.completion");
            assert_eq!(body["message"]["content"], "ran here");
            no_delivery_records(place.home());
            drop(lease);
        }
    }

    fn test_a_peer_run_into_a_bot_chat_without_an_authority_runs_here(kind: StoreKind) {
        for target in ["scratch", "bot-chat"] {
            let place = Place::new(kind);
            let api = Api::start(&place, &["--agent-cmd", "printf 'ran here'"]);
            api.create_session("bot-chat", "Bot Chat", "desktop");
            api.create_session("scratch", "", "api_server");
            let lease = viewer_lease(place.home());
            let (status, body) = api.post(
                "/v1/runs",
                &json!({"input": "ping", "session_id": target, "author": author()}),
            );
            assert_eq!(status, 202, "{body}");
            assert_eq!(body["status"], "started");
            let run_id = body["run_id"].as_str().unwrap().to_owned();
            assert!(run_id.starts_with("run_") && run_id.len() == 36);
            until_terminal(&api.events(&run_id));
            let run = api.run(&run_id);
            assert_eq!(run["status"], "completed", "{run}");
            assert_eq!(run["output"], "ran here");
            assert_eq!(run["object"], "connop.run");
            assert_eq!(run["session_id"], target);
            no_delivery_records(place.home());
            lease.release().expect("the lease is released");
        }
    }

    fn test_gateway_shutdown_reports_a_live_owned_run_as_interrupted(kind: StoreKind) {
        let place = Place::new(kind);
        let api = Api::start(&place, &["--agent-cmd", "sleep 30"]);
        api.create_session("bot-chat", "Bot Chat", "desktop");
        let run_id = api.start_run(&json!({"input": "ping", "session_id": "bot-chat"}));
        let events = api.events(&run_id);
        assert_eq!(events.recv_timeout(BOUND).unwrap().0, "run.started");
        api.signal("-TERM");
        let seen = until_terminal(&events);
        assert_eq!(names(&seen), ["run.interrupted"]);
        assert_eq!(seen[0].1["error"], "Gateway shutdown interrupted the run.");
        assert!(
            events.recv_timeout(Duration::from_secs(2)).is_err(),
            "the stream ended after the terminal event"
        );
        let (status, took) = api.wait();
        assert!(status.success(), "{status:?}");
        assert!(took < Duration::from_secs(1), "exited after {took:?}");

        // After a restart the run still reads the shutdown's text.
        let again = Api::start(&place, &[]);
        let run = again.run(&run_id);
        assert_eq!(run["status"], "interrupted");
        assert_eq!(run["error"], "Gateway shutdown interrupted the run.");
    }

    fn a_run_left_unsettled_by_a_dead_gateway_reads_interrupted_after_a_restart(kind: StoreKind) {
        let place = Place::new(kind);
        let api = Api::start(&place, &["--agent-cmd", "sleep 30"]);
        let run_id = api.start_run(&json!({"input": "ping"}));
        assert_eq!(api.events(&run_id).recv_timeout(BOUND).unwrap().0, "run.started");
        api.signal("-KILL");
        let _ = api.wait();
        let again = Api::start(&place, &[]);
        let run = again.run(&run_id);
        assert_eq!(run["status"], "interrupted");
        assert_eq!(run["error"], "The gateway restarted before this run settled.");
        let replay = until_terminal(&again.events(&run_id));
        assert_eq!(names(&replay), ["run.started", "run.interrupted"]);
    }

    fn a_stop_ends_the_agent_command_and_changes_nothing_on_a_terminal_run(kind: StoreKind) {
        let place = Place::new(kind);
        let pidfile = place.home().join("pids");
        let api = Api::start(&place, &["--agent-cmd", &sleeper(&pidfile)]);
        let run_id = api.start_run(&json!({"input": "ping"}));
        let events = api.events(&run_id);
        assert_eq!(events.recv_timeout(BOUND).unwrap().0, "run.started");
        let agent = pids(&pidfile, 1)[0];
        let (status, stopped) = api.post(&format!("/v1/runs/{run_id}/stop"), &json!({}));
        assert_eq!(status, 200);
        assert!(
            ["stopping", "cancelled"].contains(&stopped["status"].as_str().unwrap()),
            "{stopped}"
        );
        let seen = until_terminal(&events);
        assert_eq!(seen.last().unwrap().0, "run.cancelled");
        assert!(process_ends(agent, BOUND), "the agent command {agent} was ended");
        assert_eq!(api.run(&run_id)["status"], "cancelled");
        let (status, again) = api.post(&format!("/v1/runs/{run_id}/stop"), &json!({}));
        assert_eq!(
            (status, again["status"].as_str()),
            (200, Some("cancelled")),
            "a terminal run is left as it is"
        );
        let (status, body) = api.post("/v1/runs/run_missing/stop", &json!({}));
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("run_not_found")));
    }

    fn runs_complete_fail_and_stream_their_events_in_order(kind: StoreKind) {
        let place = Place::new(kind);
        let api = Api::start(
            &place,
            &[
                "--agent-cmd",
                "read line; case \"$line\" in *boom*) echo 'agent exploded' >&2; exit 2;; *) echo reply;; esac",
            ],
        );
        let run_id = api.start_run(&json!({"input": [{"role": "user", "content": "hello"}]}));
        let seen = until_terminal(&api.events(&run_id));
        assert_eq!(names(&seen), ["run.started", "message.delta", "run.completed"]);
        assert_eq!(seen[1].1["delta"], "reply");
        assert_eq!(seen[2].1["output"], "reply");
        assert_eq!(seen[2].1["run_id"], run_id.as_str());
        // A late subscriber gets the events replayed from the start.
        let late = until_terminal(&api.events(&run_id));
        assert_eq!(late, seen);

        let run_id = api.start_run(&json!({"input": "boom"}));
        let seen = until_terminal(&api.events(&run_id));
        assert_eq!(seen.last().unwrap().0, "run.failed");
        let run = api.run(&run_id);
        assert_eq!(
            (run["status"].as_str(), run["error"].as_str()),
            (Some("failed"), Some("agent exploded"))
        );
        assert_eq!(run["last_event"], "run.failed");
    }

    fn bad_requests_404s_idempotency_and_the_api_key(kind: StoreKind) {
        let place = Place::new(kind);
        let api = Api::start(&place, &["--api-key", "sekret"]);
        let (status, body) = api.request("POST", "/v1/runs", Some("{nope"), &[]);
        assert_eq!((status, body["error"]["message"].as_str()), (400, Some("Invalid JSON")));
        let (status, body) = api.post("/v1/runs", &json!({}));
        assert_eq!(
            (status, body["error"]["message"].as_str()),
            (400, Some("Missing 'input' field"))
        );
        let (status, body) = api.post("/v1/runs", &json!({"input": "  "}));
        assert_eq!(
            (status, body["error"]["message"].as_str()),
            (400, Some("No user message found in input"))
        );
        let (status, body) = api.post(
            "/v1/runs",
            &json!({"input": "hi", "author": {"id": "", "name": "x", "is_bot": true}}),
        );
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_author")));
        let (status, body) = api.get("/v1/runs/run_missing");
        assert_eq!(
            (status, body["error"]["message"].as_str()),
            (404, Some("Run not found: run_missing"))
        );
        let (status, _) = api.get("/v1/runs/run_missing/events");
        assert_eq!(status, 404);
        // A path the API serves, asked with another method: 405, saying which it takes.
        let (status, body) = api.request("DELETE", "/v1/runs/run_missing", None, &[]);
        assert_eq!(
            (status, body["error"]["code"].as_str(), body["error"]["message"].as_str()),
            (405, Some("method_not_allowed"), Some("DELETE is not allowed on /v1/runs/run_missing: use GET"))
        );
        let (status, body) = api.request("PUT", "/api/sessions", Some("{}"), &[]);
        assert_eq!((status, body["error"]["message"].as_str()), (405, Some("PUT is not allowed on /api/sessions: use GET, POST")));
        let (status, body) = api.request("GET", "/v1/nothing", None, &[]);
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")));
        let (status, _) = api.post("/api/sessions/nobody/chat", &json!({"message": "hi"}));
        assert_eq!(status, 404);
        let (status, _) = api.post("/api/sessions", &json!({"session_id": "dup"}));
        assert_eq!(status, 201);
        let (status, _) = api.post("/api/sessions", &json!({"session_id": "dup"}));
        assert_eq!(status, 409);

        let body = json!({"input": "same"}).to_string();
        let keyed = |body: &str, key: &str| api.request("POST", "/v1/runs", Some(body), &[("Idempotency-Key", key)]);
        let (first_status, first) = keyed(&body, "k1");
        let (again_status, again) = keyed(&body, "k1");
        assert_eq!((first_status, again_status), (202, 202));
        assert_eq!(first, again, "the same key and body replay the first answer");
        let (status, answer) = keyed(&json!({"input": "other"}).to_string(), "k1");
        assert_eq!((status, answer["error"]["code"].as_str()), (409, Some("idempotency_key_conflict")));
        // A refusal is an answer too: replayed for the same body.
        let (status, refused) = keyed("{nope", "k2");
        assert_eq!((status, keyed("{nope", "k2")), (400, (400, refused)));

        let anonymous = Api::client(&api.url, None);
        assert_eq!(anonymous.get("/api/sessions").0, 401);
        assert_eq!(anonymous.get("/health").0, 200, "/health needs no key");
        let wrong = Api::client(&api.url, Some("wrong"));
        assert_eq!(wrong.get("/api/sessions").0, 401);
    }

    fn peer_dm_talks_to_a_real_gateway_s_bot_chat(kind: StoreKind) {
        let place = Place::new(kind);
        let api = Api::start(&place, &["--api-key", "k", "--agent-cmd", "printf 'pong'"]);
        for _ in 0..2 {
            let out = connop()
                .args(["peer", "dm", "mini", "ping", "--url", &api.url, "--key", "k", "--json"])
                .output()
                .expect("connop runs");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(printed["reply"], "pong", "{printed}");
        }
        let (_, listed) = api.get("/api/sessions");
        let bot_chats: Vec<&Value> = listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["title"] == "Bot Chat")
            .collect();
        assert_eq!(bot_chats.len(), 1, "created once, then found: {listed}");
    }

    /// A finished run lives in the store, not in the gateway's memory: twelve more runs of 2 MB
    /// each grow its resident size by less than 8 MiB.
    fn finished_runs_do_not_stay_in_memory(kind: StoreKind) {
        let place = Place::new(kind);
        let api = Api::start(&place, &["--agent-cmd", "head -c 2000000 /dev/zero | tr '\\0' a"]);
        let run = |i: usize| {
            let run_id = api.start_run(&json!({"input": "big", "session_id": format!("s{i}")}));
            let seen = until_terminal(&api.events(&run_id));
            assert_eq!(seen.last().unwrap().1["output"].as_str().map(str::len), Some(2_000_000));
        };
        run(0);
        run(1);
        let before = proc_kib(api.pid(), "VmRSS");
        for i in 2..14 {
            run(i);
        }
        let grown = proc_kib(api.pid(), "VmRSS").saturating_sub(before);
        // 12 runs kept whole would hold 72 MB (the output, its delta and its terminal event). A
        // PostgreSQL connection's buffers keep the size of the largest message it carried, so
        // the pool closes a connection that moved many bytes (kept, they would hold 12–40 MB).
        assert!(grown < 8 * 1024, "the gateway grew by {grown} KiB over 12 runs of 2 MB");
        assert_eq!(api.run(&api.start_run(&json!({"input": "x"})))["session_id"].as_str().map(|s| s.starts_with("session_")), Some(true));
    }

    /// An event stream whose client never reads holds one frame of the run at a time, not every
    /// event of it two or three times over: twelve such streams of a 10 MB run grow the gateway
    /// by less than 220 MiB.
    fn event_streams_nobody_reads_hold_one_frame_each(kind: StoreKind) {
        use std::io::{Read, Write};
        let place = Place::new(kind);
        let api = Api::start(&place, &["--agent-cmd", "head -c 10000000 /dev/zero | tr '\\0' a"]);
        let run_id = api.start_run(&json!({"input": "big"}));
        until_terminal(&api.events(&run_id));
        let before = proc_kib(api.pid(), "VmRSS");
        let addr = api.url.trim_start_matches("http://").to_owned();
        let key = api.key.clone().unwrap_or_default();
        let streams: Vec<std::net::TcpStream> = (0..12)
            .map(|_| {
                let mut stream = std::net::TcpStream::connect(&addr).unwrap();
                write!(stream, "GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\r\n").unwrap();
                // The stream has started (its head is here); then nothing more is read.
                let mut head = [0u8; 16];
                stream.read_exact(&mut head).unwrap();
                stream
            })
            .collect();
        // The gateway's memory settles once every stream has made what it makes.
        let started = Instant::now();
        let mut last = proc_kib(api.pid(), "VmRSS");
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let now = proc_kib(api.pid(), "VmRSS");
            if now.abs_diff(last) < 1024 || started.elapsed() > BOUND {
                last = now;
                break;
            }
            last = now;
        }
        let grown = last.saturating_sub(before);
        // One 10 MB frame each (sliced, never copied whole into the connection) is 120 MB, and
        // 117–173 MB on this machine; the run's events held two or three times per stream would
        // be 264–311 MB.
        assert!(grown < 220 * 1024, "12 streams nobody reads grew the gateway by {grown} KiB");
        drop(streams);
        assert_eq!(api.get("/health").0, 200, "the gateway still serves");
    }

    /// After a restart, a replay gives every event of the run with all its fields, not only the
    /// last one.
    fn a_replay_after_a_restart_gives_every_event_with_its_fields(kind: StoreKind) {
        let place = Place::new(kind);
        let api = Api::start(&place, &["--agent-cmd", "echo 'all of it'"]);
        let run_id = api.start_run(&json!({"input": "ping"}));
        let live = until_terminal(&api.events(&run_id));
        assert_eq!(names(&live), ["run.started", "message.delta", "run.completed"]);
        let run = api.run(&run_id);
        api.signal("-TERM");
        let _ = api.wait();
        let again = Api::start(&place, &[]);
        let replayed = until_terminal(&again.events(&run_id));
        assert_eq!(replayed, live, "every event, with its fields and times");
        assert_eq!(again.run(&run_id), run);
    }

    /// A request retried after a crash replays the run its key started instead of starting a
    /// second one.
    fn an_idempotency_key_outlives_a_restart(kind: StoreKind) {
        let place = Place::new(kind);
        let api = Api::start(&place, &[]);
        let body = json!({"input": "once"}).to_string();
        let keyed = |api: &Api, body: &str| api.request("POST", "/v1/runs", Some(body), &[("Idempotency-Key", "retry-me")]);
        let (status, first) = keyed(&api, &body);
        assert_eq!(status, 202, "{first}");
        api.signal("-KILL");
        let _ = api.wait();
        let again = Api::start(&place, &[]);
        assert_eq!(keyed(&again, &body), (202, first.clone()), "the retry replays");
        let (status, refused) = keyed(&again, &json!({"input": "other"}).to_string());
        assert_eq!((status, refused["error"]["code"].as_str()), (409, Some("idempotency_key_conflict")));
    }

    /// Of concurrent requests with one key, exactly one starts a run.
    fn concurrent_requests_with_one_key_start_one_run(kind: StoreKind) {
        let place = Place::new(kind);
        let ran = place.home().join("ran");
        let command = format!("echo x >> '{}'; echo done", ran.display());
        let api = Api::start(&place, &["--agent-cmd", &command]);
        let keys = 10;
        let answers: Vec<((u16, Value), (u16, Value))> = std::thread::scope(|scope| {
            let pairs: Vec<_> = (0..keys)
                .map(|k| {
                    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
                    let body = json!({"input": format!("key {k}")}).to_string();
                    let send = |barrier: std::sync::Arc<std::sync::Barrier>, body: String| {
                        let api = &api;
                        scope.spawn(move || {
                            let key = format!("key-{k}");
                            barrier.wait();
                            api.request("POST", "/v1/runs", Some(&body), &[("Idempotency-Key", &key)])
                        })
                    };
                    (send(barrier.clone(), body.clone()), send(barrier, body))
                })
                .collect();
            pairs.into_iter().map(|(a, b)| (a.join().unwrap(), b.join().unwrap())).collect()
        });
        for (a, b) in &answers {
            assert_eq!(a.0, 202, "{a:?}");
            assert_eq!(a, b, "one key, one answer");
            until_terminal(&api.events(a.1["run_id"].as_str().unwrap()));
        }
        let lines = std::fs::read_to_string(&ran).unwrap_or_default().lines().count();
        assert_eq!(lines, keys, "the agent command ran once per key");
    }
}

/// A second gateway on the same SQLite store is refused, naming the one that serves it.
#[test]
fn a_second_gateway_on_one_sqlite_store_is_refused_with_a_clear_error() {
    let place = Place::new(StoreKind::Sqlite);
    let first = Api::start(&place, &[]);
    let mut command = connop();
    let (child, _, log) = spawn_logging(Api::command(&mut command, &place, "a", &[]));
    // The line is waited for: the exit can come before stderr's reader has read it.
    log.wait_for("already serves", |line| line.contains("already serves"));
    let status = wait_bounded(child);
    assert_eq!(status.code(), Some(1));
    let said = log.lines().join("\n");
    assert!(said.contains("already serves"), "{said}");
    assert!(said.contains(&format!("(pid {})", first.pid())), "{said}");
    assert!(
        said.contains("state.db") && said.contains("--database-url"),
        "{said}"
    );
    assert_eq!(first.get("/health").0, 200, "the first one serves on");
}

/// `state.db` holds all chat text: it and its files are the owner's alone (0600), whatever the
/// umask.
#[test]
fn the_state_database_and_its_files_are_private_whatever_the_umask() {
    let place = Place::new(StoreKind::Sqlite);
    let mut under_umask = Command::new("sh");
    under_umask.args([
        "-c",
        "umask 022; exec \"$0\" \"$@\"",
        env!("CARGO_BIN_EXE_connop"),
    ]);
    let api = Api::start_with(under_umask, &place, "a", &[]);
    until_terminal(&api.events(&api.start_run(&json!({"input": "secret"}))));
    for file in ["state.db", "state.db-wal", "state.db-shm", "state.lock"] {
        let mode = std::fs::metadata(place.home().join(file)).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600, "{file} is {mode:o}");
    }
}

/// `--database-url` that is not PostgreSQL is the person's to fix (exit 2); one that no server
/// answers is this machine's (exit 1); neither says the password.
#[test]
fn a_database_url_that_cannot_be_used_says_why_without_the_password() {
    let place = Place::new(StoreKind::Sqlite);
    for (url, code, said) in [
        ("mysql://root:hunter2@db/x", 2, "must be a postgres:// URL"),
        (
            "postgres://app:hunter2@127.0.0.1:9/connop?connect_timeout=5",
            1,
            "cannot reach the database at app@127.0.0.1:9/connop",
        ),
    ] {
        let mut command = connop();
        let (child, _, log) = spawn_logging(Api::command(
            &mut command,
            &place,
            "a",
            &["--database-url", url],
        ));
        // The line is waited for: the exit can come before stderr's reader has read it.
        log.wait_for(said, |line| line.contains(said));
        let status = wait_bounded(child);
        let stderr = log.lines().join("\n");
        assert_eq!(status.code(), Some(code), "{url}: {stderr}");
        assert!(!stderr.contains("hunter2"), "{url}: {stderr}");
    }
}
