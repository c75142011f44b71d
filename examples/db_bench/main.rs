//! lsm-bloom against RocksDB and fjall: same keys, same process, interleaved rounds, at 1 and
//! more threads, medians reported.
//!
//! `cargo run --release --features rocksdb --example db_bench -- [--keys N] [--value-size B]
//!  [--ops M] [--rounds R] [--threads 1,2] [--block-cache-mib C] [--compression lz4]
//!  [--values mixed] [--json]`; prefix scans:
//! `... -- --workload prefix [--keys N] [--prefixes P] [--scans S]` (`prefix.rs`); RocksDB
//! with its own filters against lsm-bloom's inside it: `cargo run --release --features
//! rocksdb-plugin --example db_bench -- --workload rocksdb-filters` (`rocks_filters.rs`); our
//! absent lookups as the store grows, in units of memory latency: `... -- --workload scale
//! [--scale-keys 1000000,10000000,100000000]` (`scale.rs`).
//!
//! All three engines: 10 bits/key Bloom filters (ours: the default blocked filter; RocksDB
//! `set_bloom_filter(10.0, false)`, its default format_version; fjall `BitsPerKey(10.0)` on
//! every level), 4 KiB blocks, no compression (`--compression lz4`: LZ4 on every level of all
//! three; RocksDB's and ours compress a block only when it shrinks by an eighth, fjall's
//! always), the same memtable size, a write-ahead log
//! written to the OS on every write without fsync, index and filter blocks held in memory
//! (pinned, unpartitioned), the same block cache size (default 32 MiB, what RocksDB and fjall
//! give a store by default), leveled compaction with the same L0 trigger. RocksDB's statistics
//! object exists but is switched off (`StatsLevel::DisableAll`) in timed phases; its Bloom
//! tickers are read in a separate untimed pass.
//!
//! Phases: bulk load (T threads share the key range; then flush and wait until compactions
//! are done), then present gets, absent gets, a 90% absent / 10% present mix, and present and
//! absent keys through the batched reads in batches of 64 (`multi.rs`), first on the
//! shape each engine settled into, then after a full manual compaction of all three. Each
//! read round runs `--ops` gets split over T threads started together. Per phase and thread
//! count: ops/s per engine, ours / best peer, read syscalls per op (`/proc/self/io` `syscr`),
//! our data-block reads per op, observed FPR; and per engine the 2T/1T scaling.
//!
//! The overhead figure: in the same run, the absent phase's keys are also run through the bare
//! filter probes a `get` makes (hash once; every level-0 table whose range holds the key, then
//! one table per deeper level by binary search; `may_contain_hash`), with no store around them.
//! Absent-get time ÷ bare-probe time says how close the read path is to that limit.
//!
//! Values (`--values`): `fill`, the same byte repeated (the default, as before), or `mixed`,
//! half random bytes and half a repeated English sentence, about 2× with LZ4: the data for
//! compressed runs. Each shape prints the engines' table bytes on disk; a compressed run also
//! prints what decompressing one 4 KiB block of this data costs, beside a present get.

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::Parser;
use lsm_bloom::table::{FilterState, Table};
use lsm_bloom::{Db, Options};
use rocksdb::statistics::{StatsLevel, Ticker};
use serde::Serialize;

mod multi;
mod prefix;
#[cfg(feature = "rocksdb-plugin")]
mod rocks_filters;
mod scale;

