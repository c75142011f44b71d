//! The `dump_filter` example as a user runs it: exit 0 and a report for valid files, exit 1 and
//! one `error: ...` line on stderr for damaged ones.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn dump_filter() -> PathBuf {
    common::example("dump_filter")
}

fn run(args: &[&Path]) -> Output {
    Command::new(dump_filter()).args(args).output().unwrap()
}

/// The files of `fixtures/<dir>` ending in `.<ext>`, sorted; at least 5.
fn fixture_files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    assert!(v.len() >= 5);
    v
}

/// What `dump_filter PATH` prints, which must succeed.
fn report_text(path: &Path) -> String {
    let out = run(&[path]);
    assert!(
        out.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every one of `fields` appears in `text`, the report of `path`.
fn assert_fields(text: &str, fields: &[&str], path: &Path) {
    for field in fields {
        assert!(
            text.contains(field),
            "{}: no {field:?} in\n{text}",
            path.display()
        );
    }
}

fn fixture_filters() -> Vec<PathBuf> {
    fixture_files("filter-v1", "filter")
}

#[test]
fn dumps_every_fixture_as_text_and_json() {
    for path in fixture_filters() {
        let text = report_text(&path);
        assert_fields(
            &text,
            &[
                "format version",
                "kind",
                "k (probes)",
                "m (bits)",
                "n (keys)",
                "bits/key",
                "fill ratio",
                "expected FPR",
                "FPR from fill",
                "checksum        ok",
            ],
            &path,
        );
        let out = run(&[&path, Path::new("--json")]);
        assert!(out.status.success());
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let expected: serde_json::Value =
            serde_json::from_slice(&std::fs::read(path.with_extension("json")).unwrap()).unwrap();
        assert_eq!(json, expected, "{}", path.display());
    }
}

#[test]
fn damaged_copies_exit_1_with_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    for path in fixture_filters() {
        let block = std::fs::read(&path).unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        let mut flipped = block.clone();
        flipped[block.len() / 2] ^= 0x10;
        let mut v99 = block.clone();
        v99[4] = 99;
        for (what, bytes, expect) in [
            ("flipped", flipped, "checksum mismatch"),
            ("truncated", block[..block.len() - 1].to_vec(), ""),
            ("version99", v99, "unsupported filter format version 99"),
            ("empty", Vec::new(), "too short"),
        ] {
            let p = dir.path().join(format!("{what}-{name}"));
            std::fs::write(&p, bytes).unwrap();
            let out = run(&[&p]);
            assert_eq!(out.status.code(), Some(1), "{what} {name}");
            let err = String::from_utf8(out.stderr).unwrap();
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.starts_with("error: "), "{err}");
            assert!(err.contains(expect), "{what} {name}: {err}");
            assert!(out.stdout.is_empty());
        }
    }
    let out = run(&[&dir.path().join("no-such-file")]);
    assert_eq!(out.status.code(), Some(1));
}

