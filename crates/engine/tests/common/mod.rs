//! Shared set-up for the engine's integration tests.
#![allow(dead_code)]

use bourse_engine::book::Book;
use bourse_engine::command::{Command, CommandBody, MatchPolicy, OrderRequest, SymbolSpec};
use bourse_engine::{AccountId, Amount, Applied, AssetId, ClientId, Engine, Event, Px, Qty, SymbolId};

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
