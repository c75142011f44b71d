//! `--workload range-deletes`, part 3: scans that meet one large deleted range. `--keys` keys
//! (at most 10^6, `range_deletes::key`) are loaded into each engine and compacted; then the
//! middle nine tenths are deleted: ours and RocksDB with one range (flushed, left on disk above
//! the keys), fjall key by key. A fourth store, ours holding only the live tenth (the range
//! compacted away), is what the range would cost nothing against. Then, interleaved per round:
//! seek + 10 from random key numbers (nine in ten land in the range and must reach its far
//! end), forward and reverse, and whole-store scans both ways, each answer checked; each
//! timed over as many as take `MIN_SECS`.

use lsm_bloom::Db;

use crate::engines::{open_rocks, ours_options, Ours};
use crate::range_deletes::{key, load, loaded_fjall, ours_batch, rocks_batch};
use crate::scans::Scan;
use crate::{median, mix, timed_parallel, Args};

/// Entries a short scan reads.
const SHORT: usize = 10;

/// Seconds a timing runs at least (or over all its items).
const MIN_SECS: f64 = 0.3;

/// Items per second of `f` over a prefix of `items` at `threads`: the prefix doubles from
/// `threads` items until its run takes `MIN_SECS` or it is all of them. A scan into a range
/// fjall deleted key by key walks up to 9·10^5 tombstones, so a fixed count would take it
/// hours or time the others over microseconds.
fn timed_rate<T: Sync>(items: &[T], threads: usize, f: impl Fn(&T) + Sync) -> f64 {
    let mut m = threads.min(items.len());
    loop {
        let secs = timed_parallel(&items[..m], threads, |part| part.iter().for_each(&f));
        if secs >= MIN_SECS || m == items.len() {
            return m as f64 / secs;
        }
        m = (m * 2).min(items.len());
    }
}

pub(crate) fn run(args: &Args) {
    let n = args.keys.min(1_000_000);
    let (lo, hi) = (n / 20, n - n / 20);
    let live = |i: u64| !(lo..hi).contains(&i);
    let dirs: Vec<tempfile::TempDir> = (0..4)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    // No idle compaction: it would compact the range away.
    let held = || ours_options(args).with_idle_compaction_after(None);
    let ours = Ours(Db::open(dirs[0].path(), held()).expect("open"));
    load(args, n, |_| true, ours_batch(&ours.0));
    ours.0.compact().expect("compact");
    ours.0
        .delete_range(key(lo, false)..key(hi, false))
        .expect("delete_range");
    ours.0.flush().expect("flush");
    let plain = Ours(Db::open(dirs[1].path(), held()).expect("open"));
    load(args, n, live, ours_batch(&plain.0));
    plain.0.compact().expect("compact");
    let rocks = open_rocks(dirs[2].path(), args, |_, _| {});
    load(args, n, |_| true, rocks_batch(&rocks.db));
    rocks.db.compact_range(None::<&[u8]>, None::<&[u8]>);
    let mut b = rocksdb::WriteBatch::default();
    b.delete_range(key(lo, false), key(hi, false));
    rocks.db.write(b).expect("delete_range");
    rocks.db.flush().expect("flush");
    let fjall = loaded_fjall(dirs[3].path(), args, n);
    for chunk in (lo..hi).collect::<Vec<_>>().chunks(1000) {
        let mut b = fjall.db.batch();
        for &i in chunk {
            b.remove(&fjall.ks, key(i, false));
        }
        b.commit().expect("commit");
    }
    fjall.ks.rotate_memtable_and_wait().expect("flush");
    let engines: [&dyn Scan; 4] = [&ours, &plain, &rocks, &fjall];
    let names = ["ours", "compacted away", "rocksdb", "fjall"];
    let whole = (n - (hi - lo)) as usize;
    println!(
        "scans across one deleted range ({n} keys, {} deleted; ours' tables per level {:?}):",
        hi - lo,
        ours.0
            .stats()
            .levels
            .iter()
            .map(|l| l.tables)
            .collect::<Vec<_>>()
    );
    for &threads in &args.threads {
        for reverse in [false, true] {
            let mut short: [Vec<f64>; 4] = Default::default();
            let mut full: [Vec<f64>; 4] = Default::default();
            for round in 0..args.rounds {
                let mut x = (round as u64 + 1) * 7919 + threads as u64;
                let starts: Vec<[u8; 16]> = (0..args.ops.min(200_000))
                    .map(|_| {
                        x = mix(x);
                        key(x % n, false)
                    })
                    .collect();
                let scans: Vec<usize> = (0..threads * 8).collect();
                for e in 0..4 {
                    // Each round starts with the next engine.
                    let e = (e + round) % 4;
                    let s = engines[e];
                    short[e].push(timed_rate(&starts, threads, |k| {
                        std::hint::black_box(s.scan(k, None, SHORT, reverse));
                    }));
                    let first = key(if reverse { n - 1 } else { 0 }, false);
                    full[e].push(timed_rate(&scans, threads, |_| {
                        let got = s.scan(&first, None, usize::MAX, reverse);
                        assert_eq!(got, whole, "{}: a whole-store scan", names[e]);
                    }));
                }
            }
            let way = if reverse { "reverse" } else { "forward" };
            for (what, r) in [("seek + 10", short), ("whole store", full)] {
                let [o, p, rk, fj] = r.map(median);
                println!(
                    "  {threads} thread(s), {what} {way}: ours {o:.1} scans/s, {} {p:.1}, \
                     rocksdb {rk:.1}, fjall {fj:.1}; ours / best peer {:.2}, ours / {} {:.3}",
                    names[1],
                    o / rk.max(fj),
                    names[1],
                    o / p
                );
            }
        }
    }
}
