#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    connop_fixtures::fuzzing::core_sequence(data);
});
