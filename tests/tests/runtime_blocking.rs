//! The blocking runtime's own behaviours, beyond the seed table.

use connop_blocking::{Interrupt, SharedRegistry, ToolContext};
use connop_core::flow::{Event, Surface};
use connop_core::tool_gateway::BlockingToolGateway;
use connop_fixtures::{ScriptedToolGateway, SharedToolGateway};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

fn context(gateway: &SharedToolGateway) -> ToolContext<dyn BlockingToolGateway> {
    let mut ctx: ToolContext<dyn BlockingToolGateway> = ToolContext::new(
        SharedRegistry::new("/test/.connop"),
        "s1",
        Arc::new(gateway.clone()),
    );
    ctx.surface = Surface::Desktop;
    ctx.events = Some(Arc::new(|_: &Event| {}));
    ctx
}

#[test]
fn worker_calls_rearm_the_tick_after_answers_that_move_nothing() {
    // Reads answer `pending` (no effect at all) on the worker thread while the operation's
    // thread sleeps; the tick they plan must still wake it. Without the re-arm it slept
    // until the deadline.
    let gateway = SharedToolGateway::new(ScriptedToolGateway::new().flips(&[("gmail", 3)]));
    gateway.set_latency(Duration::from_millis(5));
    let mut ctx = context(&gateway);
    ctx.options.tick = Duration::from_millis(10);
    ctx.options.deadline = Duration::from_secs(30);
    let started = Instant::now();
    let result = connop_blocking::manage_connections(
        &json!({"action": "connect", "connectors": ["gmail"]}),
        &ctx,
    )
    .to_value();
    assert_eq!(result["settled_by"], "all_resolved");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(gateway.with(|gw| gw.reads_of("ca_gmail_1")), 3);
}

#[test]
fn an_interrupt_settles_at_once_while_a_slow_read_is_in_flight() {
    // The read takes 3 s on the worker thread; the interrupt lands while it is out and the
    // tool returns without waiting for it.
    let gateway = SharedToolGateway::new(ScriptedToolGateway::new());
    let mut ctx = context(&gateway);
    let interrupt = Interrupt::new();
    ctx.interrupt = Some(interrupt.clone());
    let (carded_tx, carded) = channel();
    let carded_tx = std::sync::Mutex::new(carded_tx);
    let slow = gateway.clone();
    ctx.events = Some(Arc::new(move |event: &Event| {
        if matches!(event, Event::Request(_)) {
            slow.set_latency(Duration::from_secs(3));
            let _ = carded_tx.lock().unwrap().send(());
        }
    }));
    let tool = std::thread::spawn(move || {
        let started = Instant::now();
        let result = connop_blocking::manage_connections(
            &json!({"action": "connect", "connectors": ["gmail"]}),
            &ctx,
        )
        .to_value();
        (result, started.elapsed())
    });
    carded
        .recv_timeout(Duration::from_secs(5))
        .expect("the card");
    interrupt.trigger();
    let (result, elapsed) = tool.join().unwrap();
    assert_eq!(result["settled_by"], "interrupt");
    assert!(
        elapsed < Duration::from_secs(2),
        "waited for the slow read: {elapsed:?}"
    );
}

/// A gateway that notes which thread ran each call.
struct Noting {
    inner: SharedToolGateway,
    threads: std::sync::Mutex<Vec<std::thread::ThreadId>>,
}

impl BlockingToolGateway for Noting {
    fn call(
        &self,
        call: &connop_core::tool_gateway::GatewayCall,
    ) -> Result<connop_core::tool_gateway::GatewayReply, connop_core::tool_gateway::GatewayError>
    {
        self.threads
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        self.inner.call(call)
    }
}

