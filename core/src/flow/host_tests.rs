//! What an embedding host needs from the flow beyond a tool call (docs/contract.md#host-seams and
//! #prepare): an operation it opens itself (or makes before any registry), why each
//! call is made, and its own desktop app's name.

use super::{CallPurpose, Effect, Event, Flow, FlowConfig, Surface};
use crate::contract::{Actor, SettleReason, TargetAction, TargetState};
use crate::error::CallerError;
use crate::operation::{OpId, Patch, Target};
use crate::registry::RegistryKey;
use crate::time::Timestamp;
use crate::tool::ToolResult;
use crate::tool_gateway::{Account, AccountStatus, GatewayCall, GatewayReply, MintRow, MintStatus};
use serde_json::{Value, json};

const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

fn config() -> FlowConfig {
    FlowConfig::new(RegistryKey::new("/h", "s"))
}

fn target(name: &str) -> Target {
    Target::connector(name, TargetAction::Connect)
}

fn drain(flow: &mut Flow) -> Vec<Effect> {
    std::iter::from_fn(|| flow.poll_effect()).collect()
}

#[test]
fn an_opened_operation_registers_then_holds_without_any_gateway_call() {
    let mut flow = Flow::open(
        vec![target("gmail"), target("notion")],
        config(),
        [7; 6],
        T0,
    );
    let effects = drain(&mut flow);
    assert!(
        matches!(effects.as_slice(), [Effect::Register { .. }]),
        "{effects:?}"
    );
    flow.handle_registered(Ok(()), T0);
    assert_eq!(drain(&mut flow), [], "held: no mint, no card");
    assert_eq!(flow.calls_in_flight(), 0);

    let moved = flow
        .handle_transition(
            "gmail",
            TargetState::Skipped,
            Actor::User,
            Patch::default(),
            T0,
        )
        .unwrap();
    assert!(moved.is_some());
    assert!(!flow.operation().unwrap().is_settled());
    flow.handle_transition(
        "notion",
        TargetState::Skipped,
        Actor::User,
        Patch::default(),
        T0,
    )
    .unwrap();
    let view = flow.view().unwrap();
    assert_eq!(view.settled_by, Some(SettleReason::AllResolved));
    let effects = drain(&mut flow);
    assert!(matches!(effects.first(), Some(Effect::Emit(_))));
    assert!(effects.iter().any(|e| matches!(e, Effect::Close { .. })));
    assert!(matches!(effects.last(), Some(Effect::Return(_))));
    assert!(flow.is_done());
}

#[test]
fn an_opened_operation_refused_by_the_registry_returns_the_tools_error() {
    let mut flow = Flow::open(vec![target("gmail")], config(), [7; 6], T0);
    drain(&mut flow);
    let open = OpId::from_entropy([1; 6]);
    flow.handle_registered(Err(open), T0);
    let effects = drain(&mut flow);
    let [Effect::Return(result)] = effects.as_slice() else {
        panic!("{effects:?}")
    };
    let ToolResult::Error(text) = &**result else {
        panic!("{result:?}")
    };
    assert!(text.contains("already open") && text.contains(&open.to_string()));
}

#[test]
fn every_call_says_why_it_was_made_while_it_is_awaited() {
    let mut config = config();
    config.options.local_catalog = vec!["notion".into()];
    let args = json!({"action": "connect", "connectors": ["notion"]});
    let mut flow = Flow::start(&args, config, [7; 6], T0);
    drain(&mut flow);
    flow.handle_registered(Ok(()), T0);
    let effects = drain(&mut flow);
    let [Effect::Call { id, call }] = effects.as_slice() else {
        panic!("{effects:?}")
    };
    assert!(matches!(call, GatewayCall::Mint(_)));
    assert_eq!(flow.call_purpose(*id), Some(CallPurpose::Mint));
    let failed = MintRow {
        connector: "notion".into(),
        status: MintStatus::Failed,
        connect_url: None,
        connection_id: None,
        status_reason: None,
    };
    flow.handle_gateway(*id, Ok(GatewayReply::Minted(vec![failed])), T0)
        .unwrap();
    assert_eq!(flow.call_purpose(*id), None, "answered: no longer awaited");
    let effects = drain(&mut flow);
    let list = effects
        .iter()
        .find_map(|e| match e {
            Effect::Call {
                id,
                call: GatewayCall::List { .. },
            } => Some(*id),
            _ => None,
        })
        .expect("the misroute check reads the list");
    assert_eq!(flow.call_purpose(list), Some(CallPurpose::MisrouteList));
}

