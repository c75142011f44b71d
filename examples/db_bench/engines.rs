//! The three engines behind one trait (`Engine`), and how each is opened: configured alike
//! (the settings in `main.rs`'s module docs) or at its defaults (`--defaults`).

use std::path::Path;
use std::time::Duration;

use lsm_bloom::{Db, HugePages, Options};
use rocksdb::statistics::{StatsLevel, Ticker};

use crate::Args;

pub(crate) fn read_syscalls() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("syscr: ")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

pub(crate) trait Engine: Sync {
    fn name(&self) -> &'static str;
    fn put(&self, k: &[u8], v: &[u8]);
    fn get(&self, k: &[u8]) -> bool;
    fn settle(&self);
    fn compact_all(&self);
    fn tables_per_level(&self) -> Vec<u64>;
    /// Observed FPR over `keys` (all absent), measured in an untimed pass, if the engine
    /// reports one.
    fn observed_fpr(&self, keys: &[[u8; 16]]) -> Option<f64>;
    /// Data-block reads from the file so far (ours only).
    fn data_block_reads(&self) -> Option<u64> {
        None
    }
    /// Bytes of table files on disk.
    fn table_bytes(&self) -> u64;
    /// Looks a batch up with the engine's batched read (`None` if it has none): how many
    /// were found.
    fn multi_get(&self, _keys: &[[u8; 16]]) -> Option<usize> {
        None
    }
}

/// Ours' huge-page setting: every filter with `--ours-huge-pages`, else the default
/// (`HugePages::LevelsFrom`: at these sizes no level is large enough, so none).
fn huge_pages(args: &Args) -> HugePages {
    if args.ours_huge_pages {
        HugePages::Always
    } else {
        HugePages::default()
    }
}

pub(crate) struct Ours(pub(crate) Db);

impl Ours {
    /// Filter "maybe" answers for keys that were not there, so far: each costs a data-block
    /// read (or a block-cache hit), whatever the cache holds.
    pub(crate) fn false_positives(&self) -> u64 {
        let t = self.0.stats().total;
        t.filter_positive - t.filter_true_positive
    }
}

impl Engine for Ours {
    fn name(&self) -> &'static str {
        "lsm-bloom"
    }
    fn put(&self, k: &[u8], v: &[u8]) {
        self.0.put(k, v).expect("put");
    }
    fn get(&self, k: &[u8]) -> bool {
        self.0.get(k).expect("get").is_some()
    }
    fn settle(&self) {
        self.0.flush().expect("flush");
        self.0.wait_for_compactions().expect("compactions");
    }
    fn compact_all(&self) {
        self.0.compact().expect("compact");
    }
    fn tables_per_level(&self) -> Vec<u64> {
        self.0.stats().levels.iter().map(|l| l.tables).collect()
    }
    fn observed_fpr(&self, keys: &[[u8; 16]]) -> Option<f64> {
        let before = self.0.stats().total;
        for k in keys {
            assert!(!self.get(k));
        }
        let after = self.0.stats().total;
        let checks = after.filter_checks - before.filter_checks;
        Some((after.filter_positive - before.filter_positive) as f64 / checks.max(1) as f64)
    }
    fn data_block_reads(&self) -> Option<u64> {
        Some(self.0.stats().total.data_block_reads)
    }
    fn table_bytes(&self) -> u64 {
        self.0.stats().total.table_bytes
    }
    fn multi_get(&self, keys: &[[u8; 16]]) -> Option<usize> {
        let found = self.0.multi_get(keys);
        Some(
            found
                .into_iter()
                .filter(|r| matches!(r, Ok(Some(_))))
                .count(),
        )
    }
}

pub(crate) struct Rocks {
    pub(crate) db: rocksdb::DB,
    pub(crate) opts: rocksdb::Options,
}

