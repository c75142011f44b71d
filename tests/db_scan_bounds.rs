//! Scan bounds against a model: every combination of `Included` / `Excluded` / `Unbounded`
//! start and end, over every pair of bound keys from a set that includes equal, reversed,
//! present, absent, before-everything and after-everything keys — with the data spread over
//! tables, an immutable memtable waiting for its flush (held there by `FaultyFs`) and the
//! mutable memtable, then again once everything is flushed and once fully compacted.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use common::{tiny_options, Rng};
use lsm_bloom::fs::FaultyFs;
use lsm_bloom::Db;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u64) -> Vec<u8> {
    format!("k{i:02}").into_bytes()
}

fn write(db: &Db, model: &mut Model, rng: &mut Rng, n: usize, tag: &str) {
    for _ in 0..n {
        let k = key(rng.below(40));
        if rng.chance(25) {
            db.delete(&k).unwrap();
            model.remove(&k);
        } else {
            let v = format!("{tag}-{}", "v".repeat(rng.below(60) as usize)).into_bytes();
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
}

fn in_bound(k: &[u8], start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> bool {
    let after = match start {
        Bound::Included(s) => k >= s.as_slice(),
        Bound::Excluded(s) => k > s.as_slice(),
        Bound::Unbounded => true,
    };
    let before = match end {
        Bound::Included(e) => k <= e.as_slice(),
        Bound::Excluded(e) => k < e.as_slice(),
        Bound::Unbounded => true,
    };
    after && before
}

/// Checks every bound combination; returns how many scans were compared.
fn check_all_bounds(db: &Db, model: &Model, stage: &str) -> usize {
    let mut points: Vec<Vec<u8>> = vec![b"".to_vec(), b"a".to_vec(), b"k".to_vec(), b"z".to_vec()];
    for i in [0, 1, 7, 13, 20, 21, 33, 39] {
        points.push(key(i));
        let mut between = key(i);
        between.push(b'5');
        points.push(between);
    }
    let bounds = |k: &Vec<u8>| {
        [
            Bound::Included(k.clone()),
            Bound::Excluded(k.clone()),
            Bound::Unbounded,
        ]
    };
    let mut scans = 0;
    for a in &points {
        for b in &points {
            for start in bounds(a) {
                for end in bounds(b) {
                    let got: Vec<(Vec<u8>, Vec<u8>)> = db
                        .scan((start.clone(), end.clone()))
                        .unwrap()
                        .map(|r| r.unwrap())
                        .collect();
                    let want: Vec<(Vec<u8>, Vec<u8>)> = model
                        .iter()
                        .filter(|(k, _)| in_bound(k, &start, &end))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    assert_eq!(got, want, "{stage}: scan({start:?}, {end:?})");
                    let mut back: Vec<(Vec<u8>, Vec<u8>)> = db
                        .scan((start.clone(), end.clone()))
                        .unwrap()
                        .rev()
                        .map(|r| r.unwrap())
                        .collect();
                    back.reverse();
                    assert_eq!(back, want, "{stage}: reverse scan({start:?}, {end:?})");
                    scans += 2;
                }
            }
        }
    }
    scans
}

#[test]
fn every_bound_combination_matches_the_model_in_every_place_data_lives() {
    let mut scans = 0;
    for seed in 1..=3 {
        let mut rng = Rng::new(seed);
        let dir = tempfile::tempdir().unwrap();
        let fs = FaultyFs::new();
        let opts = tiny_options()
            .with_fs(Arc::new(fs.clone()))
            .with_max_immutable_memtables(4);
        let db = Db::open(dir.path(), opts).unwrap();
        let mut model = Model::new();
        // Tables on several levels.
        write(&db, &mut model, &mut rng, 300, "t");
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        write(&db, &mut model, &mut rng, 30, "l0");
        db.flush().unwrap();
        // An immutable memtable whose flush cannot finish yet, then the mutable memtable.
        fs.hold_table_creates(true);
        let mem_limit = 4 * 1024;
        let mut written = 0;
        while written < mem_limit + 200 {
            write(&db, &mut model, &mut rng, 1, "imm");
            written += 100;
        }
        write(&db, &mut model, &mut rng, 60, "imm");
        write(&db, &mut model, &mut rng, 15, "mem");
        let s = db.stats();
        assert!(s.levels.iter().map(|l| l.tables).sum::<u64>() >= 2, "{s:?}");
        assert!(s.immutable_memtables >= 1, "no immutable memtable: {s:?}");
        scans += check_all_bounds(&db, &model, &format!("seed {seed}, spread"));
        fs.hold_table_creates(false);
        db.flush().unwrap();
        scans += check_all_bounds(&db, &model, &format!("seed {seed}, flushed"));
        db.compact().unwrap();
        scans += check_all_bounds(&db, &model, &format!("seed {seed}, compacted"));
    }
    println!("{scans} scans compared with the model");
    assert!(scans > 20_000);
}
