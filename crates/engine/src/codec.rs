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
    postcard::to_allocvec(command).expect("encoding to memory cannot fail")
}

/// Appends the encoding of `command` to `buffer` (what [`encode`] returns, without a
/// buffer of its own).
pub fn encode_into(command: &Command, buffer: &mut Vec<u8>) {
    let taken = std::mem::take(buffer);
    *buffer = postcard::to_extend(command, taken).expect("encoding to memory cannot fail");
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
