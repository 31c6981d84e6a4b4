//! Load test of the blocking runtime: many card-path operations, one thread each (small
//! stacks), gateway calls inline against a lean in-process gateway that answers at once.
//!
//! `cargo run --release -p connop-blocking --example load -- [OPS] [WATCH_SECS] [PARK_SECS]`
//! (defaults 1000, 30, 10).
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
use connop_core::flow::{Event, Surface};
use connop_core::gateway::{
    Account, AccountStatus, BlockingGateway, ConnectorRow, GatewayError, MintRequest, MintRow,
    MintStatus,
};
use connop_core::operation::Text;
use serde_json::{Value, json};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

const TARGETS: [&str; 3] = ["gmail", "notion", "slack"];

// ---------------------------------------------------------------- a counting allocator

/// The system allocator, counting live heap bytes and allocations (two relaxed atomic adds
/// per call), to tell the heap an operation holds from what RSS adds on top.
struct Counting;

static LIVE: AtomicU64 = AtomicU64::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as u64, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as u64, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as u64, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn heap() -> (u64, u64) {
    (LIVE.load(Ordering::Relaxed), ALLOCS.load(Ordering::Relaxed))
}

// ---------------------------------------------------------------- the in-process gateway

/// SplitMix64: a tiny seeded PRNG.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// One minted account: when it completes (ns since the gateway's base; `u64::MAX` = never),
/// its id and connector (kept so a read clones them instead of allocating).
#[derive(Default)]
struct Slot {
    due_ns: AtomicU64,
    id: OnceLock<Text>,
    connector: OnceLock<Text>,
}

/// Answers at once. Accounts live in a preallocated slot array indexed by the number in
/// their connection id (`ca_<n>`): no lock, no map, no allocation on a read (the account's
/// id and connector are clones of shared texts).
struct LeanGateway {
    base: Instant,
    /// `None`: accounts never complete.
    watch: Option<Duration>,
    mints: AtomicU64,
    next_account: AtomicUsize,
    slots: Box<[Slot]>,
}

