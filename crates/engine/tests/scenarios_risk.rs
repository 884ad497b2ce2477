//! Scenarios for refused commands: each names the rule it breaks with its exact
//! `Reject` variant and must change nothing a client can observe (balances, books,
//! orders, assets, symbols). Run against both books.
//!
//! Every account starts with 1,000,000 USD cents and 10,000 ACME.

#[macro_use]
mod common;

use bourse_engine::book::Book;
use bourse_engine::command::{CommandBody, MatchPolicy, OrderRequest, SymbolSpec, Tif};
use bourse_engine::{AccountId, Amount, AssetId, EngineConfig, Event, OrderId, Px, Qty, Reject, Side, SymbolId};
use common::{market, market_with, Harness, MarketOptions, OrderRequestExt, ACME_START, USD_START};

both_books!(
    unknown_account_is_rejected,
    unknown_symbol_is_rejected,
    unknown_asset_is_rejected,
    unknown_order_is_rejected,
    order_in_another_symbol_is_unknown_there,
    order_of_another_account_is_not_owned,
    price_must_be_a_multiple_of_tick,
    price_must_be_within_bounds,
    qty_must_be_positive,
    qty_must_be_a_multiple_of_lot,
    amounts_must_be_positive,
    overflowing_notional_is_rejected,
    moving_to_an_overflowing_hold_is_rejected,
    deposit_beyond_the_largest_supply_is_rejected,
    insufficient_balance_is_rejected,
    withdraw_takes_only_what_is_available,
    suspended_account_cannot_place_move_or_withdraw,
    suspended_account_can_still_cancel_and_reduce,
    symbol_spec_must_be_valid,
    symbol_fees_must_be_valid,
    names_must_be_valid,
    names_must_be_unique,
    open_orders_are_bounded_per_account,
    engine_bounds_on_accounts_assets_and_symbols,
);

/// A spec that [`market`]'s assets accept, to be broken one field at a time.
fn spec(name: &str) -> SymbolSpec {
    SymbolSpec {
        name: name.into(),
        base: AssetId(1),
        quote: AssetId(0),
        tick: Px(5),
        lot: Qty(10),
        px_min: Px(10),
        px_max: Px(1_000),
        fee_maker: Amount(0),
        fee_taker: Amount(0),
        policy: MatchPolicy::Fifo,
    }
}

fn create_symbol(spec: SymbolSpec) -> CommandBody {
    CommandBody::CreateSymbol(Box::new(spec))
}

fn unknown_account_is_rejected<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let nobody = AccountId(99);
    let id = h.place_ok(m.sell(a, 100, 1));
    h.reject(CommandBody::Place(m.buy(nobody, 100, 1)), Reject::AccountUnknown);
    h.reject(CommandBody::Deposit { account: nobody, asset: m.usd, amount: Amount(1) }, Reject::AccountUnknown);
    h.reject(CommandBody::Credit { account: nobody, asset: m.acme, amount: Amount(1) }, Reject::AccountUnknown);
    h.reject(CommandBody::Withdraw { account: nobody, asset: m.usd, amount: Amount(1) }, Reject::AccountUnknown);
    h.reject(m.cancel(nobody, id), Reject::AccountUnknown);
    h.reject(m.reduce(nobody, id, 1), Reject::AccountUnknown);
    h.reject(m.move_to(nobody, id, 101), Reject::AccountUnknown);
    h.reject(CommandBody::SuspendAccount { account: nobody }, Reject::AccountUnknown);
    h.reject(CommandBody::ResumeAccount { account: nobody }, Reject::AccountUnknown);
}

fn unknown_symbol_is_rejected<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let elsewhere = SymbolId(9);
    let id = h.place_ok(m.sell(a, 100, 1));
    let request = OrderRequest::limit(a, elsewhere, Side::Buy, Px(100), Qty(1), Tif::Gtc);
    h.reject(CommandBody::Place(request), Reject::SymbolUnknown);
    h.reject(CommandBody::Cancel { account: a, symbol: elsewhere, order: id }, Reject::SymbolUnknown);
    h.reject(CommandBody::Reduce { account: a, symbol: elsewhere, order: id, qty_by: Qty(1) }, Reject::SymbolUnknown);
    h.reject(CommandBody::Move { account: a, symbol: elsewhere, order: id, px: Px(101) }, Reject::SymbolUnknown);
}

