//! Wake latency of both runtimes: from a card answer, a Continue or an interrupt, delivered
//! from another thread at a random moment of a 1 s tick, to the tool result in the waiting
//! caller's hand.
//!
//! `cargo bench -p connop-tests --bench wake_latency [-- [--control] [--tail] OPS [ROUNDS
//! [TICK_MS]]]`
//!
//! OPS operations (default 500) start together, each on a 1 s tick (or TICK_MS) with one target that
//! never completes (so each is parked between reads); each gets its input at a random moment
//! between 0.5 s and 1.5 s after its card, one input at a time, and records when its result
//! came back. The other operations stay parked and keep ticking meanwhile.
//!
//! Four floor rows show what this machine alone costs, with no operation at all:
//! `thread wake` wakes OPS bare threads parked on a channel, each once, as the blocking runtime
//! wakes each operation's own long-asleep thread; `same thread` wakes one thread OPS times, as
//! the smol runtime wakes its one executor thread. The gap between the two is the price of a
//! thread asleep for a second: on a virtual machine, mostly the wake of an idle virtual CPU.
//! `smol task` wakes one task on a smol executor OPS times, its thread parked in
//! `smol::block_on` as the smol runtime's is: the executor's own way back from its park
//! (reactor notify, poller wake, task schedule), with no operation in it. What a smol row
//! costs beyond `smol task` is connop's; what `smol task` costs beyond `same thread` is the
//! executor's. `reactor` splits that last part: one thread blocked in smol's own poller (epoll
//! on Linux), woken OPS times through its notifier (an eventfd), with no executor on it. What
//! `reactor` costs beyond `same thread` is the kernel's price for parking in a reactor rather
//! than on a futex; what `smol task` costs beyond `reactor` is the executor's own code.
//!
//! `--control` measures each runtime row as one more floor instead (a blocking row as a
//! thread-wake floor, a smol row as a same-thread floor, each with the row's own seed): what
//! the floor scores against itself, so that a goal set against the floor can be told apart
//! from this machine's own spread between two measurements of the same thing.
//!
//! The `call` column is the median time the input's own call took on the answering thread
//! (for a floor row, the channel send that wakes the thread): the part of the latency spent
//! before, and while, it woke the other.
//!
//! The `polled` column splits a smol row where the executor hands over to connop: from the
//! input to the executor's last poll of the waiting task (the one that returns the result),
//! median / p99. What comes before it is the answering thread's call and the executor's way
//! back from its park; what comes after it is the driver's step and the result, on the
//! executor's thread. (Taking that instant adds one clock read to each poll of a smol row's
//! task, about 20 ns.) `--tail` prints every row's percentiles (p50 p75 p90 p95 p99 p99.5 of
//! all rounds' samples), and under a smol row those of `polled` and of the time from that poll
//! to the result: the whole shape of the tail, not only its 99th percentile.

use connop_blocking::{Interrupt, OpHandle, SharedRegistry, ToolContext};
use connop_core::card::CardAnswer;
use connop_core::flow::{Event, Surface};
use connop_core::tool_gateway::{AsyncToolGateway, BlockingToolGateway};
use connop_fixtures::random::Rng;
use connop_fixtures::{ScriptedToolGateway, SharedToolGateway};
use serde_json::json;
use std::future::{Future, poll_fn};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    CardAnswer,
    Continue,
    Interrupt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runtime {
    Blocking,
    Smol,
}

struct Parked {
    op: OpHandle,
    interrupt: Interrupt,
    carded_at: Instant,
}

