//! The tables a point lookup searches (`SearchSet`), part of a `Version`: per level, the
//! tables with the dense arrays `get` and `multi_get` search and prefetch from (largest-key
//! prefixes, filter hints, expiry times), all in one order.
//!
//! It is the version's whole table set, less the tables that hold no key (only deleted
//! ranges, asked apart: `keyless`), and less the tables a lookup may pass over unread and
//! that had expired by `pruned_at`: a table that expired whole and shadows nothing answers
//! "absent" for every key of its range, as the store without it would (`Version::edit`'s
//! `passable_from`), so leaving it out of the search changes no answer. Such a table stays
//! in the version (scans, compactions and the statistics still see it) until the background
//! drops it. A version is pruned once a lookup has passed over one of its tables
//! (`Inner::prune_lookups`), so that later lookups search the tables the store without them
//! would, and meet them no more. With half of a store's tables expired whole and held
//! (4×10^6 keys, absent gets, `db_bench --workload expiry --expiry-parts 2`): 0.99–1.01×
//! the gets of the same store with them dropped, 7–15 tables passed over in 56 × 10^6
//! gets; passing them in every search, 0.97–1.02× (within this machine's noise at this
//! size, where a search of 8 tables against 4 is one step of the binary search).
//!
//! A lookup that loads a pruned set reads the store's `seen_now` after it, which the prune's
//! time came from, so it searches at that time or later. A snapshot or a read at a given
//! time takes no part: it never prunes, and one taken after a prune is of its time or later
//! as long as the clock does not go back (docs/expiry.md, "The clock").

use std::sync::Arc;

use crate::coding::partition_points;
use crate::expiry::NEVER;
use crate::filter::FilterHint;
use crate::prefetch::CacheLevel;
use crate::table::{FilterState, Table};

/// What a level's search found for a key (`SearchSet::in_level_live`).
pub(crate) enum InLevel<'a> {
    /// No table of the level holds the key in its range.
    None,
    /// The level's one candidate table for the key expired whole and shadows nothing: the
    /// key is absent from it (whether or not in its range), and from older tables as far as
    /// its range reaches; deeper levels are still searched.
    Passed,
    /// The table whose range holds the key, and whether it expired whole by the lookup's
    /// time (it then may hide older values of the key: `read.rs` `drop_expired_tail`).
    Table {
        /// The table.
        table: &'a Arc<Table>,
        /// Expired whole (`Version::expired_whole`).
        expired: bool,
    },
}

/// What point lookups search: see the module comment.
#[derive(Clone, Debug)]
pub(crate) struct SearchSet {
    /// Per level, the tables searched: level 0 oldest first, deeper levels sorted by key.
    tables: Vec<Vec<Arc<Table>>>,
    /// Per level, each table's `max_prefix` (`Table::in_level_by`).
    max_prefixes: Vec<Vec<u64>>,
    /// Per level, each table's whole-key `FilterHint` (`None`: no usable filter, or one with
    /// its own seed): a lookup starts loading the filter's lines as soon as the search has
    /// found the table's position, before it reads the table.
    hints: Vec<Vec<Option<FilterHint>>>,
    /// Per level, from when a lookup may pass each table over (`Version::edit`), or `NEVER`
    /// (all empty while no table expires whole).
    passable_from: Vec<Vec<u64>>,
    /// Per level, each table's `expire_whole_by` (`NEVER`: none; all empty while no table
    /// expires whole): read in place of the table's own properties.
    whole_by: Vec<Vec<u64>>,
    /// Tables passable by this time are left out (0: none is).
    pruned_at: u64,
    /// The earliest time a searched table expires whole (`NEVER`: none does): a lookup
    /// looks for such a table only once the store has seen that time
    /// (`Version::passing_at`). A pruned search whose every expiring table was left out
    /// searches as a store without them does.
    soonest_whole_expiry: u64,
    /// A table of the version holds deleted ranges and no key (a flush of range deletes
    /// alone): no lookup searches it, and a lookup asks the version's levels, not its own
    /// candidates, whether a newer table's ranges delete the key (`read::deleted_above`).
    /// Searched, such a table cost every absent get its range check and a probe: ~0.9× the
    /// gets of the same store without it (10^4 ranges, 10^6 keys, `db_bench --workload
    /// range-deletes --range-parts 1`).
    keyless: bool,
}

impl SearchSet {
    /// `levels` less the tables passable by `pruned_at`; `passable_from` and `whole_by` are
    /// per table of `levels` (empty, or empty levels, where no table expires whole).
    pub(crate) fn new(
        levels: &[Vec<Arc<Table>>],
        passable_from: &[Vec<u64>],
        whole_by: &[Vec<u64>],
        pruned_at: u64,
    ) -> Self {
        let n = levels.len();
        let mut s = SearchSet {
            tables: vec![Vec::new(); n],
            max_prefixes: vec![Vec::new(); n],
            hints: vec![Vec::new(); n],
            passable_from: vec![Vec::new(); n],
            whole_by: vec![Vec::new(); n],
            pruned_at,
            soonest_whole_expiry: NEVER,
            keyless: false,
        };
        let at = |times: &[Vec<u64>], level: usize, i: usize| {
            times
                .get(level)
                .and_then(|t| t.get(i))
                .copied()
                .unwrap_or(NEVER)
        };
        let expiry = |level: usize, i: usize| (at(passable_from, level, i), at(whole_by, level, i));
        let keyless = |t: &Table| t.properties().entries == 0;
        for (level, tables) in levels.iter().enumerate() {
            for (i, t) in tables.iter().enumerate() {
                let (from, by) = expiry(level, i);
                if keyless(t) {
                    s.keyless = true;
                    continue;
                }
                if from <= pruned_at {
                    continue;
                }
                s.tables[level].push(Arc::clone(t));
                s.max_prefixes[level].push(t.max_prefix());
                s.hints[level].push(filter_hint(t));
                s.soonest_whole_expiry = s.soonest_whole_expiry.min(by);
            }
        }
        // The expiry arrays only where some searched table expires whole.
        if s.soonest_whole_expiry != NEVER {
            for (level, tables) in levels.iter().enumerate() {
                for (i, t) in tables.iter().enumerate() {
                    let (from, by) = expiry(level, i);
                    if from > pruned_at && !keyless(t) {
                        s.passable_from[level].push(from);
                        s.whole_by[level].push(by);
                    }
                }
            }
        }
        s
    }

