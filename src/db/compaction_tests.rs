//! Tests of `compaction.rs`.
use super::*;
use crate::table::TableBuilderOptions;

/// Input table `id` at `dir` holding `keys` with value `tag`, or tombstones for `None`.
fn input(dir: &Path, id: u64, keys: &[u32], tag: Option<&[u8]>) -> Arc<Table> {
    let path = table_path(dir, id);
    let mut b = TableBuilder::create(&path, TableBuilderOptions::default()).unwrap();
    for k in keys {
        b.add(format!("key{k:06}").as_bytes(), tag).unwrap();
    }
    b.finish().unwrap();
    Arc::new(Table::open(&path, id).unwrap())
}

/// `run` into level 1 with file numbers from 11 on.
fn run_numbered(job: &Job, dir: &Path, opts: &Options) -> Output {
    let mut next = 10;
    run(job, dir, opts, opts.filters_for_level(1), &mut || {
        next += 1;
        Ok(next)
    })
    .unwrap()
}

/// A compaction into many output tables (each finished on the second thread while the
/// next fills): outputs in key order with disjoint ranges, every key once with its newest
/// value, tombstones dropped, and each output readable through its filter.
#[test]
fn many_outputs_come_back_in_key_order_with_the_newest_values() {
    let dir = tempfile::tempdir().unwrap();
    let evens: Vec<u32> = (0..6_000).map(|i| i * 2).collect();
    let threes: Vec<u32> = (0..4_000).map(|i| i * 3).collect();
    let fives: Vec<u32> = (0..2_400).map(|i| i * 5).collect();
    let job = Job {
        keyspace: 0,
        inputs: vec![
            (1, input(dir.path(), 1, &evens, Some(b"old"))),
            (0, input(dir.path(), 2, &threes, Some(b"mid"))),
            (0, input(dir.path(), 3, &fives, None)),
        ],
        output_level: 1,
        drop_tombstones: true,
        below: None,
        expired: false,
    };
    let opts = Options::default()
        .with_target_file_size(8 * 1024)
        .with_filters(Some(super::super::filters::Filters::fixed(
            crate::filter::FilterPolicy::default(),
        )));
    let out = run_numbered(&job, dir.path(), &opts);
    assert!(out.tables.len() > 10, "{} outputs", out.tables.len());
    for w in out.tables.windows(2) {
        assert!(w[0].max_key() < w[1].min_key());
    }
    let mut model = std::collections::BTreeMap::new();
    for (keys, v) in [
        (&evens, Some("old")),
        (&threes, Some("mid")),
        (&fives, None),
    ] {
        for k in keys {
            model.insert(format!("key{k:06}"), v);
        }
    }
    model.retain(|_, v| v.is_some());
    let mut seen = 0;
    for t in &out.tables {
        let mut stats = crate::table::TableReadStats::default();
        for e in t.iter(std::ops::Bound::Unbounded) {
            let e = e.unwrap();
            let key = String::from_utf8(e.key.clone()).unwrap();
            let want = model.get(&key).copied().flatten().map(str::as_bytes);
            assert_eq!(e.value.as_deref(), want, "{key}");
            let crate::table::FilterState::Valid(f) = t.filter() else {
                panic!("output {} has no filter", t.id());
            };
            assert!(f.may_contain(&e.key), "{key}: filter says absent");
            assert_eq!(t.get(&e.key, &mut stats, None).unwrap(), Some(e.value));
            seen += 1;
        }
    }
    assert_eq!(seen, model.len());
    assert_eq!(
        out.bytes_written,
        out.tables.iter().map(|t| t.file_size()).sum::<u64>()
    );
}

