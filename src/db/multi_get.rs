//! Point lookups of many keys at once (`Db::multi_get`, `Snapshot::multi_get`).
//!
//! A single `get` waits for each filter's cache line in turn, or at best overlaps the few
//! filters of one key (`read.rs`). A batch has many keys' worth of independent lines to fetch,
//! so it goes level by level instead of key by key: for each level-0 table (newest first) and
//! then each deeper level, every key still unresolved finds its table there (on deeper
//! levels all keys' binary searches run in lockstep, `coding::partition_points`), the filter lines
//! of all of them are prefetched, then all of them are probed, and the data blocks the
//! "maybe" answers need are read, each block once for all the keys that fall in it. A key
//! found (value or deletion) leaves the batch; the rest go down a level.
//!
//! Each key sees the same evidence in the same order as `get` (memtables, level 0 newest
//! first, one table per deeper level), so its answer is `get`'s. All keys read one published
//! state, loaded once: the batch is a consistent view, as if read under one snapshot. The
//! keys are taken in chunks of `CHUNK`, so that a chunk's prefetched lines are still in the
//! CPU cache when they are probed.

use std::sync::Arc;

use smallvec::SmallVec;

use super::counters::{bump, ReadCounters};
use super::filter_checks::{ask_filters, FilterTally, KeyPrefix, Verdict};
use super::read::{in_memtables, memtables_delete, prefetch_filter, Lookup, ReadPath};
use super::state::State;
use super::version::{InLevel, MAX_LEVELS};
use crate::coding::key_prefix;
use crate::error::Result;
use crate::filter::hash_key;
use crate::prefetch::CacheLevel;
use crate::table::{BlockRef, Table, TableReadStats};

/// Keys probed together. Each holds a cache line in flight; a chunk's lines must still be in
/// L1/L2 when probed.
const CHUNK: usize = 64;

/// One key of the batch on its way down the levels.
struct Pending<'k, 'v> {
    /// Its position in the caller's keys.
    slot: usize,
    key: &'k [u8],
    hash: u64,
    /// `key_prefix(key)`: what the level searches compare.
    prefix_u64: u64,
    prefix: KeyPrefix<'k>,
    /// The table on the level being probed whose range holds the key, if any.
    table: Option<&'v Arc<Table>>,
    /// Found (a value, a deletion or an error): it leaves the batch.
    done: bool,
}

/// A key whose table's filter said "maybe": the data block it needs.
struct BlockRead {
    /// Index into the pending keys.
    at: usize,
    table: u64,
    block: usize,
    filtered: bool,
}

