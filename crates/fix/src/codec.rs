//! The FIX tag=value codec: framing, checksums, fields, and encoding.
//!
//! A message on the wire is `8=FIX.4.4␁9=<len>␁35=…␁…␁10=<sum>␁` (␁ is SOH, byte 1).
//! [`frame`] finds one whole message at the start of a buffer and checks BeginString,
//! BodyLength (the bytes from after `9=…␁` up to and including the SOH before `10=`)
//! and CheckSum (the byte sum, modulo 256, of everything before `10=`), without parsing
//! fields. [`Message::decode`] parses a framed message's fields; what is wrong with a
//! field (a tag that is not a number, a tag without a value, a header tag twice or out
//! of place) is kept as [`FieldError`] with the FIX SessionRejectReason the session
//! answers with, so a malformed message is rejected at the protocol level, never
//! applied, and never panics the decoder (it is fuzzed: `crates/fix/fuzz`).
//!
//! Data fields (RawData(96) after RawDataLength(95), and the other length-prefixed
//! pairs of FIX 4.4) are read by their length, so their values may contain SOH.
//! Repeating groups are not a codec concern: fields keep their order and the
//! application reads a group by walking them ([`Message::group`]).
//!
//! Bounds: a body is at most [`BODY_LEN_MAX`] bytes; decoding is linear in its length.

use std::fmt::Write as _;

pub const SOH: u8 = 1;
/// The only BeginString this front end speaks.
pub const BEGIN_STRING: &str = "FIX.4.4";
const PREFIX: &[u8] = b"8=FIX.4.4\x019=";
/// The largest BodyLength accepted; a larger one is a garbled frame.
pub const BODY_LEN_MAX: usize = 1 << 16;
/// `10=NNN␁`.
const TRAILER_LEN: usize = 7;

/// Why bytes at the head of a buffer are not a FIX 4.4 message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("the message does not start with 8=FIX.4.4␁9=")]
    BeginString,
    #[error("BodyLength (9) is not a number below {BODY_LEN_MAX}")]
    BodyLength,
    #[error("no CheckSum (10) where BodyLength says the body ends")]
    Trailer,
    #[error("CheckSum (10) is {got:03}, the bytes sum to {computed:03}")]
    CheckSum { got: u8, computed: u8 },
}

/// The length of the whole message at the start of `buf`: `Ok(None)` when more bytes
/// are needed, an error when the head of `buf` cannot be a valid message.
pub fn frame(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    let prefix_len = PREFIX.len().min(buf.len());
    if buf[..prefix_len] != PREFIX[..prefix_len] {
        return Err(FrameError::BeginString);
    }
    if buf.len() < PREFIX.len() {
        return Ok(None);
    }
    let rest = &buf[PREFIX.len()..];
    let Some(soh) = rest.iter().take(7).position(|&b| b == SOH) else {
        return if rest.len() < 7 && rest.iter().all(u8::is_ascii_digit) {
            Ok(None)
        } else {
            Err(FrameError::BodyLength)
        };
    };
    let body_len =
        parse_digits(&rest[..soh]).filter(|&n| n <= BODY_LEN_MAX as u64).ok_or(FrameError::BodyLength)? as usize;
    let body_start = PREFIX.len() + soh + 1;
    let trailer_start = body_start + body_len;
    let total = trailer_start + TRAILER_LEN;
    if buf.len() < total {
        return Ok(None);
    }
    let trailer = &buf[trailer_start..total];
    if &trailer[..3] != b"10=" || trailer[6] != SOH || body_len == 0 || buf[trailer_start - 1] != SOH {
        return Err(FrameError::Trailer);
    }
    let got = parse_digits(&trailer[3..6]).filter(|&n| n < 256).ok_or(FrameError::Trailer)? as u8;
    let computed = checksum(&buf[..trailer_start]);
    if got != computed {
        return Err(FrameError::CheckSum { got, computed });
    }
    Ok(Some(total))
}

/// Where the next message may start after garbled bytes: the next `8=FIX.4.4␁` after
/// the first byte, or the end of the buffer.
pub fn resync(buf: &[u8]) -> usize {
    let start = b"8=FIX.4.4\x01";
    (1..buf.len()).find(|&i| buf[i..].starts_with(&start[..start.len().min(buf.len() - i)])).unwrap_or(buf.len())
}

