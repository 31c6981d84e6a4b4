//! The Python embedding (SPEC §12.7) runs with the workspace's tests: the original system's
//! own test file, unmodified, against the compatibility layer, then the `connop` module's own
//! suite. `scripts/hermes-tests` builds the module into a virtual environment, installing
//! maturin and pytest from the package registry when they are missing; a machine without
//! Python 3 fails here with the script's message naming what is missing.

use std::path::PathBuf;
use std::process::Command;

fn hermes_tests(args: &[&str]) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join("scripts/hermes-tests"))
        .args(args)
        .current_dir(&root)
        .env("PYTEST_ADDOPTS", "-q")
        .output()
        .expect("scripts/hermes-tests runs (bash)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scripts/hermes-tests {args:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout
}

#[test]
fn the_original_test_file_passes_unmodified_and_so_does_the_modules_own_suite() {
    let seed = hermes_tests(&[]);
    assert!(seed.contains("15 passed"), "{seed}");
    let own = hermes_tests(&["runtime-blocking/python/tests"]);
    assert!(own.contains(" passed") && !own.contains("failed"), "{own}");
}
