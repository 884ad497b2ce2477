//! Commands from fuzz bytes (structured and raw-decoded) applied to the fast and the
//! reference engine in lockstep: no panic, identical events, invariants after each.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bourse_engine::fuzzing::run(data);
});
