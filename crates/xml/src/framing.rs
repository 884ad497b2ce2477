//! Request framing (spec section 2.2): a length line of ASCII digits ending in LF (one
//! CR before it is accepted), then exactly that many bytes of body.
//!
//! The reader never looks inside the body to find its end. It refuses a length line at
//! the first byte that cannot belong to one (so a client sending garbage is answered at
//! once, not after 20 bytes), or when no LF came within the first 20 bytes; it refuses
//! a length above the bound before reading any of the body. Timeouts: `idle` until the
//! first byte of a request, then `read` for the whole request.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

/// The length line must end within this many bytes (LF included).
pub const LENGTH_LINE_MAX: usize = 20;

/// Why no request was read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Not digits then LF, or no LF within 20 bytes: answered, then the connection
    /// closes (the stream is out of step).
    #[error("Malformed length line")]
    MalformedLength,
    /// N above the bound: answered without reading the body, then closed.
    #[error("Request too large")]
    TooLarge,
    /// The peer closed between requests: nothing to answer.
    #[error("connection closed")]
    Closed,
    /// The peer closed in the middle of a request: nothing to answer.
    #[error("connection closed in the middle of a request")]
    Truncated,
    /// No byte of a request came within the idle timeout.
    #[error("idle timeout")]
    Idle,
    /// A request was not complete within the read timeout.
    #[error("read timeout")]
    ReadTimeout,
    #[error("read failed: {0}")]
    Io(String),
}

impl FrameError {
    /// The text of the request-level error to send, for the errors that get one.
    pub fn reply_text(&self) -> Option<&'static str> {
        match self {
            FrameError::MalformedLength => Some("Malformed length line"),
            FrameError::TooLarge => Some("Request too large"),
            _ => None,
        }
    }
}

/// Reads framed requests from one connection.
pub struct FrameReader<R> {
    reader: BufReader<R>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R) -> Self {
        FrameReader { reader: BufReader::with_capacity(4 * 1024, inner) }
    }

    /// The next request's body, at most `max` bytes.
    pub async fn next(&mut self, max: usize, idle: Duration, read: Duration) -> Result<Vec<u8>, FrameError> {
        match tokio::time::timeout(idle, self.reader.fill_buf()).await {
            Err(_) => return Err(FrameError::Idle),
            Ok(Err(error)) => return Err(FrameError::Io(error.to_string())),
            Ok(Ok([])) => return Err(FrameError::Closed),
            Ok(Ok(_)) => {}
        }
        tokio::time::timeout(read, self.request(max)).await.unwrap_or(Err(FrameError::ReadTimeout))
    }

    async fn request(&mut self, max: usize) -> Result<Vec<u8>, FrameError> {
        let length = self.length_line().await?;
        if length > max as u64 {
            return Err(FrameError::TooLarge);
        }
        let mut body = vec![0; length as usize];
        self.reader.read_exact(&mut body).await.map_err(|error| match error.kind() {
            std::io::ErrorKind::UnexpectedEof => FrameError::Truncated,
            _ => FrameError::Io(error.to_string()),
        })?;
        Ok(body)
    }

    /// Reads `<digits> [CR] LF`; the value saturates (any value that large is too large).
    async fn length_line(&mut self) -> Result<u64, FrameError> {
        let mut length: u64 = 0;
        let (mut digits, mut cr) = (0usize, false);
        for taken in 1..=LENGTH_LINE_MAX {
            let byte = match self.reader.read_u8().await {
                Ok(byte) => byte,
                Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Truncated),
                Err(error) => return Err(FrameError::Io(error.to_string())),
            };
            match byte {
                b'\n' if digits > 0 => return Ok(length),
                b'0'..=b'9' if !cr => {
                    digits += 1;
                    length = length.saturating_mul(10).saturating_add(u64::from(byte - b'0'));
                }
                b'\r' if !cr && digits > 0 && taken < LENGTH_LINE_MAX => cr = true,
                _ => return Err(FrameError::MalformedLength),
            }
        }
        Err(FrameError::MalformedLength)
    }

    /// Bytes already read past the last request (pipelined requests wait here).
    pub fn buffered(&self) -> usize {
        self.reader.buffer().len()
    }

    pub fn get_mut(&mut self) -> &mut R {
        self.reader.get_mut()
    }
}

/// `M\n` then the reply: a reply framed like a request.
pub fn prefixed(reply: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(reply.len() + 8);
    out.extend_from_slice(reply.len().to_string().as_bytes());
    out.push(b'\n');
    out.extend_from_slice(reply);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(5);

    async fn read_all(input: &[u8], max: usize) -> Vec<Result<Vec<u8>, FrameError>> {
        let mut reader = FrameReader::new(input);
        let mut out = Vec::new();
        loop {
            let next = reader.next(max, LONG, LONG).await;
            let end = next.is_err();
            out.push(next);
            if end {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn requests_are_read_back_to_back_with_or_without_cr() {
        let got = read_all(b"3\nabc0004\r\nwxyz0\n", 100).await;
        assert_eq!(got, [Ok(b"abc".to_vec()), Ok(b"wxyz".to_vec()), Ok(vec![]), Err(FrameError::Closed)]);
    }

    #[tokio::test]
    async fn bad_length_lines_are_refused() {
        for input in [&b"\n"[..], b"\r\n", b"x\n", b"-1\n", b"+1\n", b" 1\n", b"1 \n", b"1\r\r\n", b"1\rx", b"12a"] {
            assert_eq!(read_all(input, 100).await[0], Err(FrameError::MalformedLength), "{input:?}");
        }
        // 19 digits and LF is the longest line; 20 digits have no LF within 20 bytes.
        assert_eq!(read_all(b"0000000000000000003\nabc", 100).await[0], Ok(b"abc".to_vec()));
        assert_eq!(read_all(b"000000000000000000003\nabc", 100).await[0], Err(FrameError::MalformedLength));
        assert_eq!(read_all(b"000000000000000003\r\nabc", 100).await[0], Ok(b"abc".to_vec()));
        assert_eq!(read_all(b"0000000000000000003\r\nabc", 100).await[0], Err(FrameError::MalformedLength));
    }

    #[tokio::test]
    async fn too_large_short_and_truncated() {
        assert_eq!(read_all(b"101\n", 100).await[0], Err(FrameError::TooLarge));
        assert_eq!(read_all(b"9999999999999999999\n", 100).await[0], Err(FrameError::TooLarge));
        assert_eq!(read_all(b"5\nabc", 100).await[0], Err(FrameError::Truncated));
        assert_eq!(read_all(b"12", 100).await[0], Err(FrameError::Truncated));
        assert_eq!(read_all(b"", 100).await[0], Err(FrameError::Closed));
    }

    #[test]
    fn replies_are_prefixed_with_their_length() {
        assert_eq!(prefixed(b"<results/>\n"), b"11\n<results/>\n");
    }
}
