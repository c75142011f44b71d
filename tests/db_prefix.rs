//! Prefix filters (`Options::prefix_extractor`, `Db::scan_prefix`): results are exactly an
//! unfiltered store's, tables are really skipped, and tables written under another rule, or
//! with a damaged prefix filter, are read rather than trusted.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use common::tiny_options;
use lsm_bloom::table::{FilterState, Footer, FOOTER_LEN};
use lsm_bloom::{
    Db, DbStats, Error, FilterPolicy, Filters, Options, PrefixExtractor, PrefixFilters,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn collect(it: lsm_bloom::Result<lsm_bloom::DbIter>) -> Pairs {
    it.unwrap().map(Result::unwrap).collect()
}

#[derive(Clone, Debug)]
enum Op {
    Put(Vec<u8>, u8),
    Delete(Vec<u8>),
    Flush,
    Compact,
}

/// Keys like `us:12:x`, plus keys the rules give no prefix (`us`, `u:`) and 0xff bytes.
fn key() -> impl Strategy<Value = Vec<u8>> {
    let head = prop::sample::select(vec![&b"u"[..], b"us", b"use", b"\xff", b"v"]);
    let mid = 0u8..12;
    let tail = prop::sample::select(vec![&b""[..], b"a", b"b:", b"\xff", b"zz"]);
    (head, mid, tail, 0u8..10).prop_map(|(h, m, t, shape)| match shape {
        0 => h.to_vec(),
        1 => [h, b":"].concat(),
        _ => [h, b":", format!("{m}").as_bytes(), b":", t].concat(),
    })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (key(), any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        3 => key().prop_map(Op::Delete),
        1 => Just(Op::Flush),
        1 => Just(Op::Compact),
    ]
}

fn rule() -> impl Strategy<Value = PrefixExtractor> {
    prop_oneof![
        (1u32..5).prop_map(PrefixExtractor::fixed),
        (1u32..3).prop_map(|c| PrefixExtractor::delimiter(b':', c)),
    ]
}

/// Scan prefixes: whole rule prefixes, shorter and longer ones, absent ones, the empty one.
fn queries() -> Vec<Vec<u8>> {
    let mut q: Vec<Vec<u8>> = vec![Vec::new()];
    for h in [&b"u"[..], b"us", b"use", b"user", b"\xff", b"v", b"w"] {
        q.push(h.to_vec());
        q.push([h, b":"].concat());
        for m in [0, 3, 7, 11, 12, 40] {
            let p = [h, b":", format!("{m}").as_bytes(), b":"].concat();
            q.push(p[..p.len() - 1].to_vec());
            q.push(p.clone());
            q.push([&p[..], b"b"].concat());
            q.push([&p[..], b"\xff"].concat());
        }
    }
    q
}

/// Prefix filters under `rule` (none without one), the fixed default filter policy for keys
/// and prefixes alike.
fn prefix_filters(rule: Option<PrefixExtractor>, whole_key: bool) -> Options {
    Options::default()
        .with_filters(Some(Filters::fixed(FilterPolicy::default())))
        .with_prefix_filters(Some(match rule {
            None => PrefixFilters::None,
            Some(rule) => PrefixFilters::On {
                rule,
                whole_key_filters: whole_key,
            },
        }))
}

fn opts(rule: Option<PrefixExtractor>, whole_key: bool) -> Options {
    let p = prefix_filters(rule, whole_key);
    tiny_options()
        .with_filters(p.filters)
        .with_prefix_filters(p.prefix_filters)
}

fn apply(db: &Db, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Put(k, v) => db.put(k, [*v; 24]).unwrap(),
            Op::Delete(k) => db.delete(k).unwrap(),
            Op::Flush => db.flush().unwrap(),
            Op::Compact => db.compact().unwrap(),
        }
    }
}

