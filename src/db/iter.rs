//! Range scans: `Db::scan` merges a sorted copy of each memtable's part of the range with
//! lazy iterators over every table whose key range overlaps it (`merge.rs`: newest source
//! wins per key), hides tombstones, and stops at the end bound. An empty or reversed range
//! yields nothing (never a panic).
//!
//! Prefix filters: when the whole range lies inside one prefix `q` of
//! `Options::prefix_extractor` (`range_prefix`), each overlapping table's prefix filter is asked
//! for `q` and a table it says lacks `q` gets no iterator at all. That is exact, not a
//! heuristic: every key in the range starts with `q` and the rule gives each of them the prefix
//! `q` (the rules are prefix-stable, `prefix.rs`), so a table without `q` has none of them. A
//! table written under another rule, or none, is read. Data blocks read by a scan's table
//! iterators are counted per level (`LevelStats::scan_block_reads`).

use std::ops::Bound;
use std::sync::Arc;

use super::memtable::range_is_empty;
use super::merge::{MergeIter, Source};
use super::stats::{bump, Counters};
use super::version::State;
use crate::error::Result;
use crate::filter::hash_key;
use crate::prefix::{prefix_end, PrefixExtractor};
use crate::table::{Entry, PrefixCheck, Table, TableIter};

fn bound_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// True when `t` may hold keys in [`s`, `e`].
fn overlaps(t: &Table, s: Bound<&[u8]>, e: Bound<&[u8]>) -> bool {
    let after_start = match s {
        Bound::Included(k) => t.max_key() >= k,
        Bound::Excluded(k) => t.max_key() > k,
        Bound::Unbounded => true,
    };
    let before_end = match e {
        Bound::Included(k) => t.min_key() <= k,
        Bound::Excluded(k) => t.min_key() < k,
        Bound::Unbounded => true,
    };
    t.properties().entries > 0 && after_start && before_end
}

/// The prefix every key in [`start`, `end`] has under `rule`, if there is one: the prefix `q`
/// the rule gives the start key, when the end bound does not reach past the keys starting
/// with `q`. `None` means the scan cannot use prefix filters.
pub(super) fn range_prefix<'k>(
    rule: PrefixExtractor,
    start: Bound<&'k [u8]>,
    end: Bound<&[u8]>,
) -> Option<&'k [u8]> {
    let (Bound::Included(s) | Bound::Excluded(s)) = start else {
        return None;
    };
    let q = rule.prefix(s)?;
    let inside = match (prefix_end(q), end) {
        // `q` is all 0xff: every key from `q` on starts with it.
        (None, _) => true,
        (Some(_), Bound::Unbounded) => false,
        (Some(pe), Bound::Excluded(e)) => e <= pe.as_slice(),
        (Some(pe), Bound::Included(e)) => e < pe.as_slice(),
    };
    inside.then_some(q)
}

/// A table's iterator that adds the data blocks it reads to its level's scan counter (on the
/// thread that drives it).
struct Counted {
    iter: TableIter,
    counters: Arc<Counters>,
    level: usize,
    counted: u64,
}

impl Iterator for Counted {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = self.iter.next();
        let blocks = self.iter.stats.blocks;
        if blocks != self.counted {
            let c = &self.counters.reader().levels[self.level];
            bump(&c.scan_block_reads, blocks - self.counted);
            self.counted = blocks;
        }
        next
    }
}

/// Iterator returned by `Db::scan`: `(key, value)` in key order, tombstones hidden.
pub struct DbIter {
    merge: MergeIter,
    end: Bound<Vec<u8>>,
    done: bool,
}

