//! The generator's view of the resting orders: per symbol and side, who owns each order,
//! its price and its remaining quantity.
//!
//! Kept current from the engine's events ([`Tracker::observe`]), or filled directly with
//! predicted orders when a pre-fill is known to be accepted as is. Picking a random
//! resting order is O(1): each side is a vector, removal swaps the last entry into the
//! hole, and a slot per order id (ids are dense, 1, 2, 3, …) finds an order's position.
//!
//! Invariant: `slots[id]` names a position exactly when order `id` is in a side vector
//! at that position. Known limit: the slot table grows with the highest order id seen
//! (12 bytes per id), not with the number of resting orders.

use bourse_engine::{AccountId, Event, OrderId, Px, Qty, Side, SymbolId};
use rand::Rng;

/// One resting order as the generator knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resting {
    pub id: OrderId,
    pub account: AccountId,
    pub px: Px,
    pub qty: Qty,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    symbol: u32,
    side: u8,
    pos: u32,
}

const POS_ABSENT: u32 = u32::MAX;
const SLOT_ABSENT: Slot = Slot { symbol: 0, side: 0, pos: POS_ABSENT };

/// Resting orders of every symbol, by side.
#[derive(Clone, Debug)]
pub struct Tracker {
    books: Vec<[Vec<Resting>; 2]>,
    slots: Vec<Slot>,
    resting_total: usize,
}

impl Tracker {
    pub fn new(symbols: u32) -> Self {
        Tracker { books: (0..symbols).map(|_| [Vec::new(), Vec::new()]).collect(), slots: Vec::new(), resting_total: 0 }
    }

    /// Resting orders on one side of one book.
    pub fn len(&self, symbol: SymbolId, side: Side) -> usize {
        self.books[symbol.0 as usize][side.index()].len()
    }

    /// Resting orders in one book.
    pub fn book_len(&self, symbol: SymbolId) -> usize {
        let book = &self.books[symbol.0 as usize];
        book[0].len() + book[1].len()
    }

    /// Resting orders in all books.
    pub fn resting_total(&self) -> usize {
        self.resting_total
    }

    pub fn is_empty(&self) -> bool {
        self.resting_total == 0
    }

    /// The order at `pos` on one side (positions change as orders leave).
    pub fn get(&self, symbol: SymbolId, side: Side, pos: usize) -> Resting {
        self.books[symbol.0 as usize][side.index()][pos]
    }

    /// A uniformly random resting order of one side.
    pub fn pick_side(&self, symbol: SymbolId, side: Side, rng: &mut impl Rng) -> Option<Resting> {
        let orders = &self.books[symbol.0 as usize][side.index()];
        if orders.is_empty() {
            return None;
        }
        Some(orders[rng.gen_range(0..orders.len())])
    }

    /// A uniformly random resting order of a book, either side.
    pub fn pick(&self, symbol: SymbolId, rng: &mut impl Rng) -> Option<(Side, Resting)> {
        let book = &self.books[symbol.0 as usize];
        let total = book[0].len() + book[1].len();
        if total == 0 {
            return None;
        }
        let pos = rng.gen_range(0..total);
        Some(match pos.checked_sub(book[0].len()) {
            None => (Side::Buy, book[0][pos]),
            Some(pos) => (Side::Sell, book[1][pos]),
        })
    }

    /// Adds a resting order. Its id must not be resting already.
    pub fn insert(&mut self, symbol: SymbolId, side: Side, order: Resting) {
        let id = order.id.0 as usize;
        if self.slots.len() <= id {
            self.slots.resize(id + 1, SLOT_ABSENT);
        }
        assert_eq!(self.slots[id].pos, POS_ABSENT, "order {} tracked twice", order.id);
        let orders = &mut self.books[symbol.0 as usize][side.index()];
        self.slots[id] = Slot { symbol: symbol.0, side: side.index() as u8, pos: orders.len() as u32 };
        orders.push(order);
        self.resting_total += 1;
    }

    /// Removes an order if it is tracked.
    pub fn remove(&mut self, id: OrderId) -> Option<Resting> {
        let slot = *self.slots.get(id.0 as usize)?;
        if slot.pos == POS_ABSENT {
            return None;
        }
        self.slots[id.0 as usize] = SLOT_ABSENT;
        let orders = &mut self.books[slot.symbol as usize][usize::from(slot.side)];
        let removed = orders.swap_remove(slot.pos as usize);
        if let Some(moved) = orders.get(slot.pos as usize) {
            self.slots[moved.id.0 as usize].pos = slot.pos;
        }
        self.resting_total -= 1;
        Some(removed)
    }

