//! A keyspace's immutable table set (`Version`): its tables per level, with the filter hints
//! a get prefetches from; part of the state readers load (`state.rs`).
//!
//! Nothing here is changed in place. A flush, compaction or memtable rotation builds a new
//! `State` (`state.rs`) from the current one (`Inner::update_state` in `inner.rs`, serialised by
//! `Inner::publish`) and stores it in the `ArcSwap`; a reader loads whichever is current
//! (`Inner::read_state`) and keeps using it, tables included, for the whole operation even if
//! a newer one is published meanwhile (a replaced table's file may be deleted: its open
//! handle still reads). The load is arc-swap's: it borrows a per-thread debt slot rather than
//! writing the shared reference count, so concurrent `get`s write no common cache line.

use std::sync::Arc;

pub(crate) use super::search_set::InLevel;
use super::search_set::SearchSet;
use crate::table::{FilterState, Table};

/// Levels the store uses (0..MAX_LEVELS): the manifest, compaction, the budget and the
/// statistics all size their per-level arrays by it.
pub const MAX_LEVELS: usize = 7;

/// Live tables per level: level 0 oldest first, other levels sorted by key.
/// Changed only through `edit`, which keeps `max_prefixes` and the search set in step with
/// `levels`.
#[derive(Clone, Debug)]
pub(crate) struct Version {
    levels: Vec<Vec<Arc<Table>>>,
    /// Per level, each table's `max_prefix`, in the level's order: what a lookup's search for
    /// its table on a level reads (`Table::in_level_by`).
    max_prefixes: Vec<Vec<u64>>,
    /// Per level, from when a lookup may pass each table by, in the level's order: its
    /// `expire_whole_by` if it shadows nothing (`shadows_nothing`), else `NEVER` (all `NEVER`,
    /// or empty, while no table expires whole). Such a table answers "absent" for every key
    /// of its range once expired, as the store without it would, so a search passes it over
    /// unread, before it requests the table's filter lines or reads the table
    /// (`SearchSet::in_level_live`), and a pruned version leaves it out of the search
    /// (`pruned`).
    passable_from: Vec<Vec<u64>>,
    /// Per level, each table's `expire_whole_by` (`NEVER`: none), in the level's order (empty
    /// while no table expires whole): what a search set is built with.
    whole_by: Vec<Vec<u64>>,
    /// What point lookups search: the tables less those passable by its `pruned_at`.
    search: SearchSet,
    /// The earliest time a table the search still holds becomes passable (`NEVER`: none
    /// does): before it, `pruned` has nothing to leave out.
    next_passable: u64,
    /// Some table carries deleted ranges: a lookup then looks for the first table whose
    /// ranges cover its key (`range_deletes.rs`), and reads no table after it.
    pub(crate) range_deletes: bool,
}

impl Version {
    pub(crate) fn empty() -> Self {
        Version {
            levels: vec![Vec::new(); MAX_LEVELS],
            max_prefixes: vec![Vec::new(); MAX_LEVELS],
            passable_from: vec![Vec::new(); MAX_LEVELS],
            whole_by: vec![Vec::new(); MAX_LEVELS],
            search: SearchSet::new(&vec![Vec::new(); MAX_LEVELS], &[], &[], 0),
            next_passable: crate::expiry::NEVER,
            range_deletes: false,
        }
    }

    /// The tables per level.
    pub(crate) fn levels(&self) -> &[Vec<Arc<Table>>] {
        &self.levels
    }

