//! `connop peer dm` (docs/http-api.md#peer-dm) against a canned peer: a queued answer is reported
//! as delivered (never `(no reply)`), a completion prints its reply, the Bot Chat is found or
//! created, and transport or HTTP failures come back as the peer's errors with the reason; a
//! URL that cannot be used is the user's.

use connop_app::cli::peer::{DmOptions, peer_dm};
use connop_app::error::{AppError, UpstreamError, UsageError};
use connop_fixtures::canned::{Canned, Seen, Server, reply};
use serde_json::{Value, json};

fn options(server_url: String, json: bool) -> DmOptions {
    DmOptions {
        peer: "mini".into(),
        message: "hello".into(),
        url: server_url,
        key: Some("key".into()),
        profile: None,
        json,
    }
}

/// Runs the command against `canned` and returns its result, its output and what the peer saw.
fn run(canned: Vec<Canned>, json: bool) -> (Result<(), AppError>, String, Vec<Seen>) {
    let server = Server::start(canned);
    let opts = options(format!("http://{}/", server.addr), json);
    let (result, out) = run_with(&opts);
    (result, out, server.finish())
}

fn run_with(opts: &DmOptions) -> (Result<(), AppError>, String) {
    let mut out = Vec::new();
    let result = peer_dm(opts, &mut out);
    (result, String::from_utf8(out).unwrap())
}

/// The peer's session listing with one Bot Chat, `bot-chat`, among other sessions.
fn listing_with_bot_chat() -> Canned {
    reply(
        200,
        json!({"sessions": [
            {"session_id": "scratch", "title": "Scratch", "source": "api_server", "created_at": 9.0},
            {"session_id": "bot-chat", "title": "Bot Chat", "source": "desktop", "created_at": 1.5},
        ]}),
    )
}

fn queued_claimed() -> Canned {
    reply(
        202,
        json!({"object": "hermes.session.chat.queued", "session_id": "bot-chat",
               "status": "claimed", "delivery_id": "d".repeat(32)}),
    )
}

fn completion(content: Value) -> Canned {
    reply(
        200,
        json!({"object": "connop.session.chat.completion", "session_id": "bot-chat",
               "message": {"role": "assistant", "content": content}}),
    )
}

fn assert_chat_request(seen: &[Seen], session_id: &str) {
    let chat = seen.last().unwrap();
    assert_eq!(chat.method, "POST");
    assert_eq!(chat.path, format!("/api/sessions/{session_id}/chat"));
    let body: Value = serde_json::from_str(&chat.body).unwrap();
    assert_eq!(body, json!({"message": "hello"}));
    for request in seen {
        assert_eq!(
            request.header("authorization"),
            Some("Bearer key"),
            "{request:?}"
        );
    }
}

#[test]
fn a_queued_turn_is_reported_as_delivered_in_text() {
    let (result, out, seen) = run(vec![listing_with_bot_chat(), queued_claimed()], false);
    result.expect("the command succeeds");
    assert!(
        out.contains("went into that chat (session bot-chat)"),
        "{out}"
    );
    assert!(out.contains("Do NOT resend"), "{out}");
    assert!(!out.contains("(no reply)"), "{out}");
    assert_eq!(
        out,
        "Peer 'mini' has its Bot Chat open, so the message went into that chat (session \
         bot-chat) and is answered there. The reply cannot come back on this call. Do NOT \
         resend.\n"
    );
    assert_eq!(seen.len(), 2);
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("GET", "/api/sessions")
    );
    assert_chat_request(&seen, "bot-chat");
}

#[test]
fn a_queued_turn_is_reported_as_delivered_in_json() {
    let (result, out, _) = run(vec![listing_with_bot_chat(), queued_claimed()], true);
    result.expect("the command succeeds");
    assert!(!out.contains("(no reply)"));
    let expected = format!(
        r#"{{"peer":"mini","profile":null,"session_id":"bot-chat","status":"claimed","delivery_id":"{}"}}"#,
        "d".repeat(32)
    );
    assert_eq!(out, format!("{expected}\n"));
}

#[test]
fn the_connop_naming_of_queued_is_understood_and_missing_fields_default() {
    let queued = reply(
        202,
        json!({"object": "connop.session.chat.queued", "delivery_id": "e".repeat(40)}),
    );
    let (result, out, _) = run(vec![listing_with_bot_chat(), queued], true);
    result.expect("the command succeeds");
    let expected = format!(
        r#"{{"peer":"mini","profile":null,"session_id":"bot-chat","status":"queued","delivery_id":"{}"}}"#,
        "e".repeat(40)
    );
    assert_eq!(out, format!("{expected}\n"));

    let queued = reply(202, json!({"object": "connop.session.chat.queued"}));
    let (result, out, _) = run(vec![listing_with_bot_chat(), queued], false);
    result.expect("the command succeeds");
    assert!(
        out.contains("went into that chat (session bot-chat)"),
        "{out}"
    );
}

