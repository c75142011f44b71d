//! Safety of the store as a user meets it: what open does with a directory it does not fully
//! recognise, what happens after a write fails, the recovery rules for damaged logs, and the
//! checks made on a table set at open. Each of the four defects of the safety issue has a
//! regression test here (named `defect_N_...`).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{copy_dir, tiny_options};
use lsm_bloom::db::manifest;
use lsm_bloom::fs::{Fault, FaultyFs, StdFs};
use lsm_bloom::table::{
    FilterProblem, FilterState, Footer, Table, TableBuilder, TableBuilderOptions, FOOTER_LEN,
};
use lsm_bloom::{Db, Error, FilterPolicy, Options, WalRecovery, WriteBatch};

fn files_with(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

fn key(i: usize) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

#[test]
fn defect_1_open_without_manifest_refuses_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), tiny_options()).unwrap();
        for i in 0..500 {
            db.put(key(i), b"value").unwrap();
        }
        db.flush().unwrap();
        db.put(b"in-the-log", b"v").unwrap();
    }
    let tables = files_with(dir.path(), "sst");
    assert!(!tables.is_empty());
    let saved = std::fs::read(dir.path().join("MANIFEST")).unwrap();
    std::fs::remove_file(dir.path().join("MANIFEST")).unwrap();
    for _ in 0..2 {
        match Db::open(dir.path(), tiny_options()) {
            Err(Error::MissingManifest { found, .. }) => {
                assert!(found.contains(".sst") && found.contains(".wal"), "{found}")
            }
            other => panic!("expected MissingManifest, got {:?}", other.err()),
        }
        assert_eq!(files_with(dir.path(), "sst"), tables, "a table was touched");
    }
    let message = Db::open(dir.path(), tiny_options())
        .err()
        .unwrap()
        .to_string();
    assert!(message.contains("no MANIFEST") && message.contains("nothing was changed"));
    // Put the manifest back: everything is there.
    std::fs::write(dir.path().join("MANIFEST"), saved).unwrap();
    let db = Db::open(dir.path(), tiny_options()).unwrap();
    assert_eq!(db.get(key(499)).unwrap().as_deref(), Some(&b"value"[..]));
    assert_eq!(db.get(b"in-the-log").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn create_if_missing_error_if_exists_and_the_lock() {
    let parent = tempfile::tempdir().unwrap();
    let missing = parent.path().join("db");
    let no_create = Options::default().with_create_if_missing(false);
    assert!(matches!(
        Db::open(&missing, no_create.clone()),
        Err(Error::NotFound { .. })
    ));
    assert!(!missing.exists(), "a directory was created");
    std::fs::create_dir(&missing).unwrap();
    assert!(matches!(
        Db::open(&missing, no_create.clone()),
        Err(Error::NotFound { .. })
    ));
    assert_eq!(
        std::fs::read_dir(&missing).unwrap().count(),
        0,
        "open left a file"
    );
    let db = Db::open(&missing, Options::default()).unwrap();
    assert!(matches!(
        Db::open(&missing, Options::default()),
        Err(Error::Locked { .. })
    ));
    drop(db);
    let exclusive = Options::default().with_error_if_exists(true);
    assert!(matches!(
        Db::open(&missing, exclusive.clone()),
        Err(Error::AlreadyExists { .. })
    ));
    Db::open(&missing, no_create).unwrap();
    Db::open(parent.path().join("fresh"), exclusive).unwrap();
}

#[test]
fn defect_2_a_failed_append_stops_writes_and_loses_nothing_acknowledged() {
    for sync_writes in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let fs = FaultyFs::new();
        let opts = Options::default()
            .with_sync_writes(sync_writes)
            .with_fs(Arc::new(fs.clone()));
        let db = Db::open(dir.path(), opts).unwrap();
        for i in 0..10 {
            db.put(key(i), b"before").unwrap();
        }
        // The next append stores half its record and fails, as a full disk does.
        fs.fail_once(fs.ops() + 1, Fault::PartialWrite);
        match db.put(b"failed", b"x".repeat(100)) {
            Err(Error::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(28)),
            other => panic!("expected ENOSPC, got {other:?}"),
        }
        // Later writes are refused (the disk works again, but the store does not pretend).
        for i in 10..20 {
            match db.put(key(i), b"after") {
                Err(Error::ReadOnly { source }) => {
                    assert!(source.to_string().contains("No space left"), "{source}")
                }
                other => panic!("write after a failed append: {other:?}"),
            }
        }
        assert!(matches!(db.flush(), Err(Error::ReadOnly { .. })));
        assert_eq!(db.get(key(3)).unwrap().as_deref(), Some(&b"before"[..]));
        assert!(db.stats().read_only_error.is_some());
        assert!(matches!(db.close(), Err(Error::ReadOnly { .. })));
        let db = Db::open(dir.path(), Options::default()).unwrap();
        for i in 0..10 {
            assert_eq!(db.get(key(i)).unwrap().as_deref(), Some(&b"before"[..]));
        }
        assert_eq!(db.get(b"failed").unwrap(), None);
        assert_eq!(
            db.recovery().wal_damage,
            None,
            "the partial record was cut off"
        );
        db.put(b"works", b"again").unwrap();
    }
}

