//! Which entries of a merge the deleted ranges of its newer sources hide (`Merge::with_cover`):
//! scans (`iter.rs`, `cursor.rs`) and compaction (`compaction.rs`) merge memtables and tables
//! newest first, and an entry of source `i` is deleted when a range of some source before `i`
//! covers its key. (A memtable's ranges over its own entries are its cursor's business:
//! `Memtable::covered`.)
//!
//! A cover holds, per source with deleted ranges, its number and its ranges: a memtable's as
//! a `RangeSet`, a level's as its tables that carry ranges (sorted and disjoint: the key's one
//! table is found by binary search, then asked). An entry's check is a binary search per
//! newer source with ranges; a merge without any has no cover and pays one branch per entry.
//! A scan's table cursors also ask it (`holds`) before they open a table: one a newer range
//! holds whole is passed over unread (`level_cursor.rs`). And a merge that meets a covered
//! entry asks which range covers it (`covering`) and moves that entry's source past the
//! range's end in one jump (`Merge::pass`, `Cursor::skip_past`): a table cursor over whole
//! data blocks, a memtable's by binary search.

use std::sync::Arc;

use crate::table::{DeletedRange, RangeSet, Table};

/// One source's deleted ranges.
enum Ranges {
    /// A memtable's.
    Set(RangeSet),
    /// The tables of one level-0 table or of one deeper level that carry ranges, in key
    /// order with disjoint key ranges.
    Tables(Vec<Arc<Table>>),
}

impl Ranges {
    fn covers(&self, key: &[u8]) -> bool {
        match self {
            Ranges::Set(s) => s.covers(key),
            Ranges::Tables(ts) => {
                Table::in_level(ts, key).is_some_and(|t| t.range_deletes().covers(key))
            }
        }
    }

    fn covering(&self, key: &[u8]) -> Option<&DeletedRange> {
        match self {
            Ranges::Set(s) => s.covering(key),
            Ranges::Tables(ts) => Table::in_level(ts, key)?.range_deletes().covering(key),
        }
    }

    /// Whether one range holds every key from `lo` through `hi`.
    fn holds(&self, lo: &[u8], hi: &[u8]) -> bool {
        match self {
            Ranges::Set(s) => s.holds(lo, hi),
            Ranges::Tables(ts) => {
                Table::in_level(ts, lo).is_some_and(|t| t.range_deletes().holds(lo, hi))
            }
        }
    }
}

/// The deleted ranges of a merge's sources, by source number (see the module comment).
#[derive(Default)]
pub(crate) struct Cover {
    /// Source number and its ranges, numbers ascending.
    parts: Vec<(usize, Ranges)>,
}

impl Cover {
    /// Adds source `source`'s memtable ranges (sources added in ascending order).
    pub(crate) fn add_set(&mut self, source: usize, set: RangeSet) {
        if !set.is_empty() {
            self.parts.push((source, Ranges::Set(set)));
        }
    }

    /// Adds source `source`'s tables (one level-0 table, or one level's in key order), those
    /// carrying ranges.
    pub(crate) fn add_tables<'a>(
        &mut self,
        source: usize,
        tables: impl IntoIterator<Item = &'a Arc<Table>>,
    ) {
        let with: Vec<Arc<Table>> = tables
            .into_iter()
            .filter(|t| !t.range_deletes().is_empty())
            .cloned()
            .collect();
        if !with.is_empty() {
            self.parts.push((source, Ranges::Tables(with)));
        }
    }

    /// No source has ranges.
    pub(crate) fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Whether a source newer than `source` deleted every key from `lo` through `hi` (one of
    /// its ranges holds them all): a table of `source` with that key range need not be read.
    pub(crate) fn holds(&self, lo: &[u8], hi: &[u8], source: usize) -> bool {
        self.parts
            .iter()
            .take_while(|(s, _)| *s < source)
            .any(|(_, r)| r.holds(lo, hi))
    }

    /// Whether a source newer than `source` deleted `key`.
    #[inline]
    pub(crate) fn covers(&self, key: &[u8], source: usize) -> bool {
        self.parts
            .iter()
            .take_while(|(s, _)| *s < source)
            .any(|(_, r)| r.covers(key))
    }

    /// The range of a source newer than `source` that deleted `key` (the newest such), if
    /// any: what `Merge::pass` moves the key's source past.
    pub(crate) fn covering(&self, key: &[u8], source: usize) -> Option<&DeletedRange> {
        self.parts
            .iter()
            .take_while(|(s, _)| *s < source)
            .find_map(|(_, r)| r.covering(key))
    }
}