/// Every query against both stores, by `scan_prefix`, by a `scan` inside the prefix, and by
/// `get` of each key ever written.
fn compare(filtered: &Db, plain: &Db, keys: &[Vec<u8>]) -> Result<(), TestCaseError> {
    for q in queries() {
        let want = collect(plain.scan_prefix(&q));
        prop_assert_eq!(
            collect(filtered.scan_prefix(&q)),
            want.clone(),
            "scan_prefix {:?}",
            q
        );
        // Backward, through the same prefix filters.
        let mut back: Pairs = filtered
            .scan_prefix(&q)
            .unwrap()
            .rev()
            .map(Result::unwrap)
            .collect();
        back.reverse();
        prop_assert_eq!(back, want, "scan_prefix {:?} backward", q);
        let upper = [&q[..], b"\xff\xff"].concat();
        let range = (Bound::Excluded(q.clone()), Bound::Included(upper.clone()));
        prop_assert_eq!(
            collect(filtered.scan(range.clone())),
            collect(plain.scan(range))
        );
        prop_assert_eq!(
            collect(filtered.scan(q.clone()..upper.clone())),
            collect(plain.scan(q.clone()..upper)),
            "scan {:?}..",
            q
        );
        // Up to and including the first key after the prefix ("us:" for "ur:"): one key past it.
        if let Some(i) = q.iter().rposition(|b| *b != 0xff) {
            let mut next = q[..=i].to_vec();
            next[i] += 1;
            let r = q.clone()..=next.clone();
            prop_assert_eq!(collect(filtered.scan(r.clone())), collect(plain.scan(r)));
            let r = q.clone()..next;
            prop_assert_eq!(collect(filtered.scan(r.clone())), collect(plain.scan(r)));
        }
        // Ranges that run past the prefix must not be filtered by it.
        prop_assert_eq!(
            collect(filtered.scan(q.clone()..)),
            collect(plain.scan(q.clone()..))
        );
        let far = b"v:5:".to_vec();
        prop_assert_eq!(
            collect(filtered.scan(q.clone()..=far.clone())),
            collect(plain.scan(q.clone()..=far))
        );
    }
    for k in keys {
        prop_assert_eq!(
            filtered.get(k).unwrap(),
            plain.get(k).unwrap(),
            "get {:?}",
            k
        );
    }
    Ok(())
}

static CHECKS: AtomicU64 = AtomicU64::new(0);
static USEFUL: AtomicU64 = AtomicU64::new(0);
static UNFILTERED: AtomicU64 = AtomicU64::new(0);

fn count(s: &DbStats) {
    CHECKS.fetch_add(s.total.prefix_checks, Relaxed);
    USEFUL.fetch_add(s.total.prefix_useful, Relaxed);
    UNFILTERED.fetch_add(s.total.prefix_unfiltered, Relaxed);
}

/// The property the issue asks for: under any rule, with or without whole-key filters, and
/// after reopening under another rule, every prefix scan, range scan and get equals the
/// unfiltered store's (and the model's).
#[test]
fn prefix_filtered_results_equal_the_unfiltered_store() {
    let strategy = (
        prop::collection::vec(op(), 1..400),
        rule(),
        any::<bool>(),
        rule(),
    );
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    runner
        .run(&strategy, |(ops, rule, whole_key, second_rule)| {
            let (fd, pd) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
            let filtered = Db::open(fd.path(), opts(Some(rule), whole_key)).unwrap();
            let plain = Db::open(pd.path(), opts(None, true)).unwrap();
            apply(&filtered, &ops);
            apply(&plain, &ops);
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for op in &ops {
                match op {
                    Op::Put(k, v) => drop(model.insert(k.clone(), vec![*v; 24])),
                    Op::Delete(k) => drop(model.remove(k)),
                    _ => {}
                }
            }
            let keys: Vec<Vec<u8>> = ops
                .iter()
                .filter_map(|o| match o {
                    Op::Put(k, _) | Op::Delete(k) => Some(k.clone()),
                    _ => None,
                })
                .collect();
            let all: Pairs = model.into_iter().collect();
            prop_assert_eq!(collect(plain.scan::<&[u8], _>(..)), all);
            compare(&filtered, &plain, &keys)?;
            count(&filtered.stats());
            // Reopen under another rule: the old tables' prefix filters no longer apply.
            drop(filtered);
            let filtered = Db::open(fd.path(), opts(Some(second_rule), true)).unwrap();
            compare(&filtered, &plain, &keys)?;
            count(&filtered.stats());
            Ok(())
        })
        .unwrap();
    // The property is only worth something if the filters did skip tables and the other-rule
    // tables were read.
    assert!(
        USEFUL.load(Relaxed) > 100,
        "prefix filters skipped {} tables",
        USEFUL.load(Relaxed)
    );
    assert!(CHECKS.load(Relaxed) > USEFUL.load(Relaxed));
    assert!(UNFILTERED.load(Relaxed) > 100);
}

/// `n` prefixes `p00042:` of `per` keys each, flushed into several tables.
fn load(db: &Db, prefixes: u32, per: u32, tables: u32) {
    for t in 0..tables {
        for p in (t..prefixes).step_by(tables as usize) {
            for s in 0..per {
                db.put(format!("p{p:05}:{s:03}"), format!("value {p} {s}"))
                    .unwrap();
            }
        }
        db.flush().unwrap();
    }
}

