//! `Options`: how the store behaves, with defaults that suit most services, and their
//! validation (`Db::open` refuses out-of-range options with `Error::InvalidArgument`).

use std::sync::Arc;

use super::filters::{Compressions, Filters, PrefixFilters, RangeFilters, TableFilters};
use super::version::MAX_LEVELS;
use crate::error::{Error, Result};
use crate::expiry::{Clock, SystemClock};
use crate::filter::RangePolicy;
use crate::fs::{FileSystem, StdFs};
use crate::prefix::PrefixExtractor;
use crate::table::{Compression, TableBuilderOptions, TABLE_VERSION};

/// Which open tables hold their filter blocks in huge-page memory (`Options::filter_huge_pages`,
/// `crate::huge_pages`).
///
/// Huge pages pay once the filters a get probes span many times the TLB's reach (~8 MiB of
/// 4 KiB pages here): measured at 10^8 keys (117 MiB of filters) an absent get took 0.83–0.90×
/// the time with ordinary pages; at 10^7 (11.5 MiB) and 10^6 nothing changed (README, "Huge
/// pages for filters"). The cost is memory granularity: the kernel backs the arena in 2 MiB
/// pages, and a block freed by a compaction is held until the next table reuses it or its
/// 32 MiB region empties. Hence the default gives them only to the levels that hold most of a
/// large store's filters: a level allowed a gigabyte or more holds, once full, ~10 MiB of
/// filters and up (10 bits/key, ~120-byte entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HugePages {
    /// Every filter on the heap, in ordinary pages.
    Never,
    /// Every table's filter in huge-page memory.
    Always,
    /// The filters of tables in levels whose size limit (`level1_max_bytes ×
    /// size_ratio^(level − 1)`) is at least this many bytes; level 0 and smaller levels on the
    /// heap.
    LevelsFrom(u64),
}

impl Default for HugePages {
    /// `LevelsFrom(1 GiB)`: with the other defaults, level 3 (6.4 GiB) and deeper, so a store
    /// starts using huge pages once it holds more than ~700 MiB of tables.
    fn default() -> Self {
        HugePages::LevelsFrom(1 << 30)
    }
}

/// What `Db::open` does with a write-ahead log that is damaged (README "What survives what",
/// FORMAT.md §2 "Recovery rules").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WalRecovery {
    /// Recover to the last intact record before the first damaged or incomplete one, across
    /// all logs in order: everything after that point (the rest of that log and every later
    /// log) is dropped, never a later write kept while an earlier one is lost. What was
    /// dropped is in `Db::recovery()` and `DbStats::wal_bytes_dropped`. RocksDB's
    /// `kPointInTimeRecovery`.
    #[default]
    PointInTime,
    /// Tolerate only a torn tail — damage that runs to the end of the newest log with data,
    /// with no intact record after it, which is what a crash in the middle of an append
    /// leaves — and refuse to open
    /// (`Error::Corruption`) on damage anywhere else. RocksDB's
    /// `kTolerateCorruptedTailRecords`.
    TornTailOnly,
}