fn small_db(dir: &Path) {
    let opts = lsm_bloom::Options::default().with_memtable_size(64 * 1024);
    let db = lsm_bloom::Db::open(dir, opts).unwrap();
    for i in 0..20_000u32 {
        db.put(format!("key{i:08}"), b"value").unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
}

fn ssts(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .collect();
    v.sort();
    v
}

#[test]
fn dumps_tables_and_database_directories() {
    let dir = tempfile::tempdir().unwrap();
    small_db(dir.path());
    let out = run(&[dir.path(), Path::new("--json")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["type"], "database");
    assert_eq!(json["totals"]["entries"], 20_000);
    assert_eq!(
        json["totals"]["tables"].as_u64().unwrap() as usize,
        ssts(dir.path()).len()
    );
    assert_eq!(json["totals"]["invalid_filters"], 0);
    let expected = json["totals"]["expected_fpr_sum"].as_f64().unwrap();
    let observed = json["totals"]["observed_fpr_sum"].as_f64().unwrap();
    assert!(
        expected > 0.0 && (observed - expected).abs() < 0.5 * expected,
        "{observed} vs {expected}"
    );
    // Under the default filter budget: blocked Bloom above the largest level, Ribbon on it.
    let levels: Vec<Vec<serde_json::Value>> = (json["levels"].as_array().unwrap().iter())
        .map(|l| l.as_array().unwrap().clone())
        .collect();
    let entries = |l: &Vec<serde_json::Value>| -> u64 {
        let n = l
            .iter()
            .map(|t| t["properties"]["entries"].as_u64().unwrap());
        n.sum()
    };
    let largest = (0..levels.len())
        .max_by_key(|&i| entries(&levels[i]))
        .unwrap();
    assert!(largest > 0, "{levels:?}");
    for (i, level) in levels.iter().enumerate() {
        for t in level {
            let want = if i >= largest { "ribbon" } else { "blocked" };
            assert_eq!(t["filter"]["kind"], want, "level {i} of {levels:?}");
        }
    }
    let text = String::from_utf8(run(&[dir.path()]).stdout).unwrap();
    assert!(
        text.contains("total:") && text.contains("filter memory"),
        "{text}"
    );

    let sst = &ssts(dir.path())[0];
    let out = run(&[sst, Path::new("--json")]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["type"], "table");
    assert_eq!(json["filter_status"], "valid");
    assert!(json["properties"]["entries"].as_u64().unwrap() > 0);
    // The same kind as the database's listing gives that table.
    let name = sst.file_name().unwrap().to_str().unwrap();
    let listed = levels
        .iter()
        .flatten()
        .find(|t| t["file"].as_str().is_some_and(|f| f.ends_with(name)));
    assert_eq!(json["filter"]["kind"], listed.unwrap()["filter"]["kind"]);
}

#[test]
fn damaged_filter_inside_a_database_is_reported_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    small_db(dir.path());
    let sst = ssts(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&sst).unwrap();
    let footer = bytes.len() - 64;
    let off = u64::from_le_bytes(bytes[footer + 16..footer + 24].try_into().unwrap()) as usize;
    bytes[off + 60] ^= 0xFF;
    std::fs::write(&sst, &bytes).unwrap();
    for target in [dir.path(), sst.as_path()] {
        let out = run(&[target]);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("error: ") && err.contains("checksum mismatch"),
            "{err}"
        );
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains("INVALID"),
            "the report still shows the table: {text}"
        );
    }
}

