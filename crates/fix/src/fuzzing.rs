//! The decoder's fuzzing harness, shared by the cargo-fuzz target (`crates/fix/fuzz`,
//! nightly, `make fuzz`) and the corpus and property tests that run on stable in
//! `make test`.

use crate::codec::{self, Message};

/// Feeds `data` to the framer and decoder as a connection's reader would (garbled
/// bytes skipped, every whole frame decoded) and checks that every message decoded
/// without a problem re-encodes to bytes that decode to the same message. Panics only
/// on a broken property; a panic anywhere else is a decoder bug.
pub fn decode_stream(data: &[u8]) -> usize {
    let mut buf = data;
    let mut messages = 0;
    while !buf.is_empty() {
        match codec::frame(buf) {
            Ok(Some(len)) => {
                let (message, error) = Message::decode(&buf[..len]);
                if error.is_none() {
                    round_trip(&message);
                }
                let _ = message.group(268, 269, &[270, 271, 279, 55]);
                let _ = message.get_u64(34);
                messages += 1;
                buf = &buf[len..];
            }
            Ok(None) => break,
            Err(_) => buf = &buf[codec::resync(buf)..],
        }
    }
    messages
}

/// `message` encoded and decoded again is `message`.
pub fn round_trip(message: &Message) {
    let bytes = message.encode();
    assert_eq!(codec::frame(&bytes), Ok(Some(bytes.len())), "an encoded message frames whole");
    let (again, error) = Message::decode(&bytes);
    assert_eq!(error, None, "an encoded message decodes cleanly");
    assert_eq!(&again, message, "decode(encode(m)) = m");
}
