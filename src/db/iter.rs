//! Range scans: `Db::scan` merges a sorted copy of each memtable's part of the range with
//! lazy iterators over every table whose key range overlaps it (`merge.rs`: newest source
//! wins per key), hides tombstones, and stops at the end bound. An empty or reversed range
//! yields nothing (never a panic).

use std::ops::Bound;
use std::sync::Arc;

use super::memtable::{range_is_empty, Memtable};
use super::merge::{MergeIter, Source};
use super::version::Version;
use crate::error::Result;
use crate::table::{Entry, Table};

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

/// Iterator returned by `Db::scan`: `(key, value)` in key order, tombstones hidden.
pub struct DbIter {
    merge: MergeIter,
    end: Bound<Vec<u8>>,
    done: bool,
}

impl DbIter {
    /// A scan over a snapshot: memtables newest first, then the tables.
    pub(super) fn new(
        memtables: &[&Arc<Memtable>],
        version: &Version,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Result<DbIter> {
        let (s, e) = (bound_slice(&start), bound_slice(&end));
        if range_is_empty(s, e) {
            return Ok(DbIter {
                merge: MergeIter::new(Vec::new())?,
                end: Bound::Unbounded,
                done: true,
            });
        }
        let mut sources: Vec<Source> = Vec::new();
        for m in memtables {
            let entries: Vec<Result<Entry>> = m
                .range(s, e)
                .into_iter()
                .map(|(key, value)| Ok(Entry { key, value }))
                .collect();
            sources.push(Box::new(entries.into_iter()));
        }
        let tables = version.levels[0]
            .iter()
            .rev()
            .chain(version.levels[1..].iter().flatten());
        for t in tables.filter(|t| overlaps(t, s, e)) {
            sources.push(Box::new(t.iter(s)));
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