#[derive(Parser, Clone)]
#[command(about = "lsm-bloom vs RocksDB vs fjall")]
struct Args {
    /// Keys to load.
    #[arg(long, default_value_t = 2_000_000)]
    keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Gets per read phase, round and thread count (split over the threads).
    #[arg(long, default_value_t = 400_000)]
    ops: u64,
    /// Interleaved rounds (at least 3 for a median worth quoting).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Thread counts to run every phase at.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Memtable (write buffer) size in MiB, all engines.
    #[arg(long, default_value_t = 64)]
    memtable_mib: u64,
    /// Block cache in MiB, all engines.
    #[arg(long, default_value_t = 32)]
    block_cache_mib: u64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Profiling mode: load lsm-bloom only, then run this phase ("absent" or "present";
    /// "absent-multi" or "present-multi": `Db::multi_get` in batches of 64) for
    /// `--hold-secs` on `--hold-threads` threads, printing the pid first, so that
    /// `perf record -e cpu-clock -g -p PID` sees nothing but gets.
    #[arg(long)]
    hold: Option<String>,
    /// Seconds to run the held phase.
    #[arg(long, default_value_t = 20)]
    hold_secs: u64,
    /// Threads for the held phase.
    #[arg(long, default_value_t = 1)]
    hold_threads: usize,
    /// Fully compact before the held phase.
    #[arg(long)]
    hold_compacted: bool,
    /// Every engine at its own defaults instead of configured alike: ours
    /// `Options::default()`, fjall's defaults, RocksDB's defaults with a 10 bits/key Bloom
    /// filter (it has none by default). `--memtable-mib`, `--block-cache-mib` and
    /// `--compression` are then ignored.
    #[arg(long)]
    defaults: bool,
    /// Ours with `Options::filter_budget` at this average bits/key (blocked Bloom on every
    /// level) in place of its fixed filter policy (configured alike) or of the default
    /// budget (`--defaults`).
    #[arg(long)]
    ours_budget: Option<f64>,
    /// With `--ours-budget`: Ribbon on the largest level (`FilterBudget::bits_per_key`'s
    /// kinds) instead of blocked Bloom.
    #[arg(long, requires = "ours_budget")]
    ours_budget_ribbon: bool,
    /// Ours with `Options::mmap_reads` (tables read through memory maps), the others as
    /// they are.
    #[arg(long)]
    ours_mmap: bool,
    /// Every engine that can reads its tables through memory maps: ours
    /// `Options::mmap_reads`, RocksDB `allow_mmap_reads` (fjall 3 has no such option).
    #[arg(long)]
    mmap: bool,
    /// Ours with `Options::filter_huge_pages` (filter blocks in huge-page memory).
    #[arg(long)]
    ours_huge_pages: bool,
    /// Scale workload: at each size, also time absent gets and bare probes with the same
    /// store reopened with and without `Options::filter_huge_pages`, interleaved per round.
    #[arg(long)]
    huge_pages_ab: bool,
    /// `gets` (point lookups, the default), `prefix` (prefix scans, `prefix.rs`),
    /// `rocksdb-filters` (RocksDB with its own and lsm-bloom's filters, `rocks_filters.rs`;
    /// feature `rocksdb-plugin`) or `scale` (our absent lookups at `--scale-keys` sizes, in
    /// units of memory latency, `scale.rs`).
    #[arg(long, default_value = "gets", value_parser = ["gets", "prefix", "rocksdb-filters", "scale"])]
    workload: String,
    /// Scale workload: store sizes in keys.
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    scale_keys: Vec<u64>,
    /// Scale workload: MiB the pointer chase (the unit) walks over.
    #[arg(long, default_value_t = 512)]
    chase_mib: u64,
    /// Prefix workload: distinct prefixes (`--keys / --prefixes` keys each).
    #[arg(long, default_value_t = 100_000)]
    prefixes: u64,
    /// Prefix workload: scans per phase, round and thread count.
    #[arg(long, default_value_t = 20_000)]
    scans: u64,
    /// Data block compression in all three engines: `none` or `lz4`.
    #[arg(long, default_value = "none", value_parser = ["none", "lz4"])]
    compression: String,
    /// Values: `fill` (one byte repeated) or `mixed` (half random, half repeated text).
    #[arg(long, default_value = "fill", value_parser = ["fill", "mixed"])]
    values: String,
}

impl Args {
    fn lz4(&self) -> bool {
        self.compression == "lz4"
    }
}

/// Value number `i` under `--values`: `fill` one byte repeated; `mixed` half random bytes
/// (from `i`), half a repeated sentence.
fn value(args: &Args, i: u64, out: &mut Vec<u8>) {
    out.clear();
    if args.values == "fill" {
        out.resize(args.value_size, b'v');
        return;
    }
    let random = args.value_size / 2;
    let mut x = mix(i ^ 0xA5A5);
    while out.len() < random {
        x = mix(x);
        let n = (random - out.len()).min(8);
        out.extend_from_slice(&x.to_le_bytes()[..n]);
    }
    let text = b"the quick brown fox jumps over the lazy dog; ";
    while out.len() < args.value_size {
        let n = (args.value_size - out.len()).min(text.len());
        out.extend_from_slice(&text[..n]);
    }
}

/// `--hold`: see `Args::hold`.
fn hold(args: &Args, phase: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ours = open_ours(dir.path(), args);
    let rate = load(&ours, args, 1);
    if args.hold_compacted {
        ours.compact_all();
    }
    let absent_pct = if phase.starts_with("absent") { 100 } else { 0 };
    let keys = phase_keys(args, absent_pct, 1);
    let batches = multi::batches(&keys);
    let batched = phase.ends_with("-multi");
    eprintln!(
        "loaded at {rate:.0} puts/s; tables {:?}; pid {}: {phase} gets on {} thread(s) for {} s",
        ours.tables_per_level(),
        std::process::id(),
        args.hold_threads,
        args.hold_secs
    );
    if phase == "bare" {
        // The bare filter probes of absent gets, one key at a time and in batches.
        let levels = ours.0.levels();
        let until = Instant::now() + Duration::from_secs(args.hold_secs);
        let (mut serial, mut batched) = (Vec::new(), Vec::new());
        while Instant::now() < until {
            serial.push(bare_probes(&levels, &keys, args.hold_threads));
            batched.push(multi::bare_batched(&levels, &keys, args.hold_threads));
        }
        let (s, b) = (median(serial), median(batched));
        println!(
            "bare probes: {s:.0} keys/s one at a time, {b:.0} keys/s in batches of {} ({:.2}x)",
            multi::BATCH,
            b / s
        );
        return;
    }
    let until = Instant::now() + Duration::from_secs(args.hold_secs);
    let mut done = 0u64;
    let mut secs = 0.0;
    let before = ours.false_positives();
    while Instant::now() < until {
        secs += if batched {
            timed_parallel(&batches, args.hold_threads, |part| {
                for (keys, present) in part {
                    assert_eq!(ours.multi_get(keys), Some(*present));
                }
            })
        } else {
            timed_parallel(&keys, args.hold_threads, |part| {
                for (k, present) in part {
                    assert_eq!(ours.get(k), *present);
                }
            })
        };
        done += keys.len() as u64;
    }
    let false_positives = ours.false_positives() - before;
    println!(
        "{phase}: {:.0} gets/s on {} thread(s); filter false positives per get {:.4}; filters \
         {:.1} MiB",
        done as f64 / secs,
        args.hold_threads,
        false_positives as f64 / done as f64,
        ours.0.stats().total.filter_bytes as f64 / f64::from(1 << 20)
    );
}

fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// 16-byte random-looking key number `i`; absent keys use `i >= 2^40`.
fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&mix(i).to_be_bytes());
    k[8..].copy_from_slice(&mix(i ^ 0x5555_5555).to_be_bytes());
    k
}
const ABSENT: u64 = 1 << 40;

