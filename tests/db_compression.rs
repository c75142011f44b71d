//! Per-block compression in a store (table format 3, FORMAT.md §3): every codec gives the
//! model's answers through flushes and compactions and shrinks text-like data on disk; tables
//! of formats 1, 2 and 3 live in one store and compact together; the compression setting is
//! remembered across reopens; a damaged compressed block is `Corruption`, never a panic.

mod common;

use std::path::Path;

use common::workload::{run_step, workload, Model};
use common::{tiny_options, Rng};
use lsm_bloom::inspect::{inspect_path, Report};
use lsm_bloom::table::TABLE_VERSION;
use lsm_bloom::{Compression, Compressions, Db, Error, Options};

fn codecs() -> Vec<Compression> {
    let mut c = vec![Compression::None, Compression::Lz4];
    if cfg!(feature = "zstd") {
        c.push(Compression::Zstd(3));
    }
    c
}

/// Half random, half repeated text: about 2× with LZ4.
fn value(rng: &mut Rng, i: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..40).map(|_| b'a' + rng.below(26) as u8).collect();
    v.extend_from_slice(format!("|{i}| the quick brown fox jumps over the lazy dog").as_bytes());
    v
}

fn check(db: &Db, model: &Model, what: &str) {
    for i in 0..60 {
        let k = format!("key{i:03}").into_bytes();
        assert_eq!(db.get(&k).unwrap(), model.get(&k).cloned(), "{what}: {k:?}");
        let lent = db.get_with(&k, <[u8]>::to_vec).unwrap();
        assert_eq!(lent, model.get(&k).cloned(), "{what}: get_with {k:?}");
    }
    let scanned: Vec<(Vec<u8>, Vec<u8>)> = db
        .scan::<&[u8], _>(..)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(scanned, want, "{what}: scan");
}

/// Format version and codec of every live table of the store at `dir`.
fn tables(dir: &Path) -> Vec<(u32, Compression)> {
    let Report::Database(d) = inspect_path(dir).unwrap() else {
        panic!("not a database report");
    };
    d.levels
        .iter()
        .flatten()
        .map(|t| (t.format_version, t.properties.compression))
        .collect()
}

#[test]
fn every_codec_matches_the_model_through_flushes_and_compactions() {
    for codec in codecs() {
        for seed in 1..=3u64 {
            let dir = tempfile::tempdir().unwrap();
            let opts = || tiny_options().with_compression(Some(codec.into()));
            let db = Db::open(dir.path(), opts()).unwrap();
            let mut model = Model::new();
            for (i, step) in workload(seed * 31, 2500).into_iter().enumerate() {
                run_step(&db, &mut model, step);
                if i % 500 == 499 {
                    check(&db, &model, &format!("{codec} seed {seed} step {i}"));
                }
            }
            db.flush().unwrap();
            check(&db, &model, &format!("{codec} seed {seed}"));
            let s = db.stats();
            assert!(s.total.tables > 0);
            if codec == Compression::None {
                assert!(s.total.raw_data_bytes < s.total.data_bytes, "{codec}");
            } else {
                // The workload's values are runs of one byte: they shrink a lot.
                assert!(
                    s.total.raw_data_bytes > 2 * s.total.data_bytes,
                    "{codec}: {} raw in {} on disk",
                    s.total.raw_data_bytes,
                    s.total.data_bytes
                );
            }
            db.close().unwrap();
            assert!(
                tables(dir.path())
                    .iter()
                    .all(|t| *t == (TABLE_VERSION, codec)),
                "{codec}"
            );
            let db = Db::open(dir.path(), opts()).unwrap();
            check(&db, &model, &format!("{codec} seed {seed} reopened"));
            db.close().unwrap();
        }
    }
}

