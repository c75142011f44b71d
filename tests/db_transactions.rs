//! Optimistic transactions: what a transaction reads and scans, and the commits that must
//! fail (lost update, write skew, phantom, a key expired or a range deleted since, history no
//! longer in memory) or must not (blind writes, writes elsewhere).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use lsm_bloom::{Db, Error, ManualClock, Options};

fn open() -> (tempfile::TempDir, Db) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    (dir, db)
}

fn is_conflict<T: std::fmt::Debug>(r: lsm_bloom::Result<T>) -> bool {
    match r {
        Err(Error::Conflict { .. }) => true,
        other => panic!("expected a conflict, got {other:?}"),
    }
}

fn k(i: u32) -> Vec<u8> {
    format!("k{i:03}").into_bytes()
}

#[test]
fn reads_see_the_snapshot_and_own_writes_in_scans_both_ways() {
    let (_d, db) = open();
    let mut model = BTreeMap::new();
    for i in (0..40).step_by(2) {
        db.put(k(i), format!("v{i}")).expect("put");
        model.insert(k(i), format!("v{i}").into_bytes());
    }
    let mut tx = db.transaction();
    // Written after the transaction began: it does not see these.
    db.put(k(1), "later").expect("put");
    db.delete(k(2)).expect("delete");
    for i in [3u32, 4, 17, 39, 50] {
        tx.put(k(i), format!("own{i}")).expect("put");
        model.insert(k(i), format!("own{i}").into_bytes());
    }
    for i in [0u32, 6, 18, 41] {
        tx.delete(k(i)).expect("delete");
        model.remove(&k(i));
    }
    assert_eq!(tx.get(k(1)).expect("get"), None);
    assert_eq!(tx.get(k(2)).expect("get"), Some(b"v2".to_vec()));
    assert_eq!(tx.get(k(4)).expect("get"), Some(b"own4".to_vec()));
    assert_eq!(tx.get(k(6)).expect("get"), None);
    let got = tx.multi_get(&[k(2), k(3), k(6), k(7)]).expect("multi_get");
    assert_eq!(
        got,
        vec![Some(b"v2".to_vec()), Some(b"own3".to_vec()), None, None]
    );
    let ranges: [(u32, u32); 4] = [(0, 60), (3, 18), (5, 6), (19, 39)];
    for (a, b) in ranges {
        let want: Vec<_> = model
            .range(k(a)..k(b))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let fwd: Vec<_> = tx
            .scan(k(a)..k(b))
            .expect("scan")
            .map(|e| e.expect("entry"))
            .collect();
        assert_eq!(fwd, want, "forward {a}..{b}");
        let mut back: Vec<_> = tx
            .scan(k(a)..k(b))
            .expect("scan")
            .rev()
            .map(|e| e.expect("entry"))
            .collect();
        back.reverse();
        assert_eq!(back, want, "backward {a}..{b}");
        // Both ends at once meet in the middle without losing or repeating an entry.
        let mut it = tx.scan(k(a)..k(b)).expect("scan");
        let (mut front, mut rear) = (Vec::new(), Vec::new());
        while let Some(e) = it.next() {
            front.push(e.expect("entry"));
            match it.next_back() {
                Some(e) => rear.push(e.expect("entry")),
                None => break,
            }
        }
        rear.reverse();
        front.extend(rear);
        assert_eq!(front, want, "both ends {a}..{b}");
    }
    let any = model.range(k(5)..k(6)).next().is_some();
    assert_eq!(tx.contains_range(k(5)..k(6)).expect("contains"), any);
    assert!(!tx.contains_range(k(40)..k(50)).expect("contains"));
    assert!(tx.contains_range(k(40)..=k(50)).expect("contains"));
    // It read k(1) and k(2), both written since it began.
    assert!(is_conflict(tx.commit()));
    assert_eq!(
        db.get(k(50)).expect("get"),
        None,
        "a failed commit writes nothing"
    );
}

