//! A set of key ranges as sorted, disjoint spans: whether any range holds a key is one binary
//! search, so a transaction's commit asks it of each key written since its snapshot once,
//! whatever the number of ranges it scanned (`conflicts.rs`). Without it the check walked the
//! later writes once per range, under the writer lock.
//!
//! Ranges that share more than one key's place are merged; two that only meet at a key
//! (`[a, b]` and `[b, c]`, or `[a, b)` and `(b, c]`) stay apart, and the search takes the later
//! one for `b`. The set holds exactly the keys the ranges hold.

use std::cmp::Ordering;
use std::ops::Bound;

use super::memtable::{meets, range_is_empty, within};
use crate::table::DeletedRange;

/// A range of keys by its two bounds, borrowed.
pub(crate) type Span<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// Sorted, disjoint spans (see the module comment).
pub(crate) struct Spans<'a> {
    spans: Vec<Span<'a>>,
}

impl<'a> Spans<'a> {
    /// The union of `ranges` (empty ones dropped).
    pub(crate) fn new(ranges: impl IntoIterator<Item = Span<'a>>) -> Self {
        let mut sorted: Vec<Span<'a>> = ranges
            .into_iter()
            .filter(|(s, e)| !range_is_empty(*s, *e))
            .collect();
        sorted.sort_by(|a, b| cmp_start(a.0, b.0));
        let mut spans: Vec<Span<'a>> = Vec::with_capacity(sorted.len());
        for (s, e) in sorted {
            match spans.last_mut() {
                Some(last) if !gap_between(last.1, s) => {
                    if ends_later(e, last.1) {
                        last.1 = e;
                    }
                }
                _ => spans.push((s, e)),
            }
        }
        Spans { spans }
    }

    /// Whether no range was given (or all were empty).
    pub(crate) fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Whether a span holds `key`: the last span starting at or before it, if it reaches it.
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        let i = self.spans.partition_point(|(s, _)| starts_by(*s, key));
        i > 0 && within(key, self.spans[i - 1].0, self.spans[i - 1].1)
    }

    /// Whether the deleted range `r` may share a key with a span (`memtable::meets`).
    pub(crate) fn meet(&self, r: &DeletedRange) -> bool {
        self.spans.iter().any(|(s, e)| meets(r, *s, *e))
    }
}

/// Start bounds in key order: unbounded first; at one key, included before excluded.
fn cmp_start(a: Bound<&[u8]>, b: Bound<&[u8]>) -> Ordering {
    match (a, b) {
        (Bound::Unbounded, Bound::Unbounded) => Ordering::Equal,
        (Bound::Unbounded, _) => Ordering::Less,
        (_, Bound::Unbounded) => Ordering::Greater,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => {
            x.cmp(y).then_with(|| match (a, b) {
                (Bound::Included(_), Bound::Excluded(_)) => Ordering::Less,
                (Bound::Excluded(_), Bound::Included(_)) => Ordering::Greater,
                _ => Ordering::Equal,
            })
        }
    }
}

/// Whether a span starting at `start` (not before the one ending at `end`) starts at or past
/// that end's key: the two share at most that key, and stay apart (see the module comment).
fn gap_between(end: Bound<&[u8]>, start: Bound<&[u8]>) -> bool {
    match (end, start) {
        (Bound::Unbounded, _) | (_, Bound::Unbounded) => false,
        (Bound::Included(e) | Bound::Excluded(e), Bound::Included(s) | Bound::Excluded(s)) => {
            s >= e
        }
    }
}

/// Whether the end bound `a` reaches past the end bound `b`.
fn ends_later(a: Bound<&[u8]>, b: Bound<&[u8]>) -> bool {
    match (a, b) {
        (_, Bound::Unbounded) => false,
        (Bound::Unbounded, _) => true,
        (Bound::Included(x), Bound::Excluded(y)) => x >= y,
        (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => x > y,
    }
}

/// Whether a span starting at `start` starts at or before `key`.
fn starts_by(start: Bound<&[u8]>, key: &[u8]) -> bool {
    match start {
        Bound::Unbounded => true,
        Bound::Included(s) => s <= key,
        Bound::Excluded(s) => s < key,
    }
}

#[cfg(test)]
mod tests {
    use std::ops::Bound::{self, Excluded, Included, Unbounded};

    use super::*;

    fn b(i: u8) -> Vec<u8> {
        vec![i]
    }

    #[test]
    fn the_spans_hold_exactly_what_the_ranges_hold() {
        use proptest::prelude::*;
        let bound = (0u8..3, 0u8..12).prop_map(|(kind, k)| match kind {
            0 => Bound::Included(vec![k]),
            1 => Bound::Excluded(vec![k]),
            _ => Bound::Unbounded,
        });
        proptest!(|(ranges in proptest::collection::vec((bound.clone(), bound), 0..8))| {
            let borrowed = || ranges.iter().map(|(s, e)| (s.as_ref().map(Vec::as_slice), e.as_ref().map(Vec::as_slice)));
            let spans = Spans::new(borrowed());
            for k in 0u8..13 {
                let key = [k];
                let held = borrowed().any(|(s, e)| within(&key, s, e));
                prop_assert_eq!(spans.contains(&key), held, "key {} ranges {:?}", k, ranges);
            }
        });
    }

    #[test]
    fn merged_spans_keep_the_outer_bounds() {
        let (one, three, five, seven) = (b(1), b(3), b(5), b(7));
        let spans = Spans::new([
            (Included(&five[..]), Excluded(&seven[..])),
            (Included(&one[..]), Included(&three[..])),
            (Excluded(&three[..]), Excluded(&five[..])),
        ]);
        assert!(spans.contains(&b(1)) && spans.contains(&b(4)) && spans.contains(&b(6)));
        assert!(!spans.contains(&b(7)) && !spans.contains(&b(0)));
        assert!(Spans::new([(Unbounded, Excluded(&one[..]))]).contains(&b(0)));
        assert!(Spans::new(std::iter::empty()).is_empty());
    }
}
