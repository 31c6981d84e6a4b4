//! Load test of the smol runtime: many card-path operations on ONE executor thread, against
//! a lean in-process gateway that answers at once.
//!
//! `cargo run --release -p connop-smol --example smol_load -- [OPS] [WATCH_SECS] [PARK_SECS] [TICK_MS]`
//! (defaults 10000, 30, 10, 1000).
//!
//! - Idle baseline: the executor runs nothing but a PARK_SECS timer.
//! - Phase 1 (watching): OPS operations of 3 targets; each account turns `active` at a random
//!   time within WATCH_SECS of its mint; every operation must settle `all_resolved`.
//! - Phase 2 (parked): OPS operations whose accounts never complete, left for PARK_SECS, then
//!   one shared `Interrupt` is triggered; every operation must settle `interrupt`.
//!
//! CPU: whole-process utime+stime from `/proc/self/stat` (CLK_TCK assumed 100, as
//! `getconf CLK_TCK` says here) for phase totals, and the sum of every live thread's
//! `/proc/self/task/*/schedstat` (ns on CPU) for the short windows. Memory: VmRSS and VmHWM
//! from `/proc/self/status`, and the live heap from a counting global allocator (the fake
//! gateway's slot arrays are allocated before "RSS before"; the ids and links it mints, ~250 B
//! per operation, are counted with the operations).

use connop_blocking::{Interrupt, SharedRegistry, ToolContext};
use connop_core::flow::Surface;
use connop_core::tool_gateway::AsyncToolGateway;
use connop_fixtures::load::{LoadArgs, card_counter, connect_args, settled_as};
use connop_fixtures::measure::{
    Counting, Figures, Goals, heap, memory, memory_latency_ns, process_cpu, threads_cpu,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: Counting = Counting;

// ---------------------------------------------------------------- the run

fn context(
    registry: &SharedRegistry,
    gateway: Arc<dyn AsyncToolGateway>,
    cards: &Arc<AtomicUsize>,
    deadline: Duration,
    tick: Duration,
) -> ToolContext<dyn AsyncToolGateway> {
    let mut ctx: ToolContext<dyn AsyncToolGateway> =
        ToolContext::new(registry.clone(), "", gateway);
    ctx.surface = Surface::Desktop;
    ctx.events = Some(card_counter(cards));
    ctx.options.deadline = deadline;
    ctx.options.tick = tick;
    ctx
}

/// Spawns `ops` operations on `ex`; each task answers whether it settled as expected.
fn spawn_ops<'a>(
    ex: &smol::LocalExecutor<'a>,
    ctx: &ToolContext<dyn AsyncToolGateway>,
    prefix: &str,
    ops: usize,
    expect: (&'static str, &'static str),
) -> Vec<smol::Task<bool>> {
    let args = connect_args();
    (0..ops)
        .map(|i| {
            let mut ctx = ctx.clone();
            ctx.session_key = format!("{prefix}{i}").into();
            let args = args.clone();
            ex.spawn(async move {
                let result = connop_smol::manage_connections(&args, &ctx).await;
                settled_as(&result, expect.0, expect.1)
            })
        })
        .collect()
}

/// Awaits every task and counts those that did not settle as expected.
async fn failures(tasks: Vec<smol::Task<bool>>) -> usize {
    let mut failed = 0;
    for task in tasks {
        failed += usize::from(!task.await);
    }
    failed
}

/// Waits (on the executor) until `cards` reaches `ops` or `limit` passes since `start`.
async fn all_carded(cards: &AtomicUsize, ops: usize, start: Instant, limit: Duration) -> bool {
    while cards.load(Ordering::Relaxed) < ops && start.elapsed() < limit {
        smol::Timer::after(Duration::from_millis(5)).await;
    }
    cards.load(Ordering::Relaxed) == ops
}

