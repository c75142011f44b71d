//! Cursors over a table's entries, the building block of scans and compactions.
//!
//! A `TableCursor` walks one table's entries in a `KeyRange`, forward or backward, one data
//! block at a time, reading each entry in place in the block it holds: a key or value is
//! copied only by whoever takes it (`Db::scan` hands the winner of its merge to the caller;
//! compaction hands it to the table builder). A block comes from the table's map, from the
//! block cache when given one, or is read into one of the thread's read buffers
//! (`scratch.rs`), held until the cursor moves on. A miss is inserted into the cache under the
//! same admission rule as a get's (`doorkeeper.rs`), not skipped as RocksDB's `fill_cache =
//! false` would: seek + 10 scans over a 2×10^6-key store of [2, 8, 23] tables ran at
//! 177–189 k/s admitting, 143–150 k/s never inserting (a scan-only workload then hits
//! nothing; the level-0 tables' blocks are the ones that come back).
//!
//! Forward, a cursor finds the start in its first block with `block::seek` (a tight walk
//! comparing 8-byte prefixes), then decodes the entry at its position and moves on by the
//! entry's length, checking that keys increase within the block. Backward, it decodes the
//! block once forward to record where each entry up to the end bound starts (one `u32` per
//! entry, in a vector it reuses; the format has no restart points, FORMAT.md §3) and walks
//! those starts down. Neither reads a block its range cannot reach: the index's last key of
//! each block says where the range ends. A seek + 10 scan reads as many data blocks as
//! RocksDB's does on the same shape (2.29 against 2.34 per scan at 2×10^6 keys, both at
//! their defaults, `db_bench --workload scans --defaults`).
//!
//! A damaged block ends the walk with its error, never a skipped entry. `TableIter` is the
//! same walk as an iterator of owned entries, for tools and tests.

use std::ops::{Bound, Range};
use std::sync::Arc;

use super::block::{entry_at, seek, walk, Entry};
use super::cache::BlockCache;
use super::range::{Cursor, Direction, KeyRange};
use super::range_set::DeletedRange;
use super::reader::{Held, Table, TableReadStats};
use super::scratch::Scratch;
use crate::coding::{cmp_prefixed, key_prefix};
use crate::error::{Error, Result};
use crate::expiry::NEVER;

/// Where the current entry's key and value lie in the held block.
#[derive(Clone, Debug)]
struct Current {
    key: Range<usize>,
    /// `key_prefix` of the key.
    prefix: u64,
    value: Option<Range<usize>>,
    /// `expiry::NEVER` unless the entry is an expiring put.
    expiry: u64,
    /// Where the entry after it starts (forward walks).
    end: usize,
}

/// One table's entries in a range, forward or backward (see the module comment).
pub(crate) struct TableCursor {
    table: Arc<Table>,
    cache: Option<Arc<BlockCache>>,
    range: Arc<KeyRange>,
    dir: Direction,
    /// The held block's position in the index.
    block: usize,
    held: Held,
    current: Option<Current>,
    /// Backward: where each of the held block's entries starts; `back` of them are left.
    starts: Vec<u32>,
    back: usize,
    /// Data blocks read so far.
    pub(crate) stats: TableReadStats,
}

impl TableCursor {
    /// A cursor on the first entry of `range` in `dir` (none if the table holds no key of
    /// it). Reads one data block, or none when the range misses the table.
    pub(crate) fn new(
        table: Arc<Table>,
        cache: Option<Arc<BlockCache>>,
        range: Arc<KeyRange>,
        dir: Direction,
    ) -> Result<TableCursor> {
        let blocks = table.blocks();
        let first = match (dir, range.start(), range.end()) {
            (Direction::Forward, Bound::Unbounded, _) => 0,
            (Direction::Forward, Bound::Included(k) | Bound::Excluded(k), _) => table.block_for(k),
            (Direction::Backward, _, Bound::Unbounded) => blocks.saturating_sub(1),
            (Direction::Backward, _, Bound::Included(k) | Bound::Excluded(k)) => {
                table.block_for(k).min(blocks.saturating_sub(1))
            }
        };
        let mut c = TableCursor {
            table,
            cache,
            range,
            dir,
            block: first,
            held: Held::Empty,
            current: None,
            starts: Vec::new(),
            back: 0,
            stats: TableReadStats::default(),
        };
        if first < blocks && c.table.properties().entries > 0 {
            c.load(first)?;
            // Forward, the first block is sought from the start bound.
            match dir {
                Direction::Forward => c.seek_start()?,
                Direction::Backward => c.record_starts()?,
            }
            c.settle()?;
        }
        Ok(c)
    }

