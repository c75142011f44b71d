//! Deleted key ranges (range deletes, `WriteBatch::delete_range`): one range, and a sorted,
//! disjoint union of them (`RangeSet`) that answers "is this key inside?" with one binary
//! search.
//!
//! Use: a memtable keeps the ranges its batches deleted as written (any end); a table holds
//! the union of the ranges it carries, every one ending *through* a key (inclusive), in its
//! range-delete block (FORMAT.md §3; `encode` / `decode` here), loaded at open and kept in
//! memory. A table's ranges hide keys in older places only (older tables, deeper levels),
//! never its own entries: the flush and compaction that write it drop the entries they hide
//! (`db/range_deletes.rs`).

use std::cmp::Ordering;

use crate::coding::{key_prefix, put_len_prefixed, Cursor};
use crate::error::Result;

/// Where a deleted range ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// Below this key (it is not deleted).
    Before(Vec<u8>),
    /// Through this key (it is deleted).
    Through(Vec<u8>),
    /// Past every key.
    Unbounded,
}

impl End {
    /// Whether a key ending the range here is at or past `key` (the key is inside, given the
    /// range starts at or below it).
    #[inline]
    pub fn reaches(&self, key: &[u8]) -> bool {
        match self {
            End::Before(e) => key < e.as_slice(),
            End::Through(e) => key <= e.as_slice(),
            End::Unbounded => true,
        }
    }

    /// Orders two ends by the keys they reach (`Through(k)` is past `Before(k)`).
    fn cmp_end(&self, other: &End) -> Ordering {
        let rank = |e: &End| match e {
            End::Before(k) => (Some(k.clone()), 0),
            End::Through(k) => (Some(k.clone()), 1),
            End::Unbounded => (None, 2),
        };
        match (self, other) {
            (End::Unbounded, End::Unbounded) => Ordering::Equal,
            (End::Unbounded, _) => Ordering::Greater,
            (_, End::Unbounded) => Ordering::Less,
            _ => rank(self).cmp(&rank(other)),
        }
    }

    /// Whether a range ending here also holds or touches a range starting at `start`, so that
    /// the two are one range.
    fn joins(&self, start: &[u8]) -> bool {
        match self {
            End::Before(e) => start <= e.as_slice(),
            End::Through(e) => start <= e.as_slice() || start == successor(e).as_slice(),
            End::Unbounded => true,
        }
    }
}

/// The smallest key above `key`: `key` followed by a zero byte.
pub fn successor(key: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(key.len() + 1);
    s.extend_from_slice(key);
    s.push(0);
    s
}

/// One deleted range: every key from `start` (inclusive) to `end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletedRange {
    /// The first key deleted (the empty key: from the first).
    pub start: Vec<u8>,
    /// Where it ends.
    pub end: End,
}

impl DeletedRange {
    /// Whether `key` is inside.
    #[inline]
    pub fn covers(&self, key: &[u8]) -> bool {
        self.start.as_slice() <= key && self.end.reaches(key)
    }

    /// Whether no key is inside (an end at or below the start).
    pub fn is_empty(&self) -> bool {
        match &self.end {
            End::Before(e) => e.as_slice() <= self.start.as_slice(),
            End::Through(e) => e.as_slice() < self.start.as_slice(),
            End::Unbounded => false,
        }
    }
}

/// The spacing of `RangeSet::top`.
const STRIDE: usize = 64;

/// A sorted union of deleted ranges: disjoint, none touching the next, none empty.
///
/// `covers` searches `starts`, a dense array of the 8 bytes of each range's first key that
/// follow the bytes all first keys share (`common`), and looks at the keys themselves only
/// among ranges whose 8 bytes tie with the key's. Searching the ranges' keys (a heap pointer
/// per step) took a present get on a store holding 10^4 ranges in one table from 1.3 to
/// 1.8 µs (`db_bench --workload range-deletes`, 10^6 keys, which share their first 9 bytes:
/// without `common` every search fell through to the keys).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<DeletedRange>,
    /// The bytes every range's first key starts with (the longest such).
    common: Vec<u8>,
    /// `key_prefix` of each range's first key after `common`, in the same order.
    starts: Vec<u64>,
    /// Every `STRIDE`-th of `starts`: searched first, so that the search of `starts` reads
    /// one stretch of `STRIDE` (eight cache lines) instead of a line per step.
    top: Vec<u64>,
    /// `key_prefix` of each range's end key after `common`, in the same order; `u64::MAX` for
    /// an end that does not start with `common` (past every key that does) or none. A key
    /// whose 8 bytes after `common` are below it is inside (given the start); above, outside;
    /// on a tie the keys decide.
    ends: Vec<u64>,
}

