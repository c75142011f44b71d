//! Range filters on their own: false-positive rate on empty ranges against the bound
//! `ℓ / 2^(B − 2)`, uniform and right after a present key, and the time per probe, at 10^6
//! keys per filter (one table's worth).
//!
//! `cargo run --release --example range_filter_bench -- [--keys N] [--queries Q]`

use std::ops::Bound;
use std::time::Instant;

use clap::Parser;
use lsm_bloom::filter::{RangeFilterBuilder, RangeFilterReader, RangePolicy};

#[derive(Parser)]
struct Args {
    /// Keys in the filter.
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// Empty ranges asked per cell.
    #[arg(long, default_value_t = 2_000_000)]
    queries: u64,
}

/// Timed rounds per cell; the median is printed.
const ROUNDS: usize = 5;

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn key(p: u64) -> [u8; 15] {
    let mut k = *b"events/\0\0\0\0\0\0\0\0";
    k[7..].copy_from_slice(&p.to_be_bytes());
    k
}

/// `q` empty ranges of `len` points, uniform or right after a present point, as key bounds.
fn empty_ranges(pts: &[u64], len: u64, after: bool, q: u64) -> Vec<([u8; 15], [u8; 15])> {
    let mut x = 0x2545_F491_4F6C_DD1Du64 ^ len ^ u64::from(after);
    let mut out = Vec::with_capacity(q as usize);
    while (out.len() as u64) < q {
        let lo = if after {
            pts[(next(&mut x) % pts.len() as u64) as usize].wrapping_add(1)
        } else {
            next(&mut x)
        };
        let Some(hi) = lo.checked_add(len - 1) else {
            continue;
        };
        let i = pts.partition_point(|&p| p < lo);
        if pts.get(i).is_some_and(|&p| p <= hi) {
            continue;
        }
        out.push((key(lo), key(hi)));
    }
    out
}

fn main() {
    let args = Args::parse();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut pts: Vec<u64> = (0..args.keys).map(|_| next(&mut x)).collect();
    pts.sort_unstable();
    pts.dedup();
    println!(
        "range_filter_bench: {} keys, {} empty ranges per cell; rate observed / bound, ns per probe (median of {ROUNDS} rounds)",
        pts.len(),
        args.queries
    );
    println!(
        "{:>9} {:>6} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "bits/key",
        "ℓ",
        "block b/k",
        "bound",
        "uniform",
        "after key",
        "worst/bnd",
        "ns unif",
        "ns after"
    );
    for bits in [12.0, 16.0] {
        let policy = RangePolicy::bits_per_key(bits, 1024).expect("policy");
        let start = Instant::now();
        let mut b = RangeFilterBuilder::new(policy);
        for &p in &pts {
            b.add_key(&key(p));
        }
        let block = b.finish();
        let built = start.elapsed();
        let start = Instant::now();
        let f = RangeFilterReader::new(&block).expect("block");
        let opened = start.elapsed();
        println!(
            "{bits} bits/key: built in {:.0} ms, opened (validated whole) in {:.1} ms, {:.2} block bits/key, {:.2} bits/key in memory",
            built.as_secs_f64() * 1e3,
            opened.as_secs_f64() * 1e3,
            f.bits_per_key(),
            f.memory() as f64 * 8.0 / f.keys() as f64
        );
        for len in [1u64, 8, 32, 1024] {
            let bound = f.expected_rate(len);
            let mut cells = Vec::new();
            for after in [false, true] {
                let ranges = empty_ranges(&pts, len, after, args.queries);
                let mut fp = 0;
                let mut ns: Vec<f64> = (0..ROUNDS)
                    .map(|_| {
                        let start = Instant::now();
                        fp = ranges
                            .iter()
                            .filter(|(a, b)| {
                                f.may_contain_range(Bound::Included(a), Bound::Included(b))
                            })
                            .count();
                        start.elapsed().as_secs_f64() * 1e9 / ranges.len() as f64
                    })
                    .collect();
                ns.sort_by(f64::total_cmp);
                cells.push((fp as f64 / ranges.len() as f64, ns[ROUNDS / 2]));
            }
            let worst = cells[0].0.max(cells[1].0) / bound;
            println!(
                "{:>9} {:>6} {:>9.2} {:>9.4}% {:>9.4}% {:>9.4}% {:>10.3} {:>9.1} {:>9.1}",
                bits,
                len,
                f.bits_per_key(),
                bound * 100.0,
                cells[0].0 * 100.0,
                cells[1].0 * 100.0,
                worst,
                cells[0].1,
                cells[1].1
            );
        }
    }
}
