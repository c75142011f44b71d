//! What range deletes cost reads, and save them (docs/range-deletes.md): inside a table, the
//! data blocks a newer range covers are jumped over by scans and compactions, not read and
//! walked entry by entry (`Cursor::skip_past`); a table of ranges alone costs a get no probe;
//! a memtable's ranges are asked only when something older may hold the key.

use std::sync::Arc;

use lsm_bloom::fs::FaultyFs;
use lsm_bloom::{Db, DbStats, Options, WriteBatch};

const KEYS: u32 = 20_000;

/// A store holding `KEYS` keys `key000000`.. (100-byte values) in one table of ~600 data
/// blocks on its deepest level, then a range deleting `key001000`..`key019000` flushed to
/// level 0 above it.
fn one_table_and_a_range(fs: &FaultyFs, dir: &std::path::Path) -> (Db, u64) {
    let opts = Options::default()
        .with_idle_compaction_after(None)
        .with_target_file_size(64 << 20)
        .with_fs(Arc::new(fs.clone()));
    let db = Db::open(dir, opts).unwrap();
    let mut b = WriteBatch::new();
    for i in 0..KEYS {
        b.put(format!("key{i:06}"), [b'v'; 100]);
    }
    db.write(b).unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    let s = db.stats();
    assert_eq!(s.total.tables, 1, "{:?}", s.levels);
    let before = deep(&s);
    assert_eq!(db.iter().count(), KEYS as usize);
    let blocks = deep(&db.stats()) - before;
    assert!(blocks > 400, "{blocks} blocks");
    db.delete_range("key001000".as_bytes().."key019000".as_bytes())
        .unwrap();
    db.flush().unwrap();
    (db, blocks)
}

/// Data blocks a scan read (or found cached) below level 0.
fn deep(s: &DbStats) -> u64 {
    s.levels[1..]
        .iter()
        .map(|l| l.scan_block_reads + l.scan_block_cache_hits)
        .sum()
}

/// A scan over a table a newer range covers from its 5th percent to its 95th reads the
/// blocks at the edges, either way, not the ~540 between.
#[test]
fn a_scan_jumps_over_the_blocks_a_newer_range_covers() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let (db, blocks) = one_table_and_a_range(&fs, dir.path());
    let left = 2_000;
    for backward in [false, true] {
        let before = deep(&db.stats());
        let keys: Vec<Vec<u8>> = match backward {
            false => db.iter().map(|e| e.unwrap().0).collect(),
            true => db.iter().rev().map(|e| e.unwrap().0).collect(),
        };
        assert_eq!(keys.len(), left, "backward {backward}");
        let first = format!("key{:06}", if backward { KEYS - 1 } else { 0 });
        assert_eq!(keys[0], first.as_bytes());
        let read = deep(&db.stats()) - before;
        // The live tenth of the keys is ~a tenth of the blocks, and a block at each edge.
        assert!(
            read <= blocks / 10 + 4,
            "backward {backward}: {read} blocks read of {blocks}"
        );
    }
    // A scan starting inside the range starts past it: one block, the one it lands in.
    let before = deep(&db.stats());
    let mut from = db.scan("key005000".as_bytes()..).unwrap();
    assert_eq!(from.next().unwrap().unwrap().0, b"key019000");
    assert_eq!(deep(&db.stats()) - before, 1);
    let before = deep(&db.stats());
    let mut down = db.scan(.."key015000".as_bytes()).unwrap().rev();
    assert_eq!(down.next().unwrap().unwrap().0, b"key000999");
    assert_eq!(deep(&db.stats()) - before, 1);
}

/// A compaction under a range reads the blocks the range leaves, not the ones it covers.
#[test]
fn a_compaction_jumps_over_the_blocks_a_newer_range_covers() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let (db, blocks) = one_table_and_a_range(&fs, dir.path());
    let before = fs.reads();
    db.compact().unwrap();
    let reads = fs.reads() - before;
    assert!(reads <= blocks / 10 + 20, "{reads} reads, {blocks} blocks");
    assert_eq!(db.iter().count(), 2_000);
    assert_eq!(db.stats().total.tables, 1);
}

/// A table that holds deleted ranges and no key (a flush of range deletes alone) answers a
/// get "absent" without a probe: none counted as unfiltered, no block read, and its ranges
/// still hide the keys below.
#[test]
fn a_table_of_ranges_alone_costs_a_get_no_probe() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let (db, _) = one_table_and_a_range(&fs, dir.path());
    let l0 = &db.stats().levels[0];
    assert_eq!(l0.tables, 1);
    assert_eq!(db.levels()[0][0].properties().entries, 0);
    for i in (0..KEYS).step_by(7) {
        let k = format!("key{i:06}");
        let want = !(1_000..19_000).contains(&i);
        assert_eq!(db.get(&k).unwrap().is_some(), want, "{k}");
        assert_eq!(db.get(format!("{k}x")).unwrap(), None);
    }
    let l0 = &db.stats().levels[0];
    assert_eq!(
        (l0.unfiltered_probes, l0.data_block_reads, l0.filter_checks),
        (0, 0, 0)
    );
}

/// A range in the active memtable deletes the keys an immutable memtable (its flush held)
/// and the tables hold, for get and multi_get alike; the memtable is asked only where an
/// older place may hold the key, and the answers stay once everything is flushed.
#[test]
fn a_memtable_range_deletes_what_older_memtables_and_tables_hold() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_memtable_size(16 * 1024)
        .with_max_immutable_memtables(4)
        .with_idle_compaction_after(None)
        .with_fs(Arc::new(fs.clone()));
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..200 {
        db.put(format!("t{i:04}"), "table").unwrap();
    }
    db.flush().unwrap();
    let held = fs.hold_table_creates_scoped();
    // ~200 bytes a record as a memtable counts it: a 16 KiB memtable is full at ~80.
    for i in 0..200 {
        db.put(format!("m{i:04}"), [b'v'; 100]).unwrap();
    }
    assert!(db.stats().immutable_memtables >= 1, "{:?}", db.stats());
    db.delete_range("m0050".as_bytes().."t0100".as_bytes())
        .unwrap();
    let check = |when: &str| {
        let keys: Vec<String> = (0..200)
            .flat_map(|i| [format!("m{i:04}"), format!("t{i:04}"), format!("n{i:04}")])
            .collect();
        let got = db.multi_get(&keys);
        for (k, got) in keys.iter().zip(got) {
            let n: u32 = k[1..].parse().unwrap();
            let want = match &k[..1] {
                "m" => n < 50,
                "t" => n >= 100,
                _ => false,
            };
            assert_eq!(db.get(k).unwrap().is_some(), want, "{when}: get {k}");
            assert_eq!(got.unwrap().is_some(), want, "{when}: multi_get {k}");
        }
    };
    check("held");
    drop(held);
    db.flush().unwrap();
    check("flushed");
}
