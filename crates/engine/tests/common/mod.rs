//! Shared set-up for the engine's integration tests.
#![allow(dead_code)]

use bourse_engine::account::Balance;
use bourse_engine::book::Book;
use bourse_engine::command::{Command, CommandBody, MatchPolicy, OrderKind, OrderRequest, Stp, SymbolSpec, Tif};
use bourse_engine::{
    AccountId, Amount, Applied, Asset, AssetId, ClientId, Depth, Engine, EngineConfig, Event, OrderId, OrderView,
    Outcome, Px, Qty, Reject, Side, SymbolId,
};

/// An engine plus a client that numbers its commands, collecting events per command.
pub struct Harness<B: Book> {
    pub engine: Engine<B>,
    pub client: ClientId,
    pub seq: u64,
    pub ts: u64,
    pub events: Vec<Event>,
}

impl<B: Book> Default for Harness<B> {
    fn default() -> Self {
        Harness { engine: Engine::default(), client: ClientId(1), seq: 0, ts: 1_000, events: Vec::new() }
    }
}

impl<B: Book> Harness<B> {
    /// Applies one command as the next of this harness's client; `events` holds only
    /// this command's events afterwards.
    pub fn run(&mut self, body: CommandBody) -> Applied {
        self.seq += 1;
        self.ts += 1;
        self.events.clear();
        let command = Command { client: self.client, seq: self.seq, ts: self.ts, body };
        let applied = self.engine.apply(&command, &mut self.events);
        self.engine.check_invariants();
        applied
    }

    /// Runs a command that must succeed and returns the id it produced.
    pub fn ok(&mut self, body: CommandBody) -> u64 {
        match self.run(body.clone()).outcome {
            bourse_engine::Outcome::Ok { id } => id,
            other => panic!("{body:?} gave {other:?}"),
        }
    }

    pub fn place(&mut self, request: OrderRequest) -> Applied {
        self.run(CommandBody::Place(request))
    }
}

/// Ids created by [`market`].
pub struct Market {
    pub usd: AssetId,
    pub acme: AssetId,
    pub sym: SymbolId,
    pub accounts: Vec<AccountId>,
}

/// USD (cents) and ACME (shares); symbol ACME/USD with tick 1, lot 1, prices 1..=1_000_000,
/// the given fees and policy; `accounts` accounts each with 1,000,000 USD cents and
/// 10,000 ACME.
pub fn market<B: Book>(
    h: &mut Harness<B>,
    fee_maker: i64,
    fee_taker: i64,
    policy: MatchPolicy,
    accounts: usize,
) -> Market {
    let usd = AssetId(h.ok(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 }) as u32);
    let acme = AssetId(h.ok(CommandBody::CreateAsset { name: "ACME".into(), decimals: 0 }) as u32);
    let sym = SymbolId(h.ok(CommandBody::CreateSymbol(Box::new(SymbolSpec {
        name: "ACME/USD".into(),
        base: acme,
        quote: usd,
        tick: Px(1),
        lot: Qty(1),
        px_min: Px(1),
        px_max: Px(1_000_000),
        fee_maker: Amount(fee_maker),
        fee_taker: Amount(fee_taker),
        policy,
    }))) as u32);
    let accounts = (0..accounts)
        .map(|_| {
            let account = AccountId(h.ok(CommandBody::CreateAccount) as u32);
            h.ok(CommandBody::Deposit { account, asset: usd, amount: Amount(1_000_000) });
            h.ok(CommandBody::Credit { account, asset: acme, amount: Amount(10_000) });
            account
        })
        .collect();
    Market { usd, acme, sym, accounts }
}

// ---------------------------------------------------------------------------------
// Additions for the scenario tests. Everything below only reads or drives the public
// API; nothing above changed.
// ---------------------------------------------------------------------------------

/// Runs generic scenario fns `fn name<B: Book>()` once per book: `fast::name` and
/// `reference::name`. A scenario left out of the list is dead code, which clippy
/// refuses, so none can be forgotten.
#[allow(unused_macros)]
macro_rules! both_books {
    ($($name:ident),* $(,)?) => {
        mod fast {
            $(
                #[test]
                fn $name() {
                    super::$name::<bourse_engine::book::FastBook>();
                }
            )*
        }
        mod reference {
            $(
                #[test]
                fn $name() {
                    super::$name::<bourse_engine::book::ReferenceBook>();
                }
            )*
        }
    };
}