fn big_options(rule: Option<PrefixExtractor>) -> Options {
    big_options_with(rule, true)
}

fn big_options_with(rule: Option<PrefixExtractor>, whole_key: bool) -> Options {
    prefix_filters(rule, whole_key)
        .with_l0_compaction_trigger(100)
        .with_idle_compaction_after(None)
        .with_l0_stop_writes_trigger(200)
        .with_block_cache_bytes(0)
}

#[test]
fn absent_prefix_scans_skip_tables_and_present_ones_read_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(
        dir.path(),
        big_options(Some(PrefixExtractor::delimiter(b':', 1))),
    )
    .unwrap();
    // 6 level-0 tables, each spanning the whole key range (prefixes interleave across tables).
    load(&db, 3000, 5, 6);
    let s0 = db.stats();
    assert_eq!(s0.levels[0].tables, 6);
    assert_eq!(s0.levels[0].prefix_filter_keys, 3000);
    // Absent prefixes between present ones: every table overlaps, each filter decides.
    let absent = 2000;
    for p in 0..absent {
        assert!(collect(db.scan_prefix(format!("p{p:05}x:"))).is_empty());
        assert!(collect(db.scan_prefix(format!("p{p:05}a:"))).is_empty());
    }
    let s = db.stats();
    let checks = s.total.prefix_checks - s0.total.prefix_checks;
    let useful = s.total.prefix_useful - s0.total.prefix_useful;
    // From p00006 on, every table's range overlaps both absent prefixes.
    assert!(checks >= 6 * 2 * (absent - 6), "checks {checks}");
    let reads = s.total.scan_block_reads - s0.total.scan_block_reads;
    let expected = s.levels[0].prefix_expected_fpr_sum * checks as f64 / 6.0;
    assert!(
        (reads as f64) <= 3.0 * expected + 5.0,
        "{reads} reads for {checks} checks, expected about {expected:.1}"
    );
    assert!(useful as f64 >= 0.95 * checks as f64);
    // Present prefixes: all five keys, from the one table that has them.
    for p in (0..3000).step_by(97) {
        let got = collect(db.scan_prefix(format!("p{p:05}:")));
        let want: Pairs = (0..5)
            .map(|s| {
                (
                    format!("p{p:05}:{s:03}").into_bytes(),
                    format!("value {p} {s}").into_bytes(),
                )
            })
            .collect();
        assert_eq!(got, want);
    }
    assert_eq!(s.prefix_scans, 2 * absent + s0.prefix_scans);
    // A scan that is not inside one prefix consults nothing.
    let before = db.stats();
    assert_eq!(
        collect(db.scan(b"p00001:".to_vec()..b"p00003:".to_vec())).len(),
        10
    );
    let after = db.stats();
    assert_eq!(after.prefix_scans, before.prefix_scans);
    assert_eq!(after.total.prefix_checks, before.total.prefix_checks);
}

#[test]
fn tables_from_another_rule_or_none_are_read_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), big_options(None)).unwrap();
    load(&db, 1000, 3, 2);
    db.close().unwrap();
    let rule = PrefixExtractor::delimiter(b':', 1);
    let db = Db::open(dir.path(), big_options(Some(rule))).unwrap();
    load(&db, 1000, 3, 2);
    db.close().unwrap();
    // Now read under a fixed-length rule that gives the same strings ("p00001:" is 7 bytes):
    // the tables' recorded rule differs, so their filters are not used.
    let db = Db::open(dir.path(), big_options(Some(PrefixExtractor::fixed(7)))).unwrap();
    assert!(collect(db.scan_prefix("p00123x:")).is_empty());
    assert_eq!(collect(db.scan_prefix("p00123:")).len(), 3);
    let s = db.stats();
    assert_eq!(s.total.prefix_checks, 0);
    assert_eq!(s.total.prefix_unfiltered, 8);
    drop(db);
    // Under the tables' own rule, only the two tables without a prefix filter are read.
    let db = Db::open(dir.path(), big_options(Some(rule))).unwrap();
    assert!(collect(db.scan_prefix("p00123x:")).is_empty());
    let s = db.stats();
    assert_eq!(s.total.prefix_unfiltered, 2);
    assert_eq!(s.total.prefix_checks, 2);
}

