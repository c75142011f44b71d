//! `--workload ranges`: scans of short ranges that hold no key, the queries range filters
//! exist for, in four engines loaded alike with `--keys` random 16-byte keys: ours with range
//! filters (`Options::range_filters`, `--range-bits` bits/key, ranges up to 1,024 points),
//! ours without, RocksDB and fjall (configured alike, or each at its defaults with
//! `--defaults`; neither has a range filter).
//!
//! A range of `ℓ` points is the keys whose first 8 bytes, read big-endian, lie in
//! `[s, s + ℓ)`: the scan `[s ‖ 0^8, s + ℓ)` (the end as 8 bytes: every 16-byte key below it
//! has its first 8 bytes below `s + ℓ`). (A table's keys share no first byte at
//! these sizes, so its range filter's points are those 8 bytes.) `s` is drawn uniformly, or
//! right after a present key (its first 8 bytes plus one: the queries on which range filters
//! other than Grafite degrade). Every such range is empty (checked). Beside them: non-empty
//! short scans (seek to a present key, read 10) and present and absent gets, where range
//! filters must cost nothing.
//!
//! Phases are interleaved across engines per round (each round starting with the next
//! engine), at each thread count; medians of `--rounds` rounds; as the load settled, then
//! fully compacted. Then an untimed pass counts data blocks read per scan (ours: from the
//! file or the block cache; RocksDB: block-cache data hits and misses; fjall reports none)
//! and ours' observed false-positive rate per range length, beside the bound `ℓ / 2^(B − 2)`.

use rocksdb::statistics::StatsLevel;

use crate::scans::Scan;
use crate::{key, median, mix, open_fjall, open_ours, open_rocks, ours_options, Args};
use crate::{load_each, timed_parallel, Engine, Ours};

/// The longest range ours' range filters answer, in points.
const MAX_RANGE: u64 = 1024;
/// Range lengths asked, in points.
const LENGTHS: [u64; 4] = [1, 8, 32, 1024];

/// Ours with range filters: `Ours` under another name.
struct Ranged(Ours);

impl Engine for Ranged {
    fn name(&self) -> &'static str {
        "lsm-bloom+rf"
    }
    fn put(&self, k: &[u8], v: &[u8]) {
        self.0.put(k, v);
    }
    fn get(&self, k: &[u8]) -> bool {
        self.0.get(k)
    }
    fn settle(&self) {
        self.0.settle();
    }
    fn compact_all(&self) {
        self.0.compact_all();
    }
    fn tables_per_level(&self) -> Vec<u64> {
        self.0.tables_per_level()
    }
    fn observed_fpr(&self, keys: &[[u8; 16]]) -> Option<f64> {
        self.0.observed_fpr(keys)
    }
    fn table_bytes(&self) -> u64 {
        self.0.table_bytes()
    }
}

impl Scan for Ranged {
    fn scan(&self, start: &[u8], end: Option<&[u8]>, limit: usize, reverse: bool) -> usize {
        self.0.scan(start, end, limit, reverse)
    }
    fn blocks_read(&self) -> Option<f64> {
        self.0.blocks_read()
    }
}

/// What one timed phase runs.
#[derive(Clone, Copy, PartialEq)]
enum Query {
    /// An empty range of this many points; `after`: starting right after a present key.
    Empty { len: u64, after: bool },
    /// Seek to a present key, read 10 entries.
    Short,
    /// A get of a present key.
    Present,
    /// A get of an absent key.
    Absent,
}

impl Query {
    fn name(self) -> String {
        match self {
            Query::Empty { len, after: false } => format!("empty, ℓ = {len}, uniform"),
            Query::Empty { len, after: true } => format!("empty, ℓ = {len}, after a key"),
            Query::Short => "seek + 10".into(),
            Query::Present => "get, present".into(),
            Query::Absent => "get, absent".into(),
        }
    }

    fn all() -> Vec<Query> {
        let empty = LENGTHS
            .iter()
            .flat_map(|&len| [false, true].map(|after| Query::Empty { len, after }));
        empty
            .chain([Query::Short, Query::Present, Query::Absent])
            .collect()
    }
}

/// A phase's keys: for an empty range its start and end, else the key (and the end unused).
fn inputs(q: Query, n: u64, keys: u64, seed: u64) -> Vec<([u8; 16], [u8; 8])> {
    (0..n)
        .map(|i| {
            let x = mix(i ^ (seed << 40));
            let present = key(x % keys);
            match q {
                Query::Empty { len, after } => {
                    let s = if after {
                        u64::from_be_bytes(present[..8].try_into().expect("8 bytes")) + 1
                    } else {
                        mix(x ^ 0xE3)
                    }
                    .min(u64::MAX - len);
                    let mut start = [0u8; 16];
                    start[..8].copy_from_slice(&s.to_be_bytes());
                    (start, (s + len).to_be_bytes())
                }
                Query::Absent => (key(crate::ABSENT + x % keys), [0; 8]),
                Query::Short | Query::Present => (present, [0; 8]),
            }
        })
        .collect()
}

