//! `--workload prefix`: prefix scans on keys `<16 hex digits>:<8 hex digits>` (`--prefixes`
//! prefixes of `--keys / --prefixes` keys each), in four stores loaded alike:
//!
//! - `lsm-bloom+prefix`: `prefix_extractor = fixed(17)` (the hex digits and the colon), so
//!   every table also holds a blocked Bloom over its prefixes (10 bits per prefix);
//! - `lsm-bloom`: the same store without a prefix rule (every overlapping table is read);
//! - `rocksdb+prefix`: `set_prefix_extractor(fixed 17)`, whole-key filtering on, the same
//!   10 bits/key Bloom, iterated with `prefix_same_as_start`;
//! - `fjall`: `Keyspace::prefix` (fjall has no prefix filter).
//!
//! Keys are loaded in an order that cycles through the prefixes, so each flushed table spans
//! nearly the whole key space and a prefix's keys are spread over many tables until
//! compaction gathers them. Phases, interleaved across engines per round (each round starting
//! with the next engine), at each thread count: scans of absent prefixes (never written) and of present prefixes (each must return
//! exactly its keys, checked). Then an untimed counting pass per engine, on the settled shape
//! and again after two more flushed tables that span every prefix: data blocks read per
//! absent-prefix scan, prefix filter checks and skips per scan, and for ours Σ FPR of the
//! prefix filters consulted (each level's checks × that level's mean expected FPR).

use std::path::Path;

use lsm_bloom::{Db, PrefixExtractor};
use rocksdb::statistics::{StatsLevel, Ticker};

use crate::{median, mix, timed_parallel, Args};

const PREFIX_LEN: usize = 17;

fn prefix(p: u64) -> [u8; PREFIX_LEN] {
    let mut out = [b':'; PREFIX_LEN];
    out[..16].copy_from_slice(format!("{:016x}", mix(p ^ 0xABCD)).as_bytes());
    out
}

fn key(p: u64, s: u64) -> Vec<u8> {
    let mut k = prefix(p).to_vec();
    k.extend_from_slice(format!("{s:08x}").as_bytes());
    k
}

/// A store that can scan a prefix.
trait PrefixEngine: Sync {
    fn name(&self) -> &'static str;
    fn put(&self, k: &[u8], v: &[u8]);
    /// Keys starting with `p`.
    fn scan(&self, p: &[u8]) -> u64;
    fn settle(&self);
    /// Writes the memtable to a table (no waiting for compactions).
    fn flush(&self);
    fn shape(&self) -> String;
    /// (data blocks read, prefix filter checks, prefix filter skips, Σ FPR of the checks)
    /// over `prefixes`, in an untimed pass.
    fn count(&self, prefixes: &[[u8; PREFIX_LEN]]) -> (f64, f64, f64, Option<f64>);
}

struct Ours(Db, &'static str);

impl PrefixEngine for Ours {
    fn name(&self) -> &'static str {
        self.1
    }
    fn put(&self, k: &[u8], v: &[u8]) {
        self.0.put(k, v).expect("put");
    }
    fn scan(&self, p: &[u8]) -> u64 {
        let mut n = 0;
        for item in self.0.scan_prefix(p).expect("scan") {
            item.expect("scan item");
            n += 1;
        }
        n
    }
    fn settle(&self) {
        self.0.flush().expect("flush");
        self.0.wait_for_compactions().expect("compactions");
    }
    fn flush(&self) {
        self.0.flush().expect("flush");
    }
    fn shape(&self) -> String {
        shape(
            &self
                .0
                .stats()
                .levels
                .iter()
                .map(|l| l.tables)
                .collect::<Vec<_>>(),
        )
    }
    fn count(&self, prefixes: &[[u8; PREFIX_LEN]]) -> (f64, f64, f64, Option<f64>) {
        let before = self.0.stats();
        for p in prefixes {
            assert_eq!(self.scan(p), 0);
        }
        let after = self.0.stats();
        let mut fpr_sum = 0.0;
        for (b, a) in before.levels.iter().zip(&after.levels) {
            if a.tables > 0 {
                let mean = a.prefix_expected_fpr_sum / a.tables as f64;
                fpr_sum += (a.prefix_checks - b.prefix_checks) as f64 * mean;
            }
        }
        let d = |f: fn(&lsm_bloom::db::stats::LevelStats) -> u64| {
            (f(&after.total) - f(&before.total)) as f64
        };
        (
            d(|l| l.scan_block_reads),
            d(|l| l.prefix_checks),
            d(|l| l.prefix_useful),
            (after.total.prefix_checks > before.total.prefix_checks).then_some(fpr_sum),
        )
    }
}

/// The gets workload's RocksDB (`crate::Rocks`), opened with a prefix extractor.
struct Rocks(crate::Rocks);

