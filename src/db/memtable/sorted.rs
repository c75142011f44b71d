//! The memtable's keys in order, built only when a scan (`Memtable::cursor`) needs it.
//! Writes never pay for it; a point lookup never uses it.
//!
//! A `View` covers the memtable's first `upto` log entries as a few sorted runs of entry
//! numbers, one per distinct key within a run (which of the key's entries does not matter:
//! the run gives only the key's place; its value is looked up through the hash index). When a
//! scan finds entries beyond `upto`, it sorts just those into a new run and merges the last
//! runs while the older is at most twice the newer (a binary counter), so a key is merged
//! O(log n) times over the memtable's life and a view has O(log n) runs. The new view is
//! published for the next scan (`ArcSwap::compare_and_swap`; a scan that loses the race uses
//! its own). A flush sorts each key's newest entry from the index instead (`mod.rs`).

use std::cmp::Ordering;
use std::ops::{Bound, Range};
use std::sync::Arc;

/// Sorted runs over the first `upto` entries (see the module comment).
#[derive(Default)]
pub(super) struct View {
    /// Entries covered: `0..upto`.
    pub(super) upto: usize,
    /// Runs, oldest (and largest) first; each sorted by key with distinct keys.
    pub(super) runs: Vec<Arc<Vec<usize>>>,
}

/// How a view's caller orders entries.
pub(super) trait Keys {
    /// Two entries' keys compared.
    fn cmp(&self, a: usize, b: usize) -> Ordering;
    /// An entry's key against a key.
    fn vs(&self, a: usize, key: &[u8]) -> Ordering;
    /// The key's first 16 bytes, big-endian, zero-padded: ordered as the keys wherever it
    /// differs, so a sort compares key bytes only on its ties.
    fn head(&self, a: usize) -> u128;
}

/// `entries` sorted by key, one per key. Sorting (head, entry) pairs loads each key once;
/// sorting entry numbers by `cmp` loaded two keys per comparison (measured: the sort, its
/// comparisons and `memcmp` were a fifth of a bulk load's flush thread).
pub(super) fn sorted_distinct(
    entries: impl Iterator<Item = usize>,
    keys: &impl Keys,
) -> Vec<usize> {
    let mut pairs: Vec<(u128, usize)> = entries.map(|e| (keys.head(e), e)).collect();
    pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| keys.cmp(a.1, b.1)));
    pairs.dedup_by(|a, b| a.0 == b.0 && keys.cmp(a.1, b.1) == Ordering::Equal);
    pairs.into_iter().map(|(_, e)| e).collect()
}

/// The union of two runs, sorted, one entry per key.
fn merge(a: &[usize], b: &[usize], keys: &impl Keys) -> Vec<usize> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match keys.cmp(a[i], b[j]) {
            Ordering::Less => {
                out.push(a[i]);
                i += 1;
            }
            Ordering::Greater => {
                out.push(b[j]);
                j += 1;
            }
            Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

impl View {
    /// This view extended to the first `len` entries (`len > self.upto`).
    pub(super) fn extended(&self, len: usize, keys: &impl Keys) -> View {
        let mut runs = self.runs.clone();
        if len > self.upto {
            runs.push(Arc::new(sorted_distinct(self.upto..len, keys)));
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

/// The part of `run` (sorted, distinct keys) whose keys lie between `start` and `end`: two
/// binary searches.
pub(super) fn span(
    run: &[usize],
    start: Bound<&[u8]>,
    end: Bound<&[u8]>,
    keys: &impl Keys,
) -> Range<usize> {
    let vs = |e, k| keys.vs(e, k);
    let from = match start {
        Bound::Included(k) => run.partition_point(|&e| vs(e, k) == Ordering::Less),
        Bound::Excluded(k) => run.partition_point(|&e| vs(e, k) != Ordering::Greater),
        Bound::Unbounded => 0,
    };
    let to = match end {
        Bound::Included(k) => run.partition_point(|&e| vs(e, k) != Ordering::Greater),
        Bound::Excluded(k) => run.partition_point(|&e| vs(e, k) == Ordering::Less),
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
    }

    /// The entries of every run in the range, one per key, sorted.
    fn in_range(view: &View, start: Bound<&[u8]>, end: Bound<&[u8]>, keys: &Nums) -> Vec<usize> {
        let hits = view
            .runs
            .iter()
            .flat_map(|run| run[span(run, start, end, keys)].to_vec());
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
                assert!(run.windows(2).all(|w| keys.0[w[0]] < keys.0[w[1]]));
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
