//! Damage on disk: a corrupt filter block never hides a key (the table is read without it and
//! the event is counted); a corrupt data block makes that lookup fail with a corruption error;
//! a torn WAL tail loses only the torn record; unknown format versions are refused at open.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use lsm_bloom::{Db, Error, HugePages, Options};

fn opts() -> Options {
    Options::default().with_memtable_size(1 << 20)
}

fn key(i: u32) -> String {
    format!("key{i:06}")
}

/// One table holding `key(0..n)`.
fn one_table(dir: &Path, n: u32) -> PathBuf {
    let db = Db::open(dir, opts()).unwrap();
    for i in 0..n {
        db.put(key(i), format!("value{i}")).unwrap();
    }
    db.flush().unwrap();
    drop(db);
    let mut ssts: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .collect();
    assert_eq!(ssts.len(), 1);
    ssts.pop().unwrap()
}

/// (offset, size) of the footer's handle number `which` (0 index, 1 filter, 2 properties).
fn handle(sst: &Path, which: usize) -> (u64, u64) {
    let bytes = std::fs::read(sst).unwrap();
    let f = &bytes[bytes.len() - 64..];
    let at = which * 16;
    (
        u64::from_le_bytes(f[at..at + 8].try_into().unwrap()),
        u64::from_le_bytes(f[at + 8..at + 16].try_into().unwrap()),
    )
}

fn flip(path: &Path, offset: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).unwrap();
    b[0] ^= 0x5A;
    f.write_all_at(&b, offset).unwrap();
}

#[test]
fn corrupt_filter_block_never_hides_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let sst = one_table(dir.path(), 5000);
    let (off, size) = handle(&sst, 1);
    assert!(size > 100);
    // Damage the bit array, the header and the CRC, each in turn; with the filter loaded on
    // the heap and into huge-page memory (`Options::filter_huge_pages`).
    for huge in [HugePages::Never, HugePages::Always] {
        let opts = || opts().with_filter_huge_pages(huge);
        for at in [off + size / 2, off + 4, off + size - 1] {
            flip(&sst, at);
            let db = Db::open(dir.path(), opts()).unwrap();
            for i in 0..5000 {
                assert_eq!(
                    db.get(key(i)).unwrap(),
                    Some(format!("value{i}").into_bytes()),
                    "key {i}, huge pages {huge:?}"
                );
            }
            assert_eq!(db.get("key000001-absent").unwrap(), None);
            let s = db.stats();
            assert_eq!(s.filter_validation_failures, 1);
            assert_eq!(s.total.filter_checks, 0);
            assert_eq!(s.total.unfiltered_probes, 5000 + 1);
            drop(db);
            flip(&sst, at); // restore
            let db = Db::open(dir.path(), opts()).unwrap();
            assert_eq!(db.stats().filter_validation_failures, 0);
        }
    }
}

#[test]
fn corrupt_data_block_fails_that_lookup_only() {
    for mmap_reads in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let sst = one_table(dir.path(), 5000);
        flip(&sst, 10); // inside the first data block, which holds key(0)
        let db = Db::open(dir.path(), opts().with_mmap_reads(mmap_reads)).unwrap();
        match db.get(key(0)) {
            Err(Error::Corruption { reason, .. }) => {
                assert!(reason.contains("checksum"), "{reason}")
            }
            other => panic!("mmap {mmap_reads}: expected a corruption error, got {other:?}"),
        }
        // Keys in other blocks are still served.
        assert_eq!(db.get(key(4999)).unwrap(), Some(b"value4999".to_vec()));
        // A scan over the damaged block reports the error instead of skipping data.
        let failed = match db.scan::<&[u8], _>(..) {
            Err(_) => true,
            Ok(iter) => iter.collect::<Vec<_>>().iter().any(Result::is_err),
        };
        assert!(
            failed,
            "mmap {mmap_reads}: a scan over a damaged block must report it"
        );
    }
}

