//! Order books: one trait, two implementations.
//!
//! [`ReferenceBook`] is deliberately simple (ordered maps of queues, linear scans) and
//! exists to be obviously right. [`FastBook`] is the one the exchange runs: an order
//! slab with intrusive per-level lists (O(1) cancel), a hashed order index, and a price
//! ladder of 64-tick blocks with occupancy bitmaps so the best price is found with a
//! bit scan. Property tests drive both with the same commands and require identical
//! events and state hashes.
//!
//! A book holds only resting limit orders and knows nothing about accounts, balances
//! or fees; matching decisions live in the engine, which uses the primitives below.

mod fast;
mod reference;

pub use fast::FastBook;
pub use reference::ReferenceBook;

use serde::{Deserialize, Serialize};

use crate::command::Stp;
use crate::types::{AccountId, OrderId, Px, Qty, Side, Timestamp};

/// A limit order resting in a book.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RestingOrder {
    pub id: OrderId,
    pub account: AccountId,
    pub side: Side,
    pub px: Px,
    /// The quantity shown and tradable at this order's place in the queue.
    pub qty_visible: Qty,
    /// Iceberg reserve, shown a slice at a time.
    pub qty_hidden: Qty,
    /// Iceberg slice size; zero for an ordinary order.
    pub display: Qty,
    /// When the order was placed or last moved.
    pub ts: Timestamp,
    /// Self-trade prevention to apply if the order is moved and trades again.
    pub stp: Stp,
    /// A moved post-only order must still not take liquidity.
    pub post_only: bool,
}

impl RestingOrder {
    /// Visible plus hidden quantity.
    pub fn qty_remaining(&self) -> Qty {
        Qty(self.qty_visible.0 + self.qty_hidden.0)
    }
}

/// What a fill did to a resting order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FillEffect {
    /// Some visible quantity is left; the order keeps its place.
    Partial,
    /// The visible slice was used up and a new one was shown from the reserve; the
    /// order went to the back of its level.
    Refreshed { qty_visible: Qty },
    /// Nothing is left; the order has left the book.
    Done(RestingOrder),
}

/// The primitives the engine needs from an order book of one symbol.
pub trait Book: Clone {
    /// An empty book whose prices are multiples of `tick`.
    fn new(tick: Px) -> Self;
    /// Number of resting orders.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The best price of a side.
    fn best(&self, side: Side) -> Option<Px>;
    /// The order with time priority at the best price of a side.
    fn front(&self, side: Side) -> Option<&RestingOrder>;
    fn get(&self, id: OrderId) -> Option<&RestingOrder>;
    /// Appends an order at the back of its price level. The id must not be resting.
    fn insert(&mut self, order: RestingOrder);
    fn remove(&mut self, id: OrderId) -> Option<RestingOrder>;
    /// Moves a resting order to the back of the level at `px`, showing `qty_visible`
    /// with `qty_hidden` in reserve: exactly what removing it and inserting the changed
    /// order would do, which is the default.
    fn reprice(&mut self, id: OrderId, px: Px, qty_visible: Qty, qty_hidden: Qty, ts: Timestamp) {
        let mut order = self.remove(id).expect("repriced order rests");
        order.px = px;
        order.qty_visible = qty_visible;
        order.qty_hidden = qty_hidden;
        order.ts = ts;
        self.insert(order);
    }
    /// Takes `qty` (at most the visible quantity) off a resting order.
    fn fill(&mut self, id: OrderId, qty: Qty) -> FillEffect;
    /// Takes `qty_by` (less than the remaining quantity) off a resting order, reserve
    /// first, keeping its place in the queue.
    fn reduce(&mut self, id: OrderId, qty_by: Qty);
    /// Visits the orders of a side in priority order until `visit` returns false.
    fn visit(&self, side: Side, visit: impl FnMut(&RestingOrder) -> bool);
    /// The orders of one price level in time priority.
    fn level(&self, side: Side, px: Px, out: &mut Vec<RestingOrder>);
    /// Up to `levels_max` levels of a side as (price, visible quantity), best first.
    fn depth(&self, side: Side, levels_max: usize) -> Vec<(Px, Qty)> {
        let mut depth: Vec<(Px, Qty)> = Vec::new();
        self.visit(side, |order| {
            match depth.last_mut() {
                Some((px, qty)) if *px == order.px => qty.0 += order.qty_visible.0,
                _ => {
                    if depth.len() == levels_max {
                        return false;
                    }
                    depth.push((order.px, order.qty_visible));
                }
            }
            true
        });
        depth
    }
    /// Panics when the book's internal structure is inconsistent.
    fn check_invariants(&self);
}
