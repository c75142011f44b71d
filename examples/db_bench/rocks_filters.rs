//! `--workload rocksdb-filters` (feature `rocksdb-plugin`): RocksDB with its own Bloom filter
//! against RocksDB with lsm-bloom's filters inside it, same keys and settings as the gets
//! workload (`rocks_options`: 16-byte keys, 4 KiB blocks, no compression, filters pinned),
//! interleaved rounds, medians.
//!
//! Variants, each its own RocksDB database loaded with the same keys:
//! - `builtin bloom 10`: `set_bloom_filter(10.0, false)`, the baseline;
//! - `lsm blocked 10`: `lsm_bloom.blocked:10`;
//! - `lsm ribbon @builtin FPR`: `lsm_bloom.ribbon:fpr:P`, P the built-in's FPR observed on the
//!   settled shape;
//! - `lsm budget @builtin mem`: `lsm_bloom.budget:blocked:B`, B the built-in's filter bits per
//!   filter entry (from the SSTs' filter blocks);
//! - `builtin budget @builtin mem`: `lsm_bloom.builtin_budget:bloom:B` — RocksDB's own Bloom,
//!   bits per level from the same plan (the public-header policy).
//!
//! Shapes: as settled after the load; then after two more flushes of `keys / 20` new keys each
//! (young level-0 tables above the settled levels, where a budget matters most); then fully
//! compacted. Per shape an untimed pass with RocksDB's statistics on
//! reads the tickers over the absent keys: observed FPR (full-filter positives ÷ checks),
//! data-block reads per absent get (block cache data hits + misses), and the filter blocks'
//! bytes from the SSTs (`inspect::rocksdb_sst`). Then the timed absent gets, statistics off.

use std::path::Path;
use std::time::Instant;

use lsm_bloom::inspect::rocksdb_sst::read_table_file;
use rocksdb::statistics::{StatsLevel, Ticker};

use super::{key, load, median, phase_keys, timed_parallel, Args, Rocks};
use crate::engines::rocks_options;

struct Variant {
    label: String,
    policy: Option<String>,
    rocks: Rocks,
    _dir: tempfile::TempDir,
}

/// What the untimed pass measured for one variant and shape.
#[derive(Clone, Copy, Default, serde::Serialize)]
struct Counted {
    fpr: f64,
    data_block_reads_per_get: f64,
    filter_bytes: u64,
    filter_entries: u64,
    tables: u64,
}

impl Counted {
    fn bits_per_key(&self) -> f64 {
        self.filter_bytes as f64 * 8.0 / self.filter_entries.max(1) as f64
    }
}

fn open(args: &Args, label: &str, policy: Option<&str>) -> Variant {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut opts = rocks_options(args, |_, _| {});
    if let Some(p) = policy {
        opts = lsm_bloom::rocksdb::with_filter(&mut opts, p).expect("plugin policy");
    }
    let db = rocksdb::DB::open(&opts, dir.path()).expect("open rocksdb");
    Variant {
        label: label.to_string(),
        policy: policy.map(str::to_string),
        rocks: Rocks { db, opts },
        _dir: dir,
    }
}

fn count(v: &Variant, absent: &[[u8; 16]], dir: &Path) -> Counted {
    let r = &v.rocks;
    let t = |x| r.opts.get_ticker_count(x);
    r.opts
        .set_statistics_level(StatsLevel::ExceptDetailedTimers);
    let before = [
        t(Ticker::BloomFilterUseful),
        t(Ticker::BloomFilterFullPositive),
        t(Ticker::BlockCacheDataHit),
        t(Ticker::BlockCacheDataMiss),
    ];
    for k in absent {
        assert!(
            r.db.get_pinned(k).expect("get").is_none(),
            "{}: absent key found",
            v.label
        );
    }
    let after = [
        t(Ticker::BloomFilterUseful),
        t(Ticker::BloomFilterFullPositive),
        t(Ticker::BlockCacheDataHit),
        t(Ticker::BlockCacheDataMiss),
    ];
    r.opts.set_statistics_level(StatsLevel::DisableAll);
    let d: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    let mut c = Counted {
        fpr: d[1] as f64 / (d[0] + d[1]).max(1) as f64,
        data_block_reads_per_get: (d[2] + d[3]) as f64 / absent.len().max(1) as f64,
        ..Counted::default()
    };
    for f in r.db.live_files().expect("live files") {
        let t = read_table_file(&dir.join(f.name.trim_start_matches('/'))).expect("sst");
        c.tables += 1;
        c.filter_entries += t.filter_entries.unwrap_or(0);
        c.filter_bytes += t.filters.iter().map(|f| f.bytes).sum::<u64>();
    }
    c
}