/// The debt: nothing while every level is under its limit; level 0 at its trigger owes
/// itself and level 1; a level over its limit owes its excess times the fan-out below it,
/// plus what it carries on into a level it overfills in turn.
#[test]
fn pending_bytes_follows_the_levels() {
    let dir = tempfile::tempdir().unwrap();
    let keys = |lo: u32, n: u32| (lo..lo + n).collect::<Vec<u32>>();
    let l1a = input(dir.path(), 1, &keys(0, 2_000), Some(b"v"));
    let l1b = input(dir.path(), 2, &keys(2_000, 2_000), Some(b"v"));
    let l2 = input(dir.path(), 3, &keys(0, 8_000), Some(b"v"));
    let l0: Vec<_> = (10..14)
        .map(|id| input(dir.path(), id, &keys(0, 500), Some(b"v")))
        .collect();
    let size = |ts: &[&Arc<Table>]| ts.iter().map(|t| t.file_size()).sum::<u64>() as f64;
    let (s1, s2, s0) = (
        size(&[&l1a, &l1b]),
        size(&[&l2]),
        size(&l0.iter().collect::<Vec<_>>()),
    );
    // Level 1 holds half its bytes, level 2 far more than it.
    let opts = Options::default()
        .with_l0_compaction_trigger(4)
        .with_level1_max_bytes((s1 * 2.0) as u64)
        .with_size_ratio(100);
    let mut v = Version::empty();
    v.edit(|levels| {
        levels[1] = vec![l1a.clone(), l1b.clone()];
        levels[2] = vec![l2.clone()];
        levels[0] = l0[..3].to_vec();
    });
    assert_eq!(pending_bytes(&v, &opts), 0, "three tables, trigger four");
    // At the trigger: level 0 and level 1 rewritten; level 1 then holds s1 + s0, under 2 × s1.
    v.edit(|levels| levels[0].push(l0[3].clone()));
    assert!(s0 < s1, "the test's sizes");
    assert_eq!(pending_bytes(&v, &opts), (s0 + s1) as u64);
    // Level 1 over a limit of half its size: its excess, times the fan-out into level 2
    // plus one, on top of level 0's part, which it carries along.
    let opts = opts.with_level1_max_bytes((s1 / 2.0) as u64);
    let here = s1 + s0;
    let excess = here - (s1 / 2.0) as u64 as f64;
    let want = s0 + s1 + excess * (s2 / here + 1.0);
    let got = pending_bytes(&v, &opts) as f64;
    assert!((got - want).abs() <= 2.0, "{got} against {want}");
    // Without level 0's part; and with nothing under level 1, the excess moves once.
    v.edit(|levels| levels[0].clear());
    let excess = s1 - (s1 / 2.0) as u64 as f64;
    let got = pending_bytes(&v, &opts) as f64;
    assert!((got - excess * (s2 / s1 + 1.0)).abs() <= 2.0, "{got}");
    v.edit(|levels| levels[2].clear());
    let got = pending_bytes(&v, &opts) as f64;
    assert!((got - excess).abs() <= 2.0, "{got}");
}

/// A job that must keep tombstones (levels below its output hold data) still drops those no
/// table below may hold: one whose range holds the key and whose filter says "maybe" (or that
/// has no filter) keeps it.
#[test]
fn tombstones_over_keys_no_level_below_may_hold_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let tens: Vec<u32> = (0..100).map(|i| i * 10).collect();
    let filtered = {
        let path = table_path(dir.path(), 2);
        let opts = TableBuilderOptions::default()
            .with_filter(Some(crate::filter::FilterPolicy::default()));
        let mut b = TableBuilder::create(&path, opts).unwrap();
        for k in &tens {
            b.add(format!("key{k:06}").as_bytes(), Some(b"old"))
                .unwrap();
        }
        b.finish().unwrap();
        Arc::new(Table::open(&path, 2).unwrap())
    };
    let unfiltered_keys: Vec<u32> = (2_000..2_100).collect();
    let unfiltered = input(dir.path(), 3, &unfiltered_keys, Some(b"old"));
    let mut below = Version::empty();
    below.edit(|levels| {
        levels[2].push(filtered);
        levels[3].push(unfiltered);
    });
    let deleted: Vec<u32> = (0..1_000).chain(2_000..2_100).chain(5_000..5_100).collect();
    let job = Job {
        keyspace: 0,
        inputs: vec![(0, input(dir.path(), 1, &deleted, None))],
        output_level: 1,
        drop_tombstones: false,
        below: Some(Arc::new(below)),
        expired: false,
    };
    let opts = Options::default();
    let out = run_numbered(&job, dir.path(), &opts);
    let kept: std::collections::BTreeSet<u32> = out
        .tables
        .iter()
        .flat_map(|t| t.iter(std::ops::Bound::Unbounded))
        .map(|e| {
            let e = e.unwrap();
            assert_eq!(e.value, None);
            std::str::from_utf8(&e.key[3..]).unwrap().parse().unwrap()
        })
        .collect();
    // Over level 2's keys (its filter holds them) and level 3's (no filter): kept.
    for k in tens.iter().chain(&unfiltered_keys) {
        assert!(kept.contains(k), "tombstone {k} dropped");
    }
    // Past every table below: dropped. Inside level 2's range but not its keys: dropped
    // unless its filter errs (about 1%).
    assert!(!(5_000..5_100).any(|k| kept.contains(&k)));
    let errs = (0..1_000)
        .filter(|k| k % 10 != 0 && kept.contains(k))
        .count();
    assert!(
        errs < 45,
        "{errs} of 900 tombstones kept on the filter's word"
    );
}