    /// Whether a table of ranges alone was left out (`keyless`).
    #[inline(always)]
    pub(crate) fn left_out_ranges(&self) -> bool {
        self.keyless
    }

    /// The earliest time a searched table expires whole (`NEVER`: none does).
    #[inline(always)]
    pub(crate) fn soonest_whole_expiry(&self) -> u64 {
        self.soonest_whole_expiry
    }

    /// The time up to which passable tables are left out (0: none are).
    pub(crate) fn pruned_at(&self) -> u64 {
        self.pruned_at
    }

    /// The tables of `level` a lookup searches.
    #[inline(always)]
    pub(crate) fn level(&self, level: usize) -> &[Arc<Table>] {
        &self.tables[level]
    }

    /// What `level` (1 and deeper) holds for `key` in a lookup at `seen` (the latest time the
    /// store has seen; 0 before any table may have expired whole): the table whose range holds
    /// it, with the lines its filter will read for `hash` (the key's `hash_key`) requested
    /// first, from the level's hints, before the table is read (`get` and `multi_get` both
    /// search this way); or `Passed`, a table that expired whole by `seen` and shadows nothing
    /// (`passable_from`), neither its filter lines requested nor the table read.
    ///
    /// Measured: requesting the filter lines ahead, at 10^8 keys (`absent_ab time`, 10
    /// interleaved pairs against the commit before), 0.975× the absent-get time, median,
    /// within this machine's noise; the profile had shown the search's table read
    /// (`Table::covers`) at ~5% of an absent get ahead of each prefetch (`db_bench --defaults
    /// --hold absent`, 2×10^6 keys). Passing the expired table here rather than after the
    /// search had read it (4×10^6 keys, half the tables expired whole, absent keys): 0.78× →
    /// 0.96× the gets of the same store with those tables dropped (docs/expiry.md).
    #[inline(always)]
    pub(crate) fn in_level_live(
        &self,
        level: usize,
        key: &[u8],
        hash: u64,
        seen: u64,
    ) -> InLevel<'_> {
        let Some(i) =
            Table::candidate_in_level(&self.tables[level], &self.max_prefixes[level], key)
        else {
            return InLevel::None;
        };
        self.live_at(level, i, key, hash, seen, CacheLevel::L1)
    }

    /// For each key prefix in `prefixes` (`key_prefix` of the keys), its search position on
    /// `level` (1 and deeper), all searched together (`partition_points`): the `positions`
    /// `in_level_live_from` takes.
    pub(crate) fn positions_in_level(
        &self,
        level: usize,
        prefixes: &[u64],
        positions: &mut [usize],
    ) {
        partition_points(&self.max_prefixes[level], prefixes, positions);
    }

    /// `in_level_live` from the key's search position (`positions_in_level`) and `key_prefix`
    /// `p`, for a batch (`multi_get`): the filter's lines are requested into L2 (`CacheLevel`).
    #[inline(always)]
    pub(crate) fn in_level_live_from(
        &self,
        level: usize,
        position: usize,
        p: u64,
        key: &[u8],
        hash: u64,
        seen: u64,
    ) -> InLevel<'_> {
        let levels = (&self.tables[level], &self.max_prefixes[level]);
        let Some(i) = Table::candidate_from(levels.0, levels.1, position, p, key) else {
            return InLevel::None;
        };
        self.live_at(level, i, key, hash, seen, CacheLevel::L2)
    }

    /// `found_prefetched`, unless table `i` of `level` may be passed over at `seen`.
    #[inline(always)]
    fn live_at(
        &self,
        level: usize,
        i: usize,
        key: &[u8],
        hash: u64,
        seen: u64,
        into: CacheLevel,
    ) -> InLevel<'_> {
        if self.passable_from[level]
            .get(i)
            .is_some_and(|&from| from <= seen)
        {
            return InLevel::Passed;
        }
        match self.found_prefetched(level, i, key, hash, into) {
            Some(table) => InLevel::Table {
                table,
                expired: self.expired_whole(level, i, seen),
            },
            None => InLevel::None,
        }
    }

    /// Whether table `i` of `level` (as searched) expired whole by `seen` (from `whole_by`,
    /// without reading the table).
    #[inline(always)]
    pub(crate) fn expired_whole(&self, level: usize, i: usize, seen: u64) -> bool {
        self.whole_by[level].get(i).is_some_and(|&by| by <= seen)
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
        self.tables[level].get(i).filter(|t| t.covers(key))
    }

    /// The filter hints of `level`'s searched tables (tests).
    #[cfg(test)]
    pub(crate) fn hints(&self, level: usize) -> &[Option<FilterHint>] {
        &self.hints[level]
    }

    /// Whether no level keeps expiry times (tests).
    #[cfg(test)]
    pub(crate) fn keeps_no_expiry(&self) -> bool {
        self.whole_by.iter().all(Vec::is_empty)
    }
}

/// `t`'s whole-key filter hint, if it has a usable filter.
fn filter_hint(t: &Table) -> Option<FilterHint> {
    match t.filter() {
        FilterState::Valid(f) => f.hint(),
        _ => None,
    }
}
