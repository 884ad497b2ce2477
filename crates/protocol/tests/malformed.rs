//! Wire input that is not a valid command: garbage bytes, unknown fields, absent oneofs,
//! unspecified or unknown enum values and numbers too large for the engine. Decoding and
//! converting never panic; structural faults are a `ConvertError` naming the field.

use bourse_engine::command::{CommandBody, OrderKind, OrderRequest, Stp, Tif};
use bourse_engine::{AccountId, ClientId, Px, Qty, Side, SymbolId};
use bourse_protocol::convert::{self, ConvertError};
use bourse_protocol::proto;
use bourse_protocol::proto::client_command::Body;
use proptest::prelude::*;
use prost::Message;

fn place(request: proto::OrderRequest) -> proto::ClientCommand {
    proto::ClientCommand { seq: 1, body: Some(Body::Place(request)) }
}

fn limit_request() -> proto::OrderRequest {
    let request = OrderRequest::limit(AccountId(1), SymbolId(0), Side::Buy, Px(100), Qty(10), Tif::Gtc);
    proto::OrderRequest::from(&request)
}

fn convert_error(command: &proto::ClientCommand) -> ConvertError {
    convert::command_from_proto(ClientId(1), 0, command).expect_err("the command is malformed")
}

#[test]
fn garbage_bytes_are_a_decode_error() {
    // A field with wire type 7, which does not exist; a length prefix past the end; a
    // varint that never ends.
    for bytes in
        [&[0x0f_u8][..], &[0x12, 0x05, 0x01], &[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]]
    {
        assert!(proto::ClientCommand::decode(bytes).is_err(), "{bytes:?}");
        assert!(proto::ClientBatch::decode(bytes).is_err(), "{bytes:?}");
    }
}

#[test]
fn unknown_fields_are_skipped() {
    let command = place(limit_request());
    let mut bytes = command.encode_to_vec();
    // Field 100 as a varint (tag 800 = 0xa0 0x06) and field 101 as 3 bytes of data.
    bytes.extend_from_slice(&[0xa0, 0x06, 0x01, 0xaa, 0x06, 0x03, b'x', b'y', b'z']);
    let decoded = proto::ClientCommand::decode(bytes.as_slice()).expect("unknown fields are skipped");
    assert_eq!(decoded, command);
    assert!(convert::command_from_proto(ClientId(1), 0, &decoded).is_ok());
}

#[test]
fn an_empty_message_decodes_but_has_no_body() {
    let decoded = proto::ClientCommand::decode(&[][..]).expect("every field is optional on the wire");
    assert_eq!(convert_error(&decoded), ConvertError::FieldMissing { field: "ClientCommand.body" });

    let submit = proto::SubmitRequest::decode(&[0x08, 0x07][..]).expect("client id only");
    assert_eq!(
        convert::command_from_submit(0, &submit),
        Err(ConvertError::FieldMissing { field: "SubmitRequest.command" })
    );
}

#[test]
fn missing_order_kinds_are_named() {
    let mut request = limit_request();
    request.kind = None;
    assert_eq!(convert_error(&place(request)), ConvertError::FieldMissing { field: "OrderRequest.kind" });
    request.kind = Some(proto::OrderKind { kind: None });
    assert_eq!(convert_error(&place(request)), ConvertError::FieldMissing { field: "OrderKind.kind" });
}

#[test]
fn unspecified_enums_are_named() {
    type Spoil = fn(&mut proto::OrderRequest);
    let cases: [(Spoil, &str); 3] = [
        (|r| r.side = 0, "OrderRequest.side"),
        (|r| r.tif = 0, "OrderRequest.tif"),
        (|r| r.stp = 0, "OrderRequest.stp"),
    ];
    for (spoil, field) in cases {
        let mut request = limit_request();
        spoil(&mut request);
        assert_eq!(convert_error(&place(request)), ConvertError::EnumUnspecified { field });
    }
    let spec = proto::SymbolSpec { name: "ACME/USD".into(), policy: 0, ..Default::default() };
    let command = proto::ClientCommand { seq: 1, body: Some(Body::CreateSymbol(spec)) };
    assert_eq!(convert_error(&command), ConvertError::EnumUnspecified { field: "SymbolSpec.policy" });
}

