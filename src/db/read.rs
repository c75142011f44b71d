//! Point lookups: memtables newest first, then level-0 tables newest first, then one table
//! per deeper level found by binary search. The key is hashed once; a table's data is read
//! only if its key range holds the key and its filter says "maybe". A table whose filter was
//! rejected at open is read without one (counted in `DbStats`).
//!
//! The hot path shares nothing writable with other readers: the published state is loaded
//! through `ArcSwap` (no lock, no reference count), counters go to this thread's
//! `ReadCounters`, and a key every filter excludes allocates nothing. Data blocks come from the
//! block cache when they can (`table/cache.rs`).
//!
//! A table without a usable whole-key filter (written with prefix filters only, `PrefixFilters::only`) is
//! asked through its prefix filter for the key's prefix, when the rule gives the key one; that
//! prefix is hashed at most once per get, and only when such a table is reached
//! (`filter_checks.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

use smallvec::SmallVec;

use super::counters::{bump, Counters, LevelCounters, ReadCounters};
use super::filter_checks::{check_filters, KeyPrefix, Verdict};
use super::inner::Inner;
use super::state::State;
use super::version::{InLevel, Version, MAX_LEVELS};
use crate::error::Result;
use crate::expiry::Now;
use crate::filter::hash_key;
use crate::prefetch::CacheLevel;
use crate::table::{BlockCache, FilterState, LentValue, Table, TableReadStats};

/// What one place (memtable or table) says about a key; `V` is how a found value is held.
pub(super) enum Lookup<V> {
    /// The key's newest value is here.
    Value(V),
    /// The key's newest entry here is a deletion.
    Tombstone,
    /// Nothing here: look further down.
    Absent,
}

impl<V> From<Option<Option<V>>> for Lookup<V> {
    fn from(found: Option<Option<V>>) -> Self {
        match found {
            Some(Some(v)) => Lookup::Value(v),
            Some(None) => Lookup::Tombstone,
            None => Lookup::Absent,
        }
    }
}

/// A value a point lookup found, lent where it lies: in a memtable of the state read, or in
/// the data block that holds it (`Db::get_with` hands it to its caller without a copy).
pub(super) enum Lent<'s> {
    /// In a memtable.
    Memtable(&'s [u8]),
    /// In a table's data block.
    Table(LentValue<'s>),
}

impl Lent<'_> {
    /// The value's bytes.
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Lent::Memtable(v) => v,
            Lent::Table(v) => v.bytes(),
        }
    }
}

/// How a point lookup takes the value it finds (`ReadPath::find`): a copy (`Copied`, for
/// `get`) or a loan (`Lent`, for `get_with`). The lookup is one generic function, so `get`
/// compiles to the path it had before values could be lent: the copy is made inside the
/// table's never-inlined lookup, and the loop carries a `Vec`.
pub(super) trait Take<'s> {
    /// The value as found.
    type Value;
    /// A value in a memtable.
    fn from_memtable(v: &'s [u8]) -> Self::Value;
    /// `t.get`, or `t.get_lent`.
    fn from_table(
        t: &'s Table,
        key: &[u8],
        reads: &mut TableReadStats,
        cache: Option<&BlockCache>,
        now: &Now,
    ) -> Result<Option<Option<Self::Value>>>;
}

/// Take a copy (`Db::get`).
pub(super) struct Copied;

impl<'s> Take<'s> for Copied {
    type Value = Vec<u8>;
    #[inline(always)]
    fn from_memtable(v: &'s [u8]) -> Vec<u8> {
        v.to_vec()
    }
    #[inline(always)]
    fn from_table(
        t: &'s Table,
        key: &[u8],
        reads: &mut TableReadStats,
        cache: Option<&BlockCache>,
        now: &Now,
    ) -> Result<Option<Option<Vec<u8>>>> {
        t.get_at(key, reads, cache, now)
    }
}

impl<'s> Take<'s> for Lent<'s> {
    type Value = Lent<'s>;
    #[inline(always)]
    fn from_memtable(v: &'s [u8]) -> Lent<'s> {
        Lent::Memtable(v)
    }
    #[inline(always)]
    fn from_table(
        t: &'s Table,
        key: &[u8],
        reads: &mut TableReadStats,
        cache: Option<&BlockCache>,
        now: &Now,
    ) -> Result<Option<Option<Lent<'s>>>> {
        let found = t.get_lent(key, reads, cache, now)?;
        Ok(found.map(|v| v.map(Lent::Table)))
    }
}

