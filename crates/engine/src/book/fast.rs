//! The fast book: order slab, intrusive level queues, bitmap price ladder.
//!
//! Layout:
//! - `nodes`: a slab of orders, each with `prev`/`next` links inside its price level,
//!   so cancelling any order is O(1) once found; freed slots are reused.
//! - `index`: order id → slab slot (an Fx hash map: ids are sequential integers and
//!   never iterated, so the map's order cannot leak into any output).
//! - one [`Ladder`] per side: price → level, in 64-price blocks. Each block has a
//!   64-bit occupancy bitmap and the level slots; an ordered set of occupied block
//!   numbers is touched only when a block becomes empty or occupied. The best price is
//!   cached; when its level empties the next one is found with one bit scan in the same
//!   block, or one ordered-set step.
//! - finding a block: a hash map (block number → pool index) always holds every
//!   occupied block. While the occupied blocks span at most `DENSE_SPAN_MAX` (4096
//!   blocks, 262,144 prices with a tick of one) a dense table indexed by block number
//!   minus a base holds the same entries (`NIL` for the rest of its range), and every
//!   level access uses it instead of hashing: level accesses are on every insert, move
//!   and cancel, block changes are rare. Invariant: when the table is on, every
//!   occupied block lies in its range and both agree (checked by `check_invariants`).
//!   A new block outside the range rebuilds the table over the occupied span plus some
//!   slack, or turns it off when that span is too wide; a later new block turns it back
//!   on once the span is narrow again. Removing a block only clears its entry.
//!
//! Complexity: insert, cancel and fill are O(1) expected, except when a level empties
//! or occupies a block (O(log blocks)), and when a new block lies outside the dense
//! table's range (a rebuild, O(`DENSE_SPAN_MAX` + blocks)). Iterating a side is
//! O(levels + orders).
//!
//! Prices are used as ladder keys directly (not divided by the tick): with a tick of
//! one every bit is a possible level; with a larger tick blocks are sparser, which
//! costs memory, not correctness.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use super::{Book, FillEffect, RestingOrder};
use crate::types::{OrderId, Px, Qty, Side, Timestamp};

const NIL: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct Node {
    order: RestingOrder,
    prev: u32,
    next: u32,
    level: u32,
}

#[derive(Clone, Debug)]
struct Level {
    px: Px,
    head: u32,
    tail: u32,
    count: u32,
    qty_visible: i64,
}

#[derive(Clone, Debug)]
struct Block {
    bits: u64,
    slots: [u32; 64],
}

/// Price → level for one side.
#[derive(Clone, Debug)]
struct Ladder {
    side: Side,
    blocks: FxHashMap<i64, u32>,
    /// Dense copy of `blocks` when on: `dense[block - dense_base]` is the block's pool
    /// index or `NIL`, and every block in `blocks` lies in the covered range, so a
    /// block outside it is empty without hashing. Off (empty) when the occupied blocks
    /// span more than [`DENSE_SPAN_MAX`].
    dense: Vec<u32>,
    dense_base: i64,
    pool: Vec<Block>,
    pool_free: Vec<u32>,
    occupied: BTreeSet<i64>,
    best: Option<i64>,
}

/// The widest range of blocks (64 prices each) the dense block table covers.
const DENSE_SPAN_MAX: i64 = 4096;
/// Blocks added either side of the occupied span when the dense table is rebuilt, so a
/// drifting price does not rebuild it at every new block.
const DENSE_SLACK: i64 = 64;

fn split(key: i64) -> (i64, u32) {
    (key >> 6, (key & 63) as u32)
}

impl Ladder {
    fn new(side: Side) -> Self {
        Ladder {
            side,
            blocks: FxHashMap::default(),
            dense: Vec::new(),
            dense_base: 0,
            pool: Vec::new(),
            pool_free: Vec::new(),
            occupied: BTreeSet::new(),
            best: None,
        }
    }

    /// The pool index of an occupied block: from the dense table when it is on, else
    /// from the hash map.
    fn block(&self, block: i64) -> Option<u32> {
        if self.dense.is_empty() {
            return self.blocks.get(&block).copied();
        }
        let index = *self.dense.get(block.wrapping_sub(self.dense_base) as u64 as usize)?;
        (index != NIL).then_some(index)
    }