fn unknown_asset_is_rejected<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let nothing = AssetId(9);
    h.reject(CommandBody::Deposit { account: a, asset: nothing, amount: Amount(1) }, Reject::AssetUnknown);
    h.reject(CommandBody::Credit { account: a, asset: nothing, amount: Amount(1) }, Reject::AssetUnknown);
    h.reject(CommandBody::Withdraw { account: a, asset: nothing, amount: Amount(1) }, Reject::AssetUnknown);
    h.reject(create_symbol(SymbolSpec { base: nothing, ..spec("X/USD") }), Reject::AssetUnknown);
    h.reject(create_symbol(SymbolSpec { quote: nothing, ..spec("X/USD") }), Reject::AssetUnknown);
}

fn unknown_order_is_rejected<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    h.place_ok(m.sell(a, 100, 1));
    let never = OrderId(999);
    h.reject(m.cancel(a, never), Reject::OrderUnknown);
    h.reject(m.reduce(a, never, 1), Reject::OrderUnknown);
    h.reject(m.move_to(a, never, 101), Reject::OrderUnknown);
}

fn order_in_another_symbol_is_unknown_there<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let beta = AssetId(h.ok(CommandBody::CreateAsset { name: "BETA".into(), decimals: 0 }) as u32);
    let other = SymbolId(h.ok(create_symbol(SymbolSpec { base: beta, ..spec("BETA/USD") })) as u32);
    let id = h.place_ok(m.sell(a, 100, 1));
    let stop = h.place_ok(m.stop_limit(a, Side::Sell, 90, 90, 1));
    for order in [id, stop] {
        h.reject(CommandBody::Cancel { account: a, symbol: other, order }, Reject::OrderUnknown);
        h.reject(CommandBody::Reduce { account: a, symbol: other, order, qty_by: Qty(10) }, Reject::OrderUnknown);
        h.reject(CommandBody::Move { account: a, symbol: other, order, px: Px(100) }, Reject::OrderUnknown);
    }
}

fn order_of_another_account_is_not_owned<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let id = h.place_ok(m.sell(a, 100, 5));
    h.reject(m.cancel(b, id), Reject::OrderNotOwned);
    h.reject(m.reduce(b, id, 1), Reject::OrderNotOwned);
    h.reject(m.move_to(b, id, 101), Reject::OrderNotOwned);
}

fn price_must_be_a_multiple_of_tick<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_with(&mut h, MarketOptions { tick: 5, px_min: 5, accounts: 1, ..Default::default() });
    let a = m.accounts[0];
    h.reject(CommandBody::Place(m.buy(a, 102, 1)), Reject::PxMustBeMultipleOfTick);
    h.reject(CommandBody::Place(m.sell(a, 1_001, 1)), Reject::PxMustBeMultipleOfTick);
    h.reject(CommandBody::Place(m.buy(a, -3, 1)), Reject::PxMustBeMultipleOfTick);
    h.place_ok(m.buy(a, 105, 1));
}

fn price_must_be_within_bounds<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_with(&mut h, MarketOptions { tick: 5, px_min: 50, accounts: 1, ..Default::default() });
    let a = m.accounts[0];
    for px in [45, 0, -5, 1_000_005, i64::MAX - i64::MAX % 5] {
        h.reject(CommandBody::Place(m.sell(a, px, 1)), Reject::PxOutOfBounds);
    }
    h.place_ok(m.sell(a, 50, 1));
    h.place_ok(m.sell(a, 1_000_000, 1));
}

fn qty_must_be_positive<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    h.reject(CommandBody::Place(m.buy(a, 100, 0)), Reject::QtyMustBePositive);
    h.reject(CommandBody::Place(m.sell(a, 100, -1)), Reject::QtyMustBePositive);
    h.reject(CommandBody::Place(m.market_buy(a, 0, 100)), Reject::QtyMustBePositive);
    h.reject(CommandBody::Place(m.sell(a, 100, i64::MIN)), Reject::QtyMustBePositive);
}

