use super::*;
use crate::table::{Direction, KeyRange};

#[test]
fn latest_write_wins_and_tombstones_are_kept() {
    let m = Arc::new(Memtable::new(1));
    m.apply(vec![
        (b"a".to_vec(), Some(b"1".to_vec())),
        (b"a".to_vec(), Some(b"2".to_vec())),
    ]);
    m.apply(vec![(b"b".to_vec(), None)]);
    assert_eq!(m.get(b"a"), Some(Some(b"2".to_vec())));
    assert_eq!(m.get(b"b"), Some(None));
    assert_eq!(m.get(b"c"), None);
    assert_eq!(m.range(Bound::Unbounded, Bound::Unbounded).len(), 2);
    assert!(m.approximate_size() > 0);
    // Equal excluded bounds and reversed bounds are empty ranges, not panics.
    let (a, b): (&[u8], &[u8]) = (b"a", b"b");
    assert!(m.range(Bound::Excluded(a), Bound::Excluded(a)).is_empty());
    assert!(m.range(Bound::Included(b), Bound::Excluded(a)).is_empty());
    assert!(m.range(Bound::Excluded(a), Bound::Included(a)).is_empty());
    assert_eq!(m.range(Bound::Included(a), Bound::Included(a)).len(), 1);
}

#[test]
fn versions_and_bounds() {
    let m = Arc::new(Memtable::new(1));
    assert!(m.is_empty());
    for round in 0..3u8 {
        m.apply(
            (0..10u8)
                .map(|i| (vec![b'k', i], (i % 4 != round).then(|| vec![round, i])))
                .collect(),
        );
    }
    // A key twice in one batch: the later op wins.
    m.apply(vec![
        (b"dup".to_vec(), Some(b"1".to_vec())),
        (b"dup".to_vec(), None),
    ]);
    assert_eq!(m.get(b"dup"), Some(None));
    for i in 0..10u8 {
        let want = (i % 4 != 2).then(|| vec![2, i]);
        assert_eq!(m.get(&[b'k', i]), Some(want.clone()), "k{i}");
    }
    assert_eq!(m.get(b"k"), None);
    assert_eq!(m.get(&[b'k', 10]), None);
    let all = m.range(Bound::Unbounded, Bound::Unbounded);
    assert_eq!(all.len(), 11);
    assert!(all.windows(2).all(|w| w[0].0 < w[1].0));
    let (k3, k6): (&[u8], &[u8]) = (&[b'k', 3], &[b'k', 6]);
    let keys = |s, e| -> Vec<u8> { m.range(s, e).iter().map(|(k, _)| k[1]).collect() };
    assert_eq!(
        keys(Bound::Included(k3), Bound::Excluded(k6)),
        vec![3, 4, 5]
    );
    assert_eq!(
        keys(Bound::Excluded(k3), Bound::Included(k6)),
        vec![4, 5, 6]
    );
    assert_eq!(keys(Bound::Excluded(k3), Bound::Excluded(k6)), vec![4, 5]);
    assert_eq!(keys(Bound::Included(k3), Bound::Included(k3)), vec![3]);
}

/// A tiny deterministic generator (xorshift), so a failure repeats.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn every_snapshot_reads_as_the_model_at_its_batch() {
    // Batches of puts, overwrites, deletes and repeated keys over a small key space, the
    // index growing several times; after each batch, a point read and a scan at a random
    // earlier batch (a snapshot) must equal the model as it was then.
    use std::collections::BTreeMap;
    let m = Arc::new(Memtable::new(1));
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut models: Vec<BTreeMap<Vec<u8>, Option<Vec<u8>>>> = vec![BTreeMap::new()];
    let key = |i: u64| format!("key:{i:05}").into_bytes();
    for seq in 1..=400u64 {
        let mut model = models[models.len() - 1].clone();
        let ops: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..rng.below(12) + 1)
            .map(|_| {
                let k = key(rng.below(3000));
                let v = (rng.below(4) != 0).then(|| seq.to_le_bytes().to_vec());
                model.insert(k.clone(), v.clone());
                (k, v)
            })
            .collect();
        m.apply(ops);
        models.push(model);
        let at = rng.below(seq + 1);
        let want = &models[at as usize];
        for _ in 0..20 {
            let k = key(rng.below(3000));
            let got = m.get_at(&k, hash_key(&k), at, &Now::never());
            assert_eq!(
                got,
                want.get(&k).map(Option::as_deref),
                "key {k:?} at batch {at} of {seq}"
            );
        }
        let (lo, hi) = (key(rng.below(3000)), key(rng.below(3000)));
        let got = m.range_at(
            Bound::Included(&lo),
            Bound::Excluded(&hi),
            at,
            Direction::Forward,
        );
        let back = m.range_at(
            Bound::Included(&lo),
            Bound::Excluded(&hi),
            at,
            Direction::Backward,
        );
        assert_eq!(
            back, got,
            "backward scan [{lo:?}, {hi:?}) at batch {at} of {seq}"
        );
        let expect: Vec<(Vec<u8>, Option<Vec<u8>>)> = if lo < hi {
            want.range(lo.clone()..hi.clone())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        } else {
            Vec::new()
        };
        assert_eq!(got, expect, "scan [{lo:?}, {hi:?}) at batch {at} of {seq}");
    }
    let mut flushed = Vec::new();
    m.for_each_newest(|k, v, _| {
        flushed.push((k.to_vec(), v.map(<[u8]>::to_vec)));
        Ok::<(), ()>(())
    })
    .unwrap();
    let last: Vec<_> = models[400]
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(flushed, last);
}

