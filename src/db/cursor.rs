//! A cursor over the store (`Db::cursor`, `Snapshot::cursor`): RocksDB's iterator shape —
//! `seek`, `seek_for_prev`, `seek_to_first`, `seek_to_last`, `next`, `prev` — with the entry
//! under it lent in place (`key`, `value`) until the next move, so a walk copies nothing: a
//! keys-only walk never touches a value, and a walk that reads values reads them where they lie
//! in the block or memtable.
//!
//! A cursor reads the store as it was when the cursor was made (memtables and table set, as a
//! `DbIter` does), within the bounds it was made with. Each seek builds the merge of
//! `iter.rs` for the range from the sought key to the bound in the direction of the walk; each
//! `next` or `prev` then steps that merge past tombstones (and expired entries), allocating
//! nothing (the tables' blocks come from the block cache or the thread's read buffers,
//! `table/iter.rs`). A move against the walk's direction seeks again from the current key
//! (the merge walks one way), which costs what a seek costs; so does a seek.
//!
//! Why a cursor and not only `DbIter`: the iterator hands out each entry as two new `Vec`s and
//! keeps a copy of the last key (to meet the other direction); the cursor hands out borrowed
//! slices, and can be moved to another key without being made again.

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use super::counters::Counters;
use super::iter::{merge_of, own_bounds, Source};
use super::level_cursor::ScanSetup;
use super::memtable::range_is_empty;
use super::merge::Merge;
use super::state::State;
use crate::error::Result;
use crate::expiry::Reading;
use crate::prefix::PrefixExtractor;
use crate::table::{BlockCache, Direction, KeyRange};

/// Where the cursor is.
enum At {
    /// Not on an entry: before the first seek, after a walk ran off its bound, or after an
    /// error.
    Nowhere,
    /// On the live entry at the top of `merge`, which walks in `dir`.
    On {
        merge: Merge<Source>,
        dir: Direction,
    },
}

/// A movable position in the store's live entries, in key order (see the module comment).
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// let db = lsm_bloom::Db::open(dir.path(), lsm_bloom::Options::default())?;
/// for k in ["a", "b", "c", "d"] {
///     db.put(k, k.to_uppercase())?;
/// }
/// let mut c = db.cursor();
/// c.seek("b")?;
/// assert_eq!(c.entry(), Some((&b"b"[..], &b"B"[..])));
/// c.next()?;
/// assert_eq!(c.key(), Some(&b"c"[..]));
/// c.seek_for_prev("bb")?;
/// assert_eq!(c.key(), Some(&b"b"[..]));
/// c.prev()?;
/// assert_eq!(c.key(), Some(&b"a"[..]));
/// assert!(!c.prev()?); // off the first key: on nothing
/// let mut keys = Vec::new();
/// let mut on = c.seek_to_first()?;
/// while on {
///     keys.push(c.key().unwrap_or_default().to_vec());
///     on = c.next()?;
/// }
/// assert_eq!(keys, [b"a", b"b", b"c", b"d"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DbCursor {
    state: State,
    /// Batches of `state.mem` the cursor sees.
    mem_seen: u64,
    /// The clock reading that expires entries for this cursor (taken once, kept).
    now: Reading,
    counters: Arc<Counters>,
    rule: Option<PrefixExtractor>,
    cache: Option<Arc<BlockCache>>,
    /// The cursor's bounds: no move leaves them.
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    at: At,
}

impl std::fmt::Debug for DbCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbCursor")
            .field("lower", &self.lower)
            .field("upper", &self.upper)
            .field("key", &self.key())
            .finish()
    }
}

