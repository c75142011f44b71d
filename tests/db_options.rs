//! The options record (`OPTIONS`, FORMAT.md §6): a store reopened without its filter and
//! prefix settings keeps writing tables with them; reopened with other ones, it applies and
//! reports them; a damaged record refuses the open and changes nothing; `dump_filter` plans a
//! recorded budget by itself.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{example, tiny_options};
use lsm_bloom::{
    Compression, Compressions, Db, Error, FilterBudget, FilterKind, FilterPolicy, Filters, Options,
    PrefixExtractor, PrefixFilters, RangeFilters, RangePolicy,
};

/// The options record version this build writes (FORMAT.md §6).
const OPTIONS_VERSION: u32 = 5;

fn fill(db: &Db, tag: &str, n: usize) {
    for i in 0..n {
        db.put(format!("{tag}:{i:05}"), "value").unwrap();
    }
    db.flush().unwrap();
}

/// One flushed table holding `n` keys under each of two prefixes, so its key range spans
/// every prefix between them.
fn fill_around(db: &Db, low: &str, high: &str, n: usize) {
    for i in 0..n {
        db.put(format!("{low}:{i:05}"), "value").unwrap();
        db.put(format!("{high}:{i:05}"), "value").unwrap();
    }
    db.flush().unwrap();
}

/// Every file in `dir` with its bytes (LOCK excluded: it is empty and held while open).
fn contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "LOCK")
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_budget_is_kept_when_the_store_is_reopened_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let budget = FilterBudget::bits_per_key(14.0).with_kind(FilterKind::Standard);
    let opts = tiny_options().with_filters(Some(Filters::Budget(budget)));
    let db = Db::open(dir.path(), opts).unwrap();
    assert!(!db.recovery().options.record_found);
    fill(&db, "a", 500);
    db.close().unwrap();

    // Reopened with no filter setting at all: the budget stays in force.
    let db = Db::open(dir.path(), tiny_options()).unwrap();
    let r = &db.recovery().options;
    assert!(r.record_found && r.changed.is_empty(), "{r:?}");
    assert_eq!(r.kept.len(), 1, "{r:?}");
    assert_eq!(r.kept[0].0, "filter");
    assert!(r.kept[0].1.contains("budget of 14 bits/key"), "{r:?}");
    fill(&db, "b", 500);
    assert!(
        db.stats().filter_budget.is_some(),
        "the recorded budget plans the filters"
    );
    db.close().unwrap();
    // Every table, those written after the reopen too, has the budget's kind (standard), not
    // the default policy's (blocked).
    let kinds: Vec<FilterKind> = match lsm_bloom::inspect::inspect_path(dir.path()).unwrap() {
        lsm_bloom::inspect::Report::Database(d) => d
            .levels
            .iter()
            .flatten()
            .filter_map(|t| t.filter.as_ref().map(|f| f.info.kind))
            .collect(),
        _ => panic!("not read as a database"),
    };
    assert!(kinds.len() >= 2, "{kinds:?}");
    assert!(
        kinds.iter().all(|k| *k == FilterKind::Standard),
        "{kinds:?}"
    );
}

#[test]
fn a_prefix_rule_is_kept_and_a_new_one_applies_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let colon = PrefixExtractor::delimiter(b':', 1);
    let db = Db::open(
        dir.path(),
        Options::default().with_prefix_filters(Some(PrefixFilters::with(colon))),
    )
    .unwrap();
    fill_around(&db, "a", "user", 50);
    db.close().unwrap();

    // Without the rule: tables flushed now still get prefix filters under it, so a prefix
    // scan skips them by their filter (none read unfiltered). The filters are the default
    // budget, which plans the prefix filters too; being the default, it is not listed.
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let kept = &db.recovery().options.kept;
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].0, "prefix");
    assert!(kept[0].1.contains("prefix filters"), "{kept:?}");
    fill_around(&db, "b", "y", 50);
    fill_around(&db, "c", "x", 50);
    // Every table's key range holds "m:": only the prefix filters can skip them.
    let n = db.scan_prefix("m:").unwrap().count();
    assert_eq!(n, 0);
    let s = db.stats();
    assert_eq!(
        s.total.prefix_unfiltered, 0,
        "a table without the recorded rule"
    );
    assert!(s.total.prefix_useful >= 3, "{}", s.total.prefix_useful);
    db.close().unwrap();

    // A different rule: applied, reported as a change, and the next tables follow it.
    let db = Db::open(
        dir.path(),
        Options::default()
            .with_prefix_filters(Some(PrefixFilters::with(PrefixExtractor::fixed(2)))),
    )
    .unwrap();
    let r = &db.recovery().options;
    assert_eq!(r.changed.len(), 1, "{r:?}");
    assert_eq!(r.changed[0].setting, "prefix");
    assert!(r.changed[0].was.contains("occurrence 1 of \":\""), "{r:?}");
    assert!(r.changed[0].now.contains("first 2 bytes"), "{r:?}");
    db.close().unwrap();
    // Reopened plain again, the new rule is the one kept.
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let kept = &db.recovery().options.kept;
    assert!(kept[0].1.contains("first 2 bytes"), "{kept:?}");
    db.close().unwrap();

    // Back to no prefix filters on purpose.
    let db = Db::open(
        dir.path(),
        Options::default().with_prefix_filters(Some(PrefixFilters::None)),
    )
    .unwrap();
    let changed = &db.recovery().options.changed;
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0].now, "no prefix filters");
    db.close().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let r = &db.recovery().options;
    assert!(r.kept.is_empty() && r.changed.is_empty(), "{r:?}");
    // Every key written under every rule is still there.
    assert_eq!(db.scan_prefix("user:").unwrap().count(), 50);
    assert_eq!(db.scan::<&[u8], _>(..).unwrap().count(), 300);
}