/// USD cents each account of [`market`] and [`market_with`] starts with.
pub const USD_START: i64 = 1_000_000;
/// ACME shares each account of [`market`] and [`market_with`] starts with.
pub const ACME_START: i64 = 10_000;

/// Price levels as `(px, qty_visible)`, best first.
pub type Levels = Vec<(i64, i64)>;

/// Everything a client can observe of an engine, except the exactly-once records:
/// a rejected command still records its outcome, so `state_hash` must differ, but
/// nothing here may.
#[derive(Debug, PartialEq)]
pub struct Observable {
    pub next_order_id: OrderId,
    pub assets: Vec<Asset>,
    /// Per symbol: spec, last trade price, full depth.
    pub symbols: Vec<(SymbolSpec, Option<Px>, Depth)>,
    pub balances: Vec<Vec<(AssetId, Balance)>>,
    /// Every order the engine remembers, by id.
    pub orders: Vec<OrderView>,
}

impl<B: Book> Harness<B> {
    /// A harness over an engine with the given bounds.
    pub fn with_config(config: EngineConfig) -> Self {
        Harness { engine: Engine::new(config), ..Harness::default() }
    }

    /// Places an order that must be accepted and returns its id.
    pub fn place_ok(&mut self, request: OrderRequest) -> OrderId {
        OrderId(self.ok(CommandBody::Place(request)))
    }

    /// Applies a command with an explicit `(client, seq)`, leaving this harness's own
    /// sequence alone; `events` holds only this command's events afterwards.
    pub fn apply_as(&mut self, client: ClientId, seq: u64, body: CommandBody) -> Applied {
        self.ts += 1;
        self.events.clear();
        let command = Command { client, seq, ts: self.ts, body };
        let applied = self.engine.apply(&command, &mut self.events);
        self.engine.check_invariants();
        applied
    }

    /// `(available, reserved)` of one balance.
    pub fn balance_of(&self, account: AccountId, asset: AssetId) -> (i64, i64) {
        let balance = self.engine.balance(account, asset).expect("account exists");
        (balance.available.0, balance.reserved.0)
    }

    pub fn observable(&self) -> Observable {
        let e = &self.engine;
        let symbols = (0..e.symbols_len() as u32)
            .map(SymbolId)
            .map(|s| {
                let spec = e.symbol_spec(s).expect("symbol exists").clone();
                (spec, e.last_px(s), e.depth(s, usize::MAX).expect("symbol exists"))
            })
            .collect();
        Observable {
            next_order_id: e.next_order_id(),
            assets: (0..e.assets_len() as u32)
                .map(|a| e.asset_info(AssetId(a)).expect("asset exists").clone())
                .collect(),
            symbols,
            balances: (0..e.accounts_len() as u32)
                .map(|a| e.balances(AccountId(a)).expect("account exists").to_vec())
                .collect(),
            orders: (1..e.next_order_id().0).filter_map(|id| e.order(OrderId(id))).collect(),
        }
    }

    /// Runs a command that must be refused with `reject`: the outcome, the single
    /// `Rejected` event and an unchanged observable state are all checked.
    pub fn reject(&mut self, body: CommandBody, reject: Reject) {
        let before = self.observable();
        let applied = self.run(body.clone());
        assert_eq!(applied, Applied { outcome: Outcome::Rejected(reject), duplicate: false }, "{body:?}");
        assert_eq!(self.events, vec![Event::Rejected { reject }], "{body:?}");
        assert_eq!(self.observable(), before, "rejected {body:?} changed the state");
    }

    /// `(bids, asks)` of a book as `(px, qty_visible)`, best first.
    pub fn depth_of(&self, sym: SymbolId) -> (Levels, Levels) {
        let depth = self.engine.depth(sym, usize::MAX).expect("symbol exists");
        let plain = |levels: Vec<(Px, Qty)>| levels.into_iter().map(|(px, qty)| (px.0, qty.0)).collect();
        (plain(depth.bids), plain(depth.asks))
    }