impl LeanGateway {
    fn new(accounts: usize, watch: Option<Duration>) -> Self {
        LeanGateway {
            base: Instant::now(),
            watch,
            mints: AtomicU64::new(0),
            next_account: AtomicUsize::new(0),
            slots: (0..accounts).map(|_| Slot::default()).collect(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    fn mint_now(&self, request: &MintRequest) -> Result<Vec<MintRow>, GatewayError> {
        // Seeded by the mint's sequence number (= the op index in spawn order).
        let mut rng = SplitMix64(self.mints.fetch_add(1, Ordering::Relaxed));
        let first = self
            .next_account
            .fetch_add(request.connectors.len(), Ordering::Relaxed);
        let now = self.now_ns();
        let mut rows = Vec::with_capacity(request.connectors.len());
        for (k, connector) in request.connectors.iter().enumerate() {
            let n = first + k;
            let slot = self
                .slots
                .get(n)
                .ok_or(GatewayError::Http { status: 507 })?;
            let due = match self.watch {
                Some(w) => now + rng.next() % (w.as_nanos() as u64).max(1),
                None => u64::MAX,
            };
            slot.due_ns.store(due, Ordering::Relaxed);
            let id: Text = format!("ca_{n}").into();
            let _ = slot.id.set(id.clone());
            let _ = slot.connector.set(connector.clone());
            rows.push(MintRow {
                connector: connector.clone(),
                status: MintStatus::Initiated,
                connect_url: Some(format!("https://connect.example/{n}").into()),
                connection_id: Some(id),
                status_reason: None,
            });
        }
        Ok(rows)
    }

    fn account_now(&self, connection_id: &str) -> Option<Account> {
        let n: usize = connection_id.strip_prefix("ca_")?.parse().ok()?;
        let slot = self.slots.get(n)?;
        let status = if self.now_ns() >= slot.due_ns.load(Ordering::Relaxed) {
            AccountStatus::Active
        } else {
            AccountStatus::Pending
        };
        Some(Account {
            connection_id: slot.id.get()?.clone(),
            connector: slot.connector.get()?.clone(),
            status,
            status_reason: None,
        })
    }
}

impl BlockingGateway for LeanGateway {
    fn list(&self, _timeout: Option<Duration>) -> Result<Vec<ConnectorRow>, GatewayError> {
        Ok(Vec::new())
    }

    fn mint(&self, request: &MintRequest) -> Result<Vec<MintRow>, GatewayError> {
        self.mint_now(request)
    }

    fn account(
        &self,
        connection_id: &str,
        _timeout: Duration,
    ) -> Result<Option<Account>, GatewayError> {
        Ok(self.account_now(connection_id))
    }
}

// ---------------------------------------------------------------- measurements

/// Whole-process CPU (includes exited threads), in seconds, from utime+stime.
fn process_cpu() -> f64 {
    const CLK_TCK: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (tick(11) + tick(12)) as f64 / CLK_TCK
}

/// CPU of every live thread, in seconds (ns precision), from their schedstat.
fn threads_cpu() -> f64 {
    let mut ns: u64 = 0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for task in dir.flatten() {
            if let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) {
                ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|f| f.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    ns as f64 / 1e9
}

/// (VmRSS, VmHWM) in bytes.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}

/// Whether a result settled `reason` with every target in `state`.
fn settled_as(result: &Value, reason: &str, state: &str) -> bool {
    result["settled_by"] == reason
        && result["targets"]
            .as_array()
            .is_some_and(|t| t.len() == TARGETS.len() && t.iter().all(|t| t["state"] == state))
}

// ---------------------------------------------------------------- the run

/// Everything the summary prints.
struct Figures {
    title: String,
    ops: usize,
    park_secs: u64,
    idle_cpu: f64,
    rss_before: u64,
    heap_before: u64,
    heap_watching: u64,
    heap_parked: u64,
    window_allocs: u64,
    p1_wall: f64,
    p1_cpu: f64,
    p1_carded: f64,
    rss_watching: u64,
    rss_after_p1: u64,
    p1_failures: usize,
    p2_wall: f64,
    p2_cpu: f64,
    p2_parked: f64,
    trigger_secs: f64,
    drain_secs: f64,
    rss_parked: u64,
    window_cpu: f64,
    window_secs: f64,
    hwm: u64,
    p2_failures: usize,
}

impl Figures {
    fn print(&self) {
        let n = self.ops as f64;
        let op_secs = n * self.park_secs as f64;
        let watch_pct = 100.0 * self.p1_cpu / self.p1_wall;
        let per_op = self.rss_parked.saturating_sub(self.rss_before) as f64 / n;
        let per_op_watching = self.rss_watching.saturating_sub(self.rss_before) as f64 / n;
        let parked_us = 1e6 * self.p2_cpu / op_secs;
        let window_us = 1e6 * self.window_cpu / (n * self.window_secs);
        let idle_us = 1e6 * self.idle_cpu / op_secs;
        let hwm = mib(self.hwm);
        let row = |name: &str, value: String, goal: &str| {
            println!("{name:<42} {value:>16}   {goal}");
        };
        let goal = |text: &str, ok: bool| format!("{text:<10}{}", verdict(ok));
        println!("{}", self.title);
        row("figure", "measured".into(), "goal");
        row("idle baseline CPU (PARK_SECS)", secs(self.idle_cpu), "");
        row(
            "RSS before operations",
            format!("{:.1} MiB", mib(self.rss_before)),
            "",
        );
        row(
            "phase 1 wall / CPU",
            pair(self.p1_wall, self.p1_cpu, " s"),
            "",
        );
        row("phase 1 all cards shown after", secs(self.p1_carded), "");
        row(
            "phase 1 CPU % of one core",
            format!("{watch_pct:.1} %"),
            &goal("< 25 %", watch_pct < 25.0),
        );
        let rss = pair(mib(self.rss_watching), mib(self.rss_after_p1), " MiB");
        row("phase 1 RSS all watching / after", rss, "");
        row(
            "phase 1 bytes/op while watching",
            format!("{per_op_watching:.0} B"),
            "",
        );
        let heap = |at: u64| at.saturating_sub(self.heap_before) as f64 / n;
        let heap = pair(heap(self.heap_watching), heap(self.heap_parked), " B");
        row("heap live/op (watching / parked)", heap, "");
        row(
            "phase 1 failures",
            self.p1_failures.to_string(),
            &goal("0", self.p1_failures == 0),
        );
        row(
            "phase 2 wall / CPU",
            pair(self.p2_wall, self.p2_cpu, " s"),
            "",
        );
        row("phase 2 all parked after", secs(self.p2_parked), "");
        let drain = format!("{:.3}/{:.3} s", self.trigger_secs, self.drain_secs);
        row("phase 2 trigger() / all settled after", drain, "");
        row(
            "phase 2 RSS all parked",
            format!("{:.1} MiB", mib(self.rss_parked)),
            "",
        );
        row(
            "bytes/op ((parked - before) / OPS)",
            format!("{per_op:.0} B"),
            &goal("< 4096 B", per_op < 4096.0),
        );
        row(
            "peak RSS (VmHWM)",
            format!("{hwm:.1} MiB"),
            &goal("< 100 MiB", hwm < 100.0),
        );
        row(
            "parked CPU/op/s (p2 CPU / OPS*PARK)",
            format!("{parked_us:.2} us"),
            &goal("< 10 us", parked_us < 10.0),
        );
        let window = format!(
            "({:.4} s CPU over {:.1} s)",
            self.window_cpu, self.window_secs
        );
        row(
            "  steady parked window only",
            format!("{window_us:.2} us"),
            &window,
        );
        let allocs = self.window_allocs as f64 / (n * self.window_secs);
        row(
            "  allocations/op/s, steady parked",
            format!("{allocs:.1}"),
            "",
        );
        row(
            "  idle baseline, same scale",
            format!("{idle_us:.3} us"),
            "",
        );
        row(
            "phase 2 failures",
            self.p2_failures.to_string(),
            &goal("0", self.p2_failures == 0),
        );
    }
}

fn secs(s: f64) -> String {
    format!("{s:.3} s")
}

fn pair(a: f64, b: f64, unit: &str) -> String {
    format!("{a:.2}/{b:.2}{unit}")
}

/// The stack of each operation's thread.
const STACK: usize = 256 * 1024;

fn context(
    registry: &SharedRegistry,
    gateway: Arc<dyn BlockingGateway>,
    cards: &Arc<AtomicUsize>,
    deadline: Duration,
) -> ToolContext<dyn BlockingGateway> {
    let mut ctx: ToolContext<dyn BlockingGateway> = ToolContext::new(registry.clone(), "", gateway);
    ctx.surface = Surface::Desktop;
    let cards = cards.clone();
    ctx.events = Some(Arc::new(move |event: &Event| {
        if matches!(event, Event::Request(_)) {
            cards.fetch_add(1, Ordering::Relaxed);
        }
    }));
    ctx.deadline = deadline;
    ctx.inline_calls = true;
    ctx
}

/// Starts `ops` operations, one thread each; each thread answers whether its operation
/// settled as expected.
fn spawn_ops(
    ctx: &ToolContext<dyn BlockingGateway>,
    prefix: &str,
    ops: usize,
    expect: (&'static str, &'static str),
) -> Vec<std::thread::JoinHandle<bool>> {
    let args = Arc::new(json!({"action": "connect", "connectors": TARGETS}));
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
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let ops = arg(1, 1_000) as usize;
    let watch_secs = arg(2, 30);
    let park_secs = arg(3, 10);
    let park = Duration::from_secs(park_secs);

    // The fake gateway's state is allocated (and touched) before "RSS before".
    let watch = Some(Duration::from_secs(watch_secs));
    let watch_gw = Arc::new(LeanGateway::new(ops * TARGETS.len(), watch));
    let park_gw = Arc::new(LeanGateway::new(ops * TARGETS.len(), None));
    let registry = SharedRegistry::new("/load/.connop");

    // Idle baseline: the main thread sleeps.
    eprintln!("idle baseline ({park_secs} s)...");
    let t0 = threads_cpu();
    std::thread::sleep(park);
    let idle_cpu = threads_cpu() - t0;
    let (rss_before, _) = memory();
    let heap_before = heap().0;

    // Phase 1: watching.
    eprintln!("phase 1: {ops} operations watching (accounts complete within {watch_secs} s)...");
    let cards = Arc::new(AtomicUsize::new(0));
    let deadline = Duration::from_secs(watch_secs + 30);
    let ctx = context(&registry, watch_gw, &cards, deadline);
    let (start, c0) = (Instant::now(), process_cpu());
    let threads = spawn_ops(&ctx, "s", ops, ("all_resolved", "connected"));
    drop(ctx);
    let carded = all_carded(&cards, ops, start, Duration::from_secs(watch_secs));
    let p1_carded = start.elapsed().as_secs_f64();
    let rss_watching = if carded { memory().0 } else { 0 };
    let heap_watching = heap().0;
    let failed = failures(threads);
    let (p1_wall, p1_cpu) = (start.elapsed().as_secs_f64(), process_cpu() - c0);
    let p1_failures = failed + ops - cards.load(Ordering::Relaxed);
    let (rss_after_p1, _) = memory();

    // Phase 2: parked, then interrupted.
    eprintln!("phase 2: {ops} operations parked for {park_secs} s, then interrupted...");
    let cards = Arc::new(AtomicUsize::new(0));
    let interrupt = Interrupt::new();
    let deadline = Duration::from_secs(park_secs + 60);
    let mut ctx = context(&registry, park_gw, &cards, deadline);
    ctx.interrupt = Some(interrupt.clone());
    let (start, c0) = (Instant::now(), process_cpu());
    let threads = spawn_ops(&ctx, "p", ops, ("interrupt", "not_connected"));
    drop(ctx);
    all_carded(&cards, ops, start, park);
    let parked = start.elapsed();
    // The steady window: every operation carded and parked; no thread starts or exits.
    let (w0, wt, a0) = (threads_cpu(), Instant::now(), heap().1);
    sleep_until(start + parked + park.saturating_sub(parked) / 2);
    let (rss_parked, _) = memory();
    let heap_parked = heap().0;
    sleep_until(start + park);
    let (window_cpu, window_secs) = (threads_cpu() - w0, wt.elapsed().as_secs_f64());
    let window_allocs = heap().1 - a0;
    let trigger_at = Instant::now();
    interrupt.trigger();
    let trigger_secs = trigger_at.elapsed().as_secs_f64();
    let failed = failures(threads);
    let drain_secs = trigger_at.elapsed().as_secs_f64();
    let (p2_wall, p2_cpu) = (start.elapsed().as_secs_f64(), process_cpu() - c0);
    let p2_failures = failed + ops - cards.load(Ordering::Relaxed);
    // VmHWM lags the per-thread RSS counters a little: never report it below a sample.
    let hwm = memory().1.max(rss_parked).max(rss_watching);
    let figures = Figures {
        title: format!(
            "connop-blocking load: {ops} ops x 3 targets, watch {watch_secs} s, \
             park {park_secs} s, 1 thread per op ({} KiB stack), inline calls",
            STACK / 1024
        ),
        ops,
        park_secs,
        idle_cpu,
        rss_before,
        heap_before,
        heap_watching,
        heap_parked,
        window_allocs,
        p1_wall,
        p1_cpu,
        p1_carded,
        rss_watching,
        rss_after_p1,
        p1_failures,
        p2_wall,
        p2_cpu,
        p2_parked: parked.as_secs_f64(),
        trigger_secs,
        drain_secs,
        rss_parked,
        window_cpu,
        window_secs,
        hwm,
        p2_failures,
    };
    figures.print();
    if figures.p1_failures + figures.p2_failures > 0 {
        std::process::exit(1);
    }
}
