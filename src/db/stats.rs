//! The store's figures, RocksDB-style: per level for the read path, global for the rest.
//! `Db::stats()` takes a snapshot (`collect`) of the live counters (`counters.rs`).
//!
//! Filter counters follow RocksDB's tickers: `filter_checks` counts tables whose key range
//! held the key and whose filter was consulted; `filter_useful` the checks that said "absent"
//! (the table was skipped without a read); `filter_positive` the rest; `filter_true_positive`
//! the positives where the key really was in the table. Observed FPR =
//! (positive − true positive) / (checks − true positive).
//!
//! Prefix filters (`Options::prefix_filters`) have their own: `prefix_checks` counts tables a
//! prefix scan (or a `get` on a table without a whole-key filter) asked, `prefix_useful` those
//! skipped, `prefix_unfiltered` the tables such a scan had to read because they hold no usable
//! prefix filter (written under another rule or none, or it failed validation).
//!
//! Range filters (`Options::range_filters`) too: `range_checks` counts tables a scan asked
//! whether its range (cut to the table's keys) may hold a key, `range_useful` those that said
//! "empty" (skipped unread), `range_false_positives` the "maybe"s where the table held no key
//! in the range after all, and `range_unfiltered` the tables a scan of a range with both
//! bounds read unasked (no usable range filter, or the range wider than the filter answers).
//! Observed rate = false positives / (useful + false positives).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

use super::counters::{Counters, LevelCounters};
use super::version::Version;
use crate::table::{FilterState, RangeFilterState};

/// Levels the store uses (defined beside the table set, `version.rs`).
pub use super::version::MAX_LEVELS;

/// Read-path figures of one level (or of all levels, in `DbStats::total`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct LevelStats {
    /// Level number (`None` for the total).
    pub level: Option<usize>,
    /// Live tables.
    pub tables: u64,
    /// Bytes of table files.
    pub table_bytes: u64,
    /// Bytes of data blocks on disk (compressed where compression shrank them; with the
    /// alignment padding of uncompressed tables, FORMAT.md §3).
    pub data_bytes: u64,
    /// Bytes of the same data blocks uncompressed: `raw_data_bytes / data_bytes` is the
    /// compression ratio the level got.
    pub raw_data_bytes: u64,
    /// Keys covered by the level's filters.
    pub filter_keys: u64,
    /// Bytes of filter blocks held in memory.
    pub filter_bytes: u64,
    /// Sum over the level's tables of each filter's expected false-positive rate: the expected
    /// wasted reads per absent-key lookup that reaches every table.
    pub expected_fpr_sum: f64,
    /// Filters consulted.
    pub filter_checks: u64,
    /// Filters that said "absent" (table skipped).
    pub filter_useful: u64,
    /// Filters that said "maybe".
    pub filter_positive: u64,
    /// "Maybe" answers where the key was there.
    pub filter_true_positive: u64,
    /// Tables read without a filter (none written, or it failed validation).
    pub unfiltered_probes: u64,
    /// Tables a get or multi_get answered "absent" from unread, filter and all: every entry
    /// had expired and no older table held the key (docs/expiry.md). Scans count the tables
    /// they pass over the same way. Once a get has passed over a table that hides nothing
    /// older, later gets no longer search it, so they no longer count it.
    pub expired_skips: u64,
    /// Data blocks read from table files by `get`.
    pub data_block_reads: u64,
    /// Bytes read from table files by `get`.
    pub bytes_read: u64,
    /// Distinct prefixes held by the level's prefix filters.
    pub prefix_filter_keys: u64,
    /// Bytes of prefix filter blocks held in memory.
    pub prefix_filter_bytes: u64,
    /// Sum over the level's tables of each prefix filter's expected false-positive rate.
    pub prefix_expected_fpr_sum: f64,
    /// Prefix filters consulted (by prefix scans, and by `get` on tables without a whole-key
    /// filter).
    pub prefix_checks: u64,
    /// Prefix filters that said "absent" (table skipped).
    pub prefix_useful: u64,
    /// Tables a prefix scan read because they hold no usable prefix filter (another rule,
    /// none, or it failed validation).
    pub prefix_unfiltered: u64,
    /// Data blocks read from table files by scans.
    pub scan_block_reads: u64,
    /// Data blocks scans found in the block cache (not counted in `scan_block_reads`).
    pub scan_block_cache_hits: u64,
    /// Keys covered by the level's range filters.
    pub range_filter_keys: u64,
    /// Bytes of range filters held in memory.
    pub range_filter_bytes: u64,
    /// Range filters a scan asked (the range, cut to the table's keys, short enough).
    pub range_checks: u64,
    /// Range filters that said "empty" (table skipped unread).
    pub range_useful: u64,
    /// "Maybe" answers where the table held no key in the range.
    pub range_false_positives: u64,
    /// Tables a scan of a range with both bounds read without asking a range filter: none
    /// usable (not written, or it failed validation), or the range wider than the filter
    /// answers.
    pub range_unfiltered: u64,
}

