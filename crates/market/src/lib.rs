//! Market data derived from the order-level feed.
//!
//! A gateway follows a replica's `GatewayLink.Feed`: a [`proto::BookImage`], then one
//! [`proto::FeedEntry`] per log entry with order events (one message also accounts for
//! the entries without any before it: `from_index`). [`MarketState`] keeps the L3 books it describes
//! and turns every entry into the updates of each `MarketData` channel:
//! - `CHANNEL_ORDERS`: the entry's [`proto::OrderEvent`]s, stamped with a per-symbol
//!   `symbol_seq` (1, 2, 3, ...);
//! - `CHANNEL_TRADES`: a [`proto::TradeUpdate`] per execution, named by
//!   `(log_index, trade_seq)`;
//! - `CHANNEL_L2`: an [`proto::L2Update`] per price level whose displayed quantity the
//!   entry changed (one per level per entry, with the new absolute quantity), numbered
//!   per symbol by its own `symbol_seq` that [`proto::L2Snapshot`]s share;
//! - `CHANNEL_BBO`: a [`proto::BboUpdate`] when the entry changed a symbol's best bid or
//!   offer (price or quantity);
//! - `CHANNEL_STATS`: a [`proto::SymbolStats`] of every symbol that traded in the entry.
//!
//! [`L2Book`] is the subscriber's side of `CHANNEL_L2`: a book from a snapshot, kept by
//! updates, that notices a gap and recovers with a new snapshot.
//!
//! Everything here is pure: no clock, no I/O. The caller stamps `seq` (per subscriber
//! stream) and `release_ts` on what it sends.

mod l2;
mod state;

pub use bourse_protocol::proto;
pub use l2::{Gap, L2Book};
pub use state::{FeedError, MarketState};

use proto::market_data_update::Update;
use proto::order_event::Event as OrderEventKind;

/// The channel an update belongs to; `CHANNEL_UNSPECIFIED` for a heartbeat (every
/// stream gets it) or an empty update.
pub fn channel(update: &proto::MarketDataUpdate) -> proto::Channel {
    match &update.update {
        Some(Update::Trade(_)) => proto::Channel::Trades,
        Some(Update::Bbo(_)) => proto::Channel::Bbo,
        Some(Update::L2Snapshot(_) | Update::L2Update(_)) => proto::Channel::L2,
        Some(Update::Order(_)) => proto::Channel::Orders,
        Some(Update::Stats(_)) => proto::Channel::Stats,
        Some(Update::Heartbeat(_)) | None => proto::Channel::Unspecified,
    }
}

/// The symbol an update is about; `None` for a heartbeat or an empty update.
pub fn symbol(update: &proto::MarketDataUpdate) -> Option<u32> {
    match &update.update {
        Some(Update::Trade(u)) => Some(u.symbol),
        Some(Update::Bbo(u)) => Some(u.symbol),
        Some(Update::L2Snapshot(u)) => Some(u.symbol),
        Some(Update::L2Update(u)) => Some(u.symbol),
        Some(Update::Order(u)) => Some(u.symbol),
        Some(Update::Stats(u)) => Some(u.symbol),
        Some(Update::Heartbeat(_)) | None => None,
    }
}

/// True for an `OrderEvent` that announces a new symbol (which every subscriber that
/// follows all symbols may want, whatever its channels).
pub fn is_symbol_added(update: &proto::MarketDataUpdate) -> bool {
    matches!(&update.update, Some(Update::Order(proto::OrderEvent { event: Some(OrderEventKind::SymbolAdded(_)), .. })))
}