#[test]
fn readers_see_whole_batches_while_the_writer_appends() {
    // Each batch writes its number to keys a<i> and b<i> for a random i, and to key "n";
    // readers on other threads check that what they see at one `seen` is one batch's
    // writes whole, by point reads and by scans, while the index grows under them.
    let m = Arc::new(Memtable::new(1));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (m, stop) = (Arc::clone(&m), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut checks = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let seen = m.visible();
                    let n = m.get_at(b"n", hash_key(b"n"), seen, &Now::never());
                    if seen == 0 {
                        assert_eq!(n, None);
                        continue;
                    }
                    assert_eq!(n, Some(Some(&seen.to_le_bytes()[..])), "n at {seen}");
                    let all =
                        m.range_at(Bound::Unbounded, Bound::Unbounded, seen, Direction::Forward);
                    let mut by_i = std::collections::HashMap::new();
                    for (k, v) in &all {
                        if k.as_slice() != b"n" {
                            by_i.entry(k[1..].to_vec())
                                .or_insert_with(Vec::new)
                                .push(v.clone());
                        }
                    }
                    for (i, vs) in by_i {
                        assert_eq!(vs.len(), 2, "a and b of {i:?} at {seen} (reader {r})");
                        assert_eq!(vs[0], vs[1], "a and b of {i:?} at {seen}");
                    }
                    checks += 1;
                }
                checks
            })
        })
        .collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for seq in 1..=20_000u64 {
        let i = rng.below(5000).to_be_bytes();
        let v = Some(seq.to_le_bytes().to_vec());
        m.apply(vec![
            ([b"a".as_slice(), &i].concat(), v.clone()),
            ([b"b".as_slice(), &i].concat(), v.clone()),
            (b"n".to_vec(), v),
        ]);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

#[test]
fn memtables_sharing_a_count_show_a_batch_in_all_at_once() {
    // Each batch writes its number to key "n" of memtable `a` and of memtable `b` (`a` leads
    // their generation, as the keyspaces of one), appended to `a`, then `b`, then
    // published. A reader reads the count once, then `b`, then `a`: each must show exactly
    // that batch, point read and scan, however the reader interleaves with the writer. Each
    // batch also appends to `b` alone every third time, so the memtables' logs diverge.
    let a = Arc::new(Memtable::new(1));
    let b = Arc::new(Memtable::following(&a));
    let empty = Memtable::following(&b); // the leader's follower, through a follower
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (a, b, stop) = (Arc::clone(&a), Arc::clone(&b), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut checks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let seen = a.visible();
                assert!(b.visible() >= seen, "one count");
                let bytes = seen.to_le_bytes();
                let want = (seen != 0).then_some(Some(&bytes[..]));
                assert_eq!(
                    b.get_at(b"n", hash_key(b"n"), seen, &Now::never()),
                    want,
                    "b at {seen}"
                );
                assert_eq!(
                    a.get_at(b"n", hash_key(b"n"), seen, &Now::never()),
                    want,
                    "a at {seen}"
                );
                let scanned = b.range_at(
                    Bound::Included(b"n"),
                    Bound::Included(b"n"),
                    seen,
                    Direction::Forward,
                );
                let want_scan: Vec<_> = want
                    .map(|v| (b"n".to_vec(), v.map(<[u8]>::to_vec)))
                    .into_iter()
                    .collect();
                assert_eq!(scanned, want_scan, "b scanned at {seen}");
                checks += 1;
            }
            checks
        })
    };
    for _ in 0..20_000u64 {
        let seq = b.next();
        let v = Some(seq.to_le_bytes().to_vec());
        a.append(vec![(b"n".to_vec(), v.clone()).into()], seq);
        std::thread::yield_now();
        let mut ops = vec![(b"n".to_vec(), v).into()];
        if seq.is_multiple_of(3) {
            ops.push((format!("only-b{seq}").into_bytes(), None).into());
        }
        b.append(ops, seq);
        b.publish(seq);
    }
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    // A memtable that got no entry of the published batches is empty, and answers nothing.
    assert!(empty.is_empty() && !a.is_empty());
    assert_eq!(empty.visible(), 20_000);
    assert_eq!(
        empty.get_at(b"n", hash_key(b"n"), empty.visible(), &Now::never()),
        None
    );
    assert_eq!(
        b.range(Bound::Unbounded, Bound::Unbounded).len(),
        1 + 20_000 / 3
    );
}

