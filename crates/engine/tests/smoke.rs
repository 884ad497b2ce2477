mod common;

use bourse_engine::book::FastBook;
use bourse_engine::command::{MatchPolicy, OrderRequest, Tif};
use bourse_engine::{Event, Px, Qty, Side};
use common::{market, Harness};

#[test]
fn a_crossing_limit_order_trades_and_settles() {
    let mut h = Harness::<FastBook>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place(OrderRequest::limit(a, m.sym, Side::Sell, Px(100), Qty(10), Tif::Gtc));
    h.place(OrderRequest::limit(b, m.sym, Side::Buy, Px(101), Qty(4), Tif::Gtc));
    assert!(h.events.iter().any(|e| matches!(e, Event::Trade { px: Px(100), qty: Qty(4), .. })), "{:?}", h.events);
    let buyer = h.engine.balance(b, m.usd).unwrap();
    assert_eq!((buyer.available.0, buyer.reserved.0), (1_000_000 - 400, 0));
    assert_eq!(h.engine.balance(b, m.acme).unwrap().available.0, 10_004);
    assert_eq!(h.engine.balance(a, m.acme).unwrap().reserved.0, 6);
}
