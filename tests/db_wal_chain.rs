//! The predecessor record (FORMAT.md §2): a rotation no longer syncs the retired log, so a
//! power loss can keep a newer log's records while an older log loses its tail at a record
//! boundary, which the older log alone cannot show. Replay must then stop at the older log's
//! end: the store comes back as a point in time, with nothing of the newer log.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::copy_dir;
use lsm_bloom::fs::FaultyFs;
use lsm_bloom::{Db, Error, Options, WalRecovery};

fn key(i: usize) -> String {
    format!("key{i:05}")
}

/// The logs of `dir` in number order.
fn logs(dir: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    logs.sort();
    logs
}

/// The end offset of each whole record of a log (FORMAT.md §2 framing).
fn record_ends(log: &[u8]) -> Vec<usize> {
    let (mut at, mut ends) = (0, Vec::new());
    while at + 8 <= log.len() {
        let len = u32::from_le_bytes(log[at..at + 4].try_into().unwrap()) as usize;
        at += 8 + len;
        ends.push(at);
    }
    ends
}

/// A store as a crash leaves it with flushes held: 600 writes in several logs, each log after
/// the first started by a rotation. Returns the copy and how many logs it has.
fn crashed_store(copy: &Path) -> usize {
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_memtable_size(8 * 1024)
        .with_max_immutable_memtables(16)
        .with_idle_compaction_after(None)
        .with_fs(Arc::new(fs.clone()));
    let live = tempfile::tempdir().unwrap();
    let db = Db::open(live.path(), opts).unwrap();
    fs.hold_table_creates(true);
    for i in 0..600 {
        db.put(key(i), format!("value {i}").repeat(4)).unwrap();
    }
    copy_dir(live.path(), copy);
    std::fs::remove_file(copy.join("LOCK")).unwrap();
    fs.hold_table_creates(false);
    drop(db);
    logs(copy).len()
}

#[test]
fn an_older_log_that_lost_its_tail_drops_every_later_log() {
    let crashed = tempfile::tempdir().unwrap();
    let n = crashed_store(crashed.path());
    assert!(n >= 3, "{n} logs: the writes should span several rotations");
    let logs = logs(crashed.path());
    // The power loss took the last two records of the second log, at a record boundary.
    let second = std::fs::read(&logs[1]).unwrap();
    let ends = record_ends(&second);
    assert!(ends.len() > 3 && *ends.last().unwrap() == second.len());
    let kept = ends[ends.len() - 3];
    std::fs::write(&logs[1], &second[..kept]).unwrap();

    // Point in time: every write up to the cut, none after it.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(crashed.path(), dir.path());
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let r = db.recovery().clone();
    let damage = r.wal_damage.clone().expect("the lost tail is reported");
    assert_eq!(damage.log, dir.path().join(logs[2].file_name().unwrap()));
    assert!(damage.reason.contains("tail was lost"), "{damage:?}");
    assert!(!damage.torn_tail);
    let present: Vec<usize> = (0..600)
        .filter(|&i| db.get(key(i)).unwrap().is_some())
        .collect();
    let count = present.len();
    assert!(count > 0 && count < 600, "{count} of 600 back");
    assert_eq!(
        present,
        (0..count).collect::<Vec<_>>(),
        "a prefix of the writes, nothing after a gap"
    );
    let in_first_two = r.batches_replayed as usize;
    assert_eq!(count, in_first_two, "{r:?}");
    assert!(r.wal_bytes_dropped > 0);
    drop(db);

    // TornTailOnly refuses, naming the lost tail.
    let dir = tempfile::tempdir().unwrap();
    copy_dir(crashed.path(), dir.path());
    let opts = Options::default().with_wal_recovery(WalRecovery::TornTailOnly);
    match Db::open(dir.path(), opts) {
        Err(Error::Corruption { .. }) => {}
        Err(e) => panic!("expected corruption, got {e}"),
        Ok(_) => panic!("TornTailOnly opened a store whose older log lost its tail"),
    }
    let e = Db::open(
        dir.path(),
        Options::default().with_wal_recovery(WalRecovery::TornTailOnly),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("tail was lost"), "{e}");
}

#[test]
fn whole_logs_replay_in_full_and_a_missing_log_is_a_gap() {
    let crashed = tempfile::tempdir().unwrap();
    crashed_store(crashed.path());
    let dir = tempfile::tempdir().unwrap();
    copy_dir(crashed.path(), dir.path());
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert!(db.recovery().wal_damage.is_none(), "{:?}", db.recovery());
    for i in 0..600 {
        assert!(db.get(key(i)).unwrap().is_some(), "{}", key(i));
    }
    drop(db);

    // The second log gone entirely (its directory entry lost): the third names it.
    let logs = logs(crashed.path());
    std::fs::remove_file(&logs[1]).unwrap();
    let db = Db::open(crashed.path(), Options::default()).unwrap();
    let damage = db.recovery().wal_damage.clone().expect("a gap");
    assert!(damage.reason.contains("missing"), "{damage:?}");
    assert_eq!(damage.log, logs[2]);
    let back = (0..600)
        .filter(|&i| db.get(key(i)).unwrap().is_some())
        .count();
    assert_eq!(back as u64, db.recovery().batches_replayed);
    assert!((0..back).all(|i| db.get(key(i)).unwrap().is_some()));
}