#[test]
fn a_failed_sync_is_not_acknowledged_and_does_not_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_sync_writes(true)
        .with_fs(Arc::new(fs.clone()));
    let db = Db::open(dir.path(), opts).unwrap();
    db.put(b"a", b"1").unwrap();
    fs.fail_once(fs.ops() + 2, Fault::Error); // the append's write succeeds, its sync fails
    assert!(matches!(db.put(b"b", b"2"), Err(Error::Io { .. })));
    assert!(matches!(db.put(b"c", b"3"), Err(Error::ReadOnly { .. })));
    drop(db);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(
        db.get(b"b").unwrap(),
        None,
        "a write reported failed came back"
    );
}

#[test]
fn a_panic_in_the_background_thread_surfaces_as_an_error_and_nothing_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let opts = Options::default().with_fs(Arc::new(fs.clone()));
    let db = Db::open(dir.path(), opts).unwrap();
    db.put(b"k", b"v").unwrap();
    db.wait_for_compactions().unwrap();
    // flush: sync the retired log (1), create the new log (2) and sync the directory (3) in
    // this thread; then the background thread creates the table (4): it panics there.
    fs.fail_once(fs.ops() + 4, Fault::Panic);
    let start = Instant::now();
    match db.flush() {
        Err(Error::ReadOnly { source }) => {
            assert!(matches!(*source, Error::Panicked { .. }), "{source}")
        }
        other => panic!("expected ReadOnly(Panicked), got {other:?}"),
    }
    assert!(matches!(db.put(b"x", b"y"), Err(Error::ReadOnly { .. })));
    assert!(matches!(
        db.wait_for_compactions(),
        Err(Error::ReadOnly { .. })
    ));
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    assert!(start.elapsed() < Duration::from_secs(10));
    drop(db);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn defect_3_scan_with_equal_excluded_bounds_is_empty_not_a_panic() {
    use std::ops::Bound::{Excluded, Included};
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put(b"k", b"v").unwrap(); // in the memtable
    let k = b"k".to_vec();
    assert_eq!(
        db.scan((Excluded(k.clone()), Excluded(k.clone())))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(
        db.scan((Included(k.clone()), Excluded(k.clone())))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(
        db.scan((Excluded(k.clone()), Included(k.clone())))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(
        db.scan((Included(k.clone()), Included(k))).unwrap().count(),
        1
    );
}

#[test]
fn defect_4_a_batch_whose_log_record_is_too_large_is_refused_when_written() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put(b"before", b"1").unwrap();
    // Keys and values add up to less than MAX_BATCH_SIZE, but with 5 bytes of framing per
    // deletion the log record does not fit.
    let big = vec![7u8; 63 << 20];
    let mut batch = WriteBatch::new();
    let mut payload = 0;
    for i in 0..4 {
        batch.put(format!("big{i}"), big.clone());
        payload += 4 + big.len();
    }
    for i in 0..800_000u32 {
        batch.delete(i.to_le_bytes()[..1].to_vec());
        payload += 1;
    }
    assert!(payload < lsm_bloom::db::MAX_BATCH_SIZE);
    assert!(batch.encoded_len() > lsm_bloom::db::MAX_BATCH_SIZE);
    match db.write(batch) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("encodes to"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    db.put(b"after", b"2").unwrap();
    drop(db);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(b"before").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(db.get(b"after").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(db.get(b"big0").unwrap(), None);
}

/// A directory whose one log holds keys `prefix0..prefixN` (memtable never flushed).
fn db_with_log(dir: &Path, prefix: &str, n: usize) -> PathBuf {
    let db = Db::open(dir, Options::default()).unwrap();
    for i in 0..n {
        db.put(format!("{prefix}{i:04}"), vec![b'v'; 40]).unwrap();
    }
    drop(db);
    let logs = files_with(dir, "wal");
    assert_eq!(logs.len(), 1);
    logs[0].clone()
}

fn count_prefix(db: &Db, prefix: &str) -> usize {
    db.scan(prefix.as_bytes().to_vec()..format!("{prefix}~").into_bytes())
        .unwrap()
        .count()
}

#[test]
fn replay_stops_at_the_first_damage_across_all_logs() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let log_a = db_with_log(a.path(), "a", 100);
    let log_b = db_with_log(b.path(), "b", 50);
    // A later log (higher number) with 50 good records.
    std::fs::copy(&log_b, a.path().join("900000.wal")).unwrap();
    let len_b = std::fs::metadata(&log_b).unwrap().len();
    // Damage the first log in the middle: a byte of record 40's payload.
    let mut bytes = std::fs::read(&log_a).unwrap();
    let record = bytes.len() / 100;
    let offset = 40 * record;
    bytes[offset + 20] ^= 0xff;
    std::fs::write(&log_a, &bytes).unwrap();

    let strict = tempfile::tempdir().unwrap();
    copy_dir(a.path(), strict.path());
    let opts = Options::default().with_wal_recovery(WalRecovery::TornTailOnly);
    match Db::open(strict.path(), opts) {
        Err(Error::Corruption { reason, .. }) => assert!(reason.contains("middle"), "{reason}"),
        other => panic!(
            "TornTailOnly opened a log damaged in the middle: {:?}",
            other.err()
        ),
    }

    let db = Db::open(a.path(), Options::default()).unwrap();
    assert_eq!(count_prefix(&db, "a"), 40, "records before the damage");
    assert_eq!(
        count_prefix(&db, "b"),
        0,
        "a later log must not outlive an earlier loss"
    );
    let r = db.recovery();
    let damage = r.wal_damage.as_ref().expect("damage reported");
    assert_eq!(damage.offset, offset as u64);
    assert!(!damage.torn_tail);
    assert!(damage.reason.contains("checksum"), "{}", damage.reason);
    let dropped = (bytes.len() - offset) as u64 + len_b;
    assert_eq!(r.wal_bytes_dropped, dropped);
    assert_eq!(db.stats().wal_bytes_dropped, dropped);
}

/// A flipped bit anywhere in a record header in the middle of the newest log — the length
/// field included, which the record's checksum does not cover — is damage in the middle, not
/// a torn tail: `TornTailOnly` refuses to open, and `PointInTime` reports how many intact
/// records after it it dropped. (A length flipped over the limit, or past the end of the
/// file, was once taken for a torn tail and every later record silently dropped.)
#[test]
fn damage_in_a_mid_log_record_header_is_not_a_torn_tail() {
    let a = tempfile::tempdir().unwrap();
    let log = db_with_log(a.path(), "a", 100);
    let good = std::fs::read(&log).unwrap();
    let record = good.len() / 100;
    let offset = 40 * record;
    for byte in 0..8 {
        for flip in [0x01u8, 0x80] {
            let what = format!("header byte {byte} ^ {flip:#04x}");
            let mut bytes = good.clone();
            bytes[offset + byte] ^= flip;
            std::fs::write(&log, &bytes).unwrap();
            for mode in [WalRecovery::TornTailOnly, WalRecovery::PointInTime] {
                let dir = tempfile::tempdir().unwrap();
                copy_dir(a.path(), dir.path());
                let opts = Options::default().with_wal_recovery(mode);
                match (mode, Db::open(dir.path(), opts)) {
                    (WalRecovery::TornTailOnly, Err(Error::Corruption { reason, .. })) => {
                        assert!(reason.contains("59 intact records"), "{what}: {reason}");
                    }
                    (WalRecovery::TornTailOnly, other) => {
                        panic!("{what}: TornTailOnly opened: {:?}", other.map(|_| ()))
                    }
                    (_, Ok(db)) => {
                        assert_eq!(count_prefix(&db, "a"), 40, "{what}");
                        let d = db.recovery().wal_damage.clone().expect("damage reported");
                        assert_eq!(d.offset, offset as u64, "{what}");
                        assert!(!d.torn_tail, "{what}");
                        assert_eq!(d.later_records, Some(59), "{what}");
                    }
                    (_, Err(e)) => panic!("{what}: PointInTime refused: {e}"),
                }
            }
        }
    }
}

#[test]
fn a_torn_tail_of_the_newest_log_is_tolerated_in_both_modes() {
    for mode in [WalRecovery::PointInTime, WalRecovery::TornTailOnly] {
        let a = tempfile::tempdir().unwrap();
        let log = db_with_log(a.path(), "a", 30);
        let bytes = std::fs::read(&log).unwrap();
        std::fs::write(&log, &bytes[..bytes.len() - 3]).unwrap(); // a crash mid-append
        let opts = Options::default().with_wal_recovery(mode);
        let db = Db::open(a.path(), opts).unwrap();
        assert_eq!(count_prefix(&db, "a"), 29, "{mode:?}");
        let damage = db.recovery().wal_damage.clone().unwrap();
        assert!(damage.torn_tail);
        assert_eq!(damage.later_records, Some(0));
    }
    // But a torn record followed by a later log with data is not a tail.
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let log = db_with_log(a.path(), "a", 30);
    std::fs::copy(db_with_log(b.path(), "b", 5), a.path().join("900000.wal")).unwrap();
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&log, &bytes[..bytes.len() - 3]).unwrap();
    let opts = Options::default().with_wal_recovery(WalRecovery::TornTailOnly);
    match Db::open(a.path(), opts) {
        Err(Error::Corruption { reason, .. }) => assert!(reason.contains("later log"), "{reason}"),
        other => panic!("expected Corruption, got {:?}", other.err()),
    }
}

#[test]
fn a_manifest_whose_deeper_level_overlaps_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), tiny_options()).unwrap();
        for i in 0..2000 {
            db.put(key(i), b"0123456789").unwrap();
        }
        db.compact().unwrap();
    }
    let mut m = manifest::read(dir.path()).unwrap().unwrap();
    let level = m
        .levels
        .iter()
        .position(|l| l.len() >= 2)
        .expect("a level with 2 tables");
    m.levels[level].swap(0, 1);
    manifest::write(&StdFs, dir.path(), &m).unwrap();
    match Db::open(dir.path(), tiny_options()) {
        Err(Error::Corruption { reason, .. }) => {
            assert!(reason.contains("overlap or are out of order"), "{reason}")
        }
        other => panic!("expected Corruption, got {:?}", other.err()),
    }
}

