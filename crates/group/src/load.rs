//! Traders over a running partitioned exchange (`bourse group-load`), and the checks
//! after they stop: see [`run`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bourse_engine::command::{CommandBody, OrderRequest, Tif};
use bourse_engine::{AccountId, Amount, AssetId, ClientId, OrderId, Outcome, Px, Qty, Reject, Side, SymbolId};
use bourse_pki::ReloadableClientConfig;
use bourse_shard::machine::{conservation, Output, CLOSE_UNDER_WAY};
use bourse_shard::{GroupMachine, ShardMap, CATALOG_GROUP};

use crate::client::{ClientError, GroupClient};
use crate::wire::{Answered, Query, State};

#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Every group's members' API addresses, in group order.
    pub directory: Vec<Vec<String>>,
    /// Where the accounts and books live (the genesis's).
    pub map: ShardMap,
    /// The accounts to trade, from the genesis: trader `n` trades `accounts[n % len]`.
    pub accounts: Vec<AccountId>,
    /// Traders, each a client of its own (id `1000 + n`), one command at a time.
    pub traders: usize,
    /// Symbols `0..symbols` are listed.
    pub symbols: u32,
    pub seconds: f64,
    pub seed: u64,
    /// How long the groups may take to settle everything after the traders stop.
    pub settle_within: Duration,
    /// Accounts created while the groups run (through the catalog's group) and funded
    /// as the genesis funds its own, before the traders start; the first traders
    /// trade them.
    pub online_accounts: usize,
    /// A book to move while the traders trade: `(symbol, to group, after)`.
    pub move_book: Option<(SymbolId, usize, Duration)>,
    /// Close the day this long after the traders start, while they trade.
    pub close_day_after: Option<Duration>,
}

/// A close of the day under load: what it expired and how long its answer took.
#[derive(Clone, Debug, Default)]
pub struct CloseReport {
    /// Day orders expired, summed over the groups.
    pub expired: u64,
    /// From the first send to the answer (refusals while a book moved included).
    pub took_ms: f64,
    /// Times the catalog's group refused it because a book was moving.
    pub refused_moving: u32,
    /// The system clock (ns) when it was first sent: every Day order stamped before
    /// this (the members of one machine stamp on its clock) has expired.
    pub sent_ns: u64,
}

/// A book moved under load, and what its traders saw.
#[derive(Clone, Debug, Default)]
pub struct MoveReport {
    pub symbol: u32,
    /// The group the book left (as [`crate::wire::Reply::Moved`] says it).
    pub from: Option<usize>,
    pub to: usize,
    /// From the request to the book in its new group, as the catalog's leader saw it.
    pub took_ms: f64,
    /// The symbol's orders whose answer was awaited while the book moved, and the
    /// longest such wait: the pause its clients saw.
    pub orders_during: u64,
    pub pause_ms: f64,
    /// The symbol's other orders: how many, and their answers' p50 and p99.
    pub orders_else: u64,
    pub else_p50_ms: f64,
    pub else_p99_ms: f64,
    /// Orders of the other books of the group the book went to, awaited while it moved,
    /// and the longest such wait: that group holds everything stamped past the move's
    /// cut until the book comes.
    pub neighbours_during: u64,
    pub neighbours_pause_ms: f64,
}

/// The client id the load creates and funds accounts as.
pub const LOAD_OPERATOR: ClientId = ClientId(999);
/// The client id of the reader of the moving book ([`watch_book`]).
pub const WATCHER: ClientId = ClientId(998);

/// What the traders did and what the checks found.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    pub commands: u64,
    pub placed: u64,
    pub resends: u64,
    /// Answers that were a session's memory of an earlier application.
    pub repeats: u64,
    pub failed: Vec<String>,
    pub elapsed: Duration,
    /// Per group: entries applied by its members at the end.
    pub applied: Vec<u64>,
    pub settled_in: Duration,
    /// Answer latency over every command, from the first send to the outcome.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Accounts created online, and how long creating and funding them took.
    pub created: Vec<AccountId>,
    pub create_ms: f64,
    pub moved: Option<MoveReport>,
    pub closed: Option<CloseReport>,
    /// Orders placed, sampled over each book's run, read back by id through the
    /// groups' API after they settled, and those of them no group remembers any more.
    pub read_back: u64,
    pub forgotten: u64,
    /// Orders of the moving book read by id as soon as they were acknowledged, by the
    /// trader that placed each.
    pub read_at_once: u64,
    /// Reads of the moving book's watched order, by id and in the book, while the
    /// traders traded (the move among them).
    pub watched_reads: u64,
    /// Every broken check; empty when all held.
    pub violations: Vec<String>,
}

