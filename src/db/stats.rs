//! Counters kept by the store, RocksDB-style: per level for the read path, global for the
//! rest. Updated with relaxed atomics on the hot path; `Db::stats()` takes a snapshot.
//!
//! Filter counters follow RocksDB's tickers: `filter_checks` counts tables whose key range
//! held the key and whose filter was consulted; `filter_useful` the checks that said "absent"
//! (the table was skipped without a read); `filter_positive` the rest; `filter_true_positive`
//! the positives where the key really was in the table. Observed FPR =
//! (positive − true positive) / (checks − true positive).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

/// Levels the store uses (0..MAX_LEVELS).
pub const MAX_LEVELS: usize = 7;

#[derive(Default)]
pub(crate) struct LevelCounters {
    pub(crate) filter_checks: AtomicU64,
    pub(crate) filter_useful: AtomicU64,
    pub(crate) filter_positive: AtomicU64,
    pub(crate) filter_true_positive: AtomicU64,
    pub(crate) unfiltered_probes: AtomicU64,
    pub(crate) data_block_reads: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) levels: [LevelCounters; MAX_LEVELS],
    pub(crate) gets: AtomicU64,
    pub(crate) tables_probed: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) compaction_bytes_read: AtomicU64,
    pub(crate) compaction_bytes_written: AtomicU64,
    pub(crate) filter_validation_failures: AtomicU64,
    pub(crate) wal_bytes_dropped: AtomicU64,
    pub(crate) write_stalls: AtomicU64,
}

pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

/// Read-path figures of one level (or of all levels, in `DbStats::total`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LevelStats {
    /// Level number (`None` for the total).
    pub level: Option<usize>,
    /// Live tables.
    pub tables: u64,
    /// Bytes of table files.
    pub table_bytes: u64,
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
    /// Data blocks read from table files by `get`.
    pub data_block_reads: u64,
    /// Bytes read from table files by `get`.
    pub bytes_read: u64,
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

    /// Bits of filter per key covered.
    pub fn filter_bits_per_key(&self) -> f64 {
        if self.filter_keys == 0 {
            0.0
        } else {
            self.filter_bytes as f64 * 8.0 / self.filter_keys as f64
        }
    }

    pub(crate) fn add_counters(&mut self, c: &LevelCounters) {
        self.filter_checks += c.filter_checks.load(Relaxed);
        self.filter_useful += c.filter_useful.load(Relaxed);
        self.filter_positive += c.filter_positive.load(Relaxed);
        self.filter_true_positive += c.filter_true_positive.load(Relaxed);
        self.unfiltered_probes += c.unfiltered_probes.load(Relaxed);
        self.data_block_reads += c.data_block_reads.load(Relaxed);
        self.bytes_read += c.bytes_read.load(Relaxed);
    }

    pub(crate) fn add(&mut self, o: &LevelStats) {
        self.tables += o.tables;
        self.table_bytes += o.table_bytes;
        self.filter_keys += o.filter_keys;
        self.filter_bytes += o.filter_bytes;
        self.expected_fpr_sum += o.expected_fpr_sum;
        self.filter_checks += o.filter_checks;
        self.filter_useful += o.filter_useful;
        self.filter_positive += o.filter_positive;
        self.filter_true_positive += o.filter_true_positive;
        self.unfiltered_probes += o.unfiltered_probes;
        self.data_block_reads += o.data_block_reads;
        self.bytes_read += o.bytes_read;
    }
}

/// A snapshot of the store's counters (`Db::stats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DbStats {
    /// One entry per level, 0 first.
    pub levels: Vec<LevelStats>,
    /// All levels added up.
    pub total: LevelStats,
    /// `get` calls.
    pub gets: u64,
    /// Tables whose key range held the key, over all gets.
    pub tables_probed: u64,
    /// Memtable flushes.
    pub flushes: u64,
    /// Compactions run.
    pub compactions: u64,
    /// Bytes compactions read.
    pub compaction_bytes_read: u64,
    /// Bytes compactions wrote.
    pub compaction_bytes_written: u64,
    /// Tables opened whose filter block failed validation (read without a filter).
    pub filter_validation_failures: u64,
    /// Bytes of torn WAL tail dropped at open.
    pub wal_bytes_dropped: u64,
    /// Writes that waited for a flush or compaction to catch up.
    pub write_stalls: u64,
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

    /// Data-block reads per get.
    pub fn data_block_reads_per_get(&self) -> f64 {
        if self.gets == 0 {
            0.0
        } else {
            self.total.data_block_reads as f64 / self.gets as f64
        }
    }
}
