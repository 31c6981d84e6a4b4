//! Load test of the blocking runtime: many card-path operations, one thread each (small
//! stacks), against a lean in-process gateway that answers at once; its calls run inline, or
//! with `worker` off the operation's thread, on the shared call pool, as with an HTTP tool
//! gateway.
//!
//! `cargo run --release -p connop-blocking --example blocking_load -- [OPS] [WATCH_SECS] [PARK_SECS] [TICK_MS] [inline|worker]`
//! (defaults 1000, 30, 10, 1000, inline).
//!
//! - Idle baseline: the main thread sleeps PARK_SECS.
//! - Phase 1 (watching): OPS operations of 3 targets; each account turns `active` at a random
//!   time within WATCH_SECS of its mint; every operation must settle `all_resolved`.
//! - Phase 2 (parked): OPS operations whose accounts never complete, left for PARK_SECS, then
//!   one shared `Interrupt` is triggered; every operation must settle `interrupt`.
//!
//! CPU: whole-process utime+stime from `/proc/self/stat` (CLK_TCK assumed 100, as
//! `getconf CLK_TCK` says here; it includes exited threads) for phase totals, and the sum of
//! every live thread's `/proc/self/task/*/schedstat` (ns on CPU) for windows in which no
//! thread starts or exits. Memory: VmRSS and VmHWM from `/proc/self/status`, and the live
//! heap from a counting global allocator (the fake gateway's slot arrays are allocated before
//! "RSS before"; the ids and links it mints, ~250 B per operation, count with the operations).

use connop_blocking::{Interrupt, SharedRegistry, ToolContext};
use connop_core::flow::Surface;
use connop_core::tool_gateway::BlockingToolGateway;
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

/// The stack of each operation's thread.
const STACK: usize = 256 * 1024;

/// How gateway calls run: `inline` on the operation's thread (an in-process gateway), or
/// `worker`: on the shared call pool, as with an HTTP tool gateway (the default of
/// `manage_connections`).
fn worker_calls() -> bool {
    std::env::args().nth(5).as_deref() == Some("worker")
}

fn context(
    registry: &SharedRegistry,
    gateway: Arc<dyn BlockingToolGateway>,
    cards: &Arc<AtomicUsize>,
    deadline: Duration,
    tick: Duration,
) -> ToolContext<dyn BlockingToolGateway> {
    let mut ctx: ToolContext<dyn BlockingToolGateway> =
        ToolContext::new(registry.clone(), "", gateway.clone());
    ctx.surface = Surface::Desktop;
    ctx.events = Some(card_counter(cards));
    ctx.options.deadline = deadline;
    ctx.options.tick = tick;
    if !worker_calls() {
        ctx.calls = Some(Arc::new(connop_blocking::InlineCalls(gateway)));
    }
    ctx
}

/// Starts `ops` operations, one thread each; each thread answers whether its operation
/// settled as expected.
fn spawn_ops(
    ctx: &ToolContext<dyn BlockingToolGateway>,
    prefix: &str,
    ops: usize,
    expect: (&'static str, &'static str),
) -> Vec<std::thread::JoinHandle<bool>> {
    let args = connect_args();
    (0..ops)
        .map(|i| {
            let mut ctx = ctx.clone();
            ctx.session_key = format!("{prefix}{i}").into();
            let args = args.clone();
            std::thread::Builder::new()
                .stack_size(STACK)
                .spawn(move || {
                    let result = connop_blocking::manage_connections(&args, &ctx);
                    settled_as(&result, expect.0, expect.1)
                })
                .expect("spawn an operation thread")
        })
        .collect()
}

/// Joins every thread and counts the operations that did not settle as expected.
fn failures(threads: Vec<std::thread::JoinHandle<bool>>) -> usize {
    threads
        .into_iter()
        .map(|t| usize::from(!t.join().unwrap_or(false)))
        .sum()
}

/// Waits until `cards` reaches `ops` or `limit` passes since `start`.
fn all_carded(cards: &AtomicUsize, ops: usize, start: Instant, limit: Duration) -> bool {
    while cards.load(Ordering::Relaxed) < ops && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(5));
    }
    cards.load(Ordering::Relaxed) == ops
}