pub fn checksum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |sum, &b| sum.wrapping_add(b))
}

fn parse_digits(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// FIX 4.4 SessionRejectReason (373) values the session uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum RejectReason {
    InvalidTagNumber = 0,
    RequiredTagMissing = 1,
    TagNotDefinedForMessage = 2,
    TagWithoutValue = 4,
    ValueIncorrect = 5,
    IncorrectDataFormat = 6,
    CompIdProblem = 9,
    SendingTimeAccuracy = 10,
    InvalidMsgType = 11,
    TagAppearsMoreThanOnce = 13,
    TagOutOfOrder = 14,
    Other = 99,
}

/// What is wrong with a message's fields: the first problem found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub reason: RejectReason,
    /// The offending tag, when there is one (RefTagID, 371).
    pub tag: Option<u32>,
    pub text: String,
}

impl FieldError {
    pub fn new(reason: RejectReason, tag: Option<u32>, text: impl Into<String>) -> Self {
        FieldError { reason, tag, text: text.into() }
    }
}

/// One decoded or to-be-encoded message: its fields in wire order, without
/// BeginString (8), BodyLength (9) and CheckSum (10), which the codec owns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Message {
    pub fields: Vec<(u32, Vec<u8>)>,
}

/// One entry of a repeating group: its fields, delimiter first.
pub type GroupEntry<'a> = Vec<(u32, &'a [u8])>;

/// Length tags and the data tags they announce (FIX 4.4).
const DATA_FIELDS: &[(u32, u32)] = &[
    (90, 91),
    (93, 89),
    (95, 96),
    (212, 213),
    (348, 349),
    (350, 351),
    (352, 353),
    (354, 355),
    (356, 357),
    (358, 359),
    (360, 361),
    (362, 363),
    (364, 365),
    (445, 446),
    (618, 619),
    (621, 622),
];

/// Header tags that may appear once only.
const HEADER_ONCE: &[u32] = &[35, 49, 56, 34, 52, 43, 97, 122, 115, 128];

impl Message {
    pub fn new(msg_type: &str) -> Message {
        Message { fields: vec![(35, msg_type.as_bytes().to_vec())] }
    }

    /// Parses a message [`frame`] accepted (the whole of it, 8 to 10). The message keeps
    /// every field it could read; the error, if any, is the first problem.
    pub fn decode(framed: &[u8]) -> (Message, Option<FieldError>) {
        let mut message = Message::default();
        let mut error = None;
        let mut fields = Fields { bytes: framed, at: 0, data_len: None };
        let mut index = 0;
        while let Some(field) = fields.next() {
            let (tag, value) = match field {
                Ok(field) => field,
                Err(problem) => {
                    error.get_or_insert(problem);
                    break;
                }
            };
            index += 1;
            match (index, tag) {
                (1, 8) | (2, 9) => continue,
                (_, 10) if fields.at == framed.len() => break,
                (_, 10) => {
                    error.get_or_insert(FieldError::new(
                        RejectReason::TagOutOfOrder,
                        Some(10),
                        "CheckSum (10) must be the last field",
                    ));
                    break;
                }
                (3, 35) if std::str::from_utf8(value).is_err() => {
                    error.get_or_insert(FieldError::new(
                        RejectReason::InvalidMsgType,
                        Some(35),
                        "MsgType (35) must be text",
                    ));
                }
                (3, 35) => {}
                (_, 8 | 9 | 35) => {
                    error.get_or_insert(FieldError::new(
                        RejectReason::TagOutOfOrder,
                        Some(tag),
                        "8, 9 and 35 must be the first three fields",
                    ));
                }
                (3, _) => {
                    error.get_or_insert(FieldError::new(
                        RejectReason::TagOutOfOrder,
                        Some(35),
                        "MsgType (35) must be the third field",
                    ));
                }
                _ => {}
            }
            if HEADER_ONCE.contains(&tag) && message.get(tag).is_some() {
                error.get_or_insert(FieldError::new(
                    RejectReason::TagAppearsMoreThanOnce,
                    Some(tag),
                    format!("tag {tag} appears more than once"),
                ));
            }
            message.fields.push((tag, value.to_vec()));
        }
        (message, error)
    }