#[test]
fn a_lost_update_fails_to_commit_and_retried_increments_all_count() {
    let (_d, db) = open();
    db.put("n", "0").expect("put");
    let mut a = db.transaction();
    let mut b = db.transaction();
    let va = a.get("n").expect("get").expect("n");
    let vb = b.get("n").expect("get").expect("n");
    a.put("n", [va, b"+a".to_vec()].concat()).expect("put");
    b.put("n", [vb, b"+b".to_vec()].concat()).expect("put");
    a.commit().expect("first commit");
    assert!(is_conflict(b.commit()));
    assert_eq!(db.get("n").expect("get"), Some(b"0+a".to_vec()));

    // Threads incrementing one counter with retries: none is lost.
    let db = Arc::new(db);
    db.put("count", 0u64.to_le_bytes()).expect("put");
    let (threads, each) = (4, 200);
    let conflicts: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let db = Arc::clone(&db);
                s.spawn(move || {
                    let mut conflicts = 0;
                    for _ in 0..each {
                        loop {
                            let mut tx = db.transaction();
                            let v = tx.get("count").expect("get").expect("count");
                            let n = u64::from_le_bytes(v.try_into().expect("8 bytes"));
                            tx.put("count", (n + 1).to_le_bytes()).expect("put");
                            match tx.commit() {
                                Ok(()) => break,
                                Err(Error::Conflict { .. }) => conflicts += 1,
                                Err(e) => panic!("{e}"),
                            }
                        }
                    }
                    conflicts
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).sum()
    });
    let v = db.get("count").expect("get").expect("count");
    assert_eq!(
        u64::from_le_bytes(v.try_into().expect("8 bytes")),
        threads * each
    );
    eprintln!("{conflicts} conflicts retried");
}

#[test]
fn write_skew_fails_to_commit() {
    // Two on call, at least one must stay: each transaction sees both on call and takes
    // itself off. Under snapshot isolation both commit and nobody is on call.
    let (_d, db) = open();
    db.put("alice", "on").expect("put");
    db.put("bob", "on").expect("put");
    let mut a = db.transaction();
    let mut b = db.transaction();
    for tx in [&mut a, &mut b] {
        let on = tx.multi_get(&["alice", "bob"]).expect("multi_get");
        assert_eq!(on.iter().flatten().count(), 2);
    }
    a.put("alice", "off").expect("put");
    b.put("bob", "off").expect("put");
    a.commit().expect("first");
    assert!(is_conflict(b.commit()));
    assert_eq!(db.get("bob").expect("get"), Some(b"on".to_vec()));
}

#[test]
fn a_phantom_in_a_scanned_range_fails_the_commit_a_write_outside_does_not() {
    let (_d, db) = open();
    for i in 0..10 {
        db.put(k(i * 10), "x").expect("put");
    }
    let scanned = |db: &Db| {
        let mut tx = db.transaction();
        let n = tx.scan(k(20)..k(50)).expect("scan").count();
        assert!(n >= 3, "{n}");
        tx.put("count", n.to_string()).expect("put");
        tx
    };
    // A key inserted in the range, none of whose keys changed: a phantom.
    let tx = scanned(&db);
    db.put(k(35), "new").expect("put");
    assert!(is_conflict(tx.commit()));
    // A range deleted over part of it.
    let tx = scanned(&db);
    db.delete_range(k(45)..k(47)).expect("delete_range");
    assert!(is_conflict(tx.commit()));
    // Writes next to it, not in it.
    let tx = scanned(&db);
    db.put(k(50), "edge").expect("put");
    db.put(k(19), "edge").expect("put");
    db.delete_range(k(60)..k(70)).expect("delete_range");
    tx.commit().expect("nothing in the range changed");
    // Backward and unbounded scans count whole too.
    let mut tx = db.transaction();
    assert!(tx.scan(k(60)..).expect("scan").next_back().is_some());
    tx.put("count", "x").expect("put");
    db.put(k(999), "far").expect("put");
    assert!(is_conflict(tx.commit()));
}

#[test]
fn an_absent_key_read_then_created_elsewhere_fails_the_commit() {
    let (_d, db) = open();
    let mut tx = db.transaction();
    assert_eq!(tx.get("lock").expect("get"), None);
    tx.put("lock", "mine").expect("put");
    db.put("lock", "theirs").expect("put");
    assert!(is_conflict(tx.commit()));
    assert_eq!(db.get("lock").expect("get"), Some(b"theirs".to_vec()));
}

#[test]
fn blind_writes_and_reads_of_unchanged_keys_commit() {
    let (_d, db) = open();
    db.put("a", "1").expect("put");
    let mut tx = db.transaction();
    tx.put("b", "2").expect("put");
    db.put("b", "other").expect("put");
    tx.commit().expect("a blind write checks nothing");
    assert_eq!(db.get("b").expect("get"), Some(b"2".to_vec()));
    let mut tx = db.transaction();
    assert_eq!(tx.get("a").expect("get"), Some(b"1".to_vec()));
    tx.put("c", "3").expect("put");
    db.put("d", "unrelated").expect("put");
    tx.commit().expect("nothing read changed");
    // A key it wrote and then read is its own write: not a read that can conflict.
    let mut tx = db.transaction();
    tx.put("e", "own").expect("put");
    assert_eq!(tx.get("e").expect("get"), Some(b"own".to_vec()));
    db.put("e", "theirs").expect("put");
    tx.commit().expect("own write read back");
    assert_eq!(db.get("e").expect("get"), Some(b"own".to_vec()));
    // Read only: commits at once, whatever changed.
    let mut tx = db.transaction();
    tx.get("a").expect("get");
    db.put("a", "changed").expect("put");
    tx.commit().expect("wrote nothing");
}

