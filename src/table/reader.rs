//! An open table: index (`index.rs`), properties and filter in memory; data blocks read on
//! demand with positional reads (`pread`), or looked at in place in a memory map
//! (`TableReads::Mmap`), so every data-block read is a real, countable file read. The file is
//! opened through the store's `FileSystem` (`Table::open_in`), so tests can make reads fail or
//! return damaged bytes after the table was validated. Opening (footer, properties, index and
//! filters read and validated) is in `reader/open.rs`.

use std::cmp::Ordering;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::block::{unseal, BlockHandle};
use super::cache::{find, Block, BlockCache};
use super::compression::{open_block, Compression};
use super::filter_state::{FilterState, PrefixCheck, RangeFilterState};
use super::index::Index;
use super::properties::Properties;
use super::range_set::RangeSet;
use super::scratch::Scratch;

mod held;
mod open;
mod ranges;
use crate::coding::{cmp_prefixed, key_prefix};
use crate::error::{Error, Result};
use crate::expiry::Now;
use crate::fs::RandomAccessFile;
use crate::prefix::PrefixExtractor;
use held::Found;
pub(crate) use held::{BlockRef, Held, LentValue};
use open::read_at_into;
pub use open::{TableOpen, TableReads};

/// Data-block reads done by one operation.
#[derive(Clone, Copy, Debug, Default)]
pub struct TableReadStats {
    /// Data blocks read from the file.
    pub blocks: u64,
    /// Bytes read from the file.
    pub bytes: u64,
    /// Data blocks found in the block cache.
    pub cache_hits: u64,
}

/// An open, validated table file.
pub struct Table {
    id: u64,
    path: PathBuf,
    file: Box<dyn RandomAccessFile>,
    file_size: u64,
    index: Index,
    /// `key_prefix` of the smallest and largest key.
    min_prefix: u64,
    max_prefix: u64,
    props: Properties,
    filter: FilterState,
    prefix_filter: FilterState,
    /// The rule `prefix_filter` was built under, when this build knows it.
    prefix_rule: Option<PrefixExtractor>,
    range_filter: RangeFilterState,
    /// The deleted ranges it carries (FORMAT.md §3): they hide keys of older tables.
    range_deletes: RangeSet,
    format_version: u32,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("id", &self.id)
            .field("path", &self.path)
            .finish()
    }
}

impl Table {
    /// The table's file number.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// The table's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// File size in bytes.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// Writes the table file's bytes to `out` from the handle this table holds (which still
    /// reads after the file was deleted from the directory), 1 MiB at a time.
    pub(crate) fn copy_to(&self, out: &mut dyn crate::fs::WritableFile) -> std::io::Result<()> {
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < self.file_size {
            let n = (self.file_size - at).min(buf.len() as u64) as usize;
            self.file.read_exact_at(&mut buf[..n], at)?;
            out.write_all(&buf[..n])?;
            at += n as u64;
        }
        Ok(())
    }
    /// The properties block.
    pub fn properties(&self) -> &Properties {
        &self.props
    }

    /// The deleted ranges the table carries: keys they hold are deleted in every older table
    /// (not in this one, whose entries are newer).
    pub fn range_deletes(&self) -> &RangeSet {
        &self.range_deletes
    }

