//! Engine to wire to engine: every command variant and option survives the trip through
//! protobuf bytes unchanged, and every outcome survives the trip through an `Ack`.

use std::collections::BTreeSet;

use bourse_engine::command::{
    Command, CommandBody, FairnessSetting, MarginSpec, MarginSymbol, MarkSource, MatchPolicy, OrderKind, OrderRequest,
    Stp, SymbolSpec, Tif,
};
use bourse_engine::{AccountId, Amount, AssetId, ClientId, OrderId, Outcome, Px, Qty, Reject, Side, SymbolId};
use bourse_protocol::convert::{self, ConvertError};
use bourse_protocol::proto;
use proptest::prelude::*;

/// The variant's name; the exhaustive match makes a new engine variant fail to compile
/// here until the wire learns it.
fn variant_name(body: &CommandBody) -> &'static str {
    match body {
        CommandBody::CreateAsset { .. } => "create_asset",
        CommandBody::CreateSymbol(_) => "create_symbol",
        CommandBody::CreateAccount => "create_account",
        CommandBody::Deposit { .. } => "deposit",
        CommandBody::Withdraw { .. } => "withdraw",
        CommandBody::Credit { .. } => "credit",
        CommandBody::SuspendAccount { .. } => "suspend_account",
        CommandBody::ResumeAccount { .. } => "resume_account",
        CommandBody::Place(_) => "place",
        CommandBody::Cancel { .. } => "cancel",
        CommandBody::Reduce { .. } => "reduce",
        CommandBody::Move { .. } => "move",
        CommandBody::CreateAccountWithId { .. } => "create_account_with_id",
        CommandBody::CloseDay => "close_day",
        CommandBody::DayTrading(_) => "day_trading",
        CommandBody::SetFairness(_) => "set_fairness",
        CommandBody::CreateMarginSymbol(_) => "create_margin_symbol",
        CommandBody::SetMark { .. } => "set_mark",
    }
}

const VARIANTS_LEN: usize = 18;

/// Day-trading entries: every command kind, with and without a quote of every source,
/// unnumbered and numbered, and a poller's quote.
fn day_trading_all() -> Vec<CommandBody> {
    use bourse_engine::daytrading::{DtCommand, DtKind, DtQuote, DtRequest, QuoteSource, Sym};
    let quote = |source| DtQuote {
        symbol: Sym::parse("ABC").unwrap(),
        price: i64::MAX,
        userid: "oY01WVirLr".into(),
        quote_server_time: u64::MAX,
        cryptokey: "k/+=".into(),
        source,
        transaction_num: 9,
    };
    let mut bodies = Vec::new();
    for (i, kind) in DtKind::ALL.into_iter().enumerate() {
        let sources = [QuoteSource::Market, QuoteSource::Emulator, QuoteSource::LegacyTcp];
        let command = DtCommand {
            kind,
            args: vec!["oY01WVirLr".into(), String::new(), "-1.5".into()][..i % 4].to_vec(),
            transaction_num: i as u64 * 1_000,
            caller: if i % 2 == 0 { String::new() } else { "u".into() },
            admin: i % 3 == 0,
            quote: (i % 4 > 0).then(|| quote(sources[i % 3])),
        };
        bodies.push(CommandBody::DayTrading(Box::new(DtRequest::Command(command))));
    }
    bodies.push(CommandBody::DayTrading(Box::new(DtRequest::Quote(quote(QuoteSource::Emulator)))));
    bodies
}

fn spec(name: &str, policy: MatchPolicy, fee_maker: i64) -> SymbolSpec {
    SymbolSpec {
        name: name.to_owned(),
        base: AssetId(1),
        quote: AssetId(0),
        tick: Px(5),
        lot: Qty(100),
        px_min: Px(5),
        px_max: Px(1_000_000),
        fee_maker: Amount(fee_maker),
        fee_taker: Amount(3),
        policy,
    }
}

fn request(side: Side, kind: OrderKind, tif: Tif, stp: Stp) -> OrderRequest {
    OrderRequest {
        account: AccountId(7),
        symbol: SymbolId(2),
        side,
        kind,
        qty: Qty(300),
        tif,
        post_only: false,
        display_qty: None,
        stp,
    }
}