/// What a point lookup reads with: the store's counters and block cache (the prefix rule is
/// the keyspace's, `State::rule`), and its reading of the clock, which decides whether an
/// expiring entry has expired (taken at the first such entry met). The store lends its own
/// (`Inner::read_path`); a `Snapshot` holds its own references, so that it does not keep the
/// store (and its directory lock) alive, and its own reading, taken when it was made.
pub(super) struct ReadPath<'a> {
    pub(super) counters: &'a Counters,
    pub(super) cache: Option<&'a BlockCache>,
    pub(super) now: Now<'a>,
    /// A time the clock is known to have reached (`Inner::seen_now`; a snapshot's reading),
    /// loaded when the read starts: a table that expired whole by then is skipped without a
    /// clock reading of its own, which would cost an absent get a fifth of its time.
    pub(super) seen: u64,
    /// Where a reading this read takes is recorded for later reads (none for a snapshot).
    pub(super) seen_at: Option<&'a AtomicU64>,
    /// The store whose current state this read searches, told when a search passes over a
    /// table (`passed_over`); none for a snapshot or a read at a given time.
    pub(super) store: Option<&'a Inner>,
}

/// How far a read's clock reading must pass `Inner::seen_now` before it is recorded: reads
/// that read the clock do not all write one shared line.
const SEEN_STEP_MS: u64 = 10;

/// Records the clock reading the read took, if it passes what the store has seen by
/// `SEEN_STEP_MS`: a test and a branch for a read that read no clock.
impl Drop for ReadPath<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        let r = self.now.taken();
        if r > self.seen.saturating_add(SEEN_STEP_MS) {
            if let Some(at) = self.seen_at {
                at.fetch_max(r, Ordering::Relaxed);
            }
        }
    }
}

/// What may delete a key above the table a get is about to read: the memtables' ranges and
/// those of the newer tables among its candidates (`deleted_above`).
#[derive(Clone, Copy)]
pub(super) struct Above<'a> {
    state: &'a State,
    mem_seen: u64,
    tables: &'a [(usize, &'a Table)],
}

/// Whether a deleted range of the memtables or of one of `above`'s tables (newer than the
/// one about to be read, from a get's candidates) covers `key`: the key is then deleted in
/// the table, which is not read. Asked only once a table's filter says "maybe", so an absent
/// key (every filter says "absent") asks nothing: on a store holding 10^4 ranges, asking
/// every table before its filter cost absent gets 2.3× even with the dense search
/// (`db_bench --workload range-deletes`, 10^6 keys). Out of line: only stores with deleted
/// ranges come here.
#[cold]
#[inline(never)]
pub(super) fn deleted_above(above: Above<'_>, (level, t): (usize, &Table), key: &[u8]) -> bool {
    let version = &above.state.version;
    memtables_delete(above.state, above.mem_seen, key, usize::MAX)
        || match version.search().left_out_ranges() {
            // A table of ranges alone is no candidate: the version's levels are asked.
            true => version.deleted_above(level, t, key),
            false => above
                .tables
                .iter()
                .any(|(_, t)| t.range_deletes().covers(key)),
        }
}

impl Inner {
    pub(super) fn read_path(&self) -> ReadPath<'_> {
        ReadPath {
            counters: &self.counters,
            cache: self.cache.as_deref(),
            now: Now::of(&*self.opts.clock),
            seen: self.seen_now.load(Ordering::Relaxed),
            seen_at: Some(&self.seen_now),
            store: Some(self),
        }
    }
}

