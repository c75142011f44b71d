//! Range deletes (`WriteBatch::delete_range`, docs/range-deletes.md): a model test with
//! ranges of every bound kind mixed into puts, deletes, batches, flushes, compactions,
//! snapshots and reopens, read back by get, multi_get and scans both ways; and what a range
//! delete costs: one log operation, no table read below a covering range, and the space back
//! once compacted.

mod common;

use std::collections::BTreeMap;
use std::ops::{Bound, RangeBounds};

use common::{tiny_options, Rng};
use lsm_bloom::{Db, Options, RangeFilters, Snapshot, WriteBatch};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
type Range = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Keys in the space: enough, with the values' lengths, to fill two or three levels.
const KEYS: u64 = 2000;

fn key(rng: &mut Rng) -> Vec<u8> {
    format!("k{:04}", rng.below(KEYS)).into_bytes()
}

/// `k` as an included or excluded bound, or (rarely: it reaches far) no bound.
fn bound(rng: &mut Rng, k: Vec<u8>) -> Bound<Vec<u8>> {
    match rng.below(40) {
        0..=19 => Bound::Included(k),
        20..=38 => Bound::Excluded(k),
        _ => Bound::Unbounded,
    }
}

/// A range over a few keys or many, sometimes reversed or empty.
fn range(rng: &mut Rng) -> Range {
    let (mut a, mut b) = if rng.chance(95) {
        let i = rng.below(KEYS);
        let near = (i + rng.below(30)).min(KEYS - 1);
        (
            format!("k{i:04}").into_bytes(),
            format!("k{near:04}").into_bytes(),
        )
    } else {
        (key(rng), key(rng))
    };
    if a > b && rng.chance(90) {
        std::mem::swap(&mut a, &mut b);
    }
    (bound(rng, a), bound(rng, b))
}

/// Where the model's reads are checked: the store now, or a snapshot with its model.
fn check(get: impl Fn(&[u8]) -> Option<Vec<u8>>, model: &Model, rng: &mut Rng, ctx: &str) {
    for _ in 0..8 {
        let k = key(rng);
        assert_eq!(get(&k), model.get(&k).cloned(), "{ctx}: get {:?}", k);
    }
}