/// How the store behaves. `Options::default()` suits most services; change what a service
/// needs with the `with_*` setters (or by assigning the fields of a mutable value):
///
/// ```
/// use lsm_bloom::Options;
/// let opts = Options::default()
///     .with_memtable_size(64 << 20)
///     .with_sync_writes(true);
/// # let _ = opts;
/// ```
///
/// `#[non_exhaustive]`: a new option is not a breaking change, so the struct cannot be
/// written as a literal outside this crate.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// Create the database if the directory holds none (default true).
    pub create_if_missing: bool,
    /// Refuse to open a directory that already holds a database (default false).
    pub error_if_exists: bool,
    /// What to do with a damaged write-ahead log at open (default `PointInTime`).
    pub wal_recovery: WalRecovery,
    /// Memtable size that triggers a flush, in bytes (default 8 MiB). Each entry is charged
    /// its key, its value and 64 bytes; the memory it holds is more (the entry in the log,
    /// two allocations, the hash index): measured, 248 bytes of resident memory per entry of
    /// a 16-byte key and a 100-byte value, which are charged 180.
    pub memtable_size: usize,
    /// Target data block size in bytes (default 4 KiB).
    pub block_size: usize,
    /// Which filters new tables get (`Filters`; default a budget of 10 bits/key on average,
    /// planned per level). `None`: the setting the store's options record holds (FORMAT.md
    /// §6), or the default for a new store; `Some`, given: used, and recorded for the next
    /// open (`Db::recovery().options` says what was kept or changed). So a store written
    /// with a budget or a prefix rule keeps them when reopened with `Options::default()`,
    /// and `Some(Filters::default())` returns to the default on purpose.
    pub filters: Option<Filters>,
    /// Prefix filters (`PrefixFilters`; default none). `None` and `Some` as for `filters`.
    pub prefix_filters: Option<PrefixFilters>,
    /// Range filters (`RangeFilters`; default none): each new table gets one, and a scan of
    /// a short range skips every table whose range filter says the range is empty. Needs
    /// `table_format_version` 4. `None` and `Some` as for `filters`.
    pub range_filters: Option<RangeFilters>,
    /// How data blocks of new tables are compressed (`Compressions`: a codec, with
    /// per-level overrides; default none; `Compression::Lz4` roughly halves text-like values
    /// on disk). `None` and `Some` as for `filters`.
    pub compression: Option<Compressions>,
    /// Table format version new tables are written in (default 6, the newest). 5 keeps the
    /// tables readable by builds before range deletes (none then), 4 by builds before expiry
    /// (no expiring puts then), 3 by builds before range filters (none then), 2 by builds
    /// before compression (no compression then).
    pub table_format_version: u32,
    /// `fdatasync` the WAL on every write (default false: a write survives a process crash,
    /// not a power loss).
    pub sync_writes: bool,
    /// Size ratio between adjacent levels (default 10).
    pub size_ratio: u32,
    /// Bytes level 1 may hold before it is compacted into level 2 (default 64 MiB).
    pub level1_max_bytes: u64,
    /// Level-0 table count that triggers a compaction (default 4).
    pub l0_compaction_trigger: usize,
    /// Level-0 table count at which writes start being slowed down (default 12): each group
    /// commit then waits in proportion to its bytes at a rate that starts at
    /// `delayed_write_rate` and falls by a fifth with each further level-0 table, so that
    /// writers ease off before they meet the stop (RocksDB's `level0_slowdown_writes_trigger`).
    /// At or above `l0_stop_writes_trigger`: no slowdown, only the stop.
    pub l0_slowdown_writes_trigger: usize,
    /// Level-0 table count at which writes wait for compaction (default 20).
    pub l0_stop_writes_trigger: usize,
    /// Bytes per second writes may go at once level 0 reaches `l0_slowdown_writes_trigger`
    /// (default 16 MiB/s, RocksDB's `delayed_write_rate`); lower still as level 0 grows.
    pub delayed_write_rate: u64,
    /// Compaction debt at which writes start being slowed down (default 64 GiB, RocksDB's
    /// `soft_pending_compaction_bytes_limit`; `None`: never). The debt is what compactions
    /// must still write to bring every level under its limit (`DbStats::
    /// pending_compaction_bytes`); past this, group commits wait as they do at
    /// `l0_slowdown_writes_trigger`, the rate falling as the debt grows and rising as it
    /// shrinks. Level 0 can stay under its triggers while deeper levels fall behind: this
    /// catches that. At or above `hard_pending_compaction_bytes_limit`: only the stop.
    pub soft_pending_compaction_bytes_limit: Option<u64>,
    /// Compaction debt at which writes wait for compaction outright (default 256 GiB,
    /// RocksDB's `hard_pending_compaction_bytes_limit`; `None`: never). Checked when a full
    /// memtable is retired, as `l0_stop_writes_trigger` is.
    pub hard_pending_compaction_bytes_limit: Option<u64>,
    /// Once no write has come for this long, level 0 is compacted into level 1 whatever its
    /// table count, and `Db::wait_for_compactions` waits for that too (default 1 s; `None`:
    /// level 0 waits for `l0_compaction_trigger`). Every level-0 table costs each absent get a
    /// filter probe and each short scan a block; a store that has stopped taking writes should
    /// not keep paying for them.
    pub idle_compaction_after: Option<std::time::Duration>,
    /// Expired values leave the disk within about this long of expiring (default 10 minutes;
    /// `None`: only as compactions happen to reach them): a table holding a put that expired
    /// longer ago than this is rewritten, the expired entries dropped (docs/expiry.md). The
    /// compaction threads look whenever they wake (`idle_compaction_after`).
    pub expired_reclaim_after: Option<std::time::Duration>,
    /// A table whose expired share of entries reaches this (estimated from its expiry span)
    /// is rewritten too, however recently they expired (default 0.5; `None`: never; at most
    /// 1, above 0).
    pub expired_share_to_reclaim: Option<f64>,
    /// While the tables' estimated expired bytes pass this share of their estimated live bytes,
    /// the table with the largest estimated expired share is rewritten, then the next (default
    /// 0.05; `None`: no such bound; above 0). Estimated from each table's expiry span, as
    /// `expired_share_to_reclaim` is: docs/expiry.md gives the disk it kept and the writes it
    /// cost.
    pub expired_ratio_to_reclaim: Option<f64>,
    /// Threads that run compactions (at least 1; by default half the cores the process may
    /// use, from 1 to 4). Flushes have a thread of their own besides, so a memtable is written
    /// out while compactions run; compactions of disjoint key ranges, or of different levels,
    /// run at once (`running.rs`). Each compaction also finishes its output tables on a second
    /// thread. Measured on 2 cores under a sustained write load (one writer, one reader, 20 s,
    /// 2×10^6 keys): with 1 compaction thread the longest write took 16–19 ms and the longest
    /// get 12 ms, with 2 compaction threads 22–25 ms and 20 ms — the threads contend for the
    /// cores with the writer and the reader — while the write rate stayed within noise.
    pub background_threads: usize,
    /// Target size of compaction output tables (default 8 MiB).
    pub target_file_size: u64,
    /// Immutable memtables waiting for a flush before writes wait (default 4); from one
    /// short of it (where it is at least 3) writes are slowed down instead (`throttle.rs`).
    /// Under a sustained load on 2 cores (2 writers, 2 readers, `db_bench --workload
    /// latency`) a flush of an 8 MiB memtable took 91 ms at the median and up to 212 ms
    /// while the next one filled in ~160 ms: with 2, writes stopped 2–27 times in 20 s, the
    /// longest for 35–123 ms; with 4, 0–1 times (17 ms). Each costs a memtable of memory
    /// only while flushes are behind.
    pub max_immutable_memtables: usize,
    /// Bytes of verified, decoded data blocks kept for `get` (default 32 MiB; 0 for none).
    /// 32 MiB is what recent RocksDB and fjall 3 give a store by default, so the three
    /// compare alike untuned; it is small next to the page cache, which still holds the files:
    /// the cache saves the system call, checksum and decode on a hit, not a disk read. Filters
    /// and indexes are not charged to it (they live with each open table). A block is cached
    /// on its second miss within about a cache-full of misses; its first is read into a
    /// reused buffer and not kept (`table/doorkeeper.rs`), so blocks read once do not push
    /// out blocks read again.
    pub block_cache_bytes: u64,
    /// Read tables through memory maps (default false), as RocksDB's `allow_mmap_reads`: a
    /// get on a table stored uncompressed looks its block up in the mapped file in place —
    /// no system call, no copy, no block cache (the page cache is the cache; the checksum is
    /// checked on every read) — and a compressed table's blocks are read out of the map.
    /// The trade: with a map, a read the device fails, or a table file another process
    /// truncates, ends the process with `SIGBUS` instead of returning `Error::Io` (the store
    /// itself never rewrites or truncates a table). Measured in `db_bench --ours-mmap`.
    pub mmap_reads: bool,
    /// Which open tables hold their filter blocks in memory the kernel can back with 2 MiB
    /// pages (`crate::huge_pages`; default `HugePages::LevelsFrom(1 GiB)`): with the filters
    /// spread over far more 4 KiB pages than the TLB covers, most filter probes of an absent
    /// get pay a page walk on top of the cache miss. Linux with transparent huge pages in
    /// `madvise` or `always` mode (`/sys/kernel/mm/transparent_hugepage/enabled`); elsewhere,
    /// or if the memory cannot be mapped, the filters stay in ordinary memory. Measured in
    /// `db_bench --workload scale --huge-pages-ab` and `examples/absent_ab.rs` (README, "Huge
    /// pages for filters").
    pub filter_huge_pages: HugePages,
    /// The file system the write path uses (default the real one; tests pass a
    /// [`crate::fs::FaultyFs`] to make operations fail).
    pub fs: Arc<dyn FileSystem>,
    /// The clock that decides when an expiring key expires (default the system's; tests pass
    /// a [`crate::ManualClock`]). Read at most once per read, and never by a store that has
    /// held no expiring entry (docs/expiry.md).
    pub clock: Arc<dyn Clock>,
    /// A keyspace's default time to live in ms, laid over the store's options by
    /// `KeyspaceOptions::apply` (the store's own options have none: `None`).
    pub(crate) keyspace_ttl: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            error_if_exists: false,
            wal_recovery: WalRecovery::PointInTime,
            memtable_size: 8 << 20,
            block_size: 4096,
            filters: None,
            prefix_filters: None,
            range_filters: None,
            compression: None,
            table_format_version: TABLE_VERSION,
            sync_writes: false,
            size_ratio: 10,
            level1_max_bytes: 64 << 20,
            l0_compaction_trigger: 4,
            l0_slowdown_writes_trigger: 12,
            l0_stop_writes_trigger: 20,
            delayed_write_rate: 16 << 20,
            soft_pending_compaction_bytes_limit: Some(64 << 30),
            hard_pending_compaction_bytes_limit: Some(256 << 30),
            background_threads: std::thread::available_parallelism()
                .map_or(1, |n| n.get() / 2)
                .clamp(1, 4),
            idle_compaction_after: Some(std::time::Duration::from_secs(1)),
            expired_reclaim_after: Some(std::time::Duration::from_secs(600)),
            expired_share_to_reclaim: Some(0.5),
            expired_ratio_to_reclaim: Some(0.05),
            target_file_size: 8 << 20,
            max_immutable_memtables: 4,
            block_cache_bytes: 32 << 20,
            mmap_reads: false,
            filter_huge_pages: HugePages::default(),
            fs: Arc::new(StdFs),
            clock: Arc::new(SystemClock),
            keyspace_ttl: None,
        }
    }
}

