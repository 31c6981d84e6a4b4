//! The smol runtime's own behaviours, beyond the seed table.

use connop_blocking::{Interrupt, OpHandle, SharedRegistry, ToolContext};
use connop_core::flow::{Event, Surface};
use connop_core::tool::ToolResult;
use connop_core::tool_gateway::AsyncToolGateway;
use connop_fixtures::{ScriptedToolGateway, SharedToolGateway};
use serde_json::json;
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn one_interrupt_from_another_thread_settles_every_parked_operation_on_one_executor() {
    // The interrupting thread settles every operation; the executor serializes each result
    // when its task runs (how much memory that holds at its peak is `smol_memory.rs`'s test).
    const OPS: usize = 50;
    let gateway = SharedToolGateway::new(ScriptedToolGateway::new());
    let registry = SharedRegistry::new("/test/.connop");
    let interrupt = Interrupt::new();
    let (carded_tx, carded) = channel::<OpHandle>();
    let carded_tx = Arc::new(Mutex::new(carded_tx));
    let contexts: Vec<ToolContext<dyn AsyncToolGateway>> = (0..OPS)
        .map(|i| {
            let key = format!("s{i}");
            let mut ctx: ToolContext<dyn AsyncToolGateway> =
                ToolContext::new(registry.clone(), &key, Arc::new(gateway.clone()));
            ctx.surface = Surface::Desktop;
            ctx.interrupt = Some(interrupt.clone());
            let (registry, carded_tx) = (registry.clone(), carded_tx.clone());
            ctx.events = Some(Arc::new(move |event: &Event| {
                if let Event::Request(card) = event {
                    let op = registry.get(&key, card.op_id).expect("registered");
                    let _ = carded_tx.lock().unwrap().send(op);
                }
            }));
            ctx
        })
        .collect();
    let executor = std::thread::spawn(move || {
        let args = json!({"action": "connect", "connectors": ["gmail", "notion"]});
        let ex = smol::LocalExecutor::new();
        let tasks: Vec<_> = contexts
            .iter()
            .map(|ctx| ex.spawn(connop_smol::manage_connections(&args, ctx)))
            .collect();
        smol::block_on(ex.run(async {
            let mut results = Vec::new();
            for task in tasks {
                results.push(task.await);
            }
            results
        }))
    });
    let ops: Vec<OpHandle> = (0..OPS)
        .map(|_| carded.recv_timeout(Duration::from_secs(30)).expect("card"))
        .collect();

    interrupt.trigger();

    for op in &ops {
        assert!(op.is_settled());
        assert!(op.result().is_some(), "the result is in");
    }
    let results = executor.join().expect("executor");
    assert_eq!(results.len(), OPS);
    for result in results.iter().map(ToolResult::to_value) {
        assert_eq!(result["settled_by"], "interrupt", "{result}");
    }
    assert!(registry.is_empty());
}
