//! `--workload scans`: range scans in the three engines, loaded alike with `--keys` random
//! 16-byte keys (configured alike, or each at its defaults with `--defaults`).
//!
//! Scans, each from a random start key (a key number's key, present or not):
//! - `short`: seek, then read 10 entries;
//! - `long`: seek, then read 1,000 entries (`--scans / 10` of them per phase);
//! - `empty`: a range of 2^-40 of the key space (the start key and the same key with its
//!   fifth byte raised by one), which holds no key.
//!
//! each forward (from the start key up) and reverse (from it down), in three shapes: as the
//! load settled; with `--scan-fresh-mib` MiB of fresh writes in the memtable (new keys, no
//! flush); fully compacted. Every engine reads both key and value of each entry. Phases are
//! interleaved across engines per round (each round starting with the next engine) at each
//! thread count; medians of `--rounds` rounds. Then an untimed pass counts the data blocks
//! each scan kind reads, from the file or the block cache (ours: `scan_block_reads` +
//! `scan_block_cache_hits`; RocksDB: block-cache data hits and misses; fjall reports none).

use std::ops::Bound;

use rocksdb::statistics::{StatsLevel, Ticker};

use crate::{key, load_each, median, mix, open_fjall, open_ours, open_rocks, timed_parallel, Args};
use crate::{Engine, Fjall, Ours, Rocks};

/// Entries a short scan reads.
const SHORT: usize = 10;
/// Entries a long scan reads.
const LONG: usize = 1000;

/// What a scan reads.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Short,
    Long,
    Empty,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Short => "seek + 10",
            Kind::Long => "seek + 1,000",
            Kind::Empty => "empty range",
        }
    }
}

/// An engine that scans: entries read from `start` in `reverse` or forward order, at most
/// `limit`, stopping at `end` (exclusive forward, where a reverse scan starts below it).
pub(crate) trait Scan: Engine {
    fn scan(&self, start: &[u8], end: Option<&[u8]>, limit: usize, reverse: bool) -> usize;
    /// Data blocks read so far, where the engine counts them.
    fn blocks_read(&self) -> Option<f64>;
}

impl Scan for Ours {
    fn scan(&self, start: &[u8], end: Option<&[u8]>, limit: usize, reverse: bool) -> usize {
        let range = match (end, reverse) {
            (None, false) => (Bound::Included(start.to_vec()), Bound::Unbounded),
            (None, true) => (Bound::Unbounded, Bound::Included(start.to_vec())),
            (Some(e), _) => (Bound::Included(start.to_vec()), Bound::Excluded(e.to_vec())),
        };
        let it = self.0.scan(range).expect("scan");
        let count = |it: &mut dyn Iterator<Item = lsm_bloom::Result<(Vec<u8>, Vec<u8>)>>| {
            it.take(limit)
                .try_fold(0, |n, r| r.map(|_| n + 1))
                .expect("scan item")
        };
        if reverse {
            count(&mut it.rev())
        } else {
            count(&mut { it })
        }
    }
    fn blocks_read(&self) -> Option<f64> {
        let t = self.0.stats().total;
        Some((t.scan_block_reads + t.scan_block_cache_hits) as f64)
    }
}

impl Scan for Rocks {
    fn scan(&self, start: &[u8], end: Option<&[u8]>, limit: usize, reverse: bool) -> usize {
        let mut ro = rocksdb::ReadOptions::default();
        if let Some(e) = end {
            ro.set_iterate_lower_bound(start.to_vec());
            ro.set_iterate_upper_bound(e.to_vec());
        }
        let mut it = self.db.raw_iterator_opt(ro);
        match (end, reverse) {
            (Some(e), true) => it.seek_for_prev(e),
            (None, true) => it.seek_for_prev(start),
            (_, false) => it.seek(start),
        }
        let mut n = 0;
        while n < limit && it.valid() {
            let (k, v) = (it.key().expect("key"), it.value().expect("value"));
            // A reverse scan of a range starts below its (exclusive) end.
            if end.is_none_or(|e| k < e) {
                std::hint::black_box((k, v));
                n += 1;
            }
            if reverse {
                it.prev();
            } else {
                it.next();
            }
        }
        it.status().expect("rocksdb iterator");
        n
    }
    fn blocks_read(&self) -> Option<f64> {
        let t = |x| self.opts.get_ticker_count(x) as f64;
        Some(t(Ticker::BlockCacheDataMiss) + t(Ticker::BlockCacheDataHit))
    }
}

impl Scan for Fjall {
    fn scan(&self, start: &[u8], end: Option<&[u8]>, limit: usize, reverse: bool) -> usize {
        let take = |g: fjall::Guard| {
            std::hint::black_box(g.into_inner().expect("fjall entry"));
        };
        match (end, reverse) {
            (Some(e), false) => self.ks.range(start..e).take(limit).map(take).count(),
            (Some(e), true) => self.ks.range(start..e).rev().take(limit).map(take).count(),
            (None, false) => self.ks.range(start..).take(limit).map(take).count(),
            (None, true) => self.ks.range(..=start).rev().take(limit).map(take).count(),
        }
    }
    fn blocks_read(&self) -> Option<f64> {
        None
    }
}

