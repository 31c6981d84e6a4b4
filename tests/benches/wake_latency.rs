//! Wake latency of both runtimes: from a card answer, a Continue or an interrupt, delivered
//! from another thread at a random moment of a 1 s tick, to the tool result in the waiting
//! caller's hand.
//!
//! `cargo bench -p connop-tests --bench wake_latency [-- OPS [ROUNDS]]`
//!
//! OPS operations (default 500) start together, each on a 1 s tick with one target that
//! never completes (so each is parked between reads); each gets its input at a random moment
//! between 0.5 s and 1.5 s after its card, one input at a time, and records when its result
//! came back. The other operations stay parked and keep ticking meanwhile. The `floor` row
//! is the same pattern with bare threads parked on a channel: what this machine's scheduler
//! alone costs to wake a parked thread.

use connop_blocking::{Interrupt, OpHandle, SharedRegistry, ToolContext};
use connop_core::card::CardAnswer;
use connop_core::flow::{Event, Surface};
use connop_core::gateway::{AsyncGateway, BlockingGateway};
use connop_fixtures::random::Rng;
use connop_fixtures::{ScriptedGateway, SharedGateway};
use serde_json::json;
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

fn measure(runtime: Runtime, kind: Kind, ops: usize, seed: u64) -> Vec<Duration> {
    let gateway = SharedGateway::new(ScriptedGateway::new());
    let registry = SharedRegistry::new("/bench/.connop");
    let (parked_tx, parked_rx) = channel::<(usize, Parked)>();
    let (done_tx, done_rx) = channel::<(usize, Instant)>();
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
                let mut ctx: ToolContext<dyn BlockingGateway> =
                    ToolContext::new(registry.clone(), &key, Arc::new(gateway.clone()));
                ctx.surface = Surface::Desktop;
                ctx.events = Some(events);
                ctx.interrupt = Some(interrupt);
                ctx.inline_calls = true;
                let (args, done_tx) = (args.clone(), done_tx.clone());
                workers.push(
                    std::thread::Builder::new()
                        .stack_size(256 * 1024)
                        .spawn(move || {
                            let result = connop_blocking::manage_connections(&args, &ctx);
                            // In hand: freeing it is the host's later work.
                            let _ = done_tx.send((i, Instant::now()));
                            drop(result);
                        })
                        .expect("spawn"),
                );
            }
        }
        Runtime::Smol => {
            let ctxs: Vec<ToolContext<dyn AsyncGateway>> = contexts
                .into_iter()
                .map(|(key, interrupt, events)| {
                    let mut ctx: ToolContext<dyn AsyncGateway> =
                        ToolContext::new(registry.clone(), &key, Arc::new(gateway.clone()));
                    ctx.surface = Surface::Desktop;
                    ctx.events = Some(events);
                    ctx.interrupt = Some(interrupt);
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
                            let result = connop_smol::manage_connections(&args, &ctx).await;
                            let _ = done_tx.send((i, Instant::now()));
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
        let (j, returned) = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the result comes back");
        assert_eq!(i, j, "the result of the operation just answered");
        latencies.push(returned.saturating_duration_since(sent));
    }
    for worker in workers {
        worker.join().expect("worker");
    }
    latencies
}

/// The floor: the same pattern with no operation at all. OPS threads park on a channel; each
/// is woken once at a random moment and timestamps when it runs again.
fn measure_floor(ops: usize, seed: u64) -> Vec<Duration> {
    let (done_tx, done_rx) = channel::<(usize, Instant)>();
    let mut senders = Vec::with_capacity(ops);
    let mut workers = Vec::with_capacity(ops);
    for i in 0..ops {
        let (tx, rx) = channel::<()>();
        senders.push(tx);
        let done_tx = done_tx.clone();
        workers.push(
            std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    if rx.recv().is_ok() {
                        let _ = done_tx.send((i, Instant::now()));
                    }
                })
                .expect("spawn"),
        );
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
    for (at, i) in plan {
        let now = Instant::now();
        if at > now {
            std::thread::sleep(at - now);
        }
        let sent = Instant::now();
        senders[i].send(()).expect("parked");
        let (j, woke) = done_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("wakes");
        assert_eq!(i, j);
        latencies.push(woke.saturating_duration_since(sent));
    }
    for worker in workers {
        worker.join().expect("worker");
    }
    latencies
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn main() {
    let mut numbers = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse::<usize>().ok());
    let ops = numbers.next().unwrap_or(500);
    let rounds = numbers.next().unwrap_or(5);
    println!(
        "wake latency: {ops} parked operations per row, input at a random moment of a 1 s tick; \
         {rounds} interleaved rounds; each cell is the median over rounds"
    );
    let rows: Vec<(String, String)> =
        std::iter::once(("floor".to_owned(), "thread wake".to_owned()))
            .chain(
                [Runtime::Blocking, Runtime::Smol]
                    .into_iter()
                    .flat_map(|r| {
                        [Kind::CardAnswer, Kind::Continue, Kind::Interrupt]
                            .map(|k| (format!("{r:?}"), format!("{k:?}")))
                    }),
            )
            .collect();
    let mut cells: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); rows.len()];
    for round in 0..rounds {
        let mut index = 0;
        let mut record = |mut lat: Vec<Duration>| {
            lat.sort();
            cells[index]
                .0
                .push(percentile(&lat, 50.0).as_secs_f64() * 1e6);
            cells[index]
                .1
                .push(percentile(&lat, 99.0).as_secs_f64() * 1e6);
            index += 1;
        };
        let seed = 1_000 * round as u64;
        record(measure_floor(ops, seed));
        for runtime in [Runtime::Blocking, Runtime::Smol] {
            for (n, kind) in [Kind::CardAnswer, Kind::Continue, Kind::Interrupt]
                .into_iter()
                .enumerate()
            {
                record(measure(runtime, kind, ops, seed + 7 + n as u64));
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "{:<9} {:<12} {:>10} {:>10}   p99 per round",
        "runtime", "input", "median", "p99"
    );
    for ((name, input), (medians, p99s)) in rows.iter().zip(cells.iter_mut()) {
        let each: Vec<String> = p99s.iter().map(|p| format!("{p:.0}")).collect();
        println!(
            "{:<9} {:<12} {:>8.1}µs {:>8.1}µs   [{}]",
            name,
            input,
            median(medians),
            median(p99s),
            each.join(" ")
        );
    }
}
