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
                    let ceiling = written.load(Ordering::SeqCst);
                    if let Some(v) = db.get(key(k)).unwrap() {
                        let seq = parse(k, &v);
                        assert_eq!(v, value(k, seq), "value bytes");
                        assert!(
                            seq >= last[k as usize],
                            "key {k}: saw {seq} after {}",
                            last[k as usize]
                        );
                        let _ = ceiling;
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