/// Every variant, every order kind with and without its optional budget, every side,
/// time in force, STP mode and match policy, both flags, and extreme numbers.
fn commands_all() -> Vec<CommandBody> {
    let (account, asset, symbol) = (AccountId(3), AssetId(4), SymbolId(5));
    let mut bodies = vec![
        CommandBody::CreateAsset { name: "USD".into(), decimals: 2 },
        CommandBody::CreateAsset { name: String::new(), decimals: u8::MAX },
        CommandBody::CreateSymbol(Box::new(spec("ACME/USD", MatchPolicy::Fifo, -1))),
        CommandBody::CreateSymbol(Box::new(spec("BETA/USD", MatchPolicy::ProRata, 2))),
        CommandBody::CreateAccount,
        CommandBody::Deposit { account, asset, amount: Amount(1_000_000) },
        CommandBody::Deposit { account: AccountId(u32::MAX), asset: AssetId(u32::MAX), amount: Amount(i64::MAX) },
        CommandBody::Withdraw { account, asset, amount: Amount(-5) },
        CommandBody::Credit { account, asset, amount: Amount(i64::MIN) },
        CommandBody::SuspendAccount { account },
        CommandBody::ResumeAccount { account },
        CommandBody::Cancel { account, symbol, order: OrderId(u64::MAX) },
        CommandBody::Reduce { account, symbol, order: OrderId(1), qty_by: Qty(200) },
        CommandBody::Move { account, symbol, order: OrderId(2), px: Px(10_050) },
        CommandBody::CreateAccountWithId { external_id: u64::MAX, asset, deposit: Amount(0) },
        CommandBody::CreateAccountWithId { external_id: 0, asset: AssetId(u32::MAX), deposit: Amount(i64::MIN) },
        CommandBody::CloseDay,
        CommandBody::SetFairness(FairnessSetting { hold_ns: 3_000_000, window_ns: 0 }),
        CommandBody::SetFairness(FairnessSetting { hold_ns: u64::MAX, window_ns: u64::MAX }),
        CommandBody::SetMark { symbol, px: Px(i64::MIN) },
    ];
    for (mark, insurance) in [(MarkSource::Operator, AccountId(0)), (MarkSource::LastTrade, AccountId(u32::MAX))] {
        let margin = MarginSpec {
            initial_bp: 1_000,
            maintenance_bp: u32::MAX,
            multiplier: i64::MIN,
            position_limit: Qty(i64::MAX),
            mark,
            insurance,
        };
        let spec = spec("FUT/USD", MatchPolicy::ProRata, 0);
        bodies.push(CommandBody::CreateMarginSymbol(Box::new(MarginSymbol { spec, margin })));
    }
    let kinds = [
        OrderKind::Limit { px: Px(10_050) },
        OrderKind::Market { budget: None },
        OrderKind::Market { budget: Some(Amount(5_000_000)) },
        OrderKind::StopLimit { trigger: Px(9_900), px: Px(9_850) },
        OrderKind::StopMarket { trigger: Px(10_500), budget: None },
        OrderKind::StopMarket { trigger: Px(10_500), budget: Some(Amount(0)) },
    ];
    for side in [Side::Buy, Side::Sell] {
        for kind in kinds {
            for tif in [Tif::Gtc, Tif::Ioc, Tif::Fok, Tif::Day] {
                for stp in [Stp::CancelResting, Stp::CancelIncoming, Stp::Allow] {
                    bodies.push(CommandBody::Place(request(side, kind, tif, stp)));
                }
            }
        }
    }
    let mut flagged = request(Side::Buy, OrderKind::Limit { px: Px(-10) }, Tif::Gtc, Stp::Allow);
    flagged.post_only = true;
    flagged.display_qty = Some(Qty(100));
    bodies.push(CommandBody::Place(flagged));
    flagged.display_qty = Some(Qty(0));
    flagged.qty = Qty(i64::MIN);
    bodies.push(CommandBody::Place(flagged));
    bodies.extend(day_trading_all());
    bodies
}

/// Engine command to `ClientCommand` bytes and back, and to `SubmitRequest` bytes and
/// back.
fn assert_round_trips(command: &Command) {
    use prost::Message;

    let wire = proto::ClientCommand::from(command);
    let decoded = proto::ClientCommand::decode(wire.encode_to_vec().as_slice()).expect("decodes");
    assert_eq!(decoded, wire);
    assert_eq!(convert::command_from_proto(command.client, command.ts, &decoded).as_ref(), Ok(command));

    let submit = proto::SubmitRequest::from(command);
    let decoded = proto::SubmitRequest::decode(submit.encode_to_vec().as_slice()).expect("decodes");
    assert_eq!(convert::command_from_submit(command.ts, &decoded).as_ref(), Ok(command));
}

#[test]
fn every_command_variant_round_trips() {
    let bodies = commands_all();
    let names: BTreeSet<_> = bodies.iter().map(variant_name).collect();
    assert_eq!(names.len(), VARIANTS_LEN, "the list covers every variant: {names:?}");
    for (i, body) in bodies.into_iter().enumerate() {
        let command = Command { client: ClientId(u64::MAX - i as u64), seq: i as u64 + 1, ts: 1_700_000_000, body };
        assert_round_trips(&command);
    }
}

