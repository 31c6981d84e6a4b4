//! Seed 001, every test ported as a deterministic simulation: managed connectors on the
//! connection operation. Time is virtual; races are input orders.
//!
//! The seed's `_run` drives the tool on the desktop surface with a 0 s tick; its
//! `_desktop_callback` shows the card and returns at once. `Sim::new` is that setup.

use connop_core::contract::{Actor, SettleReason, TargetState};
use connop_core::flow::{Input, Surface};
use connop_core::operation::Patch;
use connop_core::payload::OperationView;
use connop_core::tool_gateway::{AccountStatus, GatewayError, MintStatus};
use connop_fixtures::{Latency, ScriptedRead, ScriptedToolGateway, Sim};
use connop_tests::assert_clean;
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

fn connect(names: &[&str]) -> serde_json::Value {
    json!({"action": "connect", "connectors": names})
}

fn reconnect(names: &[&str], force: bool) -> serde_json::Value {
    json!({"action": "reconnect", "connectors": names, "force": force})
}

/// The seed's `_run`: desktop, a card callback, a 0 s tick.
fn sim(gw: ScriptedToolGateway) -> Sim {
    Sim::new(gw).tick(0.0)
}

#[test]
fn test_desktop_connect_mints_once_emits_the_card_and_returns_outcomes_without_urls() {
    let gw = ScriptedToolGateway::new().flips(&[("gmail", 2), ("notion", 3)]);
    let out = sim(gw).run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    let result = out.json();

    let minted: Vec<Vec<String>> = out
        .gateway
        .mints
        .iter()
        .map(|m| m.connectors.clone())
        .collect();
    assert_eq!(
        minted,
        [["gmail", "notion"]],
        "one mint for every target, up front"
    );
    let [card] = out.cards.as_slice() else {
        panic!("one card, got {}", out.cards.len())
    };
    assert_eq!(card.op_id.as_str(), result["op_id"]);
    let names: Vec<&str> = card.targets.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["gmail", "notion"]);
    let card_json = serde_json::to_value(card).unwrap();
    for t in card_json["targets"].as_array().unwrap() {
        assert_eq!(
            (t["kind"].as_str(), t["action"].as_str()),
            (Some("connector"), Some("connect"))
        );
    }
    assert_eq!(result["status"], "settled");
    assert_eq!(result["settled_by"], "all_resolved");
    assert!(
        out.states().values().all(|s| s == "connected"),
        "{:?}",
        out.states()
    );
    assert!(!result.to_string().contains("connect_url"));
    assert!(
        out.registry
            .current(&out.flow.registry_key().clone())
            .is_none(),
        "closed on settle"
    );
}

#[test]
fn test_desktop_connect_url_stays_on_the_live_operation_for_the_panel() {
    let gw = ScriptedToolGateway::new().flips(&[("gmail", 2)]);
    let registered_at_card = Rc::new(RefCell::new(false));
    let seen = registered_at_card.clone();
    let out = sim(gw)
        .on_card(move |card, ctl| {
            // The panel finds the live operation in the registry by session and op id.
            let key = ctl.flow.registry_key().clone();
            *seen.borrow_mut() = ctl.registry.get(&key, card.op_id).is_some();
        })
        .run(connect(&["gmail"]));
    assert_clean(&out);
    assert!(*registered_at_card.borrow());
    // The live handle's result is the frozen snapshot, links included.
    let view: OperationView = out.flow.view().unwrap();
    assert!(view.settled());
    let url = view.targets[0].connect_url.as_deref().unwrap();
    assert!(url.starts_with("https://connect.example/gmail/"), "{url}");
    assert!(!out.json().to_string().contains("connect_url"));
}

#[test]
fn test_watcher_transitions_on_flip_and_settles_by_deadline_when_nothing_flips() {
    let out = sim(ScriptedToolGateway::new())
        .deadline(0.05)
        .tick(0.01)
        .run(connect(&["gmail"]));
    assert_clean(&out);
    let result = out.json();
    assert_eq!(result["settled_by"], "deadline");
    assert_eq!(result["targets"][0]["state"], "not_connected");
    assert!(
        out.gateway.reads.len() >= 2,
        "it did poll: {:?}",
        out.gateway.reads
    );
    // Virtual time makes it exact: reads at 0, 10, 20, 30, 40 ms; the deadline at 50 ms.
    assert_eq!(out.gateway.reads.len(), 5);
    assert_eq!(out.returned_at, Some(Duration::from_millis(50)));
}

