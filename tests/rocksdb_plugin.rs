//! lsm-bloom's filters inside RocksDB (feature `rocksdb-plugin`): every plugin policy gives
//! the same answers as RocksDB's built-in Bloom filter, its filter is really consulted
//! (tickers, metaindex), a damaged filter block never hides a present key, the policy
//! survives reopening through the OPTIONS file, databases switch between built-in and plugin
//! filters, many threads and MultiGet share one reader, small filter partitions keep their
//! rate, and dump_filter reads the SSTs.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::Rng;
use lsm_bloom::inspect::rocksdb_sst::{read_table, read_table_file, RocksTableReport};
use rocksdb::statistics::Ticker;
use rocksdb::{BlockBasedOptions, Direction, IteratorMode, Options, WaitForCompactOptions, DB};

/// Every lsm-bloom policy family, each once.
const POLICIES: [&str; 7] = [
    "lsm_bloom.blocked:10",
    "lsm_bloom.standard:10",
    "lsm_bloom.ribbon:fpr:0.01",
    "lsm_bloom.budget:blocked:10",
    "lsm_bloom.budget:ribbon:8",
    "lsm_bloom.builtin_budget:bloom:10",
    "lsm_bloom.builtin_budget:ribbon:10",
];

/// Small memtables and files, so a few thousand writes make several levels.
fn base_options(table: &BlockBasedOptions) -> Options {
    let mut o = Options::default();
    o.create_if_missing(true);
    o.set_write_buffer_size(64 * 1024);
    o.set_target_file_size_base(64 * 1024);
    o.set_max_bytes_for_level_base(256 * 1024);
    o.set_level_zero_file_num_compaction_trigger(2);
    o.set_block_based_table_factory(table);
    o.enable_statistics();
    o
}

/// Options with the plugin policy `name` (None: RocksDB's built-in Bloom at 10 bits/key).
fn options(name: Option<&str>) -> Options {
    let mut table = BlockBasedOptions::default();
    if name.is_none() {
        table.set_bloom_filter(10.0, false);
    }
    let mut o = base_options(&table);
    match name {
        Some(n) => lsm_bloom::rocksdb::with_filter(&mut o, n).unwrap(),
        None => o,
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(2_654_435_761) % 100_000_000).into_bytes()
}

/// Every live table of `db`, read from its file once background work has stopped (a
/// compaction running between listing and reading would delete a listed file).
fn live_tables(db: &DB, dir: &Path) -> Vec<(i32, RocksTableReport)> {
    db.wait_for_compact(&WaitForCompactOptions::default())
        .unwrap();
    db.live_files()
        .unwrap()
        .into_iter()
        .map(|f| {
            let path = dir.join(f.name.trim_start_matches('/'));
            (f.level, read_table_file(&path).unwrap())
        })
        .collect()
}

/// The metaindex key a policy's tables keep their filter under.
fn expected_filter_key(name: &str) -> &'static str {
    if name.starts_with("lsm_bloom.builtin_budget") {
        "fullfilter.rocksdb.BuiltinBloomFilter"
    } else {
        lsm_bloom::rocksdb::METAINDEX_KEY
    }
}