impl LevelStats {
    /// (positive − true positive) / (checks − true positive); 0 with no negatives seen.
    pub fn observed_fpr(&self) -> f64 {
        let negatives = self.filter_checks.saturating_sub(self.filter_true_positive);
        if negatives == 0 {
            return 0.0;
        }
        self.filter_positive
            .saturating_sub(self.filter_true_positive) as f64
            / negatives as f64
    }

    /// The range filters' observed false-positive rate on empty ranges: false positives /
    /// (useful + false positives); 0 with none seen.
    pub fn observed_range_fpr(&self) -> f64 {
        let empty = self.range_useful.saturating_add(self.range_false_positives);
        if empty == 0 {
            0.0
        } else {
            self.range_false_positives as f64 / empty as f64
        }
    }

    /// Bits of filter per key covered.
    pub fn filter_bits_per_key(&self) -> f64 {
        if self.filter_keys == 0 {
            0.0
        } else {
            self.filter_bytes as f64 * 8.0 / self.filter_keys as f64
        }
    }

    pub(crate) fn add_counters(&mut self, c: &LevelCounters) {
        self.add(&LevelStats {
            filter_checks: c.filter_checks.load(Relaxed),
            filter_useful: c.filter_useful.load(Relaxed),
            filter_positive: c.filter_positive.load(Relaxed),
            filter_true_positive: c.filter_true_positive.load(Relaxed),
            unfiltered_probes: c.unfiltered_probes.load(Relaxed),
            expired_skips: c.expired_skips.load(Relaxed),
            data_block_reads: c.data_block_reads.load(Relaxed),
            bytes_read: c.bytes_read.load(Relaxed),
            prefix_checks: c.prefix_checks.load(Relaxed),
            prefix_useful: c.prefix_useful.load(Relaxed),
            prefix_unfiltered: c.prefix_unfiltered.load(Relaxed),
            scan_block_reads: c.scan_block_reads.load(Relaxed),
            scan_block_cache_hits: c.scan_block_cache_hits.load(Relaxed),
            range_checks: c.range_checks.load(Relaxed),
            range_useful: c.range_useful.load(Relaxed),
            range_false_positives: c.range_false_positives.load(Relaxed),
            range_unfiltered: c.range_unfiltered.load(Relaxed),
            ..LevelStats::default()
        });
    }

    /// Adds `o` in (saturating: table and filter sizes come from disk).
    pub(crate) fn add(&mut self, o: &LevelStats) {
        for (a, b) in [
            (&mut self.tables, o.tables),
            (&mut self.table_bytes, o.table_bytes),
            (&mut self.data_bytes, o.data_bytes),
            (&mut self.raw_data_bytes, o.raw_data_bytes),
            (&mut self.filter_keys, o.filter_keys),
            (&mut self.filter_bytes, o.filter_bytes),
            (&mut self.filter_checks, o.filter_checks),
            (&mut self.filter_useful, o.filter_useful),
            (&mut self.filter_positive, o.filter_positive),
            (&mut self.filter_true_positive, o.filter_true_positive),
            (&mut self.unfiltered_probes, o.unfiltered_probes),
            (&mut self.expired_skips, o.expired_skips),
            (&mut self.data_block_reads, o.data_block_reads),
            (&mut self.bytes_read, o.bytes_read),
            (&mut self.prefix_filter_keys, o.prefix_filter_keys),
            (&mut self.prefix_filter_bytes, o.prefix_filter_bytes),
            (&mut self.prefix_checks, o.prefix_checks),
            (&mut self.prefix_useful, o.prefix_useful),
            (&mut self.prefix_unfiltered, o.prefix_unfiltered),
            (&mut self.scan_block_reads, o.scan_block_reads),
            (&mut self.scan_block_cache_hits, o.scan_block_cache_hits),
            (&mut self.range_filter_keys, o.range_filter_keys),
            (&mut self.range_filter_bytes, o.range_filter_bytes),
            (&mut self.range_checks, o.range_checks),
            (&mut self.range_useful, o.range_useful),
            (&mut self.range_false_positives, o.range_false_positives),
            (&mut self.range_unfiltered, o.range_unfiltered),
        ] {
            *a = a.saturating_add(b);
        }
        self.expected_fpr_sum += o.expected_fpr_sum;
        self.prefix_expected_fpr_sum += o.prefix_expected_fpr_sum;
    }
}

