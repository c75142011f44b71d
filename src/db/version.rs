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

use crate::coding::partition_points;
use crate::filter::FilterHint;
use crate::prefetch::CacheLevel;
use crate::table::{FilterState, Table};

/// Levels the store uses (0..MAX_LEVELS): the manifest, compaction, the budget and the
/// statistics all size their per-level arrays by it.
pub const MAX_LEVELS: usize = 7;

/// Live tables per level: level 0 oldest first, other levels sorted by key.
/// Changed only through `edit`, which keeps `max_prefixes` and `hints` in step with `levels`.
#[derive(Clone, Debug)]
pub(crate) struct Version {
    levels: Vec<Vec<Arc<Table>>>,
    /// Per level, each table's `max_prefix`, in the level's order: what a lookup's search for
    /// its table on a level reads (`Table::in_level_by`).
    max_prefixes: Vec<Vec<u64>>,
    /// Per level, each table's whole-key `FilterHint` (`None`: no usable filter, or one with
    /// its own seed), in the level's order: a lookup starts loading the filter's lines as soon
    /// as the search has found the table's position, before it reads the table (whose
    /// `covers` and filter reader are then loaded while the filter's lines are on their way).
    hints: Vec<Vec<Option<FilterHint>>>,
    /// The earliest time some table expires whole (`Table::expire_whole_by`; `NEVER`:
    /// none does): a get looks for such a table only once the store has seen that time.
    pub(crate) soonest_whole_expiry: u64,
    /// Some table carries deleted ranges: a lookup then looks for the first table whose
    /// ranges cover its key (`range_deletes.rs`), and reads no table after it.
    pub(crate) range_deletes: bool,
}

