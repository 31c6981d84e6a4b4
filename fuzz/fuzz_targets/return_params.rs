#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    connop_tests::fuzzing::return_params(data);
});
