//! Runs many random seeds in one go (use `--release`) and prints what they exercised:
//! `cargo run --release -p connop-tests --example simstats -- 200000`.

use connop_fixtures::random::{Scenario, replay_command};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let (mut steps, mut max_steps, mut reads, mut lists, mut frames, mut broken) =
        (0, 0, 0, 0, 0, 0);
    for seed in 0..n {
        let mut scenario = Scenario::generate(seed);
        scenario.sim.logging = false;
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
    println!(
        "seeds {n}  steps {steps} (max {max_steps})  account reads {reads}  list reads {lists}  frames {frames}  broken {broken}"
    );
    if broken > 0 {
        std::process::exit(1);
    }
}