fn measure(runtime: Runtime, kind: Kind, ops: usize, tick: Duration, seed: u64) -> Samples {
    let gateway = SharedToolGateway::new(ScriptedToolGateway::new());
    let registry = SharedRegistry::new("/bench/.connop");
    let (parked_tx, parked_rx) = channel::<(usize, Parked)>();
    // The operation, when its result was in hand, and (smol) when the executor last polled
    // the task that awaited it.
    let (done_tx, done_rx) = channel::<(usize, Instant, Option<Instant>)>();
    let args = json!({"action": "connect", "connectors": ["gmail"]});

    let contexts: Vec<_> = (0..ops)
        .map(|i| {
            let interrupt = Interrupt::new();
            let key = format!("session-{i}");
            let parked_tx = Mutex::new(parked_tx.clone());
            let (registry2, interrupt2, key2) = (registry.clone(), interrupt.clone(), key.clone());
            let events: connop_blocking::EventSink = Arc::new(move |event: &Event| {
                if let Event::Request(card) = event {
                    let op = registry2.get(&key2, card.op_id).expect("registered");
                    let parked = Parked {
                        op,
                        interrupt: interrupt2.clone(),
                        carded_at: Instant::now(),
                    };
                    let _ = parked_tx.lock().unwrap().send((i, parked));
                }
            });
            (key, interrupt, events)
        })
        .collect();

    let mut workers = Vec::new();
    match runtime {
        Runtime::Blocking => {
            for (i, (key, interrupt, events)) in contexts.into_iter().enumerate() {
                let gateway: Arc<dyn BlockingToolGateway> = Arc::new(gateway.clone());
                let mut ctx: ToolContext<dyn BlockingToolGateway> =
                    ToolContext::new(registry.clone(), &key, gateway.clone());
                ctx.surface = Surface::Desktop;
                ctx.events = Some(events);
                ctx.interrupt = Some(interrupt);
                ctx.calls = Some(Arc::new(connop_blocking::InlineCalls(gateway)));
                ctx.options.tick = tick;
                let (args, done_tx) = (args.clone(), done_tx.clone());
                workers.push(
                    std::thread::Builder::new()
                        .stack_size(256 * 1024)
                        .spawn(move || {
                            let result = connop_blocking::manage_connections(&args, &ctx);
                            // In hand: freeing it is the host's later work.
                            let _ = done_tx.send((i, Instant::now(), None));
                            drop(result);
                        })
                        .expect("spawn"),
                );
            }
        }
        Runtime::Smol => {
            let ctxs: Vec<ToolContext<dyn AsyncToolGateway>> = contexts
                .into_iter()
                .map(|(key, interrupt, events)| {
                    let mut ctx: ToolContext<dyn AsyncToolGateway> =
                        ToolContext::new(registry.clone(), &key, Arc::new(gateway.clone()));
                    ctx.surface = Surface::Desktop;
                    ctx.events = Some(events);
                    ctx.interrupt = Some(interrupt);
                    ctx.options.tick = tick;
                    ctx
                })
                .collect();
            let (args, done_tx) = (args.clone(), done_tx.clone());
            workers.push(std::thread::spawn(move || {
                let executor = smol::LocalExecutor::new();
                let tasks: Vec<_> = ctxs
                    .into_iter()
                    .enumerate()
                    .map(|(i, ctx)| {
                        let (args, done_tx) = (args.clone(), done_tx.clone());
                        executor.spawn(async move {
                            let mut call =
                                std::pin::pin!(connop_smol::manage_connections(&args, &ctx));
                            let mut polled = Instant::now();
                            let result = poll_fn(|cx| {
                                polled = Instant::now();
                                call.as_mut().poll(cx)
                            })
                            .await;
                            let _ = done_tx.send((i, Instant::now(), Some(polled)));
                            drop(result);
                        })
                    })
                    .collect();
                smol::block_on(executor.run(async {
                    for task in tasks {
                        task.await;
                    }
                }));
            }));
        }
    }
    drop(done_tx);

    let mut parked: Vec<Option<Parked>> = (0..ops).map(|_| None).collect();
    for _ in 0..ops {
        let (i, p) = parked_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("every card shows");
        parked[i] = Some(p);
    }
    let mut rng = Rng::new(seed);
    let mut plan: Vec<(Instant, usize)> = parked
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let p = p.as_ref().expect("parked");
            (
                p.carded_at + Duration::from_millis(500) + rng.millis_below(Duration::from_secs(1)),
                i,
            )
        })
        .collect();
    plan.sort();
    let mut latencies = Vec::with_capacity(ops);
    let mut calls = Vec::with_capacity(ops);
    let (mut polls, mut afters) = (Vec::new(), Vec::new());
    for (at, i) in plan {
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        let p = parked[i].take().expect("each once");
        let sent = Instant::now();
        match kind {
            Kind::CardAnswer => {
                let reply =
                    p.op.respond(&CardAnswer::skip(&["gmail"]))
                        .expect("valid answer");
                assert!(reply.settled);
            }
            Kind::Continue => assert!(p.op.continue_().expect("continue").settled),
            Kind::Interrupt => p.interrupt.trigger(),
        }
        calls.push(sent.elapsed());
        let (j, returned, polled) = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the result comes back");
        assert_eq!(i, j, "the result of the operation just answered");
        latencies.push(returned.saturating_duration_since(sent));
        if let Some(polled) = polled {
            polls.push(polled.saturating_duration_since(sent));
            afters.push(returned.saturating_duration_since(polled));
        }
    }
    for worker in workers {
        worker.join().expect("worker");
    }
    Samples {
        latencies,
        calls,
        polls,
        afters,
    }
}

