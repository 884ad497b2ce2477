//! Arbitrary bytes as a workload file, standard and split: never a panic, no line lost,
//! what is parsed reads back the same, and each command's request encodes as the
//! generated encoder's.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bourse_daytrading::fuzzing::parse_workload(data);
});