#[test]
fn database_written_under_a_budget_shows_kinds_and_the_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let opts = lsm_bloom::Options::default()
        .with_memtable_size(64 * 1024)
        .with_target_file_size(64 * 1024)
        .with_level1_max_bytes(256 * 1024)
        .with_filters(Some(lsm_bloom::Filters::Budget(
            lsm_bloom::FilterBudget::bits_per_key(8.0),
        )));
    let db = lsm_bloom::Db::open(dir.path(), opts).unwrap();
    for i in 0..40_000u64 {
        db.put(
            format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
            b"value-value-value",
        )
        .unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let stats = db.stats();
    db.close().unwrap();

    let args = [
        dir.path(),
        Path::new("--json"),
        Path::new("--budget-bits-per-key"),
        Path::new("8"),
        Path::new("--memtable-bytes"),
        Path::new("65536"),
    ];
    let out = run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The tool's allocation for the shape on disk is the one the store reported.
    // (Both through JSON text, as the tool's output is: parsing may round the last bit.)
    let want: serde_json::Value = serde_json::from_str(
        &serde_json::to_string(stats.filter_budget.as_ref().unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(json["filter_budget"], want);
    let kinds: Vec<String> = json["level_totals"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["kinds"].as_array().unwrap().iter().map(|k| k.to_string()))
        .collect();
    // The largest level and any below it are Ribbon.
    assert!(kinds.iter().any(|k| k.contains("ribbon")), "{kinds:?}");

    let text = String::from_utf8(
        run(&args[..1]
            .iter()
            .chain(&args[2..])
            .copied()
            .collect::<Vec<_>>())
        .stdout,
    )
    .unwrap();
    assert!(
        text.contains("filter budget") && text.contains("bits/key allocated"),
        "{text}"
    );
    assert!(
        text.contains("blocked+ribbon") || text.contains("ribbon"),
        "{text}"
    );
}

/// A store under a prefix rule: the dump shows each table's prefix filter and the prefix
/// counts per level, in text and JSON, and they agree with `Db::stats()`.
#[test]
fn database_with_prefix_filters_shows_prefix_counts() {
    let dir = tempfile::tempdir().unwrap();
    common::colon_prefix_store(dir.path(), 2, |t| {
        let keys = (0..300).flat_map(|p| (0..3).map(move |s| format!("p{p:04}:{t}{s}")));
        keys.collect()
    });
    let stats = lsm_bloom::Db::open(dir.path(), Default::default())
        .unwrap()
        .stats();
    assert_eq!(stats.total.prefix_filter_keys, 600);
    let text = report_text(dir.path());
    assert!(
        text.contains("prefix filter (rule delimiter:3a:1, 300 distinct prefixes)"),
        "{text}"
    );
    assert!(
        text.contains("prefix filters: 2 tables under delimiter:3a:1, 600 prefixes"),
        "{text}"
    );
    let out = run(&[dir.path(), Path::new("--json")]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["totals"]["prefixes"], 600);
    assert_eq!(
        json["totals"]["prefix_filter_bytes"],
        stats.total.prefix_filter_bytes
    );
    let t = &json["levels"][0][0];
    assert_eq!(t["format_version"], lsm_bloom::table::TABLE_VERSION);
    assert_eq!(t["properties"]["compression"], "none");
    assert_eq!(t["prefix_filter_status"], "valid");
    assert_eq!(t["prefix_filter"]["n"], 300);
    assert_eq!(t["properties"]["prefix_extractor"], "delimiter:3a:1");
}

fn range_fixtures() -> Vec<PathBuf> {
    fixture_files("range-filter-v1", "rangefilter")
}

/// Range-filter blocks print as text and JSON with what the reader says of them; damaged
/// copies exit 1 with one line naming what is wrong.
#[test]
fn dumps_range_filter_blocks_and_refuses_damaged_ones() {
    let dir = tempfile::tempdir().unwrap();
    for path in range_fixtures() {
        let block = std::fs::read(&path).unwrap();
        let reader = lsm_bloom::filter::RangeFilterReader::new(&block).unwrap();
        let text = report_text(&path);
        assert_fields(
            &text,
            &[
                "range filter block",
                "kind            grafite",
                &format!("n (keys)        {}", reader.keys()),
                &format!("longest range   {} points", reader.max_range()),
                "common prefix",
                "expected FPR",
                "checksum        ok",
            ],
            &path,
        );
        let out = run(&[&path, Path::new("--json")]);
        assert!(out.status.success());
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["type"], "range_filter");
        assert_eq!(json["n"], reader.keys());
        assert_eq!(json["values"], reader.values());
        assert_eq!(json["max_range"], reader.max_range());
        assert_eq!(json["crc32"], reader.crc32());

        let name = path.file_name().unwrap().to_str().unwrap();
        let mut flipped = block.clone();
        flipped[block.len() / 2] ^= 0x10;
        let mut v99 = block.clone();
        v99[4] = 99;
        for (what, bytes, expect) in [
            ("flipped", flipped, "range filter block checksum mismatch"),
            (
                "version99",
                v99,
                "unsupported range filter format version 99",
            ),
            (
                "truncated",
                block[..30].to_vec(),
                "range filter block too short",
            ),
        ] {
            let p = dir.path().join(format!("{what}-{name}"));
            std::fs::write(&p, bytes).unwrap();
            let out = run(&[&p]);
            assert_eq!(out.status.code(), Some(1), "{what} {name}");
            let err = String::from_utf8(out.stderr).unwrap();
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.starts_with("error: ") && err.contains(expect),
                "{what} {name}: {err}"
            );
            assert!(out.stdout.is_empty());
        }
    }
}