/// One row's samples of one round: input to result, and how long the input's own call took
/// (the part of the latency spent on the answering thread, before and while it wakes the
/// other).
struct Samples {
    latencies: Vec<Duration>,
    calls: Vec<Duration>,
    /// Smol rows only: input to the executor's last poll of the waiting task.
    polls: Vec<Duration>,
    /// Smol rows only: that poll to the result in hand.
    afters: Vec<Duration>,
}

/// Which floor: what wakes, with no operation at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Floor {
    /// OPS bare threads parked on a channel, each woken once.
    ThreadWake,
    /// One thread parked on a channel, woken OPS times.
    SameThread,
    /// One task on a smol executor (its thread parked as the smol runtime's is), awaiting a
    /// channel, woken OPS times: the executor's own way back from its park.
    SmolTask,
    /// One thread blocked in the reactor's own poller (epoll on Linux), woken OPS times by
    /// its notifier (an eventfd), with no executor at all: what the kernel alone charges a
    /// thread parked in a reactor, as smol's executor thread is, over one parked on a futex.
    Reactor,
}

/// A floor: the same pattern with no operation at all. Each of OPS inputs wakes a thread
/// (or a task) parked on a channel, which timestamps when it runs again.
fn measure_floor(ops: usize, floor: Floor, seed: u64) -> Samples {
    let (done_tx, done_rx) = channel::<(usize, Instant)>();
    let threads = if floor == Floor::ThreadWake { ops } else { 1 };
    let mut senders: Vec<Box<dyn Fn(usize)>> = Vec::with_capacity(threads);
    let mut workers = Vec::with_capacity(threads);
    for _ in 0..threads {
        let done_tx = done_tx.clone();
        let worker = std::thread::Builder::new().stack_size(256 * 1024);
        if floor == Floor::Reactor {
            let (sender, worker) = reactor_floor(done_tx, worker);
            senders.push(Box::new(move |i| sender.send(i)));
            workers.push(worker);
        } else if floor == Floor::SmolTask {
            let (tx, rx) = smol::channel::unbounded::<usize>();
            senders.push(Box::new(move |i| tx.try_send(i).expect("parked")));
            workers.push(
                worker
                    .spawn(move || {
                        let executor = smol::LocalExecutor::new();
                        let run = executor.run(async {
                            while let Ok(i) = rx.recv().await {
                                let _ = done_tx.send((i, Instant::now()));
                            }
                        });
                        smol::block_on(run);
                    })
                    .expect("spawn"),
            );
        } else {
            let (tx, rx) = channel::<usize>();
            senders.push(Box::new(move |i| tx.send(i).expect("parked")));
            workers.push(
                worker
                    .spawn(move || {
                        while let Ok(i) = rx.recv() {
                            let _ = done_tx.send((i, Instant::now()));
                        }
                    })
                    .expect("spawn"),
            );
        }
    }
    let start = Instant::now();
    let mut rng = Rng::new(seed);
    let mut plan: Vec<(Instant, usize)> = (0..ops)
        .map(|i| {
            (
                start + Duration::from_millis(500) + rng.millis_below(Duration::from_secs(1)),
                i,
            )
        })
        .collect();
    plan.sort();
    let mut latencies = Vec::with_capacity(ops);
    let mut calls = Vec::with_capacity(ops);
    for (at, i) in plan {
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        let sent = Instant::now();
        senders[i % threads](i);
        calls.push(sent.elapsed());
        let (j, woke) = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("wakes");
        assert_eq!(i, j);
        latencies.push(woke.saturating_duration_since(sent));
    }
    drop(senders);
    for worker in workers {
        worker.join().expect("worker");
    }
    Samples {
        latencies,
        calls,
        polls: Vec::new(),
        afters: Vec::new(),
    }
}