/// `skip_past` (binary searches per run) lands where stepping over the covered keys does,
/// either way, for ranges of every end kind, over a view of several runs.
#[test]
fn a_cursor_skips_past_a_range_to_where_stepping_lands() {
    use crate::table::{Cursor, DeletedRange, End};
    let m = Arc::new(Memtable::new(1));
    let key = |k: u32| format!("k{k:03}").into_bytes();
    for b in 0..7u32 {
        m.apply(
            (0..50)
                .map(|i| (key((i * 7 + b * 3) % 300), Some(vec![b as u8])))
                .collect(),
        );
        // A view after each batch: the runs stay apart (merged as a binary counter).
        m.view();
    }
    assert!(m.view().runs.len() > 1);
    let seen = m.visible();
    let all = KeyRange::all();
    let mut skipped = 0;
    for (lo, hi) in [(10, 40), (0, 299), (150, 151), (290, 310), (3, 4)] {
        for end in [End::Before(key(hi)), End::Through(key(hi)), End::Unbounded] {
            let r = DeletedRange {
                start: key(lo),
                end,
            };
            for dir in [Direction::Forward, Direction::Backward] {
                let (mut a, mut b) = (m.cursor(&all, dir, seen), m.cursor(&all, dir, seen));
                while a.key().is_some_and(|k| !r.covers(k)) {
                    a.step().unwrap();
                    b.step().unwrap();
                }
                if a.key().is_none() {
                    continue;
                }
                a.skip_past(&r).unwrap();
                while b.key().is_some_and(|k| r.covers(k)) {
                    b.step().unwrap();
                }
                skipped += 1;
                loop {
                    assert_eq!(a.key(), b.key(), "{r:?} {dir:?}");
                    if a.key().is_none() {
                        break;
                    }
                    a.step().unwrap();
                    b.step().unwrap();
                }
            }
        }
    }
    assert!(skipped > 20, "{skipped}");
}

#[test]
fn a_sized_memtable_takes_its_keys_without_growing_its_index() {
    let keys = 20_000;
    let m = Arc::new(Memtable::sized(1, keys));
    let index = m.index.load_full();
    for chunk in (0..keys as u32).collect::<Vec<_>>().chunks(1000) {
        m.apply(
            chunk
                .iter()
                .map(|i| (i.to_be_bytes().to_vec(), Some(vec![1])))
                .collect(),
        );
    }
    assert!(
        Arc::ptr_eq(&index, &m.index.load_full()),
        "the index grew below the keys it was sized for"
    );
    assert_eq!(m.key_count(), keys);
    assert_eq!(m.get(&7u32.to_be_bytes()), Some(Some(vec![1])));
    // A memtable made with `new` grows on the way (the case `sized` exists for).
    let grown = Arc::new(Memtable::new(2));
    let small = grown.index.load_full();
    grown.apply(
        (0..keys as u32)
            .map(|i| (i.to_be_bytes().to_vec(), None))
            .collect(),
    );
    assert!(!Arc::ptr_eq(&small, &grown.index.load_full()));
}
