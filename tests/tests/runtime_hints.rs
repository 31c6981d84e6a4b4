//! Return hints through the operation handle on both runtimes: a hint from another thread
//! wakes the driver, which reads at once instead of waiting for a tick that would come after
//! the deadline.

use connop_blocking::{OpHandle, SharedRegistry, ToolContext};
use connop_core::flow::{Event, Surface};
use connop_core::tool_gateway::{AsyncToolGateway, BlockingToolGateway, GatewayCall};
use connop_fixtures::{ScriptedToolGateway, SharedToolGateway};
use serde_json::{Value, json};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A tick far past the deadline: only a hint can get a second read in.
const TICK: Duration = Duration::from_secs(60);
const DEADLINE: Duration = Duration::from_secs(20);

fn context<G: ?Sized>(gateway: Arc<G>) -> (ToolContext<G>, Receiver<OpHandle>) {
    let registry = SharedRegistry::new("/test/.connop");
    let mut ctx = ToolContext::new(registry.clone(), "s1", gateway);
    ctx.surface = Surface::Desktop;
    ctx.options.tick = TICK;
    ctx.options.deadline = DEADLINE;
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    ctx.events = Some(Arc::new(move |event: &Event| {
        if let Event::Request(card) = event {
            let op = registry.get("s1", card.op_id).expect("registered");
            let _ = tx.lock().unwrap().send(op);
        }
    }));
    (ctx, rx)
}

/// Waits for the card, lets the vendor finish, sends the hint; returns how long after the
/// hint the tool call returned, with its result.
fn hint_after_the_card(
    gateway: &SharedToolGateway,
    carded: &Receiver<OpHandle>,
    read: &Receiver<()>,
    tool: std::thread::JoinHandle<Value>,
) -> (Value, Duration) {
    let op = carded
        .recv_timeout(Duration::from_secs(10))
        .expect("the card");
    // The vendor finishes only after the first read answered pending.
    read.recv_timeout(Duration::from_secs(10))
        .expect("the first read");
    gateway.with(|gw| gw.set_connected("gmail"));
    assert!(op.return_hint(Some("nope")).is_err(), "an unknown target");
    let hinted = Instant::now();
    assert_eq!(op.return_hint(Some("gmail")), Ok(true));
    let result = tool.join().expect("the tool thread");
    let elapsed = hinted.elapsed();
    assert_eq!(op.return_hint(None), Ok(false), "settled: ignored");
    (result, elapsed)
}

/// Signals each account read once the scripted gateway answered it.
fn reads_signalled(gateway: &SharedToolGateway) -> Receiver<()> {
    let (tx, rx) = channel();
    let tx = Mutex::new(tx);
    gateway.set_hook(Arc::new(move |call: &GatewayCall, answer| {
        if matches!(call, GatewayCall::Account { .. }) {
            let _ = tx.lock().unwrap().send(());
        }
        answer
    }));
    rx
}

fn check(result: &Value, elapsed: Duration, gateway: &SharedToolGateway) {
    assert_eq!(result["settled_by"], "all_resolved", "{result}");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert_eq!(gateway.with(|gw| gw.reads_of("ca_gmail_1")), 2);
}

#[test]
fn a_hint_wakes_the_blocking_driver_and_reads_at_once() {
    let gateway = SharedToolGateway::new(ScriptedToolGateway::new());
    let read = reads_signalled(&gateway);
    let shared: Arc<dyn BlockingToolGateway> = Arc::new(gateway.clone());
    let (ctx, carded) = context(shared);
    let tool = std::thread::spawn(move || {
        connop_blocking::manage_connections(
            &json!({"action": "connect", "connectors": ["gmail"]}),
            &ctx,
        )
        .to_value()
    });
    let (result, elapsed) = hint_after_the_card(&gateway, &carded, &read, tool);
    check(&result, elapsed, &gateway);
}

#[test]
fn a_hint_wakes_the_smol_driver_and_reads_at_once() {
    let gateway = SharedToolGateway::new(ScriptedToolGateway::new());
    let read = reads_signalled(&gateway);
    let shared: Arc<dyn AsyncToolGateway> = Arc::new(gateway.clone());
    let (ctx, carded) = context(shared);
    let tool = std::thread::spawn(move || {
        smol::block_on(connop_smol::manage_connections(
            &json!({"action": "connect", "connectors": ["gmail"]}),
            &ctx,
        ))
        .to_value()
    });
    let (result, elapsed) = hint_after_the_card(&gateway, &carded, &read, tool);
    check(&result, elapsed, &gateway);
}
