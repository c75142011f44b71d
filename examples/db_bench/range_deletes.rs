//! `--workload range-deletes`: what deleted ranges cost reads, and what a range delete saves
//! against deleting key by key (docs/range-deletes.md).
//!
//! 1. **Gets beside 10^4 deleted ranges.** `--keys` keys in order (`{i:015}0`, 16 bytes) are
//!    loaded into each engine and compacted; then 10^4 ranges spread evenly over them, each a
//!    quarter of the gap between two, are deleted and the memtable flushed (no compaction
//!    after: the ranges stay on disk, in one level-0 table). Ours and RocksDB delete each
//!    range with one operation (`delete_range`, `DeleteRange`); fjall has none, so each key
//!    of a range is removed. A fourth store, ours with the same keys and tables and no ranges
//!    (nothing deleted), is the baseline for present and absent keys: what holding the ranges
//!    costs. Then present gets (live keys), absent gets (`{i:015}1`: between two
//!    keys, never written) and gets of deleted keys, each answer checked.
//! 2. **Deleting 10^6 contiguous keys** (`--keys`, at most 10^6): one `delete_range` against
//!    the same keys deleted one by one in batches of 1,000, on two stores loaded alike (and
//!    RocksDB's `DeleteRange` against its per-key deletes); then ours' table bytes once flushed
//!    and once compacted, against the bytes before.
//! 3. **Scans across one large deleted range** (`range_scans.rs`).
//!
//! Rounds interleave the engines, each round starting with the next; each figure is the
//! median of `--rounds` at each of `--threads`.

use std::time::Instant;

use lsm_bloom::{Db, WriteBatch};

use crate::engines::{open_fjall, open_rocks, ours_options, Fjall, Rocks};
use crate::{median, mix, timed_parallel, value, Args};

/// Deleted ranges in part 1.
const RANGES: u64 = 10_000;

/// Key `i`: ordered, 16 bytes; `absent` gives the key just above it, never written.
pub(crate) fn key(i: u64, absent: bool) -> [u8; 16] {
    let s = format!("{i:015}{}", u8::from(absent));
    let mut k = [0u8; 16];
    k.copy_from_slice(s.as_bytes());
    k
}

/// The keys range `r` of part 1 deletes: `start..end` (key numbers).
fn range_of(r: u64, n: u64) -> (u64, u64) {
    let stride = n / RANGES;
    let start = r * stride + stride / 2;
    (start, start + (stride / 4).max(1))
}

/// Whether key `i` lies in a deleted range of part 1.
fn deleted(i: u64, n: u64) -> bool {
    let stride = n / RANGES;
    let (start, end) = range_of(i / stride, n);
    (start..end).contains(&i)
}

pub(crate) fn run(args: &Args) {
    if args.keys < RANGES * 8 {
        eprintln!(
            "error: --workload range-deletes needs --keys of at least {}",
            RANGES * 8
        );
        std::process::exit(2);
    }
    let part = |n: u8| args.range_parts.is_empty() || args.range_parts.contains(&n);
    if part(1) {
        gets_beside_ranges(args);
    }
    if part(2) {
        contiguous(args);
    }
    if part(3) {
        crate::range_scans::run(args);
    }
}

/// Loads keys `0..n` (those `keep` keeps) into `put` in batches, `value` as in `main.rs`.
pub(crate) fn load(
    args: &Args,
    n: u64,
    keep: impl Fn(u64) -> bool,
    mut put: impl FnMut(Vec<([u8; 16], Vec<u8>)>),
) {
    let mut batch = Vec::with_capacity(1000);
    for i in (0..n).filter(|&i| keep(i)) {
        let mut v = Vec::new();
        value(args, i, &mut v);
        batch.push((key(i, false), v));
        if batch.len() == 1000 {
            put(std::mem::take(&mut batch));
        }
    }
    put(batch);
}

/// fjall at `dir` holding keys `0..n` (`load`), compacted.
pub(crate) fn loaded_fjall(dir: &std::path::Path, args: &Args, n: u64) -> Fjall {
    let fjall = open_fjall(dir, args);
    load(
        args,
        n,
        |_| true,
        |kvs| {
            let mut b = fjall.db.batch();
            for (k, v) in kvs {
                b.insert(&fjall.ks, k, v);
            }
            b.commit().expect("commit");
        },
    );
    fjall.ks.major_compact().expect("compact");
    fjall
}

