//! # bourse-shard
//!
//! The exchange partitioned over `G` groups, as docs/ARCHITECTURE.md's scale-out
//! design splits it (exchange-core's risk and matching shards). Every group has two
//! parts:
//!
//! - an [`AccountPart`] owns the accounts its [`ShardMap`] gives it: their available
//!   balances, their clients' sessions with the group (exactly-once, in order, with
//!   outcomes remembered for retries), and the pre-trade checks that
//!   need only the account. It takes an order's hold out of the balance and passes
//!   the order on with the hold attached ([`Forward`]);
//! - a [`SymbolPart`] owns the symbols `s` with `s % G == g`: an unchanged
//!   [`Engine`](bourse_engine::Engine) whose accounts mirror every account, holding
//!   only what orders in its books reserve. It merges the forwards of every account
//!   part by stamp ([`Merge`]), funds each order's mirror with the hold it carries,
//!   applies the order, and sends back whatever the command left available in a mirror
//!   (proceeds of fills, released holds) as [`Settlement::Credit`]s, with the outcome
//!   ([`Settlement::Done`]) and the state of the buy orders it touched.
//!
//! Reserve → match → settle: a command crosses at most two parts and comes back.
//! Each part is deterministic over its input, and a symbol part's input order is a
//! function of the stamps alone (the merge waits for every source's watermark), so a
//! book sees the same operations in the same order as one engine fed the same
//! stamped input.
//!
//! A group's two parts are one state machine over the group's log ([`GroupMachine`],
//! in [`machine`]): client entries, ingest entries that carry another group's numbered
//! outputs past a per-source cursor (exactly once), trim entries for retention, and
//! the moves of books. [`Replicated`] runs every group as its log and machine in one thread,
//! committing entries in an order drawn from a seed, with resends, gaps, crashes
//! rebuilt from a snapshot and the log, and trims (the differential tests);
//! [`threads::run`] runs a group's machine per thread (the bench).
//!
//! What this slice leaves out (refused as [`Unsupported`]): margin symbols, marks, day
//! trading. Suspension is carried by the account parts alone; an account created with
//! an external id is config like any other, its deposit taken by its own account part;
//! fairness settings are config. Catalog and account commands go to [`CATALOG_GROUP`],
//! which passes them on to every other group in its output stream (the design's
//! metadata group's config stream). A close of the day goes there too, and from there
//! to every symbol part's merge as a cut at its stamp: each part expires its books'
//! Day orders where the merge releases it, after every order stamped before it and
//! before every order stamped after, and the catalog's group answers with the sum of
//! what they expired (see "The close of the day" in [`machine`]). A symbol's book moves to another
//! group online, ordered by the catalog's group like a catalog command
//! ([`machine::Entry::MoveSymbol`]): see "Moving a book" in [`machine`].

mod account;
pub mod machine;
mod replicated;
mod summary;
mod symbol;
pub mod threads;

use bourse_engine::command::CommandBody;
use bourse_engine::{AccountId, Amount, AssetId, ClientId, OrderId, Outcome, Px, Qty, SymbolId, Timestamp};
use serde::{Deserialize, Serialize};

pub use account::{AccountPart, Step};
pub use machine::GroupMachine;
pub use replicated::{Replicated, Stats};
pub use summary::{Summary, Trade, Translated, Translator};
pub use symbol::{Leaving, Merge, SymbolPart, ORDER_ID_BITS};

/// Which group owns what: a symbol by its id modulo the data groups' count, an account
/// by a hash of its id modulo that count (so where an account lives says nothing of
/// which symbols it trades: a workload whose accounts trade the symbol with their own
/// id modulo something would otherwise never cross groups). The data groups are every
/// group, or with a **meta group** ([`ShardMap::with_meta_group`]) every group but the
/// catalog's, [`CATALOG_GROUP`], which then holds no account and no book: only the
/// catalog, the placement of the books, the moves and the cuts, which every other
/// group consumes from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardMap {
    groups: u32,
    /// The first data group: 0, or 1 when group 0 is a meta group of its own.
    first: u32,
}

impl ShardMap {
    /// Every one of `groups` groups holds accounts and books, the catalog's too.
    pub fn new(groups: u32) -> Self {
        assert!(groups > 0, "at least one group");
        ShardMap { groups, first: 0 }
    }

    /// Group 0 a meta group of its own and `groups - 1` data groups.
    pub fn with_meta_group(groups: u32) -> Self {
        assert!(groups > 1, "a meta group and at least one data group");
        ShardMap { groups, first: 1 }
    }

    /// Every group, the meta group included.
    pub fn groups(&self) -> usize {
        self.groups as usize
    }

    /// Whether group 0 is a meta group (holds no account and no book).
    pub fn meta_group(&self) -> bool {
        self.first > 0
    }

    /// Whether `group` may hold accounts and books.
    pub fn holds_data(&self, group: usize) -> bool {
        (self.first as usize..self.groups as usize).contains(&group)
    }

    pub fn account_group(&self, account: AccountId) -> usize {
        // Fibonacci hashing: the id times 2^64 / φ, its high half.
        let hashed = u64::from(account.0).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        (u64::from(self.first) + hashed % u64::from(self.groups - self.first)) as usize
    }