/// A snapshot of the store's counters (`Db::stats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct DbStats {
    /// One entry per level, 0 first.
    pub levels: Vec<LevelStats>,
    /// All levels added up.
    pub total: LevelStats,
    /// `get` calls.
    pub gets: u64,
    /// `scan` and `scan_prefix` calls.
    pub scans: u64,
    /// Scans whose range lies inside one prefix of the prefix rule
    /// (`Options::prefix_filters`), so prefix filters were consulted.
    pub prefix_scans: u64,
    /// Tables whose key range held the key, over all gets.
    pub tables_probed: u64,
    /// Memtable flushes.
    pub flushes: u64,
    /// Compactions run.
    pub compactions: u64,
    /// Tables dropped whole, unread, because every entry had expired (docs/expiry.md); not
    /// counted in `compactions` (nor in their bytes: none are read or written).
    pub expired_tables_dropped: u64,
    /// Expired puts taken off the disk by compactions, counted once each: rewritten as
    /// deletions or dropped, and those of expired tables dropped whole (docs/expiry.md).
    /// Since the store opened; kv_server reports it as INFO's `expired_keys`.
    pub expired_entries_dropped: u64,
    /// Bytes compactions read.
    pub compaction_bytes_read: u64,
    /// Bytes compactions wrote.
    pub compaction_bytes_written: u64,
    /// Filter blocks (whole-key, prefix or range) that failed validation at open (their
    /// table is read without that filter).
    pub filter_validation_failures: u64,
    /// Log bytes not replayed at open (`Db::recovery()` says where and why).
    pub wal_bytes_dropped: u64,
    /// Writes stopped until a flush or compaction caught up (level 0 at
    /// `Options::l0_stop_writes_trigger`, `max_immutable_memtables` waiting for a flush, or
    /// the compaction debt at `hard_pending_compaction_bytes_limit`).
    pub write_stalls: u64,
    /// Microseconds writes spent stopped, in all.
    pub write_stall_micros: u64,
    /// The longest single stop, in microseconds.
    pub longest_write_stall_micros: u64,
    /// Group commits slowed down (level 0 at `Options::l0_slowdown_writes_trigger` or more,
    /// or the compaction debt at `soft_pending_compaction_bytes_limit` or more;
    /// `throttle.rs`).
    pub write_slowdowns: u64,
    /// Microseconds group commits slept to slow writes down, in all.
    pub write_slowdown_micros: u64,
    /// The longest single slowdown sleep, in microseconds.
    pub longest_write_slowdown_micros: u64,
    /// Bytes compactions must still write to bring every level under its limit, as estimated
    /// when the current table set was installed (RocksDB's
    /// `estimate-pending-compaction-bytes`): what the pending-compaction-bytes limits bound.
    pub pending_compaction_bytes: u64,
    /// Compactions running now (`Options::background_threads` at most, or a manual one).
    pub compactions_running: u64,
    /// The most compactions that ran at once since the store was opened.
    pub most_compactions_running: u64,
    /// Write batches committed by another thread's group commit (appended to the log in the
    /// same write as the leader's own batch; RocksDB's `WRITE_DONE_BY_OTHER`).
    pub writes_grouped: u64,
    /// Data blocks found in the block cache by `get` (no read, no checksum).
    pub block_cache_hits: u64,
    /// Data blocks `get` looked for in the block cache and read from the file instead.
    pub block_cache_misses: u64,
    /// Bytes the block cache holds now.
    pub block_cache_bytes: u64,
    /// The block cache's bound (`Options::block_cache_bytes`).
    pub block_cache_capacity: u64,
    /// Immutable memtables waiting for their flush.
    pub immutable_memtables: u64,
    /// The error that made the store read-only, if one did (writes fail until reopened).
    pub read_only_error: Option<String>,
    /// Under `Filters::Budget`: the budget and its per-level allocation for the current
    /// shape (kind, bits/key, filter bytes held, expected FPR).
    pub filter_budget: Option<super::budget::Allocation>,
    /// Snapshots (`Db::snapshot`) not yet dropped: each keeps the memtables and table files of
    /// its moment.
    pub live_snapshots: u64,
    /// How long ago the oldest live snapshot was taken.
    pub oldest_snapshot_age: Option<std::time::Duration>,
    /// Every keyspace, the default first (`levels` and `filter_budget` above are the
    /// default's): its tables, its filters, its recent lookups and its part of the filter
    /// budget.
    pub keyspaces: Vec<KeyspaceStats>,
}

/// One keyspace's figures in `DbStats::keyspaces`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct KeyspaceStats {
    /// Its name.
    pub name: String,
    /// Its id.
    pub id: u32,
    /// Live tables.
    pub tables: u64,
    /// Bytes of its live tables' files.
    pub table_bytes: u64,
    /// Entries in its tables.
    pub entries: u64,
    /// Bytes of its tables' filter blocks (whole-key, prefix and range).
    pub filter_bytes: u64,
    /// Its point lookups of the last minutes (decayed with a 10-minute half-life): the weight
    /// of its part of a filter budget shared with other keyspaces.
    pub recent_lookups: f64,
    /// Under a filter budget: its part (of the store's, split by lookups among the keyspaces
    /// sharing it; or its own) and that part's per-level allocation.
    pub filter_budget: Option<super::budget::Allocation>,
}

