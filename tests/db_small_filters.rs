//! Small filters in a store keep their rate: prefix filters over the three or four tenants a
//! table holds, for every filter kind at a fixed 10 bits/key and under the filter budget. An
//! absent tenant's prefix scan passes at most 2% of the prefix filters it asks.

use lsm_bloom::{
    Db, FilterBudget, FilterKind, FilterPolicy, Filters, Options, PrefixExtractor, PrefixFilters,
};

const TENANTS: u32 = 40;
const PER_TENANT: u32 = 2500;

/// 40 tenants of 2,500 keys (`t017:000123`, ~30 bytes an entry), compacted into one level of
/// tables of 256 KiB: three or four tenants a table.
fn store(dir: &std::path::Path, filters: Filters) -> Db {
    let opts = Options::default()
        .with_prefix_filters(Some(PrefixFilters::with(PrefixExtractor::delimiter(
            b':', 1,
        ))))
        .with_filters(Some(filters))
        .with_memtable_size(256 * 1024)
        .with_target_file_size(256 * 1024)
        .with_block_cache_bytes(0);
    let db = Db::open(dir, opts).unwrap();
    for t in 0..TENANTS {
        for i in 0..PER_TENANT {
            db.put(format!("t{t:03}:{i:06}"), format!("v{i:010}"))
                .unwrap();
        }
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    db.compact().unwrap();
    db
}

fn check(filters: Filters) {
    let dir = tempfile::tempdir().unwrap();
    let db = store(dir.path(), filters.clone());
    let s0 = db.stats();
    let tables = s0.total.tables;
    let prefixes_per_table = s0.total.prefix_filter_keys as f64 / tables as f64;
    assert!(
        (2.0..=6.0).contains(&prefixes_per_table),
        "{filters:?}: {prefixes_per_table:.1} prefixes a table over {tables} tables"
    );
    // Absent tenants between present ones ("t017a3:" sorts between t017 and t018), so each
    // lies inside some table's range and its prefix filter decides.
    for t in 0..TENANTS {
        for j in 0..60 {
            let prefix = format!("t{t:03}{}{}:", (b'a' + (j % 26) as u8) as char, j / 26);
            assert!(
                db.scan_prefix(&prefix).unwrap().next().is_none(),
                "{prefix}"
            );
        }
    }
    let s = db.stats();
    let checks = s.total.prefix_checks - s0.total.prefix_checks;
    let passed = checks - (s.total.prefix_useful - s0.total.prefix_useful);
    assert!(checks >= 2000, "{filters:?}: {checks} prefix checks");
    assert!(
        passed as f64 <= 0.02 * checks as f64,
        "{filters:?}: {passed} of {checks} absent-prefix checks passed the filter"
    );
    // Present tenants are all found.
    for t in (0..TENANTS).step_by(7) {
        assert_eq!(
            db.scan_prefix(format!("t{t:03}:")).unwrap().count(),
            PER_TENANT as usize
        );
    }
}

fn fixed(kind: FilterKind) -> Filters {
    Filters::fixed(FilterPolicy::bits_per_key(kind, 10.0))
}

#[test]
fn standard_prefix_filters_of_a_few_tenants_keep_their_rate() {
    check(fixed(FilterKind::Standard));
}

#[test]
fn blocked_prefix_filters_of_a_few_tenants_keep_their_rate() {
    check(fixed(FilterKind::Blocked));
}

#[test]
fn ribbon_prefix_filters_of_a_few_tenants_keep_their_rate() {
    check(fixed(FilterKind::Ribbon));
}

#[test]
fn budgeted_prefix_filters_of_a_few_tenants_keep_their_rate() {
    // The default kinds (blocked Bloom above the largest level, Ribbon on it).
    check(Filters::Budget(FilterBudget::bits_per_key(10.5)));
    // Ribbon everywhere.
    check(Filters::Budget(
        FilterBudget::bits_per_key(10.0).with_upper_kind(FilterKind::Ribbon),
    ));
}