/// A trader: one account, one client session with the account's group.
struct Trader {
    client: ClientId,
    account: AccountId,
    seq: u64,
    resting: Vec<(SymbolId, OrderId)>,
    rng: u64,
}

impl Trader {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn command(&mut self, symbols: u32) -> CommandBody {
        let roll = self.next() % 100;
        if roll < 20 && !self.resting.is_empty() {
            let at = (self.next() % self.resting.len() as u64) as usize;
            let (symbol, order) = self.resting.swap_remove(at);
            return CommandBody::Cancel { account: self.account, symbol, order };
        }
        if roll >= 95 {
            let amount = Amount(1 + (self.next() % 1_000) as i64);
            return if self.next().is_multiple_of(2) {
                CommandBody::Deposit { account: self.account, asset: AssetId(0), amount }
            } else {
                CommandBody::Withdraw { account: self.account, asset: AssetId(0), amount }
            };
        }
        let symbol = SymbolId((self.next() % u64::from(symbols.max(1))) as u32);
        let side = if self.next().is_multiple_of(2) { Side::Buy } else { Side::Sell };
        let px = Px(950 + (self.next() % 101) as i64);
        let qty = Qty(1 + (self.next() % 10) as i64);
        let tif = match self.next() % 4 {
            0 => Tif::Ioc,
            1 => Tif::Day,
            _ => Tif::Gtc,
        };
        CommandBody::Place(OrderRequest::limit(self.account, symbol, side, px, qty, tif))
    }
}