setters!(Options {
    with_create_if_missing => create_if_missing: bool,
    with_error_if_exists => error_if_exists: bool,
    with_wal_recovery => wal_recovery: WalRecovery,
    with_memtable_size => memtable_size: usize,
    with_block_size => block_size: usize,
    with_filters => filters: Option<Filters>,
    with_prefix_filters => prefix_filters: Option<PrefixFilters>,
    with_range_filters => range_filters: Option<RangeFilters>,
    with_compression => compression: Option<Compressions>,
    with_table_format_version => table_format_version: u32,
    with_sync_writes => sync_writes: bool,
    with_size_ratio => size_ratio: u32,
    with_level1_max_bytes => level1_max_bytes: u64,
    with_l0_compaction_trigger => l0_compaction_trigger: usize,
    with_l0_slowdown_writes_trigger => l0_slowdown_writes_trigger: usize,
    with_l0_stop_writes_trigger => l0_stop_writes_trigger: usize,
    with_delayed_write_rate => delayed_write_rate: u64,
    with_soft_pending_compaction_bytes_limit => soft_pending_compaction_bytes_limit: Option<u64>,
    with_hard_pending_compaction_bytes_limit => hard_pending_compaction_bytes_limit: Option<u64>,
    with_idle_compaction_after => idle_compaction_after: Option<std::time::Duration>,
    with_expired_reclaim_after => expired_reclaim_after: Option<std::time::Duration>,
    with_expired_share_to_reclaim => expired_share_to_reclaim: Option<f64>,
    with_expired_ratio_to_reclaim => expired_ratio_to_reclaim: Option<f64>,
    with_background_threads => background_threads: usize,
    with_target_file_size => target_file_size: u64,
    with_max_immutable_memtables => max_immutable_memtables: usize,
    with_block_cache_bytes => block_cache_bytes: u64,
    with_mmap_reads => mmap_reads: bool,
    with_filter_huge_pages => filter_huge_pages: HugePages,
    with_fs => fs: Arc<dyn FileSystem>,
    with_clock => clock: Arc<dyn Clock>,
});