    /// Changes the table set with `f`, then derives the search arrays from it again.
    pub(crate) fn edit<R>(&mut self, f: impl FnOnce(&mut [Vec<Arc<Table>>]) -> R) -> R {
        let r = f(&mut self.levels);
        self.max_prefixes = self
            .levels
            .iter()
            .map(|tables| tables.iter().map(|t| t.max_prefix()).collect())
            .collect();
        use crate::expiry::NEVER;
        let expiring = self
            .levels
            .iter()
            .flatten()
            .any(|t| t.expire_whole_by().is_some());
        self.whole_by = self
            .levels
            .iter()
            .map(|tables| match expiring {
                false => Vec::new(),
                true => tables
                    .iter()
                    .map(|t| t.expire_whole_by().unwrap_or(NEVER))
                    .collect(),
            })
            .collect();
        self.passable_from = (0..MAX_LEVELS)
            .map(|level| {
                let by = self.whole_by[level].iter().enumerate();
                by.map(
                    |(i, &by)| match by != NEVER && self.shadows_nothing(level, i) {
                        true => by,
                        false => NEVER,
                    },
                )
                .collect()
            })
            .collect();
        self.prune_search(self.search.pruned_at());
        self.range_deletes = self
            .levels
            .iter()
            .flatten()
            .any(|t| !t.range_deletes().is_empty());
        r
    }

    /// The table of `level` (1 and deeper) whose range holds `key`, if any: the plain search,
    /// kept as the tests' oracle for `in_level_live`, and for `older_covers`.
    pub(crate) fn in_level(&self, level: usize, key: &[u8]) -> Option<&Arc<Table>> {
        Table::in_level_by(&self.levels[level], &self.max_prefixes[level], key)
    }

    /// The position on `level` (1 and deeper) of the first table whose largest key is not
    /// below `key` (the level's length if none): where a scan from `key` starts. Searches the
    /// dense prefix array, as `in_level_live` does.
    pub(crate) fn first_reaching(&self, level: usize, key: &[u8]) -> usize {
        let tables = &self.levels[level];
        Table::candidate_in_level(tables, &self.max_prefixes[level], key).unwrap_or(tables.len())
    }

    /// Positions on `level` (1 or deeper: sorted, disjoint) of the tables whose ranges may
    /// meet `[start, end]`: two binary searches, as a scan walks them.
    pub(crate) fn reaching(
        &self,
        level: usize,
        start: std::ops::Bound<&[u8]>,
        end: std::ops::Bound<&[u8]>,
    ) -> std::ops::Range<usize> {
        use std::ops::Bound;
        let tables = &self.levels[level];
        let first = match start {
            Bound::Unbounded => 0,
            Bound::Included(k) => self.first_reaching(level, k),
            // A table whose largest key is `k` itself holds nothing above it.
            Bound::Excluded(k) => {
                let i = self.first_reaching(level, k);
                i + usize::from(tables.get(i).is_some_and(|t| t.max_key() == k))
            }
        }
        .min(tables.len());
        let last = match end {
            Bound::Unbounded => tables.len(),
            Bound::Included(e) => first + tables[first..].partition_point(|t| t.min_key() <= e),
            Bound::Excluded(e) => first + tables[first..].partition_point(|t| t.min_key() < e),
        };
        first..last
    }

    /// The `seen` a lookup passes to `in_level_live` and `expired_whole`: the latest time the
    /// store has seen, once some searched table may have expired whole by it; before, 0
    /// (nothing is passed over).
    #[inline(always)]
    pub(crate) fn passing_at(&self, seen: u64) -> u64 {
        match self.search.soonest_whole_expiry() <= seen {
            true => seen,
            false => 0,
        }
    }

    /// What point lookups search (`SearchSet`).
    #[inline(always)]
    pub(crate) fn search(&self) -> &SearchSet {
        &self.search
    }

    /// This version with the tables a lookup may pass over by `at` left out of its search
    /// (`SearchSet`), or `None` if its search already leaves out every such table.
    pub(crate) fn pruned(&self, at: u64) -> Option<Version> {
        if self.next_passable > at {
            return None;
        }
        let mut v = self.clone();
        v.prune_search(at);
        Some(v)
    }

    /// The earliest time a table the search holds becomes passable (`NEVER`: none does).
    #[inline(always)]
    pub(crate) fn next_passable(&self) -> u64 {
        self.next_passable
    }

    /// Builds the search set with the tables passable by `at` left out.
    fn prune_search(&mut self, at: u64) {
        self.search = SearchSet::new(&self.levels, &self.passable_from, &self.whole_by, at);
        self.next_passable = self
            .passable_from
            .iter()
            .flatten()
            .copied()
            .filter(|&from| from > at)
            .min()
            .unwrap_or(crate::expiry::NEVER);
    }

