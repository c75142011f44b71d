//! A memtable's entries in key order, built only when asked for: scans walk the sorted runs
//! (`sorted.rs`) through a cursor (`cursor.rs`), and a flush sorts each key's newest entry,
//! taken from the index, once (`Memtable::for_each_newest`). The entries' keys, versions and
//! ranges are read through the traits `sorted.rs` and `cursor.rs` define.

use std::cmp::Ordering as CmpOrdering;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use super::cursor::{MemCursor, Versions};
use super::sorted::{self, Keys, View};
use super::Memtable;
use crate::coding::{cmp_prefixed, key_prefix};
use crate::table::{Direction, KeyRange};

/// A scan's walk over a memtable (`Memtable::cursor`).
pub(crate) type MemtableCursor = MemCursor<Memtable>;

impl Keys for Memtable {
    fn cmp(&self, a: usize, b: usize) -> CmpOrdering {
        let (a, b) = (self.entry(a), self.entry(b));
        cmp_prefixed(a.prefix, &a.key, b.prefix, &b.key)
    }
    fn vs(&self, a: usize, key: &[u8]) -> CmpOrdering {
        let a = self.entry(a);
        cmp_prefixed(a.prefix, &a.key, key_prefix(key), key)
    }
    fn prefix(&self, a: usize) -> u64 {
        self.entry(a).prefix
    }
    fn head(&self, a: usize) -> u128 {
        let key = &self.entry(a).key;
        let mut b = [0u8; 16];
        let n = key.len().min(16);
        b[..n].copy_from_slice(&key[..n]);
        u128::from_be_bytes(b)
    }
}

impl Versions for Memtable {
    fn key(&self, e: usize) -> &[u8] {
        &self.entry(e).key
    }
    fn value(&self, e: usize) -> Option<&[u8]> {
        self.entry(e).value.as_deref()
    }
    fn expiry(&self, e: usize) -> u64 {
        self.entry(e).expiry
    }
    fn version_at(&self, e: usize, seen: u64) -> Option<usize> {
        self.version_index_at(e, seen)
    }
    #[inline]
    fn covered(&self, e: usize, seen: u64) -> bool {
        self.has_ranges() && {
            let e = self.entry(e);
            self.range_covers(&e.key, e.seq, seen)
        }
    }
}

impl Memtable {
    /// The sorted view over every entry appended so far, built from the last one and
    /// published for the next caller.
    pub(super) fn view(&self) -> Arc<View> {
        let len = self.len.load(Ordering::Acquire);
        let last = self.sorted.load_full();
        if last.upto >= len {
            return last;
        }
        let next = Arc::new(last.extended(len, self));
        // Lost to another caller's view: use ours, keep theirs.
        self.sorted.compare_and_swap(&last, Arc::clone(&next));
        next
    }

    /// Calls `f` with the newest entry of each key, in key order, without copying (flushes).
    /// The order is sorted once from the index (each key's newest entry) and kept while no
    /// batch is added, so a flush's two passes (count, then write) sort once.
    pub(crate) fn for_each_newest<E>(
        &self,
        mut f: impl FnMut(&[u8], Option<&[u8]>, u64) -> Result<(), E>,
    ) -> Result<(), E> {
        let seen = self.visible();
        let len = self.len.load(Ordering::Acquire);
        let order = {
            let mut kept = self
                .flush_order
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match &*kept {
                Some((at, order)) if *at == len => Arc::clone(order),
                _ => {
                    let order =
                        Arc::new(sorted::sorted_distinct(self.index.load().entries(), self));
                    *kept = Some((len, Arc::clone(&order)));
                    order
                }
            }
        };
        let ranges = self.has_ranges();
        for &e in order.iter() {
            let newest = self.entry(e);
            if let Some(at) = self.version_at(newest, seen) {
                // An entry a later range deleted goes: the table's ranges hide older tables'
                // keys only (FORMAT.md §3).
                if ranges && self.range_covers(&newest.key, at.seq, seen) {
                    continue;
                }
                f(&newest.key, at.value.as_deref(), at.expiry)?;
            }
        }
        Ok(())
    }

    /// A walk over the keys in `range` in `dir`, as of the first `seen` batches (at most the
    /// visible ones): `cursor.rs`.
    pub(crate) fn cursor(
        self: &Arc<Self>,
        range: &KeyRange,
        dir: Direction,
        seen: u64,
    ) -> MemtableCursor {
        let view = (seen != 0).then(|| self.view());
        MemCursor::new(Arc::clone(self), view, range, dir, seen)
    }

    /// Whether an entry (live or deleted) of the first `seen` batches may lie in `[start,
    /// end]`: `false` only when none does (entries of later batches count as well).
    pub(crate) fn may_hold(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, seen: u64) -> bool {
        if seen == 0 {
            return false;
        }
        let view = self.view();
        view.runs
            .iter()
            .any(|run| !sorted::span(run, start, end, self).is_empty())
    }

    /// The newest visible entry of each key in `[start, end]` as of the first `seen` batches,
    /// sorted, read through a cursor in `dir`: the tests' view of what a scan walks.
    #[cfg(test)]
    pub(crate) fn range_at(
        self: &Arc<Self>,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        seen: u64,
        dir: Direction,
    ) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        use crate::table::Cursor;
        let range = KeyRange::new(start.map(<[u8]>::to_vec), end.map(<[u8]>::to_vec));
        let mut c = self.cursor(&range, dir, seen);
        let mut out = Vec::new();
        while let Some(k) = c.key() {
            out.push((k.to_vec(), c.value().map(<[u8]>::to_vec)));
            #[expect(clippy::unwrap_used, reason = "a memtable cursor never fails")]
            c.step().unwrap();
        }
        if dir == Direction::Backward {
            out.reverse();
        }
        out
    }

    /// `range_at` of everything visible, forward.
    #[cfg(test)]
    pub(crate) fn range(
        self: &Arc<Self>,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        self.range_at(start, end, self.visible(), Direction::Forward)
    }
}
