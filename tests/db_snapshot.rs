//! Snapshots (`Db::snapshot`): every read of a snapshot equals the model of the store at the
//! moment it was taken, through flushes, compactions, reopens of other snapshots and
//! concurrent writers; dropping them releases what they held.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::workload::{run_step, workload, Model};
use common::{counter, tiny_options, CounterWriter, Rng};
use lsm_bloom::{Db, Options, PrefixExtractor, PrefixFilters, Snapshot};

fn scan_all(s: &Snapshot) -> Model {
    s.scan::<&[u8], _>(..)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

/// Every get, the full scan and a few range and prefix scans of `s` against `model`.
fn check(s: &Snapshot, model: &Model, rng: &mut Rng, what: &str) {
    assert!(scan_all(s) == *model, "{what}: full scan differs");
    // Backward, in descending key order.
    let back: Vec<(Vec<u8>, Vec<u8>)> = s
        .scan::<&[u8], _>(..)
        .unwrap()
        .rev()
        .map(|r| r.unwrap())
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .iter()
        .rev()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert!(back == want, "{what}: full reverse scan differs");
    for i in 0..60 {
        let k = format!("key{i:03}").into_bytes();
        assert_eq!(
            s.get(&k).unwrap().as_ref(),
            model.get(&k),
            "{what}: get {i}"
        );
        assert_eq!(
            s.get_with(&k, <[u8]>::to_vec).unwrap().as_ref(),
            model.get(&k),
            "{what}: get_with {i}"
        );
    }
    for _ in 0..3 {
        let (a, b) = (rng.below(60), rng.below(60));
        let (lo, hi) = (format!("key{:03}", a.min(b)), format!("key{:03}", a.max(b)));
        let got: Model = s
            .scan(lo.clone().into_bytes()..hi.clone().into_bytes())
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        let want: Model = model
            .range(lo.into_bytes()..hi.into_bytes())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert!(got == want, "{what}: range scan differs");
    }
    let p = format!("key0{}", rng.below(6));
    let got: Model = s.scan_prefix(&p).unwrap().map(|r| r.unwrap()).collect();
    let want: Model = model
        .iter()
        .filter(|(k, _)| k.starts_with(p.as_bytes()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert!(got == want, "{what}: prefix scan differs");
}

#[test]
fn every_snapshot_read_equals_the_model_at_its_moment() {
    for seed in 0..6u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = tiny_options();
        if seed % 2 == 1 {
            // Prefix filters over "key0", "key1", ...: prefix scans consult them.
            opts.prefix_filters = Some(PrefixFilters::with(PrefixExtractor::fixed(4)));
        }
        let db = Db::open(dir.path(), opts).unwrap();
        let mut rng = Rng::new(seed ^ 0x5eed);
        let mut model = Model::new();
        let mut live: Vec<(Snapshot, Model, usize)> = Vec::new();
        let (mut taken, mut checked) = (0, 0);
        for (i, step) in workload(seed, 3000).into_iter().enumerate() {
            run_step(&db, &mut model, step);
            if rng.chance(3) {
                live.push((db.snapshot(), model.clone(), i));
                taken += 1;
            }
            if !live.is_empty() && rng.chance(2) {
                let (s, m, at) = live.swap_remove(rng.below(live.len() as u64) as usize);
                check(
                    &s,
                    &m,
                    &mut rng,
                    &format!("seed {seed} snapshot of step {at} at {i}"),
                );
                checked += 1;
            }
        }
        assert_eq!(db.stats().live_snapshots, live.len() as u64);
        for (s, m, at) in &live {
            check(
                s,
                m,
                &mut rng,
                &format!("seed {seed} snapshot of step {at} at the end"),
            );
            checked += 1;
        }
        assert!(
            taken > 50 && checked > 50,
            "{taken} taken, {checked} checked"
        );
        let s = db.stats();
        assert!(
            s.compactions > 0 && s.flushes > 5,
            "{} {}",
            s.flushes,
            s.compactions
        );
        drop(live);
        assert_eq!(db.stats().live_snapshots, 0);
        assert_eq!(db.stats().oldest_snapshot_age, None);
    }
}

/// Writers commit batches that set `a` and `b` to the same counter value; snapshots taken
/// from other threads meanwhile (memtables rotating and flushing under them) must always see
/// `a == b`, never less than an earlier snapshot of the same thread, and never less than what
/// the writer had acknowledged before the snapshot was taken.
#[test]
fn snapshots_see_whole_batches_and_every_acknowledged_write_under_concurrency() {
    let dir = tempfile::tempdir().unwrap();
    let db =
        Arc::new(Db::open(dir.path(), Options::default().with_memtable_size(8 * 1024)).unwrap());
    let writer = CounterWriter::start(db.clone());
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (db, acked) = (db.clone(), writer.acked.clone());
            std::thread::spawn(move || {
                let mut last = 0u64;
                // At least 3,000 snapshots, and on until the writer's batches have made several
                // flushes: with only a count, fast readers on a loaded machine could finish
                // before the writer's first batch (the final checks then failed).
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
                let mut taken = 0;
                while taken < 3000
                    || (db.stats().flushes <= 3 && std::time::Instant::now() < deadline)
                {
                    taken += 1;
                    let before = acked.load(Ordering::SeqCst);
                    let s = db.snapshot();
                    let (a, b) = (counter(s.get("a").unwrap()), counter(s.get("b").unwrap()));
                    assert_eq!(a, b, "half a batch");
                    assert!(
                        a >= before,
                        "acknowledged {before} before the snapshot, saw {a}"
                    );
                    assert!(a >= last, "went back from {last} to {a}");
                    // The scan agrees with the gets.
                    let scanned: Vec<_> = s.scan("a".."c").unwrap().map(|r| r.unwrap().1).collect();
                    // (Before the first batch, neither key exists.)
                    let want: Vec<Vec<u8>> = match a {
                        0 => Vec::new(),
                        _ => vec![a.to_be_bytes().to_vec(), b.to_be_bytes().to_vec()],
                    };
                    assert_eq!(scanned, want);
                    last = a;
                }
                last
            })
        })
        .collect();
    let seen: Vec<u64> = readers.into_iter().map(|r| r.join().unwrap()).collect();
    let written = writer.stop();
    assert!(db.stats().flushes > 3, "{}", db.stats().flushes);
    assert!(
        seen.iter().all(|&s| s > 0 && s <= written),
        "{seen:?} of {written}"
    );
}