fn scan_both_ways(scan: impl Fn(&Range) -> lsm_bloom::DbIter, model: &Model, r: &Range, ctx: &str) {
    let want: Vec<(Vec<u8>, Vec<u8>)> = model
        .iter()
        .filter(|(k, _)| r.contains(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let fwd: Vec<_> = scan(r).map(Result::unwrap).collect();
    same(&fwd, &want, &format!("{ctx}: scan {r:?} forward"));
    let mut back: Vec<_> = scan(r).rev().map(Result::unwrap).collect();
    back.reverse();
    same(&back, &want, &format!("{ctx}: scan {r:?} backward"));
}

/// Fails naming the first entry where `got` and `want` part, not printing both whole.
fn same(got: &[(Vec<u8>, Vec<u8>)], want: &[(Vec<u8>, Vec<u8>)], ctx: &str) {
    if let Some(i) = (0..got.len().max(want.len())).find(|&i| got.get(i) != want.get(i)) {
        let show = |e: Option<&(Vec<u8>, Vec<u8>)>| {
            e.map(|(k, v)| {
                format!(
                    "{} = {}",
                    String::from_utf8_lossy(k),
                    String::from_utf8_lossy(&v[..v.len().min(12)])
                )
            })
        };
        panic!(
            "{ctx}: entry {i}: got {:?}, want {:?} ({} against {} entries)",
            show(got.get(i)),
            show(want.get(i)),
            got.len(),
            want.len()
        );
    }
}

fn delete_model_range(model: &mut Model, r: &Range) {
    model.retain(|k, _| !r.contains(k));
}

fn run(seed: u64, steps: usize, opts: Options) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed);
    let mut db = Some(Db::open(dir.path(), opts.clone()).unwrap());
    let mut model = Model::new();
    let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
    let mut ranges = 0;
    for step in 0..steps {
        let d = db.as_ref().unwrap();
        let ctx = format!("seed {seed} step {step}");
        match rng.below(100) {
            0..=39 => {
                let k = key(&mut rng);
                // Values long enough that the keys fill several tables per level.
                let mut v = format!("v{step}-").into_bytes();
                v.resize(v.len() + rng.below(200) as usize, b'x');
                d.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            40..=44 => {
                let k = key(&mut rng);
                d.delete(&k).unwrap();
                model.remove(&k);
            }
            45..=52 => {
                let r = range(&mut rng);
                d.delete_range(r.clone()).unwrap();
                delete_model_range(&mut model, &r);
                ranges += 1;
            }
            53..=58 => {
                // A batch: puts and deletes around a range; the puts after it stay.
                let mut b = WriteBatch::new();
                for _ in 0..rng.below(6) + 1 {
                    match rng.below(3) {
                        0 => {
                            let r = range(&mut rng);
                            b.delete_range(r.clone());
                            delete_model_range(&mut model, &r);
                        }
                        1 => {
                            let k = key(&mut rng);
                            b.delete(k.clone());
                            model.remove(&k);
                        }
                        _ => {
                            let k = key(&mut rng);
                            let v = format!("b{step}").into_bytes();
                            b.put(k.clone(), v.clone());
                            model.insert(k, v);
                        }
                    }
                }
                d.write(b).unwrap();
            }
            59..=72 => check(|k| d.get(k).unwrap(), &model, &mut rng, &ctx),
            73..=76 => {
                let keys: Vec<Vec<u8>> = (0..12).map(|_| key(&mut rng)).collect();
                let got: Vec<Option<Vec<u8>>> =
                    d.multi_get(&keys).into_iter().map(Result::unwrap).collect();
                let want: Vec<Option<Vec<u8>>> =
                    keys.iter().map(|k| model.get(k).cloned()).collect();
                assert_eq!(got, want, "{ctx}: multi_get {keys:?}");
            }
            77..=84 => {
                let r = range(&mut rng);
                scan_both_ways(|r| d.scan(r.clone()).unwrap(), &model, &r, &ctx);
            }
            85..=87 => {
                if snaps.len() < 3 {
                    snaps.push((d.snapshot(), model.clone()));
                } else {
                    let (s, m) = snaps.remove(rng.below(3) as usize);
                    check(
                        |k| s.get(k).unwrap(),
                        &m,
                        &mut rng,
                        &format!("{ctx} snapshot"),
                    );
                    let r = range(&mut rng);
                    scan_both_ways(
                        |r| s.scan(r.clone()).unwrap(),
                        &m,
                        &r,
                        &format!("{ctx} snapshot"),
                    );
                }
            }
            88..=95 => d.flush().unwrap(),
            96 => d.compact().unwrap(),
            97 => {
                // A checkpoint keeps the memtables' ranges: it opens as the model.
                let to = tempfile::tempdir().unwrap();
                d.checkpoint(to.path().join("copy")).unwrap();
                let copy = Db::open(to.path().join("copy"), opts.clone()).unwrap();
                let all = (Bound::Unbounded, Bound::Unbounded);
                scan_both_ways(|r| copy.scan(r.clone()).unwrap(), &model, &all, &ctx);
            }
            _ => {
                snaps.clear();
                db.take().unwrap().close().unwrap();
                db = Some(Db::open(dir.path(), opts.clone()).unwrap());
            }
        }
    }
    let d = db.unwrap();
    let all = (Bound::Unbounded, Bound::Unbounded);
    scan_both_ways(
        |r| d.scan(r.clone()).unwrap(),
        &model,
        &all,
        &format!("seed {seed} end"),
    );
    d.compact().unwrap();
    scan_both_ways(
        |r| d.scan(r.clone()).unwrap(),
        &model,
        &all,
        &format!("seed {seed} compacted"),
    );
    assert!(ranges > steps / 20, "seed {seed}: {ranges} ranges deleted");
}

#[test]
fn range_deletes_follow_a_model_through_flushes_compactions_snapshots_and_reopens() {
    for seed in 1..=6 {
        run(seed, 3000, tiny_options());
    }
}

#[test]
fn range_deletes_follow_a_model_with_range_filters() {
    let opts = tiny_options().with_range_filters(Some(RangeFilters::default()));
    for seed in 11..=13 {
        run(seed, 3000, opts.clone());
    }
}

/// `n` keys `key000000`.., value `v`, written and compacted into the deeper levels.
fn loaded(dir: &std::path::Path, n: u32, opts: Options) -> Db {
    let db = Db::open(dir, opts).unwrap();
    let mut b = WriteBatch::new();
    for i in 0..n {
        b.put(format!("key{i:06}"), "v");
    }
    db.write(b).unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    db
}

/// A get of a key a newer table's range covers reads no block below that table (the filters
/// below, in memory, may be asked first: a key no filter holds needs no look at the ranges).
#[test]
fn a_covering_range_stops_a_lookup_before_the_tables_below() {
    let dir = tempfile::tempdir().unwrap();
    let db = loaded(dir.path(), 20_000, Options::default());
    let deep: u64 = db.stats().levels[1..].iter().map(|l| l.tables).sum();
    assert!(deep > 0);
    db.delete_range("key001000".as_bytes().."key015000".as_bytes())
        .unwrap();
    db.flush().unwrap();
    assert_eq!(db.stats().levels[0].tables, 1, "the range's table");
    // Blocks read below level 0, from the file or the cache.
    let reads = |s: &lsm_bloom::DbStats| -> u64 {
        s.levels[1..]
            .iter()
            .map(|l| l.data_block_reads)
            .sum::<u64>()
            + s.block_cache_hits
    };
    let before = db.stats();
    for i in (1_000..15_000).step_by(7) {
        assert_eq!(db.get(format!("key{i:06}")).unwrap(), None);
    }
    let after = db.stats();
    assert_eq!(
        reads(&after),
        reads(&before),
        "blocks read for deleted keys"
    );
    let probed: u64 = (1..after.levels.len())
        .map(|l| after.levels[l].filter_positive - before.levels[l].filter_positive)
        .sum();
    assert!(
        probed > 1_000,
        "the deleted keys' filters said maybe {probed} times"
    );
    // Keys outside the range still read through.
    assert_eq!(db.get("key000999").unwrap(), Some(b"v".to_vec()));
    assert_eq!(db.get("key015000").unwrap(), Some(b"v".to_vec()));
    let mid = db.stats();
    let got: Vec<Option<Vec<u8>>> = db
        .multi_get(&["key000999", "key001000", "key014999", "key015000"])
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let v = Some(b"v".to_vec());
    assert_eq!(got, [v.clone(), None, None, v]);
    // Two of the four keys lie in the range: only the other two read a block below it.
    assert_eq!(reads(&db.stats()) - reads(&mid), 2);
}

/// Deleting a million contiguous keys is one log operation of a few bytes; once compacted
/// the space comes back: no table is left.
#[test]
fn a_range_delete_is_one_operation_and_compaction_gives_the_space_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = loaded(dir.path(), 50_000, Options::default());
    let mut b = WriteBatch::new();
    b.delete_range("key".as_bytes().."kez".as_bytes());
    assert_eq!(b.len(), 1);
    assert!(b.encoded_len() < 32, "{}", b.encoded_len());
    db.write(b).unwrap();
    assert_eq!(db.iter().count(), 0);
    db.flush().unwrap();
    db.compact().unwrap();
    let s = db.stats();
    let tables: u64 = s.levels.iter().map(|l| l.tables).sum();
    assert_eq!(tables, 0, "{:?}", s.levels);
    assert_eq!(db.get("key000001").unwrap(), None);
}

