//! Snapshots and the state hash, over one canonical encoding.
//!
//! The encoding lists everything that can influence a future event, in an order that
//! does not depend on how a book or a hash map lays out its contents: books as their
//! orders in priority order (bids best first, then asks best first, each level in time
//! priority), everything keyed by id sorted by id. Derived indexes (name maps, open
//! order counts) are left out and rebuilt on restore. Two engines in the same state
//! therefore encode to the same bytes, whichever book they use, and
//! [`Engine::state_hash`] is the BLAKE3 hash of those bytes.

use serde::{Deserialize, Serialize};

use crate::account::{Account, Balance, Position};
use crate::book::{Book, RestingOrder};
use crate::command::{MarginSpec, SymbolSpec};
use crate::engine::{Asset, Engine, EngineConfig, OrderRecord, StopOrder, Stops, Symbol};
use crate::margin::Margin;
use crate::session::Session;
use crate::types::{AccountId, AssetId, ClientId, Px, Side, SymbolId};

/// Format version of [`Engine::snapshot`]; bumped on any change to the encoding.
/// 2: accounts carry their external id, order records their closing stamp.
/// 3: the day-trading ledger.
/// 4: sessions keep their day-trading commands' results.
/// 5: client records expire: each keeps its last command's stamp, the engine its next
///    sweep; the configuration has `clients_max` and `client_expiry_secs`.
/// 6: the fairness delays set through the log.
/// 7: margin symbols (their rules and operator mark), positions, bad debt per asset.
/// 8: the number of trading days closed.
pub const SNAPSHOT_VERSION: u32 = 8;

#[derive(Serialize, Deserialize)]
struct SymbolImage {
    spec: SymbolSpec,
    last_px: Option<Px>,
    orders: Vec<RestingOrder>,
    stops: Vec<StopOrder>,
    margin: Option<(MarginSpec, Option<Px>)>,
}

#[derive(Serialize, Deserialize)]
struct AccountImage {
    suspended: bool,
    balances: Vec<(AssetId, Balance)>,
    external_id: Option<u64>,
    /// `(symbol, size, cost, realised)` of each position (open orders' quantities and
    /// the liquidation index are derived).
    positions: Vec<(SymbolId, i64, i64, i64)>,
}

#[derive(Serialize, Deserialize)]
struct Image {
    version: u32,
    config: EngineConfig,
    next_order_id: u64,
    ts_last: u64,
    days_closed: u64,
    assets: Vec<Asset>,
    symbols: Vec<SymbolImage>,
    accounts: Vec<AccountImage>,
    sessions: Vec<(ClientId, Session)>,
    sessions_sweep_at: u64,
    orders: Vec<OrderRecord>,
    orders_closed: Vec<OrderRecord>,
    day_trading: crate::daytrading::DtImage,
    fairness: Option<crate::engine::Fairness>,
}

/// Why a snapshot could not be restored.
#[derive(Debug, PartialEq, Eq)]
pub enum SnapshotError {
    Decode(String),
    Version(u32),
    Inconsistent(&'static str),
}

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SnapshotError::Decode(e) => write!(f, "snapshot does not decode: {e}"),
            SnapshotError::Version(v) => {
                write!(f, "snapshot version {v} is not {SNAPSHOT_VERSION}")
            }
            SnapshotError::Inconsistent(what) => write!(f, "snapshot is inconsistent: {what}"),
        }
    }
}

impl std::error::Error for SnapshotError {}

impl<B: Book> Engine<B> {
    fn image(&self) -> Image {
        let symbols = self
            .symbols
            .iter()
            .map(|symbol| {
                let mut orders = Vec::with_capacity(symbol.book.len());
                for side in [Side::Buy, Side::Sell] {
                    symbol.book.visit(side, |order| {
                        orders.push(*order);
                        true
                    });
                }
                SymbolImage {
                    spec: symbol.spec.clone(),
                    last_px: symbol.last_px,
                    orders,
                    stops: symbol.stops.by_id.values().copied().collect(),
                    margin: symbol.margin.as_ref().map(|m| (m.spec, m.mark_set)),
                }
            })
            .collect();
        let accounts = self
            .accounts
            .iter()
            .map(|a| AccountImage {
                suspended: a.suspended,
                balances: a.balances.clone(),
                external_id: a.external_id,
                positions: a
                    .positions
                    .iter()
                    .filter(|(_, p)| p.size != 0 || p.realized != 0)
                    .map(|(sym, p)| (*sym, p.size, p.cost, p.realized))
                    .collect(),
            })
            .collect();
        let mut sessions: Vec<(ClientId, Session)> = self.sessions.clone();
        sessions.sort_unstable_by_key(|(client, _)| *client);
        let mut orders: Vec<OrderRecord> = self.orders.values().cloned().collect();
        orders.sort_unstable_by_key(|record| record.id);
        Image {
            version: SNAPSHOT_VERSION,
            config: self.config,
            next_order_id: self.next_order_id,
            ts_last: self.ts_last,
            days_closed: self.days_closed,
            assets: self.assets.clone(),
            symbols,
            accounts,
            sessions,
            sessions_sweep_at: self.sessions_sweep_at,
            orders,
            orders_closed: self.orders_closed.iter().cloned().collect(),
            day_trading: self.day_trading.image(),
            fairness: self.fairness,
        }
    }

