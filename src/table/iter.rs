//! Cursors over a table's entries, the building block of scans and compactions.
//!
//! A `TableCursor` walks one table's entries in a `KeyRange`, forward or backward, one data
//! block at a time, reading each entry in place in the block it holds: a key or value is
//! copied only by whoever takes it (`Db::scan` hands the winner of its merge to the caller;
//! compaction hands it to the table builder). A block comes from the block cache when given
//! one (a miss is inserted under the cache's admission rule, as for `get`), from the table's
//! map, or is read into a buffer the cursor keeps and reuses.
//!
//! Forward, a cursor decodes the entry at its position and moves on by the entry's length,
//! checking that keys increase within the block. Backward, it decodes the block once forward
//! to record where each entry starts (one `u32` per entry, in a vector it reuses; the format
//! has no restart points, FORMAT.md §3) and walks those starts down. Neither reads a block
//! its range cannot reach: the index's last key of each block says where the range ends.
//!
//! A damaged block ends the walk with its error, never a skipped entry. `TableIter` is the
//! same walk as an iterator of owned entries, for tools and tests.

use std::ops::{Bound, Range};
use std::sync::Arc;

use super::block::{entry_at, seek, Entry};
use super::cache::{Block, BlockCache, SCAN_AHEAD};
use super::reader::{Table, TableReadStats};
use super::scratch::Scratch;
use crate::coding::{cmp_prefixed, key_prefix};
use crate::error::{Error, Result};
use crate::prefetch::{prefetch_address, prefetch_lines};

/// Which way a cursor walks its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// From the start bound up, keys increasing.
    Forward,
    /// From the end bound down, keys decreasing.
    Backward,
}

/// The keys a scan covers: `start` to `end`, each bound as `std::ops::Bound`, with the
/// bounds' `key_prefix`es, so that most comparisons against them are one of two `u64`s.
#[derive(Clone, Debug)]
pub(crate) struct KeyRange {
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    start_prefix: u64,
    end_prefix: u64,
}

impl KeyRange {
    /// The keys from `start` to `end`.
    pub(crate) fn new(start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> KeyRange {
        let prefix = |b: &Bound<Vec<u8>>| match b {
            Bound::Included(k) | Bound::Excluded(k) => key_prefix(k),
            Bound::Unbounded => 0,
        };
        KeyRange {
            start_prefix: prefix(&start),
            end_prefix: prefix(&end),
            start,
            end,
        }
    }

    /// Every key.
    pub(crate) fn all() -> KeyRange {
        KeyRange::new(Bound::Unbounded, Bound::Unbounded)
    }

    /// True when `key` is not below the start bound.
    #[inline]
    pub(crate) fn after_start(&self, key: &[u8]) -> bool {
        self.after_start_prefixed(key_prefix(key), key)
    }

    /// True when `key` is not above the end bound.
    #[inline]
    pub(crate) fn before_end(&self, key: &[u8]) -> bool {
        self.before_end_prefixed(key_prefix(key), key)
    }

    /// `after_start` for a key whose `key_prefix` is `p`.
    #[inline]
    pub(crate) fn after_start_prefixed(&self, p: u64, key: &[u8]) -> bool {
        match &self.start {
            Bound::Included(s) => cmp_prefixed(p, key, self.start_prefix, s).is_ge(),
            Bound::Excluded(s) => cmp_prefixed(p, key, self.start_prefix, s).is_gt(),
            Bound::Unbounded => true,
        }
    }

    /// `before_end` for a key whose `key_prefix` is `p`.
    #[inline]
    pub(crate) fn before_end_prefixed(&self, p: u64, key: &[u8]) -> bool {
        match &self.end {
            Bound::Included(e) => cmp_prefixed(p, key, self.end_prefix, e).is_le(),
            Bound::Excluded(e) => cmp_prefixed(p, key, self.end_prefix, e).is_lt(),
            Bound::Unbounded => true,
        }
    }

    /// The start bound as a slice.
    pub(crate) fn start(&self) -> Bound<&[u8]> {
        as_slice(&self.start)
    }

    /// The end bound as a slice.
    pub(crate) fn end(&self) -> Bound<&[u8]> {
        as_slice(&self.end)
    }
}

fn as_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// A sorted walk over entries, read in place: what a merge takes from each of its sources.
pub(crate) trait Cursor {
    /// The current entry's key; `None` once the walk is over (or failed).
    fn key(&self) -> Option<&[u8]>;
    /// The current entry's value; `None` for a tombstone (or when `key` is `None`).
    fn value(&self) -> Option<&[u8]>;
    /// Moves to the next entry in the cursor's direction. After an error the cursor is over.
    fn step(&mut self) -> Result<()>;
}

/// The data block a cursor is on.
pub(crate) enum Held {
    /// None (before the first block, or after the last).
    Empty,
    /// Shared with the block cache.
    Cached(Arc<Block>),
    /// Read into a buffer of the thread's (`scratch.rs`), handed back when the cursor drops it.
    Owned(Scratch),
    /// These bytes of the table's map (verified when taken).
    Mapped(Range<usize>),
}

/// Where the current entry's key and value lie in the held block.
#[derive(Clone, Debug)]
struct Current {
    key: Range<usize>,
    /// `key_prefix` of the key.
    prefix: u64,
    value: Option<Range<usize>>,
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
        let pos = seek(self.payload(), self.range.start_prefix, key, exclusive)
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
            end: e.end,
        });
        Ok(())
    }

    /// Backward: records where each entry of the held block up to the end bound starts
    /// (checking those entries and their order), and makes the last of them current.
    fn record_starts(&mut self) -> Result<()> {
        let mut starts = std::mem::take(&mut self.starts);
        starts.clear();
        let payload = self.payload();
        let base = payload.as_ptr() as usize;
        prefetch_lines(base, SCAN_AHEAD.min(payload.len()));
        let mut pos = 0;
        let mut prev: Option<(u64, &[u8])> = None;
        let mut failed = None;
        while pos < payload.len() {
            prefetch_address(base + pos + SCAN_AHEAD);
            let e = match entry_at(payload, pos) {
                Ok(e) => e,
                Err(r) => {
                    failed = Some(r);
                    break;
                }
            };
            let key = &payload[e.key.clone()];
            let prefix = key_prefix(key);
            if prev.is_some_and(|(p, k)| cmp_prefixed(p, k, prefix, key).is_ge()) {
                failed = Some("data block keys out of order".to_string());
                break;
            }
            // Entries past the end bound are never visited (only the first block of a
            // backward walk can hold any).
            if !self.range.before_end_prefixed(prefix, key) {
                break;
            }
            let Ok(at) = u32::try_from(pos) else {
                failed = Some(format!("entry at offset {pos} past 4 GiB"));
                break;
            };
            starts.push(at);
            prev = Some((prefix, key));
            pos = e.end;
        }
        self.back = starts.len();
        self.starts = starts;
        if let Some(r) = failed {
            return Err(self.corrupt(r));
        }
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
}