#[test]
fn without_whole_key_filters_gets_use_the_prefix_filter() {
    let dir = tempfile::tempdir().unwrap();
    let opts = big_options_with(Some(PrefixExtractor::delimiter(b':', 1)), false);
    let db = Db::open(dir.path(), opts).unwrap();
    load(&db, 2000, 4, 4);
    let s0 = db.stats();
    assert_eq!(s0.total.filter_bytes, 0);
    assert!(s0.total.prefix_filter_bytes > 0);
    for p in 0..2000 {
        assert_eq!(
            db.get(format!("p{p:05}:002")).unwrap(),
            Some(format!("value {p} 2").into_bytes())
        );
    }
    for p in 0..2000 {
        assert_eq!(db.get(format!("p{p:05}y:002")).unwrap(), None);
    }
    // A key the rule gives no prefix cannot be filtered: read where its range is covered.
    assert_eq!(db.get("p00001").unwrap(), None);
    let s = db.stats();
    // Each absent key's range is covered by at least 3 of the 4 tables.
    assert!(
        s.total.prefix_useful >= 2000 * 3 * 95 / 100,
        "{}",
        s.total.prefix_useful
    );
    assert!(s.total.unfiltered_probes >= 1);
    assert_eq!(s.total.filter_checks, 0);
}

/// Flips a byte inside the prefix filter block of one table: the open counts it, the table is
/// read without it, and every scan still returns every key.
#[test]
fn a_damaged_prefix_filter_is_counted_and_never_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let rule = PrefixExtractor::delimiter(b':', 1);
    let db = Db::open(dir.path(), big_options(Some(rule))).unwrap();
    load(&db, 400, 2, 2);
    let victim = db.levels()[0][0].path().to_path_buf();
    db.close().unwrap();
    let mut bytes = std::fs::read(&victim).unwrap();
    let footer = Footer::decode(&bytes[bytes.len() - FOOTER_LEN..], bytes.len() as u64).unwrap();
    assert!(footer.prefix_filter.size > 64);
    let at = (footer.prefix_filter.offset + footer.prefix_filter.size / 2) as usize;
    bytes[at] ^= 0x5a;
    std::fs::write(&victim, &bytes).unwrap();
    let db = Db::open(dir.path(), big_options(Some(rule))).unwrap();
    let s = db.stats();
    assert_eq!(s.filter_validation_failures, 1);
    let damaged = db.levels()[0]
        .iter()
        .filter(|t| matches!(t.prefix_filter(), FilterState::Invalid(_)))
        .count();
    assert_eq!(damaged, 1);
    for p in 0..400 {
        assert_eq!(
            collect(db.scan_prefix(format!("p{p:05}:"))).len(),
            2,
            "prefix {p}"
        );
    }
    // The damaged table covers 399 of the 400 prefixes (its neighbour holds the last one).
    let s = db.stats();
    assert!(
        (399..=400).contains(&s.total.prefix_unfiltered),
        "{}",
        s.total.prefix_unfiltered
    );
}

#[test]
fn bad_prefix_options_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            Options::default()
                .with_prefix_filters(Some(PrefixFilters::with(PrefixExtractor::fixed(0)))),
            "fixed prefix length",
        ),
        (
            Options::default().with_prefix_filters(Some(PrefixFilters::with(
                PrefixExtractor::delimiter(b'/', 0),
            ))),
            "delimiter count",
        ),
        (
            Options::default()
                .with_prefix_filters(Some(PrefixFilters::with(PrefixExtractor::fixed(4))))
                .with_table_format_version(1),
            "table_format_version",
        ),
    ];
    for (opts, needle) in cases {
        match Db::open(dir.path(), opts) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(needle), "{m}"),
            Err(e) => panic!("expected InvalidArgument naming {needle}, got {e}"),
            Ok(_) => panic!("options accepted; expected InvalidArgument naming {needle}"),
        }
    }
}

/// A scan iterator that outlives its store keeps neither the store nor its directory lock:
/// the directory reopens while the iterator is still read to the end.
#[test]
fn a_live_scan_does_not_keep_the_store_open() {
    let dir = tempfile::tempdir().unwrap();
    let rule = PrefixExtractor::delimiter(b':', 1);
    let db = Db::open(dir.path(), big_options(Some(rule))).unwrap();
    load(&db, 100, 3, 2);
    let mut it = db.scan_prefix("p00042:").unwrap();
    let first = it.next().unwrap().unwrap();
    drop(db);
    let again = Db::open(dir.path(), big_options(Some(rule))).unwrap();
    assert_eq!(first.0, b"p00042:000");
    assert_eq!(it.map(Result::unwrap).count(), 2);
    assert_eq!(collect(again.scan_prefix("p00042:")).len(), 3);
}
