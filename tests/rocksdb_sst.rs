//! RocksDB SST files read without RocksDB: the frozen fixtures of `fixtures/rocksdb-11.8.1/`
//! (written by RocksDB 11.8.1 through the plugin and with its built-in filters) are found,
//! decoded and probed by `lsm_bloom::inspect`, and `dump_filter` prints them — in a plain
//! `cargo test`, no RocksDB build needed. Damaged copies are errors, never panics.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use lsm_bloom::filter::FilterReader;
use lsm_bloom::inspect::rocksdb_dir::read_database;
use lsm_bloom::inspect::rocksdb_sst::{read_table, read_table_file};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/rocksdb-11.8.1")
        .join(name)
}

fn keys() -> Vec<String> {
    std::fs::read_to_string(fixture("keys.txt"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The lsm-bloom block inside an SST, found through footer and metaindex.
fn lsm_bloom_block(name: &str) -> Vec<u8> {
    let path = fixture(name);
    let t = read_table_file(&path).unwrap();
    assert_eq!(t.filters.len(), 1, "{t:?}");
    let f = &t.filters[0];
    assert_eq!(f.metaindex_key, "fullfilter.lsm_bloom");
    assert_eq!(f.status, "valid");
    let info = &f.lsm_bloom.as_ref().unwrap().info;
    assert_eq!(
        Some(info.n),
        t.filter_entries,
        "n = rocksdb.num.filter_entries"
    );
    let bytes = std::fs::read(&path).unwrap();
    bytes[f.offset as usize..(f.offset + f.bytes) as usize].to_vec()
}

#[test]
fn lsm_bloom_blocks_in_rocksdb_ssts_hold_every_key() {
    let keys = keys();
    let block = lsm_bloom_block("lsm_bloom-blocked-10.sst");
    let r = FilterReader::new(&block[..]).unwrap();
    assert_eq!(r.header().n, keys.len() as u64);
    assert!(keys.iter().all(|k| r.may_contain(k.as_bytes())));
    let absent = (0..10_000)
        .filter(|i| r.may_contain(format!("nokey{i}").as_bytes()))
        .count();
    assert!(absent < 300, "{absent} of 10000 absent keys pass");
    // With a 5-byte prefix rule RocksDB also adds each key's prefix (de-duplicated).
    let block = lsm_bloom_block("lsm_bloom-ribbon-10-prefix5.sst");
    let r = FilterReader::new(&block[..]).unwrap();
    let prefixes: std::collections::BTreeSet<&str> = keys.iter().map(|k| &k[..5]).collect();
    assert_eq!(r.header().n, (keys.len() + prefixes.len()) as u64);
    assert!(keys.iter().all(|k| r.may_contain(k.as_bytes())));
    assert!(prefixes.iter().all(|p| r.may_contain(p.as_bytes())));
}

#[test]
fn builtin_filters_are_decoded_from_their_metadata() {
    for (name, kind) in [
        ("builtin-bloom-10.sst", "fast_local_bloom"),
        ("builtin-ribbon-10.sst", "standard128_ribbon"),
    ] {
        let t = read_table_file(&fixture(name)).unwrap();
        assert_eq!(t.filter_entries, Some(1000));
        let f = &t.filters[0];
        assert_eq!(f.metaindex_key, "fullfilter.rocksdb.BuiltinBloomFilter");
        let b = f.builtin.as_ref().unwrap();
        assert_eq!(b.kind, kind, "{name}");
        let bpk = b.bits_per_key.unwrap();
        let fpr = b.estimated_fpr.unwrap();
        if kind == "fast_local_bloom" {
            assert!(
                matches!(b.num_probes, Some(6..=7)),
                "{name}: {:?}",
                b.num_probes
            );
            assert!((9.5..11.0).contains(&bpk), "{name}: {bpk}");
        } else {
            // Ribbon at a Bloom-equivalent 10 bits/key: ~30% smaller, same rate.
            assert!((6.0..8.5).contains(&bpk), "{name}: {bpk}");
        }
        assert!((0.003..0.02).contains(&fpr), "{name}: {fpr}");
    }
}

#[test]
fn a_rocksdb_directory_shows_its_levels_from_the_manifest() {
    let d = read_database(&fixture("db")).unwrap();
    assert_eq!(d.levels_unknown, None);
    assert!(d.unleveled.is_empty());
    // Two flushes compacted to the last level, then a third flush at level 0.
    assert_eq!(d.levels[0].len(), 1);
    let last = d.levels.last().unwrap();
    assert!(d.levels.len() > 1 && !last.is_empty());
    assert_eq!(d.totals.entries, 1000);
    // Written under the budget policy: the level-0 table got more bits per key.
    let bpk = |t: &lsm_bloom::inspect::rocksdb_sst::RocksTableReport| {
        t.filters[0].lsm_bloom.as_ref().unwrap().info.bits_per_key
    };
    assert!(bpk(&d.levels[0][0]) > bpk(&last[0]), "{:?}", d.level_totals);
    for t in d.levels.iter().flatten() {
        assert_eq!(
            t.filter_policy.as_deref(),
            Some("lsm_bloom.budget:blocked:10")
        );
    }
}

#[test]
fn dump_filter_prints_rocksdb_ssts_and_directories() {
    let dump = common::example("dump_filter");
    for name in [
        "lsm_bloom-blocked-10.sst",
        "lsm_bloom-ribbon-10-prefix5.sst",
        "builtin-bloom-10.sst",
        "builtin-ribbon-10.sst",
        "db",
    ] {
        let out = Command::new(&dump).arg(fixture(name)).output().unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("RocksDB"), "{name}: {text}");
        assert!(text.contains("fullfilter."), "{name}: {text}");
        let out = Command::new(&dump)
            .arg(fixture(name))
            .arg("--json")
            .output()
            .unwrap();
        assert!(out.status.success());
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            json["type"].as_str().unwrap().starts_with("rocksdb_"),
            "{json}"
        );
    }
}

#[test]
fn damaged_rocksdb_ssts_are_errors_or_reports_never_panics() {
    let dump = common::example("dump_filter");
    let good = std::fs::read(fixture("lsm_bloom-blocked-10.sst")).unwrap();
    let t = read_table_file(&fixture("lsm_bloom-blocked-10.sst")).unwrap();
    let f = &t.filters[0];
    // A flipped byte in the filter block: reported invalid, the rest still read, exit 1.
    let mut bad = good.clone();
    bad[(f.offset + f.bytes / 2) as usize] ^= 0x20;
    let r = read_table("t.sst", &bad).unwrap();
    assert_eq!(r.filters[0].status, "invalid");
    assert!(
        r.filters[0].error.as_ref().unwrap().contains("checksum"),
        "{r:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.sst");
    std::fs::write(&path, &bad).unwrap();
    let out = Command::new(&dump).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("error: "));
    // A file cut short: a clear error naming the file, exit 1.
    std::fs::write(&path, &good[..good.len() - 20]).unwrap();
    let out = Command::new(&dump).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    // Every single-byte flip and truncation: a value or an error.
    for i in (0..good.len()).step_by(7) {
        let mut b = good.clone();
        b[i] ^= 0xff;
        let _ = read_table("t.sst", &b);
        let _ = read_table("t.sst", &good[..i]);
    }
}