    pub fn symbol_group(&self, symbol: SymbolId) -> usize {
        (self.first + symbol.0 % (self.groups - self.first)) as usize
    }
}

/// An order command an account part accepted, on its way to its symbol's part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forward {
    /// The gateway's stamp: the order the symbol part applies it in.
    pub stamp: Timestamp,
    pub client: ClientId,
    pub seq: u64,
    /// `Place`, `Cancel`, `Reduce` or `Move`.
    pub body: CommandBody,
    /// What the account part took out of the account's balance for it: a new order's
    /// hold, or the more a buy's move up needs.
    pub fund: Option<(AssetId, Amount)>,
    /// A move the account part counts as on its way (it knows the order): its
    /// [`Settlement::Done`] names the order, so the count comes down.
    pub counted: bool,
    /// How many catalog and account commands the source group had applied when it
    /// sent this: the symbol part applies it only once it has applied as many (the
    /// account or symbol it names may be new, and reach this group later from the
    /// catalog's group).
    pub catalog: u64,
}

/// What a symbol part sends back to an account part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Settlement {
    /// Available again: proceeds of a fill, a released hold, or what a refused order
    /// carried.
    Credit { account: AccountId, asset: AssetId, amount: Amount },
    /// A forwarded command's outcome, for its client; after the states of the buy
    /// orders the command touched.
    Done { account: AccountId, ack: Ack, moved: Option<Moved> },
    /// A buy order's state after a command touched it: `(price, quantity left)` while it
    /// rests, `None` once it is gone. The account part needs it to price a move.
    Buy { account: AccountId, symbol: SymbolId, order: OrderId, open: Option<(Px, Qty)> },
    /// To [`CATALOG_GROUP`]: the symbol part has closed the day the operator's command
    /// `(client, seq)` closed, at its stamp in its merge, and expired `expired` orders.
    Closed { client: ClientId, seq: u64, expired: u64 },
}

impl Settlement {
    /// The account whose part this goes to (none for a report of a close, which goes
    /// to the catalog's group).
    pub fn account(&self) -> Option<AccountId> {
        match *self {
            Settlement::Credit { account, .. } | Settlement::Done { account, .. } | Settlement::Buy { account, .. } => {
                Some(account)
            }
            Settlement::Closed { .. } => None,
        }
    }
}

/// A counted move's order after the move (see [`Forward::counted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    pub symbol: SymbolId,
    pub order: OrderId,
    /// `(price, quantity left)` while the order rests.
    pub open: Option<(Px, Qty)>,
}

/// A command's outcome as its client receives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub client: ClientId,
    pub seq: u64,
    pub stamp: Timestamp,
    pub outcome: Outcome,
    /// The answer to a retry of a command applied earlier, from its session's memory
    /// (the first answer may have been lost): nothing was done again. The outcome is
    /// the first answer's, or `sequence_too_old` once the session has forgotten it.
    pub repeat: bool,
}

/// A command this slice of the partitioned exchange does not carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported(pub &'static str);

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the partitioned exchange does not carry {} yet", self.0)
    }
}

impl std::error::Error for Unsupported {}

/// The group that orders the catalog and account commands sent to running groups: it
/// applies each in its log and passes it on to every other group as an output
/// ([`machine::Output::Config`]), so every group applies them in one order and numbers
/// assets, symbols and accounts alike (the metadata group of the design, carried by a
/// data group).
pub const CATALOG_GROUP: usize = 0;

/// Where a command goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Through [`CATALOG_GROUP`] to every part: the catalog, account creation, fairness
    /// settings, and the close of the day (a cut every symbol part's merge takes at its
    /// stamp: see "The close of the day" in [`machine`]).
    Config,
    /// To the account part of this group.
    Account(usize),
}

/// The command's route, or why it has none.
pub fn route(map: &ShardMap, body: &CommandBody) -> Result<Route, Unsupported> {
    Ok(match body {
        CommandBody::CreateAsset { .. }
        | CommandBody::CreateSymbol(_)
        | CommandBody::CreateAccount
        | CommandBody::CreateAccountWithId { .. }
        | CommandBody::SetFairness(_)
        | CommandBody::CloseDay => Route::Config,
        CommandBody::Deposit { account, .. }
        | CommandBody::Withdraw { account, .. }
        | CommandBody::Credit { account, .. }
        | CommandBody::Cancel { account, .. }
        | CommandBody::Reduce { account, .. }
        | CommandBody::Move { account, .. }
        | CommandBody::SuspendAccount { account }
        | CommandBody::ResumeAccount { account } => Route::Account(map.account_group(*account)),
        CommandBody::Place(request) => Route::Account(map.account_group(request.account)),
        CommandBody::CreateMarginSymbol(_) | CommandBody::SetMark { .. } => return Err(Unsupported("margin symbols")),
        CommandBody::DayTrading(_) => return Err(Unsupported("day trading")),
    })
}

