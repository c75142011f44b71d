//! The ranges a memtable's batches deleted (`WriteBatch::delete_range`): kept as written, each
//! with its batch's number, in `Memtable::ranges`. A range hides the entries of earlier
//! batches of its memtable (`covered`: lookups, cursors, the flush) and, once its batch is
//! seen, every key of older memtables and tables (`ranges_at`: a scan's cover, the flush's
//! table).
//!
//! A lookup asks `range_covers`: is the key inside a range of a batch after its entry's and
//! among those it sees? The ranges are indexed in **runs** (`RangeIndex`), each the ranges of
//! a stretch of the list cut into disjoint pieces that carry the batch numbers of the ranges
//! over them (`Fragments`, a binary search away); the newest ranges, fewer than `RUN`, are
//! read one by one. Runs merge as a binary counter does (two of like size become one), so a
//! range is rebuilt into a run O(log n) times and a lookup reads O(log n) runs. The one writer
//! builds them as it appends; readers load the index without a lock (`ArcSwap`). Reading the
//! list whole, as the first version did, cost an absent get 102 µs with 10^4 ranges in the
//! memtable of a 10^6-key store; through the runs, 0.72 µs.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Memtable, ENTRY_OVERHEAD};
use crate::table::{successor, DeletedRange, End};

/// Ranges below this many past the last run are read one by one; this many make a run.
const RUN: usize = 32;

/// A piece keeps the highest this many batch numbers of the ranges over it: enough for a
/// lookup that sees every batch (it needs the highest), and for a snapshot that sees all but
/// the last few; an older snapshot reads the run's ranges one by one (overlapping ranges
/// would otherwise give each piece a number per range, memory quadratic in their count).
const KEPT: usize = 4;

/// One piece of a run: every key from `start` to below `end` (`None`: past every key) is
/// covered by the ranges of exactly these batches.
struct Piece {
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    /// The highest `KEPT` batch numbers, highest first.
    seqs: Vec<u64>,
    /// More batches' ranges cover the piece than `seqs` holds.
    more: bool,
}

/// The ranges `from..upto` of a memtable's list, cut into disjoint pieces sorted by start.
pub(super) struct Fragments {
    from: usize,
    upto: usize,
    pieces: Vec<Piece>,
}

impl Fragments {
    /// The fragments of `ranges` (the list's `from..`), by a sweep over their bounds.
    fn build(from: usize, ranges: &[&(u64, DeletedRange)]) -> Fragments {
        let upto = from + ranges.len();
        // Each range as [start, end) with an exclusive end (or none).
        let mut starts: Vec<(&[u8], u64)> = Vec::new();
        let mut ends: Vec<(Vec<u8>, u64)> = Vec::new();
        for (seq, r) in ranges
            .iter()
            .map(|x| (x.0, &x.1))
            .filter(|(_, r)| !r.is_empty())
        {
            starts.push((&r.start, seq));
            match &r.end {
                End::Before(k) => ends.push((k.clone(), seq)),
                End::Through(k) => ends.push((successor(k), seq)),
                End::Unbounded => {}
            }
        }
        starts.sort_unstable();
        ends.sort_unstable();
        let mut bounds: Vec<&[u8]> = starts.iter().map(|(k, _)| *k).collect();
        bounds.extend(ends.iter().map(|(k, _)| k.as_slice()));
        bounds.sort_unstable();
        bounds.dedup();
        let mut active: BTreeMap<u64, usize> = BTreeMap::new();
        let (mut s, mut e) = (0, 0);
        let mut pieces = Vec::new();
        for (i, &b) in bounds.iter().enumerate() {
            while s < starts.len() && starts[s].0 == b {
                *active.entry(starts[s].1).or_default() += 1;
                s += 1;
            }
            while e < ends.len() && ends[e].0.as_slice() == b {
                if let Some(n) = active.get_mut(&ends[e].1) {
                    *n -= 1;
                    if *n == 0 {
                        active.remove(&ends[e].1);
                    }
                }
                e += 1;
            }
            if active.is_empty() {
                continue;
            }
            pieces.push(Piece {
                start: b.to_vec(),
                end: bounds.get(i + 1).map(|k| k.to_vec()),
                seqs: active.keys().rev().take(KEPT).copied().collect(),
                more: active.len() > KEPT,
            });
        }
        Fragments { from, upto, pieces }
    }

    /// Whether a range of these, of a batch after `floor` and at most `seen`, covers `key`
    /// (`None`: the piece does not keep the numbers `seen` needs; ask the ranges).
    fn covers(&self, key: &[u8], floor: u64, seen: u64) -> Option<bool> {
        let pieces = &self.pieces;
        let at = pieces.partition_point(|p| p.start.as_slice() <= key);
        let Some(p) = at.checked_sub(1).map(|i| &pieces[i]) else {
            return Some(false);
        };
        if p.end.as_deref().is_some_and(|end| key >= end) {
            return Some(false);
        }
        // The highest number at most `seen`: the range it names covers the key.
        match p.seqs.get(p.seqs.partition_point(|&s| s > seen)) {
            Some(&s) => Some(s > floor),
            None if p.more => None,
            None => Some(false),
        }
    }
}

/// A memtable's runs, oldest first, each of the ranges right after the one before it.
#[derive(Default)]
pub(super) struct RangeIndex {
    runs: Vec<Arc<Fragments>>,
}

impl RangeIndex {
    /// How many ranges of the list the runs hold.
    fn upto(&self) -> usize {
        self.runs.last().map_or(0, |r| r.upto)
    }
}

