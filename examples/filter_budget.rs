//! Filter memory as a budget, measured: data-block reads per absent-key get when the same filter
//! memory is spent uniformly (every table the same bits/key) or allocated per level by
//! `Options::filter_budget` (blocked Bloom only, or blocked above the largest level and Ribbon
//! from it down).
//!
//! `cargo run --release --example filter_budget -- [--keys 1000000,10000000]
//!  [--bits 5,8,10] [--lookups 200000] [--rounds 3] [--memtable-mib 8] [--level1-mib 64]`
//!
//! For each key count it loads one store per (bits/key, configuration) with 16-byte random keys
//! and 32-byte values, with the store's default shape options and no block cache, so every data
//! block a get looks at is a counted file read. Keys go in batches of 1,000; after every 50,000
//! keys (under one memtable) the loader flushes and waits for compactions, so every
//! store gets the same flushes and the same compactions and ends in the same shape, level-0
//! tables included (left to background timing, one store ended with 3 L0 tables and its twin
//! with none, which moved reads more than the filters did).
//!
//! Two shapes are measured: **settled** (right after that load: level 0 compacted away, so a
//! lookup probes one table per level) and **+2 L0** (then 2 more flushes of 50,000 new keys
//! each, which stay on level 0 below the compaction trigger of 4: what a store taking writes
//! has about half the time). It then runs rounds
//! of absent-key gets (16-byte random keys never written, a new set each round), interleaved
//! over the stores, and reports medians: reads per get, the filters' bits/key actually held, the
//! model's expected reads, and the saving against uniform at the same budget. Reads are counts,
//! not times, so machine noise does not move them; the rounds vary the key sample.

use std::time::Instant;

use clap::Parser;
use lsm_bloom::table::FilterState;
use lsm_bloom::{Db, FilterBudget, FilterKind, FilterPolicy, Filters, Options};

#[path = "common/budget_load.rs"]
mod budget_load;
use budget_load::{key, load, median, model, point_rate, CHUNK};

#[derive(Parser)]
#[command(about = "Reads per absent get: filter budget vs uniform bits/key")]
struct Args {
    /// Key counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1000000,10000000")]
    keys: Vec<u64>,
    /// Average bits/key budgets, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "5,8,10")]
    bits: Vec<f64>,
    /// Absent-key gets per store per round.
    #[arg(long, default_value_t = 200_000)]
    lookups: u64,
    /// Rounds (medians reported).
    #[arg(long, default_value_t = 3)]
    rounds: u64,
    /// Memtable size in MiB (store default 8).
    #[arg(long, default_value_t = 8)]
    memtable_mib: usize,
    /// Level-1 size in MiB (store default 64).
    #[arg(long, default_value_t = 64)]
    level1_mib: u64,
}

#[derive(Clone, Copy, PartialEq)]
enum Config {
    Uniform,
    Budget,
    BudgetMixed,
}

impl Config {
    fn name(self) -> &'static str {
        match self {
            Config::Uniform => "uniform blocked",
            Config::Budget => "budget, blocked",
            Config::BudgetMixed => "budget, blocked+ribbon",
        }
    }
}

struct Store {
    bits: f64,
    config: Config,
    db: Db,
    _dir: tempfile::TempDir,
    load_secs: f64,
    reads: Vec<f64>,
    bits_held: f64,
    model: f64,
    shape: String,
}

fn open(args: &Args, bits: f64, config: Config) -> lsm_bloom::Result<(Db, tempfile::TempDir)> {
    let dir = tempfile::tempdir().map_err(|e| lsm_bloom::Error::io("temp dir", e))?;
    let mut opts = Options::default()
        .with_memtable_size(args.memtable_mib << 20)
        .with_level1_max_bytes(args.level1_mib << 20)
        .with_block_cache_bytes(0);
    match config {
        Config::Uniform => {
            opts.filters = Some(Filters::fixed(FilterPolicy::bits_per_key(
                FilterKind::Blocked,
                bits,
            )));
        }
        Config::Budget => {
            opts.filters = Some(Filters::Budget(
                FilterBudget::bits_per_key(bits).with_kind(FilterKind::Blocked),
            ));
        }
        Config::BudgetMixed => {
            opts.filters = Some(Filters::Budget(FilterBudget::bits_per_key(bits)));
        }
    }
    Ok((Db::open(dir.path(), opts)?, dir))
}