#[test]
fn every_plugin_policy_answers_like_the_builtin_filter() {
    for (p, name) in POLICIES.iter().enumerate() {
        for prefix in [false, true] {
            let seed = 1000 + p as u64 * 2 + u64::from(prefix);
            let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let open = |dir: &Path, policy: Option<&str>| {
                let mut o = options(policy);
                if prefix {
                    o.set_prefix_extractor(rocksdb::SliceTransform::create_fixed_prefix(5));
                }
                DB::open(&o, dir).unwrap()
            };
            let mut builtin = open(a_dir.path(), None);
            let mut plugin = open(b_dir.path(), Some(name));
            let mut rng = Rng::new(seed);
            for step in 0..6000u64 {
                let k = format!("k{:02}{:04}", rng.below(12), rng.below(400)).into_bytes();
                match rng.below(100) {
                    0..=44 => {
                        let v = format!("v{step}").into_bytes();
                        builtin.put(&k, &v).unwrap();
                        plugin.put(&k, &v).unwrap();
                    }
                    45..=59 => {
                        builtin.delete(&k).unwrap();
                        plugin.delete(&k).unwrap();
                    }
                    60..=93 => assert_eq!(
                        builtin.get(&k).unwrap(),
                        plugin.get(&k).unwrap(),
                        "{name} prefix={prefix} seed {seed} step {step}: get {:?}",
                        String::from_utf8_lossy(&k)
                    ),
                    94..=96 => {
                        // A bounded scan; with the prefix rule, a prefix-bounded seek.
                        let scan = |db: &DB| -> Vec<(Vec<u8>, Vec<u8>)> {
                            let mut ro = rocksdb::ReadOptions::default();
                            ro.set_prefix_same_as_start(prefix);
                            db.iterator_opt(IteratorMode::From(&k, Direction::Forward), ro)
                                .take(20)
                                .map(|r| r.map(|(a, b)| (a.to_vec(), b.to_vec())).unwrap())
                                .collect()
                        };
                        assert_eq!(
                            scan(&builtin),
                            scan(&plugin),
                            "{name} seed {seed} step {step}: scan"
                        );
                    }
                    97 => {
                        builtin.flush().unwrap();
                        plugin.flush().unwrap();
                    }
                    98 => {
                        builtin.compact_range(None::<&[u8]>, None::<&[u8]>);
                        plugin.compact_range(None::<&[u8]>, None::<&[u8]>);
                    }
                    _ => {
                        drop(builtin);
                        drop(plugin);
                        builtin = open(a_dir.path(), None);
                        plugin = open(b_dir.path(), Some(name));
                    }
                }
            }
            // The plugin's tables carry the policy's filter.
            plugin.flush().unwrap();
            let tables = live_tables(&plugin, b_dir.path());
            assert!(!tables.is_empty());
            for (_, t) in &tables {
                assert_eq!(t.filters.len(), 1, "{name}: {t:?}");
                assert_eq!(t.filters[0].metaindex_key, expected_filter_key(name));
                assert_eq!(t.filters[0].status, "valid");
            }
        }
    }
    assert_eq!(lsm_bloom::rocksdb::stats().panics, 0);
}

/// Loads `n` keys, flushes and compacts, so every key is in a table.
fn load(db: &DB, n: u64) {
    for i in 0..n {
        db.put(key(i), b"value").unwrap();
    }
    db.flush().unwrap();
}

#[test]
fn the_filter_is_really_consulted() {
    for name in POLICIES {
        let dir = tempfile::tempdir().unwrap();
        let opts = options(Some(name));
        let db = DB::open(&opts, dir.path()).unwrap();
        load(&db, 20_000);
        let tables = live_tables(&db, dir.path());
        let key_name = expected_filter_key(name);
        assert!(tables
            .iter()
            .all(|(_, t)| t.filters.iter().any(|f| f.metaindex_key == key_name)));
        let (useful0, pos0) = (
            opts.get_ticker_count(Ticker::BloomFilterUseful),
            opts.get_ticker_count(Ticker::BloomFilterFullPositive),
        );
        let gets = 20_000u64;
        for i in 0..gets {
            assert_eq!(db.get(key(1 << 40 | i)).unwrap(), None);
        }
        let useful = opts.get_ticker_count(Ticker::BloomFilterUseful) - useful0;
        let positive = opts.get_ticker_count(Ticker::BloomFilterFullPositive) - pos0;
        let checks = useful + positive;
        // Nearly every absent get checks at least one table's filter (one whose key falls
        // between two tables' ranges on every level checks none: the layout, which depends on
        // file sizes, left 1 of 20,000 such keys once RocksDB was built with LZ4); nearly all
        // filters say "absent".
        assert!(
            checks >= gets * 99 / 100,
            "{name}: {checks} filter checks for {gets} gets"
        );
        let fpr = positive as f64 / checks as f64;
        assert!(
            fpr < 0.05,
            "{name}: {useful} useful, {positive} positive: FPR {fpr}"
        );
        for i in (0..20_000).step_by(97) {
            assert!(db.get(key(i)).unwrap().is_some(), "{name}: key {i}");
        }
    }
}

