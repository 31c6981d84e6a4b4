//! Whole effect logs (virtual timestamps) and wire payloads, pinned as insta snapshots.
//! Each log reads top to bottom as what a runtime would do: register, call, emit, close,
//! return, with every gateway answer and input at the instant it lands.

use connop_core::card::CardAnswer;
use connop_core::flow::{Input, Surface};
use connop_core::tool_gateway::MintStatus;
use connop_fixtures::{Latency, ScriptedToolGateway, Sim};
use connop_tests::assert_clean;
use serde_json::json;
use std::time::Duration;

fn connect(names: &[&str]) -> serde_json::Value {
    json!({"action": "connect", "connectors": names})
}

fn pretty<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap()
}

#[test]
fn desktop_two_target_connect() {
    let gw = ScriptedToolGateway::new().flips(&[("gmail", 2), ("notion", 3)]);
    let out = Sim::new(gw).run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    insta::assert_snapshot!(out.log.render());
    insta::assert_snapshot!("desktop_card_request", pretty(&out.cards[0]));
    insta::assert_snapshot!("desktop_first_update_frame", pretty(&out.frames[0]));
    insta::assert_snapshot!("desktop_settle_frame", pretty(out.frames.last().unwrap()));
    insta::assert_snapshot!("desktop_model_result", pretty(&out.json()));
}

#[test]
fn links_path() {
    let out = Sim::new(ScriptedToolGateway::new())
        .surface(Surface::Cli)
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    insta::assert_snapshot!(out.log.render());
    insta::assert_snapshot!("links_model_result", pretty(&out.json()));
}

#[test]
fn reconnect_repair() {
    let gw = ScriptedToolGateway::new()
        .connected(&["gmail"])
        .flips(&[("notion", 2)]);
    let out = Sim::new(gw).run(json!({"action": "reconnect", "connectors": ["gmail", "notion"]}));
    assert_clean(&out);
    insta::assert_snapshot!(out.log.render());
}

#[test]
fn misroute() {
    // notion is in the local MCP catalog, its mint fails and the gateway does not list it:
    // it is misrouted; gmail connects; the user skips notion on the card.
    let gw = ScriptedToolGateway::new()
        .flips(&[("gmail", 2)])
        .mint_override("notion", MintStatus::Failed)
        .listed(Some(&["gmail"]));
    let out = Sim::new(gw)
        .catalog(&["notion"])
        .on_card(|_, ctl| {
            ctl.after(
                Duration::from_millis(2_500),
                Input::CardAnswer(CardAnswer::skip(&["notion"])),
            )
        })
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    insta::assert_snapshot!(out.log.render());
}

#[test]
fn deadline() {
    let out = Sim::new(ScriptedToolGateway::new())
        .deadline(3.0)
        .run(connect(&["gmail"]));
    assert_clean(&out);
    insta::assert_snapshot!(out.log.render());
}

#[test]
fn continue_race() {
    // The second read of gmail would find it active, but it is in flight for 300 ms and the
    // user presses Continue 100 ms into it: Continue wins, the read lands late and is dropped.
    let gw = ScriptedToolGateway::new().flips(&[("gmail", 2)]);
    let out = Sim::new(gw)
        .latency(Latency {
            account: Duration::from_millis(300),
            ..Latency::default()
        })
        .on_card(|_, ctl| ctl.after(Duration::from_millis(1_400), Input::Continue))
        .run(connect(&["gmail", "notion"]));
    assert_clean(&out);
    insta::assert_snapshot!(out.log.render());
}

#[test]
fn status_result() {
    let gw = ScriptedToolGateway::new()
        .connected(&["gmail"])
        .listed(Some(&["gmail", "notion", "google_calendar"]));
    let out = Sim::new(gw)
        .run(json!({"action": "status", "connectors": ["gmail", "google-calendar", "slak"]}));
    assert_clean(&out);
    insta::assert_snapshot!(out.log.render());
    insta::assert_snapshot!("status_tool_result", pretty(&out.json()));
}