/// Replaces the filter block of the table at `path` with `filter`, keeping the rest.
fn splice_filter(path: &Path, filter: &[u8]) {
    let bytes = std::fs::read(path).unwrap();
    let footer = Footer::decode(&bytes[bytes.len() - FOOTER_LEN..], bytes.len() as u64).unwrap();
    let (f, i, p) = (footer.filter, footer.index, footer.properties);
    let mut out = bytes[..f.offset as usize].to_vec();
    out.extend_from_slice(filter);
    let mut moved = footer;
    moved.filter.size = filter.len() as u64;
    moved.index.offset = out.len() as u64;
    out.extend_from_slice(&bytes[i.offset as usize..(i.offset + i.size) as usize]);
    moved.properties.offset = out.len() as u64;
    out.extend_from_slice(&bytes[p.offset as usize..(p.offset + p.size) as usize]);
    out.extend_from_slice(&moved.encode());
    std::fs::write(path, out).unwrap();
}

fn filter_block_of(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap();
    let footer = Footer::decode(&bytes[bytes.len() - FOOTER_LEN..], bytes.len() as u64).unwrap();
    let f = footer.filter;
    bytes[f.offset as usize..(f.offset + f.size) as usize].to_vec()
}

#[test]
fn a_filter_that_does_not_match_its_table_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        for i in 0..100 {
            db.put(key(i), b"v").unwrap();
        }
        db.flush().unwrap();
    }
    // An intact filter block over only the first 50 keys: trusted, it would hide the rest.
    let other = tempfile::tempdir().unwrap();
    let other_path = other.path().join("x.sst");
    let mut b = TableBuilder::create(
        &other_path,
        TableBuilderOptions::default().with_filter(Some(FilterPolicy::default())),
    )
    .unwrap();
    for i in 0..50 {
        b.add(&key(i), Some(b"v")).unwrap();
    }
    b.finish().unwrap();
    let table = files_with(dir.path(), "sst").pop().unwrap();
    splice_filter(&table, &filter_block_of(&other_path));
    match Table::open(&table, 0).unwrap().filter() {
        FilterState::Invalid(FilterProblem::KeyCountMismatch {
            filter_keys: 50,
            table_entries: 100,
        }) => {}
        other => panic!("filter accepted: {other:?}"),
    }
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.recovery().filters_rejected, 1);
    for i in 0..100 {
        assert!(db.get(key(i)).unwrap().is_some(), "key {i} looked absent");
    }
    let s = db.stats();
    assert_eq!(s.filter_validation_failures, 1);
    assert_eq!(s.total.unfiltered_probes, 100);
}

