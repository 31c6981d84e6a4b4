//! What an embedding host needs from the flow beyond a tool call (SPEC §11, §12.7): an
//! operation it opens itself, why each call is made, and its own desktop app's name.

use super::{CallPurpose, Effect, Flow, FlowConfig, Surface};
use crate::contract::{Actor, Kind, SettleReason, TargetAction, TargetState};
use crate::operation::{OpId, Patch, Target};
use crate::registry::RegistryKey;
use crate::time::Timestamp;
use crate::tool::ToolResult;
use crate::tool_gateway::{GatewayCall, GatewayReply, MintRow, MintStatus};
use serde_json::json;

const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

fn config() -> FlowConfig {
    FlowConfig::new(RegistryKey::new("/h", "s"))
}

fn target(name: &str) -> Target {
    Target {
        name: name.into(),
        kind: Kind::Connector,
        action: TargetAction::Connect,
    }
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
    config.local_catalog = vec!["notion".into()];
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