pub(crate) fn ours_batch(db: &Db) -> impl FnMut(Vec<([u8; 16], Vec<u8>)>) + '_ {
    move |kvs| {
        let mut b = WriteBatch::new();
        for (k, v) in kvs {
            b.put(k, v);
        }
        db.write(b).expect("write");
    }
}

pub(crate) fn rocks_batch(db: &rocksdb::DB) -> impl FnMut(Vec<([u8; 16], Vec<u8>)>) + '_ {
    move |kvs| {
        let mut b = rocksdb::WriteBatch::default();
        for (k, v) in kvs {
            b.put(k, v);
        }
        db.write(b).expect("write");
    }
}

/// What a get of each key should find.
#[derive(Clone, Copy)]
enum Kind {
    Present,
    Absent,
    Deleted,
}

/// `n` keys of `kind` drawn by `seed`, with whether each is there.
fn keys(args: &Args, kind: Kind, seed: u64) -> Vec<([u8; 16], bool)> {
    let n = args.keys;
    let mut out = Vec::with_capacity(args.ops as usize);
    let mut x = seed;
    while out.len() < args.ops as usize {
        x = mix(x);
        let i = x % n;
        match kind {
            Kind::Present if !deleted(i, n) => out.push((key(i, false), true)),
            Kind::Absent => out.push((key(i, true), false)),
            Kind::Deleted => {
                let (start, end) = range_of(i / (n / RANGES), n);
                out.push((key(start + x % (end - start), false), false));
            }
            Kind::Present => {}
        }
    }
    out
}

/// Gets per second of `keys` through `get` on `threads` threads, each answer checked.
fn rate(keys: &[([u8; 16], bool)], threads: usize, get: impl Fn(&[u8]) -> bool + Sync) -> f64 {
    let secs = timed_parallel(keys, threads, |part| {
        for (k, there) in part {
            assert_eq!(get(k), *there, "wrong answer");
        }
    });
    keys.len() as f64 / secs
}

/// One engine's get: whether the key is there.
type Get<'a> = dyn Fn(&[u8]) -> bool + Sync + 'a;

/// Part 1: see the module comment.
fn gets_beside_ranges(args: &Args) {
    let n = args.keys;
    let dirs: Vec<tempfile::TempDir> = (0..4)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let t = Instant::now();
    // No idle compaction: it would compact the ranges' level-0 table into the last level,
    // dropping the ranges with the keys they cover (the space back, part 2).
    let held = || ours_options(args).with_idle_compaction_after(None);
    let ours = Db::open(dirs[0].path(), held()).expect("open");
    load(args, n, |_| true, ours_batch(&ours));
    ours.compact().expect("compact");
    for r in 0..RANGES {
        let (start, end) = range_of(r, n);
        ours.delete_range(key(start, false)..key(end, false))
            .expect("delete_range");
    }
    ours.flush().expect("flush");
    let plain = Db::open(dirs[1].path(), held()).expect("open");
    load(args, n, |_| true, ours_batch(&plain));
    plain.compact().expect("compact");
    let rocks: Rocks = open_rocks(dirs[2].path(), args, |_, _| {});
    load(args, n, |_| true, rocks_batch(&rocks.db));
    rocks.db.compact_range(None::<&[u8]>, None::<&[u8]>);
    for r in 0..RANGES {
        let (start, end) = range_of(r, n);
        let mut b = rocksdb::WriteBatch::default();
        b.delete_range(key(start, false), key(end, false));
        rocks.db.write(b).expect("delete_range");
    }
    rocks.db.flush().expect("flush");
    let fjall = loaded_fjall(dirs[3].path(), args, n);
    let mut removed = 0u64;
    for r in 0..RANGES {
        let (start, end) = range_of(r, n);
        let mut b = fjall.db.batch();
        for i in start..end {
            b.remove(&fjall.ks, key(i, false));
            removed += 1;
        }
        b.commit().expect("commit");
    }
    fjall.ks.rotate_memtable_and_wait().expect("flush");
    let ranges_held: u64 = ours
        .levels()
        .iter()
        .flatten()
        .map(|t| t.properties().range_deletes)
        .sum();
    println!(
        "gets beside {RANGES} deleted ranges ({n} keys, {removed} deleted; built in {:.1} s): ours \
         holds {ranges_held} ranges on disk, tables per level {:?}",
        t.elapsed().as_secs_f64(),
        ours.stats().levels.iter().map(|l| l.tables).collect::<Vec<_>>()
    );
    for &threads in &args.threads {
        for (what, kind) in [
            ("present", Kind::Present),
            ("absent", Kind::Absent),
            ("deleted", Kind::Deleted),
        ] {
            let gets: [&Get; 4] = [
                &|k| ours.get(k).expect("get").is_some(),
                &|k| plain.get(k).expect("get").is_some(),
                &|k| rocks.db.get_pinned(k).expect("get").is_some(),
                &|k| fjall.ks.get(k).expect("get").is_some(),
            ];
            let mut r: [Vec<f64>; 4] = Default::default();
            let mut vs_plain = Vec::new();
            for round in 0..args.rounds as u64 {
                let ks = keys(args, kind, (round + 1) * 7919 + threads as u64);
                let mut this = [f64::NAN; 4];
                // Each round starts with the next engine (the first after another engine's
                // run meets caches that one filled); the store without ranges holds no
                // deleted key to look up.
                for e in (0..4).map(|e| (e + round as usize) % 4) {
                    if e != 1 || !matches!(kind, Kind::Deleted) {
                        this[e] = rate(&ks, threads, gets[e]);
                        r[e].push(this[e]);
                    }
                }
                vs_plain.push(this[0] / this[1]);
            }
            let [o, p, rk, fj] = r.map(|v| if v.is_empty() { f64::NAN } else { median(v) });
            println!(
                "  {threads} thread(s), {what}: ours {o:.0} gets/s, without ranges {p:.0}, \
                 rocksdb {rk:.0}, fjall {fj:.0}; ours / best peer {:.2}, ours / without ranges \
                 {:.3} (the median of the rounds' ratios)",
                o / rk.max(fj),
                median(vs_plain)
            );
        }
    }
}