    /// The whole state in its canonical encoding.
    pub fn snapshot(&self) -> Vec<u8> {
        postcard::to_allocvec(&self.image()).expect("encoding to memory cannot fail")
    }

    /// BLAKE3 of [`Engine::snapshot`]: equal states have equal hashes whatever the book.
    pub fn state_hash(&self) -> [u8; 32] {
        *blake3::hash(&self.snapshot()).as_bytes()
    }

    /// Rebuilds an engine from [`Engine::snapshot`] bytes.
    pub fn restore(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let image: Image = postcard::from_bytes(bytes).map_err(|e| SnapshotError::Decode(e.to_string()))?;
        if image.version != SNAPSHOT_VERSION {
            return Err(SnapshotError::Version(image.version));
        }
        let mut engine = Engine::<B>::new(image.config);
        engine.next_order_id = image.next_order_id;
        engine.ts_last = image.ts_last;
        engine.days_closed = image.days_closed;
        for (i, asset) in image.assets.into_iter().enumerate() {
            engine.asset_names.insert(asset.name.clone(), AssetId(i as u32));
            engine.assets.push(asset);
        }
        engine.accounts = image
            .accounts
            .into_iter()
            .map(|a| Account {
                suspended: a.suspended,
                balances: a.balances,
                open_orders: 0,
                external_id: a.external_id,
                positions: a
                    .positions
                    .into_iter()
                    .map(|(sym, size, cost, realized)| (sym, Position { size, cost, realized, ..Position::default() }))
                    .collect(),
            })
            .collect();
        for (i, account) in engine.accounts.iter().enumerate() {
            if let Some(external_id) = account.external_id {
                if engine.accounts_by_external.insert(external_id, AccountId(i as u32)).is_some() {
                    return Err(SnapshotError::Inconsistent("external account id listed twice"));
                }
            }
        }
        for (i, image) in image.symbols.into_iter().enumerate() {
            let margin = image.margin.map(|(spec, mark_set)| {
                let mut margin = Margin::new(spec);
                margin.mark_set = mark_set;
                Box::new(margin)
            });
            let sym = SymbolId(i as u32);
            if let Some(margin) = &margin {
                engine.margin_symbols += 1;
                engine.insurers.insert((image.spec.quote, margin.spec.insurance));
            }
            let margined = margin.is_some();
            let mut symbol = Symbol {
                book: B::new(image.spec.tick),
                spec: image.spec,
                last_px: image.last_px,
                stops: Stops::default(),
                margin,
            };
            for order in image.orders {
                let holder = engine
                    .accounts
                    .get_mut(order.account.0 as usize)
                    .ok_or(SnapshotError::Inconsistent("order of unknown account"))?;
                holder.open_orders += 1;
                if margined {
                    let position = holder.position_mut(sym);
                    match order.side {
                        Side::Buy => position.buying += order.qty_remaining().0,
                        Side::Sell => position.selling += order.qty_remaining().0,
                    }
                }
                if symbol.book.get(order.id).is_some() {
                    return Err(SnapshotError::Inconsistent("order listed twice"));
                }
                symbol.book.insert(order);
            }
            for stop in image.stops {
                let holder = engine
                    .accounts
                    .get_mut(stop.request.account.0 as usize)
                    .ok_or(SnapshotError::Inconsistent("stop of unknown account"))?;
                holder.open_orders += 1;
                if margined {
                    let position = holder.position_mut(sym);
                    match stop.request.side {
                        Side::Buy => position.buying += stop.request.qty.0,
                        Side::Sell => position.selling += stop.request.qty.0,
                    }
                }
                if !symbol.stops.insert(stop) {
                    return Err(SnapshotError::Inconsistent("stop without trigger"));
                }
            }
            engine.symbol_names.insert(symbol.spec.name.clone(), sym);
            engine.symbols.push(symbol);
        }
        let mut positions = Vec::new();
        for (i, account) in engine.accounts.iter().enumerate() {
            for (sym, _) in &account.positions {
                let symbol = engine.symbols.get(sym.0 as usize).filter(|s| s.margin.is_some());
                let symbol =
                    symbol.ok_or(SnapshotError::Inconsistent("position in a symbol that is not a margin symbol"))?;
                positions.push((AccountId(i as u32), symbol.spec.quote));
            }
        }
        positions.dedup();
        for (account, asset) in positions {
            engine.margin_refresh(account, asset);
        }
        for (slot, (client, _)) in image.sessions.iter().enumerate() {
            if engine.session_slots.insert(*client, slot as u32).is_some() {
                return Err(SnapshotError::Inconsistent("client listed twice"));
            }
        }
        engine.sessions = image.sessions;
        if engine.sessions.len() > image.config.clients_max as usize {
            return Err(SnapshotError::Inconsistent("more clients than clients_max"));
        }
        engine.sessions_sweep_at = image.sessions_sweep_at;
        engine.orders = image.orders.into_iter().map(|r| (r.id, r)).collect();
        engine.orders_closed = image.orders_closed.into_iter().collect();
        engine.day_trading = crate::daytrading::DayTrading::restore(image.config.day_trading, image.day_trading)?;
        engine.fairness = image.fairness;
        Ok(engine)
    }
}

/// Lower-case hex of a hash, for logs and JSON.
pub fn hex(hash: &[u8]) -> String {
    hash.iter().map(|b| format!("{b:02x}")).collect()
}