/// A table's entries from a start bound, in key order, as owned entries (`Table::iter`).
pub struct TableIter {
    cursor: Option<TableCursor>,
    /// The opening seek's error, handed out by the first `next`.
    failed: Option<Error>,
    first: bool,
}

impl TableIter {
    pub(super) fn new(table: Arc<Table>, start: Bound<&[u8]>) -> TableIter {
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
        Some(Ok(Entry {
            key: key.to_vec(),
            value: c.value().map(<[u8]>::to_vec),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{TableBuilder, TableBuilderOptions};
    use std::collections::BTreeMap;

    type Model = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

    /// A table of small blocks (many block boundaries) holding `model`.
    fn table(dir: &std::path::Path, model: &Model) -> Arc<Table> {
        let path = dir.join("t.sst");
        let opts = TableBuilderOptions {
            block_size: 128,
            ..TableBuilderOptions::default()
        };
        let mut b = TableBuilder::create(&path, opts).unwrap();
        for (k, v) in model {
            b.add(k, v.as_deref()).unwrap();
        }
        b.finish().unwrap();
        Arc::new(Table::open(&path, 1).unwrap())
    }

    /// Every entry of `c`, in its order.
    fn walk(mut c: TableCursor) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut out = Vec::new();
        while let Some(k) = c.key() {
            out.push((k.to_vec(), c.value().map(<[u8]>::to_vec)));
            c.step().unwrap();
        }
        out
    }

    fn bound(kind: u64, k: Vec<u8>) -> Bound<Vec<u8>> {
        match kind {
            0 => Bound::Included(k),
            1 => Bound::Excluded(k),
            _ => Bound::Unbounded,
        }
    }

    /// Forward and backward walks over random ranges (bounds on keys, between keys, before
    /// and after the table; all three kinds) give the model's entries, with and without a
    /// block cache, and read only blocks the range reaches.
    #[test]
    fn walks_both_ways_over_random_ranges_as_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let mut model = Model::new();
        for i in (0..3000u32).step_by(3) {
            let v = (i % 7 != 0).then(|| vec![i as u8; (i % 23) as usize]);
            model.insert(format!("key{i:05}").into_bytes(), v);
        }
        let t = table(dir.path(), &model);
        assert!(t.blocks() > 100, "{} blocks", t.blocks());
        let cache = BlockCache::new(1 << 20).map(Arc::new);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rand = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..400 {
            let a = format!("key{:05}", rand(3100)).into_bytes();
            let b = format!("key{:05}", rand(3100)).into_bytes();
            let range = KeyRange::new(bound(rand(3), a), bound(rand(3), b));
            let want: Vec<(Vec<u8>, Option<Vec<u8>>)> = model
                .iter()
                .filter(|(k, _)| range.after_start(k) && range.before_end(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let range = Arc::new(range);
            let c = if round % 2 == 0 { cache.clone() } else { None };
            let fwd = TableCursor::new(
                Arc::clone(&t),
                c.clone(),
                Arc::clone(&range),
                Direction::Forward,
            )
            .unwrap();
            let fwd = walk(fwd);
            assert_eq!(fwd, want, "forward {range:?}");
            let back = TableCursor::new(Arc::clone(&t), c, Arc::clone(&range), Direction::Backward)
                .unwrap();
            let mut back = walk(back);
            back.reverse();
            assert_eq!(back, want, "backward {range:?}");
        }
    }

    /// A short walk reads one block; a range outside the table reads none.
    #[test]
    fn a_walk_reads_only_the_blocks_its_range_reaches() {
        let dir = tempfile::tempdir().unwrap();
        let model: Model = (0..2000u32)
            .map(|i| (format!("key{i:05}").into_bytes(), Some(vec![1u8; 20])))
            .collect();
        let t = table(dir.path(), &model);
        let range = |s: &str, e: &str| {
            Arc::new(KeyRange::new(
                Bound::Included(s.as_bytes().to_vec()),
                Bound::Excluded(e.as_bytes().to_vec()),
            ))
        };
        for dir in [Direction::Forward, Direction::Backward] {
            // From just after block 9's last key to block 10's last (excluded): inside block 10.
            let last_key = |b: usize| String::from_utf8(t.block_last_key(b).unwrap().to_vec());
            let (after9, last10) = (last_key(9).unwrap() + "\0", last_key(10).unwrap());
            let mut c =
                TableCursor::new(Arc::clone(&t), None, range(&after9, &last10), dir).unwrap();
            while c.key().is_some() {
                c.step().unwrap();
            }
            assert_eq!(c.stats.blocks, 1, "{dir:?}: a range inside block 10");
            let c = TableCursor::new(Arc::clone(&t), None, range("a", "b"), dir).unwrap();
            assert!(c.key().is_none());
            assert!(c.stats.blocks <= 1, "{dir:?}: before the table");
            let c = TableCursor::new(Arc::clone(&t), None, range("z", "zz"), dir).unwrap();
            assert!(c.key().is_none());
            assert!(c.stats.blocks <= 1, "{dir:?}: after the table");
        }
    }

    /// A damaged data block ends a walk in either direction with its error, after exactly
    /// the entries before it; nothing is skipped.
    #[test]
    fn a_damaged_block_ends_the_walk_with_its_error() {
        let dir = tempfile::tempdir().unwrap();
        let model: Model = (0..500u32)
            .map(|i| (format!("key{i:05}").into_bytes(), Some(vec![7u8; 10])))
            .collect();
        let t = table(dir.path(), &model);
        let h = t.block_handle(5).unwrap();
        let path = dir.path().join("t.sst");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[h.offset as usize + 3] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let t = Arc::new(Table::open(&path, 2).unwrap());
        for dir in [Direction::Forward, Direction::Backward] {
            let mut c =
                TableCursor::new(Arc::clone(&t), None, Arc::new(KeyRange::all()), dir).unwrap();
            let mut seen = 0;
            let err = loop {
                if c.key().is_none() {
                    panic!("{dir:?}: the walk ended without meeting the damage");
                }
                seen += 1;
                if let Err(e) = c.step() {
                    break e;
                }
            };
            assert!(err.to_string().contains("data block"), "{err}");
            assert!(c.key().is_none(), "nothing after the error");
            // Every entry on the near side of block 5, and none of it.
            let (last4, last5) = (t.block_last_key(4).unwrap(), t.block_last_key(5).unwrap());
            let want = match dir {
                Direction::Forward => model.keys().filter(|k| k.as_slice() <= last4).count(),
                Direction::Backward => model.keys().filter(|k| k.as_slice() > last5).count(),
            };
            assert_eq!(seen, want, "{dir:?}");
            let all = TableIter::new(Arc::clone(&t), Bound::Unbounded);
            let ok = all.take_while(Result::is_ok).count();
            assert!(ok < model.len());
        }
    }
}
