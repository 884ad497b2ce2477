//! The wire decoder on arbitrary bytes: an error or a command that re-encodes to the
//! same command, never a panic.
#![no_main]

use bourse_engine::codec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(command) = codec::decode(data) {
        assert_eq!(codec::decode(&codec::encode(&command)).as_ref(), Ok(&command));
    }
});
