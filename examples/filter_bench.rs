//! Filter micro-benchmark: our standard, blocked and Ribbon filters against the `fastbloom`
//! crate (a blocked Bloom) and `xorf`'s binary fuse filter, in one process, interleaved round by
//! round; medians reported. The Bloom kinds and `ribbon` get the same bits/key; `ribbon-1%` is
//! sized for a 1% false-positive rate (the "same rate, less memory" point), and `binfuse8` has
//! the one size an 8-bit fingerprint gives (~9 bits/key, 0.39%).
//!
//! `cargo run --release --example filter_bench -- [--small-keys N] [--large-mib M]
//!  [--queries Q] [--rounds R] [--json]`
//!
//! For each filter and size: bits/key actually used, build ns/key, positive and negative probe
//! ns (random keys, so a large filter is out of cache), and measured false-positive rate. Every implementation is
//! handed the same 64-bit XXH3 hash of each key, so the figures compare filter layouts, not
//! hash functions.

use std::hint::black_box;
use std::time::Instant;

use clap::Parser;
use lsm_bloom::filter::{hash_key, FilterBuilder, FilterKind, FilterPolicy, FilterReader};
use serde::Serialize;

#[derive(Parser)]
#[command(about = "Bloom filter benchmark: lsm-bloom vs fastbloom")]
struct Args {
    /// Keys in the small (cache-resident) filter.
    #[arg(long, default_value_t = 10_000)]
    small_keys: u64,
    /// Size of the large (out-of-cache) filter in MiB at 10 bits/key.
    #[arg(long, default_value_t = 256)]
    large_mib: u64,
    /// Probes per measurement.
    #[arg(long, default_value_t = 2_000_000)]
    queries: u64,
    /// Interleaved rounds (medians are reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Bits per key for every filter.
    #[arg(long, default_value_t = 10.0)]
    bits_per_key: f64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// 16-byte key number `i`; members are `i < n`, non-members have the top bit set.
fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&i.to_le_bytes());
    k[8..].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
    k
}

/// Pseudo-random indices below `n` (xorshift), so probes jump around the filter.
fn random_indices(n: u64, count: u64, seed: u64) -> Vec<u64> {
    let mut x = seed | 1;
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((u128::from(x) * u128::from(n)) >> 64) as u64
        })
        .collect()
}

enum Filter {
    Ours(FilterReader<Vec<u8>>),
    Fast(fastbloom::BloomFilter, u64),
    Fuse(xorf::BinaryFuse8, u64),
}

impl Filter {
    fn build(which: &str, n: u64, bpk: f64) -> Filter {
        let policy = match which {
            "fastbloom" => {
                let bits = (n as f64 * bpk).ceil() as usize;
                let mut f = fastbloom::BloomFilter::with_num_bits(bits).expected_items(n as usize);
                for i in 0..n {
                    f.insert_hash(hash_key(&key(i)));
                }
                return Filter::Fast(f, n);
            }
            "binfuse8" => {
                let hashes: Vec<u64> = (0..n).map(|i| hash_key(&key(i))).collect();
                let f = xorf::BinaryFuse8::try_from(&hashes).expect("distinct keys");
                return Filter::Fuse(f, n);
            }
            "standard" => FilterPolicy::bits_per_key(FilterKind::Standard, bpk),
            "blocked" => FilterPolicy::bits_per_key(FilterKind::Blocked, bpk),
            "ribbon" => FilterPolicy::bits_per_key(FilterKind::Ribbon, bpk),
            "ribbon-1%" => FilterPolicy::target_fpr(FilterKind::Ribbon, 0.01),
            other => unreachable!("unknown filter {other}"),
        };
        let mut b = FilterBuilder::new(policy).expect("policy");
        for i in 0..n {
            b.add_key(&key(i));
        }
        Filter::Ours(FilterReader::new(b.finish()).expect("fresh block is valid"))
    }

    #[inline]
    fn contains(&self, k: &[u8]) -> bool {
        match self {
            Filter::Ours(r) => r.may_contain_hash(hash_key(k)),
            Filter::Fast(f, _) => f.contains_hash(hash_key(k)),
            Filter::Fuse(f, _) => xorf::Filter::contains(f, &hash_key(k)),
        }
    }

    /// Probes (Bloom kinds) or result bits (Ribbon) or fingerprint bits (binary fuse).
    fn k(&self) -> u32 {
        match self {
            Filter::Ours(r) => r.header().k,
            Filter::Fast(f, _) => f.num_hashes(),
            Filter::Fuse(..) => 8,
        }
    }

    fn bits_per_key(&self) -> f64 {
        match self {
            Filter::Ours(r) => r.info().bits_per_key,
            Filter::Fast(f, n) => f.num_bits() as f64 / *n as f64,
            Filter::Fuse(f, n) => (f.fingerprints.len() * 8) as f64 / *n as f64,
        }
    }
}