#[test]
fn a_damaged_record_refuses_the_open_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        tiny_options().with_filters(Some(Filters::fixed(FilterPolicy::bits_per_key(
            FilterKind::Ribbon,
            8.0,
        )))),
    )
    .unwrap();
    fill(&db, "k", 300);
    db.put("only-in-the-log", "v").unwrap();
    drop(db);
    let path = dir.path().join("OPTIONS");
    let good = std::fs::read(&path).unwrap();
    for at in [0, 5, 13, good.len() / 2 + 8, good.len() - 1] {
        let mut bad = good.clone();
        bad[at] ^= 0x04;
        std::fs::write(&path, &bad).unwrap();
        let before = contents(dir.path());
        let e = match Db::open(dir.path(), tiny_options()) {
            Err(e) => e,
            Ok(_) => panic!("a record flipped at byte {at} was accepted"),
        };
        assert!(
            matches!(
                e,
                Error::Corruption { .. } | Error::UnsupportedVersion { .. }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("OPTIONS"), "{e}");
        assert_eq!(
            contents(dir.path()),
            before,
            "open changed files after refusing"
        );
    }
    std::fs::write(&path, &good[..good.len() - 3]).unwrap();
    assert!(Db::open(dir.path(), tiny_options()).is_err());
    // Restored, the store opens with everything, the logged write included.
    std::fs::write(&path, &good).unwrap();
    let db = Db::open(dir.path(), tiny_options()).unwrap();
    assert_eq!(db.get("only-in-the-log").unwrap(), Some(b"v".to_vec()));
    assert_eq!(db.scan::<&[u8], _>(..).unwrap().count(), 301);
}

#[test]
fn a_store_without_a_record_opens_as_before_and_gets_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny_options()).unwrap();
    fill(&db, "k", 200);
    db.close().unwrap();
    // As a store written by a build from before records.
    std::fs::remove_file(dir.path().join("OPTIONS")).unwrap();
    let opts =
        tiny_options().with_prefix_filters(Some(PrefixFilters::with(PrefixExtractor::fixed(1))));
    let db = Db::open(dir.path(), opts).unwrap();
    let r = &db.recovery().options;
    assert!(!r.record_found && r.kept.is_empty() && r.changed.is_empty());
    assert_eq!(db.scan::<&[u8], _>(..).unwrap().count(), 200);
    db.close().unwrap();
    let db = Db::open(dir.path(), tiny_options()).unwrap();
    let kept = &db.recovery().options.kept;
    let prefix = kept.iter().find(|(setting, _)| setting == "prefix");
    assert!(
        prefix.is_some_and(|(_, was)| was.contains("first 1 bytes")),
        "{kept:?}"
    );
}

#[test]
fn dump_filter_plans_the_recorded_budget_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        tiny_options().with_filters(Some(Filters::Budget(FilterBudget::bits_per_key(9.0)))),
    )
    .unwrap();
    fill(&db, "k", 2000);
    db.close().unwrap();
    let out = std::process::Command::new(example("dump_filter"))
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("recorded options: a filter budget of 9 bits/key"),
        "{text}"
    );
    assert!(text.contains("budget from the options record"), "{text}");
    let json = std::process::Command::new(example("dump_filter"))
        .arg(dir.path())
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["budget_from"], "record");
    assert!(v["filter_budget"].is_object(), "{v}");
}

