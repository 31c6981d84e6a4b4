//! Random sequences of core `Input`s at random instants, steering the seeded scenario
//! generator; every invariant of docs/contract.md#invariants is checked after every step.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    connop_fixtures::fuzzing::core_sequence(data);
});