/// Runs the traders for `seconds` (each one command at a time), then waits
/// until the groups have settled everything, and checks: every group's members hold
/// one state; every asset is conserved across the groups; every acknowledged command
/// is in its session's record on every member; no answer was lost (every command got
/// an outcome).
pub async fn run(options: LoadOptions, tls: Option<Arc<ReloadableClientConfig>>) -> LoadReport {
    let mut report = LoadReport::default();
    let probe = GroupClient::new(options.directory.clone(), options.map, tls.clone());
    // Sessions resume where the groups' records stand (a second run on one cluster).
    let machines = match leaders(&probe).await {
        Ok(machines) => machines,
        Err(error) => {
            report.violations.push(error);
            return report;
        }
    };
    let map = probe.map();
    let creating = Instant::now();
    // The operator's last number in its session with each group.
    let mut operator: Vec<u64> = machines.iter().map(|machine| machine.account.session(LOAD_OPERATOR)).collect();
    match create_accounts(&options, &mut operator, tls.clone()).await {
        Ok(created) => report.created = created,
        Err(error) => {
            report.violations.push(error);
            return report;
        }
    }
    report.create_ms = creating.elapsed().as_secs_f64() * 1e3;
    let accounts: Vec<AccountId> = report.created.iter().chain(&options.accounts).copied().collect();
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(options.seconds);
    let mut tasks = Vec::new();
    if accounts.is_empty() {
        report.violations.push("no accounts to trade".into());
        return report;
    }
    for n in 0..options.traders {
        let account = accounts[n % accounts.len()];
        // Client ids past the genesis's operator (0).
        let client = ClientId(1_000 + n as u64);
        let group = map.account_group(account);
        let mut trader = Trader {
            client,
            account,
            seq: machines[group].account.session(client),
            resting: Vec::new(),
            rng: options.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (n as u64 + 1),
        };
        let mut client = GroupClient::new(options.directory.clone(), options.map, tls.clone());
        // The group the book goes to, and the books it has (as the groups place them now).
        let watched = options.move_book.map(|(symbol, to, _)| {
            let placed = &machines[CATALOG_GROUP].account;
            let neighbours: Vec<SymbolId> =
                (0..options.symbols).map(SymbolId).filter(|&s| s != symbol && placed.symbol_group(s) == to).collect();
            (symbol, neighbours)
        });
        let symbols = options.symbols;
        tasks.push(tokio::spawn(async move {
            let (mut commands, mut placed, mut repeats, mut failed) = (0u64, 0u64, 0u64, Vec::new());
            let mut latencies = Vec::new();
            // The moving book's orders and those of the books of the group it goes to:
            // when sent, how long their answers took, and whether of the moving book.
            let mut watching = Vec::new();
            // Every order placed: its symbol and id.
            let mut orders = Vec::new();
            // Acknowledged orders not read back at once.
            let mut unread = Vec::new();
            let mut read_at_once = 0u64;
            while Instant::now() < until {
                let body = trader.command(symbols);
                trader.seq += 1;
                let place = match &body {
                    CommandBody::Place(request) => Some((request.symbol, request.tif)),
                    _ => None,
                };
                let sent = Instant::now();
                match client.send(trader.client, trader.seq, body).await {
                    Ok((outcome, repeat)) => {
                        latencies.push(sent.elapsed().as_secs_f64() * 1e3);
                        if let (Some((symbol, _)), Some((moving, neighbours))) = (place, &watched) {
                            if symbol == *moving || neighbours.contains(&symbol) {
                                watching.push((sent, sent.elapsed(), symbol == *moving));
                            }
                        }
                        commands += 1;
                        repeats += u64::from(repeat);
                        if let (Some((symbol, tif)), Outcome::Ok { id }) = (place, outcome) {
                            placed += 1;
                            orders.push((symbol, OrderId(id)));
                            if tif.rests() {
                                trader.resting.push((symbol, OrderId(id)));
                            }
                            // Read your writes: an order of the moving book acknowledged
                            // is there to read at once, wherever the book is on its way.
                            // (Only those: a load without a move sends what it always
                            // sent, so its figures stay comparable.)
                            if watched.as_ref().is_some_and(|(moving, _)| *moving == symbol) {
                                let id = OrderId(id);
                                read_at_once += 1;
                                match client.order(symbol, id).await {
                                    Ok((_, _, Some(state)))
                                        if (state.record.symbol, state.record.account) == (symbol, trader.account) => {}
                                    Ok((g, index, state)) => unread.push(format!(
                                        "client {}: order {id} of symbol {symbol}, acknowledged, read back from group \
                                         {g} at index {index} as {state:?}",
                                        trader.client
                                    )),
                                    Err(error) => unread.push(format!(
                                        "client {}: order {id} of symbol {symbol}, acknowledged: reading it: {error}",
                                        trader.client
                                    )),
                                }
                            }
                        }
                    }
                    Err(error) => {
                        failed.push(format!("client {}: command {}: {error}", trader.client, trader.seq));
                        break;
                    }
                }
            }
            let counts = (commands, placed, repeats, client.resends);
            (
                trader.client,
                trader.account,
                trader.seq,
                counts,
                failed,
                (latencies, watching, orders, (read_at_once, unread)),
            )
        }));
    }
    let mover = options.move_book.map(|(symbol, to, after)| {
        let mut client = GroupClient::new(options.directory.clone(), options.map, tls.clone());
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let asked = Instant::now();
            loop {
                let moved = client.move_symbol(symbol, to).await;
                // Refused while a close of the day is on its way (one may be sent at the
                // same moment): sent again once it is done.
                match &moved {
                    Err(ClientError::Query(why)) if why.contains(CLOSE_UNDER_WAY) && asked.elapsed().as_secs() < 20 => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    _ => return (asked, Instant::now(), moved),
                }
            }
        })
    });
    // A reader of the moving book through the move: an order of its own that never
    // trades, read by id and in the book again and again while the traders trade.
    let watcher = options.move_book.map(|(symbol, _, _)| {
        let account = accounts[0];
        let seq = machines[map.account_group(account)].account.session(WATCHER);
        let client = GroupClient::new(options.directory.clone(), options.map, tls.clone());
        tokio::spawn(watch_book(client, (WATCHER, seq), account, symbol, until))
    });
    let closer = options.close_day_after.map(|after| {
        let client = GroupClient::new(options.directory.clone(), options.map, tls.clone());
        tokio::spawn(close_day(client, operator[CATALOG_GROUP] + 1, after))
    });
    let mut answered: BTreeMap<ClientId, (AccountId, u64)> = BTreeMap::new();
    let mut latencies = Vec::new();
    let mut watching = Vec::new();
    let mut orders: BTreeMap<SymbolId, Vec<(OrderId, AccountId)>> = BTreeMap::new();
    for task in tasks {
        match task.await {
            Ok((
                client,
                account,
                seq,
                (commands, placed, repeats, resends),
                failed,
                (mut answered_in, mut watched, placed_ids, (read_at_once, unread)),
            )) => {
                report.read_at_once += read_at_once;
                report.violations.extend(unread);
                for (symbol, id) in placed_ids {
                    orders.entry(symbol).or_default().push((id, account));
                }
                latencies.append(&mut answered_in);
                watching.append(&mut watched);
                report.commands += commands;
                report.placed += placed;
                report.repeats += repeats;
                report.resends += resends;
                let last = if failed.is_empty() { seq } else { seq - 1 };
                report.failed.extend(failed);
                answered.insert(client, (account, last));
            }
            Err(error) => report.failed.push(format!("a trader panicked: {error}")),
        }
    }
    report.elapsed = started.elapsed();
    if let (Some(mover), Some((symbol, to, _))) = (mover, options.move_book) {
        match mover.await {
            Ok((asked, done, Ok((from, took)))) => {
                report.moved = Some(move_report(symbol, from, to, took, (asked, done), &watching));
            }
            Ok((_, _, Err(error))) => report.violations.push(format!("moving symbol {symbol}: {error}")),
            Err(error) => report.violations.push(format!("the mover panicked: {error}")),
        }
    }
    if let Some(watcher) = watcher {
        match watcher.await {
            Ok(Ok((reads, stale))) => {
                report.watched_reads = reads;
                report.violations.extend(stale);
            }
            Ok(Err(error)) => report.violations.push(format!("watching the moving book: {error}")),
            Err(error) => report.violations.push(format!("the watcher panicked: {error}")),
        }
    }
    if let Some(closer) = closer {
        match closer.await {
            Ok(Ok(closed)) => report.closed = Some(closed),
            Ok(Err(error)) => report.violations.push(format!("closing the day: {error}")),
            Err(error) => report.violations.push(format!("the closer panicked: {error}")),
        }
    }
    latencies.sort_by(f64::total_cmp);
    let quantile =
        |q: f64| latencies.get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)));
    report.p50_ms = quantile(0.5).copied().unwrap_or(0.0);
    report.p99_ms = quantile(0.99).copied().unwrap_or(0.0);
    report.violations.extend(report.failed.iter().map(|f| format!("no outcome: {f}")));
    let settling = Instant::now();
    let states = match settled(&probe, options.settle_within).await {
        Ok(states) => states,
        Err(error) => {
            report.violations.push(error);
            return report;
        }
    };
    report.settled_in = settling.elapsed();
    check(&states, &answered, &mut report);
    read_back(GroupClient::new(options.directory.clone(), options.map, tls.clone()), &states, &orders, &mut report)
        .await;
    if let Some(closed) = &report.closed {
        // The cut's stamp is at least the close's send time: no Day order stamped
        // before that may still be open.
        for (state, machine) in &states {
            let left = machine
                .symbol
                .engine()
                .open_order_records()
                .into_iter()
                .filter(|record| record.tif == Tif::Day && record.ts < closed.sent_ns)
                .count();
            if left > 0 {
                report.violations.push(format!(
                    "node {}: {left} Day orders placed before the close of the day are still open",
                    state.node
                ));
            }
        }
    }
    report
}

