//! `Options::filter_budget`: the total filter memory stays within the budget (plus one table's
//! filter) while the store grows to several times what the budget could cover at 10 bits/key;
//! the deepest level gives up bits first; an average-bits/key budget spends what it says and
//! its filters keep absent lookups near the model's expected reads; with a prefix rule the
//! budget plans the prefix filters as runs of their own, from the same memory.

mod common;

use lsm_bloom::db::stats::LevelStats;
use lsm_bloom::{
    Db, DbStats, FilterBudget, FilterKind, Filters, Options, PrefixExtractor, PrefixFilters,
};

fn options(budget: FilterBudget) -> Options {
    Options::default()
        .with_memtable_size(64 * 1024)
        .with_target_file_size(64 * 1024)
        .with_level1_max_bytes(256 * 1024)
        .with_size_ratio(4)
        .with_filters(Some(Filters::Budget(budget)))
        .with_block_cache_bytes(0)
}

fn key(i: u64) -> String {
    // 16 bytes, spread over the key space like random keys.
    format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// (total filter bytes, largest single table filter) of the live tables.
fn filter_bytes(db: &Db) -> (u64, u64) {
    let sizes: Vec<u64> = db
        .levels()
        .iter()
        .flatten()
        .map(|t| t.filter_bytes())
        .collect();
    (sizes.iter().sum(), sizes.iter().copied().max().unwrap_or(0))
}

/// Expected data-block reads of one absent lookup, from the filters held (`fpr_sum`: a
/// level's sum of its filters' expected rates): it is checked against every level-0 table and
/// one table per deeper level.
fn expected_reads(s: &DbStats, fpr_sum: impl Fn(&LevelStats) -> f64) -> f64 {
    s.levels
        .iter()
        .filter(|l| l.tables > 0)
        .map(|l| match l.level {
            Some(0) => fpr_sum(l),
            _ => fpr_sum(l) / l.tables as f64,
        })
        .sum()
}

#[test]
fn total_bytes_budget_holds_as_the_store_outgrows_it() {
    const BUDGET: u64 = 16 * 1024; // 10 bits/key would cover ~13,000 keys
    const KEYS: u64 = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(FilterBudget::total_bytes(BUDGET))).unwrap();
    let mut checks = 0;
    for i in 0..KEYS {
        db.put(key(i), format!("value-{i:08}-padding-padding"))
            .unwrap();
        if (i + 1) % 10_000 == 0 {
            db.flush().unwrap();
            db.wait_for_compactions().unwrap();
            let (total, largest) = filter_bytes(&db);
            assert!(
                total <= BUDGET + largest,
                "after {} keys: {total} filter bytes, budget {BUDGET} + largest filter {largest}",
                i + 1
            );
            checks += 1;
        }
    }
    assert_eq!(checks, 10);
    let s = db.stats();
    let alloc = s.filter_budget.as_ref().expect("budget in stats");
    assert_eq!(alloc.budget_bytes, BUDGET);
    assert_eq!(alloc.filter_bytes, s.total.filter_bytes);
    let deep: Vec<_> = alloc.levels.iter().filter(|l| l.keys > 0).collect();
    assert!(
        deep.len() >= 3,
        "want L0/L1 and deeper levels: {:#?}",
        alloc.levels
    );
    // The largest level and those below it use Ribbon, the ones above the blocked Bloom.
    let largest = deep
        .iter()
        .filter(|l| l.level > 0)
        .max_by_key(|l| l.keys)
        .unwrap();
    for l in &deep {
        let want = if l.level >= largest.level && l.level > 0 {
            FilterKind::Ribbon
        } else {
            FilterKind::Blocked
        };
        assert_eq!(l.kind, Some(want), "{alloc:#?}");
    }
    // Monkey: among runs of one kind, more keys never buys more bits per key, so the store
    // outgrowing its budget takes bits from the biggest level first.
    for a in &deep {
        for b in &deep {
            if a.kind == b.kind && a.keys / a.runs.max(1) < b.keys / b.runs.max(1) {
                assert!(a.bits_per_key >= b.bits_per_key, "{alloc:#?}");
            }
        }
    }
    assert!(largest.bits_per_key < 10.0 * 0.5, "{alloc:#?}");
    // Whatever the filters, every key is still found.
    for i in (0..KEYS).step_by(7) {
        assert!(db.get(key(i)).unwrap().is_some(), "key {i} lost");
    }
}

