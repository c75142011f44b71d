//! Filter effectiveness: on a store with several tables, absent-key lookups read data blocks
//! at no more than ~1.5x the sum of the tables' expected false-positive rates, and present
//! keys cost about one read.

mod common;

use common::workload::{run_step, workload, Model};
use common::{tiny_options, Rng};
use lsm_bloom::table::{FilterBytes, FilterState};
use lsm_bloom::{Db, FilterKind, FilterPolicy, Filters, HugePages, Options};

fn loaded(dir: &std::path::Path, policy: FilterPolicy, keys: u64) -> Db {
    let opts = Options::default()
        .with_memtable_size(256 * 1024)
        .with_target_file_size(256 * 1024)
        .with_level1_max_bytes(1 << 20)
        .with_filters(Some(Filters::fixed(policy)))
        .with_block_cache_bytes(0);
    let db = Db::open(dir, opts).unwrap();
    let mut rng = Rng::new(42);
    for i in 0..keys {
        let _ = rng.next();
        db.put(
            format!("key{:012}", i * 7919 % keys),
            format!("value{i}").repeat(4),
        )
        .unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    db.compact().unwrap();
    db
}

/// Measures the store as loading and compaction left it (its shape depends on when the
/// background compactions ran), then again with everything compacted into one level.
fn check(policy: FilterPolicy) {
    let dir = tempfile::tempdir().unwrap();
    let db = loaded(dir.path(), policy, 60_000);
    measure(&db, policy);
    db.compact().unwrap();
    let levels: Vec<u64> = db.stats().levels.iter().map(|l| l.tables).collect();
    assert_eq!(levels.iter().filter(|&&n| n > 0).count(), 1, "{levels:?}");
    measure(&db, policy);
}

fn measure(db: &Db, policy: FilterPolicy) {
    let before = db.stats();
    assert!(
        before.total.tables >= 4,
        "want at least 4 tables: {:?}",
        before.levels.iter().map(|l| l.tables).collect::<Vec<_>>()
    );
    let lookups = 100_000u64;
    for i in 0..lookups {
        assert_eq!(db.get(format!("absent{i:012}")).unwrap(), None);
    }
    let after = db.stats();
    let reads =
        (after.total.data_block_reads - before.total.data_block_reads) as f64 / lookups as f64;
    // Those sort before every table's range, so no filter was even needed. Keys interleaved
    // with the real ones land inside ranges and must be stopped by the filters:
    let b2 = db.stats();
    for i in 0..lookups {
        assert_eq!(db.get(format!("key{:012}x", i % 60_000)).unwrap(), None);
    }
    let a2 = db.stats();
    let interleaved_reads = a2.total.data_block_reads - b2.total.data_block_reads;
    let probes = a2.tables_probed - b2.tables_probed;
    let per_get = interleaved_reads as f64 / lookups as f64;
    // Every probed table costs its filter's FPR in expectation: compare with the expected FPR
    // of the tables actually probed (per level: probes x that level's mean table FPR).
    let mut expected = 0.0;
    for (a, b) in a2.levels.iter().zip(&b2.levels) {
        assert_eq!(
            a.tables, b.tables,
            "table set changed during the measurement"
        );
        if a.tables > 0 {
            let checks = (a.filter_checks - b.filter_checks) as f64;
            expected += checks * a.expected_fpr_sum / a.tables as f64 / lookups as f64;
        }
    }
    assert!(
        reads <= 0.001,
        "absent keys outside every range cost {reads} reads per get"
    );
    // Each interleaved key lies inside some table's range, except one that falls between two
    // neighbouring tables of every level holding it: at most one key per table boundary, and
    // each key is asked at most twice (`i % 60_000` over 100,000 lookups).
    let boundaries = a2.total.tables;
    assert!(
        probes >= lookups - 2 * boundaries,
        "interleaved keys should reach a filter: {probes} probes for {lookups} keys, {boundaries} tables"
    );
    assert!(
        per_get <= 1.5 * expected,
        "{policy:?}: {per_get:.5} data-block reads per absent get, expected FPR sum {expected:.5}"
    );
    // The rate per filter check, against the mean expected rate of the filters checked.
    let checks: u64 = a2
        .levels
        .iter()
        .zip(&b2.levels)
        .map(|(a, b)| a.filter_checks - b.filter_checks)
        .sum();
    let positives: u64 = a2
        .levels
        .iter()
        .zip(&b2.levels)
        .map(|(a, b)| a.filter_positive - b.filter_positive)
        .sum();
    let fpr = positives as f64 / checks as f64;
    let expected_per_check = expected * lookups as f64 / checks as f64;
    assert!(
        fpr > 0.0 && fpr <= 1.5 * expected_per_check,
        "observed FPR {fpr:.5} per check, expected {expected_per_check:.5}"
    );

    // Present keys: one data-block read each (the filter never hides them).
    let b3 = db.stats();
    for i in 0..10_000u64 {
        assert!(db
            .get(format!("key{:012}", i * 13 % 60_000))
            .unwrap()
            .is_some());
    }
    let a3 = db.stats();
    let present_reads = (a3.total.data_block_reads - b3.total.data_block_reads) as f64 / 10_000.0;
    assert!(
        (1.0..1.1).contains(&present_reads),
        "present-key reads per get {present_reads}"
    );
    assert_eq!(
        a3.total.filter_true_positive - b3.total.filter_true_positive,
        10_000
    );
}

#[test]
fn absent_lookups_read_at_most_1_5x_expected_fpr_blocked() {
    check(FilterPolicy::bits_per_key(FilterKind::Blocked, 10.0));
}

#[test]
fn absent_lookups_read_at_most_1_5x_expected_fpr_standard() {
    check(FilterPolicy::bits_per_key(FilterKind::Standard, 8.0));
}

#[test]
fn absent_lookups_read_at_most_1_5x_expected_fpr_ribbon() {
    check(FilterPolicy::bits_per_key(FilterKind::Ribbon, 7.5));
}

#[test]
fn sum_of_expected_fprs_bounds_reads_across_all_l0_tables() {
    // Overlapping L0 tables only (no compaction): every absent key probes every table.
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default()
        .with_memtable_size(64 * 1024)
        .with_l0_compaction_trigger(50)
        .with_idle_compaction_after(None)
        .with_l0_stop_writes_trigger(60)
        .with_filters(Some(Filters::fixed(FilterPolicy::bits_per_key(
            FilterKind::Blocked,
            10.0,
        ))))
        .with_block_cache_bytes(0);
    let db = Db::open(dir.path(), opts).unwrap();
    for t in 0..8u64 {
        for i in 0..2_000u64 {
            db.put(format!("k{:08}", i * 8 + t), b"v").unwrap();
        }
        db.flush().unwrap();
    }
    let s0 = db.stats();
    assert!(
        s0.levels[0].tables >= 8,
        "{} L0 tables",
        s0.levels[0].tables
    );
    let n = 50_000u64;
    for i in 0..n {
        assert_eq!(db.get(format!("k{:08}-absent", i % 16_000)).unwrap(), None);
    }
    let s1 = db.stats();
    let per_get = (s1.total.data_block_reads - s0.total.data_block_reads) as f64 / n as f64;
    let expected = s1.levels[0].expected_fpr_sum;
    assert!(
        per_get <= 1.5 * expected,
        "{per_get} reads per absent get vs sum of expected FPRs {expected}"
    );
    assert!(
        per_get > 0.3 * expected,
        "suspiciously few false positives: {per_get} vs {expected}"
    );
}

/// `Options::filter_huge_pages`: through flushes and compactions (tables opened and closed,
/// their filters taken from and given back to the huge-page arena) and a reopen, every filter
/// sits in the arena, its bit array on a cache line (as on the heap), holding the bytes and
/// giving the answers of the same block loaded on the heap; gets answer as the model says,
/// and the filters stop absent keys.
#[test]
fn filters_in_huge_page_memory_answer_as_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let opts = || {
        tiny_options()
            .with_filter_huge_pages(HugePages::Always)
            .with_block_cache_bytes(0)
    };
    let db = Db::open(dir.path(), opts()).unwrap();
    let mut model = Model::new();
    for step in workload(23, 3000) {
        run_step(&db, &mut model, step);
    }
    // Enough data for several tables (of 8 KiB) after the last compaction.
    for i in 0..400 {
        let (k, v) = (format!("key{:03}-{i}", i % 60), format!("{i:0100}"));
        db.put(&k, &v).unwrap();
        model.insert(k.into_bytes(), v.into_bytes());
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    let mut filters = 0;
    for t in db.levels().iter().flatten() {
        if let FilterState::Valid(f) = t.filter() {
            filters += 1;
            let FilterBytes::Huge(b) = f.block() else {
                panic!("table {} holds its filter on the heap", t.id());
            };
            // The bit array, after the header, starts a cache line.
            let header = lsm_bloom::filter::format::HEADER_LEN;
            assert_eq!((b.as_ptr() as usize + header) % 64, 0);
            // The same block loaded on the heap: the same bytes, the same answers.
            let heap = lsm_bloom::table::Table::open(t.path(), t.id()).unwrap();
            let FilterState::Valid(h) = heap.filter() else {
                panic!("table {}: no filter on the heap", t.id());
            };
            assert_eq!(h.block().as_ref(), b.as_ref());
            assert_eq!((h.block().as_ref().as_ptr() as usize + header) % 64, 0);
            for i in 0..500 {
                let k = format!("key{:03}-{i}x", i % 60);
                assert_eq!(f.may_contain(k.as_bytes()), h.may_contain(k.as_bytes()));
            }
        }
    }
    assert!(filters >= 2, "{filters} tables with filters");
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    for i in 0..60 {
        let k = format!("key{i:03}").into_bytes();
        assert_eq!(db.get(&k).unwrap(), model.get(&k).cloned(), "key{i:03}");
    }
    let before = db.stats().total;
    for i in 0..2000 {
        assert_eq!(db.get(format!("key{:03}-{i}x", i % 60)).unwrap(), None);
    }
    let after = db.stats().total;
    let (checks, useful) = (
        after.filter_checks - before.filter_checks,
        after.filter_useful - before.filter_useful,
    );
    // (A store this small gets small filters from the default budget, whose header and
    // trailer cost as much as their arrays: measured 64-71% useful.)
    assert!(checks > 0 && useful * 2 > checks, "{useful} of {checks}");
}

/// `HugePages::LevelsFrom` (the default's rule): the filters of tables in levels allowed at
/// least the given bytes sit in the huge-page arena, the others on the heap, whether the
/// table was written by a flush or a compaction or opened again by recovery; gets answer as
/// the model says either way.
#[test]
fn huge_pages_levels_from_places_only_large_levels_in_the_arena() {
    let dir = tempfile::tempdir().unwrap();
    let base = tiny_options();
    // Level 2's limit: levels 2 and deeper qualify, levels 0 and 1 do not.
    let level2 = base.level1_max_bytes * base.size_ratio as u64;
    let opts = || {
        tiny_options()
            .with_filter_huge_pages(HugePages::LevelsFrom(level2))
            .with_block_cache_bytes(0)
    };
    let db = Db::open(dir.path(), opts()).unwrap();
    let mut model = Model::new();
    for step in workload(29, 3000) {
        run_step(&db, &mut model, step);
    }
    // ~300 KiB more: past level 1's 16 KiB, into level 2 (64 KiB) and deeper.
    for i in 0..3000 {
        let (k, v) = (format!("bulk{:05}", (i * 7919) % 3000), format!("{i:0100}"));
        db.put(&k, &v).unwrap();
        model.insert(k.into_bytes(), v.into_bytes());
    }
    db.wait_for_compactions().unwrap();
    let check = |db: &Db, when: &str| {
        let (mut heap, mut huge) = (0, 0);
        for (level, tables) in db.levels().iter().enumerate() {
            for t in tables {
                let FilterState::Valid(f) = t.filter() else {
                    continue;
                };
                let in_arena = matches!(f.block(), FilterBytes::Huge(_));
                assert_eq!(
                    in_arena,
                    level >= 2,
                    "{when}: table {} in level {level}",
                    t.id()
                );
                if in_arena {
                    huge += 1;
                } else {
                    heap += 1;
                }
            }
        }
        assert!(
            heap >= 1 && huge >= 1,
            "{when}: {heap} on the heap, {huge} in the arena"
        );
    };
    check(&db, "written");
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    check(&db, "reopened");
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
}