/// Under `mmap_reads` a get looks at the page cache's bytes, not a copy checked once: damage
/// that reaches a mapped table after the open is caught by the checksum on the next read,
/// and undone damage reads clean again.
#[test]
fn damage_under_a_live_map_is_caught_on_the_next_read() {
    let dir = tempfile::tempdir().unwrap();
    let sst = one_table(dir.path(), 5000);
    let db = Db::open(dir.path(), opts().with_mmap_reads(true)).unwrap();
    assert_eq!(db.get(key(0)).unwrap(), Some(b"value0".to_vec()));
    flip(&sst, 10);
    match db.get(key(0)) {
        Err(Error::Corruption { reason, .. }) => assert!(reason.contains("checksum"), "{reason}"),
        other => panic!("expected a corruption error, got {other:?}"),
    }
    flip(&sst, 10);
    assert_eq!(db.get(key(0)).unwrap(), Some(b"value0".to_vec()));
    let s = db.stats();
    assert_eq!(
        s.block_cache_hits, 0,
        "uncompressed mapped tables bypass the cache"
    );
    assert!(s.total.data_block_reads >= 3);
}

#[test]
fn torn_wal_tail_keeps_earlier_writes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), opts()).unwrap();
        for i in 0..100 {
            db.put(key(i), format!("value{i}")).unwrap();
        }
    } // closed without flushing: everything is in the WAL
    let wal: PathBuf = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.extension().is_some_and(|e| e == "wal") && std::fs::metadata(p).unwrap().len() > 0
        })
        .unwrap();
    let len = std::fs::metadata(&wal).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&wal)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..99 {
        assert_eq!(
            db.get(key(i)).unwrap(),
            Some(format!("value{i}").into_bytes()),
            "key {i}"
        );
    }
    assert_eq!(db.get(key(99)).unwrap(), None, "the torn record is dropped");
    assert!(db.stats().wal_bytes_dropped > 0);
    // Writes continue normally after recovery.
    db.put(key(99), "again").unwrap();
    drop(db);
    assert_eq!(
        Db::open(dir.path(), opts()).unwrap().get(key(99)).unwrap(),
        Some(b"again".to_vec())
    );
}

#[test]
fn future_versions_are_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let sst = one_table(dir.path(), 10);
    // The table format version sits 16 bytes before the end in every footer version.
    let len = std::fs::metadata(&sst).unwrap().len();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&sst)
        .unwrap();
    let newer = lsm_bloom::table::TABLE_VERSION + 1;
    f.write_all_at(&newer.to_le_bytes(), len - 16).unwrap();
    match Db::open(dir.path(), opts()) {
        Err(Error::UnsupportedVersion {
            what,
            found,
            supported: lsm_bloom::table::TABLE_VERSION,
            ..
        }) if found == newer => assert_eq!(what, "table format"),
        other => panic!(
            "expected an unsupported-version error, got {:?}",
            other.err()
        ),
    }
    let current = lsm_bloom::table::TABLE_VERSION;
    f.write_all_at(&current.to_le_bytes(), len - 16).unwrap();
    drop(Db::open(dir.path(), opts()).unwrap());

    let manifest = dir.path().join("MANIFEST");
    let m = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&manifest)
        .unwrap();
    m.write_all_at(&5u32.to_le_bytes(), 4).unwrap();
    let e = Db::open(dir.path(), opts())
        .err()
        .expect("manifest v5 must be refused");
    assert!(
        e.to_string().contains("unsupported manifest version 5"),
        "{e}"
    );
}

#[test]
fn damaged_footer_or_index_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let sst = one_table(dir.path(), 2000);
    let (index_off, _) = handle(&sst, 0);
    flip(&sst, index_off + 2);
    let e = Db::open(dir.path(), opts())
        .err()
        .expect("damaged index must be refused");
    assert!(e.to_string().contains("index block"), "{e}");
    flip(&sst, index_off + 2);
    let len = std::fs::metadata(&sst).unwrap().len();
    flip(&sst, len - 2); // magic
    let e = Db::open(dir.path(), opts())
        .err()
        .expect("damaged footer must be refused");
    assert!(e.to_string().contains("magic"), "{e}");
}