/// The watched order's price: a bid below every price the traders trade at (950 to
/// 1,050), so it rests untouched.
const WATCHED_PX: Px = Px(900);

/// Places a bid of one share of `symbol` at [`WATCHED_PX`] for `account` (as
/// `client`, whose session with the account's group stands at `seq`), then until
/// `until` reads it again and again, by id and in the book: each read must show it
/// resting, the move of its book or not (a read in the new group before the book has
/// come would miss it), a pair of reads at most every millisecond. Cancels it at the
/// end. The reads, and what each stale one saw.
async fn watch_book(
    mut client: GroupClient,
    (who, mut seq): (ClientId, u64),
    account: AccountId,
    symbol: SymbolId,
    until: Instant,
) -> Result<(u64, Vec<String>), String> {
    let request = OrderRequest::limit(account, symbol, Side::Buy, WATCHED_PX, Qty(1), Tif::Gtc);
    seq += 1;
    let id = match client.send(who, seq, CommandBody::Place(request)).await {
        Ok((Outcome::Ok { id }, _)) => OrderId(id),
        Ok((outcome, _)) => return Err(format!("placing the watched order: {outcome:?}")),
        Err(error) => return Err(format!("placing the watched order: {error}")),
    };
    let (mut reads, mut stale) = (0u64, Vec::new());
    let book = Query::Book { symbol, levels: 1_000 };
    while Instant::now() < until {
        reads += 2;
        match client.order(symbol, id).await {
            Ok((_, _, Some(state))) if state.px_resting == Some(WATCHED_PX) && state.qty_open == Qty(1) => {}
            Ok((g, index, state)) => stale.push(format!(
                "watched order {id} of symbol {symbol}: read from group {g} at index {index} as {state:?}"
            )),
            Err(error) => stale.push(format!("watched order {id} of symbol {symbol}: {error}")),
        }
        let g = client.map().symbol_group(symbol);
        match client.query(g, &book).await {
            Ok((_, _, Answered::Book { bids, .. }))
                if bids.iter().any(|&(px, qty)| px == WATCHED_PX && qty >= Qty(1)) => {}
            Ok((g, index, answer)) => stale.push(format!(
                "symbol {symbol}'s book, read from group {g} at index {index}, lacks the watched order {id}: {answer:?}"
            )),
            Err(error) => stale.push(format!("symbol {symbol}'s book: {error}")),
        }
        // At most a pair of reads a millisecond: a move's window is a few of them.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    seq += 1;
    match client.send(who, seq, CommandBody::Cancel { account, symbol, order: id }).await {
        Ok((Outcome::Ok { .. }, _)) => Ok((reads, stale)),
        Ok((outcome, _)) => Err(format!("cancelling the watched order: {outcome:?}")),
        Err(error) => Err(format!("cancelling the watched order: {error}")),
    }
}

/// Orders read back per book at most, spread over the run.
const READ_BACK_PER_BOOK: usize = 64;

/// Reads back by id, through the groups' API, up to [`READ_BACK_PER_BOOK`] of each
/// book's placed orders (`orders`, each trader's in the order placed), spread over the
/// run so that orders closed before a move are among them: each must be answered
/// with the record the one group holding it has in the settled `states`, of its symbol
/// and account. An order no group holds any more (closed orders are kept up to the
/// engine's `orders_closed_max`) is counted as forgotten; two groups holding it is a
/// violation.
async fn read_back(
    mut client: GroupClient,
    states: &[(State, GroupMachine)],
    orders: &BTreeMap<SymbolId, Vec<(OrderId, AccountId)>>,
    report: &mut LoadReport,
) {
    // One member's machine per group (the members of a group hold one state: checked).
    let mut machines: BTreeMap<usize, &GroupMachine> = BTreeMap::new();
    for (state, machine) in states {
        machines.entry(state.group).or_insert(machine);
    }
    for (&symbol, placed) in orders {
        let step = placed.len().div_ceil(READ_BACK_PER_BOOK).max(1);
        for &(id, account) in placed.iter().step_by(step) {
            let holders: Vec<(usize, bourse_engine::OrderView)> = machines
                .iter()
                .filter_map(|(&g, machine)| machine.symbol.engine().order(id).map(|view| (g, view)))
                .collect();
            let (holder, view) = match holders.as_slice() {
                [] => {
                    report.forgotten += 1;
                    continue;
                }
                [(holder, view)] => (*holder, view),
                _ => {
                    let groups: Vec<usize> = holders.iter().map(|(g, _)| *g).collect();
                    report.violations.push(format!("order {id} of symbol {symbol}: groups {groups:?} all hold it"));
                    continue;
                }
            };
            if (view.record.symbol, view.record.account) != (symbol, account) {
                report.violations.push(format!(
                    "order {id}, placed by account {account} in symbol {symbol}: group {holder} holds it as account \
                     {}'s in symbol {}",
                    view.record.account, view.record.symbol
                ));
                continue;
            }
            report.read_back += 1;
            match client.order(symbol, id).await {
                Ok((_, _, Some(state)))
                    if (&state.record, state.px_resting, state.qty_open)
                        == (&view.record, view.px_resting, view.qty_open) => {}
                Ok((g, index, state)) => report.violations.push(format!(
                    "order {id} of symbol {symbol} (held by group {holder}, which symbol {symbol}'s book {}): read \
                     back by id from group {g} at index {index} as {state:?}, not {:?}",
                    if machines[&holder].account.symbol_group(symbol) == holder { "lives in" } else { "has left" },
                    view.record
                )),
                Err(error) => report.violations.push(format!("order {id} of symbol {symbol}: reading it: {error}")),
            }
        }
    }
}

/// Closes the day after `after`, as [`LOAD_OPERATOR`] (its command numbered `seq` in
/// its session with the catalog's group), sending it again, with the next number,
/// while the catalog's group refuses it because a book moves.
async fn close_day(mut client: GroupClient, mut seq: u64, after: Duration) -> Result<CloseReport, String> {
    tokio::time::sleep(after).await;
    let sent = Instant::now();
    let sent_ns =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_nanos() as u64);
    let mut refused_moving = 0;
    loop {
        match client.send(LOAD_OPERATOR, seq, CommandBody::CloseDay).await {
            Ok((Outcome::Ok { id }, _)) => {
                let took_ms = sent.elapsed().as_secs_f64() * 1e3;
                return Ok(CloseReport { expired: id, took_ms, refused_moving, sent_ns });
            }
            Ok((Outcome::Rejected(Reject::BookMoving), _)) if sent.elapsed() < Duration::from_secs(20) => {
                refused_moving += 1;
                seq += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok((outcome, _)) => return Err(format!("refused: {outcome:?}")),
            Err(error) => return Err(error.to_string()),
        }
    }
}

/// What the moving book's orders saw: those whose answer was awaited while the book
/// moved (sent before it came, answered after the move was asked for) against the rest.
fn move_report(
    symbol: SymbolId,
    from: Option<usize>,
    to: usize,
    took: Duration,
    (asked, done): (Instant, Instant),
    orders: &[(Instant, Duration, bool)],
) -> MoveReport {
    let awaited = |&&(sent, took, _): &&(Instant, Duration, bool)| sent <= done && sent + took >= asked;
    let ms = |orders: Vec<&(Instant, Duration, bool)>| -> Vec<f64> {
        orders.iter().map(|(_, took, _)| took.as_secs_f64() * 1e3).collect()
    };
    let (book, neighbours): (Vec<_>, Vec<_>) = orders.iter().partition(|order| order.2);
    let (during, other): (Vec<_>, Vec<_>) = book.into_iter().partition(awaited);
    let (during, mut other) = (ms(during), ms(other));
    let neighbours = ms(neighbours.into_iter().filter(awaited).collect());
    other.sort_by(f64::total_cmp);
    let at = |q: f64| other.get(((other.len() as f64 * q) as usize).min(other.len().saturating_sub(1))).copied();
    MoveReport {
        symbol: symbol.0,
        from,
        to,
        took_ms: took.as_secs_f64() * 1e3,
        orders_during: during.len() as u64,
        pause_ms: during.iter().copied().fold(0.0, f64::max),
        orders_else: other.len() as u64,
        else_p50_ms: at(0.5).unwrap_or(0.0),
        else_p99_ms: at(0.99).unwrap_or(0.0),
        neighbours_during: neighbours.len() as u64,
        neighbours_pause_ms: neighbours.iter().copied().fold(0.0, f64::max),
    }
}

/// Creates `options.online_accounts` accounts through the catalog's group, each then
/// funded in its own group with 1,000,000.00 USD and 100,000 shares of every stock (as
/// [`crate::Genesis::market`] funds its accounts), as [`LOAD_OPERATOR`], whose sessions
/// resume where the groups' records stand.
async fn create_accounts(
    options: &LoadOptions,
    seqs: &mut [u64],
    tls: Option<Arc<ReloadableClientConfig>>,
) -> Result<Vec<AccountId>, String> {
    let mut client = GroupClient::new(options.directory.clone(), options.map, tls);
    let mut created = Vec::new();
    for _ in 0..options.online_accounts {
        let mut send = async |client: &mut GroupClient, body: CommandBody| {
            let g = client.group_of(&body).map_err(|e| e.to_string())?;
            seqs[g] += 1;
            match client.send(LOAD_OPERATOR, seqs[g], body.clone()).await {
                Ok((Outcome::Ok { id }, _)) => Ok(id),
                Ok((outcome, _)) => Err(format!("{body:?} refused: {outcome:?}")),
                Err(error) => Err(format!("{body:?}: {error}")),
            }
        };
        let account = AccountId(send(&mut client, CommandBody::CreateAccount).await? as u32);
        send(&mut client, CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(100_000_000) }).await?;
        for s in 0..options.symbols {
            let credit = CommandBody::Credit { account, asset: AssetId(1 + s), amount: Amount(100_000) };
            send(&mut client, credit).await?;
        }
        created.push(account);
    }
    Ok(created)
}

