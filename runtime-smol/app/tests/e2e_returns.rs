//! `connection.returned` through the real binary (docs/contract.md#return-hints): the desktop app's
//! return deep link reads the row at once, long before the next tick, with `connection.respond`'s
//! error order and an unknown target refused.

mod support;

use connop_app::sim_gateway::{SimOptions, SimToolGateway};
use serde_json::json;
use std::time::{Duration, Instant};
use support::Gateway;

const TOKEN: &str = "e2e-returns-token";

#[test]
fn connection_returned_reads_the_row_at_once_and_refuses_in_respond_s_order() {
    let sim = SimToolGateway::start(SimOptions::default().token(TOKEN)).expect("sim starts");
    // gmail's account answers pending on its first read and active from its second: only a
    // second read, which a 60 s tick would not make before the deadline, can connect it.
    sim.apply_state(json!({"scripts": {"gmail": ["pending", "active"]}}))
        .expect("state");
    let mut gw = Gateway::start_against(&sim.url(), TOKEN, &["--tick", "60", "--deadline", "30"]);
    let c = &mut gw.client;
    c.call(
        "session.create",
        json!({"session_id": "s1", "source": "desktop"}),
    );
    let manage = c.send(
        "connectors.manage",
        json!({"session_id": "s1", "args": {"action": "connect", "connectors": ["gmail", "notion"]}}),
    );
    let op_id = c.lines.event("connection.request", |_| true)["payload"]["op_id"]
        .as_str()
        .expect("op_id")
        .to_owned();

    let error = |reply: serde_json::Value| {
        (
            reply["error"]["code"].as_i64().unwrap_or_default(),
            reply["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    };
    assert_eq!(
        error(c.call("connection.returned", json!({"op_id": op_id}))),
        (4000, "session_id required".into())
    );
    assert_eq!(
        error(c.call(
            "connection.returned",
            json!({"session_id": "nobody", "op_id": op_id})
        ))
        .0,
        4001
    );
    assert_eq!(
        error(c.call("connection.returned", json!({"session_id": "s1"}))),
        (4000, "op_id required".into())
    );
    assert_eq!(
        error(c.call(
            "connection.returned",
            json!({"session_id": "s1", "op_id": "0123456789ab"})
        ))
        .0,
        4004
    );
    assert_eq!(
        error(c.call(
            "connection.returned",
            json!({"session_id": "s1", "op_id": op_id, "target": "nope"})
        )),
        (4000, "unknown target 'nope'".into())
    );

    let sent = Instant::now();
    let reply = c.call(
        "connection.returned",
        json!({"session_id": "s1", "op_id": op_id, "target": "gmail"}),
    );
    assert_eq!(reply["result"], json!({"status": "ok", "read": true}));
    let frame = c.lines.event("connection.update", |p| {
        p["target"] == "gmail" && p["to"] == "connected"
    });
    let seen = sent.elapsed();
    assert!(seen < Duration::from_secs(5), "seen after {seen:?}");
    assert_eq!(frame["session_id"], "s1");

    // Every live row (notion) without a target.
    let reply = c.call(
        "connection.returned",
        json!({"session_id": "s1", "op_id": op_id}),
    );
    assert_eq!(reply["result"], json!({"status": "ok", "read": true}));
    let skip = c.call(
        "connection.respond",
        json!({"session_id": "s1", "op_id": op_id, "result": {"targets": [{"name": "notion", "status": "skipped"}]}}),
    );
    assert_eq!(skip["result"], json!({"status": "ok", "settled": true}));
    assert_eq!(
        c.lines.answer(manage)["result"]["settled_by"],
        "all_resolved"
    );
    // Settled is closed: 4004, like a status.
    assert_eq!(
        error(c.call(
            "connection.returned",
            json!({"session_id": "s1", "op_id": op_id, "target": "gmail"})
        ))
        .0,
        4004
    );
    let (status, _) = gw.close_stdin_and_wait();
    assert!(status.success());
}

/// The return URL a `connop connect` announced in its `listener up` log line.
fn return_url(log: &support::StderrLog) -> String {
    let line = log.wait_for("the return listener", |l| {
        l.contains("listener up") && l.contains("return:")
    });
    let start = line.find("return:").expect("return:") + "return:".len();
    line[start..]
        .split_whitespace()
        .next()
        .expect("a URL")
        .trim_matches('"')
        .to_owned()
}

#[test]
fn connect_serves_a_loopback_return_url_and_each_return_reads_at_once() {
    // A hosted tool gateway (here the simulated one in this process) with
    // CONNOP_RETURN_URL=loopback: the mint carries the loopback returnTo.
    let sim = SimToolGateway::start(SimOptions::default().token(TOKEN)).expect("sim starts");
    // With a 60 s tick, only a return reads an account again before the deadline. gmail
    // answers active from its second read (the first return's). notion from its third: its
    // second is the one every change brings (gmail's connection wakes every live row), so
    // only the second return connects it, and the command is still there to answer it.
    sim.apply_state(json!({"scripts": {
        "gmail": ["pending", "active"],
        "notion": ["pending", "pending", "active"],
    }}))
    .expect("state");
    // notion's first read (the second account read) answers 1.5 s late, so it is still out
    // when gmail connects: the order that once made this test wait in vain.
    sim.queue_faults(json!({"faults": [
        {"route": "account", "delay_ms": 0},
        {"route": "account", "delay_ms": 1500},
    ]}))
    .expect("faults");
    let mut command = support::connop();
    command
        .env("CONNECTOR_GATEWAY_URL", sim.url())
        .env("CONNECTOR_GATEWAY_TOKEN", TOKEN)
        .env("CONNOP_RETURN_URL", "loopback")
        .args([
            "connect",
            "gmail",
            "notion",
            "--tick",
            "60",
            "--deadline",
            "30",
            "--json",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped());
    let (mut child, _listening, log) = support::spawn_logging(&mut command);
    let url = return_url(&log);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    log.wait_for("the card", |l| l.starts_with("connop · op "));

    // The person approves gmail at the vendor, whose redirect brings the browser back here
    // with the id the vendor gave the account.
    let gmail = account_of(&sim, "gmail");
    let notion_path = format!("/v1/connectors/accounts/{}", account_of(&sim, "notion"));
    let back = Instant::now();
    let (status, page) = get(&format!("{url}?connection_id={gmail}&status=active"));
    assert_eq!(status, 200);
    assert!(page.contains("You can close this tab"), "{page}");
    log.wait_for("gmail connected", |l| l.contains("gmail: connected"));
    let seen = back.elapsed();
    assert!(seen < Duration::from_secs(5), "seen after {seen:?}");

    // gmail's connection brings notion's second read. Until the tool gateway has it, a return
    // would be folded into it (a row reads once more right after the read it has out, and
    // notion's first read is still out), so the return would not bring a third. Waited for
    // as the gateway logs it.
    let notion_reads = || sim.log().iter().filter(|r| r.path == notion_path).count();
    let asked = Instant::now();
    while notion_reads() < 2 {
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "notion's second read never came"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    // A return naming no account this operation holds reads every live row (notion).
    let (status, _) = get(&format!("{url}?connection_id=ca_other_9&status=failed"));
    assert_eq!(status, 200);
    // On failure, the gateway's request log says which reads happened.
    log.wait_for_explained(
        "notion connected",
        |l| l.contains("notion: connected"),
        || {
            let requests: Vec<String> = sim
                .server()
                .log()
                .iter()
                .map(|r| {
                    let r = r.to_json();
                    format!("{} {}", r["method"].as_str().unwrap_or("?"), r["path"])
                })
                .collect();
            format!("\nthe tool gateway's requests: {requests:#?}")
        },
    );

    let mut stdout = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().expect("stdout"), &mut stdout)
        .expect("stdout");
    let status = support::wait_bounded(child);
    assert!(status.success(), "{:?}", log.lines());
    let result: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON result");
    assert_eq!(result["settled_by"], "all_resolved");

    let mints: Vec<_> = sim
        .log()
        .into_iter()
        .filter(|r| r.path == "/v1/connectors/connections")
        .collect();
    assert_eq!(mints.len(), 1);
    let body: serde_json::Value = serde_json::from_str(&mints[0].body).expect("mint body");
    assert_eq!(body["returnTo"], url.as_str());
}

#[test]
fn connect_with_the_embedded_tool_gateway_serves_a_return_url_and_without_it_none() {
    let mut command = support::connop();
    command
        .args(["connect", "gmail", "--sim-auto", "1", "--json"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    let (child, _listening, log) = support::spawn_logging(&mut command);
    let url = return_url(&log);
    assert_eq!(get(&url).0, 200);
    assert!(support::wait_bounded(child).success(), "{:?}", log.lines());

    // A hosted tool gateway without CONNOP_RETURN_URL: no listener, no returnTo.
    let sim = SimToolGateway::start(
        SimOptions::default()
            .token(TOKEN)
            .auto_complete(Duration::from_millis(300)),
    )
    .expect("sim starts");
    let mut command = support::connop();
    command
        .env("CONNECTOR_GATEWAY_URL", sim.url())
        .env("CONNECTOR_GATEWAY_TOKEN", TOKEN)
        .env_remove("CONNOP_RETURN_URL")
        .args(["connect", "gmail", "--tick", "0.1", "--json"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    let (child, _listening, log) = support::spawn_logging(&mut command);
    assert!(support::wait_bounded(child).success(), "{:?}", log.lines());
    assert!(
        !log.lines().iter().any(|l| l.contains("return:")),
        "{:?}",
        log.lines()
    );
    let mint = sim
        .log()
        .into_iter()
        .find(|r| r.path == "/v1/connectors/connections")
        .expect("a mint");
    let body: serde_json::Value = serde_json::from_str(&mint.body).expect("mint body");
    assert!(body.get("returnTo").is_none_or(|v| v.is_null()), "{body}");
}

/// The id of the account the simulated gateway minted for `connector`.
fn account_of(sim: &SimToolGateway, connector: &str) -> String {
    sim.with_world(|w| {
        w.accounts()
            .iter()
            .find(|a| a.connector == connector)
            .map(|a| a.connection_id.clone())
    })
    .unwrap_or_else(|| panic!("no {connector} account was minted"))
}

/// A GET as the browser makes it: status and body.
fn get(url: &str) -> (u16, String) {
    use isahc::ReadResponseExt;
    let mut response = isahc::get(url).expect("the return URL answers");
    (
        response.status().as_u16(),
        response.text().unwrap_or_default(),
    )
}
