//! The memtable's keys in order, built only when a scan (`Memtable::cursor`) needs it.
//! Writes never pay for it; a point lookup never uses it.
//!
//! A `View` covers the memtable's first `upto` log entries as a few sorted runs of entry
//! numbers, one per distinct key within a run: the key's newest entry in the run, so that
//! the newest of a key's entries across the runs is its newest entry in the view, from which
//! a reader walks the key's links back to the version it sees. When a
//! scan finds entries beyond `upto`, it sorts just those into a new run and merges the last
//! runs while the older is at most twice the newer (a binary counter), so a key is merged
//! O(log n) times over the memtable's life and a view has O(log n) runs. The new view is
//! published for the next scan (`ArcSwap::compare_and_swap`; a scan that loses the race uses
//! its own). A flush sorts each key's newest entry from the index instead (`mod.rs`).
//!
//! Each run keeps its entries' 8-byte key prefixes beside them (`Run::prefixes`), so a scan's
//! seek is a binary search over one dense array, and loads an entry and its key only where
//! prefixes tie; searching the entry numbers loaded an entry and its key bytes at every step.

use std::cmp::Ordering;
use std::ops::{Bound, Range};
use std::sync::Arc;

use crate::coding::key_prefix;

/// Sorted runs over the first `upto` entries (see the module comment).
#[derive(Default)]
pub(super) struct View {
    /// Entries covered: `0..upto`.
    pub(super) upto: usize,
    /// Runs, oldest (and largest) first; each sorted by key with distinct keys.
    pub(super) runs: Vec<Arc<Run>>,
}

/// One sorted run: entry numbers, one per distinct key, and each one's `key_prefix`.
#[derive(Default)]
pub(super) struct Run {
    pub(super) entries: Vec<usize>,
    pub(super) prefixes: Vec<u64>,
}

impl Run {
    fn new(entries: Vec<usize>, keys: &impl Keys) -> Run {
        let prefixes = entries.iter().map(|&e| keys.prefix(e)).collect();
        Run { entries, prefixes }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The first position whose key is above `key` (`strict`) or at or above it.
    pub(super) fn lower(&self, key: &[u8], strict: bool, keys: &impl Keys) -> usize {
        let p = key_prefix(key);
        let lo = self.prefixes.partition_point(|&x| x < p);
        let ties = self.prefixes[lo..].partition_point(|&x| x == p);
        lo + self.entries[lo..lo + ties].partition_point(|&e| match keys.vs(e, key) {
            Ordering::Less => true,
            Ordering::Equal => strict,
            Ordering::Greater => false,
        })
    }
}

/// How a view's caller orders entries.
pub(crate) trait Keys {
    /// Two entries' keys compared.
    fn cmp(&self, a: usize, b: usize) -> Ordering;
    /// An entry's key against a key.
    fn vs(&self, a: usize, key: &[u8]) -> Ordering;
    /// The key's first 16 bytes, big-endian, zero-padded: ordered as the keys wherever it
    /// differs, so a sort compares key bytes only on its ties.
    fn head(&self, a: usize) -> u128;
    /// The key's `key_prefix`.
    fn prefix(&self, a: usize) -> u64;
}

/// `entries` sorted by key, one per key. Sorting (head, entry) pairs loads each key once;
/// sorting entry numbers by `cmp` loaded two keys per comparison (measured: the sort, its
/// comparisons and `memcmp` were a fifth of a bulk load's flush thread).
pub(super) fn sorted_distinct(
    entries: impl Iterator<Item = usize>,
    keys: &impl Keys,
) -> Vec<usize> {
    let mut pairs: Vec<(u128, usize)> = entries.map(|e| (keys.head(e), e)).collect();
    // Among a key's entries the newest (the highest number) sorts first, and is kept.
    pairs.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| keys.cmp(a.1, b.1))
            .then(b.1.cmp(&a.1))
    });
    pairs.dedup_by(|a, b| a.0 == b.0 && keys.cmp(a.1, b.1) == Ordering::Equal);
    pairs.into_iter().map(|(_, e)| e).collect()
}

/// The union of two runs, sorted, one entry per key (`b`'s, the newer run's, where both hold
/// a key).
fn merge(a: &Run, b: &Run, keys: &impl Keys) -> Run {
    let mut out = Run {
        entries: Vec::with_capacity(a.len() + b.len()),
        prefixes: Vec::with_capacity(a.len() + b.len()),
    };
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let by_prefix = a.prefixes[i].cmp(&b.prefixes[j]);
        let (from, at) = match by_prefix.then_with(|| keys.cmp(a.entries[i], b.entries[j])) {
            Ordering::Less => {
                i += 1;
                (a, i - 1)
            }
            Ordering::Greater => {
                j += 1;
                (b, j - 1)
            }
            Ordering::Equal => {
                i += 1;
                j += 1;
                (b, j - 1)
            }
        };
        out.entries.push(from.entries[at]);
        out.prefixes.push(from.prefixes[at]);
    }
    for (run, at) in [(a, i), (b, j)] {
        out.entries.extend_from_slice(&run.entries[at..]);
        out.prefixes.extend_from_slice(&run.prefixes[at..]);
    }
    out
}