#[test]
fn operations_share_the_call_threads_instead_of_starting_one_each() {
    // Thirty operations one after another, each with a mint and reads: their calls run off
    // the operation's thread, on a few pooled threads, not on thirty started for them.
    let gateway = SharedToolGateway::new(ScriptedToolGateway::new().flips(&[("gmail", 2)]));
    let noting = Arc::new(Noting {
        inner: gateway.clone(),
        threads: Default::default(),
    });
    for i in 0..30 {
        let mut ctx: ToolContext<dyn BlockingToolGateway> = ToolContext::new(
            SharedRegistry::new("/test/.connop"),
            &format!("s{i}"),
            noting.clone(),
        );
        ctx.surface = Surface::Desktop;
        ctx.events = Some(Arc::new(|_: &Event| {}));
        ctx.options.tick = Duration::from_millis(1);
        let result = connop_blocking::manage_connections(
            &json!({"action": "connect", "connectors": ["gmail"]}),
            &ctx,
        )
        .to_value();
        assert_eq!(result["settled_by"], "all_resolved", "{result}");
        gateway.with(|gw| *gw = ScriptedToolGateway::new().flips(&[("gmail", 2)]));
    }
    let threads = noting.threads.lock().unwrap();
    assert!(
        threads.len() >= 90,
        "a mint and two reads each: {}",
        threads.len()
    );
    assert!(
        !threads.contains(&std::thread::current().id()),
        "calls ran on the operation's own thread"
    );
    let mut distinct = threads.clone();
    distinct.sort_by_key(|t| format!("{t:?}"));
    distinct.dedup();
    assert!(
        distinct.len() <= 4,
        "{} call threads for 30 operations",
        distinct.len()
    );
}

/// The user skips `name` on the card.
fn skip(
    op: &connop_blocking::OpHandle,
    name: &str,
) -> Option<connop_core::operation::ChangeRecord> {
    use connop_core::contract::{Actor, TargetState};
    use connop_core::operation::Patch;
    op.transition(name, TargetState::Skipped, Actor::User, Patch::default())
        .expect("a legal move")
}

/// An operation opened with two targets (gmail, notion) whose event sink holds the pump in the
/// first update frame after `armed` is set: it says so on `entered`, then waits for `release`
/// (at most 10 s; `gave_up` says it timed out).
struct HeldUpdate {
    ctx: ToolContext<()>,
    armed: Arc<AtomicBool>,
    gave_up: Arc<AtomicBool>,
    entered: Receiver<()>,
}

impl HeldUpdate {
    fn new(release: Receiver<()>) -> Self {
        use std::sync::Mutex;
        use std::sync::atomic::Ordering::SeqCst;
        let (entered_tx, entered) = channel();
        let (entered_tx, release) = (Mutex::new(entered_tx), Mutex::new(release));
        let armed = Arc::new(AtomicBool::new(false));
        let gave_up = Arc::new(AtomicBool::new(false));
        let mut ctx: ToolContext<()> =
            ToolContext::new(SharedRegistry::new("/test/.connop"), "s1", Arc::new(()));
        ctx.events = Some(Arc::new({
            let (armed, gave_up) = (armed.clone(), gave_up.clone());
            move |event: &Event| {
                if matches!(event, Event::Update(_)) && armed.swap(false, SeqCst) {
                    entered_tx.lock().unwrap().send(()).unwrap();
                    let released = release
                        .lock()
                        .unwrap()
                        .recv_timeout(Duration::from_secs(10));
                    gave_up.store(released.is_err(), SeqCst);
                }
            }
        }));
        HeldUpdate {
            ctx,
            armed,
            gave_up,
            entered,
        }
    }

    fn open(&self) -> connop_blocking::OpHandle {
        use connop_core::contract::TargetAction;
        use connop_core::operation::Target;
        let targets =
            ["gmail", "notion"].map(|name| Target::connector(name, TargetAction::Connect));
        self.ctx.open(targets.to_vec()).expect("opens")
    }
}