    /// Forward, from a start bound: the entry of the held block where the range starts (a
    /// tight walk: `block::seek`), current.
    fn seek_start(&mut self) -> Result<()> {
        let (exclusive, key) = match self.range.start() {
            Bound::Included(k) => (false, k),
            Bound::Excluded(k) => (true, k),
            Bound::Unbounded => return self.decode_at(0),
        };
        let pos = seek(self.payload(), self.range.start_prefix(), key, exclusive)
            .map_err(|r| self.corrupt(r))?;
        self.decode_at(pos)
    }

    /// The held block's verified payload.
    fn payload(&self) -> &[u8] {
        match &self.held {
            Held::Empty => &[],
            Held::Cached(b) => b.payload(),
            Held::Owned(v) => &v.0,
            Held::Mapped(r) => self
                .table
                .map()
                .and_then(|m| m.get(r.clone()))
                .unwrap_or(&[]),
        }
    }

    fn corrupt(&self, reason: String) -> Error {
        let offset = self.table.block_handle(self.block).map_or(0, |h| h.offset);
        Error::corruption(
            self.table.path(),
            format!("data block at {offset}: {reason}"),
        )
    }

    /// Makes block `i` the held one (no entry current yet), reusing the last block's buffer
    /// if it was the cursor's.
    fn load(&mut self, i: usize) -> Result<()> {
        let buf = match std::mem::replace(&mut self.held, Held::Empty) {
            Held::Owned(v) => v,
            _ => Scratch::take(),
        };
        self.current = None;
        self.block = i;
        self.held = self
            .table
            .hold_block(i, &mut self.stats, self.cache.as_deref(), buf)?;
        Ok(())
    }

    /// Makes the first entry (forward) or the last (backward) of the held block current.
    fn enter(&mut self) -> Result<()> {
        match self.dir {
            Direction::Forward => self.decode_at(0),
            Direction::Backward => self.record_starts(),
        }
    }

    /// Decodes the entry at `pos` of the held block as the current one (none at its end),
    /// checking that its key is above the entry before it.
    fn decode_at(&mut self, pos: usize) -> Result<()> {
        let payload = self.payload();
        if pos >= payload.len() {
            self.current = None;
            return Ok(());
        }
        let e = entry_at(payload, pos).map_err(|r| self.corrupt(r))?;
        let key = &payload[e.key.clone()];
        let prefix = key_prefix(key);
        if let Some(prev) = &self.current {
            if cmp_prefixed(prev.prefix, &payload[prev.key.clone()], prefix, key).is_ge() {
                return Err(self.corrupt("data block keys out of order".into()));
            }
        }
        self.current = Some(Current {
            key: e.key,
            prefix,
            value: e.value,
            expiry: e.expiry,
            end: e.end,
        });
        Ok(())
    }

    /// Backward: records where each entry of the held block up to the end bound starts
    /// (checking those entries and their order), and makes the last of them current.
    fn record_starts(&mut self) -> Result<()> {
        let mut starts = std::mem::take(&mut self.starts);
        starts.clear();
        let range = &*self.range;
        let mut past_4_gib = None;
        let walked = walk(self.payload(), |pos, _, key, prefix| {
            // Entries past the end bound are never visited (only the first block of a
            // backward walk can hold any).
            if !range.before_end_prefixed(prefix, key) {
                return false;
            }
            match u32::try_from(pos) {
                Ok(at) => starts.push(at),
                Err(_) => past_4_gib = Some(pos),
            }
            past_4_gib.is_none()
        });
        self.back = starts.len();
        self.starts = starts;
        if let Some(pos) = past_4_gib {
            return Err(self.corrupt(format!("entry at offset {pos} past 4 GiB")));
        }
        walked.map_err(|r| self.corrupt(r))?;
        self.back_one()
    }

    /// Backward: makes the entry before the current one (the next of `starts` down) current.
    fn back_one(&mut self) -> Result<()> {
        self.current = None;
        if self.back == 0 {
            return Ok(());
        }
        self.back -= 1;
        let pos = self.starts[self.back] as usize;
        // Checked by `record_starts`: this decodes again what decoded there.
        let payload = self.payload();
        let e = entry_at(payload, pos).map_err(|r| self.corrupt(r))?;
        self.current = Some(Current {
            prefix: key_prefix(&payload[e.key.clone()]),
            key: e.key,
            value: e.value,
            expiry: e.expiry,
            end: e.end,
        });
        Ok(())
    }

