//! `Options::filter_budget`: the total filter memory stays within the budget (plus one table's
//! filter) while the store grows to several times what the budget could cover at 10 bits/key;
//! the deepest level gives up bits first; an average-bits/key budget spends what it says and
//! its filters keep absent lookups near the model's expected reads.

use lsm_bloom::{Db, FilterBudget, FilterKind, FilterPolicy, Options};

fn options(budget: FilterBudget) -> Options {
    Options {
        memtable_size: 64 * 1024,
        target_file_size: 64 * 1024,
        level1_max_bytes: 256 * 1024,
        size_ratio: 4,
        filter_budget: Some(budget),
        block_cache_bytes: 0, // every block a get looks at is a counted file read
        ..Options::default()
    }
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
    // At most the budget (headers included); less by what the plan keeps for the level-0
    // tables the next flushes will write (3 × ~1,100 keys at ~13 bits/key here) and by what
    // older, smaller filters left unspent.
    assert!(
        (4.0..=6.0).contains(&bits_per_key),
        "{bits_per_key} bits/key spent for a budget of 6"
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
    let expected: f64 = after
        .levels
        .iter()
        .filter(|l| l.tables > 0)
        .map(|l| match l.level {
            Some(0) => l.expected_fpr_sum,
            _ => l.expected_fpr_sum / l.tables as f64,
        })
        .sum();
    assert!(
        per_get <= 1.5 * expected + 0.002,
        "{per_get} reads per absent get, the filters held expect {expected}"
    );
}

#[test]
fn budget_with_per_level_overrides_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(FilterBudget::bits_per_key(8.0));
    opts.filter_policy_per_level.insert(
        1,
        Some(FilterPolicy::bits_per_key(FilterKind::Standard, 4.0)),
    );
    let e = Db::open(dir.path(), opts).err().unwrap();
    assert!(e.to_string().contains("filter_budget"), "{e}");
    let e = Db::open(dir.path(), options(FilterBudget::bits_per_key(f64::NAN)))
        .err()
        .unwrap();
    assert!(e.to_string().contains("bits/key"), "{e}");
}