#[test]
fn every_outcome_round_trips_through_an_ack() {
    use prost::Message;

    let mut outcomes: Vec<Outcome> = Reject::ALL.iter().map(|&reject| Outcome::Rejected(reject)).collect();
    outcomes.extend([Outcome::Ok { id: 0 }, Outcome::Ok { id: u64::MAX }]);
    for (i, outcome) in outcomes.into_iter().enumerate() {
        for duplicate in [false, true] {
            let applied = bourse_engine::Applied { outcome, duplicate };
            let ack = convert::ack(i as u64, 40 + i as u64, &applied);
            let ack = proto::Ack::decode(ack.encode_to_vec().as_slice()).expect("decodes");
            assert_eq!((ack.seq, ack.log_index, ack.duplicate), (i as u64, 40 + i as u64, duplicate));
            assert_eq!(convert::outcome_from_ack(&ack), Ok(outcome));
        }
    }
}

/// Every value of the enums that grew with Day orders goes to the wire and back, under
/// its stable number (new values were added, none renumbered).
#[test]
fn every_tif_cancel_reason_and_order_status_round_trips_under_its_number() {
    use bourse_engine::{CancelReason, OrderStatus};
    let tifs = [(Tif::Gtc, 1), (Tif::Ioc, 2), (Tif::Fok, 3), (Tif::Day, 4)];
    for (tif, number) in tifs {
        assert_eq!(proto::Tif::from(tif) as i32, number, "{tif:?}");
        assert_eq!(convert::tif_from_proto(number, "OrderRequest.tif"), Ok(tif));
    }
    let reasons = [
        (CancelReason::Requested, 1),
        (CancelReason::Unfilled, 2),
        (CancelReason::BudgetExhausted, 3),
        (CancelReason::SelfTrade, 4),
        (CancelReason::ReducedToZero, 5),
        (CancelReason::Expired, 6),
        (CancelReason::Liquidation, 7),
    ];
    for (reason, number) in reasons {
        assert_eq!(proto::CancelReason::from(reason) as i32, number, "{reason:?}");
        assert_eq!(convert::cancel_reason_from_proto(number, "CancelReport.reason"), Ok(reason));
    }
    let statuses = [
        (OrderStatus::Pending, 1),
        (OrderStatus::Open, 2),
        (OrderStatus::Filled, 3),
        (OrderStatus::Cancelled, 4),
        (OrderStatus::Expired, 5),
    ];
    for (status, number) in statuses {
        assert_eq!(proto::OrderStatus::from(status) as i32, number, "{status:?}");
        assert_eq!(convert::order_status_from_proto(number, "OrderInfo.status"), Ok(status));
    }
    // One past the last value of each is unknown, not a default.
    assert_eq!(convert::tif_from_proto(5, "t"), Err(ConvertError::EnumUnknown { field: "t", value: 5 }));
    assert_eq!(convert::cancel_reason_from_proto(8, "r"), Err(ConvertError::EnumUnknown { field: "r", value: 8 }));
    assert_eq!(convert::order_status_from_proto(6, "s"), Err(ConvertError::EnumUnknown { field: "s", value: 6 }));
    // CloseDay is the oneof's field 15.
    let body = proto::client_command::Body::from(&CommandBody::CloseDay);
    let command = proto::ClientCommand { seq: 1, body: Some(body) };
    assert_eq!(prost::Message::encode_to_vec(&command), vec![0x08, 0x01, 0x7a, 0x00]);
}

#[test]
fn reject_info_carries_the_stable_code_and_name() {
    let info = proto::RejectInfo::from(Reject::BalanceInsufficient);
    assert_eq!((info.code, info.name.as_str(), info.detail.as_str()), (13, "balance_insufficient", ""));
}

#[test]
fn a_node_refusal_is_not_an_engine_outcome() {
    let error = ConvertError::FieldMissing { field: "ClientCommand.body" };
    let ack = convert::ack_refused(9, &error);
    assert_eq!((ack.seq, ack.log_index, ack.duplicate), (9, 0, false));
    let Some(proto::ack::Outcome::Rejected(info)) = &ack.outcome else { panic!("a refusal is a rejection: {ack:?}") };
    assert_eq!((info.code, info.name.as_str(), info.detail.as_str()), (1000, "field_missing", "ClientCommand.body"));
    assert_eq!(
        convert::outcome_from_ack(&ack),
        Err(ConvertError::EnumUnknown { field: "RejectInfo.code", value: 1000 })
    );
    assert_eq!(
        convert::outcome_from_ack(&proto::Ack::default()),
        Err(ConvertError::FieldMissing { field: "Ack.outcome" })
    );
}

// -----------------------------------------------------------------------------------
// Property: arbitrary commands round-trip.
// -----------------------------------------------------------------------------------

fn arb_side() -> impl Strategy<Value = Side> {
    prop_oneof![Just(Side::Buy), Just(Side::Sell)]
}