impl Engine for Rocks {
    fn name(&self) -> &'static str {
        "rocksdb"
    }
    fn put(&self, k: &[u8], v: &[u8]) {
        self.db.put(k, v).expect("put");
    }
    fn get(&self, k: &[u8]) -> bool {
        self.db.get_pinned(k).expect("get").is_some()
    }
    fn settle(&self) {
        self.db.flush().expect("flush");
        let busy = |p: &str| self.db.property_int_value(p).ok().flatten().unwrap_or(0);
        while busy("rocksdb.compaction-pending")
            + busy("rocksdb.num-running-compactions")
            + busy("rocksdb.num-running-flushes")
            > 0
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    fn compact_all(&self) {
        self.db.compact_range(None::<&[u8]>, None::<&[u8]>);
        self.settle();
    }
    fn tables_per_level(&self) -> Vec<u64> {
        (0..7)
            .map(|l| {
                self.db
                    .property_int_value(&format!("rocksdb.num-files-at-level{l}"))
                    .ok()
                    .flatten()
                    .unwrap_or(0)
            })
            .collect()
    }
    fn observed_fpr(&self, keys: &[[u8; 16]]) -> Option<f64> {
        let t = |x| self.opts.get_ticker_count(x);
        self.opts
            .set_statistics_level(StatsLevel::ExceptDetailedTimers);
        let (u0, p0) = (
            t(Ticker::BloomFilterUseful),
            t(Ticker::BloomFilterFullPositive),
        );
        for k in keys {
            assert!(!self.get(k));
        }
        let (u1, p1) = (
            t(Ticker::BloomFilterUseful),
            t(Ticker::BloomFilterFullPositive),
        );
        self.opts.set_statistics_level(StatsLevel::DisableAll);
        Some((p1 - p0) as f64 / ((u1 - u0) + (p1 - p0)).max(1) as f64)
    }
    fn table_bytes(&self) -> u64 {
        self.db
            .property_int_value("rocksdb.total-sst-files-size")
            .ok()
            .flatten()
            .unwrap_or(0)
    }
    fn multi_get(&self, keys: &[[u8; 16]]) -> Option<usize> {
        let cf = self.db.cf_handle(rocksdb::DEFAULT_COLUMN_FAMILY_NAME)?;
        let found = self.db.batched_multi_get_cf(cf, keys.iter(), false);
        Some(
            found
                .into_iter()
                .filter(|r| matches!(r, Ok(Some(_))))
                .count(),
        )
    }
}

pub(crate) struct Fjall {
    pub(crate) db: fjall::Database,
    pub(crate) ks: fjall::Keyspace,
}

impl Engine for Fjall {
    fn name(&self) -> &'static str {
        "fjall"
    }
    fn put(&self, k: &[u8], v: &[u8]) {
        self.ks.insert(k, v).expect("put");
    }
    fn get(&self, k: &[u8]) -> bool {
        self.ks.get(k).expect("get").is_some()
    }
    fn settle(&self) {
        self.ks.rotate_memtable_and_wait().expect("flush");
        // Compactions are scheduled after flushes: settled once nothing ran for 300 ms.
        let mut quiet = 0;
        while quiet < 6 {
            std::thread::sleep(Duration::from_millis(50));
            if self.db.outstanding_flushes() == 0 && self.db.active_compactions() == 0 {
                quiet += 1;
            } else {
                quiet = 0;
            }
        }
    }
    fn compact_all(&self) {
        self.ks.major_compact().expect("compact");
        self.settle();
    }
    fn tables_per_level(&self) -> Vec<u64> {
        let (l0, all) = (self.ks.l0_table_count(), self.ks.table_count());
        vec![l0 as u64, (all - l0) as u64]
    }
    fn observed_fpr(&self, _keys: &[[u8; 16]]) -> Option<f64> {
        None // fjall reports filter counts only with its `metrics` feature
    }
    fn table_bytes(&self) -> u64 {
        self.ks.disk_space()
    }
}

pub(crate) fn open_ours(dir: &Path, args: &Args) -> Ours {
    Ours(Db::open(dir, ours_options(args)).expect("open lsm-bloom"))
}

pub(crate) fn ours_options(args: &Args) -> Options {
    let budget = args.ours_budget.map(|bits| {
        let budget = lsm_bloom::FilterBudget::bits_per_key(bits);
        match args.ours_budget_ribbon {
            true => budget,
            false => budget.with_kind(lsm_bloom::FilterKind::Blocked),
        }
    });
    if args.defaults {
        return Options::default()
            .with_filters(budget.map(lsm_bloom::Filters::Budget))
            .with_mmap_reads(args.ours_mmap || args.mmap)
            .with_filter_huge_pages(huge_pages(args));
    }
    Options::default()
        .with_filters(Some(budget.map_or(
            lsm_bloom::Filters::fixed(lsm_bloom::FilterPolicy::default()),
            lsm_bloom::Filters::Budget,
        )))
        .with_memtable_size((args.memtable_mib << 20) as usize)
        .with_block_size(4096)
        .with_target_file_size(64 << 20)
        .with_level1_max_bytes(256 << 20)
        .with_size_ratio(10)
        .with_l0_compaction_trigger(4)
        .with_block_cache_bytes(args.block_cache_mib << 20)
        .with_compression(Some(if args.lz4() {
            lsm_bloom::Compression::Lz4.into()
        } else {
            lsm_bloom::Compressions::NONE
        }))
        .with_mmap_reads(args.ours_mmap || args.mmap)
        .with_filter_huge_pages(huge_pages(args))
}