impl ReadPath<'_> {
    /// The value of `key` in `state`, or `None` (`find`, copying the value).
    #[inline(always)]
    pub(super) fn get(&self, state: &State, mem_seen: u64, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.find::<Copied>(state, mem_seen, key)
    }

    /// The value of `key` in `state`, lent where it lies, or `None` (`find`).
    #[inline(always)]
    pub(super) fn get_lent<'s>(
        &self,
        state: &'s State,
        mem_seen: u64,
        key: &[u8],
    ) -> Result<Option<Lent<'s>>> {
        self.find::<Lent<'s>>(state, mem_seen, key)
    }

    /// The value of `key` in `state`, taken as `T` takes it, or `None`, seeing the first
    /// `mem_seen` batches of `state.mem` (a snapshot's count, or `visible()` for every batch
    /// applied so far). Always inlined, so that `Inner::get` stays one function (as before
    /// snapshots: measured 5-10% faster on absent gets than a call here, `db_bench --hold
    /// absent`).
    #[inline(always)]
    fn find<'s, T: Take<'s>>(
        &self,
        state: &'s State,
        mem_seen: u64,
        key: &[u8],
    ) -> Result<Option<T::Value>> {
        let counters = self.counters.reader();
        bump(&counters.gets, 1);
        bump(&counters.keyspace_lookups[state.slot], 1);
        let hash = hash_key(key);
        match in_memtables(state, mem_seen, key, hash, &self.now) {
            Lookup::Value(v) => return Ok(Some(T::from_memtable(v))),
            Lookup::Tombstone => return Ok(None),
            Lookup::Absent => {}
        }
        let mut prefix = KeyPrefix::Pending(state.rule, key);
        let version = &state.version;
        // Every table that may hold the key, in the order of evidence (level 0 newest first,
        // then one per deeper level), found before any filter is probed: the filters' cache
        // lines are then requested together and their misses overlap, where probing
        // one after another would wait for each miss in turn. The answer and the order in
        // which tables are consulted are as before. Each filter's first line is requested as
        // soon as its table is found (the next level's search runs while it loads), and the
        // list is built in place, never moved: against collecting first and prefetching after,
        // absent gets 1.04/1.16/1.10x at 2x10^6 keys, 0.98/1.25x at 10^7 (`db_bench --hold
        // absent`, interleaved pairs). On levels 1 and deeper the lines are requested from the
        // level's `FilterHint`s as soon as the search has the table's position, before the
        // table itself is read (`SearchSet::in_level_live`).
        let mut candidates: SmallVec<[(usize, &Table); 24]> = SmallVec::new();
        // Once some table has expired whole by the time the store has seen, a level's search
        // passes over such a table that shadows nothing (`SearchSet::in_level_live`), before it
        // requests the table's filter lines or reads it; before then `seen` is 0 and no table
        // is passed over (the look is one load and a branch taken alike every time).
        let seen = version.passing_at(self.seen);
        let search = version.search();
        // Whether the last table of the list expired whole (`drop_expired_tail`).
        let mut tail_expired = false;
        // Whether a level's search passed over a table (`passed_over`).
        let mut passed = false;
        for (i, t) in search.level(0).iter().enumerate().rev() {
            if t.covers(key) {
                prefetch_filter(t, hash, CacheLevel::L1);
                candidates.push((0, t));
                tail_expired = search.expired_whole(0, i, seen);
            }
        }
        for level in 1..MAX_LEVELS {
            match search.in_level_live(level, key, hash, seen) {
                InLevel::Table { table, expired } => {
                    candidates.push((level, table));
                    tail_expired = expired;
                }
                InLevel::Passed => {
                    bump(&counters.levels[level].expired_skips, 1);
                    passed = true;
                }
                InLevel::None => {}
            }
        }
        // Tables at the end of the list that expired whole answer "absent" unread too (on level
        // 0, or one that shadows a table that does not hold the key). Looked for out of line,
        // and only when the last one did (from the version's dense `whole_by`): looking
        // whenever some table had expired whole read the last table's properties on every
        // get, 0.92× the gets of the same store without the expired tables (4×10^6 keys, half
        // expired); looking inline cost absent gets 3% on stores without expiry. Looked for
        // with a clock reading of its own, it cost absent gets on a store whose keys all
        // expire (far off) 12% (`db_bench --workload expiry`).
        if tail_expired {
            self.drop_expired_tail(counters, &mut candidates);
            passed = true;
        }
        if passed {
            self.passed_over(version, seen);
        }
        // By reference: iterating the list by value moved all of it (368 bytes) into the
        // iterator first, a `memcpy` that was 1.9% of an absent get (`perf annotate`,
        // `db_bench --hold absent`).
        let ranges = version.range_deletes || state.memtables_have_ranges();
        for (i, &(level, t)) in candidates.iter().enumerate() {
            // With deleted ranges in the store, a table whose filter says "maybe" is read
            // only if no range of a memtable or a newer table covers the key
            // (`deleted_above`).
            let above = ranges.then(|| Above {
                state,
                mem_seen,
                tables: &candidates[..i],
            });
            match self.probe::<T>(counters, (level, t), key, hash, &mut prefix, above)? {
                Lookup::Value(v) => return Ok(Some(v)),
                Lookup::Tombstone => return Ok(None),
                Lookup::Absent => {}
            }
        }
        Ok(None)
    }

    /// After a lookup at `seen` passed over a table of `version` that expired whole (in a
    /// level's search, or at the end of its candidates): if `version`'s search still holds a
    /// table passable by `seen`, the store's search sets are pruned
    /// (`Inner::prune_lookups`), so that later lookups do not search such tables at all. Out
    /// of line: once pruned, a lookup meets a table to pass over only when another one has
    /// expired whole, or one that is not passable (it shadows an older table: one check).
    #[cold]
    #[inline(never)]
    pub(super) fn passed_over(&self, version: &Version, seen: u64) {
        if let Some(store) = self.store {
            if version.next_passable() <= seen {
                store.prune_lookups(seen);
            }
        }
    }

    /// Removes the tables that expired whole from the end of `candidates` (`find`), counted:
    /// a key in one of them has expired, and no table after it could hold the key. (A table
    /// with deleted ranges never expires whole: one `cut_at_deleting_table` kept stays.)
    #[cold]
    #[inline(never)]
    fn drop_expired_tail(
        &self,
        counters: &ReadCounters,
        candidates: &mut SmallVec<[(usize, &Table); 24]>,
    ) {
        while let Some(&(level, t)) = candidates.last() {
            match t.expire_whole_by() {
                Some(latest) if latest <= self.seen => {
                    bump(&counters.levels[level].expired_skips, 1);
                    candidates.pop();
                }
                _ => break,
            }
        }
    }

    /// Consults `t`, whose range holds `key`: filter, then (unless a range of a memtable or
    /// of a table `above`, newer, covers the key) one data block. Always inlined into
    /// `get`'s loop (measured: outlined, absent gets lost 5-15%, `db_bench --hold absent`).
    #[inline(always)]
    fn probe<'s, T: Take<'s>>(
        &self,
        counters: &ReadCounters,
        (level, t): (usize, &'s Table),
        key: &[u8],
        hash: u64,
        prefix: &mut KeyPrefix,
        above: Option<Above<'_>>,
    ) -> Result<Lookup<T::Value>> {
        bump(&counters.tables_probed, 1);
        let c = &counters.levels[level];
        let Verdict::Maybe { filtered } = check_filters(c, t, key, hash, prefix) else {
            return Ok(Lookup::Absent);
        };
        if above.is_some_and(|above| deleted_above(above, (level, t), key)) {
            return Ok(Lookup::Tombstone);
        }
        let mut reads = TableReadStats::default();
        let found = T::from_table(t, key, &mut reads, self.cache, &self.now);
        self.count_reads(counters, c, &reads);
        let found = Lookup::from(found?);
        if filtered && !matches!(found, Lookup::Absent) {
            bump(&c.filter_true_positive, 1);
        }
        Ok(found)
    }

    /// Counts the data-block reads (and cache hits) of one table lookup.
    #[inline(always)]
    pub(super) fn count_reads(
        &self,
        counters: &ReadCounters,
        c: &LevelCounters,
        reads: &TableReadStats,
    ) {
        bump(&c.data_block_reads, reads.blocks);
        bump(&c.bytes_read, reads.bytes);
        if self.cache.is_some() {
            bump(&counters.block_cache_hits, reads.cache_hits);
            bump(&counters.block_cache_misses, reads.blocks);
        }
    }
}