fn qty_must_be_a_multiple_of_lot<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_with(&mut h, MarketOptions { lot: 10, accounts: 1, ..Default::default() });
    let a = m.accounts[0];
    h.reject(CommandBody::Place(m.buy(a, 100, 15)), Reject::QtyMustBeMultipleOfLot);
    h.reject(CommandBody::Place(m.sell(a, 100, 1)), Reject::QtyMustBeMultipleOfLot);
    h.reject(CommandBody::Place(m.market_sell(a, 25)), Reject::QtyMustBeMultipleOfLot);
    h.place_ok(m.sell(a, 100, 30));
}

fn amounts_must_be_positive<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    for amount in [0, -1] {
        h.reject(
            CommandBody::Deposit { account: a, asset: m.usd, amount: Amount(amount) },
            Reject::AmountMustBePositive,
        );
        h.reject(
            CommandBody::Credit { account: a, asset: m.acme, amount: Amount(amount) },
            Reject::AmountMustBePositive,
        );
        h.reject(
            CommandBody::Withdraw { account: a, asset: m.usd, amount: Amount(amount) },
            Reject::AmountMustBePositive,
        );
        h.reject(CommandBody::Place(m.market_buy(a, 1, amount)), Reject::AmountMustBePositive);
    }
}

fn overflowing_notional_is_rejected<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    h.reject(CommandBody::Place(m.buy(a, 1_000_000, i64::MAX / 2)), Reject::AmountOverflow);
    h.reject(CommandBody::Place(m.buy(a, 2, i64::MAX / 2 + 1)), Reject::AmountOverflow);
}

fn moving_to_an_overflowing_hold_is_rejected<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let qty = 5_000_000_000_000_000_000;
    h.ok(CommandBody::Deposit { account: a, asset: m.usd, amount: Amount(qty) });
    let id = h.place_ok(m.buy(a, 1, qty));
    h.reject(m.move_to(a, id, 2), Reject::AmountOverflow);
}

fn deposit_beyond_the_largest_supply_is_rejected<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let room = i64::MAX - 2 * USD_START;
    h.reject(CommandBody::Deposit { account: a, asset: m.usd, amount: Amount(room + 1) }, Reject::AmountOverflow);
    h.reject(CommandBody::Deposit { account: b, asset: m.usd, amount: Amount(i64::MAX) }, Reject::AmountOverflow);
    h.ok(CommandBody::Deposit { account: a, asset: m.usd, amount: Amount(room) });
    h.reject(CommandBody::Credit { account: b, asset: m.usd, amount: Amount(1) }, Reject::AmountOverflow);
    assert_eq!(h.engine.asset_info(m.usd).unwrap().supply.0, i64::MAX);
}

fn insufficient_balance_is_rejected<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 100, 10));
    let place = CommandBody::Place;
    h.reject(place(m.buy(b, 100_001, 10)), Reject::BalanceInsufficient);
    h.reject(place(m.sell(b, 100, ACME_START + 1)), Reject::BalanceInsufficient);
    h.reject(place(m.market_buy(b, 10, USD_START + 1)), Reject::BalanceInsufficient);
    h.reject(place(m.market_sell(b, ACME_START + 1)), Reject::BalanceInsufficient);
    h.reject(place(m.stop_market(b, Side::Buy, 200, 10, Some(USD_START + 1))), Reject::BalanceInsufficient);
    // Reserved funds do not count.
    h.place_ok(m.buy(b, 99, 10_000));
    h.reject(place(m.buy(b, 1, 10_001)), Reject::BalanceInsufficient);
    h.place_ok(m.buy(b, 1, 10_000));
    assert_eq!(h.balance_of(b, m.usd), (0, USD_START));
}

fn withdraw_takes_only_what_is_available<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    h.place_ok(m.buy(a, 50_000, 10));
    let withdraw = |amount: i64| CommandBody::Withdraw { account: a, asset: m.usd, amount: Amount(amount) };
    h.reject(withdraw(500_001), Reject::BalanceInsufficient);
    h.ok(withdraw(500_000));
    assert_eq!(h.events, vec![m.usd_balance(a, 0, 500_000)]);
    assert_eq!(h.engine.asset_info(m.usd).unwrap().supply.0, 500_000);
}

