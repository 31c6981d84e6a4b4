//! The randomized simulation: seeded scenarios checked against every invariant of
//! docs/contract.md#invariants after every step. A failing seed prints the one-line command that
//! replays it.
//!
//! `SIM_SEEDS=N` runs more seeds (default 10,000); `SIM_SEED=S` with `replay_one_seed`
//! replays one seed and prints its effect log.

use connop_fixtures::random::{RandomScenario, replay_command};

fn seeds() -> u64 {
    std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000)
}

#[test]
fn every_invariant_holds_on_random_scenarios() {
    let mut failures = Vec::new();
    let mut settled = 0;
    let mut steps = 0;
    for seed in 0..seeds() {
        let mut scenario = RandomScenario::generate(seed);
        scenario.sim.logging = false;
        let out = scenario.run();
        steps += out.steps;
        settled += usize::from(out.flow.operation().is_some_and(|op| op.is_settled()));
        if !out.violations.is_empty() {
            failures.push(format!(
                "seed {seed}: {:?}\n  replay: {}",
                out.violations,
                replay_command(seed)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} seeds broke an invariant:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The generator must reach the interesting paths, or the check proves little.
    assert!(
        settled > seeds() as usize / 2,
        "only {settled} operations settled"
    );
    assert!(steps > seeds() as usize * 5, "only {steps} steps in all");
}

#[test]
fn replay_one_seed() {
    let Some(seed) = std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()) else {
        return;
    };
    let scenario = RandomScenario::generate(seed);
    let args = scenario.args.clone();
    let out = scenario.run();
    println!("seed {seed}: {args}\n{}", out.log.render());
    assert!(out.violations.is_empty(), "{:#?}", out.violations);
}

#[test]
fn the_same_seed_gives_the_same_log_byte_for_byte() {
    let mut distinct = std::collections::BTreeSet::new();
    for seed in 0..300 {
        let first = RandomScenario::generate(seed).run().log.render();
        let second = RandomScenario::generate(seed).run().log.render();
        assert_eq!(first, second, "seed {seed} is not deterministic");
        distinct.insert(first);
    }
    assert!(
        distinct.len() > 290,
        "different seeds should give different logs"
    );
}

#[test]
fn the_scenarios_cover_every_settle_reason_and_both_paths() {
    use std::collections::BTreeSet;
    let mut reasons = BTreeSet::new();
    let mut shapes = BTreeSet::new();
    for seed in 0..2_000 {
        let mut scenario = RandomScenario::generate(seed);
        scenario.sim.logging = false;
        let out = scenario.run();
        let json = out.json();
        if let Some(by) = json["settled_by"].as_str() {
            reasons.insert(by.to_owned());
        }
        let shape = match (json.get("error"), json["status"].as_str()) {
            (Some(_), _) => "error",
            (None, Some("initiated")) => "links",
            (None, Some("settled")) if out.cards.is_empty() => "settled without a card",
            (None, Some("settled")) => "card",
            _ if json.get("connectors").is_some() => "status",
            _ => "other",
        };
        shapes.insert(shape);
    }
    let want: BTreeSet<String> = ["all_resolved", "continue", "deadline", "interrupt"]
        .map(String::from)
        .into();
    assert_eq!(reasons, want);
    for shape in ["error", "links", "settled without a card", "card", "status"] {
        assert!(
            shapes.contains(shape),
            "no scenario ended as {shape}: {shapes:?}"
        );
    }
}
