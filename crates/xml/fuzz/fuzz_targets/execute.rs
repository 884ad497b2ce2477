//! A request body parsed, then every child through the checks execution makes before it
//! calls the exchange, under several scales; what passes becomes a command the engine
//! takes, and every reply is well-formed. Never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bourse_xml::fuzzing::execute_checks(data);
});
