//! Range filters in the store (`Options::range_filters`): scans and `contains_range` give the
//! model's answers whatever the filters say, empty short ranges skip tables unread (counted
//! per level), a damaged range filter makes its table read without it, and the setting is
//! remembered across reopens.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::ops::RangeBounds;

use common::{scaled, tiny_options, Rng};
use lsm_bloom::table::{Footer, RangeFilterState, Table, FOOTER_LEN};
use lsm_bloom::{Db, Options, RangeFilters, RangePolicy};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Keys `ev:` + an 8-byte big-endian point: the bytes the range filter maps are the point
/// itself (the tables' common prefix is `ev:` once their points' first bytes differ).
fn key(point: u64) -> Vec<u8> {
    [&b"ev:"[..], &point.to_be_bytes()].concat()
}

fn options(range_filters: RangeFilters) -> Options {
    tiny_options().with_range_filters(Some(range_filters))
}

fn on(bits: f64, max_range: u64) -> RangeFilters {
    RangeFilters::On(RangePolicy::bits_per_key(bits, max_range).unwrap())
}

fn scan(db: &Db, range: (Bound<Vec<u8>>, Bound<Vec<u8>>)) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.scan(range).unwrap().map(Result::unwrap).collect()
}

fn want(model: &Model, range: &(Bound<Vec<u8>>, Bound<Vec<u8>>)) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .iter()
        .filter(|(k, _)| range.contains(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A random bound near `p`: included, excluded or (rarely) none.
fn bound(rng: &mut Rng, p: u64) -> Bound<Vec<u8>> {
    match rng.below(9) {
        0..=3 => Included(key(p)),
        4..=7 => Excluded(key(p)),
        _ => Unbounded,
    }
}

/// What `run` saw over all its opens.
#[derive(Default, Debug)]
struct Seen {
    flushes_and_compactions: u64,
    range_checks: u64,
    range_useful: u64,
    range_unfiltered: u64,
    /// Range filter keys held at the end.
    range_filter_keys: u64,
}

impl Seen {
    fn add(&mut self, s: &lsm_bloom::DbStats) {
        self.flushes_and_compactions += s.flushes + s.compactions;
        self.range_checks += s.total.range_checks;
        self.range_useful += s.total.range_useful;
        self.range_unfiltered += s.total.range_unfiltered;
        self.range_filter_keys = s.total.range_filter_keys;
    }
}

/// Random puts, deletes, flushes, compactions and reopens, with scans and `contains_range`
/// over short ranges (after a present key, around one, anywhere) checked against a model.
fn run(seed: u64, steps: usize, opts: Options) -> Seen {
    let mut seen = Seen::default();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed);
    let mut db = Some(Db::open(dir.path(), opts.clone()).unwrap());
    let mut model = Model::new();
    // Points spread over the whole u64 line, a few hundred of them, so overwrites and
    // deletes of present keys are common.
    let points: Vec<u64> = (0..300).map(|_| rng.next()).collect();
    for step in 0..steps {
        let d = db.as_ref().unwrap();
        let ctx = format!("seed {seed} step {step}");
        let p = points[rng.below(points.len() as u64) as usize];
        match rng.below(100) {
            0..=39 => {
                let v = format!("v{step}").into_bytes();
                d.put(key(p), &v).unwrap();
                model.insert(key(p), v);
            }
            40..=49 => {
                d.delete(key(p)).unwrap();
                model.remove(&key(p));
            }
            50..=89 => {
                let len = [1, 8, 32, 100, 5000][rng.below(5) as usize];
                let lo = match rng.below(3) {
                    0 => p.saturating_add(1),                  // just after a key
                    1 => p.saturating_sub(rng.below(len + 1)), // around one
                    _ => rng.next(),                           // anywhere
                };
                let hi = lo.saturating_add(len - 1);
                let range = (bound(&mut rng, lo), bound(&mut rng, hi));
                let want = want(&model, &range);
                assert_eq!(scan(d, range.clone()), want, "{ctx}: scan {range:?}");
                assert_eq!(
                    d.contains_range(range.clone()).unwrap(),
                    !want.is_empty(),
                    "{ctx}: contains_range {range:?}"
                );
            }
            90..=94 => d.flush().unwrap(),
            95..=97 => d.compact().unwrap(),
            _ => {
                seen.add(&d.stats());
                db.take().unwrap().close().unwrap();
                db = Some(Db::open(dir.path(), opts.clone()).unwrap());
            }
        }
    }
    let d = db.unwrap();
    let all: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
    assert_eq!(
        scan(&d, (Unbounded, Unbounded)),
        all,
        "seed {seed}: final scan"
    );
    seen.add(&d.stats());
    seen
}

#[test]
fn scans_and_contains_range_match_the_model_with_range_filters_on() {
    let steps = scaled(6000, 2500);
    let mut useful = 0;
    for (seed, filters) in [(1, on(12.0, 32)), (2, on(16.0, 8)), (3, on(8.0, 1024))] {
        let s = run(seed, steps, options(filters));
        assert!(s.flushes_and_compactions > 10, "seed {seed}: {s:?}");
        assert!(s.range_filter_keys > 0, "seed {seed}: no range filter held");
        assert!(s.range_checks > 0, "seed {seed}: no range filter asked");
        useful += s.range_useful;
    }
    assert!(
        useful > 100,
        "only {useful} tables skipped over three seeds"
    );
}

#[test]
fn scans_match_the_model_without_range_filters() {
    let s = run(4, scaled(4000, 1500), options(RangeFilters::None));
    assert_eq!(s.range_checks, 0);
    assert_eq!(s.range_filter_keys, 0);
    assert!(s.range_unfiltered > 0);
}

/// A settled store of `n` keys spaced 64 points apart (plus the ends of the line, so every
/// table's common prefix is `ev:`), compacted into one level.
fn settled(dir: &std::path::Path, filters: RangeFilters, n: u64) -> Db {
    let db = Db::open(dir, options(filters)).unwrap();
    for i in 1..=n {
        db.put(key(i << 6 | 1 << 63), b"v").unwrap();
        db.put(key(i << 6), b"v").unwrap();
    }
    db.compact().unwrap();
    db
}

/// Ranges of 20 points right after each key, all empty: with range filters nearly every table
/// they reach is skipped unread; without, each reads a data block.
#[test]
fn empty_short_ranges_skip_tables_unread() {
    let n = 2000;
    let mut reads = Vec::new();
    for filters in [on(16.0, 32), RangeFilters::None] {
        let dir = tempfile::tempdir().unwrap();
        let db = settled(dir.path(), filters, n);
        let before = db.stats();
        for i in 1..=n {
            let (lo, hi) = (key((i << 6) + 1), key((i << 6) + 20));
            assert!(!db.contains_range(lo.clone()..=hi).unwrap());
        }
        let s = db.stats();
        let blocks = s.total.scan_block_reads + s.total.scan_block_cache_hits
            - before.total.scan_block_reads
            - before.total.scan_block_cache_hits;
        reads.push(blocks);
        if filters != RangeFilters::None {
            let (checks, useful) = (s.total.range_checks, s.total.range_useful);
            // A range in the gap between two tables reaches none.
            assert!(checks >= n * 9 / 10, "{checks} checks for {n} ranges");
            assert!(useful * 100 >= checks * 98, "{useful} of {checks} skipped");
            assert_eq!(s.total.range_false_positives, checks - useful);
            assert!(
                s.total.observed_range_fpr() < 0.02,
                "{}",
                s.total.observed_range_fpr()
            );
        }
        // Ranges that hold a key are found, filters or not.
        for i in (1..=n).step_by(97) {
            let (lo, hi) = (key((i << 6) - 10), key((i << 6) + 10));
            assert!(db.contains_range(lo..hi).unwrap());
        }
    }
    assert!(
        reads[0] * 20 <= reads[1],
        "block reads with / without: {reads:?}"
    );
}

/// The range-filter blocks of every table in `dir`, damaged in the middle (the table files
/// are otherwise intact).
fn damage_range_filters(dir: &std::path::Path) -> usize {
    let mut damaged = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "sst") {
            continue;
        }
        let mut bytes = std::fs::read(&path).unwrap();
        let tail = &bytes[bytes.len() - FOOTER_LEN..];
        let h = Footer::decode(tail, bytes.len() as u64)
            .unwrap()
            .range_filter;
        if h.size > 0 {
            bytes[(h.offset + h.size / 2) as usize] ^= 0x04;
            std::fs::write(&path, &bytes).unwrap();
            damaged += 1;
        }
    }
    damaged
}