fn arb_kind() -> impl Strategy<Value = OrderKind> {
    let px = any::<i64>().prop_map(Px);
    let budget = proptest::option::of(any::<i64>().prop_map(Amount));
    prop_oneof![
        px.clone().prop_map(|px| OrderKind::Limit { px }),
        budget.clone().prop_map(|budget| OrderKind::Market { budget }),
        (px.clone(), px.clone()).prop_map(|(trigger, px)| OrderKind::StopLimit { trigger, px }),
        (px, budget).prop_map(|(trigger, budget)| OrderKind::StopMarket { trigger, budget }),
    ]
}

fn arb_request() -> impl Strategy<Value = OrderRequest> {
    let tif = prop_oneof![Just(Tif::Gtc), Just(Tif::Ioc), Just(Tif::Fok), Just(Tif::Day)];
    let stp = prop_oneof![Just(Stp::CancelResting), Just(Stp::CancelIncoming), Just(Stp::Allow)];
    (
        (any::<u32>(), any::<u32>(), arb_side(), arb_kind()),
        (any::<i64>(), tif, any::<bool>(), proptest::option::of(any::<i64>()), stp),
    )
        .prop_map(|((account, symbol, side, kind), (qty, tif, post_only, display_qty, stp))| OrderRequest {
            account: AccountId(account),
            symbol: SymbolId(symbol),
            side,
            kind,
            qty: Qty(qty),
            tif,
            post_only,
            display_qty: display_qty.map(Qty),
            stp,
        })
}

fn arb_spec() -> impl Strategy<Value = SymbolSpec> {
    let policy = prop_oneof![Just(MatchPolicy::Fifo), Just(MatchPolicy::ProRata)];
    (any::<String>(), any::<u32>(), any::<u32>(), any::<[i64; 6]>(), policy).prop_map(
        |(name, base, quote, [tick, lot, px_min, px_max, fee_maker, fee_taker], policy)| SymbolSpec {
            name,
            base: AssetId(base),
            quote: AssetId(quote),
            tick: Px(tick),
            lot: Qty(lot),
            px_min: Px(px_min),
            px_max: Px(px_max),
            fee_maker: Amount(fee_maker),
            fee_taker: Amount(fee_taker),
            policy,
        },
    )
}

fn arb_body() -> impl Strategy<Value = CommandBody> {
    let account = any::<u32>().prop_map(AccountId);
    let change = (any::<u32>(), any::<u32>(), any::<i64>())
        .prop_map(|(account, asset, amount)| (AccountId(account), AssetId(asset), Amount(amount)));
    let target = (any::<u32>(), any::<u32>(), any::<u64>())
        .prop_map(|(account, symbol, order)| (AccountId(account), SymbolId(symbol), OrderId(order)));
    prop_oneof![
        (any::<String>(), any::<u8>()).prop_map(|(name, decimals)| CommandBody::CreateAsset { name, decimals }),
        arb_spec().prop_map(|spec| CommandBody::CreateSymbol(Box::new(spec))),
        Just(CommandBody::CreateAccount),
        change.clone().prop_map(|(account, asset, amount)| CommandBody::Deposit { account, asset, amount }),
        change.clone().prop_map(|(account, asset, amount)| CommandBody::Withdraw { account, asset, amount }),
        change.prop_map(|(account, asset, amount)| CommandBody::Credit { account, asset, amount }),
        account.clone().prop_map(|account| CommandBody::SuspendAccount { account }),
        account.prop_map(|account| CommandBody::ResumeAccount { account }),
        arb_request().prop_map(CommandBody::Place),
        target.clone().prop_map(|(account, symbol, order)| CommandBody::Cancel { account, symbol, order }),
        (target.clone(), any::<i64>()).prop_map(|((account, symbol, order), qty_by)| CommandBody::Reduce {
            account,
            symbol,
            order,
            qty_by: Qty(qty_by)
        }),
        (target, any::<i64>()).prop_map(|((account, symbol, order), px)| CommandBody::Move {
            account,
            symbol,
            order,
            px: Px(px)
        }),
        (any::<u64>(), any::<u32>(), any::<i64>()).prop_map(|(external_id, asset, deposit)| {
            CommandBody::CreateAccountWithId { external_id, asset: AssetId(asset), deposit: Amount(deposit) }
        }),
        Just(CommandBody::CloseDay),
        (any::<u64>(), any::<u64>())
            .prop_map(|(hold_ns, window_ns)| CommandBody::SetFairness(FairnessSetting { hold_ns, window_ns })),
    ]
}

proptest! {
    #[test]
    fn prop_command_round_trips(client in any::<u64>(), seq in any::<u64>(), ts in any::<u64>(), body in arb_body()) {
        assert_round_trips(&Command { client: ClientId(client), seq, ts, body });
    }
}