#[test]
fn test_the_watcher_reads_one_account_per_target_per_tick_and_never_the_list() {
    let gw = ScriptedToolGateway::new().flips(&[("gmail", 3), ("notion", 2)]);
    let out = sim(gw).run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    assert!(out.gateway.lists.is_empty());
    assert_eq!(out.gateway.reads_of("ca_gmail_1"), 3);
    assert_eq!(
        out.gateway.reads_of("ca_notion_1"),
        2,
        "connected on read 2; never read again"
    );
    let ids: std::collections::BTreeSet<&str> = out
        .gateway
        .reads
        .iter()
        .map(|(id, _)| id.as_str())
        .collect();
    assert_eq!(ids, ["ca_gmail_1", "ca_notion_1"].into());
}

#[test]
fn test_respond_from_the_card_skips_a_target_and_wakes_the_loop() {
    let gw = ScriptedToolGateway::new().flips(&[("gmail", 2)]);
    let out = sim(gw)
        .tick(0.01)
        .on_card(|_, ctl| {
            let skip = Input::Transition {
                name: "notion".into(),
                to: TargetState::Skipped,
                actor: Actor::User,
                patch: Patch::default(),
            };
            ctl.after(Duration::from_millis(20), skip);
        })
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    assert!(
        out.log
            .render()
            .contains("handle.transition(notion -> skipped by user) -> moved")
    );
    assert_eq!(out.states()["gmail"], "connected");
    assert_eq!(out.states()["notion"], "skipped");
    assert_eq!(out.json()["settled_by"], "all_resolved");
    // Woken by the skip itself, not by the next tick.
    assert_eq!(out.returned_at, Some(Duration::from_millis(20)));
}

#[test]
fn test_mint_failure_detail_survives_and_only_an_unlisted_catalog_name_is_misrouted() {
    // The hosted list names notion: nothing is misrouted, the vendor detail stays.
    let gw = ScriptedToolGateway::new()
        .mint_status(MintStatus::Failed)
        .status_reason("vendor: bad scope")
        .listed(Some(&["gmail", "notion"]));
    let out = sim(gw)
        .deadline(0.05)
        .tick(0.01)
        .catalog(&["notion"])
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    let by = by_name(&out.json());
    assert_eq!(by["gmail"]["state"], "not_connected");
    assert_eq!(by["gmail"]["detail"], "vendor: bad scope");
    assert_eq!(by["notion"]["detail"], "vendor: bad scope");

    // notion fails and is not hosted: misrouted; gmail still connects.
    let gw = ScriptedToolGateway::new()
        .flips(&[("gmail", 1)])
        .mint_override("notion", MintStatus::Failed)
        .listed(Some(&["gmail"]));
    let out = sim(gw)
        .deadline(0.2)
        .tick(0.01)
        .catalog(&["notion"])
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    let by = by_name(&out.json());
    assert!(out.gateway.mints.len() == 1 && !out.cards.is_empty());
    assert_eq!(by["gmail"]["state"], "connected");
    assert!(
        by["notion"]["detail"]
            .as_str()
            .unwrap()
            .starts_with("notion is a local MCP server")
    );

    // Every target misrouted: settles all_resolved before any card.
    let gw = ScriptedToolGateway::new()
        .mint_status(MintStatus::Failed)
        .listed(Some(&[]));
    let out = sim(gw)
        .deadline(30.0)
        .tick(0.01)
        .catalog(&["notion"])
        .run(connect(&["notion"]));
    assert_clean(&out);
    assert!(out.cards.is_empty());
    assert_eq!(out.json()["settled_by"], "all_resolved");
    let detail = out.json()["targets"][0]["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        detail,
        "notion is a local MCP server, not a hosted connector account. Set it up as a local MCP server instead; this tool cannot connect it."
    );

    // The list read fails: nothing is misrouted and the vendor detail stays.
    let gw = ScriptedToolGateway::new()
        .mint_status(MintStatus::Failed)
        .status_reason("gateway hiccup")
        .listed(None);
    let out = sim(gw)
        .deadline(0.05)
        .tick(0.01)
        .catalog(&["notion"])
        .run(connect(&["notion"]));
    assert_clean(&out);
    assert_eq!(out.json()["targets"][0]["detail"], "gateway hiccup");
}

