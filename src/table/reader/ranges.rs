//! What a table's range filter says about a scan's range (`Table::check_range`): the range is
//! first cut to the table's own keys, `min_key..=max_key`, so a scan whose bounds reach past
//! the table still gets an answer when the part inside it is short.

use std::ops::Bound;

use super::super::filter_state::{RangeCheck, RangeFilterState};
use super::Table;
use crate::filter::RangeAnswer;

impl Table {
    /// The range filter as loaded.
    pub fn range_filter(&self) -> &RangeFilterState {
        &self.range_filter
    }

    /// Bytes of range filter held in memory.
    pub fn range_filter_bytes(&self) -> u64 {
        match &self.range_filter {
            RangeFilterState::Valid(r) => r.memory() as u64,
            _ => 0,
        }
    }

    /// Whether the table's key range meets `[start, end]` (it holds keys or deleted ranges, and
    /// its smallest and largest keys leave room for one there): the tables a scan of that range
    /// reaches.
    pub fn meets(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> bool {
        let after_start = match start {
            Bound::Included(k) => !self.ends_before(k),
            Bound::Excluded(k) => !self.ends_before(k) && self.max_key() != k,
            Bound::Unbounded => true,
        };
        let before_end = match end {
            Bound::Included(e) => self.min_key() <= e,
            Bound::Excluded(e) => self.min_key() < e,
            Bound::Unbounded => true,
        };
        let p = self.properties();
        (p.entries > 0 || p.range_deletes > 0) && after_start && before_end
    }

    /// What the range filter says about the keys between `lo` and `hi`: `Empty` only when no
    /// key of the table lies there.
    pub fn check_range(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> RangeCheck {
        let RangeFilterState::Valid(f) = &self.range_filter else {
            return RangeCheck::Unfiltered;
        };
        // Every key of the table is in `min_key..=max_key`: a bound past it moves to it.
        let (min, max) = (self.min_key(), self.max_key());
        let lo = match lo {
            Bound::Included(k) | Bound::Excluded(k) if k >= min => lo,
            _ => Bound::Included(min),
        };
        let hi = match hi {
            Bound::Included(k) | Bound::Excluded(k) if k <= max => hi,
            _ => Bound::Included(max),
        };
        match f.answer(lo, hi) {
            RangeAnswer::Empty => RangeCheck::Empty,
            RangeAnswer::Maybe => RangeCheck::Maybe,
            RangeAnswer::TooWide => RangeCheck::TooWide,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Bound::{self, Excluded, Included, Unbounded};

    use super::*;
    use crate::filter::RangePolicy;
    use crate::table::{FilterProblem, TableBuilder, TableBuilderOptions};

    /// Keys `user:` followed by an 8-byte big-endian multiple of 64, some tombstones: the gaps
    /// between them hold ranges of up to 63 points that are empty. (The last key's first byte
    /// keeps the common prefix at `user:`, so the 8 bytes are the points.)
    fn table(dir: &std::path::Path, range_filter: Option<RangePolicy>) -> (Table, Vec<u64>) {
        let path = dir.join("r.sst");
        let opts = TableBuilderOptions {
            range_filter,
            ..TableBuilderOptions::default()
        };
        let mut b = TableBuilder::create(&path, opts).unwrap();
        let mut points: Vec<u64> = (1..=2000u64).map(|i| i * 64).collect();
        points.push(1 << 63);
        for (i, p) in points.iter().enumerate() {
            let value = (i % 5 != 2).then_some(&b"v"[..]);
            b.add(&key(*p), value).unwrap();
        }
        b.finish().unwrap();
        (Table::open(&path, 1).unwrap(), points)
    }

    fn key(point: u64) -> Vec<u8> {
        [&b"user:"[..], &point.to_be_bytes()].concat()
    }

    fn check(t: &Table, lo: u64, hi: u64) -> RangeCheck {
        let (lo, hi) = (key(lo), key(hi));
        t.check_range(Included(&lo), Included(&hi))
    }

    #[test]
    fn a_range_holding_a_key_is_never_empty_and_most_empty_ones_are() {
        let dir = tempfile::tempdir().unwrap();
        let policy = RangePolicy::bits_per_key(16.0, 32).unwrap();
        let (t, points) = table(dir.path(), Some(policy));
        assert!(matches!(t.range_filter(), RangeFilterState::Valid(_)));
        assert_eq!(t.properties().range_filter, Some(policy));
        assert_eq!(t.rejected_filters(), 0);
        let (mut empty, mut asked) = (0, 0);
        for &p in &points[..2000] {
            for (lo, hi) in [(p - 3, p), (p, p + 20), (p - 31, p - 31 + 31)] {
                assert_ne!(
                    check(&t, lo, hi),
                    RangeCheck::Empty,
                    "[{lo}, {hi}] holds {p}"
                );
            }
            // Just after the key, and in the middle of the gap.
            for (lo, hi) in [(p + 1, p + 32), (p + 20, p + 40)] {
                asked += 1;
                empty += usize::from(check(&t, lo, hi) == RangeCheck::Empty);
            }
        }
        assert!(
            empty * 100 > asked * 98,
            "{empty} of {asked} empty ranges excluded"
        );
        // Wider than the design: the table is read.
        assert_eq!(check(&t, 65, 65 + 200), RangeCheck::TooWide);
        // Cut to the table's keys first: bounds outside it still get an answer.
        let last = *points.last().unwrap();
        let after = key(last + 1);
        assert_eq!(
            t.check_range(Included(&after), Unbounded),
            RangeCheck::Empty
        );
        let first = key(64);
        assert_eq!(
            t.check_range(Unbounded, Excluded(&first)),
            RangeCheck::Empty
        );
        assert_ne!(
            t.check_range(Unbounded, Included(&first)),
            RangeCheck::Empty
        );
        let below: Bound<&[u8]> = Included(b"a");
        assert_eq!(t.check_range(below, Excluded(&first)), RangeCheck::Empty);
    }

    #[test]
    fn without_a_range_filter_every_range_is_unfiltered() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _) = table(dir.path(), None);
        assert!(matches!(t.range_filter(), RangeFilterState::None));
        assert_eq!(t.properties().range_filter, None);
        assert_eq!(check(&t, 65, 70), RangeCheck::Unfiltered);
    }

    #[test]
    fn a_damaged_range_filter_is_dropped_counted_and_never_asked() {
        let dir = tempfile::tempdir().unwrap();
        let (t, _) = table(
            dir.path(),
            Some(RangePolicy::bits_per_key(12.0, 32).unwrap()),
        );
        let footer = {
            let bytes = std::fs::read(t.path()).unwrap();
            let tail = &bytes[bytes.len() - crate::table::FOOTER_LEN..];
            crate::table::Footer::decode(tail, bytes.len() as u64).unwrap()
        };
        let h = footer.range_filter;
        assert!(h.size > 0);
        for at in [h.offset, h.offset + h.size / 2, h.offset + h.size - 1] {
            let mut bytes = std::fs::read(t.path()).unwrap();
            bytes[at as usize] ^= 0x10;
            let path = dir.path().join("damaged.sst");
            std::fs::write(&path, &bytes).unwrap();
            let d = Table::open(&path, 2).unwrap();
            assert!(
                matches!(
                    d.range_filter(),
                    RangeFilterState::Invalid(FilterProblem::RangeDamaged(_))
                ),
                "flip at {at}: {:?}",
                d.range_filter()
            );
            assert_eq!(d.rejected_filters(), 1);
            assert_eq!(check(&d, 65, 70), RangeCheck::Unfiltered);
        }
    }
}