fn main() {
    let args = LoadArgs::from_env(10_000);
    let LoadArgs {
        ops,
        watch_secs,
        park_secs,
        tick_ms,
    } = args;
    let park = args.park();
    // The fake gateways' state is allocated (and touched) before "RSS before".
    let (watch_gw, park_gw) = args.gateways();
    let registry = SharedRegistry::new("/load/.connop");
    let ex = smol::LocalExecutor::new();

    let figures = smol::block_on(ex.run(async {
        let mut f = Figures::new(
            format!(
                "connop-smol load: {ops} ops x 3 targets, watch {watch_secs} s, \
                 park {park_secs} s, tick {tick_ms} ms, 1 executor thread"
            ),
            ops,
            park_secs,
            Goals::one_executor(ops),
        );

        // Idle baseline: the executor and reactor with nothing but one timer.
        eprintln!("idle baseline ({park_secs} s)...");
        let t0 = threads_cpu();
        smol::Timer::after(park).await;
        f.idle_cpu = threads_cpu() - t0;
        f.rss_before = memory().0;
        f.heap_before = heap().0;

        // Phase 1: watching.
        eprintln!(
            "phase 1: {ops} operations watching (accounts complete within {watch_secs} s)..."
        );
        let cards = Arc::new(AtomicUsize::new(0));
        let deadline = Duration::from_secs(watch_secs + 30);
        let ctx = context(&registry, watch_gw.clone(), &cards, deadline, args.tick());
        let (start, c0) = (Instant::now(), process_cpu());
        let tasks = spawn_ops(&ex, &ctx, "s", ops, ("all_resolved", "connected"));
        drop(ctx);
        let carded = all_carded(&cards, ops, start, Duration::from_secs(watch_secs)).await;
        f.p1_carded = start.elapsed().as_secs_f64();
        f.rss_watching = if carded { memory().0 } else { 0 };
        f.heap_watching = heap().0;
        let failed = failures(tasks).await;
        (f.p1_wall, f.p1_cpu) = (start.elapsed().as_secs_f64(), process_cpu() - c0);
        f.p1_failures = failed + ops - cards.load(Ordering::Relaxed);
        f.rss_after_p1 = memory().0;

        // Phase 2: parked, then interrupted.
        eprintln!("phase 2: {ops} operations parked for {park_secs} s, then interrupted...");
        let cards = Arc::new(AtomicUsize::new(0));
        let interrupt = Interrupt::new();
        let deadline = Duration::from_secs(park_secs + 60);
        let mut ctx = context(&registry, park_gw.clone(), &cards, deadline, args.tick());
        ctx.interrupt = Some(interrupt.clone());
        let (start, c0) = (Instant::now(), process_cpu());
        let tasks = spawn_ops(&ex, &ctx, "p", ops, ("interrupt", "not_connected"));
        drop(ctx);
        all_carded(&cards, ops, start, park).await;
        let parked = start.elapsed();
        f.p2_parked = parked.as_secs_f64();
        // The steady window: every operation carded and parked, nothing else running.
        let (w0, wt, a0) = (threads_cpu(), Instant::now(), heap().1);
        smol::Timer::at(start + parked + park.saturating_sub(parked) / 2).await;
        f.rss_parked = memory().0;
        f.heap_parked = heap().0;
        smol::Timer::at(start + park).await;
        (f.window_cpu, f.window_secs) = (threads_cpu() - w0, wt.elapsed().as_secs_f64());
        f.window_allocs = heap().1 - a0;
        let trigger_at = Instant::now();
        interrupt.trigger();
        f.trigger_secs = trigger_at.elapsed().as_secs_f64();
        let failed = failures(tasks).await;
        f.drain_secs = trigger_at.elapsed().as_secs_f64();
        (f.p2_wall, f.p2_cpu) = (start.elapsed().as_secs_f64(), process_cpu() - c0);
        f.p2_failures = failed + ops - cards.load(Ordering::Relaxed);
        // VmHWM lags the per-thread RSS counters a little: never report it below a sample.
        f.hwm = memory().1.max(f.rss_parked).max(f.rss_watching);
        f.load_ns = memory_latency_ns(32 << 20);
        f
    }));
    figures.print();
    if figures.p1_failures + figures.p2_failures > 0 {
        std::process::exit(1);
    }
}
