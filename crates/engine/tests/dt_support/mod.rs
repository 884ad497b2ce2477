//! Shared set-up for the day-trading tests: an engine fed with workload-style lines at
//! chosen log times, and a readable rendering of the records each entry writes.
#![allow(dead_code)]

use bourse_engine::command::{Command, CommandBody};
use bourse_engine::daytrading::{
    cents_format, Action, DtCommand, DtEvent, DtKind, DtQuote, DtRequest, DtReturn, QuoteSource, Sym,
};
use bourse_engine::{Applied, ClientId, Engine, EngineConfig, Event, Outcome};

/// T0 of the tests' log times: 2024-11-22, within the audit schema copy's bounds.
pub const T0_MS: u64 = 1_732_270_000_000;

pub struct Dt {
    pub engine: Engine,
    pub seq: u64,
    pub events: Vec<Event>,
}

impl Default for Dt {
    fn default() -> Self {
        Dt::with_config(EngineConfig::default())
    }
}

/// A command parsed from `NAME,arg,arg` (arguments verbatim).
pub fn parse(line: &str) -> DtCommand {
    let mut parts = line.split(',');
    let kind = DtKind::parse(parts.next().unwrap()).expect("a command name");
    DtCommand {
        kind,
        args: parts.map(str::to_owned).collect(),
        transaction_num: 0,
        caller: String::new(),
        admin: false,
        quote: None,
    }
}

/// A quote of `symbol` at `price` cents for `userid`.
pub fn quote(symbol: &str, price: i64, userid: &str) -> DtQuote {
    DtQuote {
        symbol: Sym::parse(symbol).unwrap(),
        price,
        userid: userid.to_owned(),
        quote_server_time: 1_700_000_000_000,
        cryptokey: "key=".into(),
        source: QuoteSource::Emulator,
        transaction_num: 0,
    }
}

impl Dt {
    pub fn with_config(config: EngineConfig) -> Dt {
        Dt { engine: Engine::new(config), seq: 0, events: Vec::new() }
    }

    /// Applies a request stamped `ms` after T0 (the log time in ns is what the engine
    /// gets) and checks the invariants.
    pub fn apply(&mut self, ms: u64, request: DtRequest) -> Applied {
        self.seq += 1;
        self.events.clear();
        let ts = (T0_MS + ms) * 1_000_000;
        let command =
            Command { client: ClientId(7), seq: self.seq, ts, body: CommandBody::DayTrading(Box::new(request)) };
        let applied = self.engine.apply(&command, &mut self.events);
        self.engine.check_invariants();
        applied
    }

    /// `line` at `ms`, numbered `txn` (0: none), optionally with a quote at `price`.
    pub fn cmd_full(&mut self, ms: u64, txn: u64, line: &str, price: Option<i64>, admin: bool) -> Vec<String> {
        let mut command = parse(line);
        command.transaction_num = txn;
        command.admin = admin;
        command.caller = command.args.first().filter(|a| a.len() <= 64).cloned().unwrap_or_default();
        if let Some(price) = price {
            let symbol = command.args.get(1).cloned().unwrap_or_default();
            command.quote = Some(quote(&symbol, price, &command.args[0]));
        }
        self.run_command(ms, command)
    }

    pub fn run_command(&mut self, ms: u64, command: DtCommand) -> Vec<String> {
        let applied = self.apply(ms, DtRequest::Command(command));
        assert!(matches!(applied.outcome, Outcome::Ok { .. }), "{applied:?}");
        self.rendered()
    }

    /// `line` at `ms` with the next number (the harness numbers like the workloads).
    pub fn cmd(&mut self, ms: u64, line: &str) -> Vec<String> {
        let txn = self.engine.day_trading().transaction_num_max() + 1;
        self.cmd_full(ms, txn, line, None, false)
    }

    /// `line` at `ms` with a quote of its symbol at `price` cents attached.
    pub fn cmd_quoted(&mut self, ms: u64, line: &str, price: i64) -> Vec<String> {
        let txn = self.engine.day_trading().transaction_num_max() + 1;
        self.cmd_full(ms, txn, line, Some(price), false)
    }

