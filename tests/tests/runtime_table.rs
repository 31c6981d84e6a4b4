//! Seed 001's table on both runtimes, against the in-process scripted gateway and the
//! simulated gateway over real loopback HTTP (the simulation plays it in
//! `seed_001_managed.rs`).

use connop_tests::table::{Driver, InProcess, OverHttp, play_table};

#[test]
fn seed_001_on_the_blocking_runtime_in_process() {
    play_table(Driver::Blocking(&InProcess::new()));
}

#[test]
fn seed_001_on_the_smol_runtime_in_process() {
    play_table(Driver::Smol(&InProcess::new()));
}

#[test]
fn seed_001_on_the_blocking_runtime_over_http() {
    play_table(Driver::Blocking(&OverHttp::start()));
}

#[test]
fn seed_001_on_the_smol_runtime_over_http() {
    play_table(Driver::Smol(&OverHttp::start()));
}
