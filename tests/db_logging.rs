//! What the store logs through `tracing`, seen by a subscriber installed for the whole process
//! (flushes and compactions log from the background threads): the open and what recovery
//! decided, flushes, compactions, the filter budget's plans, write stops, background failures,
//! WAL damage and a close error that a drop could only log. One test, in steps, so that each
//! step's events are its own (the subscriber sees every thread of this binary).

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::captured::Captured;
use common::fill;
use lsm_bloom::fs::{Fault, FaultyFs};
use lsm_bloom::{Db, Options};

fn log() -> &'static Captured {
    static LOG: OnceLock<Captured> = OnceLock::new();
    LOG.get_or_init(|| {
        let c = Captured::default();
        tracing::subscriber::set_global_default(c.clone()).expect("the only subscriber");
        c
    })
}

/// Asserts one event captured so far holds every one of `words`.
fn expect(words: &[&str]) {
    let log = log();
    assert!(
        log.any(words),
        "no event with {words:?} in {:#?}",
        log.lines()
    );
}

fn wal_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    v.sort();
    v
}

#[test]
fn the_store_logs_what_a_service_needs_to_see() {
    let log = log();
    let dir = tempfile::tempdir().unwrap();
    let opts = || {
        Options::default()
            .with_memtable_size(64 * 1024)
            .with_l0_compaction_trigger(2)
            .with_idle_compaction_after(None)
    };

    // The open, a flush, a compaction and the filter budget's plan for each new table.
    let db = Db::open(dir.path(), opts()).unwrap();
    expect(&["INFO", "store opened", "tables=0"]);
    fill(&db, "a", 2_000);
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    expect(&[
        "DEBUG",
        "flush: memtable written to level 0",
        "table=",
        "entries=",
    ]);
    expect(&[
        "DEBUG",
        "message=compaction",
        "output_level=1",
        "bytes_written=",
    ]);
    expect(&["DEBUG", "filter budget planned", "level=0", "key=Some"]);
    drop(db);

    // A reopen whose newest log is damaged in its last record: the decision is logged.
    let db = Db::open(dir.path(), opts()).unwrap();
    fill(&db, "b", 50);
    drop(db);
    let wal = wal_files(dir.path()).pop().expect("a log with the b keys");
    let mut bytes = std::fs::read(&wal).unwrap();
    let last = bytes.len() - 5;
    bytes[last] ^= 0x40;
    std::fs::write(&wal, &bytes).unwrap();
    log.0.lock().unwrap().clear();
    let db = Db::open(dir.path(), opts()).unwrap();
    assert!(db.recovery().wal_damage.is_some());
    expect(&[
        "WARN",
        "write-ahead log damaged",
        "torn_tail=true",
        "bytes_dropped=",
    ]);
    expect(&["INFO", "store opened", "logs_replayed=1"]);
    drop(db);

    // A write stop, with why and how long.
    let fs = FaultyFs::new();
    let stalled = tempfile::tempdir().unwrap();
    let db = Db::open(
        stalled.path(),
        Options::default()
            .with_memtable_size(16 * 1024)
            .with_max_immutable_memtables(1)
            .with_fs(Arc::new(fs.clone())),
    )
    .unwrap();
    fs.hold_table_creates(true);
    let release = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            fs.hold_table_creates(false);
        })
    };
    fill(&db, "s", 1_000);
    release.join().unwrap();
    expect(&[
        "WARN",
        "writes stopped",
        "immutable memtables waiting for a flush",
    ]);

    // A background failure, with its error: a flush whose table file cannot be written
    // (creates held until the file system fails every operation from then on).
    // 120 entries fill one memtable of 16 KiB (each is charged 171 bytes) and start the next:
    // one flush waits, and no write does.
    db.flush().unwrap();
    log.0.lock().unwrap().clear();
    let held = fs.hold_table_creates_scoped();
    fill(&db, "f", 120);
    fs.fail_from(fs.ops() + 1, Fault::Error);
    drop(held);
    let failed = || log.any(&["ERROR", "background job failed", "error="]);
    common::wait_until("the failed flush is logged", Duration::from_secs(5), failed);
    expect(&["ERROR", "background job failed", "job=Flush", "error="]);
    // The drop cannot return the error that made the store read-only, so it logs it.
    drop(db);
    expect(&["ERROR", "store dropped with an error", "error="]);
}