/// A phase's start keys and, for empty ranges, their ends.
fn starts(n: u64, seed: u64) -> Vec<([u8; 16], [u8; 16])> {
    (0..n)
        .map(|i| {
            let mut s = key(mix(i ^ (seed << 40)));
            // The fifth byte below 0xff, so the end (it raised by one) is above the start.
            s[4] = s[4].min(0xfe);
            let mut e = s;
            e[4] += 1;
            (s, e)
        })
        .collect()
}

/// One timed phase: `starts` scanned on `threads` threads; scans per second. Every scan
/// from a present or absent key of a 2^128 key space finds `limit` entries unless it runs
/// off the end, and an empty range finds none: checked.
fn phase(
    e: &dyn Scan,
    starts: &[([u8; 16], [u8; 16])],
    kind: Kind,
    reverse: bool,
    threads: usize,
) -> f64 {
    let secs = timed_parallel(starts, threads, |part| {
        for (s, end) in part {
            match kind {
                Kind::Empty => assert_eq!(e.scan(s, Some(end), LONG, reverse), 0, "{}", e.name()),
                Kind::Short => {
                    std::hint::black_box(e.scan(s, None, SHORT, reverse));
                }
                Kind::Long => {
                    std::hint::black_box(e.scan(s, None, LONG, reverse));
                }
            }
        }
    });
    starts.len() as f64 / secs
}

/// Runs the scans workload and prints its tables.
pub fn run(args: &Args) {
    let dirs: Vec<_> = (0..3)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let (ours, rocks, fjall) = (
        open_ours(dirs[0].path(), args),
        open_rocks(dirs[1].path(), args, |_, _| {}),
        open_fjall(dirs[2].path(), args),
    );
    let engines: [&dyn Scan; 3] = [&ours, &rocks, &fjall];
    eprintln!(
        "scans workload: {} keys x (16-byte key, {}-byte value), {}; {} scans per phase ({} long), {} rounds, threads {:?}",
        args.keys,
        args.value_size,
        if args.defaults { "each engine at its defaults" } else { "configured alike" },
        args.scans,
        args.scans / 10,
        args.rounds,
        args.threads
    );
    load_each(&engines.map(|e| e as &dyn Engine), args);
    let fresh = ((args.scan_fresh_mib * (1 << 20) as f64) / (16 + args.value_size) as f64) as u64;
    let value = vec![b'f'; args.value_size];
    for shape in ["settled", "memtable", "compacted"] {
        match shape {
            "memtable" => {
                for e in engines {
                    for i in 0..fresh {
                        e.put(&key(args.keys + i), &value);
                    }
                }
            }
            "compacted" => {
                for e in engines {
                    e.compact_all();
                }
            }
            _ => {}
        }
        let tables: Vec<_> = engines
            .iter()
            .map(|e| (e.name(), e.tables_per_level()))
            .collect();
        println!("\n{shape}: tables per level {tables:?}");
        for &threads in &args.threads {
            run_shape(args, &engines, shape, threads);
        }
        count_blocks(&engines, &rocks, shape);
    }
}

fn run_shape(args: &Args, engines: &[&dyn Scan; 3], shape: &str, threads: usize) {
    println!(
        "\n{shape}, {threads} thread(s), scans/s (median of {} rounds):",
        args.rounds
    );
    println!("| scan | direction | lsm-bloom | rocksdb | fjall | ours ÷ best peer |");
    println!("|---|---|---|---|---|---|");
    for kind in [Kind::Short, Kind::Long, Kind::Empty] {
        for reverse in [false, true] {
            let n = if kind == Kind::Long {
                args.scans / 10
            } else {
                args.scans
            };
            let mut rates: [Vec<f64>; 3] = Default::default();
            for round in 0..args.rounds {
                let starts = starts(n, round as u64 + 1);
                for i in (0..3).map(|i| (i + round) % 3) {
                    rates[i].push(phase(engines[i], &starts, kind, reverse, threads));
                }
            }
            let m: Vec<f64> = rates.iter().map(|r| median(r.clone())).collect();
            println!(
                "| {} | {} | {:.0} | {:.0} | {:.0} | {:.2} |",
                kind.name(),
                if reverse { "reverse" } else { "forward" },
                m[0],
                m[1],
                m[2],
                m[0] / m[1].max(m[2])
            );
        }
    }
}

/// The untimed pass: data blocks each kind of scan reads, per scan.
fn count_blocks(engines: &[&dyn Scan; 3], rocks: &Rocks, shape: &str) {
    rocks
        .opts
        .set_statistics_level(StatsLevel::ExceptDetailedTimers);
    let starts = starts(2000, 99);
    println!(
        "\n{shape}: data blocks read per scan (untimed, {} scans each):",
        starts.len()
    );
    println!("| scan | direction | lsm-bloom | rocksdb | fjall |");
    println!("|---|---|---|---|---|");
    for kind in [Kind::Short, Kind::Long, Kind::Empty] {
        for reverse in [false, true] {
            let cells: Vec<String> = engines
                .iter()
                .map(|e| {
                    let before = e.blocks_read();
                    phase(*e, &starts, kind, reverse, 1);
                    before.zip(e.blocks_read()).map_or("—".into(), |(a, b)| {
                        format!("{:.2}", (b - a) / starts.len() as f64)
                    })
                })
                .collect();
            println!(
                "| {} | {} | {} |",
                kind.name(),
                if reverse { "reverse" } else { "forward" },
                cells.join(" | ")
            );
        }
    }
    rocks.opts.set_statistics_level(StatsLevel::DisableAll);
}
