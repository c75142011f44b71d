//! Range filters inside the filter budget, measured: the same filter memory spent as a point
//! budget plus a fixed range policy on every table (`RangeFilters::On`), or as one budget that
//! plans point and range runs together (`RangeFilters::InBudget`). Data-block reads per
//! absent-key get and per empty short range, counted, not timed.
//!
//! `cargo run --release --example range_budget -- [--keys 1000000] [--point-bits 10]
//!  [--range-bits 16] [--max-range 32] [--lookups 100000] [--rounds 3]`
//!
//! Two stores are loaded alike with `--keys` 16-byte random keys and 32-byte values, no block
//! cache (every data block a query looks at is a counted file read), flushing and waiting for
//! compactions every 50,000 keys so both end in the same shape:
//! - **split**: `Filters::Budget` of `--point-bits` bits/key, and range filters of
//!   `--range-bits` bits/key in every table;
//! - **one budget**: `Filters::Budget` of `--point-bits + --range-bits` bits/key, with range
//!   filters in it for ranges of up to `--max-range` points.
//!
//! Then, settled and with 2 more level-0 tables, rounds of absent gets and of empty ranges of
//! `--max-range` points (`contains_range` over keys whose first 8 bytes lie in `[s, s + ℓ)`, `s`
//! uniform or right after a present key's), a new sample each round, medians reported: reads
//! per query, the filters' bits/key held, and the model's expected reads from the filters held.

use std::time::Instant;

use clap::Parser;
use lsm_bloom::table::RangeFilterState;
use lsm_bloom::{Db, FilterBudget, Filters, Options, RangeFilters, RangePolicy};

#[path = "common/budget_load.rs"]
mod budget_load;
use budget_load::{key, load, median, mix, model, point_rate, CHUNK};

#[derive(Parser)]
#[command(about = "Reads per absent get and empty range: range filters fixed or in the budget")]
struct Args {
    /// Keys loaded.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// The point filters' budget in the split store, bits/key.
    #[arg(long, default_value_t = 10.0)]
    point_bits: f64,
    /// The split store's range filters, bits/key (the one budget adds them to its own).
    #[arg(long, default_value_t = 16.0)]
    range_bits: f64,
    /// The longest range the range filters answer, and the length of the ranges asked.
    #[arg(long, default_value_t = 32)]
    max_range: u64,
    /// Queries of each kind per store per round.
    #[arg(long, default_value_t = 100_000)]
    lookups: u64,
    /// Rounds (medians reported).
    #[arg(long, default_value_t = 3)]
    rounds: u64,
}

struct Store {
    name: &'static str,
    db: Db,
    _dir: tempfile::TempDir,
    /// Reads per query, per round: absent gets, empty ranges uniform, after a key.
    reads: [Vec<f64>; 3],
}

impl Store {
    fn open(name: &'static str, filters: Filters, ranges: RangeFilters) -> lsm_bloom::Result<Self> {
        let dir = tempfile::tempdir().map_err(|e| lsm_bloom::Error::io("temp dir", e))?;
        let opts = Options::default()
            .with_filters(Some(filters))
            .with_range_filters(Some(ranges))
            .with_block_cache_bytes(0);
        Ok(Store {
            name,
            db: Db::open(dir.path(), opts)?,
            _dir: dir,
            reads: Default::default(),
        })
    }

    /// One round: `n` queries of each kind, sample `round`; reads per query pushed.
    fn round(&mut self, args: &Args, round: u64) -> lsm_bloom::Result<()> {
        let reads = |db: &Db| {
            let t = db.stats().total;
            t.data_block_reads + t.scan_block_reads
        };
        let stream = 1 + round;
        let before = reads(&self.db);
        for i in 0..args.lookups {
            if self.db.get(key(stream, i))?.is_some() {
                return Err(lsm_bloom::Error::InvalidArgument(format!(
                    "{}: absent key {i} of stream {stream} was found",
                    self.name
                )));
            }
        }
        self.reads[0].push((reads(&self.db) - before) as f64 / args.lookups as f64);
        for (q, after_key) in [(1, false), (2, true)] {
            let before = reads(&self.db);
            for i in 0..args.lookups {
                let start = if after_key {
                    let k = key(0, mix(i ^ round << 40) % args.keys);
                    u64::from_be_bytes(k[..8].try_into().expect("8 bytes")).wrapping_add(1)
                } else {
                    mix(i ^ (round + 77) << 40)
                };
                let Some(end) = start.checked_add(args.max_range) else {
                    continue;
                };
                let lo = start.to_be_bytes().to_vec();
                let hi = end.to_be_bytes().to_vec();
                // At 10^7 keys one such range in ~10^11 holds a key: a "yes" is a bug.
                if self.db.contains_range(lo..hi)? {
                    return Err(lsm_bloom::Error::InvalidArgument(format!(
                        "{}: the range of {} points from {start} held a key",
                        self.name, args.max_range
                    )));
                }
            }
            self.reads[q].push((reads(&self.db) - before) as f64 / args.lookups as f64);
        }
        Ok(())
    }
}

