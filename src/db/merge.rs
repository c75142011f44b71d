//! K-way merge of sorted cursors (`table::Cursor`), newest source first: for each key, the
//! entry of the lowest-numbered (newest) source wins and older versions are skipped. Used by
//! scans (which then hide tombstones), forward or backward, and by compaction (which may drop
//! them).
//!
//! The sources with an entry left sit in a binary heap of source numbers ordered by their
//! current key (its 8-byte `key_prefix` first; ascending forward, descending backward), then
//! by source number, so among equal keys the newest source comes out first. Keys are compared
//! in place in the sources' blocks and memtables, never copied: the merge's result is the top
//! source's entry, which the caller copies if it keeps it. A heap that held a copy of each
//! head's key (a `malloc` and `free` per entry) and compared whole keys with `memcmp` was ~15%
//! of the compaction thread in a bulk load's profile (`perf record -e cpu-clock`).

use std::cmp::Ordering;
use std::sync::Arc;

use super::cover::Cover;
use crate::coding::{cmp_prefixed, key_prefix};
use crate::error::Result;
use crate::table::{Cursor, Direction};

/// Merges cursors that walk in one direction; `sources[0]` is the newest.
pub(crate) struct Merge<S> {
    sources: Vec<S>,
    /// `key_prefix` of each source's current key (kept while it is in the heap).
    prefixes: Vec<u64>,
    /// The sources with an entry, as a binary heap (see the module comment).
    heap: Vec<usize>,
    dir: Direction,
    /// The sources' deleted ranges, when some have any (`cover.rs`): an entry a newer
    /// source's range covers reads as deleted.
    cover: Option<Arc<Cover>>,
}

impl<S: Cursor> Merge<S> {
    /// A merge of `sources`, each on its first entry, walking in `dir`.
    pub(crate) fn new(sources: Vec<S>, dir: Direction) -> Self {
        let mut m = Merge {
            prefixes: sources
                .iter()
                .map(|s| s.key().map_or(0, key_prefix))
                .collect(),
            heap: Vec::with_capacity(sources.len()),
            sources,
            dir,
            cover: None,
        };
        for i in 0..m.sources.len() {
            if m.sources[i].key().is_some() {
                m.heap.push(i);
                m.sift_up(m.heap.len() - 1);
            }
        }
        m
    }

    /// The merge with `cover`'s deleted ranges applied (none when it is empty).
    pub(crate) fn with_cover(mut self, cover: Arc<Cover>) -> Self {
        self.cover = (!cover.is_empty()).then_some(cover);
        self
    }

    /// Whether a newer source's deleted range covers the winning entry (which then reads
    /// as deleted: `entry` and `value` say `None`). Compaction drops such an entry whole.
    #[inline]
    pub(crate) fn covered(&self) -> bool {
        match (&self.cover, self.heap.first()) {
            (Some(c), Some(&top)) => self.sources[top].key().is_some_and(|k| c.covers(k, top)),
            _ => false,
        }
    }

    /// The winning entry's key; `None` when every source is done (or one failed).
    #[inline]
    pub(crate) fn key(&self) -> Option<&[u8]> {
        self.sources[*self.heap.first()?].key()
    }

    /// The winning entry's key and value (`None` for a tombstone), found once.
    #[inline]
    pub(crate) fn entry(&self) -> Option<(&[u8], Option<&[u8]>)> {
        let top = *self.heap.first()?;
        let (key, value) = self.sources[top].entry()?;
        match &self.cover {
            Some(c) if value.is_some() && c.covers(key, top) => Some((key, None)),
            _ => Some((key, value)),
        }
    }

    /// The winning entry's value; `None` for a tombstone.
    #[inline]
    pub(crate) fn value(&self) -> Option<&[u8]> {
        let top = *self.heap.first()?;
        let value = self.sources[top].value()?;
        match &self.cover {
            Some(_) if self.covered() => None,
            _ => Some(value),
        }
    }

    /// The winning entry's expiry (`expiry::NEVER`: none, or no entry).
    #[inline]
    pub(crate) fn expiry(&self) -> u64 {
        self.heap
            .first()
            .map_or(crate::expiry::NEVER, |&i| self.sources[i].expiry())
    }