/// One member's machine per group (the first that answers).
async fn leaders(client: &GroupClient) -> Result<Vec<GroupMachine>, String> {
    let groups = client.map().groups();
    let mut machines: Vec<Option<GroupMachine>> = vec![None; groups];
    for state in client.states(true).await.into_iter().flatten() {
        if machines[state.group].is_none() {
            machines[state.group] = Some(decode(&state)?);
        }
    }
    machines.into_iter().enumerate().map(|(g, m)| m.ok_or_else(|| format!("no member of group {g} answers"))).collect()
}

fn decode(state: &State) -> Result<GroupMachine, String> {
    let bytes = state.machine.as_ref().ok_or("a state without its machine")?;
    postcard::from_bytes(bytes).map_err(|e| format!("node {}'s machine does not decode: {e}", state.node))
}

/// Waits until every member answers, each group's members have applied the same index
/// (all of what is committed), every output has been ingested and no merge waits.
async fn settled(client: &GroupClient, within: Duration) -> Result<Vec<(State, GroupMachine)>, String> {
    let deadline = Instant::now() + within;
    let mut why;
    loop {
        let states = client.states(true).await;
        why = String::new();
        let mut decoded = Vec::new();
        for state in states {
            match state.and_then(|s| decode(&s).map(|m| (s, m))) {
                Ok(pair) => decoded.push(pair),
                Err(error) => why = error,
            }
        }
        if why.is_empty() {
            why = unsettled(&decoded, client.map().groups()).unwrap_or_default();
            if why.is_empty() {
                return Ok(decoded);
            }
        }
        if Instant::now() > deadline {
            return Err(format!("the groups did not settle within {within:?}: {why}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn unsettled(states: &[(State, GroupMachine)], groups: usize) -> Option<String> {
    for g in 0..groups {
        let of: Vec<&(State, GroupMachine)> = states.iter().filter(|(s, _)| s.group == g).collect();
        let first = of.first()?;
        if of.iter().any(|(s, _)| s.applied != first.0.applied || s.applied != s.committed) {
            let progress: Vec<(u64, u64, u64)> = of.iter().map(|(s, _)| (s.node, s.applied, s.committed)).collect();
            return Some(format!("group {g}'s members (node, applied, committed): {progress:?}"));
        }
        if first.1.symbol.merge.waiting() > 0 {
            return Some(format!("group {g}'s merge holds {} forwards", first.1.symbol.merge.waiting()));
        }
    }
    for (source, machine) in states {
        for (consumer_state, consumer) in states.iter().filter(|(s, _)| s.group != source.group) {
            let past = machine.outputs_past(consumer_state.group, consumer.cursor(source.group));
            if past.filter(|o| !matches!(o, Output::Watermark(_))).count() > 0 {
                return Some(format!(
                    "group {}'s outputs to group {} not all ingested",
                    source.group, consumer_state.group
                ));
            }
        }
    }
    None
}

fn check(states: &[(State, GroupMachine)], answered: &BTreeMap<ClientId, (AccountId, u64)>, report: &mut LoadReport) {
    let groups = states.iter().map(|(s, _)| s.group + 1).max().unwrap_or(0);
    let mut firsts = Vec::new();
    for g in 0..groups {
        let of: Vec<&(State, GroupMachine)> = states.iter().filter(|(s, _)| s.group == g).collect();
        let Some(first) = of.first() else { continue };
        report.applied.push(first.0.applied);
        for (state, machine) in &of[1..] {
            if !machine.same_state(&first.1) {
                report
                    .violations
                    .push(format!("group {g}: node {}'s state differs from node {}'s", state.node, first.0.node));
            }
        }
        for (_, machine) in &of {
            machine.symbol.engine().check_invariants();
        }
        firsts.push(&first.1);
    }
    // Every group applied the same catalog commands (the genesis's and those sent to the
    // running groups), so each knows every account.
    if let Some(first) = firsts.first() {
        for machine in &firsts[1..] {
            if (machine.catalog(), machine.account.accounts_known())
                != (first.catalog(), first.account.accounts_known())
            {
                report.violations.push(format!(
                    "group {} applied {} catalog commands and knows {} accounts; group {} {} and {}",
                    machine.group(),
                    machine.catalog(),
                    machine.account.accounts_known(),
                    first.group(),
                    first.catalog(),
                    first.account.accounts_known()
                ));
            }
        }
    }
    // Every group places every book alike, and no move is left half done.
    if let Some(first) = firsts.first() {
        let symbols = first.symbol.engine().symbols_len() as u32;
        for machine in &firsts {
            let apart =
                (0..symbols).map(SymbolId).find(|&s| machine.account.symbol_group(s) != first.account.symbol_group(s));
            if let Some(symbol) = apart {
                report.violations.push(format!(
                    "groups {} and {} place symbol {symbol}'s book apart",
                    first.group(),
                    machine.group()
                ));
            }
            if !machine.symbol.leaving.is_empty() || !machine.symbol.arriving.is_empty() || machine.moving().count() > 0
            {
                let leaving: Vec<String> = machine
                    .symbol
                    .leaving
                    .iter()
                    .map(|(symbol, leaving)| {
                        format!(
                            "symbol {symbol} leaving to {:?} (group, cut), passed by {:?}, its orders held in the \
                             merge: {}",
                            leaving.to,
                            leaving.passed,
                            machine.symbol.merge.holds(*symbol)
                        )
                    })
                    .collect();
                report.violations.push(format!(
                    "group {}: a move of a book is not done: {leaving:?}, arriving (symbol, cut) {:?}, moving {:?}, \
                     the merge's floor {}",
                    machine.group(),
                    machine.symbol.arriving,
                    machine.moving().collect::<Vec<_>>(),
                    machine.symbol.merge.floor()
                ));
            }
        }
    }
    if let Err(broken) = conservation(&firsts) {
        report.violations.push(format!("conservation across the groups: {broken}"));
    }
    // A meta group holds no account's funds and never held an order.
    for machine in firsts.iter().filter(|machine| !machine.account.map().holds_data(machine.group())) {
        let engine = machine.symbol.engine();
        let orders = engine.open_order_records().len() + engine.closed_order_records().count();
        if machine.account.balances().next().is_some() || orders > 0 {
            report.violations.push(format!("the meta group {} holds balances or {orders} orders", machine.group()));
        }
    }
    let map = firsts.first().map_or(bourse_shard::ShardMap::new(groups as u32), |machine| machine.account.map());
    for (client, (account, last)) in answered {
        let g = map.account_group(*account);
        for (state, machine) in states.iter().filter(|(s, _)| s.group == g) {
            let recorded = machine.account.session(*client);
            if recorded < *last {
                report.violations.push(format!(
                    "client {client}: command {last} was acknowledged, but node {} records {recorded} as its last",
                    state.node
                ));
            } else if recorded > *last {
                report.violations.push(format!(
                    "client {client}: node {} applied command {recorded}, past the last one sent ({last})",
                    state.node
                ));
            }
        }
    }
}