fn report(args: &Args, phase: &str, stores: &[Store]) {
    println!(
        "\n{} keys, {phase}, ranges of {} points",
        args.keys, args.max_range
    );
    println!("| store | tables per level | point bits/key held | range bits/key held | model reads/get | model reads/range | reads/absent get | reads/empty range, uniform | reads/empty range, after a key | get + range (after a key) |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for s in stores {
        let st = s.db.stats();
        let keys: u64 =
            s.db.levels()
                .iter()
                .flatten()
                .map(|t| t.properties().entries)
                .sum();
        let per_key = |bytes: u64| bytes as f64 * 8.0 / keys.max(1) as f64;
        let point_bits = per_key(st.total.filter_bytes);
        let range_bits = per_key(st.total.range_filter_bytes);
        let shape: Vec<String> =
            s.db.levels()
                .iter()
                .enumerate()
                .filter(|(_, ts)| !ts.is_empty())
                .map(|(l, ts)| format!("L{l}:{}", ts.len()))
                .collect();
        let len = args.max_range;
        let range_model = model(&s.db, |t| match t.range_filter() {
            RangeFilterState::Valid(f) => f.expected_rate(len),
            _ => 1.0,
        });
        let m: Vec<f64> = s.reads.iter().map(|r| median(r)).collect();
        println!(
            "| {} | {} | {point_bits:.2} | {range_bits:.2} | {:.5} | {range_model:.5} | {:.5} | {:.5} | {:.5} | {:.5} |",
            s.name,
            shape.join(" "),
            model(&s.db, point_rate),
            m[0],
            m[1],
            m[2],
            m[0] + m[2]
        );
    }
    if let [split, one] = stores {
        let sum = |s: &Store| median(&s.reads[0]) + median(&s.reads[2]);
        println!(
            "one budget ÷ split, reads per (get + range after a key): {:.3}",
            sum(one) / sum(split)
        );
    }
}

fn main() -> lsm_bloom::Result<()> {
    let args = Args::parse();
    let policy = RangePolicy::bits_per_key(args.range_bits, args.max_range)
        .map_err(|e| lsm_bloom::Error::InvalidArgument(format!("--range-bits/--max-range: {e}")))?;
    println!(
        "range filters fixed or in the budget: 16-byte random keys, 32-byte values, no block cache; split = a {} bits/key budget + {} bits/key range filters, one budget = {} bits/key for both; {} queries of each kind per store per round, median of {} rounds",
        args.point_bits,
        args.range_bits,
        args.point_bits + args.range_bits,
        args.lookups,
        args.rounds
    );
    let mut stores = [
        Store::open(
            "split",
            Filters::Budget(FilterBudget::bits_per_key(args.point_bits)),
            RangeFilters::On(policy),
        )?,
        Store::open(
            "one budget",
            Filters::Budget(FilterBudget::bits_per_key(
                args.point_bits + args.range_bits,
            )),
            RangeFilters::InBudget {
                max_range: args.max_range,
            },
        )?,
    ];
    for s in &stores {
        let t = Instant::now();
        load(&s.db, 0, args.keys)?;
        eprintln!("  {}: loaded in {:.1} s", s.name, t.elapsed().as_secs_f64());
    }
    for (phase, extra) in [("settled", 0u64), ("+2 L0", 2)] {
        for s in &mut stores {
            // `extra` flushes of CHUNK new keys (a stream no query uses).
            load(&s.db, 1_000, extra * CHUNK)?;
            s.reads = Default::default();
        }
        for round in 0..args.rounds {
            for s in &mut stores {
                s.round(&args, round)?;
            }
        }
        report(&args, phase, &stores);
        if let Some(plan) = stores[1].db.stats().filter_budget {
            println!("one budget's plan:\n{plan}");
        }
    }
    Ok(())
}
