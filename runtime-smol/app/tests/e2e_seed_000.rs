//! Seed 000's three tests end to end: the real `connop gateway` binary, driven through its
//! stdin/stdout (and a unix socket as the stranger transport), with the embedded simulated
//! tool gateway behind it. The user finishing at the vendor is an HTTP GET of the link.

mod support;

use serde_json::{Value, json};
use support::{Client, Gateway, Lines, decide_link};

const SID: &str = "connector-operation-e2e";

fn states(targets: &Value) -> Vec<(String, String)> {
    targets
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn pair(a: &str, b: &str) -> (String, String) {
    (a.to_owned(), b.to_owned())
}

#[test]
fn test_desktop_connect_settles_through_callback_response() {
    let mut gw = Gateway::start(&["--tick", "0.05"]);
    let sim = gw.listening();
    assert!(sim.starts_with("http://127.0.0.1:"), "{sim}");
    let created = gw.client.call(
        "session.create",
        json!({"session_id": SID, "source": "desktop"}),
    );
    assert_eq!(created["result"]["source"], "desktop");

    let manage = gw.client.send(
        "connectors.manage",
        json!({"session_id": SID, "args": {"action": "connect", "connectors": ["gmail", "notion"]},
               "agent_session_id": "20260914_rotated_agent_id"}),
    );
    let request = gw.client.lines.event("connection.request", |_| true);
    assert_eq!(request["session_id"], SID);
    let request = &request["payload"];
    let op_id = request["op_id"].as_str().unwrap().to_owned();
    assert_eq!(request["targets"].as_array().unwrap().len(), 2);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(request["deadline_at"].as_f64().unwrap() > now);

    let status = gw.client.call(
        "connectors.operation.status",
        json!({"session_id": SID, "op_id": op_id}),
    );
    let targets = &status["result"]["targets"];
    assert_eq!(
        states(targets),
        [pair("gmail", "initiated"), pair("notion", "initiated")]
    );
    for target in targets.as_array().unwrap() {
        let url = target["connect_url"].as_str().unwrap();
        assert!(
            url.starts_with(&format!(
                "{sim}/connect/ca_{}_",
                target["name"].as_str().unwrap()
            )),
            "{url}"
        );
    }

    // The user completes gmail at the vendor.
    let gmail_link = targets[0]["connect_url"].as_str().unwrap().to_owned();
    assert_eq!(decide_link(&gmail_link, "approve"), 200);
    gw.client.lines.event("connection.update", |p| {
        p["target"] == "gmail" && p["to"] == "connected"
    });

    let respond = gw.client.call(
        "connection.respond",
        json!({"session_id": SID, "op_id": op_id, "result": {"targets": [{"name": "notion", "status": "skipped"}]}}),
    );
    assert_eq!(respond["result"], json!({"status": "ok", "settled": true}));

    let settled = gw.client.lines.answer(manage);
    let result = &settled["result"];
    assert_eq!(result["status"], "settled");
    assert_eq!(result["settled_by"], "all_resolved");
    assert_eq!(
        states(&result["targets"]),
        [pair("gmail", "connected"), pair("notion", "skipped")]
    );
    assert!(!result.to_string().contains("connect_url"));

    let closed = gw.client.call(
        "connectors.operation.status",
        json!({"session_id": SID, "op_id": op_id}),
    );
    assert_eq!(closed["error"]["code"], 4004);
    let last = gw
        .client
        .lines
        .event("connection.update", |p| p["settled"] == true);
    assert_eq!(
        states(&last["payload"]["targets"]),
        [pair("gmail", "connected"), pair("notion", "skipped")]
    );

    let (status, _) = gw.close_stdin_and_wait();
    assert!(status.success());
}

#[test]
fn test_cli_connect_returns_urls_without_emitting_a_card() {
    let mut gw = Gateway::start(&[]);
    gw.client.call(
        "session.create",
        json!({"session_id": SID, "source": "cli"}),
    );
    let out = gw.client.call(
        "connectors.manage",
        json!({"session_id": SID, "args": {"action": "connect", "connectors": ["gmail", "notion"]}}),
    );
    let result = &out["result"];
    assert_eq!(result["status"], "initiated");
    assert!(
        result["targets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["connect_url"].as_str().is_some_and(|u| !u.is_empty()))
    );
    assert!(gw.client.lines.events("connection.request").is_empty());
    assert!(gw.client.lines.events("connection.update").is_empty());
    let (status, _) = gw.close_stdin_and_wait();
    assert!(status.success());
}

#[test]
fn test_connection_respond_rejects_managed_connected_claims_and_strangers() {
    let dir = std::env::temp_dir().join(format!("connop-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("gateway.sock");
    let listen = format!("unix:{}", socket.display());
    let mut gw = Gateway::start(&["--stdio", "--listen", &listen]);
    let first = gw.listening();
    let second = gw.listening();
    assert!(
        [&first, &second].iter().any(|l| l.starts_with("unix://")),
        "{first} {second}"
    );

    gw.client.call(
        "session.create",
        json!({"session_id": SID, "source": "desktop"}),
    );
    gw.client.send(
        "connectors.manage",
        json!({"session_id": SID, "args": {"action": "connect", "connectors": ["gmail"]}}),
    );
    let op_id = gw.client.lines.event("connection.request", |_| true)["payload"]["op_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let claim = gw.client.call(
        "connection.respond",
        json!({"session_id": SID, "op_id": op_id, "result": {"targets": [{"name": "gmail", "status": "connected"}]}}),
    );
    assert_eq!(claim["error"]["code"], 4002);
    assert_eq!(claim["error"]["message"], "Connection answer is invalid.");
    let status = gw.client.call(
        "connectors.operation.status",
        json!({"session_id": SID, "op_id": op_id}),
    );
    assert_eq!(
        status["result"]["targets"][0]["state"], "initiated",
        "nothing moved"
    );

    let stream =
        std::os::unix::net::UnixStream::connect(&socket).expect("the unix listener accepts");
    let lines = Lines::spawn_reader(stream.try_clone().unwrap());
    let mut stranger = Client::new(stream, lines);
    let foreign_status = stranger.call(
        "connectors.operation.status",
        json!({"session_id": SID, "op_id": op_id}),
    );
    assert_eq!(foreign_status["error"]["code"], 4001);
    let foreign = stranger.call(
        "connection.respond",
        json!({"session_id": SID, "op_id": op_id, "result": {"targets": [{"name": "gmail", "status": "skipped"}]}}),
    );
    assert_eq!(foreign["error"]["code"], 4001);
    assert_eq!(foreign["error"]["data"]["reason"], "NOT_OWNER");
    let status = gw.client.call(
        "connectors.operation.status",
        json!({"session_id": SID, "op_id": op_id}),
    );
    assert_eq!(
        status["result"]["targets"][0]["state"], "initiated",
        "the stranger moved nothing"
    );

    let (status, _) = gw.close_stdin_and_wait();
    assert!(status.success());
    let _ = std::fs::remove_dir_all(&dir);
}