#[test]
fn test_reconnect_on_an_active_target_makes_no_gateway_mint() {
    let gw = ScriptedToolGateway::new().connected(&["gmail"]);
    let out = sim(gw).run(reconnect(&["gmail"], false));
    assert_clean(&out);
    assert!(out.gateway.mints.is_empty());
    assert_eq!(out.json()["targets"][0]["state"], "connected");
    assert_eq!(out.json()["settled_by"], "all_resolved");
}

#[test]
fn test_reconnect_force_always_reinitiates_even_when_active() {
    let gw = ScriptedToolGateway::new()
        .connected(&["gmail"])
        .flips(&[("gmail", 1)]);
    let out = sim(gw)
        .deadline(0.05)
        .tick(0.01)
        .run(reconnect(&["gmail"], true));
    assert_clean(&out);
    let mints: Vec<(Vec<String>, bool)> = out
        .gateway
        .mints
        .iter()
        .map(|m| (m.connectors.clone(), m.reinitiate))
        .collect();
    assert_eq!(mints, [(vec!["gmail".to_owned()], true)]);
    assert!(out.gateway.lists.is_empty(), "force skips the repair read");
}

#[test]
fn test_reconnect_on_a_disconnected_target_reinitiates() {
    let gw = ScriptedToolGateway::new().flips(&[("gmail", 2)]);
    let out = sim(gw).run(reconnect(&["gmail"], false));
    assert_clean(&out);
    let mints: Vec<(Vec<String>, bool)> = out
        .gateway
        .mints
        .iter()
        .map(|m| (m.connectors.clone(), m.reinitiate))
        .collect();
    assert_eq!(mints, [(vec!["gmail".to_owned()], true)]);
}

#[test]
fn test_off_desktop_connect_returns_links_and_does_not_block() {
    let out = sim(ScriptedToolGateway::new())
        .surface(Surface::Cli)
        .without_card()
        .run(connect(&["gmail"]));
    assert_clean(&out);
    let result = out.json();
    assert_eq!(result["status"], "initiated");
    assert!(
        result["targets"][0]["connect_url"]
            .as_str()
            .unwrap()
            .starts_with("https://connect.example/gmail/")
    );
    assert!(result.get("op_id").is_some());
    assert!(
        out.gateway.lists.is_empty() && out.gateway.reads.is_empty(),
        "no watcher without a card"
    );
    assert!(out.registry.is_empty());
    assert_eq!(out.returned_at, Some(Duration::ZERO));
}

#[test]
fn test_callback_presence_decides_the_card_path_on_tui() {
    let gw = ScriptedToolGateway::new().flips(&[("gmail", 1)]);
    let out = sim(gw).surface(Surface::Tui).run(connect(&["gmail"]));
    assert_clean(&out);
    assert_eq!(out.cards.len(), 1);
    assert_eq!(out.json()["targets"][0]["state"], "connected");
    assert!(out.json()["targets"][0].get("connect_url").is_none());
}

#[test]
fn test_second_connect_while_an_operation_is_open_is_refused() {
    use connop_core::operation::OpId;
    use connop_fixtures::SimEntry;
    let mut sim = sim(ScriptedToolGateway::new());
    let open = OpId::from_entropy([0x0b, 0x0e, 0x00, 0x00, 0x00, 0x01]);
    sim.registry
        .open(
            sim.key.clone(),
            SimEntry {
                op_id: open,
                settled: false,
            },
        )
        .unwrap();
    let out = sim.run(connect(&["notion"]));
    assert_clean(&out);
    let error = out.json()["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains("already open") && error.contains(open.as_str()),
        "{error}"
    );
    assert_eq!(
        error,
        format!(
            "a connection operation is already open in this session ({open}); it settles when the user finishes with the card, on Continue, or at its deadline. Do not start another."
        )
    );
    assert!(out.gateway.mints.is_empty());
    assert!(out.gateway.lists.is_empty() && out.gateway.reads.is_empty());
}