    /// The wire form with BeginString, BodyLength and CheckSum.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(256);
        for (tag, value) in &self.fields {
            let mut digits = itoa(u64::from(*tag));
            body.append(&mut digits);
            body.push(b'=');
            body.extend_from_slice(value);
            body.push(SOH);
        }
        let mut out = Vec::with_capacity(body.len() + 32);
        out.extend_from_slice(PREFIX);
        out.append(&mut itoa(body.len() as u64));
        out.push(SOH);
        out.append(&mut body);
        let sum = checksum(&out);
        let mut trailer = String::with_capacity(TRAILER_LEN);
        let _ = write!(trailer, "10={sum:03}\x01");
        out.extend_from_slice(trailer.as_bytes());
        out
    }

    pub fn msg_type(&self) -> &str {
        self.get_str(35).unwrap_or("")
    }

    /// The first value of `tag`.
    pub fn get(&self, tag: u32) -> Option<&[u8]> {
        self.fields.iter().find(|(t, _)| *t == tag).map(|(_, v)| v.as_slice())
    }

    /// The first value of `tag` if it is UTF-8.
    pub fn get_str(&self, tag: u32) -> Option<&str> {
        self.get(tag).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// The first value of `tag` as an unsigned integer: `Ok(None)` when absent, an
    /// error (IncorrectDataFormat) when present and not one.
    pub fn get_u64(&self, tag: u32) -> Result<Option<u64>, FieldError> {
        match self.get(tag) {
            None => Ok(None),
            Some(value) => parse_digits(value).map(Some).ok_or_else(|| {
                FieldError::new(
                    RejectReason::IncorrectDataFormat,
                    Some(tag),
                    format!("tag {tag} must be a non-negative integer"),
                )
            }),
        }
    }

    /// `tag`'s value or a RequiredTagMissing error.
    pub fn require(&self, tag: u32) -> Result<&str, FieldError> {
        match self.get(tag) {
            None => {
                Err(FieldError::new(RejectReason::RequiredTagMissing, Some(tag), format!("required tag {tag} missing")))
            }
            Some(value) => std::str::from_utf8(value).map_err(|_| {
                FieldError::new(RejectReason::IncorrectDataFormat, Some(tag), format!("tag {tag} is not UTF-8"))
            }),
        }
    }

    pub fn require_u64(&self, tag: u32) -> Result<u64, FieldError> {
        self.get_u64(tag)?.ok_or_else(|| {
            FieldError::new(RejectReason::RequiredTagMissing, Some(tag), format!("required tag {tag} missing"))
        })
    }

    /// `Y` / `N` flags; absent is `N`.
    pub fn flag(&self, tag: u32) -> bool {
        self.get(tag) == Some(b"Y")
    }

    /// Appends a field.
    pub fn push(&mut self, tag: u32, value: impl AsRef<[u8]>) -> &mut Message {
        self.fields.push((tag, value.as_ref().to_vec()));
        self
    }

    /// Appends a field with a displayed value.
    pub fn push_display(&mut self, tag: u32, value: impl std::fmt::Display) -> &mut Message {
        self.fields.push((tag, value.to_string().into_bytes()));
        self
    }

    /// Replaces the first `tag` or appends it.
    pub fn set(&mut self, tag: u32, value: impl AsRef<[u8]>) {
        match self.fields.iter_mut().find(|(t, _)| *t == tag) {
            Some((_, v)) => *v = value.as_ref().to_vec(),
            None => self.fields.push((tag, value.as_ref().to_vec())),
        }
    }

    pub fn remove(&mut self, tag: u32) {
        self.fields.retain(|(t, _)| *t != tag);
    }

    /// The entries of the repeating group counted by `count_tag`: for each, its fields
    /// from its delimiter (`first_tag`) to the next delimiter, up to the first field that
    /// is not one of `member_tags`. Checks that the count matches.
    pub fn group(
        &self,
        count_tag: u32,
        first_tag: u32,
        member_tags: &[u32],
    ) -> Result<Vec<GroupEntry<'_>>, FieldError> {
        let Some(start) = self.fields.iter().position(|(t, _)| *t == count_tag) else {
            return Ok(Vec::new());
        };
        let count = self.get_u64(count_tag)?.unwrap_or(0);
        let mut entries: Vec<GroupEntry<'_>> = Vec::new();
        for (tag, value) in &self.fields[start + 1..] {
            if *tag == first_tag {
                entries.push(vec![(*tag, value.as_slice())]);
            } else if member_tags.contains(tag) && !entries.is_empty() {
                entries.last_mut().expect("an entry").push((*tag, value.as_slice()));
            } else {
                break;
            }
        }
        if entries.len() as u64 != count {
            return Err(FieldError::new(
                RejectReason::ValueIncorrect,
                Some(count_tag),
                format!(
                    "group {count_tag} says {count} entries, {} found (each must start with tag {first_tag})",
                    entries.len()
                ),
            ));
        }
        Ok(entries)
    }
}