#[test]
fn the_desktop_return_to_names_the_hosts_own_app_on_the_desktop_surface_only() {
    for (surface, expected) in [
        (Surface::Desktop, Some("hermes-desktop")),
        (Surface::Tui, None),
    ] {
        let mut config = config();
        config.surface = surface;
        config.desktop_return_to = "hermes-desktop".into();
        let args = json!({"action": "connect", "connectors": ["gmail"]});
        let mut flow = Flow::start(&args, config, [7; 6], T0);
        drain(&mut flow);
        flow.handle_registered(Ok(()), T0);
        let effects = drain(&mut flow);
        let [
            Effect::Call {
                call: GatewayCall::Mint(mint),
                ..
            },
        ] = effects.as_slice()
        else {
            panic!("{effects:?}")
        };
        assert_eq!(mint.return_to.as_deref(), expected);
        assert_eq!(mint.op.is_some(), expected.is_some());
    }
}

#[test]
fn a_detached_operation_is_moved_and_settled_by_its_host_alone() {
    let mut flow = Flow::detached(
        vec![target("gmail"), target("notion")],
        config(),
        [7; 6],
        T0,
    );
    assert!(
        drain(&mut flow).is_empty(),
        "no registry, no gateway call, no card"
    );
    let change = flow
        .handle_transition(
            "gmail",
            TargetState::Skipped,
            Actor::User,
            Patch::default(),
            T0,
        )
        .unwrap();
    assert!(change.is_some());
    let effects = drain(&mut flow);
    assert!(
        matches!(effects.as_slice(), [Effect::Emit(Event::Update(_))]),
        "a frame per change: {effects:?}"
    );
    assert!(!flow.handle_settle_if_all_resolved(T0), "notion is pending");
    flow.handle_transition(
        "notion",
        TargetState::Skipped,
        Actor::User,
        Patch::default(),
        T0,
    )
    .unwrap();
    drain(&mut flow);
    assert!(
        !flow.view().unwrap().settled(),
        "every target resolved, yet only the host settles it"
    );
    assert!(flow.handle_settle_if_all_resolved(T0));
    assert!(!flow.handle_settle_if_all_resolved(T0), "once");
    assert_eq!(
        flow.view().unwrap().settled_by,
        Some(SettleReason::AllResolved)
    );
    assert_eq!(
        flow.handle_register(None),
        Err(CallerError::NotDetached),
        "settled"
    );
}

#[test]
fn a_detached_operation_refused_by_the_registry_goes_on_and_may_register_later() {
    let mut flow = Flow::detached(vec![target("gmail")], config(), [7; 6], T0);
    assert_eq!(flow.registration(), None);
    flow.handle_register(None).unwrap();
    let effects = drain(&mut flow);
    assert!(
        matches!(effects.as_slice(), [Effect::Register { .. }]),
        "{effects:?}"
    );
    let open = OpId::from_entropy([1; 6]);
    flow.handle_registered(Err(open), T0);
    assert_eq!(flow.registration(), Some(Err(open)));
    assert!(
        drain(&mut flow).is_empty(),
        "no result, no close: it goes on"
    );
    flow.handle_transition(
        "gmail",
        TargetState::Initiated,
        Actor::BackendWatcher,
        Patch::default(),
        T0,
    )
    .unwrap();
    flow.handle_register(None).unwrap();
    drain(&mut flow);
    flow.handle_registered(Ok(()), T0);
    assert_eq!(flow.registration(), Some(Ok(())));
    flow.handle_settle(SettleReason::Continue, T0);
    let effects = drain(&mut flow);
    assert!(
        effects.iter().any(|e| matches!(e, Effect::Close { .. })),
        "a registered one closes on settle: {effects:?}"
    );
    let tool_flow = Flow::start(&json!({"action": "status"}), config(), [7; 6], T0);
    let mut tool_flow = tool_flow;
    assert_eq!(
        tool_flow.handle_register(None),
        Err(CallerError::NoOperation)
    );
}

