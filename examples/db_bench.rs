//! lsm-bloom against RocksDB, same data, same process, interleaved rounds, medians reported.
//!
//! `cargo run --release --features rocksdb --example db_bench -- [--keys N] [--value-size B]
//!  [--ops M] [--rounds R] [--json]`
//!
//! Both engines: 10 bits/key Bloom filters (RocksDB `set_bloom_filter(10.0, false)`, its default
//! format_version; ours the default blocked filter), 4 KiB blocks, no compression, the same
//! memtable size, WAL on without fsync, index and filter blocks held in memory, RocksDB's block
//! cache 8 MiB (ours has none), so data-block reads reach the file system (its page cache).
//!
//! Phases: bulk load (then flush and wait for compactions), then present gets, absent gets and
//! a 90% absent / 10% present mix — first on the shape each engine settled into, then again
//! after a full manual compaction of both. Per phase and engine: ops/s, read syscalls per op
//! (`/proc/self/io` `syscr`), our data-block reads per op, and the observed filter FPR (ours
//! from `Db::stats`, RocksDB's from its Bloom tickers). Ratios are ours / RocksDB throughput.

use std::path::Path;
use std::time::Instant;

use clap::Parser;
use lsm_bloom::{Db, DbStats, Options};
use rocksdb::statistics::Ticker;
use serde::Serialize;