/// Partitioned filters with small partitions keep their rate: RocksDB asks the builder how
/// many keys fit a partition of `metadata_block_size` bytes (`ApproximateNumEntries`) and
/// builds one filter per partition, so at 128 bytes each holds a few dozen keys. Every kind,
/// at 10 bits/key, passes at most 2% of absent keys; present keys are all found. (Sized from
/// the bits/key alone, Ribbon partitions had a few result bits: 6.5% passed at 128 bytes.)
#[test]
fn small_filter_partitions_keep_their_rate() {
    for name in [
        "lsm_bloom.blocked:10",
        "lsm_bloom.standard:10",
        "lsm_bloom.ribbon:10",
    ] {
        for partition in [128, 512] {
            let dir = tempfile::tempdir().unwrap();
            let mut table = BlockBasedOptions::default();
            table.set_partition_filters(true);
            table.set_index_type(rocksdb::BlockBasedIndexType::TwoLevelIndexSearch);
            table.set_metadata_block_size(partition);
            let opts = lsm_bloom::rocksdb::with_filter(&mut base_options(&table), name).unwrap();
            let db = DB::open(&opts, dir.path()).unwrap();
            load(&db, 20_000);
            let tables = live_tables(&db, dir.path());
            assert!(
                tables.iter().all(|(_, t)| t
                    .filters
                    .iter()
                    .any(|f| f.metaindex_key.starts_with("partitionedfilter."))),
                "{name}: not partitioned"
            );
            let (useful0, pos0) = (
                opts.get_ticker_count(Ticker::BloomFilterUseful),
                opts.get_ticker_count(Ticker::BloomFilterFullPositive),
            );
            for i in 0..20_000u64 {
                assert_eq!(db.get(key(1 << 40 | i)).unwrap(), None);
            }
            let useful = opts.get_ticker_count(Ticker::BloomFilterUseful) - useful0;
            let positive = opts.get_ticker_count(Ticker::BloomFilterFullPositive) - pos0;
            let checks = useful + positive;
            assert!(checks >= 19_800, "{name}: {checks} filter checks");
            let fpr = positive as f64 / checks as f64;
            assert!(
                fpr <= 0.02,
                "{name}, {partition}-byte partitions: {positive} of {checks} passed ({fpr:.4})"
            );
            for i in (0..20_000).step_by(97) {
                assert!(db.get(key(i)).unwrap().is_some(), "{name}: key {i}");
            }
        }
    }
}

/// The SST reader verifies RocksDB's block checksums of every type, with and without the
/// per-block context of format_version 6 on: tables RocksDB wrote with each read back, and a
/// flipped byte in the filter block is found.
#[test]
fn the_sst_reader_verifies_every_checksum_type() {
    use rocksdb::ChecksumType::*;
    for name in ["crc32c", "xxhash", "xxhash64", "xxh3"] {
        for version in [5, 7] {
            let checksum = match name {
                "crc32c" => CRC32c,
                "xxhash" => XXHash,
                "xxhash64" => XXHash64,
                _ => XXH3,
            };
            let dir = tempfile::tempdir().unwrap();
            let mut table = BlockBasedOptions::default();
            table.set_bloom_filter(10.0, false);
            table.set_checksum_type(checksum);
            table.set_format_version(version);
            let db = DB::open(&base_options(&table), dir.path()).unwrap();
            load(&db, 2_000);
            let tables = live_tables(&db, dir.path());
            drop(db);
            let (_, t) = &tables[0];
            assert_eq!(t.checksum_type, name);
            assert_eq!(t.format_version, version as u32);
            assert_eq!(t.filters[0].status, "valid", "{name} v{version}");
            let path = dir.path().join(&t.file);
            let mut bytes = std::fs::read(&path).unwrap();
            let at = t.filters[0].offset as usize + 10;
            bytes[at] ^= 0x01;
            let damaged = read_table("t.sst", &bytes).unwrap();
            assert_eq!(damaged.filters[0].status, "invalid", "{name} v{version}");
            let error = damaged.filters[0].error.clone().unwrap();
            assert!(error.contains("checksum mismatch"), "{error}");
        }
    }
}