/// [`Floor::Reactor`]'s input: the input last sent, and the poller its one thread waits in.
/// Dropped, it tells that thread to end.
struct ReactorInput {
    poller: Arc<polling::Poller>,
    input: Arc<std::sync::atomic::AtomicUsize>,
}

/// The input that ends [`Floor::Reactor`]'s thread, and the one it starts from (no input has
/// either index).
const REACTOR_CLOSED: usize = usize::MAX;
const REACTOR_NONE: usize = usize::MAX - 1;

impl ReactorInput {
    fn send(&self, i: usize) {
        self.input.store(i, std::sync::atomic::Ordering::Release);
        self.poller.notify().expect("notify");
    }
}

impl Drop for ReactorInput {
    fn drop(&mut self) {
        self.send(REACTOR_CLOSED);
    }
}

/// [`Floor::Reactor`]: one thread waits in a poller; each input is a notify, after which the
/// thread reads which input it was.
fn reactor_floor(
    done_tx: std::sync::mpsc::Sender<(usize, Instant)>,
    worker: std::thread::Builder,
) -> (ReactorInput, std::thread::JoinHandle<()>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let poller = Arc::new(polling::Poller::new().expect("a poller"));
    let input = Arc::new(AtomicUsize::new(REACTOR_NONE));
    let (poller2, input2) = (poller.clone(), input.clone());
    let worker = worker
        .spawn(move || {
            let mut events = polling::Events::new();
            let mut last = REACTOR_NONE;
            loop {
                events.clear();
                poller2.wait(&mut events, None).expect("wait");
                let woke = Instant::now();
                match input2.load(Ordering::Acquire) {
                    REACTOR_CLOSED => return,
                    i if i != last => {
                        last = i;
                        let _ = done_tx.send((i, woke));
                    }
                    // Woken with nothing new (a notify already consumed): wait again.
                    _ => {}
                }
            }
        })
        .expect("spawn");
    (ReactorInput { poller, input }, worker)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn main() {
    let control = std::env::args().any(|a| a == "--control");
    let tail = std::env::args().any(|a| a == "--tail");
    let mut numbers = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse::<usize>().ok());
    let ops = numbers.next().unwrap_or(500);
    let rounds = numbers.next().unwrap_or(5);
    let tick = Duration::from_millis(numbers.next().unwrap_or(1_000) as u64);
    println!(
        "wake latency: {ops} parked operations per row on a {tick:?} tick, input at a random \
         moment of a 1 s window; {rounds} interleaved rounds; median and p99 are the median over \
         rounds, `all p99` is the p99 of every round's samples together"
    );
    if control {
        println!(
            "control: every runtime row below is one more floor (blocking rows: thread wake; \
             smol rows: same thread), not an operation"
        );
    }
    let rows: Vec<(String, String)> = [
        ("floor", "thread wake"),
        ("floor", "same thread"),
        ("floor", "smol task"),
        ("floor", "reactor"),
    ]
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .into_iter()
    .chain(
        [Runtime::Blocking, Runtime::Smol]
            .into_iter()
            .flat_map(|r| {
                [Kind::CardAnswer, Kind::Continue, Kind::Interrupt]
                    .map(|k| (format!("{r:?}"), format!("{k:?}")))
            }),
    )
    .collect();
    /// Per row: each round's median and p99, and every sample of every round.
    #[derive(Clone, Default)]
    struct Cell {
        medians: Vec<f64>,
        p99s: Vec<f64>,
        all: Vec<Duration>,
        /// Each round's median of the input's own call.
        calls: Vec<f64>,
        /// Smol rows: each round's median and p99 of the input to the waiting task's last
        /// poll, and every such sample.
        poll_medians: Vec<f64>,
        poll_p99s: Vec<f64>,
        polls: Vec<Duration>,
        /// Smol rows: every sample's time from that poll to the result in hand.
        afters: Vec<Duration>,
    }
    let mut cells: Vec<Cell> = vec![Cell::default(); rows.len()];
    for round in 0..rounds {
        let mut index = 0;
        let mut record = |samples: Samples| {
            let (mut lat, mut calls, mut polls) = (samples.latencies, samples.calls, samples.polls);
            lat.sort();
            calls.sort();
            polls.sort();
            let cell = &mut cells[index];
            if !polls.is_empty() {
                cell.poll_medians.push(micros(percentile(&polls, 50.0)));
                cell.poll_p99s.push(micros(percentile(&polls, 99.0)));
                cell.polls.extend(polls);
                cell.afters.extend(samples.afters);
            }
            cell.calls.push(micros(percentile(&calls, 50.0)));
            cell.medians.push(micros(percentile(&lat, 50.0)));
            cell.p99s.push(micros(percentile(&lat, 99.0)));
            cell.all.extend(lat);
            index += 1;
        };
        let seed = 1_000 * round as u64;
        record(measure_floor(ops, Floor::ThreadWake, seed));
        record(measure_floor(ops, Floor::SameThread, seed));
        record(measure_floor(ops, Floor::SmolTask, seed));
        record(measure_floor(ops, Floor::Reactor, seed));
        for runtime in [Runtime::Blocking, Runtime::Smol] {
            for (n, kind) in [Kind::CardAnswer, Kind::Continue, Kind::Interrupt]
                .into_iter()
                .enumerate()
            {
                let seed = seed + 7 + n as u64;
                record(if control {
                    let floor = match runtime {
                        Runtime::Blocking => Floor::ThreadWake,
                        Runtime::Smol => Floor::SameThread,
                    };
                    measure_floor(ops, floor, seed)
                } else {
                    measure(runtime, kind, ops, tick, seed)
                });
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let shape = |sorted: &[Duration]| -> String {
        [50.0, 75.0, 90.0, 95.0, 99.0, 99.5]
            .map(|p| format!("{:.1}", micros(percentile(sorted, p))))
            .join(" ")
    };
    println!(
        "{:<9} {:<12} {:>10} {:>10} {:>10} {:>10} {:>15}   p99 per round",
        "runtime", "input", "median", "p99", "all p99", "call", "polled"
    );
    for ((name, input), cell) in rows.iter().zip(cells.iter_mut()) {
        let each: Vec<String> = cell.p99s.iter().map(|p| format!("{p:.0}")).collect();
        cell.all.sort();
        cell.polls.sort();
        cell.afters.sort();
        let polled = if cell.polls.is_empty() {
            "—".to_owned()
        } else {
            format!(
                "{:.1} / {:.1}µs",
                median(&mut cell.poll_medians),
                median(&mut cell.poll_p99s)
            )
        };
        println!(
            "{:<9} {:<12} {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>15}   [{}]",
            name,
            input,
            median(&mut cell.medians),
            median(&mut cell.p99s),
            micros(percentile(&cell.all, 99.0)),
            median(&mut cell.calls),
            polled,
            each.join(" ")
        );
        if tail {
            println!("{:<22} p50 p75 p90 p95 p99 p99.5: {}", "", shape(&cell.all));
            if !cell.polls.is_empty() {
                println!("{:<22} polled, the same:        {}", "", shape(&cell.polls));
                println!(
                    "{:<22} the poll to the result:  {}",
                    "",
                    shape(&cell.afters)
                );
            }
        }
    }
}
