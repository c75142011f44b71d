//! `DbCursor` against a model (a `BTreeMap`): random writes and deletes spread over memtables,
//! level 0 and deeper levels, then random moves — seeks both ways, walks both ways, turns,
//! runs off either end — within random bounds, each compared with the model; a snapshot's
//! cursor keeps seeing its moment; a damaged block ends a walk with its error.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use common::{tiny_options, Rng};
use lsm_bloom::fs::{FaultyFs, ReadFault};
use lsm_bloom::{Db, DbCursor, Options};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u64) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

/// The model's entries within the bounds (none when they cross).
fn inside<'m>(
    m: &'m Model,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
) -> impl DoubleEndedIterator<Item = (&'m Vec<u8>, &'m Vec<u8>)> {
    let (lo, hi) = (lo.clone(), hi.clone());
    m.iter().filter(move |(k, _)| {
        let above = match &lo {
            Bound::Included(l) => *k >= l,
            Bound::Excluded(l) => *k > l,
            Bound::Unbounded => true,
        };
        let below = match &hi {
            Bound::Included(h) => *k <= h,
            Bound::Excluded(h) => *k < h,
            Bound::Unbounded => true,
        };
        above && below
    })
}

/// The model's entry where a cursor should be after each kind of move.
fn first_from(
    m: &Model,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    from: Bound<&Vec<u8>>,
) -> Option<Vec<u8>> {
    inside(m, lo, hi)
        .find(|(k, _)| match from {
            Bound::Included(f) => *k >= f,
            Bound::Excluded(f) => *k > f,
            Bound::Unbounded => true,
        })
        .map(|(k, _)| k.clone())
}

fn last_to(
    m: &Model,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    to: Bound<&Vec<u8>>,
) -> Option<Vec<u8>> {
    inside(m, lo, hi)
        .rev()
        .find(|(k, _)| match to {
            Bound::Included(t) => *k <= t,
            Bound::Excluded(t) => *k < t,
            Bound::Unbounded => true,
        })
        .map(|(k, _)| k.clone())
}

fn random_bound(rng: &mut Rng, keys: u64) -> Bound<Vec<u8>> {
    match rng.below(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(rng.below(keys))),
        _ => Bound::Excluded(key(rng.below(keys))),
    }
}

/// Random moves of `c` (made with bounds `lo`, `hi` over `m`'s moment), each checked.
fn check_moves(
    c: &mut DbCursor,
    m: &Model,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    rng: &mut Rng,
    keys: u64,
    moves: usize,
) {
    let mut at: Option<Vec<u8>> = None;
    for step in 0..moves {
        let (what, on, want) = match rng.below(10) {
            0 | 1 => {
                let k = key(rng.below(keys + 2));
                let on = c.seek(&k).unwrap();
                (
                    format!("seek {k:?}"),
                    on,
                    first_from(m, lo, hi, Bound::Included(&k)),
                )
            }
            2 => {
                let k = key(rng.below(keys + 2));
                let on = c.seek_for_prev(&k).unwrap();
                (
                    format!("seek_for_prev {k:?}"),
                    on,
                    last_to(m, lo, hi, Bound::Included(&k)),
                )
            }
            3 => (
                "seek_to_first".into(),
                c.seek_to_first().unwrap(),
                first_from(m, lo, hi, Bound::Unbounded),
            ),
            4 => (
                "seek_to_last".into(),
                c.seek_to_last().unwrap(),
                last_to(m, lo, hi, Bound::Unbounded),
            ),
            5..=7 => {
                let want = at
                    .as_ref()
                    .and_then(|a| first_from(m, lo, hi, Bound::Excluded(a)));
                ("next".into(), c.next().unwrap(), want)
            }
            _ => {
                let want = at
                    .as_ref()
                    .and_then(|a| last_to(m, lo, hi, Bound::Excluded(a)));
                ("prev".into(), c.prev().unwrap(), want)
            }
        };
        let ctx = format!("move {step}: {what} from {at:?} within {lo:?}..{hi:?}");
        assert_eq!(c.key().map(<[u8]>::to_vec), want, "{ctx}");
        assert_eq!(on, want.is_some(), "{ctx}");
        assert_eq!(c.valid(), on, "{ctx}");
        if let Some(k) = &want {
            assert_eq!(c.value(), Some(m[k].as_slice()), "{ctx}");
            assert_eq!(c.entry(), Some((k.as_slice(), m[k].as_slice())), "{ctx}");
        } else {
            assert_eq!(c.value(), None, "{ctx}");
        }
        at = want;
    }
}