#[test]
fn an_input_that_waits_for_another_threads_pump_waits_through_the_hosts_hook() {
    // A host whose callers hold a lock the callbacks also take (Python's GIL) lets it go
    // only in its hook. Thread A's move runs an update callback that needs that lock, so it
    // blocks until the hook runs; this thread's move must wait for A's pump and must do so
    // through the hook. Waiting any other way, the callback would give up after 10 s.
    use connop_blocking::handle::waiting_through;
    use connop_core::contract::SettleReason;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    static WAITS: AtomicUsize = AtomicUsize::new(0);
    static LOCK_FREE: Mutex<Option<std::sync::mpsc::Sender<()>>> = Mutex::new(None);
    fn through(wait: &mut (dyn FnMut() + Send)) {
        WAITS.fetch_add(1, SeqCst);
        if let Some(free) = LOCK_FREE.lock().unwrap().take() {
            free.send(()).unwrap();
        }
        wait();
    }

    let (free_tx, free) = channel::<()>();
    *LOCK_FREE.lock().unwrap() = Some(free_tx);
    let held = HeldUpdate::new(free);
    let (armed, gave_up, entered) = (&held.armed, &held.gave_up, &held.entered);
    let op = held.open();

    // No other pump: the hook is not asked.
    waiting_through(through, || skip(&op, "gmail"));
    assert_eq!(WAITS.load(SeqCst), 0);

    armed.store(true, SeqCst);
    std::thread::scope(|scope| {
        let other = scope.spawn(|| op.settle(SettleReason::Continue));
        entered
            .recv_timeout(Duration::from_secs(10))
            .expect("A's callback runs");
        let won = waiting_through(through, || op.settle(SettleReason::Interrupt));
        assert!(other.join().unwrap(), "A's settle, fed first, won");
        assert!(!won);
    });
    // At least once: the pump signals progress after each effect, and a waiter whose own
    // effects have not run yet waits again.
    assert!(
        WAITS.load(SeqCst) >= 1,
        "this thread waited, through the hook"
    );
    assert!(!gave_up.load(SeqCst), "the hook freed A's callback");
    assert!(op.is_settled());
}

#[test]
fn a_driver_returns_only_after_the_caller_whose_settle_it_waited_for_is_back() {
    // A host whose callers hold a lock (Python's GIL) lets it go only to wait for another
    // thread's pump, and takes it back before its next line. Thread P's move is pumping (its
    // update callback holds it) when this thread's move settles the operation, so this thread
    // waits for P's pump to run its effects. The driver must not return before this thread is
    // back from that wait: in such a host the driver's caller would take the lock first, and
    // the answering thread's next line would run after the waiting call returned. The hook
    // holds this thread "on its way back" until the driver returns or 1 s passed.
    use connop_blocking::OpHandle;
    use connop_blocking::handle::waiting_through;
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::mpsc::Sender;
    use std::sync::{Mutex, OnceLock};

    static OP: OnceLock<OpHandle> = OnceLock::new();
    static WAITING: Mutex<Option<Sender<()>>> = Mutex::new(None);
    static RETURNED: Mutex<Option<Receiver<()>>> = Mutex::new(None);
    static RETURNED_FIRST: AtomicBool = AtomicBool::new(false);
    fn through(wait: &mut (dyn FnMut() + Send)) {
        if let Some(waiting) = WAITING.lock().unwrap().take() {
            waiting.send(()).unwrap();
        }
        wait();
        // Back from a wait for the pump that runs this thread's settle (this thread is held
        // here while that pump runs on): the driver must wait for it.
        if OP.get().is_some_and(|op| op.is_settled()) {
            let returned = RETURNED.lock().unwrap();
            let returned = returned.as_ref().expect("the driver runs");
            if returned.recv_timeout(Duration::from_secs(1)).is_ok() {
                RETURNED_FIRST.store(true, SeqCst);
            }
        }
    }

    let (waiting_tx, waiting) = channel();
    *WAITING.lock().unwrap() = Some(waiting_tx);
    let held = HeldUpdate::new(waiting);
    let (armed, gave_up, entered) = (&held.armed, &held.gave_up, &held.entered);
    let op = OP.get_or_init(|| held.open());

    let (returned_tx, returned) = channel();
    *RETURNED.lock().unwrap() = Some(returned);
    armed.store(true, SeqCst);
    std::thread::scope(|scope| {
        let driver = scope.spawn(move || {
            let result = connop_blocking::driver::run_to_end(op);
            returned_tx.send(()).unwrap();
            result
        });
        let pump = scope.spawn(|| skip(op, "gmail"));
        entered
            .recv_timeout(Duration::from_secs(10))
            .expect("P's callback runs: P's pump is the one running");
        waiting_through(through, || skip(op, "notion"));
        pump.join().unwrap();
        let result = driver.join().unwrap().to_value();
        assert_eq!(result["settled_by"], "all_resolved");
    });
    assert!(
        !gave_up.load(SeqCst),
        "this thread waited for P's pump, through the hook"
    );
    assert!(
        !RETURNED_FIRST.load(SeqCst),
        "the driver returned while the caller whose settle it waited for was still away"
    );
}

