//! Command encoding for logs and wires: postcard (a compact, stable serde format).
//!
//! Decoding is total: any byte string yields a command or an error, never a panic,
//! and is bounded by [`COMMAND_BYTES_MAX`]. A fuzz target holds it to that.

use crate::command::Command;

/// The largest encoded command accepted.
pub const COMMAND_BYTES_MAX: usize = 4096;

#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    TooLong(usize),
    Malformed(String),
    /// Bytes were left over after one command.
    Trailing(usize),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::TooLong(n) => {
                write!(f, "command of {n} bytes exceeds {COMMAND_BYTES_MAX}")
            }
            DecodeError::Malformed(e) => write!(f, "malformed command: {e}"),
            DecodeError::Trailing(n) => write!(f, "{n} bytes after the command"),
        }
    }
}

impl std::error::Error for DecodeError {}

pub fn encode(command: &Command) -> Vec<u8> {
    let mut buffer = Vec::new();
    encode_into(command, &mut buffer);
    buffer
}

/// Room for an encoded order with every field at its widest (87 bytes: see the test);
/// admin commands with long names take the slower path.
const ENCODED_TYPICAL_MAX: usize = 96;

/// Appends the encoding of `command` to `buffer` (what [`encode`] returns, without a
/// buffer of its own).
///
/// Encodes on the stack, then copies once: postcard's `Extend` flavour appends field by
/// field, a `memcpy` call for every byte or two, which cost a node's core thread a fifth
/// of its time.
pub fn encode_into(command: &Command, buffer: &mut Vec<u8>) {
    let mut stack = [0u8; ENCODED_TYPICAL_MAX];
    match postcard::to_slice(command, &mut stack) {
        Ok(encoded) => buffer.extend_from_slice(encoded),
        Err(_) => {
            let taken = std::mem::take(buffer);
            *buffer = postcard::to_extend(command, taken).expect("encoding to memory cannot fail");
        }
    }
}

pub fn decode(bytes: &[u8]) -> Result<Command, DecodeError> {
    if bytes.len() > COMMAND_BYTES_MAX {
        return Err(DecodeError::TooLong(bytes.len()));
    }
    let (command, rest) = postcard::take_from_bytes(bytes).map_err(|e| DecodeError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError::Trailing(rest.len()));
    }
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{CommandBody, OrderKind, OrderRequest, Stp, Tif};
    use crate::{AccountId, ClientId, Px, Qty, Side, SymbolId};

    #[test]
    fn the_widest_order_is_encoded_on_the_stack_and_round_trips() {
        let order = OrderRequest {
            account: AccountId(u32::MAX),
            symbol: SymbolId(u32::MAX),
            side: Side::Sell,
            kind: OrderKind::StopLimit { trigger: Px(i64::MIN), px: Px(i64::MIN) },
            qty: Qty(i64::MIN),
            tif: Tif::Gtc,
            post_only: true,
            display_qty: Some(Qty(i64::MIN)),
            stp: Stp::CancelIncoming,
        };
        let command =
            Command { client: ClientId(u64::MAX), seq: u64::MAX, ts: u64::MAX, body: CommandBody::Place(order) };
        let bytes = encode(&command);
        assert_eq!(bytes.len(), 87);
        assert!(bytes.len() <= ENCODED_TYPICAL_MAX);
        assert_eq!(bytes, postcard::to_allocvec(&command).unwrap(), "the same bytes as before");
        assert_eq!(decode(&bytes).unwrap(), command);
    }

    #[test]
    fn a_command_too_long_for_the_stack_buffer_is_encoded_all_the_same_and_appended() {
        let body = CommandBody::CreateAsset { name: "A".repeat(300), decimals: 2 };
        let command = Command { client: ClientId(7), seq: 9, ts: 11, body };
        let bytes = encode(&command);
        assert!(bytes.len() > ENCODED_TYPICAL_MAX);
        assert_eq!(bytes, postcard::to_allocvec(&command).unwrap());
        assert_eq!(decode(&bytes).unwrap(), command);
        // Appending keeps what the buffer held, on both paths.
        let short = Command {
            client: ClientId(1),
            seq: 1,
            ts: 1,
            body: CommandBody::CreateAsset { name: "B".into(), decimals: 0 },
        };
        let mut buffer = vec![0xAA];
        encode_into(&short, &mut buffer);
        encode_into(&command, &mut buffer);
        let short_len = encode(&short).len();
        assert_eq!(buffer[0], 0xAA);
        assert_eq!(decode(&buffer[1..1 + short_len]).unwrap(), short);
        assert_eq!(decode(&buffer[1 + short_len..]).unwrap(), command);
    }
}
