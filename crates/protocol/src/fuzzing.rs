//! The fuzz entry point (`crates/protocol/fuzz`, `make fuzz`), also run over its corpus
//! on stable by `tests/fuzz_corpus.rs`: any bytes, decoded with prost as one of the
//! messages a node, a gateway or a front end converts to engine values, then converted.
//! Never a panic; what converts goes back to the same wire value and fits the log,
//! and what does not is a [`ConvertError`] with a refusal code of its own.
//!
//! The first byte picks the message (modulo [`MESSAGES`]); the rest is its encoding:
//!
//! | byte | message | converted as |
//! |---|---|---|
//! | 0 | `ClientBatch` | an `OrderEntry.Session` batch: [`convert::command_from_proto`] per command |
//! | 1 | `SubmitRequest` | `Admin.Submit`: [`convert::command_from_submit`] |
//! | 2 | `GatewayUp` | a gateway link's batches: each command with its batch's client and stamp |
//! | 3 | `ClientCommand` | one command |
//! | 4 | `ServerBatch` | acks ([`convert::outcome_from_ack`], day-trading results), fills, cancels |
//! | 5 | `GetOrderReply` | the order's side, kind, time in force and status |
//! | 6 | `GetOpenOrdersReply` | the same, per order |
//! | 7 | `GetSymbolsReply` | each `SymbolSpec` |
//! | 8 | `DayTradingRequests` | each request's command kind, as the day-trading service reads it |
//! | 9 | `DayTradingResponses` | each result's command kind, as the REST front end reads it |

use bourse_engine::codec;
use bourse_engine::command::{Command, OrderKind, SymbolSpec};
use bourse_engine::{ClientId, Outcome, Reject, Timestamp};
use prost::Message;

use crate::convert::{self, ConvertError};
use crate::daytrading;
use crate::proto;
use crate::refusal::Refusal;

/// How many messages the first byte chooses among.
pub const MESSAGES: u8 = 10;

/// The leader's stamp for commands whose message carries none.
const TS: Timestamp = 1_700_000_000_000_000_000;

/// Decodes `data` as the message its first byte names and converts it; panics on any
/// broken rule.
pub fn decode_and_convert(data: &[u8]) {
    let Some((&which, bytes)) = data.split_first() else { return };
    match which % MESSAGES {
        0 => {
            if let Ok(batch) = proto::ClientBatch::decode(bytes) {
                for command in &batch.commands {
                    check_command(ClientId(batch.client_id), TS, command);
                }
            }
        }
        1 => {
            if let Ok(request) = proto::SubmitRequest::decode(bytes) {
                match convert::command_from_submit(TS, &request) {
                    Ok(command) => {
                        assert_eq!(
                            convert::command_from_submit(TS, &proto::SubmitRequest::from(&command)).as_ref(),
                            Ok(&command),
                            "a submit does not convert back"
                        );
                        check_converted(&command);
                    }
                    Err(error) => check_refusal(request.command.as_ref().map_or(0, |c| c.seq), &error),
                }
            }
        }
        2 => {
            if let Ok(up) = proto::GatewayUp::decode(bytes) {
                for batch in &up.batches {
                    for command in &batch.commands {
                        check_command(ClientId(batch.client_id), batch.gateway_ts, command);
                    }
                }
            }
        }
        3 => {
            if let Ok(command) = proto::ClientCommand::decode(bytes) {
                check_command(ClientId(1), TS, &command);
            }
        }
        4 => {
            if let Ok(batch) = proto::ServerBatch::decode(bytes) {
                for ack in &batch.acks {
                    check_ack(ack);
                }
                for fill in &batch.fills {
                    let side = convert::side_from_proto(fill.side, "FillReport.side");
                    check_enum(fill.side, side, |side| proto::Side::from(side) as i32);
                }
                for cancel in &batch.cancels {
                    let reason = convert::cancel_reason_from_proto(cancel.reason, "CancelReport.reason");
                    check_enum(cancel.reason, reason, |reason| proto::CancelReason::from(reason) as i32);
                }
            }
        }
        5 => {
            if let Ok(reply) = proto::GetOrderReply::decode(bytes) {
                reply.order.iter().for_each(check_order);
            }
        }
        6 => {
            if let Ok(reply) = proto::GetOpenOrdersReply::decode(bytes) {
                reply.orders.iter().for_each(check_order);
            }
        }
        7 => {
            if let Ok(reply) = proto::GetSymbolsReply::decode(bytes) {
                for spec in reply.symbols.iter().filter_map(|info| info.spec.as_ref()) {
                    match SymbolSpec::try_from(spec) {
                        Ok(engine) => {
                            assert_eq!(&proto::SymbolSpec::from(&engine), spec, "a spec does not convert back")
                        }
                        Err(error) => check_enum::<()>(spec.policy, Err(error), |()| 0),
                    }
                }
            }
        }
        8 => {
            if let Ok(requests) = proto::DayTradingRequests::decode(bytes) {
                for request in &requests.requests {
                    let kind = daytrading::kind_from_wire(request.command, "DayTradingRequest.command");
                    check_enum(request.command, kind, daytrading::kind_wire);
                }
            }
        }
        _ => {
            if let Ok(responses) = proto::DayTradingResponses::decode(bytes) {
                for result in responses.responses.iter().filter_map(|r| r.result.as_ref()) {
                    let kind = daytrading::kind_from_wire(result.command, "DayTradingResult.command");
                    check_enum(result.command, kind, daytrading::kind_wire);
                }
            }
        }
    }
}

