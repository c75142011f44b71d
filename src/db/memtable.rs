//! The in-memory write buffer: a sorted map from key to value-or-tombstone, filled by writes
//! (after their WAL record is written) and flushed to an L0 table when it reaches
//! `Options::memtable_size`. Readers take the lock only for the lookup itself.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;

/// Bytes charged per entry on top of key and value, for the size estimate.
const ENTRY_OVERHEAD: usize = 48;

/// A memtable and the WAL file that backs it.
#[derive(Debug)]
pub(crate) struct Memtable {
    map: RwLock<BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
    size: AtomicUsize,
    /// File number of the WAL holding this memtable's writes.
    pub(crate) wal_id: u64,
}

impl Memtable {
    pub(crate) fn new(wal_id: u64) -> Self {
        Memtable {
            map: RwLock::new(BTreeMap::new()),
            size: AtomicUsize::new(0),
            wal_id,
        }
    }

    /// Applies all of `ops` under one lock, so readers see all or none of a batch.
    pub(crate) fn apply(&self, ops: Vec<(Vec<u8>, Option<Vec<u8>>)>) {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        let mut added = 0;
        for (k, v) in ops {
            added += k.len() + v.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD;
            map.insert(k, v);
        }
        // Release: a reader that sees the new size sees the entries (see `get`).
        self.size.fetch_add(added, Ordering::Release);
    }

    /// `Some(Some(v))` value, `Some(None)` tombstone, `None` not here. An empty memtable (the
    /// common case right after a flush) answers without touching the lock, whose reader count
    /// every reader would otherwise write.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        if self.size.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    /// Approximate bytes held.
    pub(crate) fn approximate_size(&self) -> usize {
        self.size.load(Ordering::Relaxed)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// A sorted copy of the entries in `range` (for scans and flushes); empty for an empty or
    /// reversed range (which `BTreeMap::range` would panic on).
    pub(crate) fn range(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        if range_is_empty(start, end) {
            return Vec::new();
        }
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        map.range::<[u8], _>((start, end))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// True when no key lies between `start` and `end`: reversed bounds, or equal bounds that are
/// not both inclusive.
pub(crate) fn range_is_empty(start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    match (start, end) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a >= b
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_write_wins_and_tombstones_are_kept() {
        let m = Memtable::new(1);
        m.apply(vec![
            (b"a".to_vec(), Some(b"1".to_vec())),
            (b"a".to_vec(), Some(b"2".to_vec())),
        ]);
        m.apply(vec![(b"b".to_vec(), None)]);
        assert_eq!(m.get(b"a"), Some(Some(b"2".to_vec())));
        assert_eq!(m.get(b"b"), Some(None));
        assert_eq!(m.get(b"c"), None);
        assert_eq!(m.range(Bound::Unbounded, Bound::Unbounded).len(), 2);
        assert!(m.approximate_size() > 0);
        // Equal excluded bounds and reversed bounds are empty ranges, not panics.
        let (a, b): (&[u8], &[u8]) = (b"a", b"b");
        assert!(m.range(Bound::Excluded(a), Bound::Excluded(a)).is_empty());
        assert!(m.range(Bound::Included(b), Bound::Excluded(a)).is_empty());
        assert!(m.range(Bound::Excluded(a), Bound::Included(a)).is_empty());
        assert_eq!(m.range(Bound::Included(a), Bound::Included(a)).len(), 1);
    }
}