#[test]
fn a_damaged_range_filter_makes_its_table_read_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let n = 500;
    settled(dir.path(), on(12.0, 32), n).close().unwrap();
    let damaged = damage_range_filters(dir.path());
    assert!(damaged > 0);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let s = db.stats();
    assert_eq!(s.filter_validation_failures, damaged as u64);
    assert_eq!(s.total.range_filter_keys, 0);
    for i in 1..=n {
        assert!(db.contains_range(key((i << 6) - 3)..=key(i << 6)).unwrap());
        assert!(!db
            .contains_range(key((i << 6) + 1)..=key((i << 6) + 9))
            .unwrap());
    }
    let s = db.stats();
    assert_eq!((s.total.range_checks, s.total.range_useful), (0, 0));
    assert!(
        s.total.range_unfiltered >= n,
        "{}",
        s.total.range_unfiltered
    );
    // Compaction rewrites the tables with whole range filters (the setting was recorded).
    db.compact().unwrap();
    let s = db.stats();
    assert!(s.total.range_filter_keys >= 2 * n, "{s:?}");
}

#[test]
fn the_setting_is_remembered_and_old_tables_keep_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let policy = RangePolicy::bits_per_key(14.0, 64).unwrap();
    settled(dir.path(), RangeFilters::On(policy), 300)
        .close()
        .unwrap();
    // Reopened with the defaults: the record keeps the policy, and new tables get it.
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let r = &db.recovery().options;
    assert!(r.kept.iter().any(|(s, _)| s == "range"), "{r:?}");
    db.put(key(5), b"v").unwrap();
    db.flush().unwrap();
    db.close().unwrap();
    // Turned off: tables written before keep their filters and are still asked (and no
    // compaction rewrites them while the test looks: no level is over its limit, and an
    // idle store keeps its level-0 table).
    let off = options(RangeFilters::None)
        .with_level1_max_bytes(1 << 30)
        .with_idle_compaction_after(None);
    let db = Db::open(dir.path(), off).unwrap();
    assert_eq!(db.recovery().options.changed.len(), 1);
    let held = db.stats().total.range_filter_keys;
    assert!(held >= 601, "{held}");
    assert!(!db.contains_range(key(65)..key(100)).unwrap());
    assert!(db.stats().total.range_useful > 0);
    db.close().unwrap();
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "sst") {
            let t = Table::open(&path, 0).unwrap();
            assert!(matches!(t.range_filter(), RangeFilterState::Valid(_)));
            assert_eq!(t.properties().range_filter, Some(policy));
        }
    }
    // Format 3 cannot hold them: refused by name.
    let e = Db::open(
        dir.path(),
        Options::default()
            .with_table_format_version(3)
            .with_range_filters(Some(RangeFilters::On(policy))),
    )
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("range filters need table_format_version 4"),
        "{e}"
    );
}

