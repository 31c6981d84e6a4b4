//! Instruction count of one two-target connect lifecycle in the core (the seed workload:
//! gmail connects on its 3rd read, notion on its 2nd, tick 0), counted by callgrind: the same
//! count for the same binary whatever else the machine is doing, so a regression shows
//! without wall-clock noise.
//!
//! `cargo bench -p connop-core --bench instructions` runs this binary twice under
//! `valgrind --tool=callgrind`, once with 1 lifecycle and once with 101, and reports the
//! difference divided by 100 (process start-up and the first run's one-time costs cancel
//! out; each lifecycle includes building its fake gateway and arguments). It compares the
//! figure with `benches/instructions.baseline` and fails when it grew
//! more than 5%; `-- --save` writes the new figure as the baseline; `-- --scaling` prints the
//! count at 1 to 32 targets.

#[path = "support/lifecycle.rs"]
mod lifecycle;

use std::path::Path;
use std::process::Command;

/// How far above the baseline a count may go before the benchmark fails.
const TOLERANCE: f64 = 0.05;
const RUNS: u64 = 100;

/// `targets == 2` is the seed workload; otherwise target `i` connects on its read `2 + i % 2`,
/// as in the `flow` benchmark's `lifecycle_connect`.
fn run_lifecycles(count: u64, targets: usize) {
    let (names, flips) = if targets == 2 {
        (vec!["gmail".to_owned(), "notion".to_owned()], vec![3, 2])
    } else {
        let flips = (0..targets).map(|i| 2 + (i % 2) as u32).collect();
        (lifecycle::names(targets), flips)
    };
    for _ in 0..count {
        let (args, config, mut gateway) = lifecycle::lifecycle_inputs(&names, flips.clone());
        let json = lifecycle::run_lifecycle(&args, config, &mut gateway);
        assert!(json.contains("\"settled_by\":\"all_resolved\""), "{json}");
        std::hint::black_box(json);
    }
}

/// Total instructions of this binary run with `--lifecycles count --targets targets` under
/// callgrind.
fn count_under_callgrind(count: u64, targets: usize) -> Result<u64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out_file = std::env::temp_dir().join(format!(
        "connop-callgrind-{}-{count}-{targets}.out",
        std::process::id()
    ));
    let output = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(&exe)
        .args(["--lifecycles", &count.to_string()])
        .args(["--targets", &targets.to_string()])
        .output()
        .map_err(|e| format!("valgrind could not start ({e}); install valgrind"))?;
    let _ = std::fs::remove_file(&out_file);
    if !output.status.success() {
        return Err(format!(
            "callgrind failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    // callgrind's summary line on stderr: "==PID== Collected : N"
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .find_map(|line| line.split("Collected :").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| "no 'Collected' line in callgrind's output".to_owned())
}

/// Instructions of one lifecycle with `targets` targets: (1 + RUNS) runs minus 1 run.
fn per_lifecycle(targets: usize) -> Result<u64, String> {
    let one = count_under_callgrind(1, targets)?;
    let many = count_under_callgrind(1 + RUNS, targets)?;
    Ok(many.saturating_sub(one) / RUNS)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value_of = |flag: &str| {
        let i = args.iter().position(|a| a == flag)?;
        args.get(i + 1).and_then(|n| n.parse::<u64>().ok())
    };
    if let Some(count) = value_of("--lifecycles") {
        run_lifecycles(count, value_of("--targets").unwrap_or(2) as usize);
        return;
    }
    let exit_on = |e: String| -> ! {
        eprintln!("instructions: {e}");
        std::process::exit(2);
    };
    if args.iter().any(|a| a == "--scaling") {
        // How the cost grows with the number of targets (for docs/PERFORMANCE.md).
        println!("targets instructions per-target");
        for targets in [1, 2, 4, 8, 16, 32] {
            let count = per_lifecycle(targets).unwrap_or_else(|e| exit_on(e));
            println!("{targets} {count} {}", count / targets as u64);
        }
        return;
    }
    let per_lifecycle = per_lifecycle(2).unwrap_or_else(|e| exit_on(e));
    println!("two-target connect lifecycle: {per_lifecycle} instructions (callgrind)");

    let baseline_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/instructions.baseline");
    if args.iter().any(|a| a == "--save") {
        std::fs::write(&baseline_path, format!("{per_lifecycle}\n")).expect("baseline written");
        println!("saved as the baseline");
        return;
    }
    let baseline: Option<u64> = std::fs::read_to_string(&baseline_path)
        .ok()
        .and_then(|text| text.trim().parse().ok());
    match baseline {
        Some(baseline) => {
            let ratio = per_lifecycle as f64 / baseline as f64;
            println!("baseline {baseline}: ratio {ratio:.3}");
            if ratio > 1.0 + TOLERANCE {
                eprintln!(
                    "instructions: {:.1}% above the baseline (tolerance {:.0}%)",
                    (ratio - 1.0) * 100.0,
                    TOLERANCE * 100.0
                );
                std::process::exit(1);
            }
        }
        None => println!("no baseline yet: `-- --save` records one"),
    }
}