/// The frozen records of `fixtures/options-v<version>/`, and the settings each was written
/// with (spelled out where a default has changed since: the fixed filter policy was the
/// default before the filter budget).
fn fixture_options(version: u32) -> Vec<(&'static str, Options)> {
    if version == 5 {
        // Version 5 is written only for keyspaces' own settings (a record without any is
        // written as version 4), which need a store whose manifest lists the keyspaces: its
        // golden file is `fixtures/store-v2-own-settings/OPTIONS` (tests/store_format.rs).
        return Vec::new();
    }
    if version == 4 {
        let budgeted = Options::default()
            .with_filters(Some(Filters::Budget(FilterBudget::bits_per_key(26.0))))
            .with_range_filters(Some(RangeFilters::InBudget { max_range: 32 }));
        let fixed = Options::default().with_range_filters(Some(RangeFilters::On(
            RangePolicy::bits_per_key(12.0, 64).unwrap(),
        )));
        return vec![
            ("range-in-budget-32", budgeted),
            ("range-fixed-12-64", fixed),
        ];
    }
    if version == 3 {
        let range = Options::default()
            .with_range_filters(Some(RangeFilters::On(
                RangePolicy::bits_per_key(16.0, 32).unwrap(),
            )))
            .with_prefix_filters(Some(PrefixFilters::with(PrefixExtractor::fixed(4))));
        return vec![("range-16-32", range)];
    }
    if version == 2 {
        let lz4 = Options::default()
            .with_compression(Some(
                Compressions::from(Compression::Lz4)
                    .with_level(0, Compression::None)
                    .with_level(1, Compression::None),
            ))
            .with_prefix_filters(Some(PrefixFilters::with(PrefixExtractor::fixed(4))))
            .with_filters(Some(Filters::fixed(FilterPolicy::default())));
        return vec![("lz4-below-level-1", lz4)];
    }
    let per_level = Options::default()
        .with_filters(Some(
            Filters::fixed(FilterPolicy::bits_per_key(FilterKind::Blocked, 12.0))
                .without_on(0)
                .with_level(3, Some(FilterPolicy::target_fpr(FilterKind::Ribbon, 0.005))),
        ))
        .with_prefix_filters(Some(PrefixFilters::On {
            rule: PrefixExtractor::delimiter(b':', 2),
            whole_key_filters: false,
        }));
    vec![
        (
            "budget",
            Options::default()
                .with_filters(Some(Filters::Budget(FilterBudget::total_bytes(1 << 20))))
                .with_memtable_size(1 << 20),
        ),
        ("per-level-and-prefix", per_level),
    ]
}

fn fixture_path(version: u32, name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("fixtures/options-v{version}/{name}.OPTIONS"))
}

/// Writes the fixtures of the current version that are missing (never overwrites one).
#[test]
#[ignore = "writes the frozen fixtures; run by hand once per version"]
fn write_options_fixtures() {
    for (name, opts) in fixture_options(OPTIONS_VERSION) {
        let path = fixture_path(OPTIONS_VERSION, name);
        if path.exists() {
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        Db::open(dir.path(), opts).unwrap().close().unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::copy(dir.path().join("OPTIONS"), path).unwrap();
    }
}

/// A store whose directory holds only a frozen record (of any version) opens with the
/// record's settings; a version 1 record reads as no compression.
#[test]
fn frozen_records_still_open_with_their_settings() {
    for (version, name, written) in (1..=OPTIONS_VERSION)
        .flat_map(|v| fixture_options(v).into_iter().map(move |(n, o)| (v, n, o)))
    {
        let fixture_path = |name| fixture_path(version, name);
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(fixture_path(name), dir.path().join("OPTIONS")).unwrap();
        let db = Db::open(dir.path(), Options::default()).unwrap();
        let r = &db.recovery().options;
        assert!(r.record_found && r.changed.is_empty(), "{name}: {r:?}");
        db.close().unwrap();
        // Reopened with the settings the fixture was written with, nothing changes: the
        // record decoded to exactly them.
        let db = Db::open(dir.path(), written).unwrap();
        let r = &db.recovery().options;
        assert!(r.kept.is_empty() && r.changed.is_empty(), "{name}: {r:?}");
        db.close().unwrap();
        // The record in the directory is the fixture byte for byte (a record that holds the
        // settings opened with is not rewritten), or, where the open recorded a different
        // memtable size, a record of version 4 holding the same settings (the version this
        // build writes for a record without keyspaces' settings, FORMAT.md §6).
        let now = std::fs::read(dir.path().join("OPTIONS")).unwrap();
        if now != std::fs::read(fixture_path(name)).unwrap() {
            assert!(version < 4, "{name}");
            assert_eq!(now[4..8], 4u32.to_le_bytes(), "{name}");
        }
        let db = Db::open(dir.path(), Options::default()).unwrap();
        assert!(db.recovery().options.changed.is_empty(), "{name}");
        db.close().unwrap();
    }
}