impl RangeSet {
    /// The union of `ranges` (in any order; empty ones are ignored).
    pub fn union(mut ranges: Vec<DeletedRange>) -> RangeSet {
        ranges.retain(|r| !r.is_empty());
        ranges.sort_by(|a, b| a.start.cmp(&b.start));
        let mut out: Vec<DeletedRange> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match out.last_mut() {
                Some(last) if last.end.joins(&r.start) => {
                    if r.end.cmp_end(&last.end) == Ordering::Greater {
                        last.end = r.end;
                    }
                }
                _ => out.push(r),
            }
        }
        RangeSet::sorted(out)
    }

    /// The set of `ranges`, already a sorted union.
    fn sorted(ranges: Vec<DeletedRange>) -> RangeSet {
        // Sorted: the first and the last key share what all share.
        let common = match (ranges.first(), ranges.last()) {
            (Some(a), Some(b)) => {
                let n = a
                    .start
                    .iter()
                    .zip(&b.start)
                    .take_while(|(x, y)| x == y)
                    .count();
                a.start[..n].to_vec()
            }
            _ => Vec::new(),
        };
        let n = common.len();
        let starts: Vec<u64> = ranges.iter().map(|r| key_prefix(&r.start[n..])).collect();
        let ends = ranges
            .iter()
            .map(|r| match &r.end {
                End::Before(k) | End::Through(k) if k.starts_with(&common) => key_prefix(&k[n..]),
                _ => u64::MAX,
            })
            .collect();
        let top = starts.iter().step_by(STRIDE).copied().collect();
        RangeSet {
            ranges,
            common,
            starts,
            top,
            ends,
        }
    }

    /// `starts.partition_point(|&s| s < p)`, through `top`.
    #[inline]
    fn below(&self, p: u64) -> usize {
        let j = self.top.partition_point(|&t| t < p);
        // `starts[j * STRIDE]` (if any) is at or above `p`, `starts[(j - 1) * STRIDE]` below.
        let from = j.saturating_sub(1) * STRIDE;
        let to = (j * STRIDE).min(self.starts.len());
        from + self.starts[from..to].partition_point(|&s| s < p)
    }

    /// No range.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Ranges held.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// The ranges, in key order.
    pub fn ranges(&self) -> &[DeletedRange] {
        &self.ranges
    }

    /// Whether `key` lies in one of the ranges: a binary search of `starts`, then of the
    /// keys of the ranges whose 8 bytes tie with the key's (if any).
    #[inline]
    pub fn covers(&self, key: &[u8]) -> bool {
        self.covering(key).is_some()
    }

    /// The range `key` lies in, if any (`covers`' search): a scan or compaction that meets a
    /// covered entry moves its source past the range's end in one jump
    /// (`Cursor::skip_past`).
    #[inline]
    pub fn covering(&self, key: &[u8]) -> Option<&DeletedRange> {
        let n = self.common.len();
        match key[..n.min(key.len())].cmp(&self.common) {
            // Below every first key (so is a key shorter than `common` and a prefix of it).
            Ordering::Less => None,
            Ordering::Equal if key.len() < n => None,
            // Above every first key: the last range decides.
            Ordering::Greater => self.ranges.last().filter(|r| r.end.reaches(key)),
            Ordering::Equal => {
                let p = key_prefix(&key[n..]);
                let below = self.below(p);
                let tied = self.starts[below..].partition_point(|&s| s == p);
                // Ranges whose first key is at or below `key`.
                let at = match tied {
                    0 => below,
                    _ => {
                        below
                            + self.ranges[below..below + tied]
                                .partition_point(|r| r.start.as_slice() <= key)
                    }
                };
                let r = self.ranges.get(at.checked_sub(1)?)?;
                match p.cmp(&self.ends[at - 1]) {
                    Ordering::Less => Some(r),
                    Ordering::Greater => None,
                    Ordering::Equal => r.end.reaches(key).then_some(r),
                }
            }
        }
    }

    /// Whether every key from `lo` through `hi` is inside (one range holds them all: the
    /// ranges are disjoint and do not touch). A plain search, for compaction's look at whole
    /// tables.
    pub fn holds(&self, lo: &[u8], hi: &[u8]) -> bool {
        let at = self.ranges.partition_point(|r| r.start.as_slice() <= lo);
        at > 0 && {
            let r = &self.ranges[at - 1];
            r.end.reaches(lo) && r.end.reaches(hi)
        }
    }

    /// The smallest key inside, and the end of the last range.
    pub fn bounds(&self) -> Option<(&[u8], &End)> {
        Some((&self.ranges.first()?.start, &self.ranges.last()?.end))
    }

    /// Splits off every key above `key`: `self` keeps the keys through `key`, the result holds
    /// the rest (a range holding `key` is cut there, its upper part starting at the key's
    /// `successor`).
    pub fn split_after(&mut self, key: &[u8]) -> RangeSet {
        let p = self.ranges.partition_point(|r| r.start.as_slice() <= key);
        let mut rest = self.ranges.split_off(p);
        if let Some(last) = self.ranges.last_mut() {
            if !matches!(&last.end, End::Through(e) if e.as_slice() <= key)
                && !matches!(&last.end, End::Before(e) if e.as_slice() <= key)
            {
                let upper = DeletedRange {
                    start: successor(key),
                    end: std::mem::replace(&mut last.end, End::Through(key.to_vec())),
                };
                if !upper.is_empty() {
                    rest.insert(0, upper);
                }
            }
        }
        *self = RangeSet::sorted(std::mem::take(&mut self.ranges));
        RangeSet::sorted(rest)
    }

    /// The block payload of a table's range deletes (FORMAT.md §3): a count, then each
    /// range's first and last key. Every range must end through a key.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        crate::coding::put_u32_len(&mut out, self.ranges.len(), "range deletes of a table")?;
        for r in &self.ranges {
            let End::Through(last) = &r.end else {
                return Err(crate::error::Error::InvalidArgument(
                    "a table's deleted range must end through a key".into(),
                ));
            };
            put_len_prefixed(&mut out, &r.start, "key")?;
            put_len_prefixed(&mut out, last, "key")?;
        }
        Ok(out)
    }

    /// Decodes `encode`'s payload, checking it describes a sorted union: each range's first
    /// key at or below its last, and above the previous range's last (not touching it: a
    /// writer joins those). Work and memory are bounded by the payload's size.
    pub fn decode(payload: &[u8]) -> std::result::Result<RangeSet, String> {
        let mut c = Cursor::new(payload);
        let count = c.u32()? as usize;
        // Each range takes at least 8 bytes: a count past what the payload holds is damage.
        if count > payload.len() / 8 {
            return Err(format!(
                "{count} deleted ranges cannot fit in {} bytes",
                payload.len()
            ));
        }
        let mut ranges: Vec<DeletedRange> = Vec::with_capacity(count);
        for i in 0..count {
            let start = c.len_prefixed()?.to_vec();
            let last = c.len_prefixed()?.to_vec();
            if last < start {
                return Err(format!("deleted range {i} ends below its start"));
            }
            if let Some(prev) = ranges.last() {
                if prev.end.joins(&start) {
                    return Err(format!(
                        "deleted range {i} does not start above the one before it"
                    ));
                }
            }
            ranges.push(DeletedRange {
                start,
                end: End::Through(last),
            });
        }
        if !c.is_empty() {
            return Err("bytes follow the last deleted range".into());
        }
        Ok(RangeSet::sorted(ranges))
    }
}

#[cfg(test)]
#[path = "range_set_tests.rs"]
mod tests;