    /// A poller's quote entry at `ms`.
    pub fn poll(&mut self, ms: u64, symbol: &str, price: i64, txn: u64) -> Vec<String> {
        let mut q = quote(symbol, price, "poller");
        q.transaction_num = txn;
        let applied = self.apply(ms, DtRequest::Quote(q));
        assert_eq!(applied.outcome, Outcome::Ok { id: 0 });
        self.rendered()
    }

    /// The last entry's day-trading events, one line each.
    pub fn rendered(&self) -> Vec<String> {
        render(&self.engine, &self.events)
    }

    /// The last command's result line.
    pub fn done(&self) -> String {
        self.rendered().pop().unwrap()
    }

    pub fn cash(&self, user: &str) -> (String, String) {
        let (_, u) = self.engine.day_trading().user_by_name(user).expect("a user");
        (cents_format(u.cash.available), cents_format(u.cash.reserved))
    }

    pub fn shares(&self, user: &str, symbol: &str) -> (i64, i64) {
        let (_, u) = self.engine.day_trading().user_by_name(user).expect("a user");
        let held = u.holding(Sym::parse(symbol).unwrap());
        (held.available, held.reserved)
    }
}

/// One line per event: `userCommand #n`, `quoteServer USER #n`, `ACTION USER d.dd #n`,
/// `systemEvent CMD USER SYM d.dd #n`, `error TEXT #n`, then `ok …` or `failed TEXT`.
pub fn render(engine: &Engine, events: &[Event]) -> Vec<String> {
    let dt = engine.day_trading();
    let name = |user: u32| dt.user(user).map_or("?".to_owned(), |u| u.name.clone());
    events
        .iter()
        .filter_map(|event| match event {
            Event::DayTrading(e) => Some(*e),
            _ => None,
        })
        .map(|event| match event {
            DtEvent::UserCommand { txn } => format!("userCommand #{txn}"),
            DtEvent::QuoteServer { owner, txn } => {
                format!("quoteServer {} #{txn}", owner.map_or("(quote's)".to_owned(), name))
            }
            DtEvent::AccountTransaction { user, txn, action, funds } => {
                format!("{} {} {} #{txn}", action_name(action), name(user), cents_format(funds))
            }
            DtEvent::SystemEvent { user, txn, command, symbol, funds } => {
                format!("systemEvent {} {} {} {} #{txn}", command.name(), name(user), symbol, cents_format(funds))
            }
            DtEvent::ErrorEvent { txn, error } => format!("error {} #{txn}", error.message()),
            DtEvent::Done { error: Some(error), .. } => format!("failed {}", error.message()),
            DtEvent::Done { error: None, ret } => format!("ok {}", render_return(ret)),
        })
        .collect()
}

fn action_name(action: Action) -> &'static str {
    action.name()
}

pub fn render_return(ret: DtReturn) -> String {
    let c = cents_format;
    match ret {
        DtReturn::Nothing => "-".into(),
        DtReturn::Cash { available } => format!("cash {}", c(available)),
        DtReturn::Quote { symbol, price, arrival_ms, quote_server_time } => {
            format!("quote {symbol} {} at +{} qst {quote_server_time}", c(price), arrival_ms - T0_MS)
        }
        DtReturn::Pending { symbol, price, shares, money, expires_ms } => {
            format!("pending {symbol} {} x{shares} = {} until +{}", c(price), c(money), expires_ms - T0_MS)
        }
        DtReturn::Settled { symbol, shares, price, money } => {
            format!("settled {symbol} x{shares} at {} = {}", c(price), c(money))
        }
        DtReturn::ReleasedCash { symbol, money } => format!("released {symbol} {}", c(money)),
        DtReturn::ReleasedShares { symbol, shares } => format!("released {symbol} x{shares}"),
        DtReturn::Amount { symbol, amount } => format!("amount {symbol} {}", c(amount)),
        DtReturn::BuyTrigger { symbol, amount, price } => format!("buy trigger {symbol} {} at {}", c(amount), c(price)),
        DtReturn::SellTrigger { symbol, amount, price, shares } => {
            format!("sell trigger {symbol} {} at {} x{shares}", c(amount), c(price))
        }
        DtReturn::Summary => "summary".into(),
        DtReturn::Dump { audit_seq } => format!("dump through record {audit_seq}"),
    }
}