/// A snapshot of `c` and the per-level figures of `version`.
pub(crate) fn collect(c: &Counters, version: &Version) -> DbStats {
    let load = |a: &AtomicU64| a.load(Relaxed);
    let mut s = DbStats {
        flushes: load(&c.flushes),
        compactions: load(&c.compactions),
        expired_tables_dropped: load(&c.expired_tables_dropped),
        expired_entries_dropped: load(&c.expired_entries_dropped),
        compaction_bytes_read: load(&c.compaction_bytes_read),
        compaction_bytes_written: load(&c.compaction_bytes_written),
        filter_validation_failures: load(&c.filter_validation_failures),
        wal_bytes_dropped: load(&c.wal_bytes_dropped),
        write_stalls: load(&c.write_stalls),
        write_stall_micros: load(&c.write_stall_micros),
        longest_write_stall_micros: load(&c.longest_write_stall_micros),
        write_slowdowns: load(&c.write_slowdowns),
        write_slowdown_micros: load(&c.write_slowdown_micros),
        longest_write_slowdown_micros: load(&c.longest_write_slowdown_micros),
        writes_grouped: load(&c.writes_grouped),
        most_compactions_running: load(&c.most_compactions_running),
        ..DbStats::default()
    };
    let mut per_level: [LevelStats; MAX_LEVELS] = Default::default();
    for r in c.readers() {
        s.gets = s.gets.saturating_add(load(&r.gets));
        s.scans = s.scans.saturating_add(load(&r.scans));
        s.prefix_scans = s.prefix_scans.saturating_add(load(&r.prefix_scans));
        s.tables_probed = s.tables_probed.saturating_add(load(&r.tables_probed));
        s.block_cache_hits = s.block_cache_hits.saturating_add(load(&r.block_cache_hits));
        s.block_cache_misses = s
            .block_cache_misses
            .saturating_add(load(&r.block_cache_misses));
        for (sum, lc) in per_level.iter_mut().zip(&r.levels) {
            sum.add_counters(lc);
        }
    }
    let mut total = LevelStats::default();
    for (level, tables) in version.levels().iter().enumerate() {
        let mut l = LevelStats {
            level: Some(level),
            tables: tables.len() as u64,
            ..LevelStats::default()
        };
        for t in tables {
            l.table_bytes = l.table_bytes.saturating_add(t.file_size());
            let p = t.properties();
            l.data_bytes = l.data_bytes.saturating_add(p.data_bytes);
            l.raw_data_bytes = l.raw_data_bytes.saturating_add(p.raw_data_bytes);
            if let FilterState::Valid(f) = t.filter() {
                let h = f.header();
                l.filter_keys = l.filter_keys.saturating_add(h.n);
                l.filter_bytes = l.filter_bytes.saturating_add(t.filter_bytes());
                l.expected_fpr_sum += h.kind.expected_fpr(h.m, h.n, h.k);
            }
            if let FilterState::Valid(f) = t.prefix_filter() {
                let h = f.header();
                l.prefix_filter_keys = l.prefix_filter_keys.saturating_add(h.n);
                l.prefix_filter_bytes = l
                    .prefix_filter_bytes
                    .saturating_add(t.prefix_filter_bytes());
                l.prefix_expected_fpr_sum += h.kind.expected_fpr(h.m, h.n, h.k);
            }
            if let RangeFilterState::Valid(f) = t.range_filter() {
                l.range_filter_keys = l.range_filter_keys.saturating_add(f.keys());
                l.range_filter_bytes = l.range_filter_bytes.saturating_add(t.range_filter_bytes());
            }
        }
        if let Some(counted) = per_level.get(level) {
            l.add(counted);
        }
        total.add(&l);
        s.levels.push(l);
    }
    s.total = total;
    s
}

impl DbStats {
    /// Tables probed per get.
    pub fn tables_probed_per_get(&self) -> f64 {
        if self.gets == 0 {
            0.0
        } else {
            self.tables_probed as f64 / self.gets as f64
        }
    }

    /// Data-block reads by scans, per scan.
    pub fn scan_block_reads_per_scan(&self) -> f64 {
        if self.scans == 0 {
            0.0
        } else {
            self.total.scan_block_reads as f64 / self.scans as f64
        }
    }

    /// Data-block reads per get.
    pub fn data_block_reads_per_get(&self) -> f64 {
        if self.gets == 0 {
            0.0
        } else {
            self.total.data_block_reads as f64 / self.gets as f64
        }
    }
}
