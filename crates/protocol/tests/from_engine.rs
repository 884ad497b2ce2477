//! Events and query results of a real engine, turned into wire messages: fills (both
//! sides of a trade), cancellations, market data and every query reply.

use bourse_engine::command::{Command, CommandBody, MatchPolicy, OrderRequest, Stp, SymbolSpec, Tif};
use bourse_engine::{
    AccountId, Amount, Applied, AssetId, CancelReason, ClientId, Engine, Event, OrderId, Outcome, Px, Qty, Side,
    SymbolId,
};
use bourse_protocol::convert::{self, LogPosition};
use bourse_protocol::proto;

const USD: AssetId = AssetId(0);
const ACME: AssetId = AssetId(1);
const SYMBOL: SymbolId = SymbolId(0);
const SELLER: AccountId = AccountId(0);
const BUYER: AccountId = AccountId(1);

/// A tiny market: ACME/USD, a seller with shares, a buyer with dollars.
struct Market {
    engine: Engine,
    seq: u64,
}

impl Market {
    fn new() -> Self {
        let mut market = Market { engine: Engine::default(), seq: 0 };
        market.apply_ok(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 });
        market.apply_ok(CommandBody::CreateAsset { name: "ACME".into(), decimals: 0 });
        market.apply_ok(CommandBody::CreateSymbol(Box::new(SymbolSpec {
            name: "ACME/USD".into(),
            base: ACME,
            quote: USD,
            tick: Px(1),
            lot: Qty(1),
            px_min: Px(1),
            px_max: Px(1_000_000),
            fee_maker: Amount(0),
            fee_taker: Amount(1),
            policy: MatchPolicy::Fifo,
        })));
        market.apply_ok(CommandBody::CreateAccount);
        market.apply_ok(CommandBody::CreateAccount);
        market.apply_ok(CommandBody::Credit { account: SELLER, asset: ACME, amount: Amount(100) });
        market.apply_ok(CommandBody::Deposit { account: BUYER, asset: USD, amount: Amount(1_000_000) });
        market
    }

    /// Applies one command; the log index is the sequence number here.
    fn apply(&mut self, body: CommandBody) -> (Applied, Vec<Event>) {
        self.seq += 1;
        let command = Command { client: ClientId(1), seq: self.seq, ts: 1_000 + self.seq, body };
        let mut events = Vec::new();
        let applied = self.engine.apply(&command, &mut events);
        (applied, events)
    }

    fn apply_ok(&mut self, body: CommandBody) -> (u64, Vec<Event>) {
        let (applied, events) = self.apply(body);
        let Outcome::Ok { id } = applied.outcome else { panic!("refused: {applied:?}") };
        (id, events)
    }
}

fn limit(account: AccountId, side: Side, px: i64, qty: i64, tif: Tif) -> CommandBody {
    CommandBody::Place(OrderRequest::limit(account, SYMBOL, side, Px(px), Qty(qty), tif))
}

#[test]
fn a_trade_makes_one_report_per_side() {
    let mut market = Market::new();
    let (sell, _) = market.apply_ok(limit(SELLER, Side::Sell, 10_050, 10, Tif::Gtc));
    let (buy, events) = market.apply_ok(limit(BUYER, Side::Buy, 10_100, 4, Tif::Ioc));
    let at = LogPosition { log_index: market.seq, ts: 1_000 + market.seq };

    let trades: Vec<&Event> = events.iter().filter(|e| matches!(e, Event::Trade { .. })).collect();
    assert_eq!(trades.len(), 1);
    let [maker, taker] = convert::fill_reports(trades[0], at, 0).expect("a trade");
    let expected =
        |order: u64, account: AccountId, side: Side, fee: i64, maker: bool, counter: u64| proto::FillReport {
            order,
            account: account.0,
            symbol: SYMBOL.0,
            side: proto::Side::from(side) as i32,
            px: 10_050,
            qty: 4,
            fee,
            maker,
            counter_order: counter,
            log_index: at.log_index,
            trade_seq: 0,
            ts: at.ts,
        };
    assert_eq!(maker, expected(sell, SELLER, Side::Sell, 0, true, buy));
    assert_eq!(taker, expected(buy, BUYER, Side::Buy, 4, false, sell));

    let update = convert::trade_update(trades[0], at.log_index, 0).expect("a trade");
    assert_eq!((update.symbol, update.px, update.qty, update.taker_side), (0, 10_050, 4, proto::Side::Buy as i32));
    assert_eq!((update.log_index, update.trade_seq), (at.log_index, 0));

    for event in events.iter().filter(|e| !matches!(e, Event::Trade { .. })) {
        assert_eq!(convert::fill_reports(event, at, 0), None);
        assert_eq!(convert::trade_update(event, at.log_index, 0), None);
    }
}