/// A driver's waker for a test's own driver loop: counts its wake-ups and unparks the thread
/// that made it.
struct CountingWaker(std::sync::atomic::AtomicUsize, std::thread::Thread);

impl CountingWaker {
    fn new() -> (Arc<Self>, std::task::Waker) {
        let counting = Arc::new(CountingWaker(
            std::sync::atomic::AtomicUsize::new(0),
            std::thread::current(),
        ));
        (counting.clone(), std::task::Waker::from(counting))
    }
}

impl std::task::Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.1.unpark();
    }
}

#[test]
fn an_input_that_settles_wakes_the_driver_before_its_effects_run() {
    // A settle's effects (its frames, the registry's close, the result) run on the answering
    // thread while the driver's thread wakes: the wake goes out first. The update callback
    // holds the pump here, so the wake must already have come, and a step while the effects
    // are still running must not finish; the pump's end wakes the driver again.
    use connop_blocking::{CallsStarted, Next};
    use std::sync::atomic::Ordering::SeqCst;

    let (wakes, waker) = CountingWaker::new();
    let step = |op: &connop_blocking::OpHandle| {
        // Calls are left unanswered: nothing here needs a read's answer.
        let mut start = |calls: &mut Vec<_>, _: &mut Vec<_>| {
            calls.clear();
            CallsStarted::AtOnce
        };
        op.step(&mut Vec::new(), &mut Vec::new(), &mut start, &waker)
    };

    let (release_tx, release) = channel();
    let held = HeldUpdate::new(release);
    let (armed, gave_up, entered) = (&held.armed, &held.gave_up, &held.entered);
    let op = held.open();
    skip(&op, "gmail");
    assert!(matches!(step(&op), Next::Sleep(_)), "one target still open");
    let before = wakes.0.load(SeqCst);

    armed.store(true, SeqCst);
    std::thread::scope(|scope| {
        let answering = scope.spawn(|| skip(&op, "notion"));
        entered
            .recv_timeout(Duration::from_secs(10))
            .expect("the settle's update callback runs");
        assert_eq!(
            wakes.0.load(SeqCst),
            before + 1,
            "the driver was woken before the settle's effects ran"
        );
        assert!(
            matches!(step(&op), Next::Sleep(_)),
            "a driver woken while the effects run does not finish"
        );
        release_tx.send(()).unwrap();
        answering.join().unwrap();
    });
    assert_eq!(
        wakes.0.load(SeqCst),
        before + 2,
        "the pump's end wakes it again"
    );
    assert!(matches!(step(&op), Next::Finished));
    assert!(!gave_up.load(SeqCst));
    assert_eq!(
        op.finished_result().to_value()["settled_by"],
        "all_resolved"
    );
}