fn sleep_until(at: Instant) {
    std::thread::sleep(at.saturating_duration_since(Instant::now()));
}

fn main() {
    let args = LoadArgs::from_env(1_000);
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

    let mut f = Figures::new(
        format!(
            "connop-blocking load: {ops} ops x 3 targets, watch {watch_secs} s, \
             park {park_secs} s, tick {tick_ms} ms, 1 thread per op ({} KiB stack), {} calls",
            STACK / 1024,
            if worker_calls() { "worker" } else { "inline" }
        ),
        ops,
        park_secs,
        Goals::thread_per_operation(ops),
    );

    // Idle baseline: the main thread sleeps.
    eprintln!("idle baseline ({park_secs} s)...");
    let t0 = threads_cpu();
    std::thread::sleep(park);
    f.idle_cpu = threads_cpu() - t0;
    f.rss_before = memory().0;
    f.heap_before = heap().0;

    // Phase 1: watching.
    eprintln!("phase 1: {ops} operations watching (accounts complete within {watch_secs} s)...");
    let cards = Arc::new(AtomicUsize::new(0));
    let deadline = Duration::from_secs(watch_secs + 30);
    let ctx = context(&registry, watch_gw, &cards, deadline, args.tick());
    let (start, c0) = (Instant::now(), process_cpu());
    let threads = spawn_ops(&ctx, "s", ops, ("all_resolved", "connected"));
    drop(ctx);
    let carded = all_carded(&cards, ops, start, Duration::from_secs(watch_secs));
    f.p1_carded = start.elapsed().as_secs_f64();
    f.rss_watching = if carded { memory().0 } else { 0 };
    f.heap_watching = heap().0;
    let failed = failures(threads);
    (f.p1_wall, f.p1_cpu) = (start.elapsed().as_secs_f64(), process_cpu() - c0);
    f.p1_failures = failed + ops - cards.load(Ordering::Relaxed);
    f.rss_after_p1 = memory().0;

    // Phase 2: parked, then interrupted.
    eprintln!("phase 2: {ops} operations parked for {park_secs} s, then interrupted...");
    let cards = Arc::new(AtomicUsize::new(0));
    let interrupt = Interrupt::new();
    let deadline = Duration::from_secs(park_secs + 60);
    let mut ctx = context(&registry, park_gw, &cards, deadline, args.tick());
    ctx.interrupt = Some(interrupt.clone());
    let (start, c0) = (Instant::now(), process_cpu());
    let threads = spawn_ops(&ctx, "p", ops, ("interrupt", "not_connected"));
    drop(ctx);
    all_carded(&cards, ops, start, park);
    let parked = start.elapsed();
    f.p2_parked = parked.as_secs_f64();
    // The steady window: every operation carded and parked; no thread starts or exits.
    let (w0, wt, a0) = (threads_cpu(), Instant::now(), heap().1);
    sleep_until(start + parked + park.saturating_sub(parked) / 2);
    f.rss_parked = memory().0;
    f.heap_parked = heap().0;
    sleep_until(start + park);
    (f.window_cpu, f.window_secs) = (threads_cpu() - w0, wt.elapsed().as_secs_f64());
    f.window_allocs = heap().1 - a0;
    let trigger_at = Instant::now();
    interrupt.trigger();
    f.trigger_secs = trigger_at.elapsed().as_secs_f64();
    let failed = failures(threads);
    f.drain_secs = trigger_at.elapsed().as_secs_f64();
    (f.p2_wall, f.p2_cpu) = (start.elapsed().as_secs_f64(), process_cpu() - c0);
    f.p2_failures = failed + ops - cards.load(Ordering::Relaxed);
    // VmHWM lags the per-thread RSS counters a little: never report it below a sample.
    f.hwm = memory().1.max(f.rss_parked).max(f.rss_watching);
    f.load_ns = memory_latency_ns(32 << 20);
    f.print();
    if f.p1_failures + f.p2_failures > 0 {
        std::process::exit(1);
    }
}