#[test]
fn a_name_mismatch_would_be_noticed() {
    // Tables written under the plugin and read under RocksDB's built-in policy are read without
    // a filter (other metaindex key): the tickers show no filter checks, which is what the test
    // above would catch if the plugin's name ever stopped matching its own tables.
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&options(Some("lsm_bloom.blocked:10")), dir.path()).unwrap();
    load(&db, 5_000);
    drop(db);
    let mut opts = options(None);
    // No compaction may rewrite the plugin's tables with built-in filters meanwhile.
    opts.set_disable_auto_compactions(true);
    let db = DB::open(&opts, dir.path()).unwrap();
    for i in 0..2_000 {
        assert_eq!(db.get(key(1 << 40 | i)).unwrap(), None);
    }
    let checks = opts.get_ticker_count(Ticker::BloomFilterUseful)
        + opts.get_ticker_count(Ticker::BloomFilterFullPositive);
    assert_eq!(checks, 0);
}

/// Flips one byte of every table's filter block at `at(len)` and returns how many.
fn damage_filters(dir: &Path, at: impl Fn(u64) -> u64) -> usize {
    let mut damaged = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "sst") {
            continue;
        }
        let t = read_table_file(&path).unwrap();
        for f in &t.filters {
            let mut bytes = std::fs::read(&path).unwrap();
            let pos = (f.offset + at(f.bytes)) as usize;
            bytes[pos] ^= 0x5a;
            std::fs::write(&path, bytes).unwrap();
            damaged += 1;
        }
    }
    damaged
}

#[test]
fn a_damaged_filter_block_never_hides_a_present_key() {
    // RocksDB's own block checksums off, so the damaged bytes reach lsm-bloom's reader; the
    // flip lands in the header (magic, kind, sizes), the bit array, or the CRC trailer.
    for at in [|_| 8u64, |len: u64| len / 2, |len: u64| len - 1] {
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            let mut table = BlockBasedOptions::default();
            table.set_checksum_type(rocksdb::ChecksumType::NoChecksum);
            let mut o = base_options(&table);
            let o = lsm_bloom::rocksdb::with_filter(&mut o, "lsm_bloom.blocked:10").unwrap();
            DB::open(&o, dir.path()).unwrap()
        };
        let db = open();
        load(&db, 10_000);
        drop(db);
        assert!(damage_filters(dir.path(), at) > 0);
        // dump_filter says what is wrong, and exits 1.
        let sst = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "sst"))
            .unwrap();
        let out = std::process::Command::new(common::example("dump_filter"))
            .arg(&sst)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("filter block fullfilter.lsm_bloom"), "{err}");
        let before = lsm_bloom::rocksdb::stats().rejected_blocks;
        let db = open();
        for i in 0..10_000 {
            assert!(db.get(key(i)).unwrap().is_some(), "key {i} reported absent");
        }
        assert!(lsm_bloom::rocksdb::stats().rejected_blocks > before);
    }
    // With RocksDB's checksums on (the default), RocksDB itself catches the flip: still no
    // present key goes missing.
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&options(Some("lsm_bloom.ribbon:10")), dir.path()).unwrap();
    load(&db, 10_000);
    drop(db);
    damage_filters(dir.path(), |len| len / 2);
    let db = DB::open(&options(Some("lsm_bloom.ribbon:10")), dir.path()).unwrap();
    for i in 0..10_000 {
        assert!(
            !matches!(db.get(key(i)), Ok(None)),
            "key {i} reported absent"
        );
    }
}

fn options_file(dir: &Path) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("OPTIONS-")
        })
        .collect();
    files.sort();
    std::fs::read_to_string(files.last().unwrap()).unwrap()
}

