//! The driver's side of `DayTrading.Session`, lean on CPU: the same protobuf messages as
//! the generated client sends and reads, but requests are encoded straight from the
//! workload's lines into one buffer (no `DayTradingRequest` with its owned strings per
//! command), and responses are read as the part of `DayTradingResponses` the driver
//! looks at (id, whether there is a result, its error, the failure); the other fields
//! (symbol, summary JSON, dump, …) are skipped on the wire as any protobuf reader skips
//! fields it does not declare.

use prost::bytes::{Buf, BufMut};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, skip_field, DecodeContext, WireType};
use prost::DecodeError;
use tonic::codec::Streaming;
use tonic::transport::Channel;

use super::parse::Line;

/// `DayTradingRequest`'s field numbers (proto/bourse/v1/exchange.proto).
const REQUEST_ID: u32 = 1;
const REQUEST_COMMAND: u32 = 2;
const REQUEST_ARGS: u32 = 3;
const REQUEST_TRANSACTION_NUM: u32 = 4;
/// `DayTradingRequests.requests`.
const REQUESTS: u32 = 1;

/// Appends one `DayTradingRequest` (id, the line's command, args and transactionNum, no
/// caller) as an element of `DayTradingRequests.requests`: the bytes the generated
/// encoder writes for `run::request(id, line)`.
pub fn encode_request(id: u64, line: &Line, out: &mut Vec<u8>) {
    let command = u64::from(line.kind.code());
    let mut len = 0;
    if id != 0 {
        len += 1 + encoded_len_varint(id);
    }
    len += 1 + encoded_len_varint(command);
    for arg in &line.args {
        len += 1 + encoded_len_varint(arg.len() as u64) + arg.len();
    }
    if line.number != 0 {
        len += 1 + encoded_len_varint(line.number);
    }
    encode_key(REQUESTS, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
    if id != 0 {
        encode_key(REQUEST_ID, WireType::Varint, out);
        encode_varint(id, out);
    }
    encode_key(REQUEST_COMMAND, WireType::Varint, out);
    encode_varint(command, out);
    for arg in &line.args {
        encode_key(REQUEST_ARGS, WireType::LengthDelimited, out);
        encode_varint(arg.len() as u64, out);
        out.put_slice(arg.as_bytes());
    }
    if line.number != 0 {
        encode_key(REQUEST_TRANSACTION_NUM, WireType::Varint, out);
        encode_varint(line.number, out);
    }
}

/// A `DayTradingRequests` message already encoded (requests appended by
/// [`encode_request`]).
#[derive(Debug, Default)]
pub struct EncodedRequests(pub Vec<u8>);

impl prost::Message for EncodedRequests {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.0);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        // Only ever sent.
        skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// `DayTradingResponses` as the driver reads it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Answers {
    #[prost(message, repeated, tag = "1")]
    pub responses: Vec<Answer>,
}

/// `DayTradingResponse`: id, result (its error only) and failure.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Answer {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(message, optional, tag = "2")]
    pub result: Option<AnswerResult>,
    #[prost(string, tag = "5")]
    pub failure: String,
}

/// `DayTradingResult`: the error's text only.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AnswerResult {
    #[prost(string, tag = "3")]
    pub error: String,
}

