//! Seed 000's main flow at runtime level, on both runtimes: the tool call blocks in one
//! thread; the test thread plays the card — reads the live operation, lets gmail finish at
//! the vendor, skips notion — and the tool returns the frozen result without links. Every
//! hand-off is a channel with a generous bound; nothing sleeps.

use connop_blocking::{SharedRegistry, ToolContext};
use connop_core::card::{CardAnswer, CardReply};
use connop_core::contract::TargetState;
use connop_core::flow::{Event, Surface};
use connop_core::payload::{CardRequest, UpdateFrame};
use connop_core::tool_gateway::{AsyncToolGateway, BlockingToolGateway};
use connop_fixtures::{ScriptedToolGateway, SharedToolGateway};
use connop_tests::table::Runtime;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

const SID: &str = "connector-operation-e2e";
const BOUND: Duration = Duration::from_secs(5);

fn next_frame_where(
    frames: &Receiver<UpdateFrame>,
    want: impl Fn(&UpdateFrame) -> bool,
) -> UpdateFrame {
    loop {
        let frame = frames
            .recv_timeout(BOUND)
            .expect("a connection.update within the bound");
        if want(&frame) {
            return frame;
        }
    }
}

fn main_flow(runtime: Runtime) {
    // The seed's FakeConnectorClient: links without connection ids; the list reports an
    // account connected once the user finished at the vendor.
    let gateway = SharedToolGateway::new(
        ScriptedToolGateway::new()
            .without_connection_ids()
            .plain_links(),
    );
    let registry = SharedRegistry::new("/test/.connop");
    let (cards_tx, cards) = channel::<CardRequest>();
    let (frames_tx, frames) = channel::<UpdateFrame>();
    let cards_tx = std::sync::Mutex::new(cards_tx);
    let frames_tx = std::sync::Mutex::new(frames_tx);
    let events: connop_blocking::EventSink = Arc::new(move |event: &Event| match event {
        Event::Request(card) => drop(cards_tx.lock().unwrap().send((**card).clone())),
        Event::Update(frame) => drop(frames_tx.lock().unwrap().send((**frame).clone())),
        _ => {}
    });
    let args = json!({"action": "connect", "connectors": ["gmail", "notion"]});

    let (done_tx, done) = channel::<Value>();
    let tool = {
        let (registry, gateway) = (registry.clone(), gateway.clone());
        std::thread::spawn(move || {
            let result = match runtime {
                Runtime::Blocking => {
                    let mut ctx: ToolContext<dyn BlockingToolGateway> =
                        ToolContext::new(registry, SID, Arc::new(gateway));
                    ctx.surface = Surface::Desktop;
                    ctx.events = Some(events);
                    ctx.options.tick = Duration::from_millis(50);
                    ctx.agent_session_id = Some("20260914_rotated_agent_id".into());
                    connop_blocking::manage_connections(&args, &ctx).to_value()
                }
                Runtime::Smol => {
                    let mut ctx: ToolContext<dyn AsyncToolGateway> =
                        ToolContext::new(registry, SID, Arc::new(gateway));
                    ctx.surface = Surface::Desktop;
                    ctx.events = Some(events);
                    ctx.options.tick = Duration::from_millis(50);
                    ctx.agent_session_id = Some("20260914_rotated_agent_id".into());
                    smol::block_on(connop_smol::manage_connections(&args, &ctx)).to_value()
                }
            };
            done_tx.send(result).unwrap();
        })
    };

    let request = cards.recv_timeout(BOUND).expect("one connection.request");
    assert_eq!(request.targets.len(), 2);
    assert!(request.deadline_at > connop_blocking::SystemClock::new().now());

    // The status view of the live operation: both initiated, both links. It registered under
    // the gateway's session key, not the rotated agent session id.
    let op = registry
        .get(SID, request.op_id)
        .expect("registered under the session key");
    let view = serde_json::to_value(op.view().unwrap()).unwrap();
    for (target, name) in view["targets"]
        .as_array()
        .unwrap()
        .iter()
        .zip(["gmail", "notion"])
    {
        assert_eq!(target["state"], "initiated");
        assert_eq!(
            target["connect_url"],
            format!("https://connect.example/{name}")
        );
    }

    gateway.with(|gw| gw.set_connected("gmail"));
    next_frame_where(&frames, |f| {
        f.change
            .as_ref()
            .is_some_and(|c| &*c.target == "gmail" && c.to == TargetState::Connected)
    });

    let reply = op.respond(&CardAnswer::skip(&["notion"])).unwrap();
    assert_eq!(reply, CardReply { settled: true });
    // Answered after the registry entry closed: a status right after the reply finds nothing.
    assert!(registry.get(SID, request.op_id).is_none());
    assert!(registry.current(SID).is_none());

    let settled = done
        .recv_timeout(BOUND)
        .expect("the reply released the tool call");
    tool.join().unwrap();
    assert_eq!(settled["status"], "settled");
    assert_eq!(settled["settled_by"], "all_resolved");
    let states: Vec<(&str, &str)> = settled["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [("gmail", "connected"), ("notion", "skipped")]);
    assert!(!settled.to_string().contains("connect_url"));
    assert!(registry.is_empty());

    let last = next_frame_where(&frames, |f| f.view.settled());
    let finals: Vec<(&str, TargetState)> = last
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
}

#[test]
fn test_desktop_connect_settles_through_callback_response_blocking() {
    main_flow(Runtime::Blocking);
}

#[test]
fn test_desktop_connect_settles_through_callback_response_smol() {
    main_flow(Runtime::Smol);
}