#[test]
fn test_connected_read_on_a_failed_target_is_ignored_not_an_error() {
    let gw = ScriptedToolGateway::new()
        .mint_status(MintStatus::Failed)
        .status_reason("denied")
        .flips(&[("gmail", 1)]);
    let out = sim(gw).deadline(0.05).tick(0.01).run(connect(&["gmail"]));
    assert_clean(&out);
    let result = out.json();
    assert!(result.get("error").is_none());
    let state = result["targets"][0]["state"].as_str().unwrap();
    assert!(["failed", "not_connected"].contains(&state), "{state}");
    assert_eq!(result["targets"][0]["detail"], "denied");
}

#[test]
fn test_continue_during_a_connected_read_keeps_the_settled_result() {
    // The read is in flight for 5 ms; the operation handle settles `continue` while it is;
    // then the read answers `active`, and is dropped.
    let gw = ScriptedToolGateway::new()
        .script("gmail", vec![ScriptedRead::Status(AccountStatus::Active)]);
    let settled_mid_read = Rc::new(RefCell::new(false));
    let flag = settled_mid_read.clone();
    let out = sim(gw)
        .tick(0.01)
        .latency(Latency {
            account: Duration::from_millis(5),
            ..Latency::default()
        })
        .on_call(move |call, ctl| {
            if call.route() == "account" && !*flag.borrow() {
                *flag.borrow_mut() = true;
                ctl.after(Duration::ZERO, Input::Settle(SettleReason::Continue));
            }
        })
        .run(connect(&["gmail"]));
    assert_clean(&out);
    assert!(*settled_mid_read.borrow());
    let result = out.json();
    assert!(result.get("error").is_none());
    assert_eq!(result["settled_by"], "continue");
    assert_eq!(result["targets"][0]["state"], "not_connected");
    assert!(
        out.log
            .render()
            .contains("account ca_gmail_1 active (late)"),
        "{}",
        out.log.render()
    );
}

#[test]
fn test_interrupt_wakes_the_loop_and_settles_before_the_next_tick() {
    let out = sim(ScriptedToolGateway::new())
        .tick(5.0)
        .deadline(10.0)
        .on_card(|_, ctl| ctl.after(Duration::from_millis(20), Input::Interrupt))
        .run(connect(&["gmail"]));
    assert_clean(&out);
    assert_eq!(out.json()["settled_by"], "interrupt");
    let returned = out.returned_at.unwrap();
    assert!(
        returned < Duration::from_secs(2),
        "woke on the interrupt, not on the 5 s tick"
    );
    assert_eq!(
        returned,
        Duration::from_millis(20),
        "exactly when the interrupt came"
    );
    assert_eq!(
        out.gateway.reads.len(),
        1,
        "one read at once after the card, none before the interrupt"
    );
}

fn by_name(result: &serde_json::Value) -> std::collections::BTreeMap<String, serde_json::Value> {
    result["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_owned(), t.clone()))
        .collect()
}

#[test]
fn a_failed_mint_returns_the_gateway_error_and_closes_unsettled() {
    let gw = ScriptedToolGateway::new().mint_error(GatewayError::Http { status: 502 });
    let out = sim(gw).run(connect(&["gmail"]));
    assert_clean(&out);
    assert_eq!(
        out.json()["error"],
        "The connector gateway request failed: the connector gateway answered HTTP 502. If this persists, the user can manage connections in the connector portal."
    );
    assert!(out.registry.is_empty(), "the registry entry is closed");
    assert!(out.frames.is_empty() && out.cards.is_empty());
    assert!(!out.flow.operation().unwrap().is_settled());
}