/// `Filters::default()`, for `Options::filters` to lend.
static DEFAULT_FILTERS: Filters = Filters::DEFAULT;
/// `Compressions::default()`, for `Options::compressions` to lend.
static NO_COMPRESSION: Compressions = Compressions::NONE;

impl Options {
    /// The filters new tables get: as given, or the default when not (`Db::open` resolves
    /// `None` from the options record first).
    pub fn filters(&self) -> &Filters {
        self.filters.as_ref().unwrap_or(&DEFAULT_FILTERS)
    }

    /// The prefix filters new tables get (as `filters`).
    pub fn prefix_filters(&self) -> PrefixFilters {
        self.prefix_filters.unwrap_or_default()
    }

    /// The range filters new tables get (as `filters`).
    pub fn range_filters(&self) -> RangeFilters {
        self.range_filters.unwrap_or_default()
    }

    /// The compression of new tables (as `filters`).
    pub fn compressions(&self) -> &Compressions {
        self.compression.as_ref().unwrap_or(&NO_COMPRESSION)
    }

    /// The prefix rule of new tables' prefix filters, if they have any.
    pub(crate) fn prefix_rule(&self) -> Option<PrefixExtractor> {
        self.prefix_filters().rule()
    }

    /// The filters of a table written to `level` without a budget: the level's policy for
    /// the whole-key filter (unless prefix filters replace it) and for the prefix filter
    /// (with a prefix rule), and the fixed range policy.
    pub(crate) fn filters_for_level(&self, level: usize) -> TableFilters {
        let policy = self.filters().policy_for_level(level);
        let prefix = self.prefix_filters();
        TableFilters {
            key: policy.filter(|_| prefix.whole_key_filters()),
            prefix: policy.filter(|_| prefix.rule().is_some()),
            range: self.range_filters().policy(),
        }
    }