#[test]
fn a_cancellation_is_reported_with_its_reason() {
    let mut market = Market::new();
    let (sell, _) = market.apply_ok(limit(SELLER, Side::Sell, 10_050, 10, Tif::Gtc));
    let (_, events) = market.apply_ok(CommandBody::Cancel { account: SELLER, symbol: SYMBOL, order: OrderId(sell) });
    let at = LogPosition { log_index: market.seq, ts: 7 };
    let reports: Vec<_> = events.iter().filter_map(|e| convert::cancel_report(e, SELLER, SYMBOL, at)).collect();
    assert_eq!(
        reports,
        [proto::CancelReport {
            order: sell,
            account: SELLER.0,
            symbol: SYMBOL.0,
            qty_cancelled: 10,
            reason: proto::CancelReason::Requested as i32,
            log_index: at.log_index,
            ts: 7,
        }]
    );
    assert_eq!(
        convert::cancel_reason_from_proto(reports[0].reason, "CancelReport.reason"),
        Ok(CancelReason::Requested)
    );
}

#[test]
fn an_expiry_is_reported_with_its_reason_and_read_back_as_expired() {
    let mut market = Market::new();
    let (sell, _) = market.apply_ok(limit(SELLER, Side::Sell, 10_050, 10, Tif::Day));
    market.apply_ok(limit(BUYER, Side::Buy, 10_050, 4, Tif::Ioc));
    let (expired, events) = market.apply_ok(CommandBody::CloseDay);
    assert_eq!(expired, 1);
    let at = LogPosition { log_index: market.seq, ts: 1_000 + market.seq };
    let reports: Vec<_> = events.iter().filter_map(|e| convert::cancel_report(e, SELLER, SYMBOL, at)).collect();
    assert_eq!(
        reports,
        [proto::CancelReport {
            order: sell,
            account: SELLER.0,
            symbol: SYMBOL.0,
            qty_cancelled: 6,
            reason: proto::CancelReason::Expired as i32,
            log_index: at.log_index,
            ts: at.ts,
        }]
    );
    let info = convert::order_reply(market.seq, &market.engine.order(OrderId(sell)).expect("known")).order.unwrap();
    assert_eq!((info.tif, info.status), (proto::Tif::Day as i32, proto::OrderStatus::Expired as i32));
    assert_eq!((info.qty_filled, info.qty_open, info.qty_cancelled, info.ts_closed), (4, 0, 6, at.ts));
}

