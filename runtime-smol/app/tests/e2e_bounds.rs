//! What the HTTP API takes and reads, bounded, against the real binary on both stores (every
//! test runs as `sqlite::…` and as `postgres::…`, the latter ignored, with the reason, unless
//! `CONNOP_TEST_DATABASE_URL` names a server): text holding a NUL is refused the same way on
//! both, sessions are listed a page at a time, and a turn gets a bounded window of the latest
//! history.

mod support;

use serde_json::{Value, json};
use std::collections::HashSet;
use support::http_api::{Api, until_terminal};
use support::stores::{Place, StoreKind};

/// The most messages, and bytes of them, a turn gets as its history.
const HISTORY_MESSAGES: usize = 100;
const HISTORY_BYTES: u64 = 2 << 20;

/// An agent that answers with how many history messages it got, and their bytes.
const COUNTING_AGENT: &str = "python3 -c 'import json,sys; t=json.load(sys.stdin); h=t[\"history\"]; print(len(h), sum(len(m[\"content\"].encode()) for m in h))'";

fn refused_for_nul(answer: &(u16, Value), what: &str) {
    assert_eq!(
        (answer.0, &answer.1["error"]["code"]),
        (400, &json!("nul_character")),
        "{what}: {}",
        answer.1
    );
}

on_both_stores! {
    fn text_holding_a_nul_is_refused_with_400_and_nothing_is_stored(kind: StoreKind) {
        let place = Place::new(kind);
        let api = Api::start(&place, &[]);
        api.create_session("ok", "Ok", "desktop");
        let nul = "a\u{0}b";
        let bodies = [
            ("POST", "/v1/runs", json!({"input": nul})),
            ("POST", "/v1/runs", json!({"input": [{"role": "user", "content": nul}]})),
            ("POST", "/v1/runs", json!({"input": "hi", "session_id": nul})),
            ("POST", "/v1/runs", json!({"input": "hi", "author": {"id": nul, "name": "x", "is_bot": true}})),
            ("POST", "/api/sessions", json!({"session_id": nul})),
            ("POST", "/api/sessions", json!({"title": nul})),
            ("POST", "/api/sessions/ok/chat", json!({"message": nul})),
        ];
        for (method, path, body) in &bodies {
            let answer = api.request(method, path, Some(&body.to_string()), &[]);
            refused_for_nul(&answer, &format!("{method} {path} {body}"));
        }
        for (method, path) in [
            ("GET", "/v1/runs/run_%00"),
            ("POST", "/v1/runs/run_%00/stop"),
            ("GET", "/v1/runs/run_%00/events"),
            ("POST", "/api/sessions/a%00b/chat"),
        ] {
            let answer = api.request(method, path, Some("{\"message\": \"hi\"}"), &[]);
            refused_for_nul(&answer, &format!("{method} {path}"));
        }
        // A raw NUL byte in a keyed body is refused before the key is taken: the key stays free.
        let key = [("Idempotency-Key", "k-nul")];
        let answer = api.request("POST", "/v1/runs", Some("{\"input\": \"a\0\"}"), &key);
        refused_for_nul(&answer, "a raw NUL byte");
        let (status, started) = api.request("POST", "/v1/runs", Some("{\"input\": \"fine\"}"), &key);
        assert_eq!(status, 202, "{started}");
        // Nothing of the refused requests was stored.
        let (status, listed) = api.get("/api/sessions");
        assert_eq!(status, 200);
        let ids: Vec<&str> = listed["sessions"].as_array().unwrap().iter()
            .filter_map(|s| s["session_id"].as_str()).collect();
        assert_eq!(ids.len(), 2, "{ids:?}");
        assert!(ids.iter().all(|id| !id.contains('\u{0}')), "{ids:?}");
    }

    fn an_agent_answering_with_a_nul_fails_its_run_instead_of_leaving_it_running(kind: StoreKind) {
        let place = Place::new(kind);
        let api = Api::start(&place, &["--agent-cmd", "printf 'a\\000b'"]);
        let run = api.start_run(&json!({"input": "go"}));
        let events = until_terminal(&api.events(&run));
        let (event, data) = events.last().unwrap();
        assert_eq!(event, "run.failed", "{data}");
        assert!(data["error"].as_str().unwrap().contains("NUL"), "{data}");
        let place = Place::new(kind);
        let api = Api::start(&place, &["--agent-cmd", "printf 'x\\000y' >&2; exit 3"]);
        let run = api.start_run(&json!({"input": "go"}));
        let events = until_terminal(&api.events(&run));
        let (event, data) = events.last().unwrap();
        assert_eq!((event.as_str(), &data["error"]), ("run.failed", &json!("x\u{fffd}y")));
    }

    fn sessions_are_listed_a_page_at_a_time(kind: StoreKind) {
        let place = Place::new(kind);
        let api = Api::start(&place, &[]);
        let made = 250;
        for i in 0..made {
            api.create_session(&format!("s{i:03}"), "t", "desktop");
        }
        let (status, first) = api.get("/api/sessions");
        assert_eq!(status, 200);
        assert_eq!(first["sessions"].as_array().unwrap().len(), 100, "the default page");
        let mut seen = Vec::new();
        let mut path = "/api/sessions?limit=60".to_owned();
        let mut pages = 0;
        loop {
            let (status, page) = api.get(&path);
            assert_eq!(status, 200, "{page}");
            let rows = page["sessions"].as_array().unwrap();
            assert!(rows.len() <= 60);
            seen.extend(rows.iter().map(|s| s["session_id"].as_str().unwrap().to_owned()));
            pages += 1;
            match page["next_cursor"].as_str() {
                Some(cursor) => path = format!("/api/sessions?limit=60&cursor={cursor}"),
                None => {
                    assert!(page["next_cursor"].is_null(), "{page}");
                    break;
                }
            }
        }
        assert_eq!(pages, 5);
        let expected: Vec<String> = (0..made).map(|i| format!("s{i:03}")).collect();
        assert_eq!(seen, expected, "every session once, oldest first");
        for bad in ["limit=0", "limit=many", "cursor=nope"] {
            let (status, body) = api.get(&format!("/api/sessions?{bad}"));
            assert_eq!(status, 400, "{bad}: {body}");
        }
    }

    fn a_chat_turn_gets_a_bounded_window_of_the_latest_history(kind: StoreKind) {
        let place = Place::new(kind);
        let api = Api::start(&place, &["--agent-cmd", COUNTING_AGENT]);
        api.create_session("long", "Long", "desktop");
        let turns = HISTORY_MESSAGES / 2 + 5;
        let mut last = Value::Null;
        for i in 0..turns {
            let (status, answer) = api.post("/api/sessions/long/chat", &json!({"message": format!("turn {i}")}));
            assert_eq!(status, 200, "{answer}");
            last = answer;
        }
        let said = last["message"]["content"].as_str().unwrap().to_owned();
        let count: usize = said.split(' ').next().unwrap().parse().unwrap();
        assert_eq!(count, HISTORY_MESSAGES, "{said}");

        api.create_session("large", "Large", "desktop");
        let large = "x".repeat(600_000);
        let mut counts = HashSet::new();
        for _ in 0..6 {
            let (status, answer) = api.post("/api/sessions/large/chat", &json!({"message": large}));
            assert_eq!(status, 200);
            let said = answer["message"]["content"].as_str().unwrap();
            let mut parts = said.split(' ').map(|p| p.parse::<u64>().unwrap());
            let (count, bytes) = (parts.next().unwrap(), parts.next().unwrap());
            assert!(bytes <= HISTORY_BYTES, "{count} messages, {bytes} bytes");
            counts.insert(count);
        }
        assert!(counts.contains(&7), "the window is full by size, not count: {counts:?}");
    }
}
