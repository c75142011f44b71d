//! Read faults: table reads go through the store's `FileSystem`, so a `FaultyFs` can make a
//! positional read fail (`EIO`), come back short, or return one flipped bit — after the table
//! was opened and validated. Every `get` and `scan` then answers right or fails with a typed
//! error (never a wrong value, never a skipped key, never a panic), and the same call without
//! the fault answers right again (the block cache kept nothing damaged). A compaction that hits
//! one fails without publishing a damaged table, and a reopen finds every key. Faults on the
//! reads `Db::open` makes (manifest, logs, table footers, indexes, filters) make it fail with a
//! typed error, or open with the right contents (a damaged filter is read around, counted).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{random_write, tiny_options, Rng};
use lsm_bloom::fs::{FaultyFs, FileSystem, ReadFault};
use lsm_bloom::{Db, Error, Options};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn options(fs: &FaultyFs, cache: bool) -> Options {
    tiny_options()
        .with_fs(Arc::new(fs.clone()))
        .with_block_cache_bytes(if cache { 1 << 20 } else { 0 })
}

/// A settled store at `dir` whose keys were overwritten across several flushes (so a read that
/// fell through to an older table would return an older value), and its contents.
fn build(dir: &std::path::Path) -> Model {
    let db = Db::open(dir, tiny_options()).unwrap();
    let mut model = Model::new();
    let mut rng = Rng::new(7);
    for round in 0..4u64 {
        for _ in 0..900 {
            random_write(&db, &mut model, &mut rng, key, round, 10);
        }
        db.flush().unwrap();
    }
    db.wait_for_compactions().unwrap();
    let levels: Vec<usize> = db.levels().iter().map(Vec::len).collect();
    assert!(levels.iter().filter(|&&n| n > 0).count() >= 2, "{levels:?}");
    model
}