    /// The last command's trades as `(maker_order, taker_order, px, qty)`.
    pub fn trades(&self) -> Vec<(OrderId, OrderId, i64, i64)> {
        self.events
            .iter()
            .filter_map(|e| match *e {
                Event::Trade { maker_order, taker_order, px, qty, .. } => Some((maker_order, taker_order, px.0, qty.0)),
                _ => None,
            })
            .collect()
    }

    /// The order's view, which must exist.
    pub fn order_view(&self, id: OrderId) -> OrderView {
        self.engine.order(id).unwrap_or_else(|| panic!("order {id} is unknown"))
    }
}

/// Shape of the symbol [`market_with`] creates.
#[derive(Clone, Copy, Debug)]
pub struct MarketOptions {
    pub tick: i64,
    /// Lowest price; with fees it must make one lot worth at least the taker fee.
    pub px_min: i64,
    pub lot: i64,
    pub fee_maker: i64,
    pub fee_taker: i64,
    pub policy: MatchPolicy,
    pub accounts: usize,
}

impl Default for MarketOptions {
    fn default() -> Self {
        MarketOptions { tick: 1, px_min: 1, lot: 1, fee_maker: 0, fee_taker: 0, policy: MatchPolicy::Fifo, accounts: 3 }
    }
}

/// Like [`market`], with any tick, lot and lowest price (prices up to 1,000,000), the
/// same assets, names and starting balances.
pub fn market_with<B: Book>(h: &mut Harness<B>, options: MarketOptions) -> Market {
    let usd = AssetId(h.ok(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 }) as u32);
    let acme = AssetId(h.ok(CommandBody::CreateAsset { name: "ACME".into(), decimals: 0 }) as u32);
    let sym = SymbolId(h.ok(CommandBody::CreateSymbol(Box::new(SymbolSpec {
        name: "ACME/USD".into(),
        base: acme,
        quote: usd,
        tick: Px(options.tick),
        lot: Qty(options.lot),
        px_min: Px(options.px_min),
        px_max: Px(1_000_000),
        fee_maker: Amount(options.fee_maker),
        fee_taker: Amount(options.fee_taker),
        policy: options.policy,
    }))) as u32);
    let accounts = (0..options.accounts)
        .map(|_| {
            let account = AccountId(h.ok(CommandBody::CreateAccount) as u32);
            h.ok(CommandBody::Deposit { account, asset: usd, amount: Amount(USD_START) });
            h.ok(CommandBody::Credit { account, asset: acme, amount: Amount(ACME_START) });
            account
        })
        .collect();
    Market { usd, acme, sym, accounts }
}

/// Builders for orders, commands and expected events of one market.
impl Market {
    /// A GTC limit buy.
    pub fn buy(&self, account: AccountId, px: i64, qty: i64) -> OrderRequest {
        OrderRequest::limit(account, self.sym, Side::Buy, Px(px), Qty(qty), Tif::Gtc)
    }

    /// A GTC limit sell.
    pub fn sell(&self, account: AccountId, px: i64, qty: i64) -> OrderRequest {
        OrderRequest::limit(account, self.sym, Side::Sell, Px(px), Qty(qty), Tif::Gtc)
    }

    /// An IOC market buy spending at most `budget`.
    pub fn market_buy(&self, account: AccountId, qty: i64, budget: i64) -> OrderRequest {
        OrderRequest::market(account, self.sym, Side::Buy, Qty(qty), Some(Amount(budget)))
    }

    /// An IOC market sell.
    pub fn market_sell(&self, account: AccountId, qty: i64) -> OrderRequest {
        OrderRequest::market(account, self.sym, Side::Sell, Qty(qty), None)
    }

    /// A GTC stop-limit order.
    pub fn stop_limit(&self, account: AccountId, side: Side, trigger: i64, px: i64, qty: i64) -> OrderRequest {
        OrderRequest {
            kind: OrderKind::StopLimit { trigger: Px(trigger), px: Px(px) },
            ..OrderRequest::limit(account, self.sym, side, Px(px), Qty(qty), Tif::Gtc)
        }
    }

    /// An IOC stop-market order.
    pub fn stop_market(
        &self,
        account: AccountId,
        side: Side,
        trigger: i64,
        qty: i64,
        budget: Option<i64>,
    ) -> OrderRequest {
        OrderRequest {
            kind: OrderKind::StopMarket { trigger: Px(trigger), budget: budget.map(Amount) },
            ..OrderRequest::market(account, self.sym, side, Qty(qty), None)
        }
    }