    /// Moves past the current key in every source that holds it. After an error the merge
    /// is over.
    pub(crate) fn step(&mut self) -> Result<()> {
        let Some(&top) = self.heap.first() else {
            return Ok(());
        };
        // The top leaves the heap but keeps its entry while the older sources holding the
        // same key move past it.
        self.remove_top();
        let moved = self.skip_same(top).and_then(|()| self.sources[top].step());
        self.put_back(top, moved)
    }

    /// Puts source `top`, taken out of the heap and moved (`moved`), back in if it has an
    /// entry left; after an error the merge is over.
    fn put_back(&mut self, top: usize, moved: Result<()>) -> Result<()> {
        if let Err(e) = moved {
            self.heap.clear();
            return Err(e);
        }
        if let Some(k) = self.sources[top].key() {
            self.prefixes[top] = key_prefix(k);
            self.heap.push(top);
            self.sift_up(self.heap.len() - 1);
        }
        Ok(())
    }

    /// Moves past the winning entry, which the caller passes over (deleted, or expired):
    /// as `step`, unless a newer source's range covers it; then its source alone moves past
    /// every entry that range covers (`Cursor::skip_past`: a table's over whole data blocks),
    /// and the older sources holding covered keys do the same as each comes out on top. Each
    /// of them would have read as deleted, so the merge yields what stepping would.
    pub(crate) fn pass(&mut self) -> Result<()> {
        let (Some(cover), Some(&top)) = (&self.cover, self.heap.first()) else {
            return self.step();
        };
        let cover = Arc::clone(cover);
        let Some(r) = self.sources[top].key().and_then(|k| cover.covering(k, top)) else {
            return self.step();
        };
        self.remove_top();
        let moved = self.sources[top].skip_past(r);
        self.put_back(top, moved)
    }

    /// Moves every source in the heap whose key is `top`'s past it.
    fn skip_same(&mut self, top: usize) -> Result<()> {
        while let Some(&next) = self.heap.first() {
            let same = self.prefixes[next] == self.prefixes[top]
                && self.sources[next].key() == self.sources[top].key();
            if !same {
                return Ok(());
            }
            self.sources[next].step()?;
            match self.sources[next].key() {
                Some(k) => {
                    self.prefixes[next] = key_prefix(k);
                    self.sift_down(0);
                }
                None => self.remove_top(),
            }
        }
        Ok(())
    }

    /// Takes the top source out of the heap.
    fn remove_top(&mut self) {
        let last = self.heap.len() - 1;
        self.heap.swap(0, last);
        self.heap.pop();
        if !self.heap.is_empty() {
            self.sift_down(0);
        }
    }

    /// True when source `a`'s entry comes before source `b`'s.
    #[inline]
    fn before(&self, a: usize, b: usize) -> bool {
        // The keys are fetched only when the prefixes tie: each fetch walks the source's
        // layers down to its block (`Merge::key` was 12% of a long scan's profile when both
        // were fetched for every comparison).
        let (pa, pb) = (self.prefixes[a], self.prefixes[b]);
        let by_key = match pa.cmp(&pb) {
            Ordering::Equal => cmp_prefixed(
                pa,
                self.sources[a].key().unwrap_or_default(),
                pb,
                self.sources[b].key().unwrap_or_default(),
            ),
            by_prefix => by_prefix,
        };
        let by_key = match self.dir {
            Direction::Forward => by_key,
            Direction::Backward => by_key.reverse(),
        };
        by_key.then(a.cmp(&b)) == Ordering::Less
    }

