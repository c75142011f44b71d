//! Transactions that delete ranges and change expiries: what they read before the commit, what
//! the commit leaves, and that a changed expiry never undoes a concurrent write.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use common::Rng;
use lsm_bloom::{Db, Error, KeyExpiry, ManualClock, Options};

mod common;

fn k(i: u64) -> Vec<u8> {
    format!("k{i:03}").into_bytes()
}

/// A random bound over keys `k000`..`k059`, or none.
fn bound(rng: &mut Rng) -> Bound<Vec<u8>> {
    match rng.below(5) {
        0 => Bound::Unbounded,
        1 | 2 => Bound::Included(k(rng.below(60))),
        _ => Bound::Excluded(k(rng.below(60))),
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The whole store equals `model`.
fn assert_store(db: &Db, model: &Model, what: &str) {
    let store: Vec<_> = db
        .scan::<Vec<u8>, _>(..)
        .expect("scan")
        .map(|e| e.expect("entry"))
        .collect();
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(store, want, "{what}");
}

fn in_model(model: &Model, range: &(Bound<Vec<u8>>, Bound<Vec<u8>>)) -> Vec<(Vec<u8>, Vec<u8>)> {
    let empty = match (&range.0, &range.1) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a >= b
        }
        _ => false,
    };
    if empty {
        return Vec::new();
    }
    model
        .range::<Vec<u8>, _>(range.clone())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Random puts, deletes and range deletes in transactions, each read checked against a model
/// of the store as the transaction should see it, and the store checked after each commit.
/// The store's own data lies in tables, a memtable and earlier ranges.
#[test]
fn a_transactions_ranges_hide_keys_from_its_reads_and_its_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    let mut model = Model::new();
    let mut rng = Rng::new(57);
    let mut checked = 0;
    for round in 0..120u64 {
        // The store changes between transactions: some writes, sometimes a flush.
        for _ in 0..8 {
            let i = rng.below(60);
            db.put(k(i), format!("s{round}")).expect("put");
            model.insert(k(i), format!("s{round}").into_bytes());
        }
        if round % 7 == 0 {
            db.flush().expect("flush");
        }
        let mut tx = db.transaction();
        let mut seen = model.clone();
        for step in 0..12u64 {
            match rng.below(6) {
                0 | 1 => {
                    let i = rng.below(60);
                    let v = format!("t{round}.{step}").into_bytes();
                    tx.put(k(i), v.clone()).expect("put");
                    seen.insert(k(i), v);
                }
                2 => {
                    let i = rng.below(60);
                    tx.delete(k(i)).expect("delete");
                    seen.remove(&k(i));
                }
                3 => {
                    let r = (bound(&mut rng), bound(&mut rng));
                    tx.delete_range(r.clone()).expect("delete_range");
                    for (key, _) in in_model(&seen, &r) {
                        seen.remove(&key);
                    }
                }
                _ => {
                    let i = rng.below(60);
                    assert_eq!(tx.get(k(i)).expect("get"), seen.get(&k(i)).cloned());
                    let r = (bound(&mut rng), bound(&mut rng));
                    let want = in_model(&seen, &r);
                    let fwd: Vec<_> = tx
                        .scan(r.clone())
                        .expect("scan")
                        .map(|e| e.expect("entry"))
                        .collect();
                    assert_eq!(fwd, want, "round {round} step {step}: scan {r:?}");
                    let mut back: Vec<_> = tx
                        .scan(r.clone())
                        .expect("scan")
                        .rev()
                        .map(|e| e.expect("entry"))
                        .collect();
                    back.reverse();
                    assert_eq!(back, want, "round {round} step {step}: backward scan {r:?}");
                    let keys: Vec<Vec<u8>> = (0..4).map(|_| k(rng.below(60))).collect();
                    let got = tx.multi_get(&keys).expect("multi_get");
                    let expect: Vec<_> = keys.iter().map(|key| seen.get(key).cloned()).collect();
                    assert_eq!(got, expect);
                    checked += 1;
                }
            }
        }
        // Nothing is written before the commit.
        assert_store(&db, &model, "before the commit");
        // Its reads of single keys may conflict with nothing: only this thread writes.
        tx.commit().expect("commit");
        model = seen;
        assert_store(&db, &model, &format!("round {round}"));
    }
    assert!(checked > 100, "too few reads checked: {checked}");
    drop(db);
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert_store(&db, &model, "after reopening");
}