/// Runs a three-target operation whose reads run on the call pool (as with an HTTP tool
/// gateway), answered 5 ms apart, driven by a loop like the blocking driver's on this thread
/// (on `clock`, or on its own timers), until ten ticks' reads went out; returns how often an
/// input woke the driver meanwhile.
fn wakes_for_thirty_reads(
    clock: Option<Arc<connop_fixtures::auto_clock::AutoClock>>,
    tick: Duration,
) -> usize {
    use connop_blocking::{CallsStarted, Next, WorkerCalls};
    use std::sync::atomic::Ordering::SeqCst;

    let gateway = SharedToolGateway::new(ScriptedToolGateway::new());
    gateway.set_latency(Duration::from_millis(5));
    let mut ctx = context(&gateway);
    if let Some(clock) = clock {
        ctx.clock = clock;
    }
    ctx.options.tick = tick;
    let starter = Arc::new(WorkerCalls::new(Arc::new(gateway.clone())));
    let op = ctx.start(
        &json!({"action": "connect", "connectors": ["gmail", "notion", "slack"]}),
        Some(starter),
    );
    let (wakes, waker) = CountingWaker::new();
    let reads = || {
        gateway.with(|gw| {
            ["gmail", "notion", "slack"]
                .map(|name| gw.reads_of(&format!("ca_{name}_1")))
                .iter()
                .sum::<usize>()
        })
    };
    let stop_at = Instant::now() + Duration::from_secs(30);
    let mut wakes_while_reading = None;
    loop {
        let mut start = |_: &mut Vec<_>, _: &mut Vec<_>| CallsStarted::AtOnce;
        let until = match op.step(&mut Vec::new(), &mut Vec::new(), &mut start, &waker) {
            Next::Finished => break,
            Next::Sleep(until) => until,
        };
        if wakes_while_reading.is_none() && reads() >= 30 {
            wakes_while_reading = Some(wakes.0.load(SeqCst));
            assert!(op.interrupt());
            continue;
        }
        assert!(Instant::now() < stop_at, "30 reads within 30 s");
        match until {
            Some(at) => std::thread::park_timeout(at.saturating_duration_since(Instant::now())),
            None => std::thread::park_timeout(Duration::from_millis(100)),
        }
    }
    assert_eq!(op.finished_result().to_value()["settled_by"], "interrupt");
    wakes_while_reading.expect("30 reads")
}

#[test]
fn reads_answered_on_the_call_pool_let_a_driver_on_its_own_timer_sleep_on() {
    // On the real clock each row's next read is due a tick after its answer, so the rows'
    // reads drift apart by the reads' latency and go out one by one, on the driver's timer.
    // An answer plans its row's next read a tick away, later than the next row's read the
    // driver already sleeps for: it changes nothing the driver napped on, and wakes nobody.
    // Woken for every answer, the driver woke 31 times here; for the last of calls out, 20.
    let wakes = wakes_for_thirty_reads(None, Duration::from_millis(250));
    // The mint's answer and the card; at most one a tick on a machine so busy that reads
    // overlap.
    assert!(wakes <= 13, "{wakes} wake-ups for 30 reads");
}

#[test]
fn on_the_virtual_clock_a_ticks_reads_also_wake_the_driver_when_the_last_is_back() {
    // The virtual clock stands still while a read is out, so a tick's three reads answer at
    // one instant and go out together again. The first answer plans its row's next read,
    // earlier than the deadline the driver slept for with every read out: it wakes the driver
    // to re-arm. The second plans the same instant: the driver sleeps on. The last wakes it:
    // the clock moves time only once the driver naps with no call out. Each tick is its
    // timer's wake-up (the clock's, through the waker) and two answers', where waking for
    // every answer made four.
    use connop_fixtures::auto_clock::AutoClock;
    let clock = AutoClock::new(connop_core::time::Timestamp::from_nanos(1_000_000_000));
    let _keeper = clock.keep();
    let wakes = wakes_for_thirty_reads(Some(clock), Duration::from_millis(100));
    // Ten ticks of three: 30, and the mint's answer (41 when every answer woke the driver).
    assert!(wakes <= 32, "{wakes} wake-ups for 30 reads");
}

