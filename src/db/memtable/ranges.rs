//! The ranges a memtable's batches deleted (`WriteBatch::delete_range`): kept as written, each
//! with its batch's number, in `Memtable::ranges`. A range hides the entries of earlier
//! batches of its memtable (`covered`: lookups, cursors, the flush) and, once its batch is
//! seen, every key of older memtables and tables (`ranges_at`: a scan's cover, the flush's
//! table). Read whole by a lookup that meets a memtable holding any: range deletes are
//! expected to be few between two flushes.

use std::sync::atomic::Ordering;

use super::{Memtable, ENTRY_OVERHEAD};
use crate::table::{DeletedRange, End};

impl Memtable {
    /// Appends `ranges` as deleted by batch `seq` (as `append`: seen once published).
    pub(crate) fn append_ranges(&self, ranges: Vec<DeletedRange>, seq: u64) {
        let mut added = 0;
        for r in ranges {
            added += r.start.len() + ENTRY_OVERHEAD;
            if let End::Before(k) | End::Through(k) = &r.end {
                added += k.len();
            }
            self.ranges.push((seq, r));
        }
        self.size.fetch_add(added, Ordering::Relaxed);
        self.counts().bytes.fetch_add(added, Ordering::Relaxed);
    }

    /// Whether any range was deleted here (by any batch, published or not).
    #[inline(always)]
    pub(crate) fn has_ranges(&self) -> bool {
        self.ranges.count() > 0
    }

    /// Whether a range deleted by a batch after `floor` and among the first `seen` covers
    /// `key`.
    pub(crate) fn range_covers(&self, key: &[u8], floor: u64, seen: u64) -> bool {
        self.ranges
            .iter()
            .any(|(_, (seq, r))| floor < *seq && *seq <= seen && r.covers(key))
    }

    /// The ranges deleted by the first `seen` batches.
    pub(crate) fn ranges_at(&self, seen: u64) -> Vec<DeletedRange> {
        self.ranges
            .iter()
            .filter(|(_, (seq, _))| *seq <= seen)
            .map(|(_, (_, r))| r.clone())
            .collect()
    }
}