#[test]
fn bits_per_key_budget_spends_its_average_and_filters_work() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), options(FilterBudget::bits_per_key(6.0))).unwrap();
    let keys = 60_000u64;
    for i in 0..keys {
        db.put(key(i), format!("value-{i:08}-padding-padding"))
            .unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let s = db.stats();
    let bits_per_key = s.total.filter_bytes as f64 * 8.0 / s.total.filter_keys as f64;
    // About the budget (headers included). Over it by what level-0 tables written under
    // earlier, more generous plans still hold until a compaction rewrites them (seen: three
    // at ~16 bits/key, 6.0848 bits/key in all, in 1 run of ~10; 6.0011; and 6.1888 once in
    // CI, where the other suites load the machine and compactions lag). Allowed: 5%.
    // Under it by what the plan keeps for the level-0 tables the next flushes will write
    // (3 × ~1,100 keys at ~13 bits/key here) and by what older, smaller filters left unspent.
    assert!(
        (4.0..=6.0 * 1.05).contains(&bits_per_key),
        "{bits_per_key} bits/key spent for a budget of 6\n{:#?}",
        s.levels
    );
    let before = s.total.data_block_reads;
    let lookups = 50_000u64;
    for i in 0..lookups {
        assert_eq!(db.get(format!("{}x", key(i))).unwrap(), None);
    }
    let after = db.stats();
    let per_get = (after.total.data_block_reads - before) as f64 / lookups as f64;
    // Each absent key is checked against every level-0 table and one table per deeper level:
    // the filters held predict the sum of those rates.
    let expected = expected_reads(&after, |l| l.expected_fpr_sum);
    assert!(
        per_get <= 1.5 * expected + 0.002,
        "{per_get} reads per absent get, the filters held expect {expected}"
    );
}

#[test]
fn an_invalid_budget_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let e = Db::open(dir.path(), options(FilterBudget::bits_per_key(f64::NAN)))
        .err()
        .unwrap();
    assert!(e.to_string().contains("bits/key"), "{e}");
}