    fn order_mut(&mut self, id: OrderId) -> Option<&mut Resting> {
        let slot = *self.slots.get(id.0 as usize)?;
        if slot.pos == POS_ABSENT {
            return None;
        }
        Some(&mut self.books[slot.symbol as usize][usize::from(slot.side)][slot.pos as usize])
    }

    /// Brings the view up to date with the events of one command sent by `account`
    /// (the owner of any order that command rests).
    pub fn observe(&mut self, account: AccountId, events: &[Event]) {
        for event in events {
            match *event {
                Event::Rested { order, symbol, side, px, qty_visible } => {
                    self.insert(symbol, side, Resting { id: order, account, px, qty: qty_visible });
                }
                // A moved order leaves the book and comes back with `Rested` if it still rests.
                Event::Moved { order, .. } | Event::Cancelled { order, .. } => {
                    self.remove(order);
                }
                Event::Trade { maker_order, qty, maker_done, .. } => {
                    if maker_done {
                        self.remove(maker_order);
                    } else if let Some(maker) = self.order_mut(maker_order) {
                        maker.qty.0 -= qty.0;
                    }
                }
                Event::Reduced { order, qty_remaining, .. } => {
                    if let Some(reduced) = self.order_mut(order) {
                        reduced.qty = qty_remaining;
                    }
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(id: u64) -> Resting {
        Resting { id: OrderId(id), account: AccountId(7), px: Px(100 + id as i64), qty: Qty(5) }
    }

    #[test]
    fn removal_keeps_positions_consistent() {
        let mut tracker = Tracker::new(2);
        for id in 1..=5 {
            tracker.insert(SymbolId(1), Side::Sell, order(id));
        }
        assert_eq!(tracker.remove(OrderId(2)).map(|o| o.id), Some(OrderId(2)));
        assert_eq!(tracker.remove(OrderId(2)), None);
        assert_eq!(tracker.remove(OrderId(5)).map(|o| o.id), Some(OrderId(5)));
        assert_eq!(tracker.remove(OrderId(1)).map(|o| o.id), Some(OrderId(1)));
        assert_eq!(tracker.len(SymbolId(1), Side::Sell), 2);
        assert_eq!(tracker.resting_total(), 2);
        let mut left: Vec<u64> = (0..2).map(|pos| tracker.get(SymbolId(1), Side::Sell, pos).id.0).collect();
        left.sort_unstable();
        assert_eq!(left, vec![3, 4]);
    }

    #[test]
    fn observe_follows_fills_reductions_and_moves() {
        let mut tracker = Tracker::new(1);
        let sym = SymbolId(0);
        let rested = |id: u64, px: i64, qty: i64| Event::Rested {
            order: OrderId(id),
            symbol: sym,
            side: Side::Sell,
            px: Px(px),
            qty_visible: Qty(qty),
        };
        tracker.observe(AccountId(1), &[rested(1, 100, 10), rested(2, 101, 10)]);
        tracker.observe(
            AccountId(2),
            &[Event::Trade {
                symbol: sym,
                px: Px(100),
                qty: Qty(4),
                taker_side: Side::Buy,
                maker_order: OrderId(1),
                taker_order: OrderId(3),
                maker_account: AccountId(1),
                taker_account: AccountId(2),
                fee_maker: bourse_engine::Amount(0),
                fee_taker: bourse_engine::Amount(0),
                maker_done: false,
            }],
        );
        tracker.observe(AccountId(1), &[Event::Reduced { order: OrderId(2), qty_by: Qty(3), qty_remaining: Qty(7) }]);
        tracker.observe(AccountId(1), &[Event::Moved { order: OrderId(2), px: Px(99) }, rested(2, 99, 7)]);
        let mut seen: Vec<Resting> = (0..2).map(|pos| tracker.get(sym, Side::Sell, pos)).collect();
        seen.sort_unstable_by_key(|o| o.id);
        assert_eq!(seen[0].qty, Qty(6));
        assert_eq!((seen[1].px, seen[1].qty, seen[1].account), (Px(99), Qty(7), AccountId(1)));
    }
}
