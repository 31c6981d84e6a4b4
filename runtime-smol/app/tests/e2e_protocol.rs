//! The gateway protocol end to end: framing errors keep the transport usable, a pending
//! manage never delays a status or respond, 100 sessions with an operation each all settle,
//! and shutdown (stdin EOF, SIGTERM, SIGHUP) interrupts every operation, answers every
//! pending manage and exits 0 within a second.

mod support;

use connop_app::sim_gateway::{SimOptions, SimToolGateway};
use connop_core::tool_gateway::SIMULATED_CATALOG;
use serde_json::json;
use std::time::Duration;
use support::{Gateway, connop};

#[test]
fn every_framing_error_gets_its_code_and_the_transport_stays_usable() {
    let mut gw = Gateway::start(&[]);
    let c = &mut gw.client;
    c.raw("this is not json");
    c.raw("[1, 2, 3]");
    c.raw(r#"{"id": 11}"#);
    c.raw(r#"{"id": 12, "method": 5}"#);
    c.raw(r#"{"id": 13, "method": "session.create", "params": "nope"}"#);
    c.raw(r#"{"id": 14, "method": "no.such.method"}"#);
    // A line past 1 MiB: refused without being kept, the transport goes on.
    let mut huge = br#"{"id": 15, "method": "session.create", "params": {"pad": ""#.to_vec();
    huge.extend(std::iter::repeat_n(b'x', (1 << 20) + 10));
    huge.extend(b"\"}}\n");
    c.raw_bytes(&huge);
    c.raw(r#"{"id": 16, "method": "session.create", "params": {"session_id": "after"}}"#);

    let lines = &c.lines;
    let mut codes: Vec<i64> = (0..3).map(|_| lines.null_id_error()).collect();
    codes.sort();
    assert_eq!(
        codes,
        [-32700, -32600, -32600],
        "not JSON, not an object, and the oversized line"
    );
    assert_eq!(lines.answer(11)["error"]["code"], -32600);
    assert_eq!(lines.answer(12)["error"]["code"], -32600);
    assert_eq!(lines.answer(13)["error"]["code"], -32602);
    let unknown = lines.answer(14);
    assert_eq!(unknown["error"]["code"], -32601);
    assert_eq!(
        unknown["error"]["message"],
        "unknown method: no.such.method"
    );
    assert_eq!(
        lines.answer(16)["result"]["session_id"],
        "after",
        "still usable"
    );
    // Every session method checks its params in order.
    assert_eq!(
        c.call("connectors.operation.status", json!({}))["error"]["code"],
        4000
    );
    assert_eq!(
        c.call(
            "connectors.operation.status",
            json!({"session_id": "nobody"})
        )["error"]["code"],
        4001
    );
    assert_eq!(
        c.call(
            "connectors.operation.status",
            json!({"session_id": "after"})
        )["error"]["message"],
        "op_id required"
    );
    assert_eq!(
        c.call(
            "connectors.operation.status",
            json!({"session_id": "after", "op_id": "0123456789ab"})
        )["error"]["code"],
        4004
    );
    assert_eq!(
        c.call("session.create", json!({"session_id": "after"}))["error"]["message"],
        "session already exists"
    );
    let (status, _) = gw.close_stdin_and_wait();
    assert!(status.success());
}

#[test]
fn a_pending_manage_never_delays_a_status_or_respond_on_the_same_transport() {
    let mut gw = Gateway::start(&[]);
    let c = &mut gw.client;
    c.call(
        "session.create",
        json!({"session_id": "s1", "source": "desktop"}),
    );
    let manage = c.send("connectors.manage", json!({"session_id": "s1", "args": {"action": "connect", "connectors": ["gmail", "notion"]}}));
    let op_id = c.lines.event("connection.request", |_| true)["payload"]["op_id"]
        .as_str()
        .unwrap()
        .to_owned();
    for _ in 0..20 {
        let status = c.call(
            "connectors.operation.status",
            json!({"session_id": "s1", "op_id": op_id}),
        );
        assert_eq!(status["result"]["settled"], false);
        assert!(
            !c.lines.answered(manage),
            "the manage is still pending behind the status"
        );
    }
    let skip = c.call(
        "connection.respond",
        json!({"session_id": "s1", "op_id": op_id, "result": {"targets": [{"name": "gmail", "status": "skipped"}]}}),
    );
    assert_eq!(skip["result"], json!({"status": "ok", "settled": false}));
    let cont = c.call(
        "connection.respond",
        json!({"session_id": "s1", "op_id": op_id, "result": {"settled_by": "continue"}}),
    );
    assert_eq!(cont["result"], json!({"status": "ok", "settled": true}));
    assert_eq!(c.lines.answer(manage)["result"]["settled_by"], "continue");
    let (status, _) = gw.close_stdin_and_wait();
    assert!(status.success());
}

#[test]
fn a_hundred_sessions_each_with_an_operation_all_settle() {
    // The tool gateway runs here, so the test can finish an account whose link a later
    // session's mint superseded (docs/contract.md#consent-page: such a link decides nothing).
    let sim = SimToolGateway::start(SimOptions::default().token("t0ken")).unwrap();
    let mut gw = Gateway::start_against(&sim.url(), "t0ken", &["--tick", "0.05"]);
    let c = &mut gw.client;
    let mut manages = Vec::new();
    for i in 0..100 {
        let sid = format!("s{i}");
        c.call(
            "session.create",
            json!({"session_id": sid, "source": "desktop"}),
        );
        manages.push((sid.clone(), c.send("connectors.manage", json!({"session_id": sid, "args": {"action": "connect", "connectors": ["gmail", "notion"]}}))));
    }
    // Every card shows; the user finishes gmail of even sessions at the vendor and skips the
    // rest; odd sessions press Continue.
    for (i, (sid, _)) in manages.iter().enumerate() {
        let request = c.lines.event_for_session("connection.request", sid);
        let op_id = request["payload"]["op_id"].as_str().unwrap().to_owned();
        if i % 2 == 0 {
            // One user's world: once an earlier session's gmail consent went through, a later
            // mint answers `active` (no link) and the card already shows gmail connected.
            let gmail = &request["payload"]["targets"][0];
            if let Some(link) = gmail["connect_url"].as_str() {
                assert!(link.starts_with(&sim.url()));
                let id = gmail["connection_id"].as_str().expect("a connection id");
                let newest = sim.with_world(|w| {
                    w.accounts()
                        .iter()
                        .rev()
                        .find(|a| a.connector == "gmail" && a.link)
                        .is_some_and(|a| a.connection_id == id)
                });
                if newest {
                    assert_eq!(support::decide_link(link, "approve"), 200);
                } else {
                    assert_eq!(
                        sim.set_account(id, json!({"status": "active"})).ok(),
                        Some(true)
                    );
                }
            } else {
                assert_eq!(gmail["state"], "connected", "{request}");
            }
            let answer = json!({"session_id": sid, "op_id": op_id, "result": {"targets": [{"name": "notion", "status": "skipped"}]}});
            c.send("connection.respond", answer);
        } else {
            c.send(
                "connection.respond",
                json!({"session_id": sid, "op_id": op_id, "result": {"settled_by": "continue"}}),
            );
        }
    }
    for (i, (sid, manage)) in manages.iter().enumerate() {
        let result = &c.lines.answer(*manage)["result"];
        // Even sessions: whether the skip lands before or after the watcher sees gmail
        // connected, the operation settles all_resolved once both are.
        let want = if i % 2 == 0 {
            "all_resolved"
        } else {
            "continue"
        };
        assert_eq!(result["settled_by"], want, "{sid}: {result}");
        assert_eq!(result["status"], "settled");
        if i % 2 == 0 {
            assert_eq!(result["targets"][0]["state"], "connected", "{sid}");
            assert_eq!(result["targets"][1]["state"], "skipped", "{sid}");
        }
    }
    let (status, _) = gw.close_stdin_and_wait();
    assert!(status.success());
}

fn open_operations(gw: &mut Gateway, n: usize) -> Vec<u64> {
    let mut manages = Vec::new();
    for i in 0..n {
        let sid = format!("s{i}");
        gw.client.call(
            "session.create",
            json!({"session_id": sid, "source": "desktop"}),
        );
        manages.push(gw.client.send(
            "connectors.manage",
            json!({"session_id": sid, "args": {"action": "connect", "connectors": ["gmail"]}}),
        ));
        gw.client
            .lines
            .event_for_session("connection.request", &sid);
    }
    manages
}

#[test]
fn stdin_eof_interrupts_every_operation_answers_every_manage_and_exits_0_within_a_second() {
    let mut gw = Gateway::start(&[]);
    let manages = open_operations(&mut gw, 5);
    let lines = gw.client.lines.clone();
    let (status, took) = gw.close_stdin_and_wait();
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(1), "exited after {took:?}");
    for manage in manages {
        assert_eq!(lines.answer(manage)["result"]["settled_by"], "interrupt");
    }
}

#[test]
fn sigterm_interrupts_every_operation_answers_every_manage_and_exits_0_within_a_second() {
    let mut gw = Gateway::start(&[]);
    let manages = open_operations(&mut gw, 5);
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &gw.pid().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let lines = gw.client.lines.clone();
    let (status, took) = gw.wait();
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(1), "exited after {took:?}");
    for manage in manages {
        assert_eq!(lines.answer(manage)["result"]["settled_by"], "interrupt");
    }
}

#[test]
fn sighup_settles_like_sigterm_and_ends_the_agent_commands() {
    let home = std::env::temp_dir().join(format!("connop-hup-{}", connop_app::sync::random_hex(6)));
    std::fs::create_dir_all(&home).unwrap();
    let pid_file = home.join("agent.pid");
    let agent = format!("echo $$ > '{}'; exec sleep 60", pid_file.display());
    let mut command = connop();
    command.env("CONNOP_HOME", &home);
    let mut gw = Gateway::start_command(
        command,
        &["--stdio", "--http", "127.0.0.1:0", "--agent-cmd", &agent],
    );
    let _tool_gateway = gw.listening();
    let http = gw.listening();
    let manages = open_operations(&mut gw, 3);
    let started = isahc::send(
        isahc::Request::post(format!("{http}/v1/runs"))
            .header("content-type", "application/json")
            .body(json!({"input": "go"}).to_string())
            .unwrap(),
    )
    .expect("the API answers");
    assert_eq!(started.status().as_u16(), 202);
    let agent_pid = support::http_api::wait_for_pid(&pid_file);
    let kill = std::process::Command::new("kill")
        .args(["-HUP", &gw.pid().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let lines = gw.client.lines.clone();
    let (status, took) = gw.wait();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(took < Duration::from_secs(1), "exited after {took:?}");
    for manage in manages {
        assert_eq!(lines.answer(manage)["result"]["settled_by"], "interrupt");
    }
    assert!(
        support::http_api::process_ends(agent_pid, Duration::from_secs(5)),
        "the agent command was ended"
    );
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn a_sigterm_sent_the_moment_the_first_listening_line_is_out_ends_the_gateway_with_0() {
    // The first line is the embedded tool gateway's; the JSON-RPC listener and the HTTP API
    // (its store opened) come after it. Whoever read a `listening` line may signal at once.
    // A home of its own: the user's `~/.connop` is no test's store.
    let home =
        std::env::temp_dir().join(format!("connop-term-{}", connop_app::sync::random_hex(6)));
    let mut command = connop();
    command.env("CONNOP_HOME", &home);
    let gw = Gateway::start_command(
        command,
        &["--listen", "tcp:127.0.0.1:0", "--http", "127.0.0.1:0"],
    );
    let _first = gw.listening();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &gw.pid().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let (status, took) = gw.wait();
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(1), "exited after {took:?}");
    let _ = std::fs::remove_dir_all(&home);
}

#[test]
fn connectors_list_answers_rows_unavailable_or_5034() {
    // The embedded gateway takes CONNECTOR_GATEWAY_TOKEN as its own, /sim/* included.
    let mut command = connop();
    command.env("CONNECTOR_GATEWAY_TOKEN", "t0ken");
    let mut gw = Gateway::start_command(command, &[]);
    let sim = gw.listening();
    let c = &mut gw.client;
    c.call("session.create", json!({"session_id": "s1"}));
    let listed = c.call("connectors.list", json!({"session_id": "s1"}));
    assert_eq!(listed["result"]["available"], true);
    let names: Vec<&str> = listed["result"]["connectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["connector"].as_str().unwrap())
        .collect();
    assert_eq!(names, SIMULATED_CATALOG);

    // The simulated gateway's test controls stage the failures.
    let faults = |body: serde_json::Value| {
        let request = isahc::Request::post(format!("{sim}/sim/faults"))
            .header("Authorization", "Bearer t0ken")
            .header("Content-Type", "application/json")
            .body(body.to_string())
            .unwrap();
        assert_eq!(isahc::send(request).unwrap().status().as_u16(), 200);
    };
    faults(json!({"faults": [{"route": "list", "status": 404, "count": 1}]}));
    let unavailable = c.call("connectors.list", json!({"session_id": "s1"}));
    assert_eq!(
        unavailable["result"],
        json!({"available": false, "connectors": []})
    );
    faults(json!({"faults": [{"route": "list", "status": 502, "count": 2}]}));
    let failed = c.call("connectors.list", json!({"session_id": "s1"}));
    assert_eq!(failed["error"]["code"], 5034, "{failed}");
    assert_eq!(
        failed["error"]["data"]["reason"],
        "CONNECTOR_REQUEST_FAILED"
    );
    assert_eq!(
        c.call("connectors.list", json!({"session_id": "nobody"}))["error"]["code"],
        4001
    );
    let (status, _) = gw.close_stdin_and_wait();
    assert!(status.success());
}

#[test]
fn session_interrupt_settles_the_open_operation_and_session_close_forgets_the_session() {
    let mut gw = Gateway::start(&[]);
    let c = &mut gw.client;
    c.call(
        "session.create",
        json!({"session_id": "s1", "source": "desktop"}),
    );
    let manage = c.send(
        "connectors.manage",
        json!({"session_id": "s1", "args": {"action": "connect", "connectors": ["gmail"]}}),
    );
    c.lines.event_for_session("connection.request", "s1");
    let interrupted = c.call("session.interrupt", json!({"session_id": "s1"}));
    assert_eq!(
        interrupted["result"],
        json!({"status": "ok", "interrupted": true})
    );
    assert_eq!(c.lines.answer(manage)["result"]["settled_by"], "interrupt");
    let again = c.call("session.interrupt", json!({"session_id": "s1"}));
    assert_eq!(
        again["result"]["interrupted"], false,
        "nothing open any more"
    );

    let manage = c.send(
        "connectors.manage",
        json!({"session_id": "s1", "args": {"action": "connect", "connectors": ["notion"]}}),
    );
    let second = c.lines.event("connection.request", |p| {
        p["targets"][0]["name"] == "notion"
    });
    assert_eq!(second["session_id"], "s1");
    assert_eq!(
        c.call("session.close", json!({"session_id": "s1"}))["result"],
        json!({"status": "ok"})
    );
    assert_eq!(
        c.lines.answer(manage)["result"]["settled_by"],
        "interrupt",
        "closing interrupts"
    );
    assert_eq!(
        c.call("session.interrupt", json!({"session_id": "s1"}))["error"]["code"],
        4001,
        "forgotten"
    );
    let (status, _) = gw.close_stdin_and_wait();
    assert!(status.success());
}