/// Starts loading, into `into`, the lines `t`'s filter will read for `hash`, through the
/// table's own reader: for level-0 tables, which have no dense hints (`get` into L1,
/// `multi_get` into L2: `CacheLevel`).
#[inline(always)]
pub(super) fn prefetch_filter(t: &Table, hash: u64, into: CacheLevel) {
    if let FilterState::Valid(f) = t.filter() {
        if let Some(hint) = f.hint() {
            hint.prefetch_into(hash, into);
        }
    }
}

/// The newest entry for `key` in the memtables: the first `mem_seen` batches of the active
/// one, then the immutable ones newest first. `hash` is `hash_key(key)`; a put expired at
/// `now` is a tombstone.
#[inline(always)]
pub(super) fn in_memtables<'s>(
    state: &'s State,
    mem_seen: u64,
    key: &[u8],
    hash: u64,
    now: &Now,
) -> Lookup<&'s [u8]> {
    let newest = state.mem.get_at(key, hash, mem_seen, now);
    let older = state.imm.iter().rev();
    let older = older.map(|m| m.get_at(key, hash, m.visible(), now));
    for (i, found) in std::iter::once(newest).chain(older).enumerate() {
        match Lookup::from(found) {
            Lookup::Absent => {}
            // What an older memtable holds, a range of a newer one may have deleted.
            _ if i > 0 && memtables_delete(state, mem_seen, key, i) => return Lookup::Tombstone,
            known => return known,
        }
    }
    Lookup::Absent
}

/// Whether a range of one of the `upto` newest memtables of `state` (`State::memtables`;
/// `usize::MAX`: all of them) covers `key`: every entry of an older memtable or table is
/// older than those ranges. Out of line: asked only where a memtable does not hold the key
/// and something older may.
#[cold]
#[inline(never)]
pub(super) fn memtables_delete(state: &State, mem_seen: u64, key: &[u8], upto: usize) -> bool {
    state
        .memtables(mem_seen)
        .take(upto)
        .any(|(m, seen)| m.has_ranges() && m.range_covers(key, 0, seen))
}