#[test]
fn a_completion_prints_the_reply_and_an_empty_one_prints_no_reply() {
    let (result, out, seen) = run(
        vec![listing_with_bot_chat(), completion(json!("pong"))],
        false,
    );
    result.expect("the command succeeds");
    assert_eq!(out, "pong\n");
    assert_chat_request(&seen, "bot-chat");

    let (result, out, _) = run(vec![listing_with_bot_chat(), completion(json!(""))], false);
    result.expect("the command succeeds");
    assert_eq!(out, "(no reply)\n");

    let hermes = reply(200, json!({"object": "hermes.session.chat.completion"}));
    let (result, out, _) = run(vec![listing_with_bot_chat(), hermes], false);
    result.expect("the command succeeds");
    assert_eq!(out, "(no reply)\n");
}

#[test]
fn a_json_completion_has_the_peer_profile_session_and_reply() {
    let server = Server::start(vec![listing_with_bot_chat(), completion(json!("pong"))]);
    let mut opts = options(format!("http://{}", server.addr), true);
    opts.profile = Some("cto".into());
    let (result, out) = run_with(&opts);
    server.finish();
    result.expect("the command succeeds");
    assert_eq!(
        out,
        "{\"peer\":\"mini\",\"profile\":\"cto\",\"session_id\":\"bot-chat\",\"reply\":\"pong\"}\n"
    );
}

#[test]
fn without_a_bot_chat_one_is_created_and_used() {
    let listing = reply(
        200,
        json!({"sessions": [{"session_id": "scratch", "title": "Scratch", "created_at": 3}]}),
    );
    let created = reply(
        201,
        json!({"session_id": "new-bc", "title": "Bot Chat", "source": "api_server", "created_at": 4}),
    );
    let (result, out, seen) = run(vec![listing, created, completion(json!("hi"))], false);
    result.expect("the command succeeds");
    assert_eq!(out, "hi\n");
    assert_eq!(seen.len(), 3);
    assert_eq!(
        (seen[1].method.as_str(), seen[1].path.as_str()),
        ("POST", "/api/sessions")
    );
    let body: Value = serde_json::from_str(&seen[1].body).unwrap();
    assert_eq!(body, json!({"title": "Bot Chat"}));
    assert_chat_request(&seen, "new-bc");
}

#[test]
fn the_newest_of_two_bot_chats_is_chosen() {
    let listing = reply(
        200,
        json!({"sessions": [
            {"session_id": "old", "title": "Bot Chat", "created_at": 100},
            {"session_id": "new", "title": "Bot Chat", "created_at": 200.25},
            {"session_id": "older", "title": "Bot Chat", "created_at": 50.5},
        ]}),
    );
    let (result, _, seen) = run(vec![listing, completion(json!("ok"))], false);
    result.expect("the command succeeds");
    assert_chat_request(&seen, "new");
}

#[test]
fn an_http_error_with_an_openai_style_body_is_an_err_with_its_message() {
    let failed = reply(
        500,
        json!({"error": {"message": "the agent crashed", "type": "server_error", "code": null}}),
    );
    let (result, out, _) = run(vec![listing_with_bot_chat(), failed], false);
    let err = result.unwrap_err().to_string();
    assert!(err.contains("the agent crashed"), "{err}");
    assert!(err.contains("500"), "{err}");
    assert_eq!(out, "");

    let refused = reply(401, json!({"error": {"message": "Invalid API key"}}));
    let (result, _, seen) = run(vec![refused], false);
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("401") && err.contains("Invalid API key"),
        "{err}"
    );
    assert_eq!(seen.len(), 1);
}

#[test]
fn a_non_json_body_or_an_unknown_object_is_an_err() {
    let garbage = Canned::Reply {
        status: 502,
        headers: Vec::new(),
        body: "<html>bad gateway</html>".into(),
    };
    let (result, _, _) = run(vec![listing_with_bot_chat(), garbage], false);
    let err = result.unwrap_err().to_string();
    assert!(err.contains("502") && err.contains("not JSON"), "{err}");

    let unknown = reply(200, json!({"object": "connop.run"}));
    let (result, out, _) = run(vec![listing_with_bot_chat(), unknown], false);
    let err = result.unwrap_err().to_string();
    assert!(err.contains("connop.run"), "{err}");
    assert_eq!(out, "");
}

#[test]
fn a_refused_connection_is_an_err() {
    let addr = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let (result, out) = run_with(&options(format!("http://{addr}"), false));
    let err = result.expect_err("refused");
    assert!(
        matches!(
            err,
            AppError::Upstream(UpstreamError::PeerUnreachable { method: "GET", .. })
        ),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 1);
    assert!(err.to_string().contains("/api/sessions"), "{err}");
    assert_eq!(out, "");
}

/// An empty `--url`, or one no request can be made to, is the user's to fix (exit 2), and
/// nothing is sent.
#[test]
fn a_url_that_cannot_be_used_is_a_usage_error() {
    for url in ["", "/", "http://bad host:80"] {
        let (result, out) = run_with(&options(url.to_owned(), false));
        let err = result.expect_err("refused");
        assert!(
            matches!(&err, AppError::Usage(UsageError::PeerUrl { url: given, .. }) if given == url),
            "{url:?}: {err:?}"
        );
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().starts_with("--url "), "{err}");
        assert_eq!(out, "");
    }
}