/// A store that writes an older table format refuses a range delete with an error naming
/// the format; the first range delete makes the manifest version 4, which builds before
/// range deletes refuse (they would take the log's operation for damage).
#[test]
fn range_deletes_need_format_6_and_raise_the_manifest_to_version_4() {
    let dir = tempfile::tempdir().unwrap();
    let old = Db::open(dir.path(), Options::default().with_table_format_version(5)).unwrap();
    let e = old
        .delete_range("a".as_bytes().."b".as_bytes())
        .unwrap_err();
    assert!(e.to_string().contains("table format 6"), "{e}");
    old.close().unwrap();
    let manifest = || std::fs::read(dir.path().join("MANIFEST")).unwrap()[4];
    assert!(manifest() < 4);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put("a1", "v").unwrap();
    db.delete_range("a".as_bytes().."b".as_bytes()).unwrap();
    assert_eq!(manifest(), 4);
    db.close().unwrap();
    // The range survives a reopen from the log alone.
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get("a1").unwrap(), None);
}

/// A range deleted in one keyspace leaves the same keys of another alone.
#[test]
fn a_range_delete_stays_in_its_keyspace() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny_options()).unwrap();
    let ks = db
        .create_keyspace("other", lsm_bloom::KeyspaceOptions::default())
        .unwrap();
    for i in 0..300 {
        let k = format!("k{i:03}");
        db.put(&k, "d").unwrap();
        ks.put(&k, "o").unwrap();
    }
    db.flush().unwrap();
    let mut b = WriteBatch::new();
    b.delete_range_in(&ks, "k100".as_bytes()..="k199".as_bytes());
    b.put_in(&ks, "k150", "after");
    db.write(b).unwrap();
    for round in 0..2 {
        for i in 0..300 {
            let k = format!("k{i:03}");
            assert_eq!(db.get(&k).unwrap(), Some(b"d".to_vec()), "{round} {k}");
            let want = match i {
                150 => Some(b"after".to_vec()),
                100..=199 => None,
                _ => Some(b"o".to_vec()),
            };
            assert_eq!(ks.get(&k).unwrap(), want, "{round} {k}");
        }
        assert_eq!(ks.iter().unwrap().count(), 201);
        db.flush().unwrap();
        db.compact().unwrap();
    }
}

