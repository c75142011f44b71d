//! What a memtable's batches after a given one changed: the questions a transaction's commit
//! asks of the memtables written since its snapshot (`db/conflicts.rs`). Both read only the
//! memtable: a key through the index (its newest entry's batch number) and the ranges deleted,
//! a key range through the entries of the later batches, which lie at the end of the log
//! (batch numbers never decrease along it).

use std::ops::Bound;

use super::Memtable;
use crate::expiry::NEVER;
use crate::table::{DeletedRange, End};

impl Memtable {
    /// Whether a batch after `after` wrote `key` (`hash`: `hash_key(key)`): put, deleted it,
    /// or deleted a range over it. Asked with every batch published (under the writer lock).
    pub(crate) fn written_after(&self, key: &[u8], hash: u64, after: u64) -> bool {
        let newest = self.index.load().find(hash, |e| self.entry(e).key == key);
        if newest.is_some_and(|i| self.entry(i).seq > after) {
            return true;
        }
        self.has_ranges() && self.range_covers(key, after, NEVER)
    }

    /// Whether a batch after `after` wrote a key in `[start, end]` or deleted a range that
    /// meets it (`written_where` of one range).
    #[cfg(test)]
    pub(crate) fn range_written_after(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        after: u64,
    ) -> bool {
        self.written_where(after, |k| within(k, start, end), |r| meets(r, start, end))
    }

    /// Whether a batch after `after` wrote a key `holds` holds or deleted a range `meet`
    /// says may share a key with it. Reads the entries of those batches once (a binary
    /// search finds the first), so its work is the writes since `after`, not the memtable's
    /// size; `holds` decides for many ranges at once (`db/spans.rs`).
    pub(crate) fn written_where(
        &self,
        after: u64,
        holds: impl Fn(&[u8]) -> bool,
        meet: impl Fn(&DeletedRange) -> bool,
    ) -> bool {
        let len = self.len.load(std::sync::atomic::Ordering::Acquire);
        let (mut lo, mut hi) = (0, len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.entry(mid).seq > after {
                true => hi = mid,
                false => lo = mid + 1,
            }
        }
        if (lo..len).any(|i| holds(&self.entry(i).key)) {
            return true;
        }
        self.ranges
            .iter()
            .any(|(_, (seq, r))| *seq > after && meet(r))
    }
}

/// Whether `key` lies in `[start, end]`.
pub(crate) fn within(key: &[u8], start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    let above = match start {
        Bound::Unbounded => true,
        Bound::Included(s) => key >= s,
        Bound::Excluded(s) => key > s,
    };
    let below = match end {
        Bound::Unbounded => true,
        Bound::Included(e) => key <= e,
        Bound::Excluded(e) => key < e,
    };
    above && below
}

/// Whether the deleted range `r` may share a key with `[start, end]`: exact but for a range
/// ending before `k` against a start after `s` with nothing between them (`k` just `s` plus
/// a zero byte), which it takes as meeting — a conflict reported that was not one, never one
/// missed.
pub(crate) fn meets(r: &DeletedRange, start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
    let starts_in_time = match end {
        Bound::Unbounded => true,
        Bound::Included(e) => r.start.as_slice() <= e,
        Bound::Excluded(e) => r.start.as_slice() < e,
    };
    let ends_in_time = match (start, &r.end) {
        (Bound::Unbounded, _) | (_, End::Unbounded) => true,
        (Bound::Included(s), End::Through(k)) => k.as_slice() >= s,
        (Bound::Included(s), End::Before(k))
        | (Bound::Excluded(s), End::Through(k))
        | (Bound::Excluded(s), End::Before(k)) => k.as_slice() > s,
    };
    starts_in_time && ends_in_time
}

#[cfg(test)]
mod tests {
    use std::ops::Bound::{Excluded, Included, Unbounded};

    use crate::db::memtable::Memtable;
    use crate::db::wal::Op;
    use crate::filter::hash_key;
    use crate::table::{DeletedRange, End};

    fn k(i: u32) -> Vec<u8> {
        format!("k{i:04}").into_bytes()
    }

    /// Batches 1..=3 put keys 0..10, 10..20 and 20..30.
    fn three_batches() -> Memtable {
        let m = Memtable::new(1);
        for b in 0..3 {
            m.apply(
                (b * 10..b * 10 + 10)
                    .map(|i| (k(i), Some(b"v".to_vec())))
                    .collect(),
            );
        }
        m
    }

    #[test]
    fn a_key_counts_as_written_after_the_batches_that_wrote_it_only() {
        let m = three_batches();
        assert!(m.written_after(&k(15), hash_key(&k(15)), 1));
        assert!(!m.written_after(&k(15), hash_key(&k(15)), 2));
        assert!(!m.written_after(&k(5), hash_key(&k(5)), 1));
        assert!(!m.written_after(b"absent", hash_key(b"absent"), 0));
        // A deletion is a write.
        m.apply(vec![(k(5), None)]);
        assert!(m.written_after(&k(5), hash_key(&k(5)), 3));
    }

    #[test]
    fn a_key_range_sees_the_later_batches_keys_and_ranges() {
        let m = three_batches();
        let b = |i: u32| k(i);
        assert!(m.range_written_after(Included(&b(12)), Included(&b(12)), 1));
        assert!(!m.range_written_after(Included(&b(0)), Excluded(&b(10)), 1));
        assert!(m.range_written_after(Included(&b(0)), Included(&b(10)), 1));
        assert!(!m.range_written_after(Excluded(&b(29)), Unbounded, 0));
        assert!(!m.range_written_after(Unbounded, Unbounded, 3));
        // A range deleted by batch 4 over keys where nothing was written still counts.
        let r = DeletedRange {
            start: b"m".to_vec(),
            end: End::Before(b"n".to_vec()),
        };
        m.append(vec![Op::from((b"z".to_vec(), None))], 4);
        m.append_ranges(vec![r], 4);
        m.publish(4);
        assert!(m.range_written_after(Included(b"m5"), Included(b"m6"), 3));
        assert!(m.written_after(b"m5", hash_key(b"m5"), 3));
        assert!(!m.range_written_after(Included(b"n"), Excluded(b"y"), 3));
        assert!(!m.range_written_after(Unbounded, Excluded(b"m"), 3));
        assert!(m.range_written_after(Unbounded, Included(b"m"), 3));
    }
}