    /// Records a new block in the dense table: in place when it is covered, else by
    /// rebuilding the table over the occupied span (plus slack), or turning it off when
    /// that span is too wide. `occupied` and `blocks` already include the block.
    fn dense_add(&mut self, block: i64, index: u32) {
        let offset = block.wrapping_sub(self.dense_base) as u64;
        if !self.dense.is_empty() && offset < self.dense.len() as u64 {
            self.dense[offset as usize] = index;
            return;
        }
        self.dense.clear();
        let (Some(&lo), Some(&hi)) = (self.occupied.first(), self.occupied.last()) else { return };
        if i128::from(hi) - i128::from(lo) >= i128::from(DENSE_SPAN_MAX) {
            return;
        }
        let slack = (DENSE_SPAN_MAX - 1 - (hi - lo)) / 2;
        let slack = slack.min(DENSE_SLACK);
        let (lo, hi) = (lo.saturating_sub(slack), hi.saturating_add(slack));
        self.dense_base = lo;
        self.dense.resize((hi - lo + 1) as usize, NIL);
        for (&b, &i) in &self.blocks {
            self.dense[(b - lo) as usize] = i;
        }
    }

    fn get(&self, key: i64) -> Option<u32> {
        let (block, bit) = split(key);
        let b = &self.pool[self.block(block)? as usize];
        (b.bits >> bit & 1 == 1).then(|| b.slots[bit as usize])
    }

    fn insert(&mut self, key: i64, level: u32) {
        let (block, bit) = split(key);
        let index = match self.block(block) {
            Some(index) => index,
            None => {
                let fresh = Block { bits: 0, slots: [NIL; 64] };
                let index = match self.pool_free.pop() {
                    Some(index) => {
                        self.pool[index as usize] = fresh;
                        index
                    }
                    None => {
                        self.pool.push(fresh);
                        (self.pool.len() - 1) as u32
                    }
                };
                self.blocks.insert(block, index);
                self.occupied.insert(block);
                self.dense_add(block, index);
                index
            }
        };
        let b = &mut self.pool[index as usize];
        debug_assert!(b.bits >> bit & 1 == 0, "level inserted twice");
        b.bits |= 1 << bit;
        b.slots[bit as usize] = level;
        if self.best.is_none_or(|best| self.side.better(Px(key), Px(best))) {
            self.best = Some(key);
        }
    }

    fn remove(&mut self, key: i64) {
        let (block, bit) = split(key);
        let index = self.block(block).expect("removed level's block exists");
        let b = &mut self.pool[index as usize];
        b.bits &= !(1 << bit);
        b.slots[bit as usize] = NIL;
        if b.bits == 0 {
            self.blocks.remove(&block);
            self.occupied.remove(&block);
            if !self.dense.is_empty() {
                self.dense[(block - self.dense_base) as usize] = NIL;
            }
            self.pool_free.push(index);
        }
        if self.best == Some(key) {
            self.best = self.next_worse(key);
        }
    }

    /// The next occupied key after `key` in priority order (`key` need not be occupied).
    fn next_worse(&self, key: i64) -> Option<i64> {
        let (block, bit) = split(key);
        if let Some(index) = self.block(block) {
            let bits = self.pool[index as usize].bits;
            let worse = match self.side {
                Side::Buy => bits & ((1u64 << bit) - 1),
                Side::Sell if bit == 63 => 0,
                Side::Sell => bits & (!0u64 << (bit + 1)),
            };
            if worse != 0 {
                return Some((block << 6) | i64::from(self.pick(worse)));
            }
        }
        let next = match self.side {
            Side::Buy => self.occupied.range(..block).next_back(),
            Side::Sell => self.occupied.range(block + 1..).next(),
        }?;
        let bits = self.pool[self.block(*next).expect("occupied block exists") as usize].bits;
        Some((next << 6) | i64::from(self.pick(bits)))
    }

