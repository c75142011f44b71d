//! Durable writes per second, at 1, 2 and 8 writer threads: a store with `sync_writes` on
//! (every write synced), against a store with it off where each write asks for its own sync
//! (`WriteOptions::synced()`), and one where half the writers ask and half do not. Writers
//! share syncs through group commit, so more writers should mean more batches per sync.
//! Each figure is the median of `--rounds` interleaved rounds of `--secs` seconds.
//!
//! `cargo run --release --example durable_writes [-- --rounds 3 --secs 2]`

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lsm_bloom::{Db, Options, WriteBatch, WriteOptions};

/// How a run's writes are made durable.
#[derive(Clone, Copy, Debug)]
enum Durability {
    /// `Options::sync_writes`, plain `write`.
    StoreWide,
    /// `sync_writes` off, every write `WriteOptions::synced()`.
    PerWrite,
    /// `sync_writes` off, writers 0, 2, 4… ask for a sync, the others do not.
    HalfPerWrite,
}

/// Batches per second (all writers) and synced batches per second, over `secs` seconds.
fn run(durability: Durability, threads: usize, secs: f64) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let opts = Options::default().with_sync_writes(matches!(durability, Durability::StoreWide));
    let db = Arc::new(Db::open(dir.path(), opts).expect("open"));
    let stop = Arc::new(AtomicBool::new(false));
    let (all, synced) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let start = Instant::now();
    let writers: Vec<_> = (0..threads)
        .map(|t| {
            let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
            let (all, synced) = (Arc::clone(&all), Arc::clone(&synced));
            std::thread::spawn(move || {
                let sync = match durability {
                    Durability::StoreWide | Durability::PerWrite => true,
                    Durability::HalfPerWrite => t % 2 == 0,
                };
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut b = WriteBatch::new();
                    b.put(format!("w{t}:{i:012}"), [7u8; 100]);
                    match durability {
                        Durability::StoreWide => db.write(b),
                        _ => db.write_opt(b, WriteOptions::default().with_sync(sync)),
                    }
                    .expect("write");
                    all.fetch_add(1, Ordering::Relaxed);
                    if sync {
                        synced.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let per_sec = |n: &AtomicU64| n.load(Ordering::Relaxed) as f64 / elapsed;
    (per_sec(&all), per_sec(&synced))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: f64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (rounds, secs) = (arg("--rounds", 3.0) as usize, arg("--secs", 2.0));
    let kinds = [
        Durability::StoreWide,
        Durability::PerWrite,
        Durability::HalfPerWrite,
    ];
    println!("| writers | sync_writes: batches/s | per-write sync: batches/s | ÷ sync_writes | half the writers sync: synced / all batches/s |");
    println!("|---|---|---|---|---|");
    for threads in [1, 2, 8] {
        let mut figures = vec![(Vec::new(), Vec::new()); kinds.len()];
        for _ in 0..rounds {
            for (k, kind) in kinds.iter().enumerate() {
                let (all, synced) = run(*kind, threads, secs);
                figures[k].0.push(all);
                figures[k].1.push(synced);
            }
        }
        let store_wide = median(figures[0].0.clone());
        let per_write = median(figures[1].0.clone());
        println!(
            "| {threads} | {store_wide:.0} | {per_write:.0} | {:.2} | {:.0} / {:.0} |",
            per_write / store_wide,
            median(figures[2].1.clone()),
            median(figures[2].0.clone())
        );
    }
}