impl Version {
    pub(crate) fn empty() -> Self {
        Version {
            levels: vec![Vec::new(); MAX_LEVELS],
            max_prefixes: vec![Vec::new(); MAX_LEVELS],
            hints: vec![Vec::new(); MAX_LEVELS],
            soonest_whole_expiry: crate::expiry::NEVER,
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
        self.hints = self
            .levels
            .iter()
            .map(|tables| tables.iter().map(|t| filter_hint(t)).collect())
            .collect();
        self.soonest_whole_expiry = self
            .levels
            .iter()
            .flatten()
            .filter_map(|t| t.expire_whole_by())
            .min()
            .unwrap_or(crate::expiry::NEVER);
        self.range_deletes = self
            .levels
            .iter()
            .flatten()
            .any(|t| !t.range_deletes().is_empty());
        r
    }

    /// The table of `level` (1 and deeper) whose range holds `key`, if any: the plain search,
    /// kept as the tests' oracle for `in_level_prefetched`, and for `older_covers`.
    pub(crate) fn in_level(&self, level: usize, key: &[u8]) -> Option<&Arc<Table>> {
        Table::in_level_by(&self.levels[level], &self.max_prefixes[level], key)
    }

    /// The table of `level` (1 and deeper) whose range holds `key`, if any, with the lines its
    /// filter will read for `hash` (the key's `hash_key`) requested first, from the level's
    /// hints, before the table is read (`get` and `multi_get` both search this way). Measured
    /// at 10^8 keys (`absent_ab time`, 10 interleaved pairs against the commit before): 0.975×
    /// the absent-get time, median, within this machine's noise; the profile had shown the
    /// search's table read (`Table::covers`) at ~5% of an absent get ahead of each prefetch
    /// (`db_bench --defaults --hold absent`, 2×10^6 keys).
    #[inline(always)]
    pub(crate) fn in_level_prefetched(
        &self,
        level: usize,
        key: &[u8],
        hash: u64,
    ) -> Option<&Arc<Table>> {
        let i = Table::candidate_in_level(&self.levels[level], &self.max_prefixes[level], key)?;
        self.found_prefetched(level, i, key, hash, CacheLevel::L1)
    }

    /// The position on `level` (1 and deeper) of the first table whose largest key is not
    /// below `key` (the level's length if none): where a scan from `key` starts. Searches the
    /// dense prefix array, as `in_level_prefetched` does.
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

    /// For each key prefix in `prefixes` (`key_prefix` of the keys), its search position on
    /// `level` (1 and deeper), all searched together (`partition_points`): the `positions`
    /// `in_level_from` takes.
    pub(crate) fn positions_in_level(
        &self,
        level: usize,
        prefixes: &[u64],
        positions: &mut [usize],
    ) {
        partition_points(&self.max_prefixes[level], prefixes, positions);
    }

    /// `in_level_prefetched` from the key's search position (`positions_in_level`) and
    /// `key_prefix` `p`, for a batch: the filter's lines are requested into L2 (`CacheLevel`).
    #[inline(always)]
    pub(crate) fn in_level_from(
        &self,
        level: usize,
        position: usize,
        p: u64,
        key: &[u8],
        hash: u64,
    ) -> Option<&Arc<Table>> {
        let i = Table::candidate_from(
            &self.levels[level],
            &self.max_prefixes[level],
            position,
            p,
            key,
        )?;
        self.found_prefetched(level, i, key, hash, CacheLevel::L2)
    }

    /// The searches' common end: requests the lines table `i`'s filter will read for `hash`
    /// into `into` (from the level's hint, before the table is read), then the table if its
    /// range holds `key`.
    #[inline(always)]
    fn found_prefetched(
        &self,
        level: usize,
        i: usize,
        key: &[u8],
        hash: u64,
        into: CacheLevel,
    ) -> Option<&Arc<Table>> {
        if let Some(Some(hint)) = self.hints[level].get(i) {
            hint.prefetch_into(hash, into);
        }
        self.levels[level].get(i).filter(|t| t.covers(key))
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

/// `t`'s whole-key filter hint, if it has a usable filter.
fn filter_hint(t: &Table) -> Option<FilterHint> {
    match t.filter() {
        FilterState::Valid(f) => f.hint(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coding::key_prefix;
    use crate::filter::{hash_key, FilterKind, FilterPolicy};
    use crate::table::{TableBuilder, TableBuilderOptions};

    /// Table `id` at `dir` holding keys `lo..=hi` (`k` and 8 digits), with a filter of `kind`
    /// or none.
    fn table(
        dir: &std::path::Path,
        id: u64,
        lo: u32,
        hi: u32,
        kind: Option<FilterKind>,
    ) -> Arc<Table> {
        let path = dir.join(format!("{id}.sst"));
        let opts = TableBuilderOptions {
            filter: kind.map(|k| FilterPolicy::bits_per_key(k, 10.0)),
            ..TableBuilderOptions::default()
        };
        let mut b = TableBuilder::create(&path, opts).unwrap();
        for k in lo..=hi {
            b.add(format!("k{k:08}").as_bytes(), Some(b"v")).unwrap();
        }
        b.finish().unwrap();
        Arc::new(Table::open(&path, id).unwrap())
    }

    /// The hints follow every edit (one per table, `Some` where the table has a filter), and
    /// the prefetching search finds what the plain one finds, on levels mixing filter kinds
    /// and a table without a filter, for keys inside, between, before and after the tables.
    #[test]
    fn prefetching_search_agrees_with_the_plain_one_and_hints_follow_edits() {
        let dir = tempfile::tempdir().unwrap();
        let kinds = [
            Some(FilterKind::Blocked),
            Some(FilterKind::Ribbon),
            None,
            Some(FilterKind::Standard),
        ];
        let mut v = Version::empty();
        v.edit(|levels| {
            for (i, kind) in kinds.iter().enumerate() {
                let lo = i as u32 * 1_000;
                levels[1].push(table(dir.path(), i as u64, lo, lo + 499, *kind));
            }
            levels[2].push(table(dir.path(), 10, 0, 3_999, Some(FilterKind::Ribbon)));
        });
        let with_filter: Vec<bool> = v.hints[1].iter().map(Option::is_some).collect();
        assert_eq!(with_filter, [true, true, false, true]);
        assert_eq!(v.hints[2].len(), 1);
        for k in (0..4_200u32).step_by(7).chain([u32::MAX]) {
            let key = format!("k{k:08}");
            let hash = crate::filter::hash_key(key.as_bytes());
            for level in 1..=2 {
                let plain = v.in_level(level, key.as_bytes()).map(|t| t.id());
                let prefetched = v
                    .in_level_prefetched(level, key.as_bytes(), hash)
                    .map(|t| t.id());
                assert_eq!(prefetched, plain, "{key} level {level}");
            }
        }
        // The batch search (`multi_get`'s): all keys' positions at once, then `in_level_from`.
        // The keys are 9 bytes, so groups of ten share their 8-byte prefix with each other and
        // with a table's largest key: the tie walk after the search is exercised.
        let keys: Vec<String> = (0..4_200u32)
            .step_by(3)
            .chain([u32::MAX])
            .map(|k| format!("k{k:08}"))
            .collect();
        let prefixes: Vec<u64> = keys.iter().map(|k| key_prefix(k.as_bytes())).collect();
        for level in 1..=2 {
            let mut positions = vec![0; keys.len()];
            v.positions_in_level(level, &prefixes, &mut positions);
            for (key, &position) in keys.iter().zip(&positions) {
                let plain = v.in_level(level, key.as_bytes()).map(|t| t.id());
                let (k, p) = (key.as_bytes(), key_prefix(key.as_bytes()));
                let batched = v
                    .in_level_from(level, position, p, k, hash_key(k))
                    .map(|t| t.id());
                assert_eq!(batched, plain, "{key} level {level}, batched");
            }
        }
        v.edit(|levels| levels[1].remove(0));
        assert_eq!(v.hints[1].len(), 3);
        assert!(v.in_level_prefetched(1, b"k00000100", 0).is_none());
    }
}