    /// The best bit of a non-empty bitmap for this side.
    fn pick(&self, bits: u64) -> u32 {
        match self.side {
            Side::Buy => 63 - bits.leading_zeros(),
            Side::Sell => bits.trailing_zeros(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct FastBook {
    nodes: Vec<Node>,
    nodes_free: Vec<u32>,
    levels: Vec<Level>,
    levels_free: Vec<u32>,
    index: FxHashMap<OrderId, u32>,
    ladders: [Ladder; 2],
}

impl FastBook {
    fn level_of(&self, side: Side, px: Px) -> Option<&Level> {
        let level = self.ladders[side.index()].get(px.0)?;
        Some(&self.levels[level as usize])
    }

    fn alloc_level(&mut self, px: Px) -> u32 {
        let level = Level { px, head: NIL, tail: NIL, count: 0, qty_visible: 0 };
        match self.levels_free.pop() {
            Some(index) => {
                self.levels[index as usize] = level;
                index
            }
            None => {
                self.levels.push(level);
                (self.levels.len() - 1) as u32
            }
        }
    }

    /// The level at `px`, created empty if missing.
    fn level_for(&mut self, side: Side, px: Px) -> u32 {
        let ladder = &mut self.ladders[side.index()];
        match ladder.get(px.0) {
            Some(level) => level,
            None => {
                let level = self.alloc_level(px);
                self.ladders[side.index()].insert(px.0, level);
                level
            }
        }
    }

    fn alloc_node(&mut self, node: Node) -> u32 {
        match self.nodes_free.pop() {
            Some(index) => {
                self.nodes[index as usize] = node;
                index
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    /// Links a node at the tail of its level.
    fn link_back(&mut self, index: u32) {
        let level = self.nodes[index as usize].level;
        let tail = self.levels[level as usize].tail;
        {
            let node = &mut self.nodes[index as usize];
            node.prev = tail;
            node.next = NIL;
        }
        if tail == NIL {
            self.levels[level as usize].head = index;
        } else {
            self.nodes[tail as usize].next = index;
        }
        let l = &mut self.levels[level as usize];
        l.tail = index;
        l.count += 1;
    }

    /// Unlinks a node from its level's queue; the level may become empty.
    fn unlink(&mut self, index: u32) {
        let Node { prev, next, level, .. } = self.nodes[index as usize];
        if prev == NIL {
            self.levels[level as usize].head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.levels[level as usize].tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
        self.levels[level as usize].count -= 1;
    }

    fn remove_at(&mut self, index: u32) -> RestingOrder {
        self.unlink(index);
        let node = &self.nodes[index as usize];
        let (order, level) = (node.order, node.level);
        let l = &mut self.levels[level as usize];
        l.qty_visible -= order.qty_visible.0;
        if l.count == 0 {
            self.ladders[order.side.index()].remove(order.px.0);
            self.levels_free.push(level);
        }
        self.nodes_free.push(index);
        order
    }

    /// Levels of a side in priority order.
    fn levels_in_order(&self, side: Side) -> impl Iterator<Item = &Level> + '_ {
        let ladder = &self.ladders[side.index()];
        std::iter::successors(ladder.best, move |&key| ladder.next_worse(key))
            .map(move |key| &self.levels[ladder.get(key).expect("ladder key occupied") as usize])
    }

    /// Orders of a level in time priority.
    fn queue(&self, level: &Level) -> impl Iterator<Item = &RestingOrder> + '_ {
        std::iter::successors(Some(level.head).filter(|&i| i != NIL), move |&i| {
            Some(self.nodes[i as usize].next).filter(|&n| n != NIL)
        })
        .map(move |i| &self.nodes[i as usize].order)
    }
}

impl Book for FastBook {
    fn new(_tick: Px) -> Self {
        FastBook {
            nodes: Vec::new(),
            nodes_free: Vec::new(),
            levels: Vec::new(),
            levels_free: Vec::new(),
            index: FxHashMap::default(),
            ladders: [Ladder::new(Side::Buy), Ladder::new(Side::Sell)],
        }
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn best(&self, side: Side) -> Option<Px> {
        self.ladders[side.index()].best.map(Px)
    }

    fn front(&self, side: Side) -> Option<&RestingOrder> {
        let ladder = &self.ladders[side.index()];
        let level = ladder.get(ladder.best?)?;
        Some(&self.nodes[self.levels[level as usize].head as usize].order)
    }

    fn get(&self, id: OrderId) -> Option<&RestingOrder> {
        Some(&self.nodes[*self.index.get(&id)? as usize].order)
    }

    fn insert(&mut self, order: RestingOrder) {
        let level = self.level_for(order.side, order.px);
        let index = self.alloc_node(Node { order, prev: NIL, next: NIL, level });
        self.levels[level as usize].qty_visible += order.qty_visible.0;
        self.link_back(index);
        let previous = self.index.insert(order.id, index);
        assert!(previous.is_none(), "order {} inserted twice", order.id);
    }

    fn remove(&mut self, id: OrderId) -> Option<RestingOrder> {
        let index = self.index.remove(&id)?;
        Some(self.remove_at(index))
    }

    /// Relinks the same slot into the new level: no index update, no allocation.
    fn reprice(&mut self, id: OrderId, px: Px, qty_visible: Qty, qty_hidden: Qty, ts: Timestamp) {
        let index = *self.index.get(&id).expect("repriced order rests");
        self.unlink(index);
        let node = &self.nodes[index as usize];
        let (old, side, old_px, old_visible) = (node.level, node.order.side, node.order.px, node.order.qty_visible);
        let l = &mut self.levels[old as usize];
        l.qty_visible -= old_visible.0;
        if l.count == 0 {
            self.ladders[side.index()].remove(old_px.0);
            self.levels_free.push(old);
        }
        let level = self.level_for(side, px);
        let node = &mut self.nodes[index as usize];
        node.level = level;
        node.order.px = px;
        node.order.qty_visible = qty_visible;
        node.order.qty_hidden = qty_hidden;
        node.order.ts = ts;
        self.levels[level as usize].qty_visible += qty_visible.0;
        self.link_back(index);
    }

    fn fill(&mut self, id: OrderId, qty: Qty) -> FillEffect {
        let index = *self.index.get(&id).expect("filled order rests");
        let node = &mut self.nodes[index as usize];
        assert!(qty.0 > 0 && qty <= node.order.qty_visible, "fill exceeds visible quantity");
        node.order.qty_visible.0 -= qty.0;
        let level = node.level as usize;
        self.levels[level].qty_visible -= qty.0;
        let order = &mut self.nodes[index as usize].order;
        if order.qty_visible.0 > 0 {
            return FillEffect::Partial;
        }
        if order.qty_hidden.0 > 0 {
            let slice = order.display.min(order.qty_hidden);
            order.qty_visible = slice;
            order.qty_hidden.0 -= slice.0;
            self.levels[level].qty_visible += slice.0;
            self.unlink(index);
            self.link_back(index);
            return FillEffect::Refreshed { qty_visible: slice };
        }
        self.index.remove(&id);
        FillEffect::Done(self.remove_at(index))
    }

    fn reduce(&mut self, id: OrderId, qty_by: Qty) {
        let index = *self.index.get(&id).expect("reduced order rests");
        let node = &mut self.nodes[index as usize];
        let order = &mut node.order;
        assert!(qty_by.0 > 0 && qty_by < order.qty_remaining(), "reduce must leave a remainder");
        let from_hidden = qty_by.min(order.qty_hidden);
        let from_visible = qty_by.0 - from_hidden.0;
        order.qty_hidden.0 -= from_hidden.0;
        order.qty_visible.0 -= from_visible;
        self.levels[node.level as usize].qty_visible -= from_visible;
    }

    fn visit(&self, side: Side, mut visit: impl FnMut(&RestingOrder) -> bool) {
        for level in self.levels_in_order(side) {
            for order in self.queue(level) {
                if !visit(order) {
                    return;
                }
            }
        }
    }

    fn level(&self, side: Side, px: Px, out: &mut Vec<RestingOrder>) {
        out.clear();
        if let Some(level) = self.level_of(side, px) {
            out.extend(self.queue(level).copied());
        }
    }

    fn depth(&self, side: Side, levels_max: usize) -> Vec<(Px, Qty)> {
        self.levels_in_order(side).take(levels_max).map(|l| (l.px, Qty(l.qty_visible))).collect()
    }

    fn check_invariants(&self) {
        let mut count = 0usize;
        for side in [Side::Buy, Side::Sell] {
            let ladder = &self.ladders[side.index()];
            let mut previous: Option<Px> = None;
            let mut levels_seen = 0usize;
            for level in self.levels_in_order(side) {
                levels_seen += 1;
                if let Some(p) = previous {
                    assert!(side.better(p, level.px), "levels out of order at {}", level.px);
                }
                previous = Some(level.px);
                assert!(level.count > 0, "empty level kept at {}", level.px);
                let (mut n, mut qty, mut prev) = (0u32, 0i64, NIL);
                let mut cursor = level.head;
                while cursor != NIL {
                    let node = &self.nodes[cursor as usize];
                    assert_eq!(node.prev, prev, "broken back link in level {}", level.px);
                    assert_eq!((node.order.side, node.order.px), (side, level.px), "order misplaced");
                    assert_eq!(self.index.get(&node.order.id), Some(&cursor), "index disagrees");
                    assert!(node.order.qty_visible.0 > 0 && node.order.qty_hidden.0 >= 0);
                    qty += node.order.qty_visible.0;
                    n += 1;
                    prev = cursor;
                    cursor = node.next;
                }
                assert_eq!(level.tail, prev, "tail link wrong in level {}", level.px);
                assert_eq!((level.count, level.qty_visible), (n, qty), "level totals wrong");
                count += n as usize;
            }
            let bits: u32 = ladder.blocks.values().map(|&b| ladder.pool[b as usize].bits.count_ones()).sum();
            assert_eq!(bits as usize, levels_seen, "ladder bitmap disagrees with levels");
            assert_eq!(ladder.occupied.len(), ladder.blocks.len(), "occupied set disagrees");
            for (&block, &index) in &ladder.blocks {
                assert!(ladder.occupied.contains(&block), "block {block} not in occupied set");
                assert_eq!(ladder.block(block), Some(index), "dense block table disagrees at block {block}");
            }
            let dense_used = ladder.dense.iter().filter(|&&index| index != NIL).count();
            assert!(ladder.dense.is_empty() || dense_used == ladder.blocks.len(), "dense block table has extra blocks");
        }
        assert_eq!(count, self.index.len(), "index has orders not in any level");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::book::ReferenceBook;
    use crate::command::Stp;
    use crate::types::AccountId;

    fn order(id: u64, side: Side, px: i64) -> RestingOrder {
        RestingOrder {
            id: OrderId(id),
            account: AccountId(0),
            side,
            px: Px(px),
            qty_visible: Qty(1),
            qty_hidden: Qty(0),
            display: Qty(0),
            ts: id,
            stp: Stp::Allow,
            post_only: false,
        }
    }

    /// Prices near, far apart (the dense block table turns off) and drifting (it is
    /// rebuilt); the fast book must agree with the reference book throughout.
    #[test]
    fn dense_block_table_on_off_and_rebuilt() {
        let (mut fast, mut reference) = (FastBook::new(Px(1)), ReferenceBook::new(Px(1)));
        let mut seed = 7u64;
        let mut next = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            seed >> 33
        };
        let mut resting: Vec<(u64, Side)> = Vec::new();
        let (mut seen_off, mut back_on) = (false, false);
        for id in 1..4000u64 {
            if id % 1500 == 0 {
                // Back to a narrow span: the table must come back on.
                for (gone, _) in resting.drain(..) {
                    assert_eq!(fast.remove(OrderId(gone)), reference.remove(OrderId(gone)));
                }
            }
            let side = if next() % 2 == 0 { Side::Buy } else { Side::Sell };
            let px = match (id / 500) % 3 {
                0 => 1_000_000 + (next() % 5_000) as i64,
                1 => (next() % 1_000_000_000) as i64 - 500_000_000,
                _ => 1_000_000 + (id as i64) * 200 + (next() % 3_000) as i64,
            };
            if !resting.is_empty() && next() % 3 == 0 {
                let (gone, _) = resting.swap_remove((next() % resting.len() as u64) as usize);
                assert_eq!(fast.remove(OrderId(gone)), reference.remove(OrderId(gone)));
            } else if !resting.is_empty() && next() % 4 == 0 {
                let (moved, _) = resting[(next() % resting.len() as u64) as usize];
                fast.reprice(OrderId(moved), Px(px), Qty(1), Qty(0), id);
                reference.reprice(OrderId(moved), Px(px), Qty(1), Qty(0), id);
            } else {
                fast.insert(order(id, side, px));
                reference.insert(order(id, side, px));
                resting.push((id, side));
            }
            if id % 50 == 0 {
                fast.check_invariants();
                back_on |= seen_off && fast.ladders.iter().any(|l| !l.dense.is_empty() && !l.blocks.is_empty());
                seen_off |= fast.ladders.iter().any(|l| l.dense.is_empty() && !l.blocks.is_empty());
                for side in [Side::Buy, Side::Sell] {
                    assert_eq!(fast.best(side), reference.best(side));
                    assert_eq!(fast.depth(side, usize::MAX), reference.depth(side, usize::MAX));
                }
            }
        }
        assert!(seen_off && back_on, "the dense block table was not turned off and back on");
    }
}