#[test]
fn a_range_deleted_in_a_keyspace_stays_in_it_and_a_range_read_since_fails_the_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    let (a, b) = (db.keyspace("a").expect("a"), db.keyspace("b").expect("b"));
    for i in 0..10 {
        a.put(k(i), "a").expect("put");
        b.put(k(i), "b").expect("put");
    }
    let mut tx = db.transaction();
    tx.delete_range_in(&a, k(2)..k(8)).expect("delete_range_in");
    assert_eq!(tx.get_in(&a, k(5)).expect("get"), None);
    assert_eq!(tx.get_in(&b, k(5)).expect("get"), Some(b"b".to_vec()));
    assert!(!tx
        .contains_range_in(&a, k(2)..k(8))
        .expect("contains_range"));
    tx.commit().expect("commit");
    let left: Vec<_> = a
        .scan::<Vec<u8>, _>(..)
        .expect("scan")
        .map(|e| e.expect("entry").0)
        .collect();
    assert_eq!(left, vec![k(0), k(1), k(8), k(9)]);
    assert_eq!(b.scan::<Vec<u8>, _>(..).expect("scan").count(), 10);

    // A range deleted by another writer over a key the transaction read fails its commit.
    let mut tx = db.transaction();
    assert_eq!(tx.get_in(&b, k(3)).expect("get"), Some(b"b".to_vec()));
    tx.put_in(&b, "copy", "b").expect("put");
    db.write({
        let mut batch = lsm_bloom::WriteBatch::new();
        batch.delete_range_in(&b, k(0)..k(5));
        batch
    })
    .expect("write");
    assert!(matches!(tx.commit(), Err(Error::Conflict { .. })));
}

fn at(ms: u64) -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[test]
fn set_expiry_keeps_the_value_and_changes_only_the_expiry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(1_000_000));
    let db = Db::open(dir.path(), Options::default().with_clock(clock.clone())).expect("open");
    db.put("s", "session").expect("put");
    assert!(db.set_expiry("s", Some(at(1_060_000))).expect("set_expiry"));
    assert_eq!(
        db.expiry_of("s").expect("expiry_of"),
        KeyExpiry::At(1_060_000)
    );
    assert_eq!(db.get("s").expect("get"), Some(b"session".to_vec()));
    // PERSIST.
    assert!(db.set_expiry("s", None).expect("persist"));
    assert_eq!(db.expiry_of("s").expect("expiry_of"), KeyExpiry::Never);
    clock.advance(Duration::from_secs(3600));
    assert_eq!(db.get("s").expect("get"), Some(b"session".to_vec()));
    // An absent key is left absent.
    assert!(!db
        .set_expiry("none", Some(at(9_999_999)))
        .expect("set_expiry"));
    assert_eq!(db.get("none").expect("get"), None);
    // An expiry already past deletes it.
    assert!(db.set_expiry("s", Some(at(1))).expect("set_expiry"));
    assert_eq!(db.expiry_of("s").expect("expiry_of"), KeyExpiry::Absent);
    // In a keyspace, which alone changes.
    let ks = db.keyspace("ks").expect("keyspace");
    ks.put("x", "1").expect("put");
    db.put("x", "0").expect("put");
    let now = 1_000_000 + 3_600_000;
    assert!(ks.set_expiry("x", Some(at(now + 5))).expect("set_expiry"));
    assert_eq!(
        ks.expiry_of("x").expect("expiry_of"),
        KeyExpiry::At(now + 5)
    );
    assert_eq!(db.expiry_of("x").expect("expiry_of"), KeyExpiry::Never);
    clock.advance(Duration::from_millis(5));
    assert_eq!(ks.get("x").expect("get"), None);
    assert_eq!(db.get("x").expect("get"), Some(b"0".to_vec()));
}

/// One thread counts up with read-modify-write transactions while another changes the key's
/// expiry over and over: every increment must survive. A `set_expiry` that wrote back a
/// value it read without its read being checked would put an old count back.
#[test]
fn set_expiry_never_undoes_a_concurrent_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Db::open(dir.path(), Options::default()).expect("open"));
    db.put("n", "0").expect("put");
    let far = at(u64::MAX / 4);
    let increments = 3000u64;
    let done = std::sync::atomic::AtomicBool::new(false);
    let changes = std::thread::scope(|s| {
        let changer = s.spawn(|| {
            let mut changes = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let to = if changes.is_multiple_of(2) {
                    Some(far)
                } else {
                    None
                };
                assert!(db.set_expiry("n", to).expect("set_expiry"));
                changes += 1;
            }
            changes
        });
        for _ in 0..increments {
            loop {
                let mut tx = db.transaction();
                let n: u64 = String::from_utf8_lossy(&tx.get("n").expect("get").expect("n"))
                    .parse()
                    .expect("a count");
                tx.put("n", (n + 1).to_string()).expect("put");
                match tx.commit() {
                    Err(Error::Conflict { .. }) => continue,
                    r => break r.expect("commit"),
                }
            }
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        changer.join().expect("changer")
    });
    assert_eq!(
        db.get("n").expect("get"),
        Some(increments.to_string().into_bytes())
    );
    assert!(
        changes > 100,
        "the expiry changed only {changes} times: the race was not run"
    );
}