    /// How tables of `level` are opened (`mmap_reads`, `filter_huge_pages`).
    pub(crate) fn table_open(&self, level: usize) -> crate::table::TableOpen {
        use crate::table::{FilterPages, TableOpen, TableReads};
        let huge = match self.filter_huge_pages {
            HugePages::Never => false,
            HugePages::Always => true,
            HugePages::LevelsFrom(bytes) => {
                level > 0 && self.level_max_bytes(level) >= bytes as f64
            }
        };
        TableOpen {
            reads: match self.mmap_reads {
                true => TableReads::Mmap,
                false => TableReads::Pread,
            },
            filters: match huge {
                true => FilterPages::Huge,
                false => FilterPages::Heap,
            },
        }
    }

    /// The size level `level` (1 or deeper) is kept under: `level1_max_bytes ×
    /// size_ratio^(level − 1)`.
    pub(crate) fn level_max_bytes(&self, level: usize) -> f64 {
        self.level1_max_bytes as f64 * (self.size_ratio as f64).powi(level as i32 - 1)
    }

    /// How to write a table for `level` with `filters`.
    pub(crate) fn table_options(&self, level: u32, filters: TableFilters) -> TableBuilderOptions {
        TableBuilderOptions {
            block_size: self.block_size,
            filter: filters.key.or(filters.prefix),
            level,
            prefix_extractor: self.prefix_rule().filter(|_| filters.prefix.is_some()),
            prefix_filter_policy: filters.prefix,
            whole_key_filter: filters.key.is_some(),
            compression: self.compression_for_level(level as usize),
            range_filter: filters.range,
            format_version: self.table_format_version,
        }
    }

