//! The reference book: ordered maps of queues, written to be obviously right.
//!
//! Cancel and fill are linear in the level's length; nothing here is tuned. Its only
//! job is to be the slow twin that [`super::FastBook`] is checked against.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::{Book, FillEffect, RestingOrder};
use crate::types::{OrderId, Px, Qty, Side};

#[derive(Clone, Debug, Default)]
pub struct ReferenceBook {
    /// Per side: price → orders in time priority.
    sides: [BTreeMap<Px, VecDeque<RestingOrder>>; 2],
    /// Where each resting order is.
    index: HashMap<OrderId, (Side, Px)>,
}

impl ReferenceBook {
    fn queue_mut(&mut self, id: OrderId) -> Option<(&mut VecDeque<RestingOrder>, usize)> {
        let (side, px) = *self.index.get(&id)?;
        let queue = self.sides[side.index()].get_mut(&px).expect("indexed level exists");
        let position = queue.iter().position(|o| o.id == id).expect("indexed order in level");
        Some((queue, position))
    }

    fn drop_level_if_empty(&mut self, side: Side, px: Px) {
        if self.sides[side.index()].get(&px).is_some_and(VecDeque::is_empty) {
            self.sides[side.index()].remove(&px);
        }
    }
}

impl Book for ReferenceBook {
    fn new(_tick: Px) -> Self {
        ReferenceBook::default()
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn best(&self, side: Side) -> Option<Px> {
        let levels = &self.sides[side.index()];
        match side {
            Side::Buy => levels.keys().next_back().copied(),
            Side::Sell => levels.keys().next().copied(),
        }
    }

    fn front(&self, side: Side) -> Option<&RestingOrder> {
        let px = self.best(side)?;
        self.sides[side.index()][&px].front()
    }

    fn get(&self, id: OrderId) -> Option<&RestingOrder> {
        let (side, px) = self.index.get(&id)?;
        self.sides[side.index()][px].iter().find(|o| o.id == id)
    }

    fn insert(&mut self, order: RestingOrder) {
        let previous = self.index.insert(order.id, (order.side, order.px));
        assert!(previous.is_none(), "order {} inserted twice", order.id);
        self.sides[order.side.index()].entry(order.px).or_default().push_back(order);
    }

    fn remove(&mut self, id: OrderId) -> Option<RestingOrder> {
        let (queue, position) = self.queue_mut(id)?;
        let order = queue.remove(position).expect("position is valid");
        self.index.remove(&id);
        self.drop_level_if_empty(order.side, order.px);
        Some(order)
    }

    fn fill(&mut self, id: OrderId, qty: Qty) -> FillEffect {
        let (queue, position) = self.queue_mut(id).expect("filled order rests");
        let order = &mut queue[position];
        assert!(qty.0 > 0 && qty <= order.qty_visible, "fill exceeds visible quantity");
        order.qty_visible.0 -= qty.0;
        if order.qty_visible.0 > 0 {
            return FillEffect::Partial;
        }
        if order.qty_hidden.0 > 0 {
            let slice = order.display.min(order.qty_hidden);
            order.qty_visible = slice;
            order.qty_hidden.0 -= slice.0;
            let refreshed = queue.remove(position).expect("position is valid");
            queue.push_back(refreshed);
            return FillEffect::Refreshed { qty_visible: slice };
        }
        FillEffect::Done(self.remove(id).expect("order rests"))
    }

    fn reduce(&mut self, id: OrderId, qty_by: Qty) {
        let (queue, position) = self.queue_mut(id).expect("reduced order rests");
        let order = &mut queue[position];
        assert!(qty_by.0 > 0 && qty_by < order.qty_remaining(), "reduce must leave a remainder");
        let from_hidden = qty_by.min(order.qty_hidden);
        order.qty_hidden.0 -= from_hidden.0;
        order.qty_visible.0 -= qty_by.0 - from_hidden.0;
    }

    fn visit(&self, side: Side, mut visit: impl FnMut(&RestingOrder) -> bool) {
        let levels = &self.sides[side.index()];
        let mut orders: Box<dyn Iterator<Item = &RestingOrder>> = match side {
            Side::Buy => Box::new(levels.values().rev().flatten()),
            Side::Sell => Box::new(levels.values().flatten()),
        };
        orders.try_for_each(|o| if visit(o) { Some(()) } else { None });
    }

    fn level(&self, side: Side, px: Px, out: &mut Vec<RestingOrder>) {
        out.clear();
        if let Some(queue) = self.sides[side.index()].get(&px) {
            out.extend(queue.iter().copied());
        }
    }

    fn check_invariants(&self) {
        let mut count = 0;
        for side in [Side::Buy, Side::Sell] {
            for (px, queue) in &self.sides[side.index()] {
                assert!(!queue.is_empty(), "empty level kept at {px}");
                for order in queue {
                    assert_eq!((order.side, order.px), (side, *px), "order {} misplaced", order.id);
                    assert_eq!(self.index.get(&order.id), Some(&(side, *px)), "index disagrees");
                    assert!(order.qty_visible.0 > 0 && order.qty_hidden.0 >= 0);
                    count += 1;
                }
            }
        }
        assert_eq!(count, self.index.len(), "index has orders not in any level");
    }
}