#[test]
fn a_value_read_that_expires_before_the_commit_fails_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t0 = 1_800_000_000_000u64;
    let clock = Arc::new(ManualClock::new(t0));
    let db = Db::open(dir.path(), Options::default().with_clock(clock.clone())).expect("open");
    let at = UNIX_EPOCH + Duration::from_millis(t0 + 1_000);
    db.put_with_expiry("session", "s", at).expect("put");
    let read = |db: &Db| {
        let mut tx = db.transaction();
        assert_eq!(tx.get("session").expect("get"), Some(b"s".to_vec()));
        tx.put("seen", "yes").expect("put");
        tx
    };
    let tx = read(&db);
    clock.set(t0 + 999);
    tx.commit().expect("not yet expired");
    let tx = read(&db);
    clock.set(t0 + 1_000);
    assert!(is_conflict(tx.commit()));
    // An own put whose expiry has passed reads as absent.
    let mut tx = db.transaction();
    tx.put_with_expiry("gone", "g", UNIX_EPOCH + Duration::from_millis(t0))
        .expect("put");
    assert_eq!(tx.get("gone").expect("get"), None);
}

#[test]
fn a_commit_after_the_snapshots_memtable_was_flushed_fails_clearly() {
    let (_d, db) = open();
    db.put("a", "1").expect("put");
    let mut tx = db.transaction();
    tx.get("a").expect("get");
    tx.put("b", "2").expect("put");
    db.put("unrelated", "x").expect("put");
    db.flush().expect("flush");
    match tx.commit() {
        Err(Error::Conflict { reason }) => assert!(reason.contains("no longer"), "{reason}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(db.get("b").expect("get"), None);
}

#[test]
fn keyspaces_conflict_alone_and_a_dropped_one_fails_the_commit() {
    let (_d, db) = open();
    let (a, b) = (db.keyspace("a").expect("a"), db.keyspace("b").expect("b"));
    a.put("k", "a").expect("put");
    b.put("k", "b").expect("put");
    let mut tx = db.transaction();
    assert_eq!(tx.get_in(&a, "k").expect("get"), Some(b"a".to_vec()));
    tx.put_in(&b, "k", "from a").expect("put");
    // The same key written in another keyspace is another key.
    db.put("k", "default").expect("put");
    b.put("other", "x").expect("put");
    tx.commit().expect("nothing read changed");
    assert_eq!(b.get("k").expect("get"), Some(b"from a".to_vec()));

    let mut tx = db.transaction();
    tx.get_in(&a, "k").expect("get");
    tx.put_in(&b, "k", "again").expect("put");
    a.put("k", "changed").expect("put");
    assert!(is_conflict(tx.commit()));

    let mut tx = db.transaction();
    tx.get_in(&a, "k").expect("get");
    tx.put("x", "1").expect("put");
    drop(a);
    assert!(db.drop_keyspace("a").expect("drop"));
    assert!(is_conflict(tx.commit()));
}

#[test]
fn a_transaction_over_its_limit_is_refused_and_keeps_what_it_had() {
    let (_d, db) = open();
    let mut tx = db.transaction().with_limit(1_000);
    tx.put("small", "v").expect("put");
    match tx.put("big", vec![0u8; 2_000]) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("limit"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    match tx.scan(vec![1u8; 600]..vec![2u8; 600]) {
        Err(Error::InvalidArgument(_)) => {}
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    tx.commit().expect("commit");
    assert_eq!(db.get("small").expect("get"), Some(b"v".to_vec()));
    assert_eq!(db.get("big").expect("get"), None);
}

#[test]
fn validate_tells_a_change_to_what_was_read_without_writing() {
    let (_d, db) = open();
    db.put("watched", "1").expect("put");
    let mut tx = db.transaction();
    tx.get("watched").expect("get");
    tx.get("absent").expect("get");
    db.put("elsewhere", "x").expect("put");
    tx.validate().expect("nothing read changed");
    db.put("absent", "now here").expect("put");
    assert!(is_conflict(tx.validate()));
    assert!(is_conflict(tx.validate()), "a look changes nothing");
    tx.put("w", "v").expect("put");
    assert!(is_conflict(tx.commit()));
    // A transaction that read nothing has nothing to lose.
    let tx = db.transaction();
    db.put("watched", "2").expect("put");
    tx.validate().expect("read nothing");
}