#[test]
fn a_snapshot_keeps_replaced_tables_readable_and_outlives_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny_options()).unwrap();
    for i in 0..400 {
        db.put(format!("k{i:04}"), format!("old{i}")).unwrap();
    }
    db.flush().unwrap();
    let s = db.snapshot();
    std::thread::sleep(Duration::from_millis(20));
    for i in 0..400 {
        if i % 3 == 0 {
            db.delete(format!("k{i:04}")).unwrap();
        } else {
            db.put(format!("k{i:04}"), format!("new{i}")).unwrap();
        }
    }
    // Every table the snapshot reads is replaced and deleted from the directory.
    db.compact().unwrap();
    let stats = db.stats();
    assert_eq!(stats.live_snapshots, 1);
    assert!(stats.oldest_snapshot_age.unwrap() >= Duration::from_millis(20));
    db.close().unwrap();
    // The store is closed and its directory unlocked: it reopens while the snapshot lives.
    let db = Db::open(dir.path(), tiny_options()).unwrap();
    assert_eq!(db.get("k0001").unwrap(), Some(b"new1".to_vec()));
    assert_eq!(db.get("k0003").unwrap(), None);
    for i in 0..400 {
        assert_eq!(
            s.get(format!("k{i:04}")).unwrap(),
            Some(format!("old{i}").into_bytes())
        );
    }
    assert_eq!(s.scan_prefix("k").unwrap().count(), 400);
}