/// A format 4 table shows its range filter (policy, keys, expected rates) as text and JSON;
/// a copy whose range-filter block is damaged still prints, marks it INVALID, and exits 1
/// with one line naming the range filter block.
#[test]
fn dumps_a_tables_range_filter_and_reports_a_damaged_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/table-v4/blocked-range12.sst");
    let text = report_text(&path);
    assert_fields(
        &text,
        &[
            "range filter (policy 12 bits/key, ranges up to 32 points)",
            "kind            grafite",
            "n (keys)        1500",
            "common prefix   \"user:\"",
        ],
        &path,
    );
    let out = run(&[&path, Path::new("--json")]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["range_filter_status"], "valid");
    assert_eq!(json["range_filter"]["n"], 1500);
    assert_eq!(json["properties"]["range_filter"]["max_range"], 32);

    let mut bytes = std::fs::read(&path).unwrap();
    let tail = &bytes[bytes.len() - lsm_bloom::table::FOOTER_LEN..];
    let footer = lsm_bloom::table::Footer::decode(tail, bytes.len() as u64).unwrap();
    bytes[(footer.range_filter.offset + footer.range_filter.size / 2) as usize] ^= 0x08;
    let dir = tempfile::tempdir().unwrap();
    let damaged = dir.path().join("000001.sst");
    std::fs::write(&damaged, &bytes).unwrap();
    let out = run(&[&damaged]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ")
            && err.contains("range filter block")
            && err.contains("checksum"),
        "{err}"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("range filter    INVALID"), "{text}");
}

