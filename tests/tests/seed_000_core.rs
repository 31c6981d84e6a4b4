//! Seed 000's connection-operation lifecycle at core level (the JSON-RPC transport parts come
//! with the gateway binary): the desktop flow settled through card answers, links off the
//! card path, and a `connected` claim refused.
//!
//! The seed's fake gateway lists gmail and notion, mints `initiated` links
//! `https://connect.example/<name>` **without** connection ids, and reports an account
//! connected once the user finished at the vendor: the watcher follows it through the list.

use connop_core::card::CardAnswer;
use connop_core::contract::{Actor, TargetState};
use connop_core::error::CallerError;
use connop_core::flow::{Input, Surface};
use connop_core::operation::Patch;
use connop_core::payload::OperationView;
use connop_fixtures::{SIM_EPOCH, ScriptedToolGateway, Sim, WorldAction};
use connop_tests::{assert_clean, links};
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

const SID: &str = "connector-operation-e2e";

fn fake_client() -> ScriptedToolGateway {
    ScriptedToolGateway::new()
        .without_connection_ids()
        .plain_links()
}

fn desktop(gw: ScriptedToolGateway) -> Sim {
    let mut sim = Sim::new(gw).surface(Surface::Desktop).tick(0.05);
    sim.key = connop_core::registry::RegistryKey::new("/sim/.connop", SID);
    sim
}

