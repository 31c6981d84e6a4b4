//! The smol runtime's heap while one interrupt settles thousands of parked operations: the
//! drain must not hold every operation's result at once. (A scaled-down `smol_load` phase 2,
//! with a peak-tracking allocator; the only test in this binary, so nothing else allocates
//! while it measures.) And once they have all ended, their memory is back: no wake-up filed
//! with the timers keeps an ended operation's task allocated.

use connop_blocking::{Interrupt, SharedRegistry, ToolContext};
use connop_core::flow::Surface;
use connop_core::tool_gateway::AsyncToolGateway;
use connop_fixtures::lean::LeanToolGateway;
use connop_fixtures::load::{TARGETS, card_counter, connect_args, settled_as};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The system allocator, keeping the live heap and its peak.
struct Peak;

static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

fn grew(by: usize) {
    let live = LIVE.fetch_add(by as u64, Ordering::Relaxed) + by as u64;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Peak {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size);
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Peak = Peak;

#[test]
fn an_interrupt_draining_parked_operations_holds_their_results_one_at_a_time() {
    const OPS: usize = 2_000;
    let gateway = Arc::new(LeanToolGateway::new(OPS * TARGETS.len(), None));
    let registry = SharedRegistry::new("/test/.connop");
    let interrupt = Interrupt::new();
    let cards = Arc::new(AtomicUsize::new(0));
    let mut ctx: ToolContext<dyn AsyncToolGateway> =
        ToolContext::new(registry.clone(), "", gateway);
    ctx.surface = Surface::Desktop;
    ctx.events = Some(card_counter(&cards));
    ctx.interrupt = Some(interrupt.clone());
    ctx.options.deadline = Duration::from_secs(120);
    let contexts: Vec<_> = (0..OPS)
        .map(|i| {
            let mut ctx = ctx.clone();
            ctx.session_key = format!("p{i}").into();
            ctx
        })
        .collect();
    drop(ctx);
    // Everything on the executor's thread, the interrupt included (as a host interrupting from
    // one of its own tasks): every operation settles before any of their tasks runs again.
    let (settled, parked, peak, before, after) = std::thread::spawn(move || {
        let args = connect_args();
        let ex = smol::LocalExecutor::new();
        let before = LIVE.load(Ordering::Relaxed);
        let tasks: Vec<_> = contexts
            .iter()
            .map(|ctx| {
                let args = args.clone();
                ex.spawn(async move {
                    let result = connop_smol::manage_connections(&args, ctx).await;
                    settled_as(&result, "interrupt", "not_connected")
                })
            })
            .collect();
        smol::block_on(ex.run(async {
            let started = Instant::now();
            while cards.load(Ordering::Relaxed) < OPS {
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "every card shows"
                );
                smol::Timer::after(Duration::from_millis(5)).await;
            }
            let parked = LIVE.load(Ordering::Relaxed);
            PEAK.store(parked, Ordering::Relaxed);
            interrupt.trigger();
            let mut settled = 0;
            for task in tasks {
                settled += usize::from(task.await);
            }
            let peak = PEAK.load(Ordering::Relaxed);
            (settled, parked, peak, before, LIVE.load(Ordering::Relaxed))
        }))
    })
    .join()
    .expect("executor");

    assert_eq!(settled, OPS, "every operation settled interrupt");
    assert!(registry.is_empty());
    let per_op = peak.saturating_sub(parked) as f64 / OPS as f64;
    eprintln!(
        "parked heap {parked} B ({:.0} B/op); the drain's peak adds {per_op:.0} B/op",
        parked as f64 / OPS as f64
    );
    // A parked operation holds about 3 KB; its result as JSON about as much again. Holding
    // every result at once (as the drain once did) adds several KB per operation.
    assert!(
        per_op < 1_024.0,
        "the drain's peak added {per_op:.0} B per operation"
    );
    // Every task has ended; each took back the wake-up it had filed with the timers (the next
    // tick's slot). What stays is the executor's own bookkeeping; a waker left in a slot would
    // keep its whole task allocated until the slot fires.
    let kept = after.saturating_sub(before) as f64 / OPS as f64;
    eprintln!("after every task ended: {kept:.0} B/op still allocated");
    assert!(
        kept < 256.0,
        "{kept:.0} B per ended operation still allocated"
    );
}
