//! Runs many random seeds in one go (use `--release`) and prints what they exercised:
//! `cargo run --release -p connop-tests --example simstats -- 200000 [FIRST_SEED]`.
//!
//! Every invariant is checked after every step of every seed; a seed that breaks one is
//! printed with its replay command and the run exits 1. Besides the steps, it counts what the
//! generator put in: return hints scheduled, and scenarios whose timers fire late (slack).

use connop_core::flow::Input;
use connop_fixtures::random::{RandomScenario, replay_command};
use connop_fixtures::sim::Scheduled;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let first: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let (mut steps, mut max_steps, mut reads, mut lists, mut frames, mut broken) =
        (0, 0, 0, 0, 0, 0);
    let (mut hints, mut with_hints, mut with_slack) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    for seed in first..first + n {
        let mut scenario = RandomScenario::generate(seed);
        scenario.sim.logging = false;
        let seed_hints = scenario
            .sim
            .scheduled()
            .filter(|(_, what)| matches!(what, Scheduled::Input(Input::ReturnHint { .. })))
            .count() as u64;
        hints += seed_hints;
        with_hints += u64::from(seed_hints > 0);
        with_slack += u64::from(!scenario.sim.slack.is_zero());
        let out = scenario.run();
        steps += out.steps;
        max_steps = max_steps.max(out.steps);
        reads += out.gateway.reads.len();
        lists += out.gateway.lists.len();
        frames += out.frames.len();
        if !out.violations.is_empty() {
            broken += 1;
            if broken <= 5 {
                println!(
                    "seed {seed}: {:?}\n  replay: {}",
                    out.violations,
                    replay_command(seed)
                );
            }
        }
    }
    let took = started.elapsed().as_secs_f64();
    println!(
        "seeds {n} (from {first})  steps {steps} (max {max_steps})  account reads {reads}  list reads {lists}  frames {frames}"
    );
    println!(
        "return hints {hints} (in {with_hints} seeds)  seeds with timer slack {with_slack}  broken {broken}  {took:.1} s ({:.0} steps/s)",
        steps as f64 / took
    );
    if broken > 0 {
        std::process::exit(1);
    }
}
