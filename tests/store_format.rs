//! Frozen store directories (FORMAT.md §2 and §4): a store written by an earlier build opens
//! with every write in place.
//!
//! `fixtures/store-v1/` is a whole store directory in manifest version 1, as a crash would
//! leave it (copied while the store was open): 600 keys flushed and compacted into a table,
//! then, with flushes held, 400 more and a delete of every fifth earlier key, in four logs
//! only (`write_store`). It is never regenerated; a later manifest or log format adds a
//! fixture beside it.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::copy_dir;

use lsm_bloom::fs::FaultyFs;
use lsm_bloom::{Db, Options};

fn fixture_dir(version: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/store-v{version}"))
}

/// The value first written to key `k`: `v<k>` eight times.
fn value(k: &str) -> Vec<u8> {
    format!("v{k}").repeat(8).into_bytes()
}

/// What the fixtures hold: `a00000..a00599`, every fifth of them deleted, and
/// `b00000..b00399`, each with `value`.
fn model() -> Vec<(String, Option<Vec<u8>>)> {
    let a = (0..600).map(|i| {
        let k = format!("a{i:05}");
        let v = (i % 5 != 0).then(|| value(&k));
        (k, v)
    });
    let b = (0..400).map(|i| {
        let k = format!("b{i:05}");
        (k.clone(), Some(value(&k)))
    });
    a.chain(b).collect()
}

/// Writes the fixture's store into `dir` (created): the writes of `model`, the later ones
/// in logs a rotation started, copied while the store is open with its flushes held.
fn write_store(dir: &Path) {
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_memtable_size(16 * 1024)
        .with_max_immutable_memtables(8)
        .with_idle_compaction_after(None)
        .with_fs(Arc::new(fs.clone()));
    let live = tempfile::tempdir().unwrap();
    let db = Db::open(live.path(), opts).unwrap();
    let all = model();
    for (k, _) in all.iter().filter(|(k, _)| k.starts_with('a')) {
        db.put(k, value(k)).unwrap();
    }
    db.flush().unwrap();
    db.compact().unwrap();
    fs.hold_table_creates(true);
    for (k, v) in &all {
        match (k.starts_with('b'), v) {
            (true, Some(v)) => db.put(k, v).unwrap(),
            (false, None) => db.delete(k).unwrap(),
            _ => {}
        }
    }
    copy_dir(live.path(), dir);
    std::fs::remove_file(dir.join("LOCK")).unwrap();
    fs.hold_table_creates(false);
    drop(db);
}

/// Opens a copy of fixture `version` (writing it first if missing and
/// `LSM_BLOOM_WRITE_MISSING_FIXTURES` is set; never overwriting) and checks every key.
fn check(version: u32) -> Db {
    let fixture = fixture_dir(version);
    if !fixture.exists() {
        assert!(
            std::env::var_os("LSM_BLOOM_WRITE_MISSING_FIXTURES").is_some(),
            "missing fixture {}",
            fixture.display()
        );
        write_store(&fixture);
    }
    let manifest = std::fs::read(fixture.join("MANIFEST")).unwrap();
    assert_eq!(
        manifest[4..8],
        version.to_le_bytes(),
        "the fixture's manifest version"
    );
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture, dir.path());
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let r = db.recovery();
    assert!(r.wal_damage.is_none(), "{r:?}");
    for (k, v) in model() {
        assert_eq!(db.get(&k).unwrap(), v, "{k} in store v{version}");
    }
    let live = model().iter().filter(|(_, v)| v.is_some()).count();
    assert_eq!(db.scan::<&[u8], _>(..).unwrap().count(), live);
    db
}

#[test]
fn store_v1_fixture_still_reads() {
    let db = check(1);
    // Every write after the compaction is in the four logs: 400 puts and 120 deletes.
    let r = db.recovery();
    assert_eq!((r.logs_replayed, r.batches_replayed), (4, 520), "{r:?}");
    db.put("after", "ok").unwrap();
}