#[test]
fn a_rows_stalled_read_on_the_call_pool_never_delays_another_rows_reads() {
    // docs/contract.md#return-hints: each live row follows its own tick. From its second read on,
    // gmail's read hangs (its vendor is stuck) until notion is seen connected; notion's account is
    // active from its third read on. A tick starts both rows' reads in one burst from the driver's
    // thread: notion's must not queue behind gmail's on the call pool, so notion connects
    // while gmail's read is still out.
    use connop_core::contract::TargetState;
    use connop_core::tool_gateway::GatewayCall;
    use std::sync::Mutex;

    let gateway = SharedToolGateway::new(ScriptedToolGateway::new().flips(&[("notion", 3)]));
    let (release_tx, release) = channel::<()>();
    let release = Mutex::new(release);
    let gmail_reads = std::sync::atomic::AtomicUsize::new(0);
    gateway.set_hook(Arc::new(move |call, result| {
        if let GatewayCall::Account { connection_id, .. } = call
            && connection_id.starts_with("ca_gmail")
            && gmail_reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 1
        {
            // Held until the test lets go (or 10 s).
            let _ = release
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(10));
        }
        result
    }));
    let mut ctx = context(&gateway);
    ctx.options.tick = Duration::from_millis(20);
    let interrupt = Interrupt::new();
    ctx.interrupt = Some(interrupt.clone());
    let (connected_tx, connected) = channel::<()>();
    let connected_tx = std::sync::Mutex::new(connected_tx);
    ctx.events = Some(Arc::new(move |event: &Event| {
        if let Event::Update(frame) = event
            && frame
                .change
                .as_ref()
                .is_some_and(|c| &*c.target == "notion" && c.to == TargetState::Connected)
        {
            let _ = connected_tx.lock().unwrap().send(());
        }
    }));
    let tool = std::thread::spawn(move || {
        connop_blocking::manage_connections(
            &json!({"action": "connect", "connectors": ["gmail", "notion"]}),
            &ctx,
        )
        .to_value()
    });
    let seen = connected.recv_timeout(Duration::from_secs(5));
    let gmail_out = gateway.with(|gw| gw.reads_of("ca_gmail_1")) == 2;
    drop(release_tx);
    interrupt.trigger();
    let result = tool.join().unwrap();
    assert!(
        seen.is_ok(),
        "notion was not seen connected while gmail's read hung"
    );
    assert!(gmail_out, "gmail's second read was still out");
    assert_eq!(result["settled_by"], "interrupt");
}

/// Everything an operation holds is freed once the host drops its registry and handles, also
/// when the registry still holds the operation (open, or settled and kept readable): an
/// operation refers to its registry only weakly. Before, each such operation and its registry
/// kept each other alive, about 2–3 KB a call from Python.
#[test]
fn an_operation_and_its_registry_are_freed_together_when_the_host_drops_them() {
    for keeps_settled in [false, true] {
        let sentinel = Arc::new(());
        let gateway = SharedToolGateway::new(ScriptedToolGateway::new());
        let registry = if keeps_settled {
            SharedRegistry::keeping_settled("/test/.connop", 4)
        } else {
            SharedRegistry::new("/test/.connop")
        };
        let mut ctx: ToolContext<dyn BlockingToolGateway> =
            ToolContext::new(registry, "s1", Arc::new(gateway.clone()));
        ctx.surface = Surface::Desktop;
        let held = sentinel.clone();
        ctx.events = Some(Arc::new(move |_: &Event| {
            let _ = &held;
        }));
        let interrupt = Interrupt::new();
        ctx.interrupt = Some(interrupt.clone());
        // One operation left open in the registry, one settled (kept when the registry keeps
        // settled operations).
        let open = ctx
            .open(vec![connop_core::operation::Target::connector(
                "notion",
                connop_core::TargetAction::Connect,
            )])
            .expect("opens");
        drop(open);
        let mut other = ctx.clone();
        other.session_key = "s2".into();
        let op = other
            .open(vec![connop_core::operation::Target::connector(
                "gmail",
                connop_core::TargetAction::Connect,
            )])
            .expect("opens");
        op.interrupt();
        drop(op);
        drop(other);
        drop(ctx);
        drop(interrupt);
        assert_eq!(
            Arc::strong_count(&sentinel),
            1,
            "an operation outlived its registry (keeping settled: {keeps_settled})"
        );
    }
}
