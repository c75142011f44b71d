//! Absent-key gets of two builds of lsm-bloom on one stored database, interleaved: the way to
//! compare an old commit's read path with today's at a size (10^8 keys, 12 GiB) that takes
//! minutes to load, since both builds read the same files (no on-disk format changed in
//! between; FORMAT.md).
//!
//! `absent_ab load DIR N` loads N keys as `db_bench --workload scale` does (16-byte keys,
//! 100-byte values, one thread, then flush and wait for compactions) with the same settings
//! (64 MiB memtables and tables, 4 KiB blocks, the filter budget at 10 bits/key on average
//! with its default kinds). `absent_ab time DIR SEED [OPS]` opens it and prints one line: the
//! unit (one hop of a dependent random walk over 512 MiB) and the time per absent get, after
//! an untimed pass over other absent keys; each SEED draws keys of its own. Build this file at
//! the other commit too (it uses only API both have), then alternate the two binaries' `time`
//! runs (docs/design.md quotes such runs).
//!
//! `absent_ab time-multi DIR SEED [OPS]` does the same with `Db::multi_get`, 64 keys at a
//! time, and prints the time per key.
//!
//! Apart from `time-multi`, only `Db::open`, `put`, `get`, `flush` and `wait_for_compactions`
//! and options fields that existed before the read-path work (`97fbf1e`) are used, so the same source builds there
//! with the `time-multi` arm deleted (`Db::multi_get` came later).

use std::path::Path;
use std::time::Instant;

use lsm_bloom::{Db, FilterBudget, Filters, Options};

fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// `db_bench`'s key number `i` (absent keys use `i >= 2^40`).
fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&mix(i).to_be_bytes());
    k[8..].copy_from_slice(&mix(i ^ 0x5555_5555).to_be_bytes());
    k
}
const ABSENT: u64 = 1 << 40;

fn options() -> Options {
    Options::default()
        .with_filters(Some(Filters::Budget(FilterBudget::bits_per_key(10.0))))
        .with_memtable_size(64 << 20)
        .with_block_size(4096)
        .with_target_file_size(64 << 20)
        .with_level1_max_bytes(256 << 20)
        .with_size_ratio(10)
        .with_l0_compaction_trigger(4)
        .with_block_cache_bytes(32 << 20)
}

/// Nanoseconds per hop of a dependent random walk over 512 MiB (Sattolo's cycle).
fn unit_ns() -> f64 {
    let n = (512usize << 20) / 4;
    let mut cycle: Vec<u32> = (0..n as u32).collect();
    let mut x = 0x5EED_u64;
    for i in (1..n).rev() {
        x = mix(x);
        cycle.swap(i, (x % i as u64) as usize);
    }
    let (mut at, hops) = (0u32, 2_000_000);
    let t = Instant::now();
    for _ in 0..hops {
        at = cycle[at as usize];
    }
    std::hint::black_box(at);
    t.elapsed().as_secs_f64() * 1e9 / f64::from(hops)
}

fn absent_keys(seed: u64, ops: u64) -> Vec<[u8; 16]> {
    (0..ops)
        .map(|i| key(ABSENT + mix(i.wrapping_add(seed << 32)) % (1 << 30)))
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: absent_ab load DIR N | absent_ab time|time-multi DIR SEED [OPS]";
    let (Some(cmd), Some(dir)) = (args.get(1), args.get(2)) else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let number = |i: usize, default: Option<u64>| -> u64 {
        match args.get(i).map(|s| s.parse::<u64>()) {
            Some(Ok(n)) => n,
            None if default.is_some() => default.unwrap_or(0),
            _ => {
                eprintln!("{usage}");
                std::process::exit(2);
            }
        }
    };
    let db = Db::open(Path::new(dir), options()).expect("open");
    match cmd.as_str() {
        "load" => {
            let n = number(3, None);
            let value = vec![b'v'; 100];
            let t = Instant::now();
            for i in 0..n {
                db.put(key(i), value.as_slice()).expect("put");
            }
            db.flush().expect("flush");
            db.wait_for_compactions().expect("compactions");
            eprintln!("loaded {n} keys in {:.0} s", t.elapsed().as_secs_f64());
        }
        "time" => {
            let (seed, ops) = (number(3, None), number(4, Some(400_000)));
            for k in absent_keys(seed * 2 + 1, ops) {
                std::hint::black_box(db.get(k).expect("get"));
            }
            let keys = absent_keys(seed * 2, ops);
            let t = Instant::now();
            for k in &keys {
                std::hint::black_box(db.get(k).expect("get"));
            }
            let ns = t.elapsed().as_secs_f64() * 1e9 / ops as f64;
            let unit = unit_ns();
            println!(
                "unit {unit:.0} ns, absent get {ns:.0} ns ({:.2} units)",
                ns / unit
            );
        }
        "time-multi" => {
            let (seed, ops) = (number(3, None), number(4, Some(400_000)));
            let batches = |keys: &[[u8; 16]]| {
                for batch in keys.chunks(64) {
                    for found in db.multi_get(batch) {
                        std::hint::black_box(found.expect("multi_get"));
                    }
                }
            };
            batches(&absent_keys(seed * 2 + 1, ops));
            let keys = absent_keys(seed * 2, ops);
            let t = Instant::now();
            batches(&keys);
            let ns = t.elapsed().as_secs_f64() * 1e9 / ops as f64;
            let unit = unit_ns();
            println!(
                "unit {unit:.0} ns, absent multi_get {ns:.0} ns per key ({:.2} units)",
                ns / unit
            );
        }
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    }
}
