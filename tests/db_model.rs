//! Model test: random sequences of put / delete / get / scan / write batch / flush / compact /
//! reopen against a `BTreeMap`, with keys from a small space so overwrites and deletes of
//! existing keys are common. Any divergence fails with the seed and step.

mod common;

use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};

use common::{tiny_options, Rng};
use lsm_bloom::{Db, FilterKind, FilterPolicy, Filters, Options, WriteBatch};

fn key(rng: &mut Rng) -> Vec<u8> {
    format!("k{:04}", rng.below(400)).into_bytes()
}

fn value(rng: &mut Rng, step: usize) -> Vec<u8> {
    let len = rng.below(60) as usize;
    let mut v = format!("v{step}-").into_bytes();
    v.resize(v.len() + len, b'x');
    v
}

type Range = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// `k` as an included or excluded bound, or no bound.
fn bound(rng: &mut Rng, k: Vec<u8>) -> Bound<Vec<u8>> {
    match rng.below(5) {
        0..=1 => Bound::Included(k),
        2..=3 => Bound::Excluded(k),
        _ => Bound::Unbounded,
    }
}

/// The scan of `range`, read forward (`how` 0), backward (1, then put in key order) or from
/// both ends at random until they meet (2), as key order.
fn scan(d: &Db, range: Range, how: u64, rng: &mut Rng) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut it = d.scan(range).unwrap();
    match how {
        0 => it.map(Result::unwrap).collect(),
        1 => {
            let mut v: Vec<_> = it.rev().map(Result::unwrap).collect();
            v.reverse();
            v
        }
        _ => {
            let (mut front, mut back) = (Vec::new(), Vec::new());
            loop {
                let (side, item) = if rng.chance(50) {
                    (&mut front, it.next())
                } else {
                    (&mut back, it.next_back())
                };
                match item {
                    Some(kv) => side.push(kv.unwrap()),
                    None => break,
                }
            }
            // Once the ends meet, both are done.
            assert!(it.next().is_none() && it.next_back().is_none());
            back.reverse();
            front.extend(back);
            front
        }
    }
}