/// Opens a `DayTrading.Session` stream sending `requests` (with the metadata of
/// `requests`, e.g. the API key).
pub async fn session<S>(channel: Channel, requests: tonic::Request<S>) -> Result<Streaming<Answers>, tonic::Status>
where
    S: tokio_stream::Stream<Item = EncodedRequests> + Send + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_decoding_message_size(crate::MESSAGE_BYTES_MAX)
        .max_encoding_message_size(crate::MESSAGE_BYTES_MAX);
    grpc.ready().await.map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
    let codec = tonic_prost::ProstCodec::<EncodedRequests, Answers>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/bourse.v1.DayTrading/Session");
    let mut request = tonic::IntoStreamingRequest::into_streaming_request(requests);
    request.extensions_mut().insert(tonic::codegen::GrpcMethod::new("bourse.v1.DayTrading", "Session"));
    Ok(grpc.streaming(request, path, codec).await?.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bourse_engine::daytrading::DtKind;
    use bourse_protocol::proto;
    use prost::Message;
    use rand_chacha::rand_core::{RngCore, SeedableRng};

    fn line(number: u64, kind: DtKind, args: &[&str]) -> Line {
        Line { number, kind, args: args.iter().map(|a| (*a).to_owned()).collect() }
    }

    /// Pseudo-random lines (a fixed seed): every kind, ids and numbers of every varint
    /// width and zero, empty and long arguments.
    fn lines(seed: u64, count: usize) -> Vec<(u64, Line)> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut next = move || rng.next_u64();
        (0..count)
            .map(|_| {
                let kind = DtKind::ALL[(next() % 16) as usize];
                let width = next() % 64;
                let id = if next() % 8 == 0 { 0 } else { next() >> width };
                let number = if next() % 8 == 0 { 0 } else { next() >> (next() % 64) };
                let args: Vec<String> = (0..next() % 5)
                    .map(|_| {
                        let len = [0, 1, 10, 127, 128, 300][(next() % 6) as usize];
                        (0..len).map(|i| char::from(b'a' + ((i as u64 + next()) % 26) as u8)).collect()
                    })
                    .collect();
                (id, Line { number, kind, args })
            })
            .collect()
    }

    #[test]
    fn prop_encoded_requests_are_the_generated_encoding() {
        for seed in 1..=40u64 {
            let batch = lines(seed, 1 + (seed as usize % 7) * 9);
            let mut encoded = Vec::new();
            for (id, line) in &batch {
                encode_request(*id, line, &mut encoded);
            }
            let generated = proto::DayTradingRequests {
                requests: batch.iter().map(|(id, line)| super::super::run::request(*id as usize, line)).collect(),
            };
            assert_eq!(encoded, generated.encode_to_vec(), "seed {seed}");
            let message = EncodedRequests(encoded);
            assert_eq!(prost::Message::encode_to_vec(&message), generated.encode_to_vec());
            assert_eq!(proto::DayTradingRequests::decode(message.0.as_slice()).unwrap(), generated);
        }
        // The workload's own shapes: the global DUMPLOG and a user's ADD.
        let mut encoded = Vec::new();
        encode_request(7, &line(100, DtKind::DumpLog, &["./testLOG"]), &mut encoded);
        encode_request(8, &line(1, DtKind::Add, &["oY01WVirLr", "63511.53"]), &mut encoded);
        let decoded = proto::DayTradingRequests::decode(encoded.as_slice()).unwrap();
        assert_eq!(decoded.requests[0].args, ["./testLOG"]);
        assert_eq!((decoded.requests[1].id, decoded.requests[1].transaction_num), (8, 1));
    }

    #[test]
    fn answers_read_what_the_driver_needs_from_full_responses() {
        let full = proto::DayTradingResponses {
            responses: vec![
                proto::DayTradingResponse {
                    id: 3,
                    result: Some(proto::DayTradingResult {
                        transaction_num: 9,
                        command: 15,
                        summary_json: "{\"cash\":1}".repeat(50),
                        symbol: "ABC".into(),
                        price: Some(5),
                        stamp: 1_700_000_000_000,
                        ..Default::default()
                    }),
                    log_index: 12,
                    dump: None,
                    failure: String::new(),
                },
                proto::DayTradingResponse {
                    id: u64::MAX,
                    result: Some(proto::DayTradingResult {
                        error: "insufficient shares".into(),
                        error_code: 7,
                        ..Default::default()
                    }),
                    log_index: 13,
                    dump: Some(proto::DayTradingDump {
                        filename: "f".into(),
                        records: 2,
                        bytes: 3,
                        document: vec![1; 9],
                    }),
                    failure: String::new(),
                },
                proto::DayTradingResponse {
                    id: 0,
                    failure: "the exchange is unreachable".into(),
                    ..Default::default()
                },
            ],
        };
        let answers = Answers::decode(full.encode_to_vec().as_slice()).unwrap();
        assert_eq!(
            answers.responses,
            [
                Answer { id: 3, result: Some(AnswerResult { error: String::new() }), failure: String::new() },
                Answer {
                    id: u64::MAX,
                    result: Some(AnswerResult { error: "insufficient shares".into() }),
                    failure: String::new()
                },
                Answer { id: 0, result: None, failure: "the exchange is unreachable".into() },
            ]
        );
    }
}
