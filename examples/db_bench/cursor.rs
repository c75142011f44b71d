//! `--workload cursor`: ours' scans through `Db::scan` (an iterator of owned entries) against
//! the same scans through `DbCursor` (entries lent in place), interleaved per round, on one
//! store loaded with `--keys` random 16-byte keys and settled (configured alike, or at the
//! defaults with `--defaults`).
//!
//! Each scan starts from a random key (present or not) and reads 10 entries (`seek + 10`) or
//! 1,000 (`seek + 1,000`, `--scans / 10` of them), forward or reverse, touching every key
//! and value byte's length. Three ways:
//! - `iterator`: `db.scan(start..)` (or `..=start`, `.rev()`) per scan, as the scans workload;
//! - `cursor`: `db.cursor()` then `seek` (`seek_for_prev`) and `next` (`prev`) per scan;
//! - `cursor, reused`: one cursor per thread for the whole phase, sought again per scan (as a
//!   RocksDB iterator is reused): it reads the store as of when it was made.
//!
//! Printed per scan kind, direction and thread count: scans/s of each (median of `--rounds`),
//! and each cursor's ratio to the iterator.

use std::ops::Bound;

use lsm_bloom::Db;

use crate::{key, median, mix, open_ours, timed_parallel, Args, Engine};

/// How a scan is made.
#[derive(Clone, Copy)]
enum Way {
    Iterator,
    Cursor,
    Reused,
}

/// In the table's column order.
const WAYS: [Way; 3] = [Way::Iterator, Way::Cursor, Way::Reused];

/// Bytes of the first `limit` entries from `start` through the iterator.
fn by_iterator(db: &Db, start: &[u8], limit: usize, reverse: bool) -> usize {
    let sum = |n: usize, r: lsm_bloom::Result<(Vec<u8>, Vec<u8>)>| {
        let (k, v) = r.expect("scan item");
        n + k.len() + v.len()
    };
    if reverse {
        let range: (Bound<&[u8]>, Bound<&[u8]>) = (Bound::Unbounded, Bound::Included(start));
        db.scan::<&[u8], _>(range)
            .expect("scan")
            .rev()
            .take(limit)
            .fold(0, sum)
    } else {
        db.scan(start..).expect("scan").take(limit).fold(0, sum)
    }
}

/// The same through `c`, sought to `start`.
fn by_cursor(c: &mut lsm_bloom::DbCursor, start: &[u8], limit: usize, reverse: bool) -> usize {
    let mut on = match reverse {
        false => c.seek(start),
        true => c.seek_for_prev(start),
    }
    .expect("seek");
    let (mut n, mut bytes) = (0, 0);
    while on && n < limit {
        let (k, v) = c.entry().expect("on an entry");
        bytes += k.len() + v.len();
        n += 1;
        if n < limit {
            on = match reverse {
                false => c.next(),
                true => c.prev(),
            }
            .expect("step");
        }
    }
    bytes
}

/// Scans per second of `way` over `starts` on `threads` threads.
fn phase(
    db: &Db,
    starts: &[[u8; 16]],
    limit: usize,
    reverse: bool,
    way: Way,
    threads: usize,
) -> f64 {
    let secs = timed_parallel(starts, threads, |part| {
        let mut reused = db.cursor();
        for s in part {
            let bytes = match way {
                Way::Iterator => by_iterator(db, s, limit, reverse),
                Way::Cursor => by_cursor(&mut db.cursor(), s, limit, reverse),
                Way::Reused => by_cursor(&mut reused, s, limit, reverse),
            };
            std::hint::black_box(bytes);
        }
    });
    starts.len() as f64 / secs
}

/// Runs the cursor workload and prints its table.
pub(crate) fn run(args: &Args) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ours = open_ours(dir.path(), args);
    eprintln!(
        "cursor workload: {} keys x (16-byte key, {}-byte value), {}; {} scans per phase ({} long), {} rounds, threads {:?}",
        args.keys,
        args.value_size,
        if args.defaults { "at the defaults" } else { "configured alike" },
        args.scans,
        args.scans / 10,
        args.rounds,
        args.threads
    );
    crate::load(&ours, args, 1);
    ours.0.wait_for_compactions().expect("settle");
    println!("\nsettled: tables per level {:?}", ours.tables_per_level());
    let db = &ours.0;
    for &threads in &args.threads {
        println!(
            "\n{threads} thread(s), scans/s (median of {} rounds):",
            args.rounds
        );
        println!("| scan | direction | iterator | cursor | cursor, reused | cursor ÷ iterator | reused ÷ iterator |");
        println!("|---|---|---|---|---|---|---|");
        for (limit, name) in [(10, "seek + 10"), (1000, "seek + 1,000")] {
            let n = if limit == 10 {
                args.scans
            } else {
                args.scans / 10
            };
            for reverse in [false, true] {
                let mut rates: [Vec<f64>; 3] = Default::default();
                for round in 0..args.rounds {
                    let starts: Vec<[u8; 16]> = (0..n)
                        .map(|i| key(mix(i ^ ((round as u64 + 1) << 40))))
                        .collect();
                    for j in 0..3 {
                        let i = (j + round) % 3;
                        rates[i].push(phase(db, &starts, limit, reverse, WAYS[i], threads));
                    }
                }
                let m: Vec<f64> = rates.iter().map(|r| median(r.clone())).collect();
                println!(
                    "| {name} | {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} |",
                    if reverse { "reverse" } else { "forward" },
                    m[0],
                    m[1],
                    m[2],
                    m[1] / m[0],
                    m[2] / m[0]
                );
            }
        }
    }
}
