//! Keyspaces with settings of their own (`Db::create_keyspace`, `KeyspaceOptions`): each shapes
//! the keyspace's new tables (filters, prefix filters, compression, block size) and memtable
//! flushes, is kept across reopens without being repeated, can be changed later for tables
//! written after, and a keyspace given none follows the store's settings, reopen after reopen.
//! Settings that are not valid options are refused, naming what is wrong, and change nothing.

use std::path::Path;
use std::sync::Arc;

use lsm_bloom::table::Table;
use lsm_bloom::{
    Compression, Compressions, Db, Error, FilterKind, FilterPolicy, Filters, Keyspace,
    KeyspaceOptions, Options, PrefixExtractor, PrefixFilters, RangeFilters,
};

fn opts() -> Options {
    Options::default().with_idle_compaction_after(None)
}

/// Every table of `ks`.
fn tables(ks: &Keyspace) -> Vec<Arc<Table>> {
    ks.levels().unwrap().into_iter().flatten().collect()
}

/// Writes `n` keys `<prefix>NNNNNN` with 100-byte compressible values to `ks`, then flushes.
fn fill(db: &Db, ks: &Keyspace, prefix: &str, n: usize) {
    for i in 0..n {
        ks.put(format!("{prefix}{i:06}"), "value ".repeat(17))
            .unwrap();
    }
    db.flush().unwrap();
}

fn lz4_small_blocks() -> KeyspaceOptions {
    KeyspaceOptions::default()
        .with_compression(Some(Compression::Lz4.into()))
        .with_block_size(Some(1024))
        .with_prefix_filters(Some(PrefixFilters::with(PrefixExtractor::fixed(3))))
        .with_filters(Some(Filters::fixed(FilterPolicy::bits_per_key(
            FilterKind::Standard,
            8.0,
        ))))
}

/// Mean raw bytes per data block of `t`.
fn block_bytes(t: &Table) -> u64 {
    let p = t.properties();
    p.raw_data_bytes / p.data_blocks.max(1)
}

#[test]
fn own_settings_shape_the_keyspace_tables_and_are_kept_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let own = db.create_keyspace("own", lz4_small_blocks()).unwrap();
    let plain = db.keyspace("plain").unwrap();
    fill(&db, &own, "own", 3_000);
    fill(&db, &plain, "pla", 3_000);
    let check = |db: &Db, label: &str| {
        let own = db.keyspace("own").unwrap();
        let plain = db.keyspace("plain").unwrap();
        let (o, p) = (tables(&own), tables(&plain));
        assert!(!o.is_empty() && !p.is_empty(), "{label}");
        for t in &o {
            let props = t.properties();
            assert_eq!(props.compression, Compression::Lz4, "{label}: own");
            assert_eq!(props.filter_kind, Some(FilterKind::Standard), "{label}");
            assert_eq!(t.prefix_rule(), Some(PrefixExtractor::fixed(3)), "{label}");
            assert!(
                block_bytes(t) <= 1_200,
                "{label}: {} bytes a block",
                block_bytes(t)
            );
        }
        for t in &p {
            let props = t.properties();
            assert_eq!(props.compression, Compression::None, "{label}: plain");
            assert_eq!(t.prefix_rule(), None, "{label}");
            assert!(
                block_bytes(t) >= 3_500,
                "{label}: {} bytes a block",
                block_bytes(t)
            );
        }
        let want = lz4_small_blocks();
        let got = own.options().unwrap();
        assert_eq!(got.compression, want.compression, "{label}");
        assert_eq!(got.block_size, want.block_size, "{label}");
        assert_eq!(got.prefix_filters, want.prefix_filters, "{label}");
        assert_eq!(got.filters, want.filters, "{label}");
        assert_eq!(
            got.memtable_size,
            Some(opts().memtable_size),
            "{label}: the store's"
        );
        assert_eq!(plain.options().unwrap().block_size, Some(opts().block_size));
        // The prefix filters answer for the keyspace's scans: an absent prefix is skipped.
        assert_eq!(own.scan_prefix("zzz").unwrap().count(), 0, "{label}");
        assert_eq!(own.scan_prefix("own").unwrap().count(), 3_000, "{label}");
    };
    check(&db, "as created");
    drop((own, plain)); // handles keep the store open
    db.close().unwrap();
    // Reopened with the store's defaults and the keyspace opened by name alone: the settings
    // are the recorded ones, and new tables are written with them.
    let db = Db::open(dir.path(), opts()).unwrap();
    assert!(
        db.recovery().options.changed.is_empty(),
        "{:?}",
        db.recovery().options
    );
    let own = db.keyspace("own").unwrap();
    fill(&db, &own, "owo", 1_000);
    let plain = db.keyspace("plain").unwrap();
    fill(&db, &plain, "plo", 1_000);
    db.compact().unwrap();
    check(&db, "reopened, compacted");
    assert_eq!(own.get("own000042").unwrap().map(|v| v.len()), Some(102));
}

