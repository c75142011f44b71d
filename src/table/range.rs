//! What a walk over sorted entries covers and how it is driven: a `KeyRange` (bounds with
//! their 8-byte prefixes, so most comparisons against them are one `u64` compare), the
//! `Direction`, and the `Cursor` trait every source of a scan or compaction merge implements
//! (table cursors, `iter.rs`; memtable and level cursors in `db/`).

use std::ops::Bound;

use super::range_set::{DeletedRange, End};
use crate::coding::{cmp_prefixed, key_prefix};
use crate::error::Result;

/// Which way a cursor walks its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// From the start bound up, keys increasing.
    Forward,
    /// From the end bound down, keys decreasing.
    Backward,
}

/// The keys a scan covers: `start` to `end`, each bound as `std::ops::Bound`, with the
/// bounds' `key_prefix`es, so that most comparisons against them are one of two `u64`s.
#[derive(Clone, Debug)]
pub(crate) struct KeyRange {
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    start_prefix: u64,
    end_prefix: u64,
}

impl KeyRange {
    /// The keys from `start` to `end`.
    pub(crate) fn new(start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> KeyRange {
        let prefix = |b: &Bound<Vec<u8>>| match b {
            Bound::Included(k) | Bound::Excluded(k) => key_prefix(k),
            Bound::Unbounded => 0,
        };
        KeyRange {
            start_prefix: prefix(&start),
            end_prefix: prefix(&end),
            start,
            end,
        }
    }

    /// Every key.
    pub(crate) fn all() -> KeyRange {
        KeyRange::new(Bound::Unbounded, Bound::Unbounded)
    }

    /// True when `key` is not below the start bound.
    #[inline]
    pub(crate) fn after_start(&self, key: &[u8]) -> bool {
        self.after_start_prefixed(key_prefix(key), key)
    }

    /// True when `key` is not above the end bound.
    #[inline]
    pub(crate) fn before_end(&self, key: &[u8]) -> bool {
        self.before_end_prefixed(key_prefix(key), key)
    }

    /// `after_start` for a key whose `key_prefix` is `p`.
    #[inline]
    pub(crate) fn after_start_prefixed(&self, p: u64, key: &[u8]) -> bool {
        match &self.start {
            Bound::Included(s) => cmp_prefixed(p, key, self.start_prefix, s).is_ge(),
            Bound::Excluded(s) => cmp_prefixed(p, key, self.start_prefix, s).is_gt(),
            Bound::Unbounded => true,
        }
    }

    /// `before_end` for a key whose `key_prefix` is `p`.
    #[inline]
    pub(crate) fn before_end_prefixed(&self, p: u64, key: &[u8]) -> bool {
        match &self.end {
            Bound::Included(e) => cmp_prefixed(p, key, self.end_prefix, e).is_le(),
            Bound::Excluded(e) => cmp_prefixed(p, key, self.end_prefix, e).is_lt(),
            Bound::Unbounded => true,
        }
    }

    /// This range less `r` and what lies before it in `dir`'s walk: forward, the keys above
    /// `r`'s end; backward, those below its start. `None` when no key is left.
    pub(crate) fn past(&self, r: &DeletedRange, dir: Direction) -> Option<KeyRange> {
        match dir {
            Direction::Forward => {
                let start = match &r.end {
                    End::Before(e) => Bound::Included(e.as_slice()),
                    End::Through(e) => Bound::Excluded(e.as_slice()),
                    End::Unbounded => return None,
                };
                // The higher of the two starts.
                let start = match start {
                    Bound::Included(k) | Bound::Excluded(k) if !self.after_start(k) => {
                        self.start.clone()
                    }
                    b => b.map(<[u8]>::to_vec),
                };
                Some(KeyRange::new(start, self.end.clone()))
            }
            Direction::Backward => {
                let end = match self.before_end(&r.start) {
                    true => Bound::Excluded(r.start.clone()),
                    false => self.end.clone(),
                };
                Some(KeyRange::new(self.start.clone(), end))
            }
        }
    }

    /// `key_prefix` of the start bound's key (0 when unbounded).
    pub(crate) fn start_prefix(&self) -> u64 {
        self.start_prefix
    }

    /// The start bound as a slice.
    pub(crate) fn start(&self) -> Bound<&[u8]> {
        as_slice(&self.start)
    }

    /// The end bound as a slice.
    pub(crate) fn end(&self) -> Bound<&[u8]> {
        as_slice(&self.end)
    }
}

fn as_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// A sorted walk over entries, read in place: what a merge takes from each of its sources.
pub(crate) trait Cursor {
    /// The current entry's key; `None` once the walk is over (or failed).
    fn key(&self) -> Option<&[u8]>;
    /// The current entry's value; `None` for a tombstone (or when `key` is `None`).
    fn value(&self) -> Option<&[u8]>;
    /// The current entry's expiry: `expiry::NEVER` for an entry without one (and when `key` is
    /// `None`). A cursor shows every entry as stored; whether it has expired is its reader's
    /// question (`expiry::Now`).
    fn expiry(&self) -> u64;
    /// Moves to the next entry in the cursor's direction. After an error the cursor is over.
    fn step(&mut self) -> Result<()>;
    /// The current entry's key and value (`None` for a tombstone) in one call: a cursor
    /// whose key and value are found the same way finds them once.
    #[inline]
    fn entry(&self) -> Option<(&[u8], Option<&[u8]>)> {
        Some((self.key()?, self.value()))
    }
    /// Moves past every entry `r` covers from the current one on: forward to the first entry
    /// after the range's end, backward to the last before its start. The entries passed are
    /// deleted by a newer source's range (`db/cover.rs`), so none is looked at: a cursor that
    /// can jump does (a table's over whole data blocks, a memtable's by binary search); this
    /// default steps while the range covers the key.
    fn skip_past(&mut self, r: &DeletedRange) -> Result<()> {
        while self.key().is_some_and(|k| r.covers(k)) {
            self.step()?;
        }
        Ok(())
    }
}