/// One wire command of `client` stamped `ts`: converted, or refused as the node would.
fn check_command(client: ClientId, ts: Timestamp, wire: &proto::ClientCommand) {
    match convert::command_from_proto(client, ts, wire) {
        Ok(command) => {
            let back = proto::ClientCommand::from(&command);
            assert_eq!(
                convert::command_from_proto(client, ts, &back).as_ref(),
                Ok(&command),
                "a command does not convert back"
            );
            // The canonical wire form converts again after its own encoding.
            let decoded = proto::ClientCommand::decode(back.encode_to_vec().as_slice()).expect("own encoding decodes");
            assert_eq!(decoded, back, "a command's encoding does not decode to it");
            check_converted(&command);
        }
        Err(error) => check_refusal(wire.seq, &error),
    }
}

/// A converted command goes into the log next: its encoding must be one every replica
/// decodes to the same command.
fn check_converted(command: &Command) {
    let bytes = codec::encode(command);
    assert!(
        bytes.len() <= codec::COMMAND_BYTES_MAX,
        "a converted command of {} bytes cannot be read back from the log",
        bytes.len()
    );
    assert_eq!(codec::decode(&bytes).as_ref(), Ok(command), "a converted command does not survive the log");
}

/// A refusal: a node code from 1000 up that no engine rejection has, named and shown.
fn check_refusal(seq: u64, error: &ConvertError) {
    assert!(error.code() >= 1000, "{error:?} has code {}", error.code());
    assert_eq!(Refusal::from_code(error.code()), Some(error.refusal()));
    assert!(error.field().contains('.') && !error.to_string().is_empty(), "{error:?}");
    let info = proto::RejectInfo::from(error);
    assert!(Reject::try_from(&info).is_err(), "refusal {info:?} reads as an engine rejection");
    let ack = convert::ack_refused(seq, error);
    assert_eq!((ack.seq, ack.log_index), (seq, 0));
    assert!(convert::outcome_from_ack(&ack).is_err(), "a refused ack reads as an engine outcome");
}

/// An ack as a client reads it: an engine outcome that goes back to the same wire
/// outcome, or an error for a refusal, a missing outcome or an unknown code.
fn check_ack(ack: &proto::Ack) {
    match (convert::outcome_from_ack(ack), &ack.outcome) {
        (Ok(outcome), Some(wire)) => {
            assert_eq!(&proto::ack::Outcome::from(outcome), &normalized(wire), "an ack outcome does not convert back");
            if let Outcome::Rejected(reject) = outcome {
                assert!(reject.code() < 1000);
            }
        }
        (Ok(outcome), None) => panic!("an ack without an outcome read as {outcome:?}"),
        (Err(ConvertError::FieldMissing { .. }), None) => {}
        (Err(ConvertError::EnumUnknown { value, .. }), Some(proto::ack::Outcome::Rejected(info))) => {
            assert_eq!(value, i64::from(info.code));
            assert!(u16::try_from(info.code).ok().and_then(Reject::from_code).is_none());
        }
        (Err(error), wire) => panic!("{error:?} for {wire:?}"),
    }
    if let Some(result) = &ack.day_trading {
        let kind = daytrading::kind_from_wire(result.command, "DayTradingResult.command");
        check_enum(result.command, kind, daytrading::kind_wire);
    }
}

/// The wire outcome an engine outcome becomes: a rejection's name and detail are the
/// engine's, whatever the peer sent.
fn normalized(wire: &proto::ack::Outcome) -> proto::ack::Outcome {
    match wire {
        proto::ack::Outcome::OkId(id) => proto::ack::Outcome::OkId(*id),
        proto::ack::Outcome::Rejected(info) => match u16::try_from(info.code).ok().and_then(Reject::from_code) {
            Some(reject) => proto::ack::Outcome::Rejected(reject.into()),
            None => proto::ack::Outcome::Rejected(info.clone()),
        },
    }
}

/// An order of a query reply: each enum and the kind read as the REST and XML front
/// ends read them.
fn check_order(order: &proto::OrderInfo) {
    check_enum(order.side, convert::side_from_proto(order.side, "OrderInfo.side"), |side| {
        proto::Side::from(side) as i32
    });
    check_enum(order.tif, convert::tif_from_proto(order.tif, "OrderInfo.tif"), |tif| proto::Tif::from(tif) as i32);
    check_enum(order.status, convert::order_status_from_proto(order.status, "OrderInfo.status"), |status| {
        proto::OrderStatus::from(status) as i32
    });
    if let Some(wire) = &order.kind {
        match OrderKind::try_from(wire) {
            Ok(kind) => assert_eq!(&proto::OrderKind::from(kind), wire, "an order kind does not convert back"),
            Err(error) => assert_eq!(error, ConvertError::FieldMissing { field: "OrderKind.kind" }),
        }
    }
}

/// An enum read from `value`: one that is its wire number again, or the error that
/// says why not (zero is unspecified, anything else unknown).
fn check_enum<T>(value: i32, read: Result<T, ConvertError>, wire: impl Fn(T) -> i32) {
    match read {
        Ok(engine) => assert_eq!(wire(engine), value, "enum value {value} does not convert back"),
        Err(ConvertError::EnumUnspecified { .. }) => assert_eq!(value, 0),
        Err(ConvertError::EnumUnknown { value: shown, .. }) => {
            assert!(value != 0 && shown == i64::from(value), "{value} shown as {shown}");
        }
        Err(error) => panic!("enum value {value}: {error:?}"),
    }
}