fn suspended_account_cannot_place_move_or_withdraw<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let id = h.place_ok(m.buy(a, 100, 10));
    h.ok(CommandBody::SuspendAccount { account: a });
    assert_eq!(h.events, vec![Event::AccountSuspended { account: a }]);
    h.reject(CommandBody::Place(m.buy(a, 100, 1)), Reject::AccountSuspended);
    h.reject(CommandBody::Place(m.stop_limit(a, Side::Buy, 100, 100, 1)), Reject::AccountSuspended);
    h.reject(m.move_to(a, id, 101), Reject::AccountSuspended);
    h.reject(CommandBody::Withdraw { account: a, asset: m.usd, amount: Amount(1) }, Reject::AccountSuspended);
    h.ok(CommandBody::ResumeAccount { account: a });
    assert_eq!(h.events, vec![Event::AccountResumed { account: a }]);
    h.place_ok(m.buy(a, 100, 1));
    h.ok(m.move_to(a, id, 101));
}

fn suspended_account_can_still_cancel_and_reduce<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let bid = h.place_ok(m.buy(a, 100, 10));
    let ask = h.place_ok(m.sell(a, 110, 10));
    let stop = h.place_ok(m.stop_limit(a, Side::Sell, 90, 90, 5));
    h.ok(CommandBody::SuspendAccount { account: a });
    h.ok(m.reduce(a, bid, 4));
    assert_eq!(h.order_view(bid).qty_open, Qty(6));
    h.ok(m.cancel(a, ask));
    h.ok(m.cancel(a, stop));
    h.ok(m.reduce(a, bid, 6));
    assert!(h.engine.open_orders(a).is_empty());
    assert_eq!(h.balance_of(a, m.usd), (USD_START, 0));
    assert_eq!(h.balance_of(a, m.acme), (ACME_START, 0));
}

fn symbol_spec_must_be_valid<B: Book>() {
    let mut h = Harness::<B>::default();
    market(&mut h, 0, 0, MatchPolicy::Fifo, 0);
    let invalid = [
        SymbolSpec { tick: Px(0), ..spec("X/USD") },
        SymbolSpec { tick: Px(-5), ..spec("X/USD") },
        SymbolSpec { lot: Qty(0), ..spec("X/USD") },
        SymbolSpec { lot: Qty(-10), ..spec("X/USD") },
        SymbolSpec { px_min: Px(0), ..spec("X/USD") },
        SymbolSpec { px_min: Px(-5), ..spec("X/USD") },
        SymbolSpec { px_min: Px(1_005), ..spec("X/USD") },
        SymbolSpec { px_min: Px(12), ..spec("X/USD") },
        SymbolSpec { px_max: Px(1_002), ..spec("X/USD") },
        // One lot at the highest price must be an amount.
        SymbolSpec { px_max: Px(1_000_000_000_000), lot: Qty(100_000_000), ..spec("X/USD") },
    ];
    for spec in invalid {
        h.reject(create_symbol(spec), Reject::SymbolSpecInvalid);
    }
    h.reject(create_symbol(SymbolSpec { base: AssetId(0), ..spec("X/USD") }), Reject::SymbolAssetsMustDiffer);
    assert_eq!(h.ok(create_symbol(SymbolSpec { px_min: Px(1_000), ..spec("X/USD") })), 1);
    assert_eq!(h.events, vec![Event::SymbolCreated { symbol: SymbolId(1) }]);
}