#[test]
fn the_host_reads_the_live_result_and_the_card_request_at_any_time() {
    let mut gmail = target("gmail");
    gmail.action = TargetAction::Reconnect;
    gmail.instructions = Some("Finish setup".into());
    let mut config = config();
    config.tool_call_id = Some("call-1".into());
    let mut flow = Flow::detached(vec![gmail], config, [7; 6], T0);
    let link = Patch {
        connect_url: Some("https://l/gmail".into()),
        ..Patch::default()
    };
    flow.handle_transition(
        "gmail",
        TargetState::Initiated,
        Actor::BackendWatcher,
        link,
        T0,
    )
    .unwrap();
    let card = serde_json::to_value(flow.card_request().unwrap()).unwrap();
    assert_eq!(
        card["targets"][0],
        json!({"name": "gmail", "kind": "connector", "action": "reconnect", "state": "initiated",
               "instructions": "Finish setup", "connect_url": "https://l/gmail"})
    );
    assert_eq!(card["tool_call_id"], "call-1");
    let live = serde_json::to_value(flow.host_result().unwrap()).unwrap();
    assert_eq!(live["settled_by"], Value::Null);
    assert_eq!(live["targets"][0]["instructions"], "Finish setup");
    flow.handle_settle(SettleReason::Continue, T0);
    let settled = serde_json::to_value(flow.host_result().unwrap()).unwrap();
    assert_eq!(settled["settled_by"], "continue");
    assert_eq!(
        settled["targets"][0],
        json!({"name": "gmail", "kind": "connector", "action": "reconnect",
               "state": "not_connected", "connect_url": "https://l/gmail"}),
        "settled: the card is gone, and its instructions with it"
    );
}

#[test]
fn a_platform_name_is_a_surface_and_every_chat_platform_is_messaging() {
    for (platform, surface) in [
        ("", ""),
        ("  ", ""),
        (" Desktop ", "desktop"),
        ("TUI", "tui"),
        ("cli", "cli"),
        ("telegram", "messaging"),
        ("Slack", "messaging"),
        ("messaging", "messaging"),
    ] {
        assert_eq!(
            Surface::of_platform(platform).as_str(),
            surface,
            "{platform:?}"
        );
    }
    assert!(!Surface::of_platform("discord").has_card());
}

#[test]
fn a_read_that_answers_while_its_detached_operation_registers_still_moves_its_row() {
    let mut flow = Flow::detached(vec![target("gmail")], config(), [7; 6], T0);
    let account = Patch {
        connection_id: Some("ca_gmail".into()),
        ..Patch::default()
    };
    flow.handle_transition(
        "gmail",
        TargetState::Initiated,
        Actor::BackendWatcher,
        account,
        T0,
    )
    .unwrap();
    drain(&mut flow);
    flow.handle_observe(T0).unwrap();
    let effects = drain(&mut flow);
    let [
        Effect::Call {
            id,
            call: GatewayCall::Account { .. },
        },
    ] = effects.as_slice()
    else {
        panic!("{effects:?}")
    };
    // The host registers it while the read is out; the read then finds the account active.
    flow.handle_register(None).unwrap();
    let active = Account {
        connection_id: "ca_gmail".into(),
        connector: "gmail".into(),
        status: AccountStatus::Active,
        status_reason: None,
    };
    flow.handle_gateway(*id, Ok(GatewayReply::Account(Some(active))), T0)
        .unwrap();
    assert_eq!(
        flow.view().unwrap().targets[0].state,
        TargetState::Connected,
        "an awaited read is taken whole, whatever the registry does meanwhile"
    );
}