/// Part 2: see the module comment.
fn contiguous(args: &Args) {
    let n = args.keys.min(1_000_000);
    let dirs: Vec<tempfile::TempDir> = (0..4)
        .map(|_| tempfile::tempdir().expect("tempdir"))
        .collect();
    let stores: Vec<Db> = dirs[..2]
        .iter()
        .map(|d| {
            let db = Db::open(d.path(), ours_options(args)).expect("open");
            load(args, n, |_| true, ours_batch(&db));
            db.compact().expect("compact");
            db
        })
        .collect();
    let rocks: Vec<Rocks> = dirs[2..]
        .iter()
        .map(|d| {
            let r = open_rocks(d.path(), args, |_, _| {});
            load(args, n, |_| true, rocks_batch(&r.db));
            r.db.compact_range(None::<&[u8]>, None::<&[u8]>);
            r
        })
        .collect();
    let bytes = |db: &Db| db.stats().total.table_bytes;
    let before = bytes(&stores[0]);
    // The store's first range delete writes its manifest once (version 4, FORMAT.md §4):
    // made before the timing, over keys that are not there.
    stores[0]
        .delete_range(key(n, false)..key(n + 1, false))
        .expect("delete_range");
    let t = Instant::now();
    stores[0]
        .delete_range(key(0, false)..key(n, false))
        .expect("delete_range");
    let one = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut b = WriteBatch::new();
        for &i in chunk {
            b.delete(key(i, false));
        }
        stores[1].write(b).expect("write");
    }
    let each = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut b = rocksdb::WriteBatch::default();
    b.delete_range(key(0, false), key(n, false));
    rocks[0].db.write(b).expect("delete_range");
    let rocks_one = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut b = rocksdb::WriteBatch::default();
        for &i in chunk {
            b.delete(key(i, false));
        }
        rocks[1].db.write(b).expect("write");
    }
    let rocks_each = t.elapsed().as_secs_f64();
    assert_eq!(stores[0].get(key(n / 2, false)).expect("get"), None);
    assert_eq!(stores[1].get(key(n / 2, false)).expect("get"), None);
    stores[0].flush().expect("flush");
    let flushed = bytes(&stores[0]);
    stores[0].compact().expect("compact");
    let compacted = bytes(&stores[0]);
    println!(
        "deleting {n} contiguous keys: ours one range {:.3} ms, key by key {:.1} ms ({:.0}x); \
         rocksdb DeleteRange {:.3} ms, key by key {:.1} ms ({:.0}x)",
        one * 1e3,
        each * 1e3,
        each / one,
        rocks_one * 1e3,
        rocks_each * 1e3,
        rocks_each / rocks_one
    );
    println!(
        "  ours' table bytes: {before} before, {flushed} with the range flushed, {compacted} \
         compacted"
    );
}
