//! docs/contract.md#interrupt on the wall clock: an interrupt settles at once, on both runtimes
//! with the system clock — no waiting for a tick or for a read in flight. Wall-clock tests allow at
//! most 50 ms from the trigger to the tool call's return (the benchmarks measure the real
//! figure, in microseconds).

use connop_blocking::{Interrupt, SharedRegistry, ToolContext};
use connop_core::flow::{Event, Surface};
use connop_core::tool_gateway::{AsyncToolGateway, BlockingToolGateway};
use connop_fixtures::{ScriptedToolGateway, SharedToolGateway};
use connop_tests::table::Runtime;
use serde_json::json;
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BOUND: Duration = Duration::from_millis(50);

/// Parks one operation (a 60 s tick, a read of `read_latency` in flight or not), interrupts
/// it from this thread once the card is shown, and returns how long the tool call took to
/// return after the trigger.
fn trigger_to_return(runtime: Runtime, read_latency: Duration) -> Duration {
    let gateway = SharedToolGateway::new(ScriptedToolGateway::new());
    let interrupt = Interrupt::new();
    let (carded_tx, carded) = channel();
    let carded_tx = Mutex::new(carded_tx);
    let slow = gateway.clone();
    let events = Arc::new(move |event: &Event| {
        if matches!(event, Event::Request(_)) {
            slow.set_latency(read_latency);
            let _ = carded_tx.lock().unwrap().send(());
        }
    });
    let registry = SharedRegistry::new("/test/.connop");
    let (interrupt_for_tool, args) = (
        interrupt.clone(),
        json!({"action": "connect", "connectors": ["gmail", "notion"]}),
    );
    let tool = std::thread::spawn(move || {
        let result = match runtime {
            Runtime::Blocking => {
                let mut ctx: ToolContext<dyn BlockingToolGateway> =
                    ToolContext::new(registry, "s1", Arc::new(gateway));
                ctx.surface = Surface::Desktop;
                ctx.events = Some(events);
                ctx.interrupt = Some(interrupt_for_tool);
                ctx.options.tick = Duration::from_secs(60);
                connop_blocking::manage_connections(&args, &ctx).to_value()
            }
            Runtime::Smol => {
                let mut ctx: ToolContext<dyn AsyncToolGateway> =
                    ToolContext::new(registry, "s1", Arc::new(gateway));
                ctx.surface = Surface::Desktop;
                ctx.events = Some(events);
                ctx.interrupt = Some(interrupt_for_tool);
                ctx.options.tick = Duration::from_secs(60);
                smol::block_on(connop_smol::manage_connections(&args, &ctx)).to_value()
            }
        };
        (result, Instant::now())
    });
    carded
        .recv_timeout(Duration::from_secs(10))
        .expect("the card");
    let triggered = Instant::now();
    interrupt.trigger();
    let (result, returned) = tool.join().expect("the tool thread");
    assert_eq!(result["settled_by"], "interrupt", "{result}");
    returned.saturating_duration_since(triggered)
}

#[test]
fn an_interrupt_returns_the_tool_call_within_50_ms_on_both_runtimes() {
    for runtime in [Runtime::Blocking, Runtime::Smol] {
        for read_latency in [Duration::ZERO, Duration::from_secs(3)] {
            for _ in 0..10 {
                let took = trigger_to_return(runtime, read_latency);
                assert!(
                    took < BOUND,
                    "{runtime:?}, read latency {read_latency:?}: {took:?} after the trigger"
                );
            }
        }
    }
}