#[test]
fn reopening_with_load_latest_keeps_the_policy() {
    for name in POLICIES {
        let dir = tempfile::tempdir().unwrap();
        let db = DB::open(&options(Some(name)), dir.path()).unwrap();
        load(&db, 3_000);
        drop(db);
        assert!(
            options_file(dir.path()).contains(&format!("filter_policy={name}")),
            "{name} not in the OPTIONS file"
        );
        lsm_bloom::rocksdb::register().expect("registering the lsm-bloom policies");
        let (opts, cfs) = Options::load_latest(
            dir.path(),
            rocksdb::Env::new().unwrap(),
            false,
            rocksdb::Cache::new_lru_cache(8 << 20),
        )
        .unwrap();
        let db = DB::open_cf_descriptors(&opts, dir.path(), cfs).unwrap();
        for i in 3_000..6_000 {
            db.put(key(i), b"value").unwrap();
        }
        db.flush().unwrap();
        for i in 0..6_000 {
            assert!(db.get(key(i)).unwrap().is_some(), "{name}: key {i}");
        }
        // Every table, old and new, has the policy's filter.
        for (_, t) in live_tables(&db, dir.path()) {
            assert_eq!(
                t.filters[0].metaindex_key,
                expected_filter_key(name),
                "{name}"
            );
            assert_eq!(t.filter_policy.as_deref(), Some(name), "{name}");
        }
    }
}

#[test]
fn bad_names_are_refused_with_the_reason() {
    let mut o = Options::default();
    let Err(e) = lsm_bloom::rocksdb::with_filter(&mut o, "lsm_bloom.blocked:lots") else {
        panic!("a bad name was accepted");
    };
    assert!(e.to_string().contains("expected a number"), "{e}");
    // Through RocksDB's own parser too (the factory hands the name to Rust).
    lsm_bloom::rocksdb::register().expect("registering the lsm-bloom policies");
    let e = match o
        .get_options_from_string("block_based_table_factory={filter_policy=lsm_bloom.xor:10}")
    {
        Ok(_) => panic!("RocksDB accepted an unknown kind"),
        Err(e) => e.into_string(),
    };
    assert!(e.contains("unknown filter kind"), "{e}");
}

#[test]
fn switching_between_builtin_and_plugin_filters_keeps_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let check = |db: &DB, upto: u64| {
        for i in 0..upto {
            assert!(db.get(key(i)).unwrap().is_some(), "key {i}");
        }
        for i in 0..2_000 {
            assert_eq!(db.get(key(1 << 40 | i)).unwrap(), None);
        }
    };
    let db = DB::open(&options(None), dir.path()).unwrap();
    load(&db, 4_000);
    drop(db);
    let db = DB::open(&options(Some("lsm_bloom.ribbon:10")), dir.path()).unwrap();
    check(&db, 4_000);
    for i in 4_000..8_000 {
        db.put(key(i), b"value").unwrap();
    }
    db.flush().unwrap();
    check(&db, 8_000);
    drop(db);
    let db = DB::open(&options(None), dir.path()).unwrap();
    check(&db, 8_000);
    db.compact_range(None::<&[u8]>, None::<&[u8]>);
    check(&db, 8_000);
}