    /// Whether a table of a level below `level` may hold `key`: one whose range holds it, with
    /// no filter or a filter that says "maybe". A compaction into `level` drops a tombstone
    /// for a key none may hold (`compaction::run`): there is nothing older for it to hide.
    /// A table's deleted ranges hold no key of their own; they are carried apart.
    pub(crate) fn may_hold_below(&self, level: usize, key: &[u8]) -> bool {
        let hash = crate::filter::hash_key(key);
        (level + 1..MAX_LEVELS).any(|l| {
            self.in_level(l, key).is_some_and(|t| match t.filter() {
                FilterState::Valid(f) => f.may_contain_prehashed(key, hash),
                FilterState::None | FilterState::Invalid(_) => true,
            })
        })
    }

    /// Whether a deleted range of a table newer than `t` (of `level`) covers `key`: a newer
    /// level-0 table, or the one table of a shallower level whose range holds the key. The key
    /// is then deleted in `t` (`multi_get` asks before it reads `t`'s block).
    #[cold]
    #[inline(never)]
    pub(crate) fn deleted_above(&self, level: usize, t: &Table, key: &[u8]) -> bool {
        let deletes = |x: &Table| x.covers(key) && x.range_deletes().covers(key);
        for x in self.levels[0].iter().rev() {
            if std::ptr::eq(&**x, t) {
                return false;
            }
            if deletes(x) {
                return true;
            }
        }
        (1..level).any(|l| {
            self.in_level(l, key)
                .is_some_and(|x| x.range_deletes().covers(key))
        })
    }

    /// Entries in every table (keys, tombstones and overwritten versions counted once each).
    pub(crate) fn entries(&self) -> u64 {
        self.levels
            .iter()
            .flatten()
            .map(|t| t.properties().entries)
            .sum()
    }

    /// Whether a table older than `t` (of `level`) may hold `key`: an older level-0 table or
    /// one of a deeper level whose range covers it. A lookup that meets `t` expired whole
    /// (`Properties::expire_whole_by`) answers "absent" without reading it when none does: a
    /// key in `t` has expired, and no other table could hold it.
    pub(crate) fn older_covers(&self, level: usize, t: &Table, key: &[u8]) -> bool {
        if level == 0 {
            let l0 = &self.levels[0];
            // Level 0 is kept oldest first.
            let at = l0
                .iter()
                .position(|o| std::ptr::eq(&**o, t))
                .unwrap_or(l0.len());
            if l0[..at].iter().any(|o| o.covers(key)) {
                return true;
            }
        }
        (level + 1..MAX_LEVELS).any(|l| self.in_level(l, key).is_some())
    }

    /// Whether no table older than table `i` of `level` overlaps its key range: no older
    /// level-0 table, none of a deeper level. Such a table, once expired whole, answers
    /// "absent" for every key of its range, as the store without it would: the compaction
    /// picker drops it, scans pass it over.
    pub(crate) fn shadows_nothing(&self, level: usize, i: usize) -> bool {
        use std::ops::Bound::Included;
        let t = &self.levels[level][i];
        let (min, max) = (t.min_key(), t.max_key());
        let meets = |o: &Arc<Table>| o.max_key() >= min && o.min_key() <= max;
        if level == 0 && self.levels[0][..i].iter().any(meets) {
            return false;
        }
        (level + 1..MAX_LEVELS).all(|l| {
            let r = self.reaching(l, Included(min), Included(max));
            !self.levels[l][r].iter().any(meets)
        })
    }

    /// Puts with an expiry in every table (their properties' count).
    pub(crate) fn expiring_entries(&self) -> u64 {
        self.levels
            .iter()
            .flatten()
            .map(|t| t.properties().expiring)
            .sum()
    }

    /// Deepest level holding any table.
    pub(crate) fn deepest_nonempty(&self) -> Option<usize> {
        (0..MAX_LEVELS).rev().find(|&l| !self.levels[l].is_empty())
    }
}

#[cfg(test)]
#[path = "version_tests.rs"]
mod tests;