fn itoa(mut n: u64) -> Vec<u8> {
    let mut digits = Vec::with_capacity(20);
    loop {
        digits.push(b'0' + (n % 10) as u8);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    digits.reverse();
    digits
}

/// The fields of a framed message, one `tag=value␁` at a time.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
    /// The length announced by the previous field when it was a data length tag.
    data_len: Option<(u32, usize)>,
}

impl<'a> Fields<'a> {
    fn next(&mut self) -> Option<Result<(u32, &'a [u8]), FieldError>> {
        if self.at >= self.bytes.len() {
            return None;
        }
        let rest = &self.bytes[self.at..];
        let Some(eq) = rest.iter().position(|&b| b == b'=' || b == SOH) else {
            return Some(Err(FieldError::new(RejectReason::Other, None, "a field without '='")));
        };
        if rest[eq] != b'=' {
            return Some(Err(FieldError::new(RejectReason::InvalidTagNumber, None, "a field without '='")));
        }
        let tag = match parse_digits(&rest[..eq]).filter(|&t| t > 0 && t <= u64::from(u32::MAX) && rest[0] != b'0') {
            Some(tag) => tag as u32,
            None => {
                return Some(Err(FieldError::new(
                    RejectReason::InvalidTagNumber,
                    None,
                    "a tag that is not a positive number",
                )))
            }
        };
        let value_start = eq + 1;
        let value_end = match self.data_len.take() {
            Some((data_tag, len)) if data_tag == tag => {
                let end = value_start + len;
                if end >= rest.len() || rest[end] != SOH {
                    return Some(Err(FieldError::new(
                        RejectReason::ValueIncorrect,
                        Some(tag),
                        format!("data field {tag} is not as long as its length field says"),
                    )));
                }
                end
            }
            _ => match rest[value_start..].iter().position(|&b| b == SOH) {
                Some(len) => value_start + len,
                None => return Some(Err(FieldError::new(RejectReason::Other, Some(tag), "a field without its SOH"))),
            },
        };
        let value = &rest[value_start..value_end];
        self.at += value_end + 1;
        if value.is_empty() {
            return Some(Err(FieldError::new(
                RejectReason::TagWithoutValue,
                Some(tag),
                format!("tag {tag} has no value"),
            )));
        }
        if let Some(&(_, data_tag)) = DATA_FIELDS.iter().find(|(len_tag, _)| *len_tag == tag) {
            match parse_digits(value).filter(|&n| n as usize <= BODY_LEN_MAX) {
                Some(len) => self.data_len = Some((data_tag, len as usize)),
                None => {
                    return Some(Err(FieldError::new(
                        RejectReason::IncorrectDataFormat,
                        Some(tag),
                        format!("length tag {tag} is not a number"),
                    )))
                }
            }
        }
        Some(Ok((tag, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(text: &str) -> Vec<u8> {
        text.replace('|', "\x01").into_bytes()
    }

    #[test]
    fn a_known_message_frames_and_decodes() {
        let mut logon = Message::new("A");
        logon
            .push(49, "CLIENT")
            .push(56, "BOURSE")
            .push(34, "1")
            .push(52, "20260101-00:00:00.000")
            .push(98, "0")
            .push(108, "30");
        let bytes = logon.encode();
        let text = String::from_utf8(bytes.clone()).unwrap().replace('\x01', "|");
        assert_eq!(text, "8=FIX.4.4|9=67|35=A|49=CLIENT|56=BOURSE|34=1|52=20260101-00:00:00.000|98=0|108=30|10=110|");
        assert_eq!(frame(&bytes), Ok(Some(bytes.len())));
        assert_eq!(frame(&bytes[..bytes.len() - 1]), Ok(None));
        let (decoded, error) = Message::decode(&bytes);
        assert_eq!(error, None);
        assert_eq!(decoded, logon);
    }

    #[test]
    fn a_wrong_checksum_or_length_is_a_frame_error() {
        let mut bytes = Message::new("0").encode();
        let n = bytes.len();
        bytes[n - 2] = if bytes[n - 2] == b'9' { b'0' } else { b'9' };
        assert!(matches!(frame(&bytes), Err(FrameError::CheckSum { .. })));
        assert_eq!(frame(&wire("8=FIX.4.2|9=5|35=0|10=000|")), Err(FrameError::BeginString));
        assert_eq!(frame(&wire("8=FIX.4.4|9=x|")), Err(FrameError::BodyLength));
        assert_eq!(frame(&wire("8=FIX.4.4|9=3|35=0|10=000|")), Err(FrameError::Trailer));
    }

    #[test]
    fn field_problems_carry_their_reject_reason() {
        let cases = [
            ("35=D|49=A|56=B|34=2|abc=1|", RejectReason::InvalidTagNumber),
            ("35=D|49=A|56=B|34=2|11=|", RejectReason::TagWithoutValue),
            ("35=D|49=A|49=B|", RejectReason::TagAppearsMoreThanOnce),
            ("49=A|35=D|", RejectReason::TagOutOfOrder),
        ];
        for (body, reason) in cases {
            let mut bytes = wire(&format!("8=FIX.4.4|9={}|{body}", body.len()));
            let sum = checksum(&bytes);
            bytes.extend_from_slice(format!("10={sum:03}\x01").as_bytes());
            assert_eq!(frame(&bytes), Ok(Some(bytes.len())), "{body}");
            let (_, error) = Message::decode(&bytes);
            assert_eq!(error.map(|e| e.reason), Some(reason), "{body}");
        }
        // A MsgType that is not text: answered with Reject, never echoed as an empty RefMsgType.
        let body = b"35=\xff\x0149=A\x0156=B\x01";
        let mut bytes = format!("8=FIX.4.4\x019={}\x01", body.len()).into_bytes();
        bytes.extend_from_slice(body);
        let sum = checksum(&bytes);
        bytes.extend_from_slice(format!("10={sum:03}\x01").as_bytes());
        assert_eq!(frame(&bytes), Ok(Some(bytes.len())));
        let (message, error) = Message::decode(&bytes);
        assert_eq!(error.map(|e| e.reason), Some(RejectReason::InvalidMsgType));
        assert_eq!(message.msg_type(), "");
    }

    #[test]
    fn data_fields_may_hold_soh() {
        let mut logon = Message::new("A");
        logon.push(95, "5").push(96, b"a\x01b=c");
        let bytes = logon.encode();
        let (decoded, error) = Message::decode(&bytes);
        assert_eq!(error, None);
        assert_eq!(decoded.get(96), Some(&b"a\x01b=c"[..]));
    }

    #[test]
    fn groups_are_read_by_delimiter_and_counted() {
        let mut request = Message::new("V");
        request.push(262, "r").push(267, "2").push(269, "0").push(269, "1").push(146, "1").push(55, "ACME/USD");
        let types = request.group(267, 269, &[]).unwrap();
        assert_eq!(types.len(), 2);
        assert_eq!(request.group(146, 55, &[]).unwrap()[0][0].1, b"ACME/USD");
        request.set(267, "3");
        assert_eq!(request.group(267, 269, &[]).unwrap_err().reason, RejectReason::ValueIncorrect);
    }

    #[test]
    fn resync_finds_the_next_message() {
        let mut bytes = b"garbage".to_vec();
        let good = Message::new("0").encode();
        bytes.extend_from_slice(&good);
        assert_eq!(resync(&bytes), 7);
        assert_eq!(resync(b"8=FIX.4.4\x01junk"), 14);
    }
}