impl ReadPath<'_> {
    /// The values of `keys` in `state` (seeing `mem_seen` batches of its memtable), in the
    /// caller's order, each as `get` would answer it.
    pub(super) fn multi_get<K: AsRef<[u8]>>(
        &self,
        state: &State,
        mem_seen: u64,
        keys: &[K],
    ) -> Vec<Result<Option<Vec<u8>>>> {
        let counters = self.counters.reader();
        bump(&counters.gets, keys.len() as u64);
        bump(&counters.keyspace_lookups[state.slot], keys.len() as u64);
        // Every answer starts as "absent" and is overwritten where a key is found. Filled
        // here in one loop, not pushed key by key: the push built each `Ok(None)` on the
        // stack with a narrow store and copied it out with a wide load, a store-forwarding
        // stall that was ~5% of an absent `multi_get` (`perf annotate`, `db_bench --defaults
        // --hold absent-multi`).
        let mut out: Vec<Result<Option<Vec<u8>>>> = Vec::with_capacity(keys.len());
        out.resize_with(keys.len(), || Ok(None));
        let mut pending: Vec<Pending> = Vec::with_capacity(CHUNK.min(keys.len()));
        for (base, chunk) in keys.chunks(CHUNK).enumerate() {
            pending.clear();
            for (i, key) in chunk.iter().enumerate() {
                let key = key.as_ref();
                let hash = hash_key(key);
                let slot = base * CHUNK + i;
                match in_memtables(state, mem_seen, key, hash, &self.now) {
                    Lookup::Value(v) => out[slot] = Ok(Some(v.to_vec())),
                    Lookup::Tombstone => {}
                    Lookup::Absent => {
                        pending.push(Pending {
                            slot,
                            key,
                            hash,
                            prefix_u64: key_prefix(key),
                            prefix: KeyPrefix::Pending(state.rule, key),
                            table: None,
                            done: false,
                        });
                    }
                }
            }
            self.tables(counters, (state, mem_seen), &mut pending, &mut out);
        }
        out
    }

    /// Takes `pending` down the table levels of `state`, writing what each key finds to `out`.
    fn tables<'k, 'v>(
        &self,
        counters: &ReadCounters,
        (state, mem_seen): (&'v State, u64),
        pending: &mut Vec<Pending<'k, 'v>>,
        out: &mut [Result<Option<Vec<u8>>>],
    ) {
        // The tables a lookup searches (`SearchSet`): those passed over by the search are left
        // out once the store has pruned the version.
        let search = state.version.search();
        // Once some table may have expired whole, the search passes over one that has and
        // shadows nothing (`SearchSet::in_level_live_from`), unread; before then `seen` is 0
        // and nothing is passed over.
        let seen = state.version.passing_at(self.seen);
        let passed = std::cell::Cell::new(false);
        for t in search.level(0).iter().rev() {
            if pending.is_empty() {
                return;
            }
            self.stage(
                counters,
                0,
                (state, mem_seen),
                pending,
                out,
                |_, key, hash| {
                    let found = t.covers(key).then_some(t);
                    if let Some(t) = found {
                        prefetch_filter(t, hash, CacheLevel::L2);
                    }
                    found
                },
            );
        }
        for level in 1..MAX_LEVELS {
            if pending.is_empty() {
                break;
            }
            if search.level(level).is_empty() {
                continue;
            }
            // The level's searches for all pending keys run together (`partition_points`).
            let prefixes: SmallVec<[u64; CHUNK]> = pending.iter().map(|p| p.prefix_u64).collect();
            let mut positions: SmallVec<[usize; CHUNK]> = SmallVec::from_elem(0, pending.len());
            search.positions_in_level(level, &prefixes, &mut positions);
            let skips = &counters.levels[level].expired_skips;
            self.stage(
                counters,
                level,
                (state, mem_seen),
                pending,
                out,
                |at, key, hash| {
                    let (position, p) = (positions[at], prefixes[at]);
                    match search.in_level_live_from(level, position, p, key, hash, seen) {
                        InLevel::Table { table, .. } => Some(table),
                        InLevel::Passed => {
                            bump(skips, 1);
                            passed.set(true);
                            None
                        }
                        InLevel::None => None,
                    }
                },
            );
        }
        if passed.get() {
            self.passed_over(&state.version, seen);
        }
    }

    /// Probes, for every pending key, the table `find` gives on this level (`find` is given
    /// the key's index in `pending`, its key and hash): `find` requests
    /// the filter lines as it finds each table (on levels 1 and deeper from the level's dense
    /// `FilterHint`s, before the table is read, as `get` does), then every filter is probed,
    /// then each needed data block is read once.
    fn stage<'k, 'v>(
        &self,
        counters: &ReadCounters,
        level: usize,
        (state, mem_seen): (&State, u64),
        pending: &mut Vec<Pending<'k, 'v>>,
        out: &mut [Result<Option<Vec<u8>>>],
        find: impl Fn(usize, &[u8], u64) -> Option<&'v Arc<Table>>,
    ) {
        for (at, p) in pending.iter_mut().enumerate() {
            p.table = find(at, p.key, p.hash);
        }
        let version = &*state.version;
        let mem_ranges = state.memtables_have_ranges();
        let mut skipped = false;
        let c = &counters.levels[level];
        let mut reads: SmallVec<[BlockRead; 8]> = SmallVec::new();
        let mut tally = FilterTally::default();
        for (at, p) in pending.iter_mut().enumerate() {
            let Some(t) = p.table else { continue };
            // Expired whole by the time the store has seen, and nothing older holds the key:
            // "absent", unread (`find`).
            if version.search().soonest_whole_expiry() <= self.seen
                && t.expire_whole_by()
                    .is_some_and(|latest| latest <= self.seen)
                && !version.older_covers(level, t, p.key)
            {
                bump(&c.expired_skips, 1);
                self.passed_over(version, self.seen);
                (p.done, skipped) = (true, true);
                continue;
            }
            let (verdict, answer) = ask_filters(t, p.key, p.hash, &mut p.prefix);
            tally.add(answer);
            if let Verdict::Maybe { filtered } = verdict {
                // A key a range of a memtable or a newer table deletes is not read here
                // (nor deeper).
                if (mem_ranges && memtables_delete(state, mem_seen, p.key, usize::MAX))
                    || (version.range_deletes && version.deleted_above(level, t, p.key))
                {
                    (p.done, skipped) = (true, true);
                    continue;
                }
                // A key past the table's last block is not in it: nothing to read.
                if let Some(block) = t.block_of(p.key) {
                    reads.push(BlockRead {
                        at,
                        table: t.id(),
                        block,
                        filtered,
                    });
                }
            }
        }
        tally.flush(counters, c);
        if !reads.is_empty() {
            self.read_blocks(counters, level, pending, out, &mut reads);
        }
        if !reads.is_empty() || skipped {
            pending.retain(|p| !p.done);
        }
    }

    /// Reads the data blocks `reads` need, each once (grouped by table and block), and looks
    /// each key up in its block.
    fn read_blocks(
        &self,
        counters: &ReadCounters,
        level: usize,
        pending: &mut [Pending],
        out: &mut [Result<Option<Vec<u8>>>],
        reads: &mut [BlockRead],
    ) {
        let c = &counters.levels[level];
        reads.sort_unstable_by_key(|r| (r.table, r.block));
        let mut current: Option<(u64, usize, Result<BlockRef<'_>>)> = None;
        for r in reads.iter() {
            let p = &mut pending[r.at];
            let Some(t) = p.table else { continue };
            let loaded = match &current {
                Some((table, block, _)) => (*table, *block) == (r.table, r.block),
                None => false,
            };
            if !loaded {
                // The block before goes first: a block read outside the cache borrows this
                // thread's one scratch buffer, which that one may hold.
                drop(current.take());
                let mut stats = TableReadStats::default();
                let block = t.data_block(r.block, &mut stats, self.cache);
                self.count_reads(counters, c, &stats);
                current = Some((r.table, r.block, block));
            }
            let found = match current.as_ref().map(|(_, _, b)| b) {
                Some(Ok(block)) => t.find_in(block, r.block, p.key, &self.now),
                Some(Err(e)) => Err(e.replicate()),
                None => continue,
            };
            match found {
                Ok(None) => continue,
                Ok(Some(value)) => {
                    if r.filtered {
                        bump(&c.filter_true_positive, 1);
                    }
                    out[p.slot] = Ok(value);
                }
                Err(e) => out[p.slot] = Err(e),
            }
            p.done = true;
        }
    }
}