#[test]
fn many_threads_and_multi_get_share_one_reader() {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(Some("lsm_bloom.blocked:10"));
    // The default column family opened by name (so MultiGet can name it), with the policy.
    let cf = rocksdb::ColumnFamilyDescriptor::new("default", opts.clone());
    let db = Arc::new(DB::open_cf_descriptors(&opts, dir.path(), [cf]).unwrap());
    load(&db, 20_000);
    db.compact_range(None::<&[u8]>, None::<&[u8]>);
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for j in 0..5_000u64 {
                    let i = (j * 8 + t) % 20_000;
                    assert!(db.get(key(i)).unwrap().is_some());
                    assert_eq!(db.get(key(1 << 40 | i)).unwrap(), None);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // MultiGet: present and absent keys, sorted, in batches larger than the shim's chunk.
    let mut keys: Vec<(Vec<u8>, bool)> = (0..300u64)
        .map(|i| (key(i * 7), true))
        .chain((0..300u64).map(|i| (key(1 << 40 | i), false)))
        .collect();
    keys.sort();
    let cf = db.cf_handle("default").unwrap();
    let (useful0, pos0) = (
        opts.get_ticker_count(Ticker::BloomFilterUseful),
        opts.get_ticker_count(Ticker::BloomFilterFullPositive),
    );
    let results = db.batched_multi_get_cf(&cf, keys.iter().map(|(k, _)| k), true);
    for ((k, present), r) in keys.iter().zip(results) {
        assert_eq!(
            r.unwrap().is_some(),
            *present,
            "{}",
            String::from_utf8_lossy(k)
        );
    }
    let checked = opts.get_ticker_count(Ticker::BloomFilterUseful) - useful0
        + opts.get_ticker_count(Ticker::BloomFilterFullPositive)
        - pos0;
    assert!(
        checked >= 300,
        "MultiGet consulted the filter {checked} times"
    );
    assert_eq!(lsm_bloom::rocksdb::stats().panics, 0);
}

#[test]
fn dump_filter_reads_the_ssts_of_every_policy() {
    let dump = common::example("dump_filter");
    for name in POLICIES.iter().map(|n| Some(*n)).chain([None]) {
        let dir = tempfile::tempdir().unwrap();
        let db = DB::open(&options(name), dir.path()).unwrap();
        load(&db, 5_000);
        drop(db);
        let tables: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "sst"))
            .collect();
        let sst = &tables[0];
        let out = std::process::Command::new(&dump)
            .arg(sst)
            .arg("--json")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["type"], "rocksdb_table");
        let f = &json["filters"][0];
        match name {
            Some(n) if !n.contains("builtin") => {
                assert_eq!(f["metaindex_key"], "fullfilter.lsm_bloom");
                let kind = f["lsm_bloom"]["kind"].as_str().unwrap();
                assert!(n.contains(kind), "{n}: {kind}");
                assert_eq!(f["lsm_bloom"]["n"], json["filter_entries"]);
            }
            Some(n) => {
                let kind = f["builtin"]["kind"].as_str().unwrap();
                let want = if n.contains("ribbon") {
                    "standard128_ribbon"
                } else {
                    "fast_local_bloom"
                };
                assert_eq!(kind, want, "{n}");
            }
            None => {
                assert_eq!(f["builtin"]["kind"], "fast_local_bloom");
                let bpk = f["builtin"]["bits_per_key"].as_f64().unwrap();
                assert!((9.0..11.5).contains(&bpk), "built-in at 10 bits/key: {bpk}");
            }
        }
        // The directory: levels from the MANIFEST, text and JSON.
        let out = std::process::Command::new(&dump)
            .arg(dir.path())
            .arg("--json")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["type"], "rocksdb_database");
        assert!(
            json["levels_unknown"].is_null(),
            "{}",
            json["levels_unknown"]
        );
        assert_eq!(
            json["totals"]["tables"].as_u64().unwrap(),
            tables.len() as u64
        );
        let out = std::process::Command::new(&dump)
            .arg(dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("RocksDB database") && text.contains("level "),
            "{text}"
        );
    }
}

