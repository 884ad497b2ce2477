//! The XML request parser and reply writer on arbitrary bytes: never a panic, and every
//! reply, echoing whatever values came in, is itself well-formed.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bourse_xml::fuzzing::parse_and_answer(data);
});