impl DbIter {
    /// A scan of `state`: memtables newest first, then the tables, seeing the first `mem_seen`
    /// batches of `state.mem` (a snapshot's count, or `visible()` for all applied so far).
    pub(super) fn new(
        shared: &Arc<Counters>,
        rule: Option<PrefixExtractor>,
        state: &State,
        mem_seen: u64,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Result<DbIter> {
        let (s, e) = (bound_slice(&start), bound_slice(&end));
        let counters = shared.reader();
        bump(&counters.scans, 1);
        if range_is_empty(s, e) {
            return Ok(DbIter {
                merge: MergeIter::new(Vec::new())?,
                end: Bound::Unbounded,
                done: true,
            });
        }
        let mut sources: Vec<Source> = Vec::new();
        let newest = state.mem.range_at(s, e, mem_seen);
        let older = state.imm.iter().rev().map(|m| m.range(s, e));
        for entries in std::iter::once(newest).chain(older) {
            let entries: Vec<Result<Entry>> = entries
                .into_iter()
                .map(|(key, value)| Ok(Entry { key, value }))
                .collect();
            sources.push(Box::new(entries.into_iter()));
        }
        let prefix = rule.and_then(|rule| range_prefix(rule, s, e).map(|q| (rule, q, hash_key(q))));
        let version = &state.version;
        if prefix.is_some() {
            bump(&counters.prefix_scans, 1);
        }
        let level0 = version.levels()[0].iter().rev().map(|t| (0, t));
        let deeper = (1..version.levels().len())
            .flat_map(|level| version.levels()[level].iter().map(move |t| (level, t)));
        for (level, t) in level0.chain(deeper).filter(|(_, t)| overlaps(t, s, e)) {
            if let Some((rule, q, hash)) = prefix {
                let c = &counters.levels[level];
                match t.check_prefix(rule, q, hash) {
                    PrefixCheck::Absent => {
                        bump(&c.prefix_checks, 1);
                        bump(&c.prefix_useful, 1);
                        continue;
                    }
                    PrefixCheck::Maybe => bump(&c.prefix_checks, 1),
                    PrefixCheck::Unfiltered => bump(&c.prefix_unfiltered, 1),
                }
            }
            sources.push(Box::new(Counted {
                iter: t.iter(s),
                counters: Arc::clone(shared),
                level,
                counted: 0,
            }));
        }
        Ok(DbIter {
            merge: MergeIter::new(sources)?,
            end,
            done: false,
        })
    }
}

impl Iterator for DbIter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let e = match self.merge.next()? {
                Ok(e) => e,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            let past_end = match &self.end {
                Bound::Included(k) => e.key > *k,
                Bound::Excluded(k) => e.key >= *k,
                Bound::Unbounded => false,
            };
            if past_end {
                self.done = true;
                return None;
            }
            if let Some(v) = e.value {
                return Some(Ok((e.key, v)));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A range gets a prefix exactly when every key it can hold starts with that prefix.
    #[test]
    fn range_prefix_only_for_ranges_inside_one_prefix() {
        use Bound::{Excluded as Ex, Included as In, Unbounded as Un};
        let rule = PrefixExtractor::fixed(2);
        type Case<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>, Option<&'a [u8]>);
        let cases: [Case; 11] = [
            (In(b"ab"), Ex(b"ac"), Some(b"ab")),
            (In(b"abz"), Ex(b"ac"), Some(b"ab")),
            (Ex(b"ab"), In(b"ab\xff\xff"), Some(b"ab")),
            // "ac" itself is in the range and does not start with "ab".
            (In(b"ab"), In(b"ac"), None),
            (In(b"ab"), Ex(b"ac\0"), None),
            (In(b"ab"), Un, None),
            (Un, Ex(b"ab"), None),
            // The rule gives "a" no prefix.
            (In(b"a"), Ex(b"a\xff"), None),
            // Every key from "\xff\xff" on starts with it.
            (In(b"\xff\xff"), Un, Some(b"\xff\xff")),
            (In(b"a\xff"), Ex(b"b"), Some(b"a\xff")),
            (In(b"a\xff"), In(b"b"), None),
        ];
        for (s, e, want) in cases {
            assert_eq!(range_prefix(rule, s, e), want, "{s:?} {e:?}");
        }
    }
}