    /// `Properties::expire_whole_by`: the latest expiry, when every entry is a put with one.
    #[inline(always)]
    pub fn expire_whole_by(&self) -> Option<u64> {
        self.props.expire_whole_by()
    }
    /// The filter as loaded.
    pub fn filter(&self) -> &FilterState {
        &self.filter
    }
    /// Smallest key.
    pub fn min_key(&self) -> &[u8] {
        &self.props.min_key
    }
    /// Largest key.
    pub fn max_key(&self) -> &[u8] {
        &self.props.max_key
    }
    /// True when `key` is inside [min, max]. Compares the keys' 8-byte prefixes first (held in
    /// the `Table`, so a lookup does not load the key bytes from the heap unless they tie).
    pub fn covers(&self, key: &[u8]) -> bool {
        let p = key_prefix(key);
        (self.props.entries > 0 || self.props.range_deletes > 0)
            && cmp_prefixed(self.min_prefix, self.min_key(), p, key) != Ordering::Greater
            && cmp_prefixed(p, key, self.max_prefix, self.max_key()) != Ordering::Greater
    }
    /// True when every key of the table is below `key` (max < key): the search predicate for
    /// a level's tables, prefix first as in `covers`.
    pub fn ends_before(&self, key: &[u8]) -> bool {
        cmp_prefixed(self.max_prefix, self.max_key(), key_prefix(key), key) == Ordering::Less
    }
    /// `key_prefix` of the table's largest key (0 for an empty table): what `in_level_by`
    /// searches.
    pub fn max_prefix(&self) -> u64 {
        self.max_prefix
    }
    /// In `tables`, one level's tables in key order with disjoint ranges, the one whose range
    /// holds `key` (a binary search on `ends_before`, then `covers`): the only table of the
    /// level a lookup of `key` needs.
    #[inline]
    pub fn in_level<'t>(tables: &'t [Arc<Table>], key: &[u8]) -> Option<&'t Arc<Table>> {
        let i = tables.partition_point(|t| t.ends_before(key));
        tables.get(i).filter(|t| t.covers(key))
    }
    /// `in_level`, searching `max_prefixes` (each table's `max_prefix`, in the same order)
    /// instead of the tables: the binary search reads one dense array, which stays in the CPU
    /// caches, where `in_level` loads a `Table` at each step. A table is read only where its
    /// prefix ties the key's, and then the one found. Measured at 10^8 keys (145 tables in the
    /// largest level): the search's loads of `Table`s, a chain of cache misses, were ~14% of an
    /// absent get, and the filter prefetch waited on the found table's load.
    #[inline]
    pub fn in_level_by<'t>(
        tables: &'t [Arc<Table>],
        max_prefixes: &[u64],
        key: &[u8],
    ) -> Option<&'t Arc<Table>> {
        let i = Table::candidate_in_level(tables, max_prefixes, key)?;
        tables.get(i).filter(|t| t.covers(key))
    }
    /// The position of the one table in `tables` (as `in_level_by`) that may hold `key`, the
    /// first that does not end before it, not yet checked to cover it; `None` past the last.
    /// Reads a table only where its prefix ties the key's.
    #[inline]
    pub(crate) fn candidate_in_level(
        tables: &[Arc<Table>],
        max_prefixes: &[u64],
        key: &[u8],
    ) -> Option<usize> {
        debug_assert_eq!(tables.len(), max_prefixes.len());
        let p = key_prefix(key);
        let i = max_prefixes.partition_point(|&m| m < p);
        Table::candidate_from(tables, max_prefixes, i, p, key)
    }
    /// `candidate_in_level` given `i`, the number of `max_prefixes` below `p` (the key's
    /// `key_prefix`; `i` from `partition_points` when many keys are searched together).
    #[inline]
    pub(crate) fn candidate_from(
        tables: &[Arc<Table>],
        max_prefixes: &[u64],
        mut i: usize,
        p: u64,
        key: &[u8],
    ) -> Option<usize> {
        // Tables whose largest key shares the key's prefix may still end before the key.
        while i < tables.len() && max_prefixes.get(i) == Some(&p) && tables[i].ends_before(key) {
            i += 1;
        }
        (i < tables.len()).then_some(i)
    }
    /// Bytes of whole-key filter held in memory.
    pub fn filter_bytes(&self) -> u64 {
        match &self.filter {
            FilterState::Valid(r) => r.as_bytes().len() as u64,
            _ => 0,
        }
    }
    /// Filter blocks (whole-key, prefix and range) that failed validation at open: the table
    /// is read without them. Whoever opens a table adds this to `filter_validation_failures`.
    pub fn rejected_filters(&self) -> u64 {
        let points = [&self.filter, &self.prefix_filter]
            .iter()
            .filter(|f| matches!(f, FilterState::Invalid(_)))
            .count() as u64;
        points + u64::from(matches!(self.range_filter, RangeFilterState::Invalid(_)))
    }

    /// The prefix filter as loaded.
    pub fn prefix_filter(&self) -> &FilterState {
        &self.prefix_filter
    }
    /// The rule the prefix filter was built under, when this build knows it.
    pub fn prefix_rule(&self) -> Option<PrefixExtractor> {
        self.prefix_rule
    }
    /// Bytes of prefix filter held in memory.
    pub fn prefix_filter_bytes(&self) -> u64 {
        match &self.prefix_filter {
            FilterState::Valid(r) => r.as_bytes().len() as u64,
            _ => 0,
        }
    }
    /// The table format version the file was written in.
    pub fn format_version(&self) -> u32 {
        self.format_version
    }

    /// What the prefix filter says about `prefix` (a prefix `rule` gives; `hash` is
    /// `hash_key(prefix)`). Only a filter built under `rule` itself is consulted: under any
    /// other rule the table's prefixes are different strings, and "absent" would mean nothing.
    pub fn check_prefix(&self, rule: PrefixExtractor, prefix: &[u8], hash: u64) -> PrefixCheck {
        match &self.prefix_filter {
            FilterState::Valid(f) if self.prefix_rule == Some(rule) => {
                if f.may_contain_prehashed(prefix, hash) {
                    PrefixCheck::Maybe
                } else {
                    PrefixCheck::Absent
                }
            }
            _ => PrefixCheck::Unfiltered,
        }
    }

    /// Reads, checks and returns the raw payload of one data block (decompressed in
    /// format 3).
    pub(super) fn read_block(&self, h: BlockHandle, stats: &mut TableReadStats) -> Result<Vec<u8>> {
        self.read_block_into(h, stats, Vec::new())
    }

    /// `read_block` into `buf`'s memory (its bytes are overwritten; only bytes past its
    /// length are zeroed first).
    fn read_block_into(
        &self,
        h: BlockHandle,
        stats: &mut TableReadStats,
        mut buf: Vec<u8>,
    ) -> Result<Vec<u8>> {
        read_at_into(&*self.file, &self.path, h, &mut buf)?;
        stats.blocks += 1;
        stats.bytes += h.size;
        let opened = if self.format_version >= 3 {
            open_block(buf, self.props.compression, self.props.raw_data_bytes)
        } else {
            unseal(&buf).map(<[u8]>::len).map(|n| {
                buf.truncate(n);
                buf
            })
        };
        opened
            .map_err(|r| Error::corruption(&self.path, format!("data block at {}: {r}", h.offset)))
    }

    /// Where each data block lies in the file, in key order (for tools and tests: the
    /// alignment of FORMAT.md §3 shows in the gaps between them).
    pub fn data_block_handles(&self) -> impl Iterator<Item = BlockHandle> + '_ {
        (0..self.index.len()).filter_map(|i| self.index.handle(i))
    }

    /// The first block whose last key is ≥ `key` (`index.len()` if none).
    pub(super) fn block_for(&self, key: &[u8]) -> usize {
        self.index.search(key)
    }

    /// Looks `key` up: `Some(Some(v))` a value, `Some(None)` a tombstone, `None` not in this
    /// table. Finds at most one data block: in `cache` if given (a miss reads, verifies and
    /// inserts it), else read from the file. Does not consult the filter. An expiring entry is
    /// returned whether or not its time has passed (`get_at` decides that).
    pub fn get(
        &self,
        key: &[u8],
        stats: &mut TableReadStats,
        cache: Option<&BlockCache>,
    ) -> Result<Option<Option<Vec<u8>>>> {
        self.get_at(key, stats, cache, &Now::never())
    }

    /// `get`, with a put expired at `now` found as `Some(None)` (it hides older versions as a
    /// tombstone does). Never inlined: the read path calls it only after a filter said
    /// "maybe", and inlined into `Inner::get` it made absent gets ~10% slower (`db_bench
    /// --hold absent`, 10^6 keys, 4 rounds).
    #[inline(never)]
    pub(crate) fn get_at(
        &self,
        key: &[u8],
        stats: &mut TableReadStats,
        cache: Option<&BlockCache>,
        now: &Now,
    ) -> Result<Option<Option<Vec<u8>>>> {
        let Some(i) = self.block_of(key) else {
            return Ok(None);
        };
        let block = self.data_block(i, stats, cache)?;
        self.find_in(&block, i, key, now)
    }

    /// `get_at`, the value lent where it lies (`LentValue`) instead of copied.
    #[inline(never)]
    pub(crate) fn get_lent(
        &self,
        key: &[u8],
        stats: &mut TableReadStats,
        cache: Option<&BlockCache>,
        now: &Now,
    ) -> Result<Option<Option<LentValue<'_>>>> {
        let Some(i) = self.block_of(key) else {
            return Ok(None);
        };
        let block = self.data_block(i, stats, cache)?;
        let found = self.find_at(&block, i, key, now)?;
        Ok(found.map(|at| at.map(|at| LentValue { block, at })))
    }

    /// The position of the one data block that may hold `key`, or `None` when every key of
    /// the table is smaller. Keys with the same position share a block (`Db::multi_get` reads
    /// it once for all of them).
    pub(crate) fn block_of(&self, key: &[u8]) -> Option<usize> {
        let i = self.block_for(key);
        (i < self.index.len()).then_some(i)
    }

    /// Data block `i` (a position from `block_of`; `Corruption` if out of range): from
    /// `cache` if given (a miss reads, verifies and inserts it), else read from the file.
    pub(crate) fn data_block(
        &self,
        i: usize,
        stats: &mut TableReadStats,
        cache: Option<&BlockCache>,
    ) -> Result<BlockRef<'_>> {
        Ok(match self.find_block(i, stats, cache)? {
            Found::Mapped(p) => BlockRef::Mapped(p),
            Found::Cached(b) => BlockRef::Cached(b),
            Found::Unread(h) => {
                let mut scratch = Scratch::take();
                scratch.0 = self.read_block_into(h, stats, std::mem::take(&mut scratch.0))?;
                BlockRef::Scratch(scratch)
            }
        })
    }

    /// Data block `i` for a cursor (`iter.rs`), as `data_block`, but a block neither mapped
    /// nor cached is read into `buf` (a thread's buffer the cursor holds from block to block).
    pub(super) fn hold_block(
        &self,
        i: usize,
        stats: &mut TableReadStats,
        cache: Option<&BlockCache>,
        mut buf: Scratch,
    ) -> Result<Held> {
        Ok(match self.find_block(i, stats, cache)? {
            Found::Mapped(p) => {
                // `p` lies inside the map: its offset there is the distance of the pointers.
                let base = self.map().map_or(0, |m| m.as_ptr() as usize);
                let at = (p.as_ptr() as usize).wrapping_sub(base);
                Held::Mapped(at..at + p.len())
            }
            Found::Cached(b) => Held::Cached(b),
            Found::Unread(h) => {
                buf.0 = self.read_block_into(h, stats, std::mem::take(&mut buf.0))?;
                Held::Owned(buf)
            }
        })
    }

    /// Where data block `i` can be had without a read of the caller's own: in the map, in
    /// `cache` (a miss the cache admits is read and inserted here), or `Unread`.
    fn find_block(
        &self,
        i: usize,
        stats: &mut TableReadStats,
        cache: Option<&BlockCache>,
    ) -> Result<Found<'_>> {
        let h = self
            .index
            .handle(i)
            .ok_or_else(|| Error::corruption(&self.path, format!("no data block {i}")))?;
        if let Some(map) = self.file.mapped() {
            if self.props.compression == Compression::None {
                return self.mapped_block(map, h, stats).map(Found::Mapped);
            }
        }
        if let Some(c) = cache {
            if let Some(b) = c.get(self.id, h.offset) {
                stats.cache_hits += 1;
                return Ok(Found::Cached(b));
            }
            if c.admit(self.id, h.offset) {
                let b = Arc::new(Block::new(self.read_block(h, stats)?));
                c.insert(self.id, h.offset, Arc::clone(&b));
                return Ok(Found::Cached(b));
            }
        }
        Ok(Found::Unread(h))
    }

    /// The table's map, when it is read through one.
    pub(super) fn map(&self) -> Option<&[u8]> {
        self.file.mapped()
    }

    /// The verified payload of the uncompressed data block at `h`, in the table's map. The
    /// checksum is checked on every call: the bytes are the page cache's, not a copy that was
    /// checked once, and can change under the map. No block cache: a hit there would save
    /// only this checksum. Measured (`db_bench --hold present --keys 2000000`, 32 MiB block
    /// cache, so ~86% of present gets miss it; `perf record -e cpu-clock`): with `pread`,
    /// 36% of the time was the kernel's read path (copy 15.5%, page-cache lookup 13.5%) and
    /// 10% the block cache; through the map, present gets ran ~2× as fast (README).
    fn mapped_block<'m>(
        &self,
        map: &'m [u8],
        h: BlockHandle,
        stats: &mut TableReadStats,
    ) -> Result<&'m [u8]> {
        let corrupt =
            |r: String| Error::corruption(&self.path, format!("data block at {}: {r}", h.offset));
        let block = usize::try_from(h.offset)
            .ok()
            .zip(usize::try_from(h.size).ok())
            .and_then(|(o, n)| map.get(o..o.checked_add(n)?))
            .ok_or_else(|| corrupt("past the end of the file".into()))?;
        stats.blocks += 1;
        stats.bytes += h.size;
        let payload = unseal(block).map_err(corrupt)?;
        if self.format_version < 3 {
            return Ok(payload);
        }
        // Format 3: a compression type byte ends the payload (0: stored raw).
        match payload.split_last() {
            Some((0, body)) => Ok(body),
            Some((kind, _)) => Err(corrupt(format!(
                "data block compressed with type {kind} in a table whose codec is none"
            ))),
            None => Err(corrupt("data block has no compression type byte".into())),
        }
    }

    /// Looks `key` up in `block`, data block `i` of this table (as `get_at`).
    pub(crate) fn find_in(
        &self,
        block: &BlockRef<'_>,
        i: usize,
        key: &[u8],
        now: &Now,
    ) -> Result<Option<Option<Vec<u8>>>> {
        let found = self.find_at(block, i, key, now)?;
        Ok(found.map(|at| at.map(|at| block.payload()[at].to_vec())))
    }

    /// Looks `key` up in `block`, data block `i` of this table: `Some(Some(at))` its value at
    /// `at` in the block's payload, `Some(None)` a tombstone or a put expired at `now`, `None`
    /// not here.
    fn find_at(
        &self,
        block: &BlockRef<'_>,
        i: usize,
        key: &[u8],
        now: &Now,
    ) -> Result<Option<Option<Range<usize>>>> {
        let payload = block.payload();
        let found = find(payload, key, now).map_err(|r| {
            let offset = self.index.handle(i).map_or(0, |h| h.offset);
            Error::corruption(&self.path, format!("data block at {offset}: {r}"))
        })?;
        // `find` returns a slice of `payload`: its place there is the distance of the pointers
        // (an empty value is placed at 0, whatever pointer it came with).
        let at = |v: &[u8]| {
            let start = (v.as_ptr() as usize).wrapping_sub(payload.as_ptr() as usize);
            if v.is_empty() {
                0..0
            } else {
                start..start + v.len()
            }
        };
        Ok(found.map(|v| v.map(at)))
    }

    /// Where data block `i` is (`None` past the last).
    pub(super) fn block_handle(&self, i: usize) -> Option<BlockHandle> {
        self.index.handle(i)
    }

    /// Data blocks in the table.
    pub(super) fn blocks(&self) -> usize {
        self.index.len()
    }

    /// Data block `i`'s last key (`None` past the last block).
    pub(super) fn block_last_key(&self, i: usize) -> Option<&[u8]> {
        self.index.last_key(i)
    }
}

#[cfg(test)]
mod tests;