    fn sift_up(&mut self, mut pos: usize) {
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if !self.before(self.heap[pos], self.heap[parent]) {
                break;
            }
            self.heap.swap(pos, parent);
            pos = parent;
        }
    }

    fn sift_down(&mut self, mut pos: usize) {
        loop {
            let (l, r) = (2 * pos + 1, 2 * pos + 2);
            let mut least = pos;
            for child in [l, r] {
                if child < self.heap.len() && self.before(self.heap[child], self.heap[least]) {
                    least = child;
                }
            }
            if least == pos {
                return;
            }
            self.heap.swap(pos, least);
            pos = least;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::error::Error;

    type Kv = (Vec<u8>, Option<Vec<u8>>);

    /// A cursor over a sorted list, walking it in `dir`; fails when it would step onto
    /// position `fail_at` (in walk order).
    pub(crate) struct ListCursor {
        items: Vec<Kv>,
        at: usize,
        fail_at: Option<usize>,
    }

    impl ListCursor {
        pub(crate) fn new(mut items: Vec<Kv>, dir: Direction, fail_at: Option<usize>) -> Self {
            if dir == Direction::Backward {
                items.reverse();
            }
            ListCursor {
                items,
                at: 0,
                fail_at,
            }
        }
    }

    impl Cursor for ListCursor {
        fn key(&self) -> Option<&[u8]> {
            self.items.get(self.at).map(|(k, _)| k.as_slice())
        }
        fn value(&self) -> Option<&[u8]> {
            self.items.get(self.at)?.1.as_deref()
        }
        fn expiry(&self) -> u64 {
            crate::expiry::NEVER
        }
        fn step(&mut self) -> Result<()> {
            self.at += 1;
            if Some(self.at) == self.fail_at {
                self.at = self.items.len();
                return Err(Error::corruption(std::path::Path::new("t"), "bad block"));
            }
            Ok(())
        }
    }

    fn list(items: &[(&str, Option<&str>)]) -> Vec<Kv> {
        items
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect()
    }

    /// Everything `m` yields, in order.
    fn drain<S: Cursor>(mut m: Merge<S>) -> Vec<Kv> {
        let mut out = Vec::new();
        while let Some(k) = m.key() {
            out.push((k.to_vec(), m.value().map(<[u8]>::to_vec)));
            m.step().unwrap();
        }
        out
    }

    fn merged(lists: &[Vec<Kv>], dir: Direction) -> Vec<Kv> {
        let sources = lists
            .iter()
            .map(|l| ListCursor::new(l.clone(), dir, None))
            .collect();
        drain(Merge::new(sources, dir))
    }

    #[test]
    fn newest_source_wins_and_order_is_kept_both_ways() {
        let lists = [
            list(&[("b", Some("new")), ("d", None)]),
            list(&[("a", Some("1")), ("b", Some("old")), ("d", Some("4"))]),
            list(&[("c", Some("3")), ("d", Some("older"))]),
        ];
        let mut want = list(&[
            ("a", Some("1")),
            ("b", Some("new")),
            ("c", Some("3")),
            ("d", None),
        ]);
        assert_eq!(merged(&lists, Direction::Forward), want);
        want.reverse();
        assert_eq!(merged(&lists, Direction::Backward), want);
    }

    #[test]
    fn many_sources_with_shared_prefixes_merge_as_the_model() {
        // 40 sources (more than a level's worth of tables) over keys that share their first
        // 8 bytes and differ in length, so the prefix ties and the full keys decide.
        use std::collections::BTreeMap;
        let mut x = 0x1234_5678_9ABC_DEF1u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let mut lists = Vec::new();
        for s in 0..40u64 {
            let mut keys: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
            for _ in 0..next(200) {
                let k = format!("samepfx:{}", next(500)).into_bytes();
                let v = (next(5) != 0).then(|| s.to_le_bytes().to_vec());
                keys.insert(k, v);
            }
            for (k, v) in &keys {
                // Sources are numbered newest first: the first source to hold a key wins.
                model.entry(k.clone()).or_insert_with(|| v.clone());
            }
            lists.push(keys.into_iter().collect::<Vec<Kv>>());
        }
        let mut want: Vec<Kv> = model.into_iter().collect();
        assert_eq!(merged(&lists, Direction::Forward), want);
        want.reverse();
        assert_eq!(merged(&lists, Direction::Backward), want);
    }

    #[test]
    fn a_failing_source_ends_the_merge_with_its_error() {
        let mut m = Merge::new(
            vec![
                ListCursor::new(
                    list(&[("a", Some("1")), ("c", Some("3"))]),
                    Direction::Forward,
                    None,
                ),
                ListCursor::new(
                    list(&[("b", None), ("z", None)]),
                    Direction::Forward,
                    Some(1),
                ),
            ],
            Direction::Forward,
        );
        assert_eq!(m.key(), Some(&b"a"[..]));
        m.step().unwrap();
        assert_eq!(m.key(), Some(&b"b"[..]));
        // Moving the failing source past "b" fails, and nothing comes after the error.
        assert!(m.step().is_err());
        assert_eq!(m.key(), None);
    }
}
