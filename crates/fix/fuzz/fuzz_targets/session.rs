//! The FIX session layer and order mapping on arbitrary bytes: Logon checks, sequence
//! rules, NewOrderSingle, cancel, replace, market data and position requests mapped to
//! commands and answers (an exchange simulated in memory), every answer well-formed,
//! never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bourse_fix::fuzzing::session(data);
});