    /// Moves off entries outside the range on the near side, and across blocks whose
    /// entries are all used, until the current entry is in the range or the walk is over.
    fn settle(&mut self) -> Result<()> {
        loop {
            let Some(cur) = &self.current else {
                if !self.next_block()? {
                    return Ok(());
                }
                continue;
            };
            let (key, p) = (&self.payload()[cur.key.clone()], cur.prefix);
            let (after_start, before_end) = (
                self.range.after_start_prefixed(p, key),
                self.range.before_end_prefixed(p, key),
            );
            let (near, far) = match self.dir {
                Direction::Forward => (after_start, before_end),
                Direction::Backward => (before_end, after_start),
            };
            match (near, far) {
                (true, true) => return Ok(()),
                (false, true) => self.advance()?,
                // Past the far bound (or a range with nothing in it): the walk is over.
                (_, false) => {
                    self.finish();
                    return Ok(());
                }
            }
        }
    }

    /// Moves to the next entry within the held block (`current` is `None` at its end).
    fn advance(&mut self) -> Result<()> {
        match self.dir {
            Direction::Forward => {
                let end = self.current.as_ref().map_or(usize::MAX, |c| c.end);
                self.decode_at(end)
            }
            Direction::Backward => self.back_one(),
        }
    }

    /// Loads the next block in the walk's direction if the range reaches it; false when the
    /// walk is over.
    fn next_block(&mut self) -> Result<bool> {
        let next = match self.dir {
            Direction::Forward => {
                // Block `block + 1` holds keys above this block's last key only.
                let last = self.table.block_last_key(self.block);
                if last.is_none_or(|k| !self.range.before_end(k)) {
                    None
                } else {
                    Some(self.block + 1).filter(|&n| n < self.table.blocks())
                }
            }
            Direction::Backward => self.block.checked_sub(1).filter(|&n| {
                self.table
                    .block_last_key(n)
                    .is_some_and(|k| self.range.after_start(k))
            }),
        };
        match next {
            Some(n) => {
                self.load(n)?;
                self.enter()?;
                Ok(true)
            }
            None => {
                self.finish();
                Ok(false)
            }
        }
    }

    /// Ends the walk, giving up the held block.
    fn finish(&mut self) {
        self.current = None;
        self.held = Held::Empty;
        self.back = 0;
    }
}

impl Cursor for TableCursor {
    #[inline]
    fn key(&self) -> Option<&[u8]> {
        let c = self.current.as_ref()?;
        self.payload().get(c.key.clone())
    }

    #[inline]
    fn value(&self) -> Option<&[u8]> {
        let r = self.current.as_ref()?.value.clone()?;
        self.payload().get(r)
    }

    #[inline]
    fn entry(&self) -> Option<(&[u8], Option<&[u8]>)> {
        let c = self.current.as_ref()?;
        let payload = self.payload();
        let value = match &c.value {
            Some(r) => Some(payload.get(r.clone())?),
            None => None,
        };
        Some((payload.get(c.key.clone())?, value))
    }

    #[inline]
    fn expiry(&self) -> u64 {
        self.current.as_ref().map_or(NEVER, |c| c.expiry)
    }

    fn step(&mut self) -> Result<()> {
        if self.current.is_none() {
            return Ok(());
        }
        let moved = self.advance().and_then(|()| self.settle());
        if moved.is_err() {
            self.finish();
        }
        moved
    }

    fn skip_past(&mut self, r: &DeletedRange) -> Result<()> {
        self.jump_past(r)
    }
}

impl Table {
    /// Iterates entries with key ≥ `start` (or all), in order, reading blocks lazily.
    pub fn iter(self: &Arc<Self>, start: Bound<&[u8]>) -> TableIter {
        TableIter::new(Arc::clone(self), start)
    }
}

/// A table's entries from a start bound, in key order, as owned entries (`Table::iter`).
pub struct TableIter {
    cursor: Option<TableCursor>,
    /// The opening seek's error, handed out by the first `next`.
    failed: Option<Error>,
    first: bool,
}

impl TableIter {
    fn new(table: Arc<Table>, start: Bound<&[u8]>) -> TableIter {
        let range = KeyRange::new(start.map(<[u8]>::to_vec), Bound::Unbounded);
        match TableCursor::new(table, None, Arc::new(range), Direction::Forward) {
            Ok(c) => TableIter {
                cursor: Some(c),
                failed: None,
                first: true,
            },
            Err(e) => TableIter {
                cursor: None,
                failed: Some(e),
                first: true,
            },
        }
    }
}

impl Iterator for TableIter {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.failed.take() {
            return Some(Err(e));
        }
        let c = self.cursor.as_mut()?;
        if !std::mem::replace(&mut self.first, false) {
            if let Err(e) = c.step() {
                self.cursor = None;
                return Some(Err(e));
            }
        }
        let Some(key) = c.key() else {
            self.cursor = None;
            return None;
        };
        let expiry = c.expiry();
        Some(Ok(Entry {
            key: key.to_vec(),
            value: c.value().map(<[u8]>::to_vec),
            expiry: (expiry != NEVER).then_some(expiry),
        }))
    }
}

mod skip;
#[cfg(test)]
mod tests;