/// Key `i` of prefix `p`: `<8 hex digits>:<i>`, prefixes spread over the key space.
fn prefixed_key(p: u64, i: u64) -> String {
    format!(
        "{:08x}:{i:03}",
        (p.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32
    )
}

/// A budget with a prefix rule: tables carry prefix filters sized by the plan, all filters
/// together stay within the budget (plus one table's filters), absent prefixes are skipped
/// about as often as the prefix filters' expected rates say, and present ones scan whole. With
/// whole-key filtering off, the prefix filters alone spend the budget.
#[test]
fn budget_plans_prefix_filters_as_runs_of_their_own() {
    const PREFIXES: u64 = 4000;
    const PER_PREFIX: u64 = 15;
    for whole_keys in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let opts =
            options(FilterBudget::bits_per_key(6.0)).with_prefix_filters(Some(PrefixFilters::On {
                rule: PrefixExtractor::delimiter(b':', 1),
                whole_key_filters: whole_keys,
            }));
        let db = Db::open(dir.path(), opts).unwrap();
        for i in 0..PER_PREFIX {
            for p in 0..PREFIXES {
                db.put(prefixed_key(p, i), format!("value-{p}-{i}-padding"))
                    .unwrap();
            }
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        let s = db.stats();
        let plan = s.filter_budget.clone().unwrap();
        let held = s.total.filter_bytes + s.total.prefix_filter_bytes;
        let largest = db
            .levels()
            .iter()
            .flatten()
            .map(|t| t.filter_bytes() + t.prefix_filter_bytes())
            .max()
            .unwrap();
        assert!(
            held <= plan.budget_bytes + largest,
            "whole keys {whole_keys}: filters hold {held} bytes, budget {} + one table's {largest}",
            plan.budget_bytes
        );
        // Both kinds of run got bits; every table has a prefix filter, and none has a key
        // filter when whole-key filtering is off.
        assert!(
            plan.levels
                .iter()
                .any(|l| l.prefixes > 0 && l.prefix_bits_per_key > 1.0),
            "{plan}"
        );
        for t in db.levels().iter().flatten() {
            assert!(
                t.prefix_filter_bytes() > 0,
                "table {} has no prefix filter",
                t.id()
            );
            // (With whole keys on, the plan may give a table's key run no useful bits.)
            if !whole_keys {
                assert_eq!(t.filter_bytes(), 0, "table {}", t.id());
            }
        }
        if whole_keys {
            assert!(s.total.filter_bytes > 0 && s.total.prefix_filter_bytes > 0);
        } else {
            // The prefix filters alone: more bits per prefix than with key filters beside them.
            assert_eq!(s.total.filter_bytes, 0);
        }
        // Absent prefixes: the scans read about what the prefix filters' rates predict.
        let before = db.stats().total;
        let scans = 4000u64;
        for p in PREFIXES..PREFIXES + scans {
            let prefix = &prefixed_key(p, 0)[..9];
            assert_eq!(db.scan_prefix(prefix).unwrap().count(), 0);
        }
        let after = db.stats();
        let per_scan =
            (after.total.scan_block_reads - before.scan_block_reads) as f64 / scans as f64;
        let expected = expected_reads(&after, |l| l.prefix_expected_fpr_sum);
        assert!(after.total.prefix_useful > before.prefix_useful);
        assert!(
            per_scan <= 1.5 * expected + 0.01,
            "whole keys {whole_keys}: {per_scan} reads per absent prefix scan, expected {expected}"
        );
        // Present prefixes scan whole.
        for p in (0..PREFIXES).step_by(97) {
            let prefix = &prefixed_key(p, 0)[..9];
            let got: Vec<Vec<u8>> = db
                .scan_prefix(prefix)
                .unwrap()
                .map(|e| e.unwrap().0)
                .collect();
            let want: Vec<Vec<u8>> = (0..PER_PREFIX)
                .map(|i| prefixed_key(p, i).into_bytes())
                .collect();
            assert_eq!(got, want);
        }
    }
}

/// Writes numbered keys in flushed batches: each `write` puts the next `n` keys, flushes them
/// into one level-0 table and waits for the compactions that causes.
#[derive(Default)]
struct Flushes {
    next: u64,
}

impl Flushes {
    fn write(&mut self, db: &Db, n: u64) {
        for _ in 0..n {
            let i = self.next;
            db.put(key(i), format!("value-{i:08}-padding-padding"))
                .unwrap();
            self.next += 1;
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
    }
}

/// Reopened with a budget smaller than what its filters already hold, the store reports its
/// runs' shares, never 0 bits/key and a false-positive rate of 1 per run (the report had
/// shown that while new tables were given the plan's floor), and the next flushed table gets
/// about what the report said.
#[test]
fn a_budget_smaller_than_the_filters_held_reports_what_new_tables_get() {
    let dir = tempfile::tempdir().unwrap();
    let opts = |bits: f64| {
        options(FilterBudget::bits_per_key(bits))
            .with_l0_compaction_trigger(8)
            .with_idle_compaction_after(None)
            .with_memtable_size(1 << 20)
    };
    let mut keys = Flushes::default();
    {
        let db = Db::open(dir.path(), opts(10.0)).unwrap();
        for _ in 0..3 {
            keys.write(&db, 1_000);
        }
    }
    let db = Db::open(dir.path(), opts(4.0)).unwrap();
    let alloc = db.stats().filter_budget.expect("budget in stats");
    assert!(
        alloc.filter_bytes * 8 > 4 * 3_000,
        "the filters held exceed the new budget: {alloc:#?}"
    );
    let l0 = &alloc.levels[0];
    assert_eq!(l0.runs, 3, "{alloc:#?}");
    assert!(l0.bits_per_key >= 1.0, "{alloc:#?}");
    assert!(l0.expected_fpr / (l0.runs as f64) < 0.5, "{alloc:#?}");
    let reported = l0.bits_per_key;
    keys.write(&db, 1_000);
    let newest = db.levels()[0]
        .iter()
        .max_by_key(|t| t.id())
        .cloned()
        .expect("a level-0 table");
    let given = newest.filter_bytes() as f64 * 8.0 / newest.properties().entries as f64;
    assert!(
        (given - reported).abs() < 1.0,
        "reported {reported} bits/key for new level-0 tables, the next one got {given}"
    );
}

/// Reopened with a budget larger than what its filters hold, while level 0 holds as many
/// tables as the plan counts (`l0_compaction_trigger − 1`, so no planned-for run is left),
/// the store reports each run's share of the budget. The report had balanced the shortfall
/// against new tables that this plan does not have: its search ran to the end of its range
/// and every level read the most the plan gives, 32 bits/key (level 2 at a rate of 0.00000
/// in the scale series).
#[test]
fn a_budget_larger_than_the_filters_held_reports_the_shares() {
    let dir = tempfile::tempdir().unwrap();
    let opts = |bits: f64| {
        options(FilterBudget::bits_per_key(bits))
            .with_l0_compaction_trigger(4)
            .with_idle_compaction_after(None)
            .with_memtable_size(1 << 20)
            .with_level1_max_bytes(64 << 20)
    };
    let mut keys = Flushes::default();
    {
        let db = Db::open(dir.path(), opts(4.0)).unwrap();
        for _ in 0..7 {
            keys.write(&db, 1_000); // four into level 1, then three that stay in level 0
        }
    }
    // 12, not the default 10: a budget left at its default is filled in from the record.
    let db = Db::open(dir.path(), opts(12.0)).unwrap();
    let alloc = db.stats().filter_budget.expect("budget in stats");
    let counts: Vec<usize> = db.levels().iter().map(Vec::len).collect();
    assert_eq!(counts[0], 3, "{counts:?}");
    assert!(counts[1] > 0, "{counts:?}");
    assert!(
        alloc.filter_bytes < alloc.budget_bytes,
        "the filters held are under the new budget: {alloc:#?}"
    );
    assert!(
        alloc.reserved_bytes < 0
            && alloc.reserved_bytes.unsigned_abs() <= alloc.budget_bytes - alloc.filter_bytes,
        "reserved = what the tables hold short of their shares: {alloc:#?}"
    );
    let (l0, l1) = (&alloc.levels[0], &alloc.levels[1]);
    // The shares of a 12 bits/key average: Monkey gives the young level-0 runs more than
    // level 1, and no run twice the average here.
    assert!(
        l1.bits_per_key > 4.0 && l1.bits_per_key < l0.bits_per_key,
        "{alloc:#?}"
    );
    assert!(l0.bits_per_key < 24.0, "{alloc:#?}");
    assert!(l1.expected_fpr > 1e-4, "{alloc:#?}");
}

/// A table's filter block is charged once for its header and trailer: on a store of small
/// tables (~400 keys, where the 52 bytes of framing are a tenth of a 10 bits/key block) what
/// the plan reports older tables holding over their shares, and takes off new tables, is
/// their arrays' excess, not their framing again. (Counted twice, the surplus here read 3,417
/// bytes, more than all 50 tables' framing; counted once, 1,073.)
#[test]
fn small_tables_have_their_framing_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let opts = common::tiny_options()
        .with_filters(Some(Filters::Budget(FilterBudget::bits_per_key(10.0))))
        .with_memtable_size(24 * 1024)
        .with_target_file_size(24 * 1024)
        .with_level1_max_bytes(96 * 1024);
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..20_000u64 {
        db.put(key(i * 7919 % 20_000), format!("v{i:030}")).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let s = db.stats();
    let keys_per_table = s.total.filter_keys / s.total.tables;
    assert!(keys_per_table < 1000, "{keys_per_table} keys a table");
    let a = s.filter_budget.clone().unwrap();
    let framing = s.total.tables as i64 * 52;
    assert!(
        a.reserved_bytes < framing,
        "the plan reports {} bytes held over the shares; the {} tables' framing is {framing}",
        a.reserved_bytes,
        s.total.tables
    );
    let bits_per_key = s.total.filter_bytes as f64 * 8.0 / s.total.filter_keys as f64;
    assert!(
        (9.0..=11.0).contains(&bits_per_key),
        "{bits_per_key} bits/key spent for a budget of 10"
    );
}

/// Key `ev:` + point `p` big-endian: a range filter maps exactly the point (below the tables'
/// common prefix `ev:`).
fn point_key(p: u64) -> Vec<u8> {
    [&b"ev:"[..], &p.to_be_bytes()].concat()
}

/// A table's expected rate on an empty range of `len` points: its range filter's bound, 1
/// without one.
fn range_rate(t: &lsm_bloom::table::Table, len: u64) -> f64 {
    match t.range_filter() {
        lsm_bloom::table::RangeFilterState::Valid(f) => f.expected_rate(len),
        _ => 1.0,
    }
}

/// A budget with range filters in it (`RangeFilters::InBudget`): tables carry range filters
/// sized by the plan beside their key filters, both kinds together stay within the budget
/// (plus one table's filters), the small runs get more range bits per key than the largest
/// level, and empty short ranges read about what the range filters' rates predict. A budget
/// too small for a useful range filter builds none, and answers stay right.
#[test]
fn budget_plans_range_filters_as_runs_of_their_own() {
    use lsm_bloom::RangeFilters;
    const KEYS: u64 = 60_000;
    const LEN: u64 = 32;
    let spread = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for average in [20.0, 1.0] {
        let dir = tempfile::tempdir().unwrap();
        let opts = options(FilterBudget::bits_per_key(average))
            .with_range_filters(Some(RangeFilters::InBudget { max_range: LEN }));
        let db = Db::open(dir.path(), opts).unwrap();
        for i in 0..KEYS {
            db.put(point_key(spread(i)), format!("value-{i}-padding-padding"))
                .unwrap();
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        let s = db.stats();
        let plan = s.filter_budget.clone().unwrap();
        assert_eq!(plan.range_design, Some(LEN));
        assert!(
            plan.to_string().contains("expected FPR on 32 points"),
            "{plan}"
        );
        let tables: Vec<_> = db.levels().into_iter().flatten().collect();
        let held = s.total.filter_bytes + s.total.range_filter_bytes;
        let largest = tables
            .iter()
            .map(|t| t.filter_bytes() + t.range_filter_bytes())
            .max()
            .unwrap();
        assert!(
            held <= plan.budget_bytes + largest,
            "{average}: filters hold {held} bytes, budget {} + one table's {largest}\n{plan}",
            plan.budget_bytes
        );
        let before = db.stats().total;
        // Empty ranges of `LEN` points right after a present key, and ranges around one.
        let probes = 4000;
        for i in (0..KEYS).step_by((KEYS / probes) as usize) {
            let p = spread(i);
            let (lo, hi) = (point_key(p + 1), point_key(p + LEN));
            assert!(!db.contains_range(lo..=hi).unwrap(), "{average}: key {i}");
            assert!(db
                .contains_range(point_key(p.saturating_sub(3))..=point_key(p + 3))
                .unwrap());
        }
        let after = db.stats();
        if average < 2.0 {
            // Too few bits for a useful range filter on any big run: the largest level gets
            // none, and its tables are read (a small level-0 table may still be worth one).
            let deepest = db
                .levels()
                .into_iter()
                .rev()
                .find(|ts| !ts.is_empty())
                .unwrap();
            let keys = |t: &lsm_bloom::table::Table| t.properties().entries;
            let big = deepest.iter().max_by_key(|t| keys(t)).unwrap();
            assert_eq!(big.range_filter_bytes(), 0, "{plan}");
            assert_eq!(
                plan.levels.last().unwrap().range_bits_per_key,
                0.0,
                "{plan}"
            );
            assert!(after.total.range_unfiltered > before.range_unfiltered);
            continue;
        }
        assert!(tables.iter().all(|t| t.range_filter_bytes() > 0), "{plan}");
        assert!(s.total.filter_bytes > 0, "{plan}");
        // `dump_filter DIR` plans the recorded budget with its range runs.
        let out = std::process::Command::new(common::example("dump_filter"))
            .arg(dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(
            text.contains("range filters sized by the filter budget for ranges up to 32 points")
                && text.contains("expected FPR on 32 points"),
            "{text}"
        );
        // Smaller runs get more range bits per key than the largest level.
        let deepest = plan.levels.last().unwrap();
        let upper = plan
            .levels
            .iter()
            .find(|l| l.level > 0 && l.keys > 0)
            .unwrap();
        assert!(deepest.level > upper.level, "{plan}");
        assert!(
            upper.range_bits_per_key > deepest.range_bits_per_key
                && deepest.range_bits_per_key > 7.0,
            "{plan}"
        );
        // Reads per empty range: about the sum over the runs a range reaches of their bound
        // (level 0: each table; deeper: one table, at the level's mean rate).
        let expected: f64 = db
            .levels()
            .iter()
            .enumerate()
            .filter(|(_, ts)| !ts.is_empty())
            .map(|(level, ts)| {
                let sum: f64 = ts.iter().map(|t| range_rate(t, LEN)).sum();
                if level == 0 {
                    sum
                } else {
                    sum / ts.len() as f64
                }
            })
            .sum();
        let reads = (after.total.scan_block_reads + after.total.scan_block_cache_hits
            - before.scan_block_reads
            - before.scan_block_cache_hits) as f64;
        // Each "around a key" range reads its key's block; the empty ones only false positives.
        let per_empty = (reads - probes as f64 * 1.0).max(0.0) / probes as f64;
        assert!(after.total.range_useful > before.range_useful);
        assert!(
            per_empty <= 1.5 * expected + 0.02,
            "{per_empty} reads per empty range, expected {expected}\n{plan}"
        );
    }
    // Range filters in the budget need a budget.
    let dir = tempfile::tempdir().unwrap();
    let e = Db::open(
        dir.path(),
        Options::default()
            .with_filters(Some(Filters::fixed(lsm_bloom::FilterPolicy::default())))
            .with_range_filters(Some(RangeFilters::InBudget { max_range: 32 })),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        e.contains("InBudget") && e.contains("Filters::Budget"),
        "{e}"
    );
}