#[test]
fn a_setting_given_later_applies_to_tables_written_after_and_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let ks = db.keyspace("k").unwrap();
    fill(&db, &ks, "a", 500);
    let lz4 = KeyspaceOptions::default().with_compression(Some(Compression::Lz4.into()));
    let again = db.create_keyspace("k", lz4.clone()).unwrap();
    assert_eq!(again.id(), ks.id(), "the same keyspace");
    fill(&db, &ks, "b", 500);
    let codecs: Vec<Compression> = tables(&ks)
        .iter()
        .map(|t| t.properties().compression)
        .collect();
    assert_eq!(
        codecs,
        [Compression::None, Compression::Lz4],
        "oldest first"
    );
    // Given again, unchanged: nothing to do; another setting keeps the first.
    db.create_keyspace("k", lz4).unwrap();
    let blocks = KeyspaceOptions::default().with_block_size(Some(2048));
    db.create_keyspace("k", blocks).unwrap();
    let o = ks.options().unwrap();
    assert_eq!(
        (o.block_size, o.compression),
        (Some(2048), Some(Compression::Lz4.into()))
    );
    drop((ks, again)); // handles keep the store open
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let o = db.keyspace("k").unwrap().options().unwrap();
    assert_eq!(
        (o.block_size, o.compression),
        (Some(2048), Some(Compression::Lz4.into()))
    );
    for i in (0..500).step_by(37) {
        let k = db.keyspace("k").unwrap();
        assert!(k.get(format!("a{i:06}")).unwrap().is_some());
        assert!(k.get(format!("b{i:06}")).unwrap().is_some());
    }
}

#[test]
fn a_keyspace_without_settings_follows_the_store_across_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.keyspace("follows").unwrap();
    let none = KeyspaceOptions::default().with_compression(Some(Compressions::NONE));
    db.create_keyspace("stays", none).unwrap();
    db.close().unwrap();
    let lz4 = opts().with_compression(Some(Compression::Lz4.into()));
    let db = Db::open(dir.path(), lz4).unwrap();
    let follows = db.keyspace("follows").unwrap();
    let stays = db.keyspace("stays").unwrap();
    fill(&db, &follows, "f", 300);
    fill(&db, &stays, "s", 300);
    assert!(tables(&follows)
        .iter()
        .all(|t| t.properties().compression == Compression::Lz4));
    assert!(tables(&stays)
        .iter()
        .all(|t| t.properties().compression == Compression::None));
}

#[test]
fn settings_that_are_not_valid_options_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let tiny = KeyspaceOptions::default().with_block_size(Some(10));
    match db.create_keyspace("bad", tiny.clone()) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("block_size"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(db.keyspace_names(), ["default"], "not created");
    // Range filters in the budget with fixed filters: refused for an existing keyspace too,
    // which keeps what it had.
    let ks = db.keyspace("k").unwrap();
    let before = ks.options().unwrap();
    let mixed = KeyspaceOptions::default()
        .with_filters(Some(Filters::fixed(FilterPolicy::default())))
        .with_range_filters(Some(RangeFilters::InBudget { max_range: 64 }));
    assert!(matches!(
        db.create_keyspace("k", mixed),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(ks.options().unwrap(), before);
    drop(ks);
    match db.create_keyspace("default", tiny) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("Db::open"), "{why}"),
        other => panic!("{other:?}"),
    }
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.keyspace_names(), ["default", "k"]);
}

/// A keyspace's own settings that no longer go with the store's (range filters in the budget,
/// the store now without one) give way to the store's at open, which says so.
#[test]
fn recorded_settings_that_no_longer_fit_the_store_give_way_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let in_budget = KeyspaceOptions::default()
        .with_range_filters(Some(RangeFilters::InBudget { max_range: 64 }));
    let ks = db.create_keyspace("ranged", in_budget).unwrap();
    fill(&db, &ks, "r", 200);
    drop(ks);
    db.close().unwrap();
    let fixed = opts().with_filters(Some(Filters::fixed(FilterPolicy::default())));
    let db = Db::open(dir.path(), fixed).unwrap();
    let changed = &db.recovery().options.changed;
    assert!(
        changed.iter().any(|c| c.setting == "keyspace ranged"),
        "{changed:?}"
    );
    let ks = db.keyspace("ranged").unwrap();
    assert_eq!(
        ks.options().unwrap().range_filters,
        Some(RangeFilters::None)
    );
    assert_eq!(ks.iter().unwrap().count(), 200, "its data is untouched");
}

/// A keyspace's own `memtable_size` flushes the memtables when its memtable alone reaches it,
/// long before the store's size is reached.
#[test]
fn a_keyspace_memtable_size_flushes_sooner() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        opts()
            .with_l0_compaction_trigger(100)
            .with_l0_slowdown_writes_trigger(150)
            .with_l0_stop_writes_trigger(200),
    )
    .unwrap();
    let small = KeyspaceOptions::default().with_memtable_size(Some(32 << 10));
    let ks = db.create_keyspace("small", small).unwrap();
    let other = db.keyspace("other").unwrap();
    for i in 0..2_000 {
        ks.put(format!("k{i:06}"), "x".repeat(100)).unwrap(); // ~330 KiB charged
        other.put(format!("k{i:06}"), "y").unwrap();
    }
    db.wait_for_compactions().unwrap();
    let flushed = ks.levels().unwrap()[0].len();
    assert!((5..=15).contains(&flushed), "{flushed} level-0 tables");
    // The others' memtables went with it: each flush wrote theirs too.
    assert!(!tables(&other).is_empty());
    assert_eq!(ks.iter().unwrap().count(), 2_000);
}

/// The options record lists a keyspace's settings only while it lives: a dropped one's go, and
/// a keyspace created again under its name follows the store.
#[test]
fn a_dropped_keyspace_settings_go_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.create_keyspace("k", lz4_small_blocks()).unwrap();
    let record = |p: &Path| std::fs::read(p.join("OPTIONS")).unwrap().len();
    let with = record(dir.path());
    assert!(db.drop_keyspace("k").unwrap());
    assert!(
        record(dir.path()) < with,
        "the record lost the keyspace's settings"
    );
    let again = db.keyspace("k").unwrap();
    assert_eq!(again.options().unwrap().block_size, Some(opts().block_size));
}
