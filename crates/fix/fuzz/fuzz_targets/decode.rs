//! The FIX framer and decoder on arbitrary bytes: garbled frames skipped, every clean
//! message re-encoding to itself, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bourse_fix::fuzzing::decode_stream(data);
});