/// Tables per level, with how many have no filter and their kinds' mean bits/key.
fn shape(db: &Db) -> String {
    db.levels()
        .iter()
        .enumerate()
        .filter(|(_, ts)| !ts.is_empty())
        .map(|(level, ts)| {
            let none = ts
                .iter()
                .filter(|t| !matches!(t.filter(), FilterState::Valid(_)))
                .count();
            let mut kinds: Vec<&str> = ts
                .iter()
                .filter_map(|t| match t.filter() {
                    FilterState::Valid(f) => Some(f.header().kind.name()),
                    _ => None,
                })
                .collect();
            kinds.sort_unstable();
            kinds.dedup();
            let unfiltered = if none > 0 {
                format!(", {none} unfiltered")
            } else {
                String::new()
            };
            format!("L{level}:{} ({}{unfiltered})", ts.len(), kinds.join("+"))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn report(n: u64, phase: &str, stores: &[Store]) {
    println!("\n{n} keys, {phase}");
    println!("| bits/key budget | configuration | tables per level | filter bits/key held | load s | model reads/get | reads/get (median) | vs uniform |");
    println!("|---|---|---|---|---|---|---|---|");
    for s in stores {
        let uniform = stores
            .iter()
            .find(|u| u.bits == s.bits && u.config == Config::Uniform)
            .map_or(f64::NAN, |u| median(&u.reads));
        let mine = median(&s.reads);
        println!(
            "| {} | {} | {} | {:.2} | {:.1} | {:.5} | {:.5} | {} |",
            s.bits,
            s.config.name(),
            s.shape,
            s.bits_held,
            s.load_secs,
            s.model,
            mine,
            if s.config == Config::Uniform {
                "—".to_string()
            } else {
                format!("{:+.0}%", (mine / uniform - 1.0) * 100.0)
            }
        );
    }
    // Memory for the same reads: the uniform bits/key (log-linear between the measured uniform
    // points) whose reads equal each budget's.
    let mut uniform: Vec<(f64, f64)> = stores
        .iter()
        .filter(|s| s.config == Config::Uniform)
        .map(|s| (s.bits_held, median(&s.reads)))
        .collect();
    uniform.sort_by(|a, b| a.0.total_cmp(&b.0));
    println!("same reads, less memory? uniform bits/key that match each budget's reads:");
    for s in stores.iter().filter(|s| s.config != Config::Uniform) {
        let target = median(&s.reads);
        let needed = uniform.windows(2).find_map(|w| {
            let ((b0, r0), (b1, r1)) = (w[0], w[1]);
            (r0 >= target && target >= r1 && r0 > r1)
                .then(|| b0 + (b1 - b0) * (r0.ln() - target.ln()) / (r0.ln() - r1.ln()))
        });
        match needed {
            Some(u) => println!(
                "  {} at {}: holds {:.2} bits/key, uniform needs {u:.2}: {:.0}% less memory",
                s.config.name(),
                s.bits,
                s.bits_held,
                (1.0 - s.bits_held / u) * 100.0
            ),
            None => println!(
                "  {} at {}: holds {:.2} bits/key; {target:.5} reads/get is outside the uniform range measured",
                s.config.name(),
                s.bits,
                s.bits_held
            ),
        }
    }
}

fn main() -> lsm_bloom::Result<()> {
    let args = Args::parse();
    println!(
        "filter budget vs uniform: 16-byte random keys, 32-byte values, memtable {} MiB, level 1 {} MiB, no block cache; {} absent gets per store per round, median of {} rounds",
        args.memtable_mib, args.level1_mib, args.lookups, args.rounds
    );
    for &n in &args.keys {
        let mut stores = Vec::new();
        for &bits in &args.bits {
            for config in [Config::Uniform, Config::Budget, Config::BudgetMixed] {
                let (db, dir) = open(&args, bits, config)?;
                let t = Instant::now();
                load(&db, 0, n)?;
                let load_secs = t.elapsed().as_secs_f64();
                eprintln!(
                    "  {n} keys, {bits} bits/key, {}: loaded in {load_secs:.1} s",
                    config.name()
                );
                stores.push(Store {
                    bits,
                    config,
                    db,
                    _dir: dir,
                    load_secs,
                    reads: Vec::new(),
                    bits_held: 0.0,
                    model: 0.0,
                    shape: String::new(),
                });
            }
        }
        for (phase, extra) in [("settled", 0u64), ("+2 L0", 2)] {
            for s in &mut stores {
                // `extra` flushes of CHUNK new keys (a stream no lookup uses).
                load(&s.db, 1_000, extra * CHUNK)?;
                let st = s.db.stats();
                s.reads.clear();
                s.bits_held = st.total.filter_bits_per_key();
                s.model = model(&s.db, point_rate);
                s.shape = shape(&s.db);
            }
            for round in 0..args.rounds {
                for s in &mut stores {
                    let before = s.db.stats().total.data_block_reads;
                    let stream = 1 + round;
                    for i in 0..args.lookups {
                        if s.db.get(key(stream, i))?.is_some() {
                            eprintln!("an absent key was found: 2^-128 chance or a bug");
                        }
                    }
                    let reads = s.db.stats().total.data_block_reads - before;
                    s.reads.push(reads as f64 / args.lookups as f64);
                }
            }
            report(n, phase, &stores);
        }
    }
    Ok(())
}