fn symbol_fees_must_be_valid<B: Book>() {
    let mut h = Harness::<B>::default();
    market(&mut h, 0, 0, MatchPolicy::Fifo, 0);
    let fees = |name: &str, fee_maker: i64, fee_taker: i64| SymbolSpec {
        fee_maker: Amount(fee_maker),
        fee_taker: Amount(fee_taker),
        ..spec(name)
    };
    // One lot at the lowest price is worth 10 × 10 = 100.
    let invalid = [(0, -1), (3, 2), (-3, 2), (0, 101), (101, 101), (i64::MIN, 0), (-1, i64::MAX)];
    for (fee_maker, fee_taker) in invalid {
        h.reject(create_symbol(fees("X/USD", fee_maker, fee_taker)), Reject::FeesInvalid);
    }
    for (i, (fee_maker, fee_taker)) in [(-2, 2), (2, 2), (0, 100), (-100, 100)].into_iter().enumerate() {
        h.ok(create_symbol(fees(&format!("X{i}/USD"), fee_maker, fee_taker)));
    }
    assert_eq!(h.engine.symbols_len(), 5);
}

fn names_must_be_valid<B: Book>() {
    let mut h = Harness::<B>::default();
    market(&mut h, 0, 0, MatchPolicy::Fifo, 0);
    for name in ["", "ABCDEFGHIJKLMNOPQ", "US D", "ÜSD", "USD\n", "A,B"] {
        h.reject(CommandBody::CreateAsset { name: name.into(), decimals: 2 }, Reject::NameInvalid);
        if name.len() <= 16 {
            h.reject(create_symbol(spec(name)), Reject::NameInvalid);
        }
    }
    let longest = "ABCDEFGHIJKLMNOP";
    assert_eq!(h.ok(CommandBody::CreateAsset { name: longest.into(), decimals: 2 }), 2);
    assert_eq!(h.events, vec![Event::AssetCreated { asset: AssetId(2) }]);
    h.ok(create_symbol(spec("a.b-c_d/e")));
    assert_eq!(h.engine.asset_by_name(longest), Some(AssetId(2)));
    assert_eq!(h.engine.symbol_by_name("a.b-c_d/e"), Some(SymbolId(1)));
    // A symbol's name has room for BASE/QUOTE with both names at their longest.
    let pair_longest = format!("{longest}/{longest}");
    h.reject(create_symbol(spec(&format!("{pair_longest}X"))), Reject::NameInvalid);
    h.ok(create_symbol(spec(&pair_longest)));
    assert_eq!(h.engine.symbol_by_name(&pair_longest), Some(SymbolId(2)));
}

fn names_must_be_unique<B: Book>() {
    let mut h = Harness::<B>::default();
    market(&mut h, 0, 0, MatchPolicy::Fifo, 0);
    h.reject(CommandBody::CreateAsset { name: "USD".into(), decimals: 0 }, Reject::NameTaken);
    h.reject(create_symbol(spec("ACME/USD")), Reject::NameTaken);
    // Names are case sensitive.
    h.ok(CommandBody::CreateAsset { name: "usd".into(), decimals: 2 });
}

fn open_orders_are_bounded_per_account<B: Book>() {
    let mut h = Harness::<B>::with_config(EngineConfig { orders_per_account_max: 2, ..EngineConfig::default() });
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let resting = h.place_ok(m.buy(b, 90, 1));
    h.place_ok(m.stop_limit(b, Side::Buy, 200, 200, 1));
    h.reject(CommandBody::Place(m.buy(b, 90, 1)), Reject::OpenOrdersLimit);
    h.reject(CommandBody::Place(m.stop_limit(b, Side::Sell, 50, 50, 1)), Reject::OpenOrdersLimit);
    // Orders that cannot rest are not counted against the bound.
    h.place_ok(m.sell(a, 100, 5));
    h.place_ok(m.buy(b, 100, 2).with_tif(Tif::Ioc));
    assert_eq!(h.trades().len(), 1);
    h.place_ok(m.market_buy(b, 1, 1_000));
    h.ok(m.cancel(b, resting));
    h.place_ok(m.buy(b, 90, 1));
}

fn engine_bounds_on_accounts_assets_and_symbols<B: Book>() {
    let config = EngineConfig { accounts_max: 1, assets_max: 2, symbols_max: 1, ..EngineConfig::default() };
    let mut h = Harness::<B>::with_config(config);
    market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    h.reject(CommandBody::CreateAccount, Reject::LimitReached);
    h.reject(CommandBody::CreateAsset { name: "BETA".into(), decimals: 0 }, Reject::LimitReached);
    h.reject(create_symbol(spec("USD/ACME")), Reject::LimitReached);
}