/// A store with keyspaces: each keyspace's tables and totals, by name, as text and JSON.
#[test]
fn database_with_keyspaces_shows_each() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/store-v2");
    let text = report_text(&dir);
    assert_fields(
        &text,
        &[
            "keyspace \"users\" (id 1)",
            "keyspace \"sessions\" (id 2)",
            "300 entries",
        ],
        &dir,
    );
    let out = run(&[&dir, Path::new("--json")]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let spaces = json["keyspaces"].as_array().unwrap();
    let names: Vec<_> = spaces.iter().map(|k| k["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["users", "sessions"]);
    assert_eq!(spaces[0]["totals"]["entries"], 300);
}

/// A keyspace's own settings (options record version 5) are shown with it; one without says it
/// follows the store's.
#[test]
fn database_shows_keyspace_settings() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/store-v2-own-settings");
    let text = report_text(&dir);
    assert_fields(
        &text,
        &[
            "keyspace \"packed\" (id 1)",
            "own compression: compression lz4",
            "own block_size: 1024 bytes",
            "own prefix: prefix filters on the first 3 bytes",
            "keyspace \"plain\" (id 2)\n  settings: the store's",
        ],
        &dir,
    );
    let out = run(&[&dir, Path::new("--json")]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let spaces = json["keyspaces"].as_array().unwrap();
    let own = spaces[0]["own_settings"].as_array().unwrap();
    assert!(
        own.iter()
            .any(|s| s[0] == "compression" && s[1] == "compression lz4"),
        "{own:?}"
    );
    assert!(spaces[1].get("own_settings").is_none(), "{}", spaces[1]);
}

/// A store with keyspaces under a filter budget: `dump_filter DIR` shows each keyspace's part
/// and allocation, the same the store reports (`DbStats::keyspaces`, no lookups seen, as at
/// open); a keyspace with fixed filters of its own has none.
#[test]
fn database_with_keyspaces_shows_each_ones_part_of_the_budget() {
    use lsm_bloom::{FilterBudget, FilterPolicy, Filters, KeyspaceOptions};
    let dir = tempfile::tempdir().unwrap();
    let opts = lsm_bloom::Options::default()
        .with_memtable_size(64 * 1024)
        .with_target_file_size(64 * 1024)
        .with_level1_max_bytes(256 * 1024)
        .with_idle_compaction_after(None)
        .with_filters(Some(Filters::Budget(FilterBudget::bits_per_key(8.0))));
    let db = lsm_bloom::Db::open(dir.path(), opts).unwrap();
    let fixed =
        KeyspaceOptions::default().with_filters(Some(Filters::fixed(FilterPolicy::default())));
    let spaces = [
        db.keyspace("big").unwrap(),
        db.keyspace("small").unwrap(),
        db.create_keyspace("fixed", fixed).unwrap(),
    ];
    for (n, keys) in [
        (None, 20_000u64),
        (Some(0), 12_000),
        (Some(1), 3_000),
        (Some(2), 2_000),
    ] {
        for i in 0..keys {
            let k = format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            match n {
                None => db.put(k, b"value-value-value").unwrap(),
                Some(s) => spaces[s].put(k, b"value-value-value").unwrap(),
            }
        }
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let stats = db.stats();
    drop(spaces);
    db.close().unwrap();

    let out = run(&[dir.path(), Path::new("--json")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let as_json = |a: &Option<lsm_bloom::db::Allocation>| -> serde_json::Value {
        serde_json::from_str(&serde_json::to_string(a).unwrap()).unwrap()
    };
    assert_eq!(json["budget_from"], "record");
    assert_eq!(
        json["filter_budget"],
        as_json(&stats.keyspaces[0].filter_budget)
    );
    let listed = json["keyspaces"].as_array().unwrap();
    for k in &stats.keyspaces[1..] {
        let shown = listed
            .iter()
            .find(|j| j["name"] == k.name.as_str())
            .unwrap();
        let want = as_json(&k.filter_budget);
        assert_eq!(
            shown.get("filter_budget").cloned().unwrap_or_default(),
            want,
            "{}",
            k.name
        );
    }
    let part = |name: &str| {
        listed.iter().find(|j| j["name"] == name).unwrap()["filter_budget"]["budget_bytes"]
            .as_u64()
            .unwrap()
    };
    // The shares follow the keys: the big keyspace's part is the larger.
    assert!(
        part("big") > 2 * part("small"),
        "{} vs {}",
        part("big"),
        part("small")
    );
    assert!(stats.keyspaces[3].filter_budget.is_none());

    let text = String::from_utf8(run(&[dir.path()]).stdout).unwrap();
    assert!(text.contains("its part of the budget:"), "{text}");
    assert!(text.contains("the default keyspace's part"), "{text}");
}

/// A format 5 table shows how many of its puts expire and when; its JSON carries the same.
#[test]
fn dumps_a_tables_expiring_entries() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/table-v5/blocked-expiring.sst");
    let text = report_text(&path);
    assert_fields(
        &text,
        &["expiring ", " puts, expiries ", "table format 5"],
        &path,
    );
    let out = run(&[&path, Path::new("--json")]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let props = &json["properties"];
    assert!(props["expiring"].as_u64().unwrap() > 0, "{json}");
    assert_eq!(props["expiry_span"].as_array().unwrap().len(), 2, "{json}");
    let v4 = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/table-v4/blocked-range12.sst");
    assert!(!report_text(&v4).contains("expiring "));
}

/// A format 7 table shows its expiry quantiles, as text and as JSON; a format 6 table has none.
#[test]
fn dumps_a_tables_expiry_quantiles() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/table-v7/lz4-quantiles.sst");
    let text = report_text(&path);
    assert_fields(
        &text,
        &["expiry ranks    1/16 .. 15/16: ", "table format 7"],
        &path,
    );
    let out = run(&[&path, Path::new("--json")]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let q = json["properties"]["expiry_quantiles"].as_array().unwrap();
    assert_eq!(q.len(), 15, "{json}");
    let v6 = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/table-v6/lz4-deleting.sst");
    assert!(!report_text(&v6).contains("expiry ranks"));
}

/// A format 6 table lists its deleted ranges, as text and as JSON; a format 5 table has none.
#[test]
fn dumps_a_tables_deleted_ranges() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/table-v6/lz4-deleting.sst");
    let text = report_text(&path);
    assert_fields(
        &text,
        &["deleted ranges  6", " ..= ", "table format 6"],
        &path,
    );
    let out = run(&[&path, Path::new("--json")]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["properties"]["range_deletes"].as_u64(),
        Some(6),
        "{json}"
    );
    let ranges = json["deleted_ranges"].as_array().unwrap();
    assert_eq!(ranges.len(), 6, "{json}");
    assert_eq!(ranges[0].as_array().unwrap().len(), 2, "{json}");
    let v5 = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/table-v5/blocked-expiring.sst");
    assert!(!report_text(&v5).contains("deleted ranges"));
}
