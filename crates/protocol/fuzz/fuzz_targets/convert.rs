//! Wire bytes decoded with prost as one of the messages the node, a gateway or a front
//! end converts to engine values, then converted: never a panic, every conversion goes
//! back to the same wire value and fits the log, every refusal has its own code.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    bourse_protocol::fuzzing::decode_and_convert(data);
});