/// Runs the workload and prints its table (or JSON).
pub fn run(args: &Args) {
    lsm_bloom::rocksdb::register().expect("registering the lsm-bloom policies");
    let say = |s: String| {
        if !args.json {
            eprintln!("{s}");
        }
    };
    let absent: Vec<[u8; 16]> = phase_keys(args, 100, 99)
        .into_iter()
        .map(|(k, _)| k)
        .collect();

    // The baseline first: its FPR and filter memory size two of the others.
    let mut variants = vec![open(args, "builtin bloom 10", None)];
    let mut load_secs = Vec::new();
    let t0 = Instant::now();
    load(&variants[0].rocks, args, 1);
    load_secs.push(t0.elapsed().as_secs_f64());
    let base = count(&variants[0], &absent, variants[0]._dir.path());
    say(format!(
        "built-in Bloom settled: FPR {:.5}, {:.3} filter bits per entry",
        base.fpr,
        base.bits_per_key()
    ));
    let specs = [
        (
            "lsm blocked 10".to_string(),
            "lsm_bloom.blocked:10".to_string(),
        ),
        (
            "lsm ribbon @builtin FPR".to_string(),
            format!("lsm_bloom.ribbon:fpr:{}", base.fpr.max(1e-6)),
        ),
        (
            "lsm budget @builtin mem".to_string(),
            format!("lsm_bloom.budget:blocked:{:.3}", base.bits_per_key()),
        ),
        (
            "builtin budget @builtin mem".to_string(),
            format!("lsm_bloom.builtin_budget:bloom:{:.3}", base.bits_per_key()),
        ),
    ];
    for (label, policy) in &specs {
        let v = open(args, label, Some(policy));
        let t0 = Instant::now();
        load(&v.rocks, args, 1);
        load_secs.push(t0.elapsed().as_secs_f64());
        say(format!(
            "{label} ({policy}) loaded in {:.1} s",
            load_secs.last().copied().unwrap_or(0.0)
        ));
        variants.push(v);
    }

    let mut rows = Vec::new();
    for shape in ["settled", "+2 L0 flushes", "compacted"] {
        if shape == "+2 L0 flushes" {
            // Recent writes: two flushes of keys/20 new keys each, as a store serving writes
            // has young level-0 tables above its settled levels.
            let value = vec![b'v'; args.value_size];
            for batch in 0..2 {
                let first = args.keys + batch * (args.keys / 20);
                for v in &variants {
                    for i in first..first + args.keys / 20 {
                        v.rocks.db.put(key(i), &value).expect("put");
                    }
                    v.rocks.db.flush().expect("flush");
                }
            }
            for v in &variants {
                super::Engine::settle(&v.rocks);
            }
        }
        if shape == "compacted" {
            for v in &variants {
                super::Engine::compact_all(&v.rocks);
            }
        }
        let counted: Vec<Counted> = variants
            .iter()
            .map(|v| count(v, &absent, v._dir.path()))
            .collect();
        for (v, c) in variants.iter().zip(&counted) {
            say(format!(
                "{shape} {}: tables per level {:?}, FPR {:.5}, data blocks/get {:.5}, filter {} bytes ({:.3} bits/entry)",
                v.label,
                super::Engine::tables_per_level(&v.rocks),
                c.fpr,
                c.data_block_reads_per_get,
                c.filter_bytes,
                c.bits_per_key()
            ));
        }
        for &threads in &args.threads {
            let mut samples: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
            for round in 0..args.rounds {
                let keys: Vec<[u8; 16]> =
                    phase_keys(args, 100, 1 << 24 | (round as u64) << 8 | threads as u64)
                        .into_iter()
                        .map(|(k, _)| k)
                        .collect();
                // Each round starts with the next variant, so none is always first.
                for j in 0..variants.len() {
                    let i = (round + j) % variants.len();
                    let db = &variants[i].rocks.db;
                    let secs = timed_parallel(&keys, threads, |part| {
                        for k in part {
                            assert!(db.get_pinned(k).expect("get").is_none());
                        }
                    });
                    let ops = keys.len() as f64 / secs;
                    say(format!(
                        "  {shape} {threads}T round {round} {}: {ops:.0} absent gets/s",
                        variants[i].label
                    ));
                    samples[i].push(ops);
                }
            }
            // The ratio to the built-in is the median of each round's own ratio: the machine's
            // drift between rounds then cancels out.
            let ratios: Vec<f64> = samples
                .iter()
                .map(|s| median(s.iter().zip(&samples[0]).map(|(a, b)| a / b).collect()))
                .collect();
            let ops: Vec<f64> = samples.into_iter().map(median).collect();
            rows.push((shape, threads, ops, ratios, counted.clone()));
        }
    }

    if args.json {
        let out = serde_json::json!({
            "variants": variants.iter().map(|v| serde_json::json!({
                "label": v.label, "policy": v.policy })).collect::<Vec<_>>(),
            "load_secs": load_secs,
            "rows": rows.iter().map(|(shape, threads, ops, ratios, counted)| serde_json::json!({
                "shape": shape, "threads": threads, "absent_gets_per_sec": ops,
                "ratio_to_builtin": ratios,
                "counted": counted,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&out).expect("json"));
        return;
    }
    println!(
        "keys {} ({}-byte values), memtable {} MiB, block cache {} MiB, {} absent gets per round, {} rounds (medians)",
        args.keys, args.value_size, args.memtable_mib, args.block_cache_mib, args.ops, args.rounds
    );
    println!("\n| variant | policy | load s | shape | threads | absent gets/s | ÷ built-in (median of per-round ratios) | observed FPR | data-block reads / absent get | ÷ built-in | filter bytes | ÷ built-in | bits/entry |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (shape, threads, ops, ratios, counted) in &rows {
        for (i, v) in variants.iter().enumerate() {
            let c = &counted[i];
            let b = &counted[0];
            println!(
                "| {} | `{}` | {:.1} | {shape} | {threads} | {:.0} | {:.2} | {:.5} | {:.5} | {:.2} | {} | {:.2} | {:.2} |",
                v.label,
                v.policy.as_deref().unwrap_or("bloomfilter:10"),
                load_secs[i],
                ops[i],
                ratios[i],
                c.fpr,
                c.data_block_reads_per_get,
                c.data_block_reads_per_get / b.data_block_reads_per_get.max(1e-12),
                c.filter_bytes,
                c.filter_bytes as f64 / b.filter_bytes.max(1) as f64,
                c.bits_per_key()
            );
        }
    }
}