#[test]
fn unknown_enum_values_survive_decoding_and_are_refused() {
    let mut request = limit_request();
    request.side = 7;
    request.stp = -1;
    let bytes = place(request).encode_to_vec();
    let decoded = proto::ClientCommand::decode(bytes.as_slice()).expect("proto3 enums are open");
    assert_eq!(convert_error(&decoded), ConvertError::EnumUnknown { field: "OrderRequest.side", value: 7 });
    for (value, expected) in [(0, None), (1, Some(Side::Buy)), (2, Some(Side::Sell)), (3, None), (i32::MIN, None)] {
        assert_eq!(convert::side_from_proto(value, "x").ok(), expected);
    }
    assert_eq!(convert::stp_from_proto(1, "x"), Ok(Stp::CancelResting));
}

#[test]
fn decimals_beyond_a_byte_are_out_of_range() {
    let create = |decimals| proto::ClientCommand {
        seq: 1,
        body: Some(Body::CreateAsset(proto::CreateAsset { name: "USD".into(), decimals })),
    };
    assert_eq!(
        convert_error(&create(256)),
        ConvertError::ValueOutOfRange { field: "CreateAsset.decimals", value: 256 }
    );
    let command = convert::command_from_proto(ClientId(1), 0, &create(255)).expect("fits");
    assert_eq!(command.body, CommandBody::CreateAsset { name: "USD".into(), decimals: 255 });
}

#[test]
fn values_the_engine_judges_pass_through() {
    // Negative quantities and prices are the engine's to refuse, with its own codes.
    let mut request = limit_request();
    request.qty = -5;
    request.kind = Some(proto::OrderKind::from(OrderKind::Limit { px: Px(-1) }));
    let command = convert::command_from_proto(ClientId(1), 0, &place(request)).expect("structurally valid");
    let CommandBody::Place(request) = command.body else { panic!("a place command") };
    assert_eq!((request.qty, request.kind), (Qty(-5), OrderKind::Limit { px: Px(-1) }));
}

#[test]
fn convert_errors_name_their_field_on_the_wire() {
    let errors = [
        (ConvertError::FieldMissing { field: "a.b" }, 1000, "field_missing"),
        (ConvertError::EnumUnspecified { field: "a.b" }, 1001, "enum_unspecified"),
        (ConvertError::EnumUnknown { field: "a.b", value: 9 }, 1002, "enum_unknown"),
        (ConvertError::ValueOutOfRange { field: "a.b", value: 9 }, 1003, "value_out_of_range"),
    ];
    for (error, code, name) in errors {
        let info = proto::RejectInfo::from(&error);
        assert_eq!((info.code, info.name.as_str(), info.detail.as_str()), (code, name, "a.b"));
        assert!(error.to_string().starts_with("a.b "), "{error}");
    }
}

proptest! {
    /// Any bytes: decoding either fails or yields messages whose conversion either fails
    /// or succeeds; nothing panics.
    #[test]
    fn prop_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(batch) = proto::ClientBatch::decode(bytes.as_slice()) {
            for command in &batch.commands {
                let _ = convert::command_from_proto(ClientId(batch.client_id), 0, command);
            }
        }
        if let Ok(command) = proto::ClientCommand::decode(bytes.as_slice()) {
            let _ = convert::command_from_proto(ClientId(0), 0, &command);
        }
        if let Ok(ack) = proto::Ack::decode(bytes.as_slice()) {
            let _ = convert::outcome_from_ack(&ack);
        }
    }

    /// Valid commands with bytes flipped: still no panic.
    #[test]
    fn prop_corrupted_commands_never_panic(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut bytes = place(limit_request()).encode_to_vec();
        for (at, value) in flips {
            let len = bytes.len();
            bytes[at % len] ^= value;
        }
        if let Ok(command) = proto::ClientCommand::decode(bytes.as_slice()) {
            let _ = convert::command_from_proto(ClientId(0), 0, &command);
        }
    }
}