#[test]
fn query_replies_mirror_the_engine() {
    let mut market = Market::new();
    let (sell, _) = market.apply_ok(limit(SELLER, Side::Sell, 10_050, 10, Tif::Gtc));
    market.apply_ok(limit(BUYER, Side::Buy, 10_050, 4, Tif::Ioc));
    let (bid, _) = market.apply_ok(limit(BUYER, Side::Buy, 9_000, 3, Tif::Gtc));
    let mut iceberg = OrderRequest::limit(SELLER, SYMBOL, Side::Sell, Px(11_000), Qty(20), Tif::Gtc);
    iceberg.display_qty = Some(Qty(5));
    iceberg.stp = Stp::Allow;
    market.apply_ok(CommandBody::Place(iceberg));
    let engine = &market.engine;
    let log_index = market.seq;

    let view = engine.order(OrderId(sell)).expect("known");
    let reply = convert::order_reply(log_index, &view);
    let info = reply.order.expect("present");
    assert_eq!(reply.log_index, log_index);
    assert_eq!((info.id, info.account, info.symbol), (sell, SELLER.0, SYMBOL.0));
    assert_eq!((info.side, info.tif), (proto::Side::Sell as i32, proto::Tif::Gtc as i32));
    assert_eq!((info.qty, info.qty_filled, info.qty_open, info.qty_visible), (10, 4, 6, 6));
    assert_eq!((info.status, info.px_resting), (proto::OrderStatus::Open as i32, Some(10_050)));
    assert_eq!(info.kind, Some(proto::OrderKind::from(view.record.kind)));
    assert_eq!(info.fills.len(), 1);
    assert_eq!((info.fills[0].px, info.fills[0].qty, info.fills[0].maker), (10_050, 4, true));

    let open = convert::open_orders_reply(log_index, &engine.open_orders(SELLER));
    let ids: Vec<u64> = open.orders.iter().map(|o| o.id).collect();
    assert_eq!(ids, [sell, bid + 1]);
    assert_eq!((open.orders[1].qty_open, open.orders[1].qty_visible), (20, 5));

    let balances = engine.balances(BUYER).expect("known");
    let reply = convert::balances_reply(log_index, balances);
    assert_eq!(reply.balances.len(), balances.len());
    for (wire, (asset, balance)) in reply.balances.iter().zip(balances) {
        assert_eq!((wire.asset, wire.available, wire.reserved), (asset.0, balance.available.0, balance.reserved.0));
    }

    let depth = engine.depth(SYMBOL, 10).expect("known");
    let reply = convert::depth_reply(log_index, SYMBOL, &depth, engine.last_px(SYMBOL));
    let levels = |levels: &[proto::Level]| levels.iter().map(|l| (l.px, l.qty)).collect::<Vec<_>>();
    assert_eq!(levels(&reply.bids), [(9_000, 3)]);
    assert_eq!(levels(&reply.asks), [(10_050, 6), (11_000, 5)]);
    assert_eq!(reply.last_px, Some(10_050));

    let bbo = convert::bbo_update(SYMBOL, &engine.depth(SYMBOL, 1).expect("known"), log_index);
    assert_eq!((bbo.bid_px, bbo.bid_qty, bbo.ask_px, bbo.ask_qty), (Some(9_000), 3, Some(10_050), 6));
    let empty = convert::bbo_update(SYMBOL, &bourse_engine::Depth { bids: vec![], asks: vec![] }, log_index);
    assert_eq!((empty.bid_px, empty.bid_qty, empty.ask_px, empty.ask_qty), (None, 0, None, 0));

    let symbols =
        (0..engine.symbols_len() as u32).filter_map(|i| Some((SymbolId(i), engine.symbol_spec(SymbolId(i))?)));
    let reply = convert::symbols_reply(log_index, symbols);
    assert_eq!(reply.symbols.len(), 1);
    let spec = reply.symbols[0].spec.as_ref().expect("present");
    assert_eq!(SymbolSpec::try_from(spec).as_ref(), Ok(engine.symbol_spec(SYMBOL).expect("known")));

    let assets = (0..engine.assets_len() as u32).filter_map(|i| Some((AssetId(i), engine.asset_info(AssetId(i))?)));
    let reply = convert::assets_reply(log_index, assets);
    let assets: Vec<_> = reply.assets.iter().map(|a| (a.id, a.name.as_str(), a.decimals, a.supply)).collect();
    assert_eq!(assets, [(0, "USD", 2, 1_000_000), (1, "ACME", 0, 100)]);
    assert_eq!(reply.assets[0].fees_collected, 4);
}