#[derive(Serialize, Clone)]
struct Row {
    size: String,
    filter: String,
    keys: u64,
    k: u32,
    bits_per_key: f64,
    build_ns_per_key: f64,
    positive_ns: f64,
    negative_ns: f64,
    fpr: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn probe_ns(f: &Filter, idx: &[u64], offset: u64) -> (f64, u64) {
    let t = Instant::now();
    let mut hits = 0u64;
    for &i in idx {
        hits += u64::from(black_box(f.contains(&key(i + offset))));
    }
    (t.elapsed().as_nanos() as f64 / idx.len() as f64, hits)
}

const FILTERS: [&str; 6] = [
    "standard",
    "blocked",
    "ribbon",
    "ribbon-1%",
    "fastbloom",
    "binfuse8",
];

fn bench_size(label: &str, n: u64, args: &Args, rebuild_each_round: bool) -> Vec<Row> {
    let pos = random_indices(n, args.queries, 0x1234_5678);
    let neg = random_indices(u64::MAX >> 2, args.queries, 0x9876_5431);
    let neg_offset = 1u64 << 63;
    let mut built: Vec<Option<Filter>> = FILTERS.iter().map(|_| None).collect();
    let mut samples: Vec<[Vec<f64>; 4]> = FILTERS.iter().map(|_| Default::default()).collect();
    for round in 0..args.rounds {
        for (i, which) in FILTERS.iter().enumerate() {
            if rebuild_each_round || built[i].is_none() {
                built[i] = None; // free the previous copy before timing a new build
                let t = Instant::now();
                let f = Filter::build(which, n, args.bits_per_key);
                samples[i][0].push(t.elapsed().as_nanos() as f64 / n as f64);
                built[i] = Some(f);
            }
            let f = built[i].as_ref().expect("built above");
            let (p, hits) = probe_ns(f, &pos, 0);
            assert_eq!(hits, pos.len() as u64, "{which}: false negative");
            let (q, fp) = probe_ns(f, &neg, neg_offset);
            samples[i][1].push(p);
            samples[i][2].push(q);
            samples[i][3].push(fp as f64 / neg.len() as f64);
            if !args.json {
                eprintln!("  {label} round {round} {which}: pos {p:.1} ns, neg {q:.1} ns");
            }
        }
    }
    FILTERS
        .iter()
        .enumerate()
        .map(|(i, which)| {
            let [b, p, q, f] = samples[i].clone();
            Row {
                size: label.to_string(),
                filter: which.to_string(),
                keys: n,
                k: built[i].as_ref().map_or(0, Filter::k),
                bits_per_key: built[i].as_ref().map_or(0.0, Filter::bits_per_key),
                build_ns_per_key: median(b),
                positive_ns: median(p),
                negative_ns: median(q),
                fpr: median(f),
            }
        })
        .collect()
}

#[derive(Serialize)]
struct Ratio {
    size: String,
    filter: String,
    build: f64,
    positive: f64,
    negative: f64,
}

#[derive(Serialize)]
struct Summary {
    bits_per_key: f64,
    queries: u64,
    rounds: usize,
    rows: Vec<Row>,
    /// ours / fastbloom time (below 1 means ours is faster).
    ratios_vs_fastbloom: Vec<Ratio>,
}

fn main() {
    let args = Args::parse();
    let large_keys = (args.large_mib << 23) as f64 / args.bits_per_key;
    let mut rows = bench_size("small", args.small_keys, &args, true);
    rows.extend(bench_size("large", large_keys as u64, &args, false));
    let mut ratios = Vec::new();
    for size in ["small", "large"] {
        let fast = rows
            .iter()
            .find(|r| r.size == size && r.filter == "fastbloom")
            .expect("row")
            .clone();
        for r in rows
            .iter()
            .filter(|r| r.size == size && r.filter != "fastbloom" && r.filter != "binfuse8")
        {
            ratios.push(Ratio {
                size: size.to_string(),
                filter: r.filter.clone(),
                build: r.build_ns_per_key / fast.build_ns_per_key,
                positive: r.positive_ns / fast.positive_ns,
                negative: r.negative_ns / fast.negative_ns,
            });
        }
    }
    let summary = Summary {
        bits_per_key: args.bits_per_key,
        queries: args.queries,
        rounds: args.rounds,
        rows,
        ratios_vs_fastbloom: ratios,
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&summary).expect("serialisable")
        );
        return;
    }
    println!(
        "bits/key {}, {} probes per measurement, median of {} interleaved rounds",
        summary.bits_per_key, summary.queries, summary.rounds
    );
    println!(
        "| size | filter | keys | k or r | bits/key | build ns/key | positive ns | negative ns | FPR |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &summary.rows {
        println!(
            "| {} | {} | {} | {} | {:.2} | {:.1} | {:.1} | {:.1} | {:.3}% |",
            r.size,
            r.filter,
            r.keys,
            r.k,
            r.bits_per_key,
            r.build_ns_per_key,
            r.positive_ns,
            r.negative_ns,
            r.fpr * 100.0
        );
    }
    for size in ["small", "large"] {
        let row = |f: &str| {
            summary
                .rows
                .iter()
                .find(|r| r.size == size && r.filter == f)
                .expect("row")
        };
        let (ribbon, blocked) = (row("ribbon-1%"), row("blocked"));
        println!(
            "{size}: ribbon-1% / blocked: bits/key {:.2}, build {:.2}, positive {:.2}, negative {:.2}",
            ribbon.bits_per_key / blocked.bits_per_key,
            ribbon.build_ns_per_key / blocked.build_ns_per_key,
            ribbon.positive_ns / blocked.positive_ns,
            ribbon.negative_ns / blocked.negative_ns
        );
    }
    println!("\nours / fastbloom (time; < 1 = ours faster)");
    println!("| size | filter | build | positive | negative |");
    println!("|---|---|---|---|---|");
    for r in &summary.ratios_vs_fastbloom {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} |",
            r.size, r.filter, r.build, r.positive, r.negative
        );
    }
}
