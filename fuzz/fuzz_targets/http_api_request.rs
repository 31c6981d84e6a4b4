#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    connop_tests::fuzzing::http_api_request(data);
});
