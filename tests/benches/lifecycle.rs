//! What the runtime layer costs beyond the core: one two-target connect lifecycle (the seed
//! workload: gmail active on its 3rd read, notion on its 2nd, a 0 s tick), driven
//!
//! - by hand through the core alone (`Flow::start` to `Effect::Return`, the typed result),
//! - through `connop_blocking::manage_connections` (calls inline, the blocking driver),
//! - through `connop_smol::manage_connections` (under `smol::block_on`),
//!
//! all against the same in-process gateway, so the difference is the handle, the registry,
//! the event callback and the driver loop. `cargo bench -p connop-tests --bench lifecycle`.
//!
//! 5,000 samples of one lifecycle each: with divan's default 100, the median moved the
//! runtime-to-core ratio by about ±0.3 from run to run on a noisy machine.

use connop_blocking::{InlineCalls, SharedRegistry, ToolContext};
use connop_core::prelude::*;
use connop_core::tool_gateway::{AsyncToolGateway, BlockingToolGateway, GatewayFuture};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

fn main() {
    divan::main();
}

/// Answers at once: mints a link and an id per connector; an account reads `active` from its
/// connector's flip read on. Everything is prepared up front; a read clones `Arc<str>`s.
struct FlipGateway {
    minted: Vec<MintRow>,
    flips: [u32; 2],
    reads: [AtomicU32; 2],
}

impl FlipGateway {
    fn new() -> Self {
        let row = |name: &str| MintRow {
            connector: name.into(),
            status: MintStatus::Initiated,
            connect_url: Some(format!("https://connect.example/{name}").into()),
            connection_id: Some(format!("ca_{name}").into()),
            status_reason: None,
        };
        FlipGateway {
            minted: vec![row("gmail"), row("notion")],
            flips: [3, 2],
            reads: [AtomicU32::new(0), AtomicU32::new(0)],
        }
    }

    fn answer(&self, call: &GatewayCall) -> GatewayReply {
        match call {
            GatewayCall::Mint(_) => GatewayReply::Minted(self.minted.clone()),
            GatewayCall::Account { connection_id, .. } => {
                let i = usize::from(&**connection_id != "ca_gmail");
                let n = self.reads[i].fetch_add(1, Ordering::Relaxed) + 1;
                let row = &self.minted[i];
                GatewayReply::Account(Some(Account {
                    connection_id: connection_id.clone(),
                    connector: row.connector.clone(),
                    status: if n >= self.flips[i] {
                        AccountStatus::Active
                    } else {
                        AccountStatus::Pending
                    },
                    status_reason: None,
                }))
            }
            GatewayCall::List { .. } => GatewayReply::Connectors(Vec::new()),
        }
    }
}

impl BlockingToolGateway for FlipGateway {
    fn call(&self, call: &GatewayCall) -> Result<GatewayReply, GatewayError> {
        Ok(self.answer(call))
    }
}

impl AsyncToolGateway for FlipGateway {
    fn call(&self, call: GatewayCall) -> GatewayFuture {
        GatewayFuture::ready(Ok(self.answer(&call)))
    }
}

fn args() -> Value {
    json!({"action": "connect", "connectors": ["gmail", "notion"]})
}

/// The tool result as every host gets it (typed; a host serializes it as it needs, after).
fn check(result: &ToolResult) {
    let settled_by = match result {
        ToolResult::Model(model) => model.settled_by,
        _ => None,
    };
    assert_eq!(settled_by, Some(SettleReason::AllResolved), "{result:?}");
}

#[divan::bench(sample_count = 5000)]
fn core_only(bencher: divan::Bencher) {
    let args = args();
    bencher
        .with_inputs(FlipGateway::new)
        .bench_local_values(|gateway| {
            let mut config = FlowConfig::new(RegistryKey::new("/bench/.connop", "s1"));
            config.options.tick = Duration::ZERO;
            config.surface = Surface::Desktop;
            let mut now = Timestamp::from_secs(1_800_000_000);
            let mut flow = Flow::start(&args, config, [1, 2, 3, 4, 5, 6], now);
            let mut result = None;
            loop {
                while let Some(effect) = flow.poll_effect() {
                    match effect {
                        Effect::Register { .. } => flow.handle_registered(Ok(()), now),
                        Effect::Call { id, call } => {
                            let answer = BlockingToolGateway::call(&gateway, &call);
                            flow.handle_gateway(id, answer, now)
                                .expect("replies match their calls");
                        }
                        Effect::Emit(event) => drop(divan::black_box(event)),
                        Effect::Return(tool_result) => result = Some(*tool_result),
                        _ => {}
                    }
                }
                if flow.is_done() {
                    break;
                }
                now = flow.poll_timeout().expect("an open operation wakes").at;
                flow.handle_timeout(now);
            }
            let result = result.expect("one result");
            check(&result);
            result
        });
}

fn context<G: ?Sized>(gateway: Arc<G>) -> ToolContext<G> {
    let mut ctx = ToolContext::new(SharedRegistry::new("/bench/.connop"), "s1", gateway);
    ctx.surface = Surface::Desktop;
    ctx.options.tick = Duration::ZERO;
    ctx.events = Some(Arc::new(|event: &Event| {
        divan::black_box(event);
    }));
    ctx
}

#[divan::bench(sample_count = 5000)]
fn blocking_manage_connections(bencher: divan::Bencher) {
    let args = args();
    bencher
        .with_inputs(|| {
            let gateway: Arc<dyn BlockingToolGateway> = Arc::new(FlipGateway::new());
            let mut ctx = context(gateway.clone());
            ctx.calls = Some(Arc::new(InlineCalls(gateway)));
            ctx
        })
        .bench_local_values(|ctx| {
            let result = connop_blocking::manage_connections(&args, &ctx);
            check(&result);
            result
        });
}

#[divan::bench(sample_count = 5000)]
fn smol_manage_connections(bencher: divan::Bencher) {
    let args = args();
    bencher
        .with_inputs(|| {
            let gateway: Arc<dyn AsyncToolGateway> = Arc::new(FlipGateway::new());
            context(gateway)
        })
        .bench_local_values(|ctx| {
            let result = smol::block_on(connop_smol::manage_connections(&args, &ctx));
            check(&result);
            result
        });
}
