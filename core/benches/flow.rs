//! Benchmarks of the managed flow: single watcher steps and whole connect lifecycles.
//!
//! The gateway is the inline fake of `support/lifecycle.rs`.
//!
//! Setup (building and driving a flow to the state under test) runs in divan's untimed input
//! closures; only the core's work on one input, plus draining its effects, is timed.

#[path = "support/lifecycle.rs"]
mod lifecycle;

use connop_core::prelude::*;
use divan::{Bencher, black_box};
use lifecycle::*;
use std::time::Duration;

fn main() {
    divan::main();
}

const TARGET_COUNTS: &[usize] = &[1, 4, 16, 64];

/// A flow in the watching state (card path, 1 s tick) with the first tick's `n` account
/// reads in flight, the fake that minted it, and the in-flight reads' call ids in row order.
fn watching(n: usize) -> (Flow, FakeGateway, Vec<CallId>) {
    let names = names(n);
    let mut gateway = FakeGateway::new(&names, vec![u32::MAX; n]);
    let now = t0();
    let mut flow = Flow::start(
        &connect_args(&names),
        card_config(Duration::from_secs(1)),
        ENTROPY,
        now,
    );
    let (mut reads, mut carded) = (Vec::new(), false);
    while let Some(effect) = flow.poll_effect() {
        match effect {
            Effect::Register { .. } => flow.handle_registered(Ok(()), now),
            Effect::Call {
                id,
                call: call @ GatewayCall::Mint(_),
            } => {
                let reply = gateway.answer(&call);
                flow.handle_gateway(id, Ok(reply), now)
                    .expect("replies match their calls");
            }
            Effect::Call {
                id,
                call: GatewayCall::Account { .. },
            } => reads.push(id),
            Effect::Emit(Event::Request(_)) => carded = true,
            // The mint's `pending→initiated` moves.
            Effect::Emit(Event::Update(_)) => {}
            other => panic!("unexpected effect while preparing: {other:?}"),
        }
    }
    assert!(carded, "the card was emitted");
    assert_eq!(reads.len(), n, "the first tick reads every row");
    assert!(reads.iter().all(|id| flow.awaits(*id)));
    (flow, gateway, reads)
}

/// A flow whose first tick's reads all answered `pending`: the next tick is planned.
fn tick_planned(n: usize) -> (Flow, Timestamp) {
    let (mut flow, gateway, reads) = watching(n);
    let now = t0();
    for (index, id) in reads.into_iter().enumerate() {
        let reply = gateway.account(index, AccountStatus::Pending);
        flow.handle_gateway(id, Ok(reply), now)
            .expect("replies match their calls");
    }
    assert!(
        flow.poll_effect().is_none(),
        "a pending answer moves nothing"
    );
    let wake = flow.poll_timeout().expect("the next tick is planned");
    assert_eq!(wake.reason, WakeReason::Tick);
    (flow, wake.at)
}

fn drain(flow: &mut Flow) {
    while let Some(effect) = flow.poll_effect() {
        drop(black_box(effect));
    }
}

/// Deliver one `pending` account answer (no move) for an in-flight read, then drain.
#[divan::bench(args = TARGET_COUNTS)]
fn step_read_no_change(bencher: Bencher, n: usize) {
    bencher
        .with_inputs(|| {
            let (flow, gateway, reads) = watching(n);
            let reply = gateway.account(0, AccountStatus::Pending);
            (flow, reads[0], reply)
        })
        .bench_local_values(|(mut flow, id, reply)| {
            flow.handle_gateway(id, Ok(reply), t0())
                .expect("replies match their calls");
            drain(&mut flow);
            flow
        });
}

/// Deliver one `active` account answer that connects a row (an update frame with the full
/// view; with one target this also settles and returns), then drain.
#[divan::bench(args = TARGET_COUNTS)]
fn step_read_connects(bencher: Bencher, n: usize) {
    bencher
        .with_inputs(|| {
            let (flow, gateway, reads) = watching(n);
            let reply = gateway.account(0, AccountStatus::Active);
            (flow, reads[0], reply)
        })
        .bench_local_values(|(mut flow, id, reply)| {
            flow.handle_gateway(id, Ok(reply), t0())
                .expect("replies match their calls");
            drain(&mut flow);
            flow
        });
}

/// The next tick fires: `n` account reads issued, then drained.
#[divan::bench(args = TARGET_COUNTS)]
fn step_tick(bencher: Bencher, n: usize) {
    bencher
        .with_inputs(|| tick_planned(n))
        .bench_local_values(|(mut flow, at)| {
            flow.handle_timeout(at);
            drain(&mut flow);
            flow
        });
}

/// The whole connect lifecycle with tick 0; target `i` turns active on its read `2 + i % 2`.
#[divan::bench(args = TARGET_COUNTS)]
fn lifecycle_connect(bencher: Bencher, n: usize) {
    let names = names(n);
    let flips: Vec<u32> = (0..n).map(|i| 2 + (i % 2) as u32).collect();
    let (args, config, mut gateway) = lifecycle_inputs(&names, flips.clone());
    let json = run_lifecycle(&args, config, &mut gateway);
    assert!(json.contains("\"settled_by\":\"all_resolved\""), "{json}");
    bencher
        .with_inputs(|| lifecycle_inputs(&names, flips.clone()))
        .bench_local_values(|(args, config, mut gateway)| {
            let json = run_lifecycle(&args, config, &mut gateway);
            (json, args, gateway)
        });
}

/// The seed workload: gmail turns active on its 3rd read, notion on its 2nd, tick 0.
#[divan::bench]
fn lifecycle_two_targets_seed_workload(bencher: Bencher) {
    let names = vec!["gmail".to_owned(), "notion".to_owned()];
    let flips = vec![3, 2];
    let (args, config, mut gateway) = lifecycle_inputs(&names, flips.clone());
    let json = run_lifecycle(&args, config, &mut gateway);
    assert!(json.contains("\"settled_by\":\"all_resolved\""), "{json}");
    bencher
        .with_inputs(|| lifecycle_inputs(&names, flips.clone()))
        .bench_local_values(|(args, config, mut gateway)| {
            let json = run_lifecycle(&args, config, &mut gateway);
            (json, args, gateway)
        });
}
