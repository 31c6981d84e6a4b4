//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) and every past finding
//! (`fuzz/regressions/<target>/`) through the fuzz targets' bodies (the core's in
//! `connop_fixtures::fuzzing`, the listeners' in `connop_tests::fuzzing`), so the normal test
//! command catches a regression without running a fuzzer. `scripts/fuzz-all` grows the corpus.

use connop_fixtures::fuzzing::TARGETS;
use connop_tests::fuzzing::TARGETS as LISTENER_TARGETS;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

#[test]
fn every_committed_input_holds_and_each_path_is_covered() {
    let mut failures = Vec::new();
    for (target, body, outcomes) in TARGETS.into_iter().chain(LISTENER_TARGETS) {
        let corpus = inputs(&fuzz_dir().join("corpus").join(target));
        let regressions = inputs(&fuzz_dir().join("regressions").join(target));
        let mut reached = BTreeMap::new();
        for path in corpus.iter().chain(&regressions) {
            // A running fuzzer may replace a file between the listing and the read.
            let Ok(data) = std::fs::read(path) else {
                continue;
            };
            match catch_unwind(AssertUnwindSafe(|| body(&data))) {
                Ok(outcome) => *reached.entry(outcome).or_insert(0usize) += 1,
                Err(_) => failures.push(format!(
                    "{target}: {} (replay: cargo +nightly fuzz run {target} {})",
                    path.display(),
                    path.display()
                )),
            }
        }
        // A corpus that never reaches a path proves nothing about it.
        for outcome in outcomes {
            assert!(
                reached.contains_key(outcome),
                "no {target} input reaches {outcome:?}: {reached:?}"
            );
        }
    }
    assert!(
        failures.is_empty(),
        "inputs that fail:\n{}",
        failures.join("\n")
    );
}