    pub fn cancel(&self, account: AccountId, order: OrderId) -> CommandBody {
        CommandBody::Cancel { account, symbol: self.sym, order }
    }

    pub fn reduce(&self, account: AccountId, order: OrderId, qty_by: i64) -> CommandBody {
        CommandBody::Reduce { account, symbol: self.sym, order, qty_by: Qty(qty_by) }
    }

    pub fn move_to(&self, account: AccountId, order: OrderId, px: i64) -> CommandBody {
        CommandBody::Move { account, symbol: self.sym, order, px: Px(px) }
    }

    /// Expected `Balance` event for USD.
    pub fn usd_balance(&self, account: AccountId, available: i64, reserved: i64) -> Event {
        Event::Balance { account, asset: self.usd, available: Amount(available), reserved: Amount(reserved) }
    }

    /// Expected `Balance` event for ACME.
    pub fn acme_balance(&self, account: AccountId, available: i64, reserved: i64) -> Event {
        Event::Balance { account, asset: self.acme, available: Amount(available), reserved: Amount(reserved) }
    }

    /// Expected `Accepted` event of an order request placed at `ts`.
    pub fn accepted(&self, order: OrderId, request: &OrderRequest, ts: u64) -> Event {
        Event::Accepted {
            order,
            account: request.account,
            symbol: request.symbol,
            side: request.side,
            kind: request.kind,
            qty: request.qty,
            ts,
        }
    }

    pub fn rested(&self, order: OrderId, side: Side, px: i64, qty_visible: i64) -> Event {
        Event::Rested { order, symbol: self.sym, side, px: Px(px), qty_visible: Qty(qty_visible) }
    }

    /// Expected `Trade` event: `(px, qty)`, `(order, account)` of maker and taker, and
    /// `(fee_maker, fee_taker)`.
    pub fn trade(
        &self,
        taker_side: Side,
        (px, qty): (i64, i64),
        (maker_order, maker_account): (OrderId, AccountId),
        (taker_order, taker_account): (OrderId, AccountId),
        (fee_maker, fee_taker): (i64, i64),
        maker_done: bool,
    ) -> Event {
        Event::Trade {
            symbol: self.sym,
            px: Px(px),
            qty: Qty(qty),
            taker_side,
            maker_order,
            taker_order,
            maker_account,
            taker_account,
            fee_maker: Amount(fee_maker),
            fee_taker: Amount(fee_taker),
            maker_done,
        }
    }

    /// A trade of `qty` at `px` between `seller` (resting) and `buyer` (incoming), to
    /// set the last price. Returns the two order ids.
    pub fn trade_at<B: Book>(
        &self,
        h: &mut Harness<B>,
        seller: AccountId,
        buyer: AccountId,
        px: i64,
        qty: i64,
    ) -> (OrderId, OrderId) {
        let maker = h.place_ok(self.sell(seller, px, qty));
        let taker = h.place_ok(self.buy(buyer, px, qty));
        assert_eq!(h.trades(), vec![(maker, taker, px, qty)], "set-up trade at {px}");
        (maker, taker)
    }
}

/// Flags on top of the plain request builders.
pub trait OrderRequestExt {
    fn with_tif(self, tif: Tif) -> Self;
    fn with_stp(self, stp: Stp) -> Self;
    fn with_post_only(self) -> Self;
    /// An iceberg showing `display` at a time.
    fn with_display(self, display: i64) -> Self;
}

impl OrderRequestExt for OrderRequest {
    fn with_tif(self, tif: Tif) -> Self {
        OrderRequest { tif, ..self }
    }

    fn with_stp(self, stp: Stp) -> Self {
        OrderRequest { stp, ..self }
    }

    fn with_post_only(self) -> Self {
        OrderRequest { post_only: true, ..self }
    }

    fn with_display(self, display: i64) -> Self {
        OrderRequest { display_qty: Some(Qty(display)), ..self }
    }
}

/// A FIFO market with tick 1, lot 1, prices 10..=1,000,000 and the given fees per lot.
pub fn market_fees<B: Book>(h: &mut Harness<B>, fee_maker: i64, fee_taker: i64, accounts: usize) -> Market {
    market_with(h, MarketOptions { px_min: 10, fee_maker, fee_taker, accounts, ..MarketOptions::default() })
}