/// `contains_range` answers an empty range from the range filters alone (`db/exists.rs`) only
/// when no memtable holds an entry there: a key written since the last flush, in a gap every
/// table's filter calls empty, is found, by the store and by a snapshot taken after it, and not
/// by one taken before it; the quick answers are counted as the scan would count them.
#[test]
fn contains_range_sees_keys_only_the_memtable_holds() {
    let n = 500;
    let dir = tempfile::tempdir().unwrap();
    let db = settled(dir.path(), on(16.0, 32), n);
    let before = db.snapshot();
    let gap = |i: u64| (key((i << 6) + 5), key((i << 6) + 20));
    let mut quick = 0;
    for i in (1..=n).step_by(7) {
        let (lo, hi) = gap(i);
        let s = db.stats();
        if !db.contains_range(lo.clone()..=hi.clone()).unwrap() {
            let t = db.stats();
            // Counted as one scan, with one check per table asked, as a scan would.
            assert_eq!(t.scans, s.scans + 1);
            assert_eq!(t.total.range_checks, s.total.range_checks + 1);
            quick += usize::from(t.total.range_useful > s.total.range_useful);
        }
        db.put(key((i << 6) + 10), b"new").unwrap();
        assert!(
            db.contains_range(lo.clone()..=hi.clone()).unwrap(),
            "gap {i}"
        );
        assert!(db
            .snapshot()
            .contains_range(lo.clone()..=hi.clone())
            .unwrap());
        assert!(!before.contains_range(lo..=hi).unwrap(), "gap {i} before");
    }
    assert!(quick > 60, "{quick} quick answers");
    // Deleted again, the key is gone whatever the filters say.
    db.delete(key((1 << 6) + 10)).unwrap();
    let (lo, hi) = gap(1);
    assert!(!db.contains_range(lo..=hi).unwrap());
}
