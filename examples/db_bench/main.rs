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
//! [--scale-keys 1000000,10000000,100000000]` (`scale.rs`); range scans forward and reverse:
//! `... -- --workload scans [--defaults] [--scans S]` (`scans.rs`); empty short ranges with and
//! without range filters: `... -- --workload ranges [--defaults] [--range-bits B]`
//! (`ranges.rs`); the tail under a sustained write load: `... -- --workload latency
//! [--latency-secs S]` (`latency.rs`); ours' scans through the iterator against `DbCursor`:
//! `... -- --workload cursor [--defaults] [--scans S]` (`cursor.rs`); keyspaces against
//! column families: `... -- --workload keyspaces [--defaults]` (`keyspaces.rs`); how soon
//! expired data leaves our disk and what expiry costs reads: `... -- --workload expiry
//! [--defaults]` (`expiry.rs`); what deleted ranges cost gets and what a range delete saves:
//! `... -- --workload range-deletes` (`range_deletes.rs`); optimistic transactions against
//! RocksDB's and fjall's: `... -- --workload transactions` (`transactions.rs`).
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

use std::time::Instant;

use clap::Parser;
use engines::{
    open_fjall, open_ours, open_rocks, ours_options, read_syscalls, Engine, Fjall, Ours, Rocks,
};
use serde::Serialize;

mod cursor;
mod engines;
mod expiry;
mod expiry_rocks;
mod hold;
mod keyspaces;
mod latency;
mod multi;
mod phases;
mod prefix;
mod range_deletes;
mod range_scans;
use hold::hold;
use phases::{
    bare_probes, load, load_each, median, median_sample, phase_keys, read_phase, timed_parallel,
    Sample,
};
mod ranges;
#[cfg(feature = "rocksdb-plugin")]
mod rocks_filters;
mod scale;
mod scans;
mod transactions;

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
    /// Held phase: present keys drawn skewed, key number ⌊keys × u^S⌋ for u uniform in [0, 1)
    /// (1, the default: uniform; 4: a tenth of the keys get 56% of the gets). Key numbers are
    /// hashed into keys, so the hot keys lie in blocks spread over every table.
    #[arg(long, default_value_t = 1.0)]
    hold_skew: f64,
    /// `--workload expiry`: run only these parts (1: the bound, 2: tables expired whole,
    /// 3: live keys with an expiry, 4: RocksDB's TTL on part 1's stream); all by default.
    #[arg(long, value_delimiter = ',')]
    expiry_parts: Vec<u8>,
    /// `--workload range-deletes`: run only these parts (1: gets beside ranges, 2: deleting
    /// contiguous keys, 3: scans across a range); all by default.
    #[arg(long, value_delimiter = ',')]
    range_parts: Vec<u8>,
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
    /// Ours with `Options::filter_huge_pages` at `Always` (every filter block in huge-page
    /// memory; without it, the default: only levels allowed 1 GiB or more).
    #[arg(long)]
    ours_huge_pages: bool,
    /// Scale workload: at each size, also time absent gets and bare probes with the same
    /// store reopened with `Options::filter_huge_pages` at `Never` and at `Always`, interleaved
    /// per round.
    #[arg(long)]
    huge_pages_ab: bool,
    /// `gets` (point lookups, the default), `prefix` (prefix scans, `prefix.rs`),
    /// `rocksdb-filters` (RocksDB with its own and lsm-bloom's filters, `rocks_filters.rs`;
    /// feature `rocksdb-plugin`) or `scale` (our absent lookups at `--scale-keys` sizes, in
    /// units of memory latency, `scale.rs`).
    /// `scans` (range scans forward and reverse, `scans.rs`), `ranges` (empty short ranges,
    /// ours with and without range filters, `ranges.rs`), `latency` (writes and gets timed
    /// one by one under a sustained write load, every engine at its defaults, `latency.rs`),
    /// `cursor` (ours' scans through the iterator and through `DbCursor`, `cursor.rs`),
    /// `keyspaces` (ours' keyspaces against RocksDB's column families and fjall's keyspaces,
    /// `keyspaces.rs`), `expiry` (how soon expired data leaves our disk, and expiry's cost to
    /// reads, ours alone: `expiry.rs`).
    #[arg(long, default_value = "gets", value_parser = ["gets", "prefix", "rocksdb-filters", "scale", "scans", "ranges", "latency", "cursor", "keyspaces", "expiry", "range-deletes", "transactions"])]
    workload: String,
    /// Latency workload: seconds of the timed phase per engine, round and thread count.
    #[arg(long, default_value_t = 20.0)]
    latency_secs: f64,
    /// Latency workload: ours with memtables and tables of this many MiB and a level 1 four
    /// times as large (64: RocksDB's default shape), the rest at its defaults.
    #[arg(long)]
    latency_ours_mib: Option<u64>,
    /// Ranges workload: bits per key of ours' range filters.
    #[arg(long, default_value_t = 16.0)]
    range_bits: f64,
    /// Scale workload: store sizes in keys.
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    scale_keys: Vec<u64>,
    /// Scale workload: MiB the pointer chase (the unit) walks over.
    #[arg(long, default_value_t = 512)]
    chase_mib: u64,
    /// Prefix workload: distinct prefixes (`--keys / --prefixes` keys each).
    #[arg(long, default_value_t = 100_000)]
    prefixes: u64,
    /// Prefix, scans and ranges workloads: scans per phase, round and thread count.
    #[arg(long, default_value_t = 20_000)]
    scans: u64,
    /// Scans workload: MiB of fresh writes in the memtable for its `memtable` shape.
    #[arg(long, default_value_t = 3.5)]
    scan_fresh_mib: f64,
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
    if args.workload == "scans" {
        return scans::run(&args);
    }
    if args.workload == "ranges" {
        return ranges::run(&args);
    }
    if args.workload == "cursor" {
        return cursor::run(&args);
    }
    if args.workload == "expiry" {
        return expiry::run(&args);
    }
    if args.workload == "transactions" {
        return transactions::run(&args);
    }
    if args.workload == "range-deletes" {
        return range_deletes::run(&args);
    }
    if args.workload == "keyspaces" {
        return keyspaces::run(&args);
    }
    if args.workload == "latency" {
        return latency::run(&args);
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