/// The tighter of two bounds on the side a walk in `dir` starts from (the one fewer keys
/// pass): of two start bounds (`Forward`) the later, of two end bounds the earlier; on the
/// same key, the one that excludes it.
fn tighter(a: Bound<&[u8]>, b: Bound<&[u8]>, dir: Direction) -> Bound<Vec<u8>> {
    use Bound::{Excluded, Included, Unbounded};
    let tighter = match (a, b) {
        (Unbounded, x) | (x, Unbounded) => x,
        (Included(x) | Excluded(x), Included(y) | Excluded(y)) if x != y => {
            let a_first = match dir {
                Direction::Forward => x > y,
                Direction::Backward => x < y,
            };
            if a_first {
                a
            } else {
                b
            }
        }
        (Excluded(_), _) => a,
        (_, _) => b,
    };
    tighter.map(<[u8]>::to_vec)
}

impl DbCursor {
    /// A cursor over `state` within `range`, on nothing yet.
    pub(super) fn new<K: AsRef<[u8]>, R: RangeBounds<K>>(
        counters: &Arc<Counters>,
        rule: Option<PrefixExtractor>,
        cache: Option<Arc<BlockCache>>,
        state: &State,
        mem_seen: u64,
        now: Reading,
        range: R,
    ) -> DbCursor {
        let (lower, upper) = own_bounds(&range);
        DbCursor {
            state: state.clone(),
            mem_seen,
            now,
            counters: Arc::clone(counters),
            rule,
            cache,
            lower,
            upper,
            at: At::Nowhere,
        }
    }

    /// The key under the cursor; `None` when it is on nothing. Lent until the next move.
    #[inline]
    pub fn key(&self) -> Option<&[u8]> {
        match &self.at {
            At::On { merge, .. } => merge.key(),
            At::Nowhere => None,
        }
    }

    /// The value under the cursor; `None` when it is on nothing. Lent until the next move.
    #[inline]
    pub fn value(&self) -> Option<&[u8]> {
        match &self.at {
            At::On { merge, .. } => merge.value(),
            At::Nowhere => None,
        }
    }

    /// The key and value under the cursor; `None` when it is on nothing.
    #[inline]
    pub fn entry(&self) -> Option<(&[u8], &[u8])> {
        match &self.at {
            At::On { merge, .. } => match merge.entry()? {
                (k, Some(v)) => Some((k, v)),
                (_, None) => None,
            },
            At::Nowhere => None,
        }
    }

    /// Whether the cursor is on an entry.
    #[inline]
    pub fn valid(&self) -> bool {
        self.key().is_some()
    }

    /// Moves to the first key at or after `key` (within the cursor's bounds). Returns whether
    /// the cursor is on an entry.
    pub fn seek(&mut self, key: impl AsRef<[u8]>) -> Result<bool> {
        self.walk_from(Bound::Included(key.as_ref()), Direction::Forward)
    }

    /// Moves to the last key at or before `key` (within the cursor's bounds). Returns whether
    /// the cursor is on an entry.
    pub fn seek_for_prev(&mut self, key: impl AsRef<[u8]>) -> Result<bool> {
        self.walk_from(Bound::Included(key.as_ref()), Direction::Backward)
    }

    /// Moves to the first key within the cursor's bounds.
    pub fn seek_to_first(&mut self) -> Result<bool> {
        self.walk_from(Bound::Unbounded, Direction::Forward)
    }

    /// Moves to the last key within the cursor's bounds.
    pub fn seek_to_last(&mut self) -> Result<bool> {
        self.walk_from(Bound::Unbounded, Direction::Backward)
    }