impl View {
    /// This view extended to the first `len` entries (`len > self.upto`).
    pub(super) fn extended(&self, len: usize, keys: &impl Keys) -> View {
        let mut runs = self.runs.clone();
        if len > self.upto {
            runs.push(Arc::new(Run::new(
                sorted_distinct(self.upto..len, keys),
                keys,
            )));
        }
        while runs.len() >= 2 {
            let n = runs.len();
            if runs[n - 2].len() > 2 * runs[n - 1].len() {
                break;
            }
            let (newer, older) = (runs[n - 1].clone(), runs[n - 2].clone());
            runs.truncate(n - 2);
            runs.push(Arc::new(merge(&older, &newer, keys)));
        }
        View {
            upto: len.max(self.upto),
            runs,
        }
    }
}

/// The part of `run` whose keys lie between `start` and `end`.
pub(super) fn span(
    run: &Run,
    start: Bound<&[u8]>,
    end: Bound<&[u8]>,
    keys: &impl Keys,
) -> Range<usize> {
    let from = match start {
        Bound::Included(k) => run.lower(k, false, keys),
        Bound::Excluded(k) => run.lower(k, true, keys),
        Bound::Unbounded => 0,
    };
    let to = match end {
        Bound::Included(k) => run.lower(k, true, keys),
        Bound::Excluded(k) => run.lower(k, false, keys),
        Bound::Unbounded => run.len(),
    };
    from..to.max(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Entry e holds the 4-byte big-endian key `self.0[e]`; `head` keeps only its top
    /// byte, so most sorts fall back to `cmp` on ties.
    struct Nums(Vec<u32>);
    impl Keys for Nums {
        fn cmp(&self, a: usize, b: usize) -> Ordering {
            self.0[a].cmp(&self.0[b])
        }
        fn vs(&self, a: usize, key: &[u8]) -> Ordering {
            self.0[a].to_be_bytes().as_slice().cmp(key)
        }
        fn head(&self, a: usize) -> u128 {
            u128::from(self.0[a] >> 8)
        }
        fn prefix(&self, a: usize) -> u64 {
            key_prefix(&self.0[a].to_be_bytes())
        }
    }

    /// The entries of every run in the range, one per key, sorted.
    fn in_range(view: &View, start: Bound<&[u8]>, end: Bound<&[u8]>, keys: &Nums) -> Vec<usize> {
        let hits = view
            .runs
            .iter()
            .flat_map(|run| run.entries[span(run, start, end, keys)].to_vec());
        sorted_distinct(hits, keys)
    }

    #[test]
    fn runs_stay_few_sorted_and_distinct() {
        // Entry e holds key keys[e]: repeats across and within the extensions.
        let keys = Nums((0..3000u32).map(|e| (e * 7919) % 1100).collect());
        let cmp = &keys;
        let mut view = View::default();
        let mut len = 0;
        while len < keys.0.len() {
            len = (len + 1 + len / 3).min(keys.0.len());
            view = view.extended(len, cmp);
            assert_eq!(view.upto, len);
            assert!(view.runs.len() <= 2 * (usize::BITS - len.leading_zeros()) as usize);
            for run in &view.runs {
                assert!(run.entries.windows(2).all(|w| keys.0[w[0]] < keys.0[w[1]]));
                let prefixes: Vec<u64> = run.entries.iter().map(|&e| keys.prefix(e)).collect();
                assert_eq!(run.prefixes, prefixes);
            }
            // Every key written so far, once, in order, whatever the bounds.
            let want: std::collections::BTreeSet<u32> = keys.0[..len].iter().copied().collect();
            let (lo, hi) = (100u32.to_be_bytes(), 900u32.to_be_bytes());
            let got: Vec<u32> = in_range(&view, Bound::Excluded(&lo), Bound::Included(&hi), cmp)
                .iter()
                .map(|&e| keys.0[e])
                .collect();
            let expect: Vec<u32> = want.range(101..=900).copied().collect();
            assert_eq!(got, expect);
            let all = in_range(&view, Bound::Unbounded, Bound::Unbounded, cmp);
            assert_eq!(all.len(), want.len());
        }
        // A reversed range is empty, not a panic.
        let (lo, hi) = (900u32.to_be_bytes(), 100u32.to_be_bytes());
        assert!(in_range(&view, Bound::Included(&lo), Bound::Included(&hi), cmp).is_empty());
    }
}