/// Partitioned filters RocksDB wrote (`fixtures/rocksdb-11.8.1-partitioned/`, 1,000 keys in
/// 256-byte partitions): the partition index and every partition are read and verified, the
/// partitions together hold every key, and the totals add up; text and JSON show them.
#[test]
fn partitioned_filters_are_read_partition_by_partition() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rocksdb-11.8.1-partitioned");
    let keys = keys();
    for (name, key, kind) in [
        (
            "builtin-bloom-10-partitioned.sst",
            "partitionedfilter.rocksdb.BuiltinBloomFilter",
            "fast_local_bloom",
        ),
        (
            "lsm_bloom-ribbon-10-partitioned.sst",
            "partitionedfilter.lsm_bloom",
            "",
        ),
    ] {
        let path = dir.join(name);
        let t = read_table_file(&path).unwrap();
        let f = &t.filters[0];
        assert_eq!((f.metaindex_key.as_str(), f.status), (key, "valid"));
        let s = f.partition_summary.as_ref().unwrap();
        assert!(s.partitions >= 5, "{name}: {} partitions", s.partitions);
        assert_eq!(s.partitions as usize, f.partitions.len());
        assert_eq!(s.invalid, 0);
        assert_eq!(s.bytes, f.partitions.iter().map(|p| p.bytes).sum::<u64>());
        // The partitions follow one another, each with its 5-byte trailer.
        for w in f.partitions.windows(2) {
            assert_eq!(w[1].offset, w[0].offset + w[0].bytes + 5, "{name}");
        }
        let p = s.estimated_fpr.unwrap();
        assert!(p > 0.0 && p < 0.02, "{name}: estimated rate {p}");
        if kind.is_empty() {
            // lsm-bloom partitions: their keys add up to the table's, and each key is in one.
            let bytes = std::fs::read(&path).unwrap();
            let readers: Vec<FilterReader<Vec<u8>>> = f
                .partitions
                .iter()
                .map(|p| {
                    let b = bytes[p.offset as usize..(p.offset + p.bytes) as usize].to_vec();
                    FilterReader::new(b).unwrap()
                })
                .collect();
            let n: u64 = readers.iter().map(|r| r.header().n).sum();
            assert_eq!(Some(n), t.filter_entries);
            for k in &keys {
                assert!(
                    readers.iter().any(|r| r.may_contain(k.as_bytes())),
                    "{name}: {k} in no partition"
                );
            }
        } else {
            assert!(f
                .partitions
                .iter()
                .all(|p| p.builtin.as_ref().is_some_and(|b| b.kind == kind)));
        }
        let out = Command::new(common::example("dump_filter"))
            .arg(&path)
            .arg("--json")
            .output()
            .unwrap();
        assert!(out.status.success());
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let text = json.to_string();
        assert!(
            text.contains("partition_summary") && text.contains("\"partitions\""),
            "{text}"
        );
    }
    // A flipped byte in a partition is found by its checksum: that partition is invalid.
    let path = dir.join("builtin-bloom-10-partitioned.sst");
    let mut bytes = std::fs::read(&path).unwrap();
    let t = read_table("t.sst", &bytes).unwrap();
    let second = t.filters[0].partitions[1].offset as usize;
    bytes[second + 3] ^= 0x40;
    let t = read_table("t.sst", &bytes).unwrap();
    let s = t.filters[0].partition_summary.as_ref().unwrap();
    assert_eq!(s.invalid, 1);
    assert_eq!(t.filters[0].partitions[1].status, "invalid");
}