/// RocksDB as in the module docs; `tweak` may change the options before the open.
pub(crate) fn open_rocks(
    dir: &Path,
    args: &Args,
    tweak: impl FnOnce(&mut rocksdb::Options, &mut rocksdb::BlockBasedOptions),
) -> Rocks {
    let opts = rocks_options(args, tweak);
    // The default column family named, so that `cf_handle` finds it for the batched read,
    // with these options (`DB::open_cf` would give it `Options::default()`: no filter).
    let default =
        rocksdb::ColumnFamilyDescriptor::new(rocksdb::DEFAULT_COLUMN_FAMILY_NAME, opts.clone());
    let db = rocksdb::DB::open_cf_descriptors(&opts, dir, [default]).expect("open rocksdb");
    Rocks { db, opts }
}

/// The options `open_rocks` opens with.
pub(crate) fn rocks_options(
    args: &Args,
    tweak: impl FnOnce(&mut rocksdb::Options, &mut rocksdb::BlockBasedOptions),
) -> rocksdb::Options {
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    if args.defaults {
        let mut opts = rocksdb::Options::default();
        tweak(&mut opts, &mut table);
        opts.create_if_missing(true);
        opts.set_block_based_table_factory(&table);
        opts.set_allow_mmap_reads(args.mmap);
        opts.enable_statistics();
        opts.set_statistics_level(StatsLevel::DisableAll);
        return opts;
    }
    table.set_block_size(4096);
    table.set_cache_index_and_filter_blocks(false); // held by the table readers, in memory
    table.set_block_cache(&rocksdb::Cache::new_lru_cache(
        (args.block_cache_mib << 20) as usize,
    ));
    let mut opts = rocksdb::Options::default();
    tweak(&mut opts, &mut table);
    opts.create_if_missing(true);
    opts.set_block_based_table_factory(&table);
    let codec = if args.lz4() {
        rocksdb::DBCompressionType::Lz4
    } else {
        rocksdb::DBCompressionType::None
    };
    opts.set_compression_type(codec);
    opts.set_bottommost_compression_type(codec);
    opts.set_write_buffer_size((args.memtable_mib << 20) as usize);
    opts.set_target_file_size_base(64 << 20);
    opts.set_max_bytes_for_level_base(256 << 20);
    opts.set_max_bytes_for_level_multiplier(10.0);
    opts.set_level_zero_file_num_compaction_trigger(4);
    opts.set_allow_mmap_reads(args.mmap);
    opts.enable_statistics();
    opts.set_statistics_level(StatsLevel::DisableAll);
    opts
}

pub(crate) fn open_fjall(dir: &Path, args: &Args) -> Fjall {
    let builder = fjall::Database::builder(dir);
    let builder = match args.defaults {
        true => builder,
        false => builder.cache_size(args.block_cache_mib << 20),
    };
    let db = builder.open().expect("open fjall");
    let ks = db
        .keyspace("bench", || fjall_keyspace_options(args))
        .expect("fjall keyspace");
    Fjall { db, ks }
}

/// The options of a fjall keyspace (the module docs' settings; fjall's defaults with
/// `--defaults`).
pub(crate) fn fjall_keyspace_options(args: &Args) -> fjall::KeyspaceCreateOptions {
    use fjall::config::{
        BlockSizePolicy, BloomConstructionPolicy, CompressionPolicy, FilterPolicy,
        FilterPolicyEntry, PartitioningPolicy, PinningPolicy,
    };
    if args.defaults {
        return fjall::KeyspaceCreateOptions::default();
    }
    let codec = if args.lz4() {
        fjall::CompressionType::Lz4
    } else {
        fjall::CompressionType::None
    };
    fjall::KeyspaceCreateOptions::default()
        .max_memtable_size(args.memtable_mib << 20)
        .data_block_size_policy(BlockSizePolicy::all(4096))
        .data_block_compression_policy(CompressionPolicy::all(codec))
        .filter_policy(FilterPolicy::all(FilterPolicyEntry::Bloom(
            BloomConstructionPolicy::BitsPerKey(10.0),
        )))
        .filter_block_pinning_policy(PinningPolicy::all(true))
        .index_block_pinning_policy(PinningPolicy::all(true))
        .filter_block_partitioning_policy(PartitioningPolicy::all(false))
        .index_block_partitioning_policy(PartitioningPolicy::all(false))
}
