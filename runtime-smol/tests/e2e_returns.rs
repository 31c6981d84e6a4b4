//! `connection.returned` through the real binary (SPEC §12.1): the desktop app's return deep
//! link reads the row at once, long before the next tick, with `connection.respond`'s error
//! order and an unknown target refused.

mod support;

use connop_smol::app::sim_gateway::{SimOptions, SimToolGateway};
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