#[test]
fn test_desktop_connect_settles_through_callback_response() {
    let status_at_card: Rc<RefCell<Option<OperationView>>> = Rc::default();
    let seen = status_at_card.clone();
    let out = desktop(fake_client())
        .on_card(move |_, ctl| {
            // The status RPC while the operation is open: both links, both initiated.
            *seen.borrow_mut() = ctl.flow.view();
            // The user finishes gmail at the vendor; later skips notion on the card.
            ctl.after(
                Duration::from_millis(100),
                WorldAction::VendorConnected("gmail".into()),
            );
            ctl.after(
                Duration::from_millis(500),
                Input::CardAnswer(CardAnswer::skip(&["notion"])),
            );
        })
        .run(json!({"action": "connect", "connectors": ["gmail", "notion"]}));
    assert_clean(&out);

    let [request] = out.cards.as_slice() else {
        panic!("one connection.request")
    };
    assert_eq!(request.targets.len(), 2);
    assert!(request.deadline_at > SIM_EPOCH);

    let initiated = status_at_card.borrow().clone().unwrap();
    let view = serde_json::to_value(&initiated).unwrap();
    let states: Vec<&str> = view["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["initiated", "initiated"]);
    assert_eq!(
        links(&view["targets"]),
        [
            (
                "gmail".to_owned(),
                "https://connect.example/gmail".to_owned()
            ),
            (
                "notion".to_owned(),
                "https://connect.example/notion".to_owned()
            )
        ]
    );

    // No connection ids: the watcher read the list, never an account.
    assert!(out.gateway.reads.is_empty());
    assert!(!out.gateway.lists.is_empty());
    let connected = out.frames.iter().position(|f| {
        f.change
            .as_ref()
            .is_some_and(|c| &*c.target == "gmail" && c.to == TargetState::Connected)
    });
    let connected = connected.expect("a connection.update for gmail → connected");
    let settle = out
        .frames
        .iter()
        .position(|f| f.change.is_none())
        .expect("a settle frame");
    assert!(connected < settle);

    assert_eq!(out.replies.len(), 1);
    assert_eq!(
        out.replies[0],
        Ok(connop_core::card::CardReply { settled: true })
    );
    assert_eq!(
        serde_json::to_value(out.replies[0].as_ref().unwrap()).unwrap(),
        json!({"status": "ok", "settled": true})
    );

    let settled = out.json();
    assert_eq!(settled["status"], "settled");
    assert_eq!(settled["settled_by"], "all_resolved");
    assert_eq!(
        out.states(),
        [
            ("gmail".into(), "connected".into()),
            ("notion".into(), "skipped".into())
        ]
        .into()
    );
    assert!(!settled.to_string().contains("connect_url"));
    let key = out.flow.registry_key().clone();
    assert!(out.registry.current(&key).is_none());
    // The status RPC has nothing left to serve: the registry no longer holds the operation.
    assert!(out.registry.get(&key, request.op_id).is_none());

    let final_update = &out.frames[settle];
    assert!(final_update.view.settled());
    let finals: Vec<(&str, TargetState)> = final_update
        .view
        .targets
        .iter()
        .map(|t| (&*t.name, t.state))
        .collect();
    assert_eq!(
        finals,
        [
            ("gmail", TargetState::Connected),
            ("notion", TargetState::Skipped)
        ]
    );
    // The settle frame carries the frozen targets, links included, for the UI.
    assert!(
        serde_json::to_string(final_update)
            .unwrap()
            .contains("https://connect.example/gmail")
    );
}

#[test]
fn test_cli_connect_returns_urls_without_emitting_a_card() {
    let mut sim = Sim::new(fake_client()).surface(Surface::Cli);
    sim.key = connop_core::registry::RegistryKey::new("/sim/.connop", SID);
    let out = sim.run(json!({"action": "connect", "connectors": ["gmail", "notion"]}));
    assert_clean(&out);
    let result = out.json();
    assert_eq!(result["status"], "initiated");
    assert!(
        links(&result["targets"])
            .iter()
            .all(|(_, url)| !url.is_empty())
    );
    assert!(
        out.cards.is_empty() && out.frames.is_empty(),
        "no connection.request, no updates"
    );
    assert!(out.registry.is_empty());
}

#[test]
fn test_connection_respond_rejects_managed_connected_claims() {
    // gmail is initiated; the card claims it connected: the whole answer is refused.
    let out = desktop(fake_client())
        .on_card(move |_, ctl| {
            let claim = CardAnswer::from_json(
                &json!({"targets": [{"name": "gmail", "status": "connected"}]}),
            )
            .unwrap();
            ctl.after(Duration::from_millis(10), Input::CardAnswer(claim));
            ctl.after(Duration::from_millis(20), Input::Interrupt);
        })
        .run(json!({"action": "connect", "connectors": ["gmail"]}));
    assert_clean(&out);
    assert_eq!(out.replies.len(), 1);
    let err = out.replies[0].clone().unwrap_err();
    assert!(matches!(err, CallerError::InvalidAnswer { ref status } if status == "connected"));
    assert_eq!(err.to_string(), "Connection answer is invalid.");
    // Nothing moved: no frame between the card and the interrupt's settle.
    let after_card: Vec<_> = out
        .frames
        .iter()
        .filter(|f| f.view.seq > out.cards[0].seq)
        .collect();
    assert_eq!(after_card.len(), 1);
    assert!(after_card[0].change.is_none(), "only the settle frame");
    assert_eq!(out.json()["settled_by"], "interrupt");
    assert_eq!(
        out.flow.view().unwrap().seq,
        out.cards[0].seq + 1,
        "only the settle bumped seq"
    );
}

#[test]
fn a_connected_claim_on_the_operation_handle_is_illegal_for_the_user() {
    // The direct seam: the user actor may not connect a target.
    let out = desktop(fake_client())
        .on_card(|_, ctl| {
            ctl.after(
                Duration::from_millis(5),
                Input::Transition {
                    name: "gmail".into(),
                    to: TargetState::Connected,
                    actor: Actor::User,
                    patch: Patch::default(),
                },
            );
            ctl.after(Duration::from_millis(6), Input::Continue);
        })
        .run(json!({"action": "connect", "connectors": ["gmail"]}));
    assert_clean(&out);
    assert!(
        out.log
            .render()
            .contains("refused: connector gmail: initiated -> connected by user")
    );
    assert_eq!(out.states()["gmail"], "not_connected");
}