/// One timed phase on `threads` threads: operations per second. Empty ranges are checked
/// empty, present gets found, absent ones not.
fn phase(e: &dyn Scan, q: Query, items: &[([u8; 16], [u8; 8])], threads: usize) -> f64 {
    let secs = timed_parallel(items, threads, |part| {
        for (k, end) in part {
            match q {
                Query::Empty { .. } => assert_eq!(e.scan(k, Some(&end[..]), 10, false), 0),
                Query::Short => {
                    std::hint::black_box(e.scan(k, None, 10, false));
                }
                Query::Present => assert!(e.get(k), "{}: present key missing", e.name()),
                Query::Absent => assert!(!e.get(k), "{}: absent key found", e.name()),
            }
        }
    });
    items.len() as f64 / secs
}

/// Runs the ranges workload and prints its tables.
pub fn run(args: &Args) {
    let dirs: Vec<_> = (0..4)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let policy = lsm_bloom::RangePolicy::bits_per_key(args.range_bits, MAX_RANGE)
        .expect("--range-bits: 3 to 50");
    let ranged_opts =
        ours_options(args).with_range_filters(Some(lsm_bloom::RangeFilters::On(policy)));
    let ranged = Ranged(Ours(
        lsm_bloom::Db::open(dirs[0].path(), ranged_opts).expect("open lsm-bloom"),
    ));
    let (ours, rocks, fjall) = (
        open_ours(dirs[1].path(), args),
        open_rocks(dirs[2].path(), args, |_, _| {}),
        open_fjall(dirs[3].path(), args),
    );
    let engines: [&dyn Scan; 4] = [&ranged, &ours, &rocks, &fjall];
    eprintln!(
        "ranges workload: {} keys x (16-byte key, {}-byte value), {}; ours+rf: range filters of {} bits/key up to {MAX_RANGE} points; {} queries per phase, {} rounds, threads {:?}",
        args.keys,
        args.value_size,
        if args.defaults { "each engine at its defaults" } else { "configured alike" },
        args.range_bits,
        args.scans,
        args.rounds,
        args.threads
    );
    load_each(&engines.map(|e| e as &dyn Engine), args);
    for shape in ["settled", "compacted"] {
        if shape == "compacted" {
            for e in engines {
                e.compact_all();
            }
        }
        let tables: Vec<_> = engines
            .iter()
            .map(|e| (e.name(), e.tables_per_level()))
            .collect();
        println!("\n{shape}: tables per level {tables:?}");
        for &threads in &args.threads {
            run_shape(args, &engines, shape, threads);
        }
        count(args, &engines, &ranged, &rocks, shape);
    }
}

fn run_shape(args: &Args, engines: &[&dyn Scan; 4], shape: &str, threads: usize) {
    println!(
        "\n{shape}, {threads} thread(s), operations/s (median of {} rounds):",
        args.rounds
    );
    println!("| query | lsm-bloom+rf | lsm-bloom | rocksdb | fjall | +rf ÷ best peer | +rf ÷ lsm-bloom |");
    println!("|---|---|---|---|---|---|---|");
    for q in Query::all() {
        let mut rates: [Vec<f64>; 4] = Default::default();
        for round in 0..args.rounds {
            let items = inputs(q, args.scans, args.keys, round as u64 + 1);
            for i in (0..4).map(|i| (i + round) % 4) {
                rates[i].push(phase(engines[i], q, &items, threads));
            }
        }
        let m: Vec<f64> = rates.iter().map(|r| median(r.clone())).collect();
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.3} |",
            q.name(),
            m[0],
            m[1],
            m[2],
            m[3],
            m[0] / m[2].max(m[3]),
            m[0] / m[1]
        );
    }
}

/// The untimed pass: data blocks read per query, and ours' observed rate on each kind of
/// empty range beside its bound.
fn count(
    args: &Args,
    engines: &[&dyn Scan; 4],
    ranged: &Ranged,
    rocks: &crate::Rocks,
    shape: &str,
) {
    rocks
        .opts
        .set_statistics_level(StatsLevel::ExceptDetailedTimers);
    let n = args.scans.max(2000);
    println!("\n{shape}: data blocks read per query (untimed, {n} each), and lsm-bloom+rf's range filters:");
    println!("| query | lsm-bloom+rf | lsm-bloom | rocksdb | fjall | +rf checks per query | +rf observed rate | bound |");
    println!("|---|---|---|---|---|---|---|---|");
    for q in Query::all()
        .into_iter()
        .filter(|q| matches!(q, Query::Empty { .. } | Query::Short))
    {
        let items = inputs(q, n, args.keys, 99);
        let before = ranged.0 .0.stats().total;
        let cells: Vec<String> = engines
            .iter()
            .map(|e| {
                let before = e.blocks_read();
                phase(*e, q, &items, 1);
                before.zip(e.blocks_read()).map_or("—".into(), |(a, b)| {
                    format!("{:.3}", (b - a) / items.len() as f64)
                })
            })
            .collect();
        let after = ranged.0 .0.stats().total;
        let checks = after.range_checks - before.range_checks;
        let useful = after.range_useful - before.range_useful;
        let fp = after.range_false_positives - before.range_false_positives;
        let (rate, bound) = match q {
            Query::Empty { len, .. } => (
                format!("{:.4}%", fp as f64 / (useful + fp).max(1) as f64 * 100.0),
                format!(
                    "{:.4}%",
                    len as f64 / (args.range_bits - 2.0).exp2() * 100.0
                ),
            ),
            _ => ("—".into(), "—".into()),
        };
        println!(
            "| {} | {} | {:.2} | {rate} | {bound} |",
            q.name(),
            cells.join(" | "),
            checks as f64 / items.len() as f64
        );
    }
    rocks.opts.set_statistics_level(StatsLevel::DisableAll);
}
