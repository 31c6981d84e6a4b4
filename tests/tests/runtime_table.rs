//! Seed 001's scenarios on both runtimes, against the in-process scripted gateway and the
//! simulated gateway over real loopback HTTP.

use connop_tests::table::{InProcess, Runtime, run_table};

#[test]
fn seed_001_on_the_blocking_runtime_in_process() {
    run_table(Runtime::Blocking, &InProcess::new());
}

#[test]
fn seed_001_on_the_smol_runtime_in_process() {
    run_table(Runtime::Smol, &InProcess::new());
}

#[test]
fn seed_001_on_the_blocking_runtime_over_http() {
    run_table(Runtime::Blocking, &connop_tests::table::OverHttp::start());
}

#[test]
fn seed_001_on_the_smol_runtime_over_http() {
    run_table(Runtime::Smol, &connop_tests::table::OverHttp::start());
}
