//! Tables expired whole leave the lookups' search: once a get or multi_get has passed over
//! such a table (one that hides no older table), the store prunes it from what later lookups
//! search, while the table stays in the store (scans, compactions and statistics still see
//! it) until the background drops it.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use lsm_bloom::{Db, ManualClock, Options, WriteBatch};

fn at(ms: u64) -> std::time::SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Small tables, and nothing that would drop expired tables by itself.
fn options(clock: &Arc<ManualClock>) -> Options {
    Options::default()
        .with_clock(clock.clone())
        .with_memtable_size(64 * 1024)
        .with_block_size(256)
        .with_target_file_size(8 * 1024)
        .with_idle_compaction_after(None)
        .with_expired_reclaim_after(None)
        .with_expired_share_to_reclaim(None)
        .with_expired_ratio_to_reclaim(None)
}

fn skips(db: &Db) -> u64 {
    db.stats().levels.iter().map(|l| l.expired_skips).sum()
}

fn tables(db: &Db) -> usize {
    db.levels().iter().map(Vec::len).sum()
}

fn put_expiring(db: &Db, prefix: &str, n: u32, expiry: u64) {
    let mut batch = WriteBatch::new();
    for i in 0..n {
        batch.put_with_expiry(format!("{prefix}{i:03}"), vec![b'x'; 200], at(expiry));
    }
    db.write(batch).expect("write");
}

#[test]
fn gets_stop_searching_tables_expired_whole_once_one_passed_over_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(100_000));
    let db = Db::open(dir.path(), options(&clock)).expect("open");
    for i in 0..100 {
        db.put(format!("b{i:03}"), vec![b'v'; 200]).expect("put");
    }
    put_expiring(&db, "e", 100, 200_000);
    db.compact().expect("compact"); // one level: b tables, then e tables (8 KiB each)
    let held = tables(&db);
    assert!(
        held >= 4,
        "{held} tables: the e keys need tables of their own"
    );

    clock.set(200_000);
    // A scan reads the clock; the store records the time it saw, which gets go by.
    let _ = db.iter().next();
    assert_eq!(db.get("e090").expect("get"), None);
    assert_eq!(skips(&db), 1, "the first get passed over an e table");
    for i in 50..100 {
        assert_eq!(db.get(format!("e{i:03}")).expect("get"), None);
    }
    let keys: Vec<String> = (60..70).map(|i| format!("e{i:03}")).collect();
    for found in db.multi_get(&keys) {
        assert_eq!(found.expect("multi_get"), None);
    }
    assert_eq!(
        skips(&db),
        1,
        "later lookups do not search the e tables at all"
    );
    assert_eq!(tables(&db), held, "the tables are still held");
    for i in (0..100).step_by(7) {
        let v = db.get(format!("b{i:03}")).expect("get");
        assert_eq!(v, Some(vec![b'v'; 200]), "b{i:03}");
    }

    // On level 0, the end of a get's candidates: g keys above every older table's range.
    put_expiring(&db, "g", 10, 300_000);
    db.flush().expect("flush");
    assert_eq!(db.get("g005").expect("get"), Some(vec![b'x'; 200]));
    clock.set(300_000);
    let _ = db.iter().next(); // (a scan passes over the g table: counted too)
    let before = skips(&db);
    assert_eq!(db.get("g005").expect("get"), None);
    assert_eq!(skips(&db), before + 1);
    for i in 0..10 {
        assert_eq!(db.get(format!("g{i:03}")).expect("get"), None);
    }
    assert_eq!(skips(&db), before + 1, "the g table left the search too");

    // A flush builds its table set from the pruned one, which stays pruned (the unit test
    // `a_pruned_search_leaves_out_only_the_tables_passable_by_its_time`); it also wakes the
    // background, which may now drop the expired tables whole. Either way: no table passed
    // over again, and the same answers.
    db.put("c000", "new").expect("put");
    db.flush().expect("flush");
    assert_eq!(db.get("e070").expect("get"), None);
    assert_eq!(db.get("g001").expect("get"), None);
    assert_eq!(skips(&db), before + 1);
    assert_eq!(db.get("c000").expect("get"), Some(b"new".to_vec()));
    let live: Vec<Vec<u8>> = db.iter().map(|e| e.expect("entry").0).collect();
    assert_eq!(live.len(), 101, "the b keys and c000");
}