    /// Moves to the next key. On nothing, it stays on nothing (seek first). Returns whether
    /// the cursor is on an entry.
    #[expect(
        clippy::should_implement_trait,
        reason = "a cursor lends its entry until the next move, which `Iterator` cannot express; \
                  `DbIter` is the iterator"
    )]
    pub fn next(&mut self) -> Result<bool> {
        self.step(Direction::Forward)
    }

    /// Moves to the previous key, as `next` the other way.
    pub fn prev(&mut self) -> Result<bool> {
        self.step(Direction::Backward)
    }

    fn step(&mut self, to: Direction) -> Result<bool> {
        match &mut self.at {
            At::Nowhere => Ok(false),
            At::On { merge, dir } if *dir == to => {
                let stepped = merge.step().and_then(|()| skip_tombstones(merge, self.now));
                self.settle(stepped)
            }
            At::On { merge, .. } => {
                // The merge walks the other way: seek again from past the current key.
                let Some(k) = merge.key().map(<[u8]>::to_vec) else {
                    self.at = At::Nowhere;
                    return Ok(false);
                };
                self.walk_from(Bound::Excluded(&k), to)
            }
        }
    }

    /// Walks in `dir` from `from` (a start bound forward, an end bound backward), kept within
    /// the cursor's bounds.
    fn walk_from(&mut self, from: Bound<&[u8]>, dir: Direction) -> Result<bool> {
        let (start, end) = match dir {
            Direction::Forward => (tighter(as_ref(&self.lower), from, dir), self.upper.clone()),
            Direction::Backward => (self.lower.clone(), tighter(as_ref(&self.upper), from, dir)),
        };
        self.walk(start, end, dir)
    }

    /// Builds the merge of `[start, end]` walking in `dir` and moves to its first live entry.
    fn walk(&mut self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>, dir: Direction) -> Result<bool> {
        self.at = At::Nowhere;
        let range = KeyRange::new(start, end);
        if range_is_empty(range.start(), range.end()) {
            return Ok(false);
        }
        let scan = ScanSetup::new(
            &self.counters,
            self.rule,
            self.cache.clone(),
            range,
            self.now,
        );
        let mut merge = merge_of(&self.state, self.mem_seen, &scan, dir)?;
        let first = skip_tombstones(&mut merge, self.now);
        self.at = At::On { merge, dir };
        self.settle(first)
    }

    /// After a move: on nothing when it failed or ran off the walk's end.
    fn settle(&mut self, moved: Result<bool>) -> Result<bool> {
        if !matches!(moved, Ok(true)) {
            self.at = At::Nowhere;
        }
        moved
    }
}

/// Steps `merge` past tombstones and entries expired at `now` onto a live entry (true) or
/// its end (false).
fn skip_tombstones(merge: &mut Merge<Source>, now: Reading) -> Result<bool> {
    loop {
        match merge.entry() {
            None => return Ok(false),
            Some((_, None)) => merge.pass()?,
            Some((_, Some(_))) if now.expired(merge.expiry()) => merge.pass()?,
            Some((_, Some(_))) => return Ok(true),
        }
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(Vec::as_slice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Bound::{Excluded as Ex, Included as In, Unbounded as Un};

    /// The tighter bound wins; on the same key, the excluding one.
    #[test]
    fn bounds_intersect() {
        let k = |s: &'static str| s.as_bytes();
        let v = |s: &str| s.as_bytes().to_vec();
        let (fwd, back) = (Direction::Forward, Direction::Backward);
        assert_eq!(tighter(Un, In(k("b")), fwd), In(v("b")));
        assert_eq!(tighter(In(k("c")), In(k("b")), fwd), In(v("c")));
        assert_eq!(tighter(In(k("a")), Ex(k("b")), fwd), Ex(v("b")));
        assert_eq!(tighter(In(k("b")), Ex(k("b")), fwd), Ex(v("b")));
        assert_eq!(tighter(Ex(k("b")), In(k("b")), fwd), Ex(v("b")));
        assert_eq!(tighter(Un, In(k("b")), back), In(v("b")));
        assert_eq!(tighter(Ex(k("c")), In(k("d")), back), Ex(v("c")));
        assert_eq!(tighter(In(k("c")), Ex(k("c")), back), Ex(v("c")));
        assert_eq!(tighter(Ex(k("c")), In(k("c")), back), Ex(v("c")));
        assert_eq!(tighter(Un, Un, back), Un);
    }
}