fn run(seed: u64, steps: usize, opts: Options) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed);
    let mut db = Some(Db::open(dir.path(), opts.clone()).unwrap());
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let (mut flushes, mut compactions) = (0, 0);
    for step in 0..steps {
        let d = db.as_ref().unwrap();
        let ctx = format!("seed {seed} step {step}");
        match rng.below(100) {
            0..=34 => {
                let (k, v) = (key(&mut rng), value(&mut rng, step));
                d.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            35..=44 => {
                let k = key(&mut rng);
                d.delete(&k).unwrap();
                model.remove(&k);
            }
            45..=74 => {
                let k = key(&mut rng);
                assert_eq!(
                    d.get(&k).unwrap(),
                    model.get(&k).cloned(),
                    "{ctx}: get {}",
                    String::from_utf8_lossy(&k)
                );
                assert_eq!(
                    d.get_with(&k, <[u8]>::to_vec).unwrap(),
                    model.get(&k).cloned(),
                    "{ctx}: get_with {}",
                    String::from_utf8_lossy(&k)
                );
            }
            75..=84 => {
                // Half the ranges span a few keys (what range filters answer), half any.
                let (mut a, mut b) = if rng.chance(50) {
                    let i = rng.below(400);
                    let near = (i + rng.below(4)).min(399);
                    (
                        format!("k{i:04}").into_bytes(),
                        format!("k{near:04}").into_bytes(),
                    )
                } else {
                    (key(&mut rng), key(&mut rng))
                };
                if a > b {
                    std::mem::swap(&mut a, &mut b);
                }
                let range = (bound(&mut rng, a), bound(&mut rng, b));
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .iter()
                    .filter(|(k, _)| range.contains(*k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let how = rng.below(3);
                let got = scan(d, range.clone(), how, &mut rng);
                assert_eq!(
                    got,
                    want,
                    "{ctx}: scan {range:?} ({})",
                    ["forward", "backward", "both ends"][how as usize]
                );
            }
            85..=92 => {
                let mut batch = WriteBatch::new();
                for _ in 0..rng.below(8) + 1 {
                    let k = key(&mut rng);
                    if rng.chance(30) {
                        batch.delete(k.clone());
                        model.remove(&k);
                    } else {
                        let v = value(&mut rng, step);
                        batch.put(k.clone(), v.clone());
                        model.insert(k, v);
                    }
                }
                d.write(batch).unwrap();
            }
            93..=95 => d.flush().unwrap(),
            96..=97 => d.compact().unwrap(),
            _ => {
                let s = d.stats();
                (flushes, compactions) = (flushes + s.flushes, compactions + s.compactions);
                db.take().unwrap().close().unwrap();
                db = Some(Db::open(dir.path(), opts.clone()).unwrap());
            }
        }
    }
    let d = db.unwrap();
    let all: Vec<(Vec<u8>, Vec<u8>)> = d
        .scan::<&[u8], _>(..)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
    assert_eq!(all, want, "seed {seed}: final full scan");
    let mut back: Vec<(Vec<u8>, Vec<u8>)> = d
        .scan::<&[u8], _>(..)
        .unwrap()
        .rev()
        .map(Result::unwrap)
        .collect();
    back.reverse();
    assert_eq!(back, want, "seed {seed}: final full scan backward");
    let s = d.stats();
    (flushes, compactions) = (flushes + s.flushes, compactions + s.compactions);
    assert!(
        flushes > 10 && compactions > 3,
        "seed {seed}: {flushes} flushes, {compactions} compactions"
    );
}

#[test]
fn model_blocked_filters() {
    let opts = tiny_options().with_filters(Some(Filters::fixed(FilterPolicy::default())));
    for seed in 1..=6 {
        run(seed, 2500, opts.clone());
    }
}

#[test]
fn model_filter_budgets() {
    // An average that grows with the store, and a total it soon outgrows (tables then get
    // few bits, or no filter at all on the deepest level).
    for (seed, budget) in [
        (200, lsm_bloom::FilterBudget::bits_per_key(6.0)),
        (201, lsm_bloom::FilterBudget::total_bytes(2048)),
        (
            202,
            lsm_bloom::FilterBudget::total_bytes(2048).with_kind(FilterKind::Standard),
        ),
        (203, lsm_bloom::FilterBudget::default()),
    ] {
        let mut opts = tiny_options();
        opts.filters = Some(Filters::Budget(budget));
        run(seed, 2500, opts);
    }
}

#[test]
fn model_standard_filters_and_per_level_overrides() {
    let mut opts = tiny_options();
    opts.filters = Some(
        Filters::fixed(FilterPolicy::bits_per_key(FilterKind::Standard, 7.5))
            .without_on(1) // level 1 without filters
            .with_level(
                2,
                Some(FilterPolicy::target_fpr(FilterKind::Blocked, 0.001)),
            )
            .with_level(3, Some(FilterPolicy::bits_per_key(FilterKind::Ribbon, 7.5))),
    );
    for seed in 100..=103 {
        run(seed, 2500, opts.clone());
    }
}

/// Range filters on: every scan asks each table it reaches first (keys `k0000`..`k0399`: the
/// points are their last digits, so the short ranges of this test are within the design).
#[test]
fn model_range_filters() {
    let mut opts = tiny_options();
    opts.range_filters = Some(lsm_bloom::RangeFilters::On(
        lsm_bloom::RangePolicy::bits_per_key(10.0, 1024).unwrap(),
    ));
    for seed in 300..=302 {
        run(seed, 2500, opts.clone());
    }
}

/// Parallel background jobs on a slow disk: syncs and table reads wait, so flushes and
/// compactions overlap in many orders while the model's reads, scans, manual compactions and
/// reopens go on.
#[test]
fn model_parallel_jobs_on_a_slow_disk() {
    let fs = lsm_bloom::fs::FaultyFs::new();
    fs.delay_syncs(std::time::Duration::from_micros(500));
    fs.delay_reads(std::time::Duration::from_micros(50));
    let opts = tiny_options()
        .with_background_threads(4)
        .with_fs(std::sync::Arc::new(fs));
    for seed in 400..=402 {
        run(seed, 2500, opts.clone());
    }
}

#[test]
fn model_without_filters() {
    let mut opts = tiny_options();
    opts.filters = Some(Filters::None);
    run(7, 2000, opts);
}

#[test]
fn empty_keys_and_values_and_size_limits() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny_options()).unwrap();
    db.put(b"", b"empty key").unwrap();
    db.put(b"k", b"").unwrap();
    db.flush().unwrap();
    assert_eq!(db.get(b"").unwrap(), Some(b"empty key".to_vec()));
    assert_eq!(db.get(b"k").unwrap(), Some(Vec::new()));
    assert_eq!(db.get_with(b"k", <[u8]>::len).unwrap(), Some(0));
    let big_key = vec![0u8; lsm_bloom::db::MAX_KEY_SIZE + 1];
    let e = db.put(&big_key, b"v").unwrap_err();
    assert!(e.to_string().contains("key of 16385 bytes"), "{e}");
    let big_value = vec![0u8; lsm_bloom::db::MAX_VALUE_SIZE + 1];
    assert!(db
        .put(b"k", &big_value)
        .unwrap_err()
        .to_string()
        .contains("value of"));
    assert_eq!(
        db.get(b"k").unwrap(),
        Some(Vec::new()),
        "a rejected write changes nothing"
    );
}

#[test]
fn second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _db = Db::open(dir.path(), Options::default()).unwrap();
    let e = Db::open(dir.path(), Options::default())
        .err()
        .expect("second open must fail");
    assert!(e.to_string().contains("already open"), "{e}");
}

#[test]
fn bad_options_are_rejected_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let e = Db::open(dir.path(), Options::default().with_block_size(1))
        .err()
        .unwrap();
    assert!(e.to_string().contains("block_size"), "{e}");
    let bad_filter = Options::default().with_filters(Some(Filters::fixed(
        FilterPolicy::bits_per_key(FilterKind::Blocked, -1.0),
    )));
    assert!(Db::open(dir.path(), bad_filter)
        .err()
        .unwrap()
        .to_string()
        .contains("bits per key"));
}