    /// The compression of tables written to `level`.
    pub fn compression_for_level(&self, level: usize) -> Compression {
        self.compressions().for_level(level)
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |s: &str| Err(Error::InvalidArgument(s.to_string()));
        if self.memtable_size < 1024 {
            return bad("memtable_size must be at least 1024 bytes");
        }
        if !(64..=1 << 24).contains(&self.block_size) {
            return bad("block_size must be between 64 bytes and 16 MiB");
        }
        if self.size_ratio < 2 {
            return bad("size_ratio must be at least 2");
        }
        if self
            .expired_share_to_reclaim
            .is_some_and(|s| !(s > 0.0 && s <= 1.0))
        {
            return bad("expired_share_to_reclaim must be above 0 and at most 1");
        }
        if self
            .expired_ratio_to_reclaim
            .is_some_and(|r| r.is_nan() || r <= 0.0)
        {
            return bad("expired_ratio_to_reclaim must be above 0");
        }
        if self.l0_compaction_trigger == 0
            || self.l0_stop_writes_trigger <= self.l0_compaction_trigger
        {
            return bad("need 0 < l0_compaction_trigger < l0_stop_writes_trigger");
        }
        if self.delayed_write_rate < 1024 {
            return bad("delayed_write_rate must be at least 1024 bytes per second");
        }
        if self.soft_pending_compaction_bytes_limit == Some(0)
            || self.hard_pending_compaction_bytes_limit == Some(0)
        {
            return bad("pending compaction bytes limits must be positive (None turns one off)");
        }
        if !(1..=64).contains(&self.background_threads) {
            return bad("background_threads must be between 1 and 64");
        }
        if self.max_immutable_memtables == 0
            || self.target_file_size < 1024
            || self.level1_max_bytes < 1024
        {
            return bad(
                "max_immutable_memtables, target_file_size and level1_max_bytes must be positive",
            );
        }
        match self.filters() {
            Filters::Budget(b) => b.validate()?,
            Filters::Fixed { policy, per_level } => {
                if let Some(level) = per_level.keys().find(|l| **l >= MAX_LEVELS) {
                    return Err(Error::InvalidArgument(format!(
                        "filter override for level {level}, levels are 0..{MAX_LEVELS}"
                    )));
                }
                for p in std::iter::once(policy).chain(per_level.values().flatten()) {
                    p.validate()?;
                }
            }
            Filters::None => {}
        }
        if let Some(rule) = self.prefix_rule() {
            rule.validate().map_err(Error::InvalidArgument)?;
        }
        let compressions = self.compressions();
        for (level, c) in
            std::iter::once((&0, &compressions.default)).chain(&compressions.per_level)
        {
            if *level >= MAX_LEVELS {
                return Err(Error::InvalidArgument(format!(
                    "compression override for level {level}, levels are 0..{MAX_LEVELS}"
                )));
            }
            c.validate().map_err(Error::InvalidArgument)?;
            if *c != Compression::None && self.table_format_version < 3 {
                return Err(Error::InvalidArgument(format!(
                    "compression {c} needs table_format_version 3, not {}",
                    self.table_format_version
                )));
            }
        }
        if !(1..=TABLE_VERSION).contains(&self.table_format_version) {
            return Err(Error::InvalidArgument(format!(
                "table_format_version {} is not one this build writes (1..={TABLE_VERSION})",
                self.table_format_version
            )));
        }
        if self.table_format_version < 2 && self.prefix_rule().is_some() {
            return bad("prefix filters need table_format_version 2 or later");
        }
        if let RangeFilters::InBudget { max_range } = self.range_filters() {
            if self.filters().budget().is_none() {
                return bad("range filters in the budget (RangeFilters::InBudget) need a filter budget (Filters::Budget)");
            }
            // The policy's own check names what is wrong with the length.
            RangePolicy::bits_per_key(16.0, max_range)
                .map_err(|e| Error::InvalidArgument(format!("range filters in the budget: {e}")))?;
        }
        if self.table_format_version < 4 && self.range_filters().max_range().is_some() {
            return Err(Error::InvalidArgument(format!(
                "range filters need table_format_version 4, not {}",
                self.table_format_version
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::FilterPages;

    /// Which levels' filters go to huge-page memory under each `HugePages`.
    #[test]
    fn huge_pages_by_level() {
        let pages = |o: &Options| -> Vec<FilterPages> {
            (0..MAX_LEVELS).map(|l| o.table_open(l).filters).collect()
        };
        let (heap, huge) = (FilterPages::Heap, FilterPages::Huge);
        // The default: levels allowed 1 GiB or more; with 64 MiB × 10^(l-1), levels 3 and on.
        let o = Options::default();
        assert_eq!(pages(&o)[..5], [heap, heap, heap, huge, huge]);
        let o = Options {
            level1_max_bytes: 256 << 20,
            ..Options::default()
        };
        assert_eq!(pages(&o)[..4], [heap, heap, huge, huge]);
        let o = Options {
            filter_huge_pages: HugePages::Never,
            ..Options::default()
        };
        assert!(pages(&o).iter().all(|p| *p == heap));
        let o = Options {
            filter_huge_pages: HugePages::Always,
            ..Options::default()
        };
        assert!(pages(&o).iter().all(|p| *p == huge));
    }
}