/// A copy of the (closed) store at `dir` in a new temporary directory.
fn copy_store(dir: &std::path::Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap() != "LOCK" {
            std::fs::copy(&p, copy.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    copy
}

fn fault(rng: &mut Rng) -> ReadFault {
    match rng.below(3) {
        0 => ReadFault::Error,
        1 => ReadFault::Short,
        _ => ReadFault::FlipBit(rng.next()),
    }
}

fn typed(e: &Error) -> bool {
    // A flipped bit in a table's version field reads as a newer format (FORMAT.md §3).
    matches!(
        e,
        Error::Io { .. } | Error::Corruption { .. } | Error::UnsupportedVersion { .. }
    )
}

/// A scan of up to 40 keys from `start` (up, or down with `back`): the results before the
/// first error, and the error.
type Entries = Vec<Entry>;
/// A key and its value.
type Entry = (Vec<u8>, Vec<u8>);

fn scan(db: &Db, start: &[u8], back: bool) -> (Entries, Option<Error>) {
    let mut out = Vec::new();
    let it: Box<dyn Iterator<Item = lsm_bloom::Result<Entry>>> = match back {
        false => Box::new(db.scan(start.to_vec()..).unwrap()),
        true => Box::new(db.scan(..=start.to_vec()).unwrap().rev()),
    };
    for r in it.take(40) {
        match r {
            Ok(kv) => out.push(kv),
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

fn expected_scan(model: &Model, start: &[u8], back: bool) -> Entries {
    let kv = |(k, v): (&Vec<u8>, &Vec<u8>)| (k.clone(), v.clone());
    match back {
        false => model.range(start.to_vec()..).take(40).map(kv).collect(),
        true => model
            .range(..=start.to_vec())
            .rev()
            .take(40)
            .map(kv)
            .collect(),
    }
}

#[test]
fn gets_and_scans_under_read_faults_answer_right_or_fail_typed() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path());
    let mut rng = Rng::new(11);
    let (mut injected, mut errors) = (0u64, BTreeMap::<&str, u64>::new());
    for cache in [false, true] {
        let fs = FaultyFs::new();
        let db = Db::open(dir.path(), options(&fs, cache)).unwrap();
        db.wait_for_compactions().unwrap();
        for _ in 0..1500 {
            let f = fault(&mut rng);
            fs.fail_read(fs.reads() + 1, f);
            let before = fs.reads_failed();
            let k = key(rng.below(3100));
            let back = rng.chance(50);
            let failed = if rng.chance(70) {
                let got = db.get(&k);
                let hit = fs.reads_failed() > before;
                match &got {
                    Ok(v) => {
                        assert!(
                            !hit,
                            "a get read a damaged block ({f:?}) and answered {v:?}"
                        );
                        assert_eq!(v.as_ref(), model.get(&k), "get {k:?}");
                    }
                    Err(e) => {
                        assert!(hit && typed(e), "get {k:?} failed without a fault: {e}");
                    }
                }
                got.is_err()
            } else {
                let (got, err) = scan(&db, &k, back);
                let want = expected_scan(&model, &k, back);
                // What came before the error is exactly the model's start of the range.
                assert_eq!(got[..], want[..got.len()], "scan from {k:?} ({f:?})");
                match &err {
                    None => assert_eq!(got.len(), want.len(), "scan from {k:?} ended early"),
                    Some(e) => assert!(typed(e), "scan from {k:?} failed with {e}"),
                }
                err.is_some()
            };
            // Consume an unused fault with a read of our own, so it cannot fire later.
            if fs.reads_failed() == before {
                let _ = fs.read_all(&dir.path().join("MANIFEST"));
            } else {
                injected += 1;
            }
            if failed {
                *errors
                    .entry(match f {
                        ReadFault::Error => "EIO",
                        ReadFault::Short => "short",
                        ReadFault::FlipBit(_) => "flipped bit",
                    })
                    .or_default() += 1;
                // The same call without the fault answers right: nothing damaged was kept.
                assert_eq!(db.get(&k).unwrap().as_ref(), model.get(&k));
                let (again, err) = scan(&db, &k, back);
                assert!(
                    err.is_none() && again == expected_scan(&model, &k, back),
                    "scan {k:?} (backward: {back})"
                );
            }
        }
        // Reads never make the store read-only.
        db.put(b"zz-after", b"ok").unwrap();
        db.delete(b"zz-after").unwrap();
    }
    println!("read faults injected: {injected}, typed errors by fault: {errors:?}");
    assert!(injected >= 1000, "only {injected} faults reached a read");
    assert_eq!(errors.len(), 3, "{errors:?}");
}

#[test]
fn a_compaction_that_hits_a_read_fault_publishes_nothing_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path());
    let mut rng = Rng::new(12);
    let (mut failed_compactions, mut filters_read_around) = (0, 0);
    for round in 0..12 {
        // Each round starts from the settled store (a copy), so compactions have work to do.
        let copy = copy_store(dir.path());
        let fs = FaultyFs::new();
        let db = Db::open(copy.path(), options(&fs, round % 2 == 0)).unwrap();
        db.wait_for_compactions().unwrap();
        let f = fault(&mut rng);
        fs.fail_read(fs.reads() + 1 + rng.below(60), f);
        match db.compact() {
            // A compaction may succeed over a fault only when it hit the check of an output
            // table's filter block after the table was written: that table is then read
            // without its filter (counted), and the file itself is whole.
            Ok(()) if fs.reads_failed() > 0 => {
                assert!(matches!(f, ReadFault::FlipBit(_)), "compacted over a {f:?}");
                assert!(
                    db.stats().filter_validation_failures > 0,
                    "compacted over a {f:?}"
                );
                filters_read_around += 1;
            }
            Ok(()) => {}
            Err(e) => {
                assert!(
                    fs.reads_failed() > 0,
                    "compaction failed without a fault: {e}"
                );
                failed_compactions += 1;
                // Reads go on in the error state.
                let (k, v) = model.iter().next().unwrap();
                assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
            }
        }
        drop(db);
        let db = Db::open(copy.path(), tiny_options()).unwrap();
        assert_eq!(
            db.recovery().filters_rejected,
            0,
            "a damaged table was published"
        );
        let found: Model = db
            .scan::<&[u8], _>(..)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert!(found == model, "round {round}: {f:?}");
    }
    // Some faults land after the compaction's last read (the offset is random): those
    // compactions succeed untouched.
    println!("{failed_compactions} compactions failed, {filters_read_around} read a filter around");
    assert!(
        failed_compactions >= 6,
        "{failed_compactions} compactions failed, {filters_read_around} read a filter around"
    );
}

#[test]
fn read_faults_at_open_fail_typed_or_open_right() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = build(dir.path());
    // Some writes only in the log, so open reads one.
    {
        let db = Db::open(dir.path(), tiny_options()).unwrap();
        for i in 0..20 {
            db.put(key(9000 + i), b"logged").unwrap();
            model.insert(key(9000 + i), b"logged".to_vec());
        }
        drop(db); // closing does not flush: the writes stay in the log
    }
    let probe = FaultyFs::new();
    drop(Db::open(dir.path(), options(&probe, true)).unwrap());
    let reads_at_open = probe.reads();
    assert!(reads_at_open > 10, "{reads_at_open}");
    let (mut opened, mut refused) = (0, 0);
    for n in 1..=reads_at_open {
        for f in [
            ReadFault::Error,
            ReadFault::Short,
            ReadFault::FlipBit(n * 131),
        ] {
            let copy = copy_store(dir.path());
            let fs = FaultyFs::new();
            fs.fail_read(n, f);
            match Db::open(copy.path(), options(&fs, true)) {
                Err(e) => {
                    assert!(typed(&e), "open with read {n} {f:?}: {e}");
                    refused += 1;
                }
                Ok(db) => {
                    opened += 1;
                    let found: Model = db
                        .scan::<&[u8], _>(..)
                        .unwrap()
                        .map(|r| r.unwrap())
                        .collect();
                    // A flipped log record is a documented point-in-time recovery.
                    if db.recovery().wal_damage.is_none() {
                        assert!(found == model, "open with read {n} {f:?}");
                    } else {
                        assert!(found.iter().all(|(k, v)| model.get(k) == Some(v)));
                    }
                }
            }
        }
    }
    println!("faults at open: {opened} opened right, {refused} refused with a typed error");
    assert!(refused > 0 && opened > 0);
}