/// The account and symbol of an order command (place, cancel, reduce, move).
pub fn order_parts(body: &CommandBody) -> Option<(AccountId, SymbolId)> {
    match body {
        CommandBody::Place(request) => Some((request.account, request.symbol)),
        CommandBody::Cancel { account, symbol, .. }
        | CommandBody::Reduce { account, symbol, .. }
        | CommandBody::Move { account, symbol, .. } => Some((*account, *symbol)),
        _ => None,
    }
}

impl ShardMap {
    /// An order command's (account group, symbol group).
    pub fn order_groups(&self, body: &CommandBody) -> Option<(usize, usize)> {
        order_parts(body).map(|(account, symbol)| (self.account_group(account), self.symbol_group(symbol)))
    }
}

/// A client's side of its sessions with the groups: it numbers the client's commands
/// to each group 1, 2, 3, … on their own, the numbers an account part's exactly-once
/// check expects ([`AccountPart::client`]). A client library keeps one, and sends a
/// command with the number it got here in place of its own (and sends a retry with
/// the same number). A client whose accounts all live in one group (a trader, most
/// often) numbers its commands exactly as it would for one engine; the operator's
/// span every group.
#[derive(Clone, Debug, Default)]
pub struct Sessions {
    next: rustc_hash::FxHashMap<(ClientId, usize), u64>,
}

impl Sessions {
    /// A library that picks up its clients' sessions where the groups' records stand
    /// (as a client that reconnects asks each group for its last number).
    pub fn resume(groups: &Groups) -> Self {
        let mut sessions = Sessions::default();
        for (g, part) in groups.accounts.iter().enumerate() {
            for (client, last) in part.sessions() {
                sessions.next.insert((client, g), last);
            }
        }
        sessions
    }

    /// The number of `client`'s next command to `group`.
    pub fn number(&mut self, client: ClientId, group: usize) -> u64 {
        let next = self.next.entry((client, group)).or_insert(0);
        *next += 1;
        *next
    }
}

/// Every group's two parts.
#[derive(Clone, Debug)]
pub struct Groups {
    pub map: ShardMap,
    pub accounts: Vec<AccountPart>,
    pub symbols: Vec<SymbolPart>,
}

impl Groups {
    pub fn new(groups: u32, config: bourse_engine::EngineConfig) -> Self {
        Groups::with_map(ShardMap::new(groups), config)
    }

    /// Fresh parts placed by `map`.
    pub fn with_map(map: ShardMap, config: bourse_engine::EngineConfig) -> Self {
        Groups {
            map,
            accounts: (0..map.groups()).map(|g| AccountPart::new(g, map, &config)).collect(),
            symbols: (0..map.groups()).map(|g| SymbolPart::new(g, map, config)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use bourse_engine::command::{CommandBody, OrderRequest, Tif};
    use bourse_engine::{AccountId, Px, Qty, Side, SymbolId};

    use super::{route, Route, ShardMap};

    #[test]
    fn commands_go_to_their_account_group_or_everywhere_or_are_refused_by_name() {
        let map = ShardMap::new(4);
        let request = OrderRequest::limit(AccountId(7), SymbolId(2), Side::Buy, Px(100), Qty(1), Tif::Gtc);
        assert_eq!(route(&map, &CommandBody::Place(request)), Ok(Route::Account(map.account_group(AccountId(7)))));
        assert_eq!(route(&map, &CommandBody::CreateAccount), Ok(Route::Config));
        let suspend = CommandBody::SuspendAccount { account: AccountId(7) };
        assert_eq!(route(&map, &suspend), Ok(Route::Account(map.account_group(AccountId(7)))));
        let refused = route(&map, &CommandBody::SetMark { symbol: SymbolId(2), px: Px(100) }).expect_err("not carried");
        assert_eq!(refused.to_string(), "the partitioned exchange does not carry margin symbols yet");
    }

    #[test]
    fn accounts_spread_over_the_groups_whatever_their_ids_modulo_the_count() {
        let map = ShardMap::new(4);
        // Ids that are all 0 mod 4 still land in every group, about evenly.
        let mut counts = [0u32; 4];
        for a in (0..40_000).step_by(4) {
            counts[map.account_group(AccountId(a))] += 1;
        }
        assert!(counts.iter().all(|&n| (2_000..3_000).contains(&n)), "{counts:?}");
        assert_eq!(map.symbol_group(SymbolId(6)), 2);
    }

    #[test]
    fn a_meta_group_holds_no_account_and_no_book() {
        let map = ShardMap::with_meta_group(4);
        assert!(map.meta_group() && !map.holds_data(0) && map.holds_data(3) && !map.holds_data(4));
        let mut counts = [0u32; 4];
        for a in 0..30_000 {
            counts[map.account_group(AccountId(a))] += 1;
        }
        assert_eq!(counts[0], 0);
        assert!(counts[1..].iter().all(|&n| (9_000..11_000).contains(&n)), "{counts:?}");
        let books: Vec<usize> = (0..6).map(|s| map.symbol_group(SymbolId(s))).collect();
        assert_eq!(books, [1, 2, 3, 1, 2, 3]);
        assert!(!ShardMap::new(4).meta_group() && ShardMap::new(4).holds_data(0));
    }
}