/// Writes `fixtures/rocksdb-11.8.1/` (SSTs written by RocksDB 11.8.1 with the plugin and with
/// its built-in filters, and a small database directory), which `tests/rocksdb_sst.rs` reads
/// without RocksDB. Fixtures are frozen: run once, never again for the same directory.
#[test]
#[ignore = "writes the frozen fixtures; run by hand once"]
fn write_rocksdb_fixtures() {
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rocksdb-11.8.1");
    assert!(
        !out.exists(),
        "{} exists: fixtures are frozen",
        out.display()
    );
    std::fs::create_dir_all(out.join("db")).unwrap();
    let keys: Vec<String> = (0..1000).map(|i| format!("key{i:04}")).collect();
    std::fs::write(out.join("keys.txt"), keys.join("\n") + "\n").unwrap();
    let one_table = |file: &str, policy: Option<&str>, prefix: bool| {
        let dir = tempfile::tempdir().unwrap();
        let mut o = options(policy);
        if prefix {
            o.set_prefix_extractor(rocksdb::SliceTransform::create_fixed_prefix(5));
        }
        if policy.is_none() && file.contains("ribbon") {
            // Ribbon at every level: RocksDB's default (bloom_before_level 0) writes flushes
            // with its Bloom filter.
            let mut table = BlockBasedOptions::default();
            table.set_hybrid_ribbon_filter(10.0, -1);
            o = base_options(&table);
        }
        let db = DB::open(&o, dir.path()).unwrap();
        for k in &keys {
            db.put(k, b"v").unwrap();
        }
        db.flush().unwrap();
        copy_the_one_table(&db, dir.path(), &out.join(file));
    };
    one_table(
        "lsm_bloom-blocked-10.sst",
        Some("lsm_bloom.blocked:10"),
        false,
    );
    one_table(
        "lsm_bloom-ribbon-10-prefix5.sst",
        Some("lsm_bloom.ribbon:10"),
        true,
    );
    one_table("builtin-bloom-10.sst", None, false);
    one_table("builtin-ribbon-10.sst", None, false);
    // A database: two flushes and a compaction to the last level, then a third flush at L0.
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&options(Some("lsm_bloom.budget:blocked:10")), dir.path()).unwrap();
    for (n, chunk) in keys.chunks(400).enumerate() {
        for k in chunk {
            db.put(k, b"v").unwrap();
        }
        db.flush().unwrap();
        if n == 1 {
            db.compact_range(None::<&[u8]>, None::<&[u8]>);
        }
    }
    let live = db.live_files().unwrap();
    drop(db);
    let current = std::fs::read_to_string(dir.path().join("CURRENT")).unwrap();
    for name in ["CURRENT".to_string(), current.trim().to_string()]
        .into_iter()
        .chain(
            live.iter()
                .map(|f| f.name.trim_start_matches('/').to_string()),
        )
    {
        std::fs::copy(dir.path().join(&name), out.join("db").join(&name)).unwrap();
    }
}

/// Copies the one live table of `db` (in `dir`) to `to`.
fn copy_the_one_table(db: &DB, dir: &Path, to: &Path) {
    let files = db.live_files().unwrap();
    assert_eq!(files.len(), 1);
    std::fs::copy(dir.join(files[0].name.trim_start_matches('/')), to).unwrap();
}

/// Writes `fixtures/rocksdb-11.8.1-partitioned/`: one table each of RocksDB's built-in Bloom
/// filter and lsm-bloom's Ribbon policy with partitioned filters (two-level index, 256-byte
/// partitions), over the 1,000 keys of `keys.txt`, so the SST reader's partition decoding is
/// checked against files RocksDB wrote. Frozen: run once, never again for the same directory.
#[test]
#[ignore = "writes the frozen fixtures; run by hand once"]
fn write_rocksdb_partitioned_fixtures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let out = root.join("rocksdb-11.8.1-partitioned");
    assert!(
        !out.exists(),
        "{} exists: fixtures are frozen",
        out.display()
    );
    std::fs::create_dir_all(&out).unwrap();
    let keys = std::fs::read_to_string(root.join("rocksdb-11.8.1/keys.txt")).unwrap();
    for (file, policy) in [
        ("builtin-bloom-10-partitioned.sst", None),
        (
            "lsm_bloom-ribbon-10-partitioned.sst",
            Some("lsm_bloom.ribbon:10"),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut table = BlockBasedOptions::default();
        if policy.is_none() {
            table.set_bloom_filter(10.0, false);
        }
        table.set_partition_filters(true);
        table.set_index_type(rocksdb::BlockBasedIndexType::TwoLevelIndexSearch);
        table.set_metadata_block_size(256);
        let mut o = base_options(&table);
        if let Some(p) = policy {
            o = lsm_bloom::rocksdb::with_filter(&mut o, p).unwrap();
        }
        let db = DB::open(&o, dir.path()).unwrap();
        for k in keys.lines() {
            db.put(k, b"v").unwrap();
        }
        db.flush().unwrap();
        copy_the_one_table(&db, dir.path(), &out.join(file));
    }
}
