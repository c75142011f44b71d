//! Readers and a writer at once, with flushes and compactions running: every value a reader
//! sees was written for that key, and no reader sees a key's history go backwards.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{tiny_options, Rng};
use lsm_bloom::Db;

const KEYS: u64 = 300;

fn key(k: u64) -> Vec<u8> {
    format!("key{k:04}").into_bytes()
}

fn value(k: u64, seq: u64) -> Vec<u8> {
    format!("key{k:04}:{seq:010}:{}", "p".repeat((seq % 40) as usize)).into_bytes()
}

fn parse(k: u64, v: &[u8]) -> u64 {
    let s = std::str::from_utf8(v).expect("utf8 value");
    let mut parts = s.split(':');
    assert_eq!(
        parts.next(),
        Some(format!("key{k:04}").as_str()),
        "value {s} under the wrong key"
    );
    parts.next().unwrap().parse().unwrap()
}

#[test]
fn readers_see_only_written_values_in_order_while_compacting() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), tiny_options()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..4)
        .map(|r| {
            let (db, stop, written) = (db.clone(), stop.clone(), written.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(r + 1);
                let mut last = vec![0u64; KEYS as usize];
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let k = rng.below(KEYS);
                    if let Some(v) = db.get(key(k)).unwrap() {
                        // No value from the future: the writer publishes `seq` after its put
                        // returns, so a get may see at most the one put still in flight.
                        let ceiling = written.load(Ordering::SeqCst) + 1;
                        let seq = parse(k, &v);
                        assert_eq!(v, value(k, seq), "value bytes");
                        assert!(
                            seq <= ceiling,
                            "key {k}: saw {seq}, written up to {ceiling}"
                        );
                        assert!(
                            seq >= last[k as usize],
                            "key {k}: saw {seq} after {}",
                            last[k as usize]
                        );
                        last[k as usize] = seq;
                    }
                    if rng.chance(2) {
                        // A short scan: keys in order, each value well formed.
                        let from = key(rng.below(KEYS));
                        let mut prev: Option<Vec<u8>> = None;
                        for item in db.scan(from..).unwrap().take(20) {
                            let (kk, v) = item.unwrap();
                            assert!(prev.as_ref().is_none_or(|p| *p < kk));
                            let k: u64 = std::str::from_utf8(&kk[3..]).unwrap().parse().unwrap();
                            parse(k, &v);
                            prev = Some(kk);
                        }
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    let mut rng = Rng::new(99);
    for seq in 1..=20_000u64 {
        let k = rng.below(KEYS);
        db.put(key(k), value(k, seq)).unwrap();
        written.store(seq, Ordering::SeqCst);
        if seq % 5000 == 0 {
            db.compact().unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    let s = db.stats();
    assert!(reads > 1000, "readers made only {reads} reads");
    assert!(
        s.flushes > 10 && s.compactions > 5,
        "{} flushes, {} compactions",
        s.flushes,
        s.compactions
    );
}

#[test]
fn db_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Db>();
}

/// Gets from several threads while a writer forces flushes and compactions, so the published
/// table set is swapped under the readers again and again (and a small block cache evicts
/// constantly): a key that was there all along is always found with its value, a key never
/// written is never found, and `stats()` sums every thread's counters exactly.
#[test]
fn gets_stay_right_while_flushes_and_compactions_swap_versions() {
    const STABLE: u64 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let opts = tiny_options().with_block_cache_bytes(64 << 10);
    let db = Arc::new(Db::open(dir.path(), opts).unwrap());
    let stable = |i: u64| format!("stable{i:05}").into_bytes();
    let stable_value = |i: u64| format!("value-of-{i}-{}", "s".repeat((i % 50) as usize));
    for i in 0..STABLE {
        db.put(stable(i), stable_value(i)).unwrap();
    }
    db.flush().unwrap();
    let before = db.stats();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(r + 11);
                let mut gets = 0u64;
                while !stop.load(Ordering::Relaxed) || gets < 5_000 {
                    let i = rng.below(STABLE);
                    let got = db.get(stable(i)).unwrap();
                    assert_eq!(
                        got.as_deref(),
                        Some(stable_value(i).as_bytes()),
                        "stable key {i}"
                    );
                    let absent = format!("stable{i:05}x");
                    assert_eq!(db.get(absent.as_bytes()).unwrap(), None, "{absent}");
                    gets += 2;
                }
                gets
            })
        })
        .collect();
    let mut rng = Rng::new(5);
    for seq in 1..=30_000u64 {
        let k = rng.below(KEYS);
        db.put(key(k), value(k, seq)).unwrap();
        if seq % 10_000 == 0 {
            db.compact().unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let gets: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    let s = db.stats();
    assert_eq!(s.gets - before.gets, gets, "per-thread get counters summed");
    assert!(
        s.flushes - before.flushes > 10 && s.compactions - before.compactions > 3,
        "versions swapped only {} + {} times",
        s.flushes - before.flushes,
        s.compactions - before.compactions
    );
    assert!(s.block_cache_hits > 0 && s.block_cache_misses > 0, "{s:?}");
    assert!(s.block_cache_bytes <= s.block_cache_capacity);
    // Every block read from a file came through the cache as a miss.
    assert_eq!(s.block_cache_misses, s.total.data_block_reads);
}

/// Group commit: eight threads write batches at once, so leaders append many batches with one
/// write. Every acknowledged batch is readable whole and survives a reopen; a failure injected
/// into one group's write (a half-written record, the disk then full; or a panic in the
/// leader) fails every write of that group and all later ones, none hangs, and nothing
/// acknowledged is lost.
#[test]
fn concurrent_writers_are_grouped_and_lose_nothing_acknowledged() {
    use lsm_bloom::fs::{Fault, FaultyFs};
    use std::sync::Mutex;
    for (fail_at, fault) in [
        (None, Fault::Error),
        (Some(400u64), Fault::PartialWrite),
        (Some(1_500), Fault::PartialWrite),
        (Some(700), Fault::Panic),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let fs = FaultyFs::new();
        let opts = tiny_options()
            .with_memtable_size(256 << 10)
            .with_fs(Arc::new(fs.clone()));
        let db = Arc::new(Db::open(dir.path(), opts.clone()).unwrap());
        if let Some(n) = fail_at {
            fs.fail_from(fs.ops() + n, fault);
        }
        let acked = Arc::new(Mutex::new(Vec::new()));
        let writers: Vec<_> = (0..8u64)
            .map(|w| {
                let (db, acked) = (db.clone(), acked.clone());
                std::thread::spawn(move || {
                    let mut failures = 0;
                    for i in 0..1_000u64 {
                        let mut b = lsm_bloom::WriteBatch::new();
                        b.put(format!("w{w}-{i:05}-a"), format!("{w}:{i}"));
                        b.put(format!("w{w}-{i:05}-b"), format!("{w}:{i}"));
                        // A panicking file system panics the group's leader; its followers
                        // get an error, and nobody waits forever.
                        let wrote =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| db.write(b)));
                        match wrote {
                            Ok(Ok(())) => acked.lock().unwrap().push((w, i)),
                            _ => failures += 1,
                        }
                    }
                    failures
                })
            })
            .collect();
        let failures: u64 = writers.into_iter().map(|h| h.join().unwrap()).sum();
        let acked = acked.lock().unwrap().clone();
        assert_eq!(acked.len() as u64 + failures, 8_000);
        if fail_at.is_some() {
            assert!(failures > 0, "the injected failure failed no write");
        } else {
            assert_eq!(failures, 0);
            assert!(db.stats().writes_grouped > 0, "no write was ever grouped");
        }
        drop(db);
        let fs_ok = opts.with_fs(Arc::new(lsm_bloom::fs::StdFs));
        let db = Db::open(dir.path(), fs_ok).unwrap();
        for (w, i) in &acked {
            for part in ["a", "b"] {
                let v = db.get(format!("w{w}-{i:05}-{part}")).unwrap();
                assert_eq!(
                    v,
                    Some(format!("{w}:{i}").into_bytes()),
                    "acknowledged {w}/{i} lost"
                );
            }
        }
        // A batch is whole or absent: never one key of a pair without the other.
        for w in 0..8u64 {
            for i in 0..1_000u64 {
                let a = db.get(format!("w{w}-{i:05}-a")).unwrap();
                let b = db.get(format!("w{w}-{i:05}-b")).unwrap();
                assert_eq!(a.is_some(), b.is_some(), "batch {w}/{i} half there");
            }
        }
    }
}