#[test]
fn only_tables_the_manifest_proves_obsolete_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        db.put(b"k", b"v").unwrap();
        db.flush().unwrap();
    }
    let m = manifest::read(dir.path()).unwrap().unwrap();
    let live: Vec<u64> = m.levels.iter().flatten().map(|t| t.id).collect();
    let real = files_with(dir.path(), "sst").pop().unwrap();
    let obsolete_id = (1..m.next_file).find(|id| !live.contains(id)).unwrap();
    let obsolete = dir.path().join(format!("{obsolete_id:06}.sst"));
    let unexplained = dir.path().join(format!("{:06}.sst", m.next_file + 1000));
    std::fs::copy(&real, &obsolete).unwrap();
    std::fs::copy(&real, &unexplained).unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert!(!obsolete.exists(), "an obsolete table was kept");
    assert!(
        unexplained.exists(),
        "a table the manifest does not explain was deleted"
    );
    assert_eq!(db.recovery().unexplained_tables, vec![unexplained.clone()]);
    assert!(db.recovery().obsolete_files_removed >= 1);
    db.put(b"k2", b"v").unwrap();
    db.flush().unwrap(); // new tables never reuse the unexplained number
    assert!(unexplained.exists());
}

#[test]
fn flush_waits_for_the_memtable_it_rotated_not_for_later_ones() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let opts = tiny_options()
        .with_fs(Arc::new(fs.clone()))
        .with_max_immutable_memtables(4);
    let db = Arc::new(Db::open(dir.path(), opts).unwrap());
    // Declared after the store: released first however the test ends.
    let held = fs.hold_table_creates_scoped();
    db.put(b"first", b"1").unwrap();
    let (done, flushed) = std::sync::mpsc::channel();
    {
        let db = Arc::clone(&db);
        std::thread::spawn(move || done.send(db.flush()));
    }
    // Wait until the flush has rotated its memtable, then fill and rotate another.
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.stats().immutable_memtables < 1 {
        assert!(Instant::now() < deadline, "flush did not rotate");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut i = 0;
    while db.stats().immutable_memtables < 2 {
        db.put(key(i), vec![b'x'; 100]).unwrap();
        i += 1;
        assert!(Instant::now() < deadline, "second memtable did not rotate");
    }
    // One table may be written: the flush's own memtable. The later one stays held.
    fs.allow_table_creates(1);
    let flushed = flushed.recv_timeout(Duration::from_secs(10));
    assert!(
        flushed.is_ok(),
        "flush still waiting with its own memtable written: it waits for later ones"
    );
    assert!(matches!(flushed, Ok(Ok(()))), "{flushed:?}");
    assert_eq!(
        db.stats().immutable_memtables,
        1,
        "the later memtable is still waiting"
    );
    assert_eq!(db.get(b"first").unwrap().as_deref(), Some(&b"1"[..]));
    drop(held);
    db.flush().unwrap();
    assert_eq!(db.stats().immutable_memtables, 0);
}
