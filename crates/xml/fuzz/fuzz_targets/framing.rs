//! The framing reader on arbitrary bytes: length lines (`N\n`, `N\r\n`), the size cap,
//! truncation, and reads of any size, checked against the spec's grammar; never a
//! panic, never a body above the cap.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bourse_xml::fuzzing::frames(data);
});