impl Memtable {
    /// Appends `ranges` as deleted by batch `seq` (as `append`: seen once published), and
    /// indexes them once `RUN` wait (see the module comment).
    pub(crate) fn append_ranges(&self, ranges: Vec<DeletedRange>, seq: u64) {
        if ranges.is_empty() {
            return;
        }
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
        let count = self.ranges.count();
        let index = self.range_index.load();
        if count - index.upto() < RUN {
            return;
        }
        let mut runs = index.runs.clone();
        let mut from = index.upto();
        // A binary counter: the new run swallows the runs before it no larger than itself.
        while let Some(last) = runs.last().filter(|r| r.upto - r.from <= count - from) {
            from = last.from;
            runs.pop();
        }
        let list: Vec<&(u64, DeletedRange)> =
            (from..count).filter_map(|i| self.ranges.get(i)).collect();
        runs.push(Arc::new(Fragments::build(from, &list)));
        self.range_index.store(Arc::new(RangeIndex { runs }));
    }

    /// Whether any range was deleted here (by any batch, published or not).
    #[inline(always)]
    pub(crate) fn has_ranges(&self) -> bool {
        self.ranges.count() > 0
    }

    /// Whether a range deleted by a batch after `floor` and among the first `seen` covers
    /// `key`: each run, then the ranges past the last one by one.
    pub(crate) fn range_covers(&self, key: &[u8], floor: u64, seen: u64) -> bool {
        let one = |i: usize| {
            self.ranges
                .get(i)
                .is_some_and(|(seq, r)| floor < *seq && *seq <= seen && r.covers(key))
        };
        let index = self.range_index.load();
        for run in &index.runs {
            let covered = match run.covers(key, floor, seen) {
                Some(c) => c,
                None => (run.from..run.upto).any(one),
            };
            if covered {
                return true;
            }
        }
        (index.upto()..self.ranges.count()).any(one)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u64) -> Vec<u8> {
        format!("k{i:04}").into_bytes()
    }

    /// A memtable whose batches delete ranges of every kind, nested, overlapping and touching,
    /// a few per batch (so that runs form and merge): every key at every floor and sight answers
    /// as a plain reading of the list.
    #[test]
    fn the_runs_answer_as_the_list_read_one_by_one() {
        let m = Memtable::new(1);
        let mut x = 7u64;
        let mut rand = |n: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        let mut all: Vec<(u64, DeletedRange)> = Vec::new();
        for _ in 0..400 {
            let seq = m.next();
            let batch: Vec<DeletedRange> = (0..1 + rand(3))
                .map(|_| {
                    let a = rand(500);
                    let wide = rand(40) == 0;
                    let b = a + rand(if wide { 500 } else { 12 });
                    let end = match rand(4) {
                        0 => End::Before(k(b)),
                        1 => End::Through(k(b)),
                        2 => End::Through([k(b), vec![0]].concat()),
                        _ if rand(8) == 0 => End::Unbounded,
                        _ => End::Before(k(b)),
                    };
                    DeletedRange { start: k(a), end }
                })
                .collect();
            all.extend(batch.iter().map(|r| (seq, r.clone())));
            m.append_ranges(batch, seq);
            m.publish(seq);
        }
        let index = m.range_index.load();
        assert!(index.runs.len() >= 2, "{} runs", index.runs.len());
        assert!(index.runs.iter().any(|r| r.pieces.iter().any(|p| p.more)));
        let last = m.visible();
        let mut keys: Vec<Vec<u8>> = (0..1100).map(k).collect();
        keys.extend((0..1100).map(|i| [k(i), vec![0]].concat()));
        keys.push(Vec::new());
        for key in &keys {
            for (floor, seen) in [(0, last), (0, last / 2), (last / 3, last), (last - 5, last)] {
                let want = all
                    .iter()
                    .any(|(seq, r)| floor < *seq && *seq <= seen && r.covers(key));
                assert_eq!(
                    m.range_covers(key, floor, seen),
                    want,
                    "{:?} floor {floor} seen {seen}",
                    String::from_utf8_lossy(key)
                );
            }
        }
    }

    /// Ranges nested a thousand deep: each piece keeps the highest numbers only, and a lookup
    /// that sees fewer batches reads the run's ranges, answering the same.
    #[test]
    fn deeply_nested_ranges_keep_the_highest_numbers() {
        let m = Memtable::new(1);
        for i in 0..1000 {
            let seq = m.next();
            let r = DeletedRange {
                start: k(i),
                end: End::Before(k(3000 - i)),
            };
            m.append_ranges(vec![r], seq);
            m.publish(seq);
        }
        let index = m.range_index.load();
        let kept: usize = index
            .runs
            .iter()
            .flat_map(|r| &r.pieces)
            .map(|p| p.seqs.len())
            .sum();
        assert!(kept <= KEPT * 2 * 1000, "{kept} numbers kept");
        for (i, want) in [(0, true), (1500, true), (2999, true), (3000, false)] {
            assert_eq!(m.range_covers(&k(i), 0, m.visible()), want, "{i}");
        }
        // Key 10 lies in the ranges of batches 1 to 11.
        assert!(!m.range_covers(&k(10), 11, m.visible()));
        assert!(m.range_covers(&k(10), 10, m.visible()));
        assert!(m.range_covers(&k(10), 0, 1));
        assert!(!m.range_covers(&k(10), 1, 1));
        assert!(m.range_covers(&k(2990), 5, 11));
        assert!(!m.range_covers(&k(2990), 11, 900));
    }
}