/// The command itself: `connop peer dm` on a queued answer exits 0 and prints the exact text
/// (never `(no reply)`), and the exact JSON with `--json`; a failure exits 1 with the reason
/// on stderr.
#[test]
fn the_command_exits_0_on_a_queued_answer_and_1_on_a_failure() {
    let run = |extra: &[&str], canned: Vec<Canned>| {
        let server = Server::start(canned);
        let url = format!("http://{}", server.addr);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_connop"))
            .args(["peer", "dm", "mini", "hello", "--url", &url, "--key", "k"])
            .args(extra)
            .output()
            .expect("connop runs");
        let _ = server.finish();
        out
    };
    let text = run(&[], vec![listing_with_bot_chat(), queued_claimed()]);
    assert!(text.status.success());
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert_eq!(
        stdout.trim_end(),
        "Peer 'mini' has its Bot Chat open, so the message went into that chat (session bot-chat) and is answered there. The reply cannot come back on this call. Do NOT resend."
    );
    assert!(!stdout.contains("(no reply)"));
    let json = run(&["--json"], vec![listing_with_bot_chat(), queued_claimed()]);
    assert!(json.status.success());
    let printed: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        printed,
        json!({"peer": "mini", "profile": null, "session_id": "bot-chat", "status": "claimed", "delivery_id": "d".repeat(32)})
    );
    let failed = run(
        &[],
        vec![
            listing_with_bot_chat(),
            reply(
                500,
                json!({"error": {"message": "the peer is down", "type": "server_error", "code": "x"}}),
            ),
        ],
    );
    assert_eq!(failed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&failed.stderr).contains("the peer is down"));
}

#[test]
fn an_answer_over_4_mib_is_refused_without_reading_it_whole() {
    // A well-formed completion whose reply alone is 5 MiB.
    let (result, out, _) = run(
        vec![
            listing_with_bot_chat(),
            completion(json!("r".repeat(5 << 20))),
        ],
        false,
    );
    let error = result.expect_err("refused");
    assert!(
        matches!(
            error,
            AppError::Upstream(UpstreamError::PeerAnswerTooLarge { limit, .. }) if limit == 4 << 20
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains("answered more than 4 MiB"),
        "{error}"
    );
    assert_eq!(out, "");
    // Just under the cap still reads.
    let (result, out, _) = run(
        vec![
            listing_with_bot_chat(),
            completion(json!("r".repeat(4_000_000))),
        ],
        false,
    );
    result.unwrap();
    assert_eq!(out.len(), 4_000_001);
}

#[test]
fn a_reply_keeps_its_newlines_and_tabs_and_its_other_control_characters_are_escaped() {
    // A title change, a bell, a carriage return over the line, a colour, a bidi override.
    let reply = "first line\nsecond\u{1b}]0;owned\u{7}\r\u{1b}[31mred\u{202e}\tend";
    let (result, out, _) = run(
        vec![listing_with_bot_chat(), completion(json!(reply))],
        false,
    );
    result.expect("the command succeeds");
    assert_eq!(
        out,
        "first line\nsecond\\x1b]0;owned\\x07\\r\\x1b[31mred\\u{202e}\tend\n"
    );
    // JSON escapes by itself: the reply goes as it came.
    let (result, out, _) = run(
        vec![listing_with_bot_chat(), completion(json!(reply))],
        true,
    );
    result.expect("the command succeeds");
    let printed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(printed["reply"], reply);
    // A peer's session id in the queued sentence is one line.
    let queued = reply_queued_in("bot\u{1b}[2J\nchat");
    let (result, out, _) = run(vec![listing_with_bot_chat(), queued], false);
    result.expect("the command succeeds");
    assert!(
        out.contains("(session bot\\x1b[2J\\nchat)") && !out.contains('\u{1b}'),
        "{out}"
    );
}

fn reply_queued_in(session_id: &str) -> Canned {
    reply(
        202,
        json!({"object": "connop.session.chat.queued", "session_id": session_id,
               "status": "queued", "delivery_id": "f".repeat(32)}),
    )
}

#[test]
fn a_peer_listing_sessions_a_page_at_a_time_is_read_to_its_newest_bot_chat() {
    let first = reply(
        200,
        json!({"sessions": [
            {"session_id": "older", "title": "Bot Chat", "created_at": 1.0},
            {"session_id": "scratch", "title": "Scratch", "created_at": 2.0},
        ], "next_cursor": "c/1 2"}),
    );
    let second = reply(
        200,
        json!({"sessions": [
            {"session_id": "newest", "title": "Bot Chat", "created_at": 3.0},
        ], "next_cursor": null}),
    );
    let (result, out, seen) = run(vec![first, second, completion(json!("ok"))], false);
    result.expect("the command succeeds");
    assert_eq!(out, "ok\n");
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0].path, "/api/sessions");
    assert_eq!(seen[1].path, "/api/sessions?cursor=c%2F1%202");
    assert_chat_request(&seen, "newest");
}