/// A compaction does not read an input that one range of a newer input holds whole: its
/// every entry is deleted. Here the keys' table (10^4 keys) and the table of the range over
/// them are compacted together, and the compaction reads only the range's table.
#[test]
fn a_compaction_skips_a_table_a_newer_range_holds_whole() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default()
        .with_idle_compaction_after(None)
        .with_l0_compaction_trigger(8);
    let db = Db::open(dir.path(), opts).unwrap();
    let mut b = WriteBatch::new();
    for i in 0..10_000 {
        b.put(format!("key{i:06}"), [b'v'; 100]);
    }
    db.write(b).unwrap();
    db.flush().unwrap();
    let keys_table = db.stats().total.table_bytes;
    db.delete_range("key".as_bytes().."kez".as_bytes()).unwrap();
    db.flush().unwrap();
    assert_eq!(db.stats().levels[0].tables, 2);
    let range_table = db.stats().total.table_bytes - keys_table;
    db.compact().unwrap();
    let s = db.stats();
    assert_eq!(
        s.compaction_bytes_read, range_table,
        "keys' table: {keys_table} bytes"
    );
    assert_eq!(s.total.tables, 0, "{:?}", s.levels);
    assert_eq!(db.iter().count(), 0);
}

/// A store that deleted ranges and is reopened told to write table format 5 still flushes
/// and compacts its ranges (in format 6, which its manifest already requires) and refuses
/// new range deletes.
#[test]
fn ranges_written_before_survive_a_reopen_that_asks_for_format_5() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), tiny_options()).unwrap();
    for i in 0..200 {
        db.put(format!("k{i:03}"), "v").unwrap();
    }
    db.flush().unwrap();
    db.delete_range("k050".as_bytes().."k150".as_bytes())
        .unwrap();
    db.close().unwrap();
    let old = tiny_options().with_table_format_version(5);
    let db = Db::open(dir.path(), old.clone()).unwrap();
    assert!(db
        .delete_range("k000".as_bytes().."k001".as_bytes())
        .is_err());
    db.put("k999", "v").unwrap();
    db.flush().unwrap();
    db.compact().unwrap();
    for i in 0..200 {
        let want = (!(50..150).contains(&i)).then(|| b"v".to_vec());
        assert_eq!(db.get(format!("k{i:03}")).unwrap(), want, "k{i:03}");
    }
    assert_eq!(db.iter().count(), 101);
}

/// A scan passes over, unopened, every table a newer range holds whole: over 20,000 keys in
/// the deeper levels all deleted by one range, a full scan (either way) reads no block there.
#[test]
fn a_scan_passes_over_tables_a_newer_range_holds_whole() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default()
        .with_idle_compaction_after(None)
        .with_target_file_size(64 * 1024);
    let db = loaded(dir.path(), 20_000, opts);
    let deep = |s: &lsm_bloom::DbStats| -> u64 {
        s.levels[1..]
            .iter()
            .map(|l| l.scan_block_reads + l.scan_block_cache_hits)
            .sum()
    };
    assert!(db.stats().levels[1..].iter().map(|l| l.tables).sum::<u64>() > 4);
    let before = deep(&db.stats());
    assert_eq!(db.scan("key".as_bytes()..).unwrap().count(), 20_000);
    let whole = deep(&db.stats()) - before;
    // Half the keys first: the tables inside the range are passed over, the two at its
    // edges read.
    db.delete_range("key005000".as_bytes().."key015000".as_bytes())
        .unwrap();
    db.flush().unwrap();
    let before = deep(&db.stats());
    assert_eq!(db.scan("key".as_bytes()..).unwrap().count(), 10_000);
    let part = deep(&db.stats()) - before;
    db.delete_range("key".as_bytes().."kez".as_bytes()).unwrap();
    db.flush().unwrap();
    let before = deep(&db.stats());
    assert_eq!(db.iter().count(), 0);
    assert_eq!(db.iter().rev().count(), 0);
    assert_eq!(deep(&db.stats()), before, "blocks read below the range");
    assert!(
        part < whole * 3 / 4,
        "{part} blocks for half the keys, {whole} for all"
    );
}