#[derive(Parser, Clone)]
#[command(about = "lsm-bloom vs RocksDB")]
struct Args {
    /// Keys to load.
    #[arg(long, default_value_t = 2_000_000)]
    keys: u64,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Operations per read phase and round.
    #[arg(long, default_value_t = 200_000)]
    ops: u64,
    /// Interleaved rounds (at least 3 for a median worth quoting).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Memtable (write buffer) size in MiB, both engines.
    #[arg(long, default_value_t = 64)]
    memtable_mib: usize,
    /// RocksDB block cache in MiB.
    #[arg(long, default_value_t = 8)]
    block_cache_mib: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
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

trait Engine {
    fn name(&self) -> &'static str;
    fn put(&self, k: &[u8], v: &[u8]);
    fn get(&self, k: &[u8]) -> bool;
    fn settle(&self);
    fn compact_all(&self);
    fn tables_per_level(&self) -> Vec<u64>;
    /// (filter checks, positives, true positives, data-block reads) so far.
    fn filter_counters(&self) -> (u64, u64, u64, u64);
}

struct Ours(Db);

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
    fn filter_counters(&self) -> (u64, u64, u64, u64) {
        let s: DbStats = self.0.stats();
        (
            s.total.filter_checks,
            s.total.filter_positive,
            s.total.filter_true_positive,
            s.total.data_block_reads,
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
        loop {
            let pending = self
                .db
                .property_int_value("rocksdb.compaction-pending")
                .ok()
                .flatten()
                .unwrap_or(0);
            let running = self
                .db
                .property_int_value("rocksdb.num-running-compactions")
                .ok()
                .flatten()
                .unwrap_or(0);
            let flushing = self
                .db
                .property_int_value("rocksdb.num-running-flushes")
                .ok()
                .flatten()
                .unwrap_or(0);
            if pending + running + flushing == 0 {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
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
    fn filter_counters(&self) -> (u64, u64, u64, u64) {
        let useful = self.opts.get_ticker_count(Ticker::BloomFilterUseful);
        let positive = self.opts.get_ticker_count(Ticker::BloomFilterFullPositive);
        let true_positive = self
            .opts
            .get_ticker_count(Ticker::BloomFilterFullTruePositive);
        (useful + positive, positive, true_positive, 0)
    }
}

fn open_ours(dir: &Path, args: &Args) -> Ours {
    let opts = Options {
        memtable_size: args.memtable_mib << 20,
        block_size: 4096,
        target_file_size: 64 << 20,
        level1_max_bytes: 256 << 20,
        size_ratio: 10,
        l0_compaction_trigger: 4,
        ..Options::default()
    };
    Ours(Db::open(dir, opts).expect("open lsm-bloom"))
}

fn open_rocks(dir: &Path, args: &Args) -> Rocks {
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    table.set_block_size(4096);
    table.set_cache_index_and_filter_blocks(false); // held by the table readers, in memory
    table.set_block_cache(&rocksdb::Cache::new_lru_cache(args.block_cache_mib << 20));
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    opts.set_block_based_table_factory(&table);
    opts.set_compression_type(rocksdb::DBCompressionType::None);
    opts.set_bottommost_compression_type(rocksdb::DBCompressionType::None);
    opts.set_write_buffer_size(args.memtable_mib << 20);
    opts.set_target_file_size_base(64 << 20);
    opts.set_max_bytes_for_level_base(256 << 20);
    opts.set_max_bytes_for_level_multiplier(10.0);
    opts.set_level_zero_file_num_compaction_trigger(4);
    opts.enable_statistics();
    let db = rocksdb::DB::open(&opts, dir).expect("open rocksdb");
    Rocks { db, opts }
}

#[derive(Serialize, Clone, Default)]
struct Sample {
    ops_per_sec: f64,
    read_syscalls_per_op: f64,
    data_block_reads_per_op: Option<f64>,
    observed_fpr: f64,
}

#[derive(Serialize)]
struct PhaseResult {
    phase: String,
    shape: String,
    lsm_bloom: Sample,
    rocksdb: Sample,
    /// ours / RocksDB throughput (> 1 means ours is faster).
    throughput_ratio: f64,
    /// ours / RocksDB read syscalls per op.
    read_syscall_ratio: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        0.0
    } else {
        v[v.len() / 2]
    }
}

fn median_sample(v: &[Sample]) -> Sample {
    Sample {
        ops_per_sec: median(v.iter().map(|s| s.ops_per_sec).collect()),
        read_syscalls_per_op: median(v.iter().map(|s| s.read_syscalls_per_op).collect()),
        data_block_reads_per_op: v[0]
            .data_block_reads_per_op
            .map(|_| median(v.iter().filter_map(|s| s.data_block_reads_per_op).collect())),
        observed_fpr: median(v.iter().map(|s| s.observed_fpr).collect()),
    }
}

/// Runs `ops` gets: `absent_pct`% of absent keys, the rest present.
fn read_phase(e: &dyn Engine, args: &Args, absent_pct: u64, seed: u64) -> Sample {
    let keys: Vec<([u8; 16], bool)> = (0..args.ops)
        .map(|i| {
            let r = mix(i ^ seed);
            if r % 100 < absent_pct {
                (key(ABSENT + (r >> 8) % (1 << 30)), false)
            } else {
                (key((r >> 8) % args.keys), true)
            }
        })
        .collect();
    let (c0, p0, t0, d0) = e.filter_counters();
    let s0 = read_syscalls();
    let t = Instant::now();
    for (k, present) in &keys {
        let found = e.get(k);
        assert_eq!(
            found,
            *present,
            "{}: wrong answer for a {} key",
            e.name(),
            if *present { "present" } else { "absent" }
        );
    }
    let secs = t.elapsed().as_secs_f64();
    let syscalls = read_syscalls() - s0;
    let (c1, p1, t1, d1) = e.filter_counters();
    let negatives = (c1 - c0).saturating_sub(t1 - t0);
    let n = args.ops as f64;
    Sample {
        ops_per_sec: n / secs,
        read_syscalls_per_op: syscalls as f64 / n,
        data_block_reads_per_op: (e.name() == "lsm-bloom").then_some((d1 - d0) as f64 / n),
        observed_fpr: if negatives == 0 {
            0.0
        } else {
            (p1 - p0).saturating_sub(t1 - t0) as f64 / negatives as f64
        },
    }
}

fn load(e: &dyn Engine, args: &Args) -> f64 {
    let value = vec![b'v'; args.value_size];
    let t = Instant::now();
    for i in 0..args.keys {
        e.put(&key(i), &value);
    }
    e.settle();
    args.keys as f64 / t.elapsed().as_secs_f64()
}

fn main() {
    let args = Args::parse();
    let say = |s: String| {
        if !args.json {
            eprintln!("{s}");
        }
    };
    let config = format!(
        "keys {} x ({}-byte key, {}-byte value); 10 bits/key Bloom (ours: blocked; RocksDB: set_bloom_filter(10.0, false), default format_version); 4 KiB blocks; no compression; memtable {} MiB; WAL on, no fsync; index+filter in memory; RocksDB block cache {} MiB, ours none; target file 64 MiB, L1 256 MiB, ratio 10, L0 trigger 4; {} ops per read phase; {} rounds",
        args.keys, 16, args.value_size, args.memtable_mib, args.block_cache_mib, args.ops, args.rounds
    );
    say(config.clone());

    // Phase 1: bulk load, interleaved; the last round's databases serve the read phases.
    let mut load_rates: [Vec<f64>; 2] = Default::default();
    let mut engines: Option<(tempfile::TempDir, Ours, tempfile::TempDir, Rocks)> = None;
    for round in 0..args.rounds {
        drop(engines.take()); // drop the previous round's databases and directories first
        let (od, rd) = (
            tempfile::tempdir().expect("tempdir"),
            tempfile::tempdir().expect("tempdir"),
        );
        let ours = open_ours(od.path(), &args);
        let r = load(&ours, &args);
        load_rates[0].push(r);
        say(format!("round {round}: lsm-bloom loaded at {r:.0} puts/s"));
        let rocks = open_rocks(rd.path(), &args);
        let r = load(&rocks, &args);
        load_rates[1].push(r);
        say(format!("round {round}: rocksdb loaded at {r:.0} puts/s"));
        engines = Some((od, ours, rd, rocks));
    }
    let (_od, ours, _rd, rocks) = engines.expect("at least one round");
    let load_ours = median(load_rates[0].clone());
    let load_rocks = median(load_rates[1].clone());
    let shape_settled = (ours.tables_per_level(), rocks.tables_per_level());
    say(format!(
        "tables per level after load: lsm-bloom {:?}, rocksdb {:?}",
        shape_settled.0, shape_settled.1
    ));

    let mut results = Vec::new();
    let mut shapes = vec![("settled", shape_settled)];
    for shape in ["settled", "compacted"] {
        if shape == "compacted" {
            ours.compact_all();
            rocks.compact_all();
            let s = (ours.tables_per_level(), rocks.tables_per_level());
            say(format!(
                "tables per level after full compaction: lsm-bloom {:?}, rocksdb {:?}",
                s.0, s.1
            ));
            shapes.push(("compacted", s));
        }
        for (phase, absent_pct) in [
            ("present get", 0u64),
            ("absent get", 100),
            ("mixed 90% absent", 90),
        ] {
            let mut samples: [Vec<Sample>; 2] = Default::default();
            for round in 0..args.rounds {
                let seed = round as u64 * 7919 + absent_pct;
                for (i, e) in [&ours as &dyn Engine, &rocks as &dyn Engine]
                    .iter()
                    .enumerate()
                {
                    let s = read_phase(*e, &args, absent_pct, seed);
                    say(format!(
                        "  {shape} {phase} round {round} {}: {:.0} ops/s, {:.4} syscr/op",
                        e.name(),
                        s.ops_per_sec,
                        s.read_syscalls_per_op
                    ));
                    samples[i].push(s);
                }
            }
            let (a, b) = (median_sample(&samples[0]), median_sample(&samples[1]));
            results.push(PhaseResult {
                phase: phase.to_string(),
                shape: shape.to_string(),
                throughput_ratio: a.ops_per_sec / b.ops_per_sec,
                read_syscall_ratio: if b.read_syscalls_per_op > 0.0 {
                    a.read_syscalls_per_op / b.read_syscalls_per_op
                } else {
                    0.0
                },
                lsm_bloom: a,
                rocksdb: b,
            });
        }
    }

    if args.json {
        let shapes_json: Vec<serde_json::Value> = shapes
            .iter()
            .map(|(name, (o, r))| serde_json::json!({"shape": name, "lsm_bloom_tables_per_level": o, "rocksdb_tables_per_level": r}))
            .collect();
        let out = serde_json::json!({
            "config": config,
            "bulk_load": {"lsm_bloom_puts_per_sec": load_ours, "rocksdb_puts_per_sec": load_rocks, "throughput_ratio": load_ours / load_rocks},
            "shapes": shapes_json,
            "phases": results,
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("json"));
        return;
    }
    println!("{config}");
    for (name, (o, r)) in &shapes {
        println!("tables per level ({name}): lsm-bloom {o:?}, rocksdb {r:?}");
    }
    println!("\n| phase | shape | lsm-bloom ops/s | RocksDB ops/s | ratio | syscr/op ours | syscr/op RocksDB | data-block reads/op ours | FPR ours | FPR RocksDB |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| bulk load | - | {load_ours:.0} | {load_rocks:.0} | {:.2} | | | | | |",
        load_ours / load_rocks
    );
    for r in &results {
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.2} | {:.4} | {:.4} | {:.4} | {:.3}% | {:.3}% |",
            r.phase,
            r.shape,
            r.lsm_bloom.ops_per_sec,
            r.rocksdb.ops_per_sec,
            r.throughput_ratio,
            r.lsm_bloom.read_syscalls_per_op,
            r.rocksdb.read_syscalls_per_op,
            r.lsm_bloom.data_block_reads_per_op.unwrap_or(0.0),
            r.lsm_bloom.observed_fpr * 100.0,
            r.rocksdb.observed_fpr * 100.0
        );
    }
}