impl PrefixEngine for Rocks {
    fn name(&self) -> &'static str {
        "rocksdb+prefix"
    }
    fn put(&self, k: &[u8], v: &[u8]) {
        crate::Engine::put(&self.0, k, v);
    }
    fn scan(&self, p: &[u8]) -> u64 {
        let mut ro = rocksdb::ReadOptions::default();
        ro.set_prefix_same_as_start(true);
        let mut it = self.0.db.raw_iterator_opt(ro);
        it.seek(p);
        let mut n = 0;
        while let Some(k) = it.key() {
            if !k.starts_with(p) {
                break;
            }
            n += 1;
            it.next();
        }
        it.status().expect("rocksdb iterator");
        n
    }
    fn flush(&self) {
        self.0.db.flush().expect("flush");
    }
    fn settle(&self) {
        crate::Engine::settle(&self.0);
    }
    fn shape(&self) -> String {
        shape(&crate::Engine::tables_per_level(&self.0))
    }
    fn count(&self, prefixes: &[[u8; PREFIX_LEN]]) -> (f64, f64, f64, Option<f64>) {
        let t = |x| self.0.opts.get_ticker_count(x) as f64;
        self.0
            .opts
            .set_statistics_level(StatsLevel::ExceptDetailedTimers);
        let blocks = |t: &dyn Fn(Ticker) -> f64| {
            t(Ticker::BlockCacheDataMiss) + t(Ticker::BlockCacheDataHit)
        };
        // Seeks count their prefix filter checks in the *_SEEK_FILTERED / _FILTER_MATCH
        // tickers (BLOOM_FILTER_PREFIX_* are for point lookups).
        let filtered = |t: &dyn Fn(Ticker) -> f64| {
            t(Ticker::LastLevelSeekFiltered) + t(Ticker::NonLastLevelSeekFiltered)
        };
        let matched = |t: &dyn Fn(Ticker) -> f64| {
            t(Ticker::LastLevelSeekFilterMatch) + t(Ticker::NonLastLevelSeekFilterMatch)
        };
        let (b0, c0, u0) = (blocks(&t), filtered(&t) + matched(&t), filtered(&t));
        for p in prefixes {
            assert_eq!(self.scan(p), 0);
        }
        let (b1, c1, u1) = (blocks(&t), filtered(&t) + matched(&t), filtered(&t));
        self.0.opts.set_statistics_level(StatsLevel::DisableAll);
        (b1 - b0, c1 - c0, u1 - u0, None)
    }
}

struct Fjall(crate::Fjall);

impl PrefixEngine for Fjall {
    fn name(&self) -> &'static str {
        "fjall"
    }
    fn put(&self, k: &[u8], v: &[u8]) {
        self.0.ks.insert(k, v).expect("put");
    }
    fn scan(&self, p: &[u8]) -> u64 {
        let mut n = 0;
        for g in self.0.ks.prefix(p) {
            g.key().expect("fjall key");
            n += 1;
        }
        n
    }
    fn settle(&self) {
        crate::Engine::settle(&self.0);
    }
    fn flush(&self) {
        self.0.ks.rotate_memtable_and_wait().expect("flush");
    }
    fn shape(&self) -> String {
        let (l0, all) = (self.0.ks.l0_table_count(), self.0.ks.table_count());
        format!("tables: {l0} in L0, {} deeper", all - l0)
    }
    fn count(&self, _: &[[u8; PREFIX_LEN]]) -> (f64, f64, f64, Option<f64>) {
        (f64::NAN, f64::NAN, f64::NAN, None) // no read counters without its `metrics` feature
    }
}

fn shape(tables: &[u64]) -> String {
    let levels: Vec<String> = tables.iter().map(u64::to_string).collect();
    format!("tables per level {}", levels.join("/"))
}

fn open_all(dirs: &[tempfile::TempDir], args: &Args) -> Vec<Box<dyn PrefixEngine>> {
    let ours = |dir: &Path, rule: Option<PrefixExtractor>| {
        let opts = crate::ours_options(args).with_prefix_filters(Some(rule.map_or(
            lsm_bloom::PrefixFilters::None,
            lsm_bloom::PrefixFilters::with,
        )));
        Db::open(dir, opts).expect("open lsm-bloom")
    };
    let with = ours(
        dirs[0].path(),
        Some(PrefixExtractor::fixed(PREFIX_LEN as u32)),
    );
    let without = ours(dirs[1].path(), None);
    let r = crate::open_rocks(dirs[2].path(), args, |opts, table| {
        table.set_whole_key_filtering(true);
        opts.set_prefix_extractor(rocksdb::SliceTransform::create_fixed_prefix(PREFIX_LEN));
    });
    let f = crate::open_fjall(dirs[3].path(), args);
    r.opts.set_statistics_level(StatsLevel::DisableAll);
    vec![
        Box::new(Ours(with, "lsm-bloom+prefix")),
        Box::new(Ours(without, "lsm-bloom")),
        Box::new(Rocks(r)),
        Box::new(Fjall(f)),
    ]
}

