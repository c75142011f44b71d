//! Range deletes (docs/range-deletes.md): `Db::delete_range` and `Keyspace::delete_range`,
//! the manifest version the log needs before it may hold one, and how a flush writes a
//! memtable's deleted ranges into its table.
//!
//! A range delete is one operation (FORMAT.md §2, tag 5) whatever the number of keys it
//! covers. A memtable keeps its ranges with their batch numbers (`Memtable::append_ranges`):
//! a lookup there finds a key's newest entry and asks whether a later range covers it. A flush
//! drops the entries its memtable's ranges cover and writes the ranges into the new table
//! (FORMAT.md §3), cut to the keys older tables hold (`cut_to_older`): a table's ranges end
//! through a key, so its key range bounds them as it bounds keys, and the level search,
//! compaction's overlap and the picker need nothing new. From there a lookup (`read.rs`,
//! `multi_get.rs`) whose filter says "maybe" for a table first asks whether a newer table's
//! ranges cover the key (and then does not read the table), scans hide the entries of older
//! places a newer one's ranges cover (`cover.rs`), and compaction drops them and carries the
//! ranges down until nothing lies below (`compaction.rs`).

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use super::inner::Inner;
use super::keyspace::Keyspace;
use super::version::Version;
use super::{Db, WriteBatch};
use crate::error::Result;
use crate::table::{Cursor, DeletedRange, Direction, End, KeyRange, RangeSet, TableCursor};

impl Db {
    /// Deletes every key of the default keyspace in `range` (any bounds) with one operation
    /// (`WriteBatch::delete_range`): as fast for 10^6 keys as for one.
    pub fn delete_range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_range(range);
        self.write(b)
    }
}

impl Keyspace {
    /// `Db::delete_range` in this keyspace.
    pub fn delete_range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_range_in(self, range);
        self.inner().write_batch(b, false)
    }
}

impl Inner {
    /// Makes sure the log may hold range deletes before the first is logged: the store writes
    /// tables of format 6 (which hold them), and its manifest is of version 4, which builds
    /// that would take the log's tag 5 for damage refuse (`expiring.rs` does the same for
    /// expiring puts).
    pub(super) fn admit_range_deletes(&self) -> Result<()> {
        // Version 4 says what version 3 does too: the logs may hold expiring puts as well.
        let what = ("a range delete", "range deletes", 4);
        self.admit_logged(what, 6, &[&self.expiring, &self.range_deletes], |r| {
            r.expiring = true;
            r.range_deletes = true;
        })
    }
}

/// `ranges` (a memtable's, deleted after everything in `older`) cut to the keys `older`'s
/// tables hold: each range shrinks to run from the first such key inside it through the last,
/// and a range holding none goes. Nothing older than a flushed memtable is anywhere but in
/// `older` (flushes go oldest first), and nothing ever becomes older than it, so the cut
/// ranges hide every key the whole ones did. Reads each table a range reaches twice (its
/// first and last key inside), through the block cache's neighbour: a flush's cost grows
/// with its ranges, not with the keys they cover.
pub(super) fn cut_to_older(ranges: Vec<DeletedRange>, older: &Version) -> Result<RangeSet> {
    let mut cut = Vec::new();
    for r in RangeSet::union(ranges).ranges() {
        let end = match &r.end {
            End::Before(k) => Bound::Excluded(k.clone()),
            End::Through(k) => Bound::Included(k.clone()),
            End::Unbounded => Bound::Unbounded,
        };
        let range = Arc::new(KeyRange::new(Bound::Included(r.start.clone()), end));
        let mut first: Option<Vec<u8>> = None;
        let mut last: Option<Vec<u8>> = None;
        for (level, tables) in older.levels().iter().enumerate() {
            let reached = if level == 0 {
                0..tables.len()
            } else {
                older.reaching(level, range.start(), range.end())
            };
            for t in &tables[reached] {
                if !t.meets(range.start(), range.end()) {
                    continue;
                }
                for dir in [Direction::Forward, Direction::Backward] {
                    let c = TableCursor::new(Arc::clone(t), None, Arc::clone(&range), dir)?;
                    let Some(k) = c.key() else { continue };
                    let slot = match dir {
                        Direction::Forward => &mut first,
                        Direction::Backward => &mut last,
                    };
                    let better = slot.as_deref().is_none_or(|s| match dir {
                        Direction::Forward => k < s,
                        Direction::Backward => k > s,
                    });
                    if better {
                        *slot = Some(k.to_vec());
                    }
                }
                // A table's own ranges reach keys of tables older still, which this loop
                // visits too: nothing else to take from it.
            }
        }
        if let (Some(first), Some(last)) = (first, last) {
            cut.push(DeletedRange {
                start: first,
                end: End::Through(last),
            });
        }
    }
    Ok(RangeSet::union(cut))
}