#[test]
fn cursor_moves_match_a_model() {
    let seeds = common::scaled(12, 4);
    for seed in 0..seeds {
        let mut rng = Rng::new(seed);
        let dir = tempfile::tempdir().unwrap();
        let opts = tiny_options().with_idle_compaction_after(None);
        let db = Db::open(dir.path(), opts).unwrap();
        let keys = 400;
        let mut m = Model::new();
        let mut snap = None;
        for round in 0..6 {
            for _ in 0..300 {
                let k = key(rng.below(keys));
                if rng.chance(25) {
                    db.delete(&k).unwrap();
                    m.remove(&k);
                } else {
                    let v = format!("v{round}-{}", rng.below(1000)).into_bytes();
                    db.put(&k, &v).unwrap();
                    m.insert(k, v);
                }
            }
            match rng.below(3) {
                0 => db.flush().unwrap(),
                1 if round % 2 == 1 => db.compact().unwrap(),
                _ => {}
            }
            if round == 3 {
                snap = Some((db.snapshot(), m.clone()));
            }
        }
        let all = (Bound::Unbounded, Bound::Unbounded);
        check_moves(&mut db.cursor(), &m, &all.0, &all.1, &mut rng, keys, 300);
        for _ in 0..6 {
            let (lo, hi) = (random_bound(&mut rng, keys), random_bound(&mut rng, keys));
            let mut c = db.cursor_in((lo.clone(), hi.clone()));
            check_moves(&mut c, &m, &lo, &hi, &mut rng, keys, 100);
        }
        // A cursor reads its moment: writes after it was made are not seen.
        let mut c = db.cursor();
        db.put(key(keys + 1), "later").unwrap();
        assert!(
            !c.seek(key(keys + 1)).unwrap(),
            "seed {seed}: a later write seen"
        );
        assert!(db.cursor().seek(key(keys + 1)).unwrap());
        let (snap, old) = snap.unwrap();
        let mut c = snap.cursor();
        check_moves(&mut c, &old, &all.0, &all.1, &mut rng, keys, 200);
        // The whole-store iterator agrees too.
        let walked: Vec<(Vec<u8>, Vec<u8>)> = snap.iter().map(Result::unwrap).collect();
        assert_eq!(walked, old.into_iter().collect::<Vec<_>>(), "seed {seed}");
    }
}

/// A damaged data block under a walk: the move returns the error, and the cursor is then on
/// nothing (never past the damage, as if its entries were absent).
#[test]
fn a_damaged_block_ends_the_walk_with_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let opts = Options::default()
        .with_block_cache_bytes(0)
        .with_fs(Arc::new(fs.clone()));
    let db = Db::open(dir.path(), opts).unwrap();
    for i in 0..5_000 {
        db.put(key(i), [b'v'; 100]).unwrap();
    }
    db.flush().unwrap();
    let mut c = db.cursor();
    assert!(c.seek_to_first().unwrap());
    fs.fail_read(fs.reads() + 1, ReadFault::FlipBit(100));
    let mut walked = 1;
    let failed = loop {
        match c.next() {
            Ok(true) => walked += 1,
            Ok(false) => panic!("the walk ended after {walked} entries without the error"),
            Err(e) => break e,
        }
    };
    assert!(walked < 5_000, "{walked}");
    assert!(!c.valid());
    assert!(failed.to_string().contains("data block"), "{failed}");
    assert!(!c.next().unwrap());
}
