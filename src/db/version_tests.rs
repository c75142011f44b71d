//! Tests of `version.rs`: the level searches against the plain one, and passing over tables
//! that expired whole.

use super::*;
use crate::coding::key_prefix;
use crate::filter::{hash_key, FilterKind, FilterPolicy};
use crate::table::{TableBuilder, TableBuilderOptions};

/// Table `id` at `dir` holding keys `lo..=hi` (`k` and 8 digits), with a filter of `kind`
/// or none.
fn table(dir: &std::path::Path, id: u64, lo: u32, hi: u32, kind: Option<FilterKind>) -> Arc<Table> {
    let path = dir.join(format!("{id}.sst"));
    let opts = TableBuilderOptions {
        filter: kind.map(|k| FilterPolicy::bits_per_key(k, 10.0)),
        ..TableBuilderOptions::default()
    };
    let mut b = TableBuilder::create(&path, opts).unwrap();
    for k in lo..=hi {
        b.add(format!("k{k:08}").as_bytes(), Some(b"v")).unwrap();
    }
    b.finish().unwrap();
    Arc::new(Table::open(&path, id).unwrap())
}

/// The hints follow every edit (one per table, `Some` where the table has a filter), and
/// the prefetching search finds what the plain one finds, on levels mixing filter kinds
/// and a table without a filter, for keys inside, between, before and after the tables.
#[test]
fn prefetching_search_agrees_with_the_plain_one_and_hints_follow_edits() {
    let dir = tempfile::tempdir().unwrap();
    let kinds = [
        Some(FilterKind::Blocked),
        Some(FilterKind::Ribbon),
        None,
        Some(FilterKind::Standard),
    ];
    let mut v = Version::empty();
    v.edit(|levels| {
        for (i, kind) in kinds.iter().enumerate() {
            let lo = i as u32 * 1_000;
            levels[1].push(table(dir.path(), i as u64, lo, lo + 499, *kind));
        }
        levels[2].push(table(dir.path(), 10, 0, 3_999, Some(FilterKind::Ribbon)));
    });
    let with_filter: Vec<bool> = v.search().hints(1).iter().map(Option::is_some).collect();
    assert_eq!(with_filter, [true, true, false, true]);
    assert_eq!(v.search().hints(2).len(), 1);
    for k in (0..4_200u32).step_by(7).chain([u32::MAX]) {
        let key = format!("k{k:08}");
        let hash = crate::filter::hash_key(key.as_bytes());
        for level in 1..=2 {
            let plain = v.in_level(level, key.as_bytes()).map(|t| t.id());
            let prefetched = found(v.search().in_level_live(level, key.as_bytes(), hash, 0));
            assert_eq!(prefetched, plain, "{key} level {level}");
        }
    }
    // The batch search (`multi_get`'s): all keys' positions at once, then `in_level_live_from`.
    // The keys are 9 bytes, so groups of ten share their 8-byte prefix with each other and
    // with a table's largest key: the tie walk after the search is exercised.
    let keys: Vec<String> = (0..4_200u32)
        .step_by(3)
        .chain([u32::MAX])
        .map(|k| format!("k{k:08}"))
        .collect();
    let prefixes: Vec<u64> = keys.iter().map(|k| key_prefix(k.as_bytes())).collect();
    for level in 1..=2 {
        let mut positions = vec![0; keys.len()];
        v.search()
            .positions_in_level(level, &prefixes, &mut positions);
        for (key, &position) in keys.iter().zip(&positions) {
            let plain = v.in_level(level, key.as_bytes()).map(|t| t.id());
            let (k, p) = (key.as_bytes(), key_prefix(key.as_bytes()));
            let batched =
                found(
                    v.search()
                        .in_level_live_from(level, position, p, k, hash_key(k), 0),
                );
            assert_eq!(batched, plain, "{key} level {level}, batched");
        }
    }
    v.edit(|levels| levels[1].remove(0));
    assert_eq!(v.search().hints(1).len(), 3);
    assert_eq!(found(v.search().in_level_live(1, b"k00000100", 0, 0)), None);
}

/// The id of the table a search found, `None` for none (no table passed over).
fn found(x: InLevel<'_>) -> Option<u64> {
    match x {
        InLevel::Table { table, .. } => Some(table.id()),
        InLevel::None => None,
        InLevel::Passed => panic!("passed over a table"),
    }
}

/// Table `id` at `dir` holding keys `lo..=hi`, each expiring at `at` (ms).
fn expiring(dir: &std::path::Path, id: u64, lo: u32, hi: u32, at: u64) -> Arc<Table> {
    let path = dir.join(format!("{id}.sst"));
    let mut b = TableBuilder::create(&path, TableBuilderOptions::default()).unwrap();
    for k in lo..=hi {
        let key = format!("k{k:08}");
        b.add_with_expiry(key.as_bytes(), Some(b"v"), Some(at))
            .unwrap();
    }
    b.finish().unwrap();
    Arc::new(Table::open(&path, id).unwrap())
}