#[test]
fn tables_of_every_format_read_and_compact_together() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(7);
    let mut model = Model::new();
    let mut i = 0;
    let written = [
        (1, Compression::None),
        (2, Compression::None),
        (3, Compression::None),
        (3, Compression::Lz4),
        (4, Compression::Lz4),
    ];
    for (version, codec) in written {
        let db = Db::open(
            dir.path(),
            Options::default()
                .with_table_format_version(version)
                .with_compression(Some(codec.into()))
                .with_l0_compaction_trigger(8)
                .with_idle_compaction_after(None)
                .with_l0_stop_writes_trigger(20),
        )
        .unwrap();
        for _ in 0..300 {
            // Every key is rewritten by some later format, and some are not.
            let k = format!("key{:03}", rng.below(60));
            let v = value(&mut rng, i);
            i += 1;
            db.put(k.as_bytes(), &v).unwrap();
            model.insert(k.into_bytes(), v);
        }
        let k = format!("key{:03}", rng.below(60)).into_bytes();
        db.delete(&k).unwrap();
        model.remove(&k);
        db.flush().unwrap();
        check(&db, &model, &format!("after format {version} {codec}"));
        db.close().unwrap();
    }
    let mut found = tables(dir.path());
    found.sort_by_key(|t| (t.0, t.1.id()));
    assert_eq!(found, written, "one table per open");
    // Reopened with the defaults: the record keeps LZ4; compaction rewrites all in the newest
    // format.
    let db = Db::open(dir.path(), Options::default()).unwrap();
    check(&db, &model, "mixed formats");
    db.compact().unwrap();
    check(&db, &model, "compacted");
    db.close().unwrap();
    let found = tables(dir.path());
    assert!(
        !found.is_empty()
            && found
                .iter()
                .all(|t| *t == (TABLE_VERSION, Compression::Lz4)),
        "{found:?}"
    );
}

#[test]
fn compression_is_remembered_and_a_change_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let per_level = Options::default().with_compression(Some(
        Compressions::from(Compression::Lz4).with_level(0, Compression::None),
    ));
    Db::open(dir.path(), per_level.clone())
        .unwrap()
        .close()
        .unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let r = &db.recovery().options;
    assert!(r.changed.is_empty(), "{r:?}");
    assert!(
        r.kept
            .iter()
            .any(|(s, was)| s == "compression" && was.contains("lz4")),
        "{r:?}"
    );
    db.close().unwrap();
    let db = Db::open(
        dir.path(),
        Options::default().with_compression(Some(Compression::Lz4.into())),
    )
    .unwrap();
    let r = &db.recovery().options;
    assert_eq!(r.changed.len(), 1, "{r:?}");
    assert_eq!(r.changed[0].setting, "compression");
    assert_eq!(r.changed[0].now, "compression lz4");
    db.close().unwrap();
}

#[test]
fn options_a_build_cannot_honour_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let open = |o: Options| Db::open(dir.path(), o).map(|_| ()).unwrap_err().to_string();
    let e = open(
        Options::default()
            .with_compression(Some(Compression::Lz4.into()))
            .with_table_format_version(2),
    );
    assert!(e.contains("table_format_version 3"), "{e}");
    let e = open(Options::default().with_table_format_version(TABLE_VERSION + 1));
    assert!(
        e.contains(&format!("table_format_version {}", TABLE_VERSION + 1)),
        "{e}"
    );
    let e = open(Options::default().with_compression(Some(Compression::Zstd(40).into())));
    assert!(e.contains("zstd level 40"), "{e}");
    if !cfg!(feature = "zstd") {
        let e = open(Options::default().with_compression(Some(Compression::Zstd(3).into())));
        assert!(e.contains("`zstd` feature"), "{e}");
    }
}

/// A flipped byte in a compressed data block fails its CRC: the get that reads it is
/// `Corruption` naming the file and the block, and keys in other blocks still read. (Damage
/// behind a recomputed CRC, which reaches the decompressor, is the decoder fuzz's job:
/// `src/fuzz_tests.rs`, "compressed data block" and whole table files.)
#[test]
fn a_damaged_compressed_block_is_corruption_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(3);
    let db = Db::open(
        dir.path(),
        Options::default()
            .with_compression(Some(Compression::Lz4.into()))
            .with_block_cache_bytes(0),
    )
    .unwrap();
    let mut model = Model::new();
    for i in 0..400 {
        let k = format!("key{i:04}").into_bytes();
        let v = value(&mut rng, i);
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    db.flush().unwrap();
    db.close().unwrap();
    let sst = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "sst"))
        .unwrap();
    let good = std::fs::read(&sst).unwrap();
    // The first data block starts at 0; its body is well inside the first 100 bytes.
    let mut bad = good.clone();
    bad[60] ^= 0x10;
    std::fs::write(&sst, &bad).unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    match db.get(b"key0000") {
        Err(Error::Corruption { path, reason }) => {
            assert_eq!(path, sst);
            assert!(reason.contains("data block at 0"), "{reason}");
        }
        other => panic!("damaged block read as {other:?}"),
    }
    assert_eq!(
        db.get(b"key0399").unwrap(),
        model.get(&b"key0399"[..]).cloned()
    );
    db.close().unwrap();
}