/// Regression: a table written by a flush is read back through the file system; when its
/// filter block fails the check then (here a flipped bit on the read of that block), the table
/// is used without its filter and that is counted, as at open. It was not counted before.
#[test]
fn a_filter_that_fails_its_check_after_a_flush_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    // One memtable holds every key, and nothing compacts: the flush's read-back is the only
    // reader when the fault is armed.
    let opts = options(&fs, false)
        .with_memtable_size(1 << 20)
        .with_idle_compaction_after(None);
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..500 {
        db.put(key(i), b"v").unwrap();
    }
    assert!(db.levels().iter().all(Vec::is_empty));
    // Reading the new table back: footer, properties, index, then the filter block.
    fs.fail_read(fs.reads() + 4, ReadFault::FlipBit(12_345));
    db.flush().unwrap();
    assert_eq!(fs.reads_failed(), 1);
    assert_eq!(db.stats().filter_validation_failures, 1);
    for i in 0..500 {
        assert_eq!(
            db.get(key(i)).unwrap().as_deref(),
            Some(&b"v"[..]),
            "key {i}"
        );
    }
    assert_eq!(db.get(key(9999)).unwrap(), None);
    drop(db);
    // The file itself is whole: reopened, its filter passes.
    let db = Db::open(dir.path(), tiny_options()).unwrap();
    assert_eq!(db.recovery().filters_rejected, 0);
}