/// A search passes over a table only once it has expired whole by the lookup's time and
/// only if it shadows nothing; one that hides an older table's keys is found (and marked
/// expired), so that its expired entries still hide them.
#[test]
fn searches_pass_over_only_expired_tables_that_shadow_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let at = 1_700_000_000_000;
    let mut v = Version::empty();
    v.edit(|levels| {
        // Level 1: keys 0..=99 shadow level 2's 50..=149; 200..=299 shadow nothing.
        levels[1].push(expiring(dir.path(), 1, 0, 99, at));
        levels[1].push(expiring(dir.path(), 2, 200, 299, at));
        levels[2].push(table(dir.path(), 3, 50, 149, None));
    });
    let look = |key: &str, seen: u64| {
        let k = key.as_bytes();
        match v.search().in_level_live(1, k, hash_key(k), seen) {
            InLevel::Table { table, expired } => format!("{} {expired}", table.id()),
            InLevel::Passed => "passed".to_string(),
            InLevel::None => "none".to_string(),
        }
    };
    // Before the expiry (or with `seen` 0): both found, neither expired.
    for seen in [0, at - 1] {
        assert_eq!(look("k00000010", seen), "1 false");
        assert_eq!(look("k00000250", seen), "2 false");
    }
    assert_eq!(look("k00000010", at), "1 true");
    assert_eq!(look("k00000250", at), "passed");
    // A key between the two tables meets table 2 as its candidate: passed over too, and
    // deeper levels are still searched (the caller goes on).
    assert_eq!(look("k00000120", at), "passed");
    assert_eq!(v.search().soonest_whole_expiry(), at);
    // Without expiring tables nothing is built and nothing passes.
    v.edit(|levels| levels[1].clear());
    assert_eq!(v.search().soonest_whole_expiry(), crate::expiry::NEVER);
    assert!(v.whole_by.iter().all(Vec::is_empty));
    assert!(v.search().keeps_no_expiry());
}

/// A pruned version's search leaves out the tables passable by its time, and only those:
/// a table that expires later, one that shadows an older table and every table of the
/// scans' view stay. Edits keep the prune; pruning again at the same time finds nothing.
#[test]
fn a_pruned_search_leaves_out_only_the_tables_passable_by_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let at = 1_700_000_000_000;
    let mut v = Version::empty();
    v.edit(|levels| {
        levels[1].push(expiring(dir.path(), 1, 0, 99, at)); // shadows table 4
        levels[1].push(expiring(dir.path(), 2, 200, 299, at)); // passable from `at`
        levels[1].push(expiring(dir.path(), 3, 400, 499, at + 10)); // passable later
        levels[2].push(table(dir.path(), 4, 50, 149, None));
    });
    assert!(
        v.pruned(at - 1).is_none(),
        "nothing is passable before `at`"
    );
    let ids = |v: &Version, level: usize| -> Vec<u64> {
        v.search().level(level).iter().map(|t| t.id()).collect()
    };
    let mut p = v.pruned(at).expect("table 2 is passable at `at`");
    assert_eq!(ids(&p, 1), [1, 3]);
    assert_eq!(ids(&p, 2), [4]);
    assert_eq!(p.levels()[1].len(), 3, "the version still holds table 2");
    assert!(p.pruned(at).is_none());
    // Keys of table 2's range now find no table (absent, as with table 2 dropped); the
    // others search as before, table 3 passed over once it has expired too.
    let look = |v: &Version, k: &str, seen: u64| match v.search().in_level_live(
        1,
        k.as_bytes(),
        hash_key(k.as_bytes()),
        seen,
    ) {
        InLevel::Table { table, .. } => format!("{}", table.id()),
        InLevel::Passed => "passed".to_string(),
        InLevel::None => "none".to_string(),
    };
    assert_eq!(look(&p, "k00000250", at), "none");
    assert_eq!(look(&v, "k00000250", at), "passed");
    assert_eq!(look(&p, "k00000050", at), "1");
    assert_eq!(look(&p, "k00000450", at), "3");
    assert_eq!(look(&p, "k00000450", at + 10), "passed");
    // An edit keeps the prune's time: a new table passable by then is left out at once.
    p.edit(|levels| levels[1].push(expiring(dir.path(), 5, 600, 699, at - 5)));
    assert_eq!(ids(&p, 1), [1, 3]);
    assert_eq!(p.levels()[1].len(), 4);
    let later = p.pruned(at + 10).expect("table 3 is passable later");
    assert_eq!(ids(&later, 1), [1]);
}