/// Runs the prefix workload and prints its table.
pub fn run(args: &Args) {
    let per = (args.keys / args.prefixes).max(1);
    let n = per * args.prefixes;
    eprintln!(
        "prefix workload: {} prefixes x {per} keys ({n} keys of 25 bytes, {}-byte values); {} scans per phase, round and thread count; {} rounds; threads {:?}",
        args.prefixes, args.value_size, args.scans, args.rounds, args.threads
    );
    let dirs: Vec<_> = (0..4)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let engines = open_all(&dirs, args);
    let value = vec![b'v'; args.value_size];
    for e in &engines {
        let t0 = std::time::Instant::now();
        // Cycle through the prefixes: every memtable holds a slice of nearly every prefix.
        for i in 0..n {
            e.put(&key(i % args.prefixes, i / args.prefixes), &value);
        }
        e.settle();
        eprintln!(
            "{:>17}: loaded in {:.1} s, {}",
            e.name(),
            t0.elapsed().as_secs_f64(),
            e.shape()
        );
    }
    let absent: Vec<[u8; PREFIX_LEN]> = (0..args.scans)
        .map(|i| prefix(args.prefixes + mix(i) % (1 << 40)))
        .collect();
    let present: Vec<[u8; PREFIX_LEN]> = (0..args.scans)
        .map(|i| prefix(mix(i ^ 0x77) % args.prefixes))
        .collect();
    for &threads in &args.threads {
        let mut rates: Vec<[Vec<f64>; 2]> = engines.iter().map(|_| Default::default()).collect();
        for round in 0..args.rounds {
            // Each round starts with the next engine, so no engine always runs first (right
            // after another engine's phase, or the load).
            for i in (0..engines.len()).map(|i| (i + round) % engines.len()) {
                let (e, r) = (&engines[i], &mut rates[i]);
                for (phase, (prefixes, want)) in [(&absent, 0), (&present, per)].iter().enumerate()
                {
                    let secs = timed_parallel(prefixes, threads, |part| {
                        for p in part {
                            assert_eq!(e.scan(p), *want, "{}: wrong scan of {p:?}", e.name());
                        }
                    });
                    r[phase].push(prefixes.len() as f64 / secs);
                }
            }
        }
        println!(
            "\n{threads} thread(s), scans/s (median of {} rounds):",
            args.rounds
        );
        println!("| engine | absent prefix | present prefix |");
        println!("|---|---|---|");
        for (e, [a, p]) in engines.iter().zip(&rates) {
            println!(
                "| {} | {:.0} | {:.0} |",
                e.name(),
                median(a.clone()),
                median(p.clone())
            );
        }
        let ratio = |i: usize, j: usize, ph: usize| {
            median(rates[i][ph].clone()) / median(rates[j][ph].clone())
        };
        println!(
            "ours+prefix / ours: absent {:.2}, present {:.2}; ours+prefix / rocksdb+prefix: absent {:.2}, present {:.2}; / fjall: absent {:.2}, present {:.2}",
            ratio(0, 1, 0), ratio(0, 1, 1), ratio(0, 2, 0), ratio(0, 2, 1), ratio(0, 3, 0), ratio(0, 3, 1)
        );
    }
    counting_pass(&engines, &absent, "as settled");
    // Two more flushed tables of one new key per prefix each: level 0 now holds tables that
    // span every prefix, so each absent-prefix scan meets more filters.
    for e in &engines {
        for t in 0..2 {
            for p in 0..args.prefixes {
                e.put(&key(p, per + t), &value);
            }
            e.flush();
        }
        eprintln!("{:>17}: +2 flushed tables, {}", e.name(), e.shape());
    }
    counting_pass(&engines, &absent, "after 2 more flushes");
}

/// The untimed pass: data blocks read and filters consulted per absent-prefix scan.
fn counting_pass(engines: &[Box<dyn PrefixEngine>], absent: &[[u8; PREFIX_LEN]], shape: &str) {
    println!(
        "\nabsent-prefix scans, {shape}, untimed counting pass ({} scans):",
        absent.len()
    );
    println!("| engine | data blocks read / scan | prefix checks / scan | skipped / scan | Σ FPR of checked filters / scan | reads ÷ Σ FPR |");
    println!("|---|---|---|---|---|---|");
    let n = absent.len() as f64;
    for e in engines {
        let (reads, checks, useful, fpr) = e.count(absent);
        let fpr_cell = fpr.map_or("—".to_string(), |f| format!("{:.4}", f / n));
        let ratio = fpr.map_or("—".to_string(), |f| {
            format!("{:.2}", reads / f.max(1e-12))
        });
        println!(
            "| {} | {:.4} | {:.2} | {:.2} | {fpr_cell} | {ratio} |",
            e.name(),
            reads / n,
            checks / n,
            useful / n
        );
    }
}