fn read_syscalls() -> u64 {
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

trait Engine: Sync {
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

pub(crate) struct Ours(Db);

impl Ours {
    /// Filter "maybe" answers for keys that were not there, so far: each costs a data-block
    /// read (or a block-cache hit), whatever the cache holds.
    fn false_positives(&self) -> u64 {
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

struct Rocks {
    db: rocksdb::DB,
    opts: rocksdb::Options,
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

struct Fjall {
    db: fjall::Database,
    ks: fjall::Keyspace,
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

fn open_ours(dir: &Path, args: &Args) -> Ours {
    Ours(Db::open(dir, ours_options(args)).expect("open lsm-bloom"))
}

fn ours_options(args: &Args) -> Options {
    let budget = args.ours_budget.map(|bits| {
        let budget = lsm_bloom::FilterBudget::bits_per_key(bits);
        match args.ours_budget_ribbon {
            true => budget,
            false => budget.with_kind(lsm_bloom::FilterKind::Blocked),
        }
    });
    if args.defaults {
        let defaults = Options::default();
        return Options {
            filter_budget: budget.or(defaults.filter_budget),
            mmap_reads: args.ours_mmap || args.mmap,
            filter_huge_pages: args.ours_huge_pages,
            ..defaults
        };
    }
    Options {
        filter_budget: budget,
        memtable_size: (args.memtable_mib << 20) as usize,
        block_size: 4096,
        target_file_size: 64 << 20,
        level1_max_bytes: 256 << 20,
        size_ratio: 10,
        l0_compaction_trigger: 4,
        block_cache_bytes: args.block_cache_mib << 20,
        compression: if args.lz4() {
            lsm_bloom::Compression::Lz4
        } else {
            lsm_bloom::Compression::None
        },
        mmap_reads: args.ours_mmap || args.mmap,
        filter_huge_pages: args.ours_huge_pages,
        ..Options::default()
    }
}

/// RocksDB as in the module docs; `tweak` may change the options before the open.
fn open_rocks(
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
fn rocks_options(
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

fn open_fjall(dir: &Path, args: &Args) -> Fjall {
    use fjall::config::{
        BlockSizePolicy, BloomConstructionPolicy, CompressionPolicy, FilterPolicy,
        FilterPolicyEntry, PartitioningPolicy, PinningPolicy,
    };
    if args.defaults {
        let db = fjall::Database::builder(dir).open().expect("open fjall");
        let ks = db
            .keyspace("bench", fjall::KeyspaceCreateOptions::default)
            .expect("fjall keyspace");
        return Fjall { db, ks };
    }
    let db = fjall::Database::builder(dir)
        .cache_size(args.block_cache_mib << 20)
        .open()
        .expect("open fjall");
    let memtable = args.memtable_mib << 20;
    let codec = if args.lz4() {
        fjall::CompressionType::Lz4
    } else {
        fjall::CompressionType::None
    };
    let ks = db
        .keyspace("bench", || {
            fjall::KeyspaceCreateOptions::default()
                .max_memtable_size(memtable)
                .data_block_size_policy(BlockSizePolicy::all(4096))
                .data_block_compression_policy(CompressionPolicy::all(codec))
                .filter_policy(FilterPolicy::all(FilterPolicyEntry::Bloom(
                    BloomConstructionPolicy::BitsPerKey(10.0),
                )))
                .filter_block_pinning_policy(PinningPolicy::all(true))
                .index_block_pinning_policy(PinningPolicy::all(true))
                .filter_block_partitioning_policy(PartitioningPolicy::all(false))
                .index_block_partitioning_policy(PartitioningPolicy::all(false))
        })
        .expect("fjall keyspace");
    Fjall { db, ks }
}

#[derive(Serialize, Clone, Default)]
struct Sample {
    ops_per_sec: f64,
    read_syscalls_per_op: f64,
    data_block_reads_per_op: Option<f64>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn median_sample(v: &[Sample]) -> Sample {
    Sample {
        ops_per_sec: median(v.iter().map(|s| s.ops_per_sec).collect()),
        read_syscalls_per_op: median(v.iter().map(|s| s.read_syscalls_per_op).collect()),
        data_block_reads_per_op: v
            .first()
            .and_then(|s| s.data_block_reads_per_op)
            .map(|_| median(v.iter().filter_map(|s| s.data_block_reads_per_op).collect())),
    }
}

/// `ops` keys: `absent_pct`% absent, the rest present.
fn phase_keys(args: &Args, absent_pct: u64, seed: u64) -> Vec<([u8; 16], bool)> {
    (0..args.ops)
        .map(|i| {
            // Seed in the high half: each seed draws its own keys. (`i ^ seed` drew the same set
            // for every seed below `ops`, reordered: a phase found the blocks the previous
            // phases' false positives had read in the block cache.)
            let r = mix(i.wrapping_add(seed << 32));
            if r % 100 < absent_pct {
                (key(ABSENT + (r >> 8) % (1 << 30)), false)
            } else {
                (key((r >> 8) % args.keys), true)
            }
        })
        .collect()
}

/// Runs `f` on each of `threads` chunks of `items` at once; returns the wall time from the
/// first thread's start to the last thread's end.
fn timed_parallel<T: Sync>(items: &[T], threads: usize, f: impl Fn(&[T]) + Sync) -> f64 {
    let chunk = items.len().div_ceil(threads.max(1)).max(1);
    let start = Barrier::new(threads + 1);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let workers: Vec<_> = items
            .chunks(chunk)
            .map(|part| {
                let (start, f) = (&start, &f);
                s.spawn(move || {
                    start.wait();
                    let t0 = Instant::now();
                    f(part);
                    (t0, Instant::now())
                })
            })
            .collect();
        start.wait();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .collect()
    });
    // From the first thread's start to the last one's end.
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    first
        .zip(last)
        .map_or(0.0, |(a, b)| b.saturating_duration_since(a).as_secs_f64())
        .max(1e-9)
}

fn read_phase(e: &dyn Engine, keys: &[([u8; 16], bool)], threads: usize) -> Sample {
    let d0 = e.data_block_reads();
    let s0 = read_syscalls();
    let secs = timed_parallel(keys, threads, |part| {
        for (k, present) in part {
            let found = e.get(k);
            assert_eq!(
                found,
                *present,
                "{}: wrong answer (present = {present})",
                e.name()
            );
        }
    });
    let n = keys.len() as f64;
    Sample {
        ops_per_sec: n / secs,
        read_syscalls_per_op: (read_syscalls() - s0) as f64 / n,
        data_block_reads_per_op: d0
            .zip(e.data_block_reads())
            .map(|(a, b)| (b - a) as f64 / n),
    }
}

/// The filter probes an absent `get` makes, and nothing else: returns probes per second.
fn bare_probes(levels: &[Vec<Arc<Table>>], keys: &[([u8; 16], bool)], threads: usize) -> f64 {
    let may_contain = |t: &Table, key: &[u8], hash: u64| match t.filter() {
        FilterState::Valid(f) => f.may_contain_prehashed(key, hash),
        _ => true,
    };
    let secs = timed_parallel(keys, threads, |part| {
        let mut maybe = 0u64;
        for (k, _) in part {
            let key = k.as_slice();
            let hash = lsm_bloom::filter::hash_key(key);
            for t in levels[0].iter().rev() {
                if t.covers(key) && may_contain(t, key, hash) {
                    maybe += 1;
                }
            }
            for tables in &levels[1..] {
                if let Some(t) = Table::in_level(tables, key) {
                    if may_contain(t, key, hash) {
                        maybe += 1;
                    }
                }
            }
        }
        std::hint::black_box(maybe);
    });
    keys.len() as f64 / secs
}

fn load(e: &dyn Engine, args: &Args, threads: usize) -> f64 {
    let ids: Vec<u64> = (0..args.keys).collect();
    let t = Instant::now();
    timed_parallel(&ids, threads, |part| {
        let mut v = Vec::with_capacity(args.value_size);
        for i in part {
            value(args, *i, &mut v);
            e.put(&key(*i), &v);
        }
    });
    e.settle();
    args.keys as f64 / t.elapsed().as_secs_f64()
}

const PEERS: [&str; 2] = ["rocksdb", "fjall"];

#[derive(Serialize)]
struct Row {
    phase: String,
    shape: String,
    threads: usize,
    lsm_bloom: Sample,
    rocksdb: Sample,
    fjall: Sample,
    /// ours / the faster of RocksDB and fjall.
    ratio_to_best_peer: f64,
    /// absent phases: absent-get time / bare filter-probe time (1 = at the limit).
    overhead_vs_bare_probes: Option<f64>,
    bare_probes_per_sec: Option<f64>,
    /// multi_get phases: our time per key in batches of `multi::BATCH` ÷ our single get's
    /// time on the same keys (below 1: the batch is faster).
    multi_get_per_key_vs_get: Option<f64>,
}

struct Engines {
    _dirs: Vec<tempfile::TempDir>,
    ours: Ours,
    rocks: Rocks,
    fjall: Fjall,
}

impl Engines {
    fn all(&self) -> [&dyn Engine; 3] {
        [&self.ours, &self.rocks, &self.fjall]
    }
}

fn main() {
    let args = Args::parse();
    if args.workload == "prefix" {
        return prefix::run(&args);
    }
    if args.workload == "scale" {
        return scale::run(&args);
    }
    if args.workload == "rocksdb-filters" {
        #[cfg(feature = "rocksdb-plugin")]
        return rocks_filters::run(&args);
        #[cfg(not(feature = "rocksdb-plugin"))]
        {
            eprintln!("error: --workload rocksdb-filters needs --features rocksdb-plugin");
            std::process::exit(2);
        }
    }
    if let Some(phase) = args.hold.clone() {
        return hold(&args, &phase);
    }
    let say = |s: String| {
        if !args.json {
            eprintln!("{s}");
        }
    };
    let config = if args.defaults {
        format!(
            "DEFAULTS: every engine at its own defaults (ours Options::default(); fjall's defaults; RocksDB's defaults + set_bloom_filter(10.0, false)); keys {} x (16-byte key, {}-byte value); threads {:?}; values {}; {} gets per read phase and round; {} rounds",
            args.keys, args.value_size, args.threads, args.values, args.ops, args.rounds
        )
    } else {
        format!(
        "keys {} x ({}-byte key, {}-byte value); threads {:?}; 10 bits/key Bloom (ours: blocked; RocksDB: set_bloom_filter(10.0, false), default format_version; fjall: BitsPerKey(10.0) all levels); 4 KiB blocks; compression {} all levels, values {}; memtable {} MiB; WAL on, no fsync; index+filter pinned in memory, unpartitioned; block cache {} MiB each; RocksDB statistics off in timed phases; target file 64 MiB, L1 256 MiB, ratio 10, L0 trigger 4 (ours, RocksDB; fjall: its leveled defaults); {} gets per read phase and round; {} rounds",
        args.keys, 16, args.value_size, args.threads, args.compression, args.values, args.memtable_mib, args.block_cache_mib, args.ops, args.rounds
    )
    };
    let reads = match (args.mmap, args.ours_mmap) {
        (true, _) => "; tables read through memory maps (ours mmap_reads, RocksDB allow_mmap_reads; fjall has none)",
        (false, true) => "; ours reads tables through memory maps (mmap_reads), the others with pread",
        (false, false) => "",
    };
    let config = format!("{config}{reads}");
    say(config.clone());

    // Bulk load, interleaved; the last load's databases serve the read phases.
    let mut load_rates: Vec<(usize, [Vec<f64>; 3])> = args
        .threads
        .iter()
        .map(|&t| (t, Default::default()))
        .collect();
    let mut engines: Option<Engines> = None;
    for round in 0..args.rounds {
        for (threads, rates) in &mut load_rates {
            drop(engines.take()); // the previous databases and directories go first
            let dirs: Vec<_> = (0..3)
                .map(|_| tempfile::tempdir().expect("tempdir"))
                .collect();
            let e = Engines {
                ours: open_ours(dirs[0].path(), &args),
                rocks: open_rocks(dirs[1].path(), &args, |_, _| {}),
                fjall: open_fjall(dirs[2].path(), &args),
                _dirs: dirs,
            };
            for (i, engine) in e.all().into_iter().enumerate() {
                let r = load(engine, &args, *threads);
                rates[i].push(r);
                say(format!(
                    "round {round}, {threads} thread(s): {} loaded at {r:.0} puts/s",
                    engine.name()
                ));
            }
            engines = Some(e);
        }
    }
    let e = engines.expect("at least one round and thread count");

    let mut rows = Vec::new();
    let mut shapes = Vec::new();
    for shape in ["settled", "compacted"] {
        if shape == "compacted" {
            for engine in e.all() {
                engine.compact_all();
            }
        }
        let per_level: Vec<(&str, Vec<u64>)> = e
            .all()
            .iter()
            .map(|x| (x.name(), x.tables_per_level()))
            .collect();
        say(format!("tables per level ({shape}): {per_level:?}"));
        let disk: Vec<(&str, u64)> = e
            .all()
            .iter()
            .map(|x| (x.name(), x.table_bytes()))
            .collect();
        say(format!("table bytes on disk ({shape}): {disk:?}"));
        let absent_keys: Vec<[u8; 16]> = phase_keys(&args, 100, 99)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let fprs: Vec<Option<f64>> = e
            .all()
            .iter()
            .map(|x| x.observed_fpr(&absent_keys))
            .collect();
        let best_disk = disk[1].1.min(disk[2].1).max(1);
        shapes.push(serde_json::json!({
            "shape": shape, "tables_per_level": per_level, "observed_fpr": fprs,
            "table_bytes": disk, "table_bytes_ours_to_smallest_peer": disk[0].1 as f64 / best_disk as f64,
        }));
        let levels = e.ours.0.levels();
        for (phase, absent_pct, batched) in [
            ("present get", 0u64, false),
            ("absent get", 100, false),
            ("mixed 90% absent", 90, false),
            ("present multi_get", 0, true),
            ("absent multi_get", 100, true),
        ] {
            for &threads in &args.threads {
                let mut samples: [Vec<Sample>; 3] = Default::default();
                let mut bare = Vec::new();
                let mut overhead = Vec::new();
                let mut per_key = Vec::new();
                for round in 0..args.rounds {
                    // Keys of their own for every phase, thread count and round (the engines
                    // of one round share them).
                    let seed = (round as u64) << 16
                        | (threads as u64) << 8
                        | u64::from(batched) << 7
                        | absent_pct;
                    let keys = phase_keys(&args, absent_pct, seed);
                    let batches = if batched {
                        multi::batches(&keys)
                    } else {
                        Vec::new()
                    };
                    for (i, engine) in e.all().into_iter().enumerate() {
                        let s = if batched {
                            multi::phase(engine, &batches, threads).unwrap_or_default()
                        } else {
                            read_phase(engine, &keys, threads)
                        };
                        say(format!(
                            "  {shape} {phase} {threads}T round {round} {}: {:.0} ops/s, {:.4} syscr/op",
                            engine.name(),
                            s.ops_per_sec,
                            s.read_syscalls_per_op
                        ));
                        if i == 0 && absent_pct == 100 && !batched {
                            let b = bare_probes(&levels, &keys, threads);
                            overhead.push(b / s.ops_per_sec);
                            bare.push(b);
                        }
                        if i == 0 && batched {
                            // Our single gets on keys of their own drawn alike, for the per-key
                            // time ratio (on the batch's own keys they found the blocks the
                            // batch's false positives had just read in the block cache).
                            let own = phase_keys(&args, absent_pct, seed | 1 << 24);
                            let single = read_phase(engine, &own, threads);
                            per_key.push(single.ops_per_sec / s.ops_per_sec);
                        }
                        samples[i].push(s);
                    }
                }
                let [ours, rocks, fjall] = samples.map(|s| median_sample(&s));
                let best = rocks.ops_per_sec.max(fjall.ops_per_sec);
                rows.push(Row {
                    phase: phase.into(),
                    shape: shape.into(),
                    threads,
                    ratio_to_best_peer: ours.ops_per_sec / best,
                    overhead_vs_bare_probes: (!overhead.is_empty()).then(|| median(overhead)),
                    bare_probes_per_sec: (!bare.is_empty()).then(|| median(bare)),
                    multi_get_per_key_vs_get: (!per_key.is_empty()).then(|| median(per_key)),
                    lsm_bloom: ours,
                    rocksdb: rocks,
                    fjall,
                });
            }
        }
    }

    let loads: Vec<serde_json::Value> = load_rates
        .iter()
        .map(|(t, r)| {
            let m = [0, 1, 2].map(|i| median(r[i].clone()));
            serde_json::json!({"threads": t, "lsm_bloom": m[0], "rocksdb": m[1], "fjall": m[2],
                "ratio_to_best_peer": m[0] / m[1].max(m[2])})
        })
        .collect();
    let scaling = scaling(&rows, &args);
    let decompress = args.lz4().then(|| block_decompress_micros(&args));
    if args.json {
        let out = serde_json::json!({
            "config": config, "peers": PEERS, "bulk_load": loads, "shapes": shapes,
            "phases": rows, "scaling": scaling, "lz4_block_decompress_micros": decompress,
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("json"));
        return;
    }
    println!("{config}");
    for s in &shapes {
        println!("{s}");
    }
    for s in &shapes {
        let b = &s["table_bytes"];
        let mib = |i: usize| b[i][1].as_f64().unwrap_or(0.0) / 1048576.0;
        println!(
            "table bytes on disk, {}: lsm-bloom {:.1} MiB, RocksDB {:.1} MiB, fjall {:.1} MiB; ours / smallest peer {:.2}",
            s["shape"].as_str().unwrap_or(""),
            mib(0),
            mib(1),
            mib(2),
            s["table_bytes_ours_to_smallest_peer"].as_f64().unwrap_or(0.0)
        );
    }
    println!("\n| phase | shape | threads | lsm-bloom ops/s | RocksDB ops/s | fjall ops/s | ours / best peer | syscr/op ours / RocksDB / fjall | data-block reads/op ours | absent get ÷ bare probes; multi_get per key ÷ get |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for l in &loads {
        println!(
            "| bulk load | - | {} | {:.0} | {:.0} | {:.0} | {:.2} | | | |",
            l["threads"],
            l["lsm_bloom"].as_f64().unwrap_or(0.0),
            l["rocksdb"].as_f64().unwrap_or(0.0),
            l["fjall"].as_f64().unwrap_or(0.0),
            l["ratio_to_best_peer"].as_f64().unwrap_or(0.0)
        );
    }
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {} | {:.2} | {:.4} / {:.4} / {:.4} | {:.4} | {} |",
            r.phase,
            r.shape,
            r.threads,
            r.lsm_bloom.ops_per_sec,
            r.rocksdb.ops_per_sec,
            // fjall has no batched read: its multi_get cells stay empty (`-`).
            if r.fjall.ops_per_sec > 0.0 {
                format!("{:.0}", r.fjall.ops_per_sec)
            } else {
                "-".into()
            },
            r.ratio_to_best_peer,
            r.lsm_bloom.read_syscalls_per_op,
            r.rocksdb.read_syscalls_per_op,
            r.fjall.read_syscalls_per_op,
            r.lsm_bloom.data_block_reads_per_op.unwrap_or(0.0),
            r.overhead_vs_bare_probes
                .map(|o| format!(
                    "{o:.2} (bare {:.0}/s)",
                    r.bare_probes_per_sec.unwrap_or(0.0)
                ))
                .or_else(|| r.multi_get_per_key_vs_get.map(|m| format!("{m:.2}")))
                .unwrap_or_default()
        );
    }
    if let Some(us) = decompress {
        let get = rows
            .iter()
            .find(|r| r.phase == "present get" && r.threads == 1)
            .map_or(0.0, |r| 1e6 / r.lsm_bloom.ops_per_sec);
        println!(
            "\nLZ4: decompressing one 4 KiB data block of these values takes {us:.2} µs; a present get (1 thread, settled) takes {get:.2} µs in all"
        );
    }
    if !scaling.is_empty() {
        println!("\n| phase | shape | scaling | lsm-bloom | RocksDB | fjall |");
        println!("|---|---|---|---|---|---|");
        for s in &scaling {
            println!("{}", s["markdown"].as_str().unwrap_or(""));
        }
    }
}

/// Microseconds to LZ4-decompress one 4 KiB data block of the run's values (entries as in a
/// table: 16-byte keys, `--value-size` values), median of 5 timings of 2,000 decompressions:
/// what a block cache holding compressed blocks would add to every hit.
fn block_decompress_micros(args: &Args) -> f64 {
    let mut raw = Vec::new();
    let mut v = Vec::new();
    let mut i = 0;
    while raw.len() < 4096 {
        value(args, i, &mut v);
        raw.push(1u8);
        raw.extend_from_slice(&16u32.to_le_bytes());
        raw.extend_from_slice(&(v.len() as u32).to_le_bytes());
        raw.extend_from_slice(&key(i));
        raw.extend_from_slice(&v);
        i += 1;
    }
    let compressed = lz4_flex::block::compress(&raw);
    let mut out = vec![0u8; raw.len()];
    let times: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..2000 {
                let n = lz4_flex::block::decompress_into(&compressed, &mut out).expect("lz4");
                std::hint::black_box(n);
            }
            t.elapsed().as_secs_f64() * 1e6 / 2000.0
        })
        .collect();
    median(times)
}

/// A ratio to two decimals, or `-` where an engine has no such phase.
fn cell(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}")
    } else {
        "-".into()
    }
}

/// Throughput at the largest thread count ÷ at 1 thread, per phase, shape and engine.
fn scaling(rows: &[Row], args: &Args) -> Vec<serde_json::Value> {
    let max = args.threads.iter().copied().max().unwrap_or(1);
    if max <= 1 || !args.threads.contains(&1) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for one in rows.iter().filter(|r| r.threads == 1) {
        let Some(many) = rows
            .iter()
            .find(|r| r.threads == max && r.phase == one.phase && r.shape == one.shape)
        else {
            continue;
        };
        let f = |a: &Sample, b: &Sample| b.ops_per_sec / a.ops_per_sec;
        let v = [
            f(&one.lsm_bloom, &many.lsm_bloom),
            f(&one.rocksdb, &many.rocksdb),
            f(&one.fjall, &many.fjall),
        ];
        out.push(serde_json::json!({
            "phase": one.phase, "shape": one.shape, "threads": max,
            "lsm_bloom": v[0], "rocksdb": v[1], "fjall": v[2],
            "markdown": format!("| {} | {} | {max}T/1T | {} | {} | {} |", one.phase, one.shape, cell(v[0]), cell(v[1]), cell(v[2])),
        }));
    }
    out
}
