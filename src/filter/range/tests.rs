//! The range filter against the truth: no range holding a key is ever called empty, over
//! random and adversarial key sets; the rate on empty ranges stays under its bound, on
//! uniform ranges and on ranges right after a key; blocks read back and damaged ones are
//! refused.

use std::ops::Bound;

use proptest::prelude::*;

use super::*;

fn build(keys: &[Vec<u8>], bits: f64, max_range: u64) -> RangeFilterReader {
    let mut b = RangeFilterBuilder::new(RangePolicy::bits_per_key(bits, max_range).unwrap());
    for k in keys {
        b.add_key(k);
    }
    RangeFilterReader::new(&b.finish()).unwrap()
}

/// Whether a key of the sorted `keys` lies in the range.
fn truth(keys: &[Vec<u8>], lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    use std::ops::RangeBounds;
    keys.iter()
        .any(|k| RangeBounds::<[u8]>::contains(&(lo, hi), &k[..]))
}

/// Keys from a small alphabet rich in 0x00 and 0xFF, behind a shared prefix of varying
/// length: long common prefixes, keys alike in their first 8 bytes after it, the empty key.
fn adversarial_keys() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let byte = prop_oneof![Just(0u8), Just(1), Just(0xfe), Just(0xff), any::<u8>()];
    let prefix = prop::collection::vec(byte.clone(), 0..12);
    let tail = prop::collection::vec(byte, 0..14);
    (prefix, prop::collection::vec(tail, 1..60)).prop_map(|(p, tails)| {
        tails
            .into_iter()
            .map(|t| p.iter().copied().chain(t).collect())
            .collect()
    })
}

fn bound(kind: u8, k: &[u8]) -> Bound<&[u8]> {
    match kind % 3 {
        0 => Bound::Included(k),
        1 => Bound::Excluded(k),
        _ => Bound::Unbounded,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Bounds drawn from the keys themselves, their neighbours and strings without the
    /// prefix: wherever the truth says a key lies inside, the filter says maybe.
    #[test]
    fn never_empty_where_a_key_lies(
        keys in adversarial_keys(),
        probes in prop::collection::vec((any::<u8>(), any::<u8>(), any::<u16>(), any::<u16>(),
            prop::collection::vec(any::<u8>(), 0..3)), 200),
        bits in 3.0f64..20.0,
        log_range in 0u32..12,
    ) {
        let f = build(&keys, bits, 1 << log_range);
        let mut sorted = keys.clone();
        sorted.sort();
        for k in &keys {
            prop_assert!(f.may_contain(k), "key {:?} called absent", k);
        }
        for (lk, hk, li, hi_i, extra) in probes {
            // A bound: a key, a key with bytes added or its last byte changed, or `extra`.
            let pick = |i: u16, how: u8| -> Vec<u8> {
                let k = &sorted[i as usize % sorted.len()];
                match how % 4 {
                    0 => k.clone(),
                    1 => k.iter().copied().chain(extra.iter().copied()).collect(),
                    2 => {
                        let mut k = k.clone();
                        if let Some(b) = k.last_mut() { *b = b.wrapping_add(1); }
                        k
                    }
                    _ => extra.clone(),
                }
            };
            let (lo, hi) = (pick(li, lk >> 2), pick(hi_i, hk >> 2));
            let (lb, hb) = (bound(lk, &lo), bound(hk, &hi));
            if truth(&sorted, lb, hb) {
                prop_assert!(f.may_contain_range(lb, hb),
                    "{:?}..{:?} called empty over {:?}", lb, hb, sorted);
            }
        }
    }

    /// The block does not depend on the order keys came in.
    #[test]
    fn order_does_not_matter(keys in adversarial_keys()) {
        let policy = RangePolicy::bits_per_key(12.0, 32).unwrap();
        let mut a = RangeFilterBuilder::new(policy);
        let mut b = RangeFilterBuilder::new(policy);
        for k in &keys { a.add_key(k); }
        for k in keys.iter().rev() { b.add_key(k); }
        prop_assert_eq!(a.finish(), b.finish());
    }
}

/// `count` keys `prefix + 8-byte big-endian point`, points spread at random, sorted.
fn point_keys(count: usize, seed: u64) -> (Vec<u64>, Vec<Vec<u8>>) {
    let mut x = seed | 1;
    let mut pts: Vec<u64> = (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
        .collect();
    pts.sort_unstable();
    pts.dedup();
    let keys = pts
        .iter()
        .map(|p| [&b"user42/"[..], &p.to_be_bytes()].concat())
        .collect();
    (pts, keys)
}

/// Observed rate on empty ranges of `len` points, uniform (`after == false`) or starting
/// right after a key, over `trials` ranges.
fn observed(f: &RangeFilterReader, pts: &[u64], len: u64, after: bool, trials: u64) -> f64 {
    let key = |p: u64| [&b"user42/"[..], &p.to_be_bytes()].concat();
    let (mut empty, mut fp) = (0u64, 0u64);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for t in 0..trials {
        x = crate::filter::hash::mix(x ^ t);
        let lo = if after {
            pts[(x % pts.len() as u64) as usize].wrapping_add(1)
        } else {
            x
        };
        let Some(hi) = lo.checked_add(len - 1) else {
            continue;
        };
        let i = pts.partition_point(|&p| p < lo);
        if pts.get(i).is_some_and(|&p| p <= hi) {
            continue;
        }
        empty += 1;
        let (a, b) = (key(lo), key(hi));
        if f.may_contain_range(Bound::Included(&a), Bound::Included(&b)) {
            fp += 1;
        }
    }
    fp as f64 / empty as f64
}

/// At 10^5 keys the rate on empty ranges stays within 10% of its bound (ℓ / 2^(B − 2), plus
/// sampling noise), uniform and right after a key alike.
#[test]
fn rate_holds_its_bound_whatever_the_queries() {
    let (pts, keys) = point_keys(100_000, 99);
    for (bits, len) in [
        (12.0, 32u64),
        (12.0, 8),
        (16.0, 32),
        (10.0, 1),
        (12.0, 64),
        (16.0, 48),
    ] {
        let f = build(&keys, bits, 32);
        let bound = len as f64 / (bits - 2.0f64).exp2();
        assert!(f.expected_rate(len) <= bound * 1.0001);
        for after in [false, true] {
            let rate = observed(&f, &pts, len, after, 400_000);
            // 3 standard deviations of the count at the bound.
            let noise = 3.0 * (bound / 400_000.0).sqrt();
            assert!(
                rate <= bound * 1.1 + noise,
                "{bits} bits/key, ℓ {len}, after a key {after}: {rate} over the bound {bound}"
            );
        }
        assert!(
            f.bits_per_key() < bits + 0.5,
            "{} bits per key",
            f.bits_per_key()
        );
    }
}

/// Ranges of up to twice the design length (three blocks of the hash) over dense keys: every
/// one that holds a key is "maybe", whichever block the key sits in.
#[test]
fn ranges_up_to_twice_the_design_never_miss_a_key() {
    let k = |p: u64| [&b"t/"[..], &p.to_be_bytes()].concat();
    let mut x = 0x1234_5678u64;
    let mut next = || {
        x = crate::filter::hash::mix(x);
        x
    };
    for max_range in [1u64, 4, 16, 32] {
        // Sparse enough that most short ranges are empty, dense enough that long ones hold keys.
        let pts: Vec<u64> = (0..3000u64)
            .map(|i| (1 << 50) + i * 3 * max_range + next() % 5)
            .collect();
        let keys: Vec<Vec<u8>> = pts.iter().map(|&p| k(p)).collect();
        let f = build(&keys, 12.0, max_range);
        let (mut held, mut missed) = (0, 0);
        for _ in 0..20_000 {
            let a = (1 << 50) + next() % (3000 * 3 * max_range);
            let len = 1 + next() % f.answered_range();
            let b = a + len - 1;
            let holds = pts.iter().any(|&p| (a..=b).contains(&p));
            assert!(f.answers(Bound::Included(&k(a)), Bound::Included(&k(b))));
            if holds {
                held += 1;
                missed += usize::from(
                    !f.may_contain_range(Bound::Included(&k(a)), Bound::Included(&k(b))),
                );
            }
        }
        assert!(held > 5000, "{held}");
        assert_eq!(
            missed, 0,
            "L {max_range}: {missed} of {held} ranges holding a key called empty"
        );
    }
}

/// A range wider than twice the design always says maybe; up to twice it, far from every
/// key, it can say empty (and a range of the design length whose exclusive end maps one point
/// further is answered).
#[test]
fn wider_than_designed_is_maybe() {
    let (_, keys) = point_keys(1000, 5);
    let f = build(&keys, 16.0, 16);
    assert_eq!((f.max_range(), f.answered_range()), (16, 32));
    let k = |p: u64| [&b"user42/"[..], &p.to_be_bytes()].concat();
    let (lo, hi) = (k(1 << 40), k((1 << 40) + 31));
    assert!(f.answers(Bound::Included(&lo), Bound::Included(&hi)));
    let hi = k((1 << 40) + 32);
    assert!(!f.answers(Bound::Included(&lo), Bound::Included(&hi)));
    assert!(f.may_contain_range(Bound::Included(&lo), Bound::Included(&hi)));
    // `[s, s + 16)` with `s + 16` ending in a 0 byte: 17 points, answered.
    let (lo, hi) = (k(0x100 * 77 - 16), k(0x100 * 77));
    assert!(f.answers(Bound::Included(&lo), Bound::Excluded(&hi)));
    let (a, b) = (k(0), k(u64::MAX));
    assert!(f.may_contain_range(Bound::Included(&a), Bound::Included(&b)));
    assert!(!f.answers(Bound::Included(&a), Bound::Included(&b)));
    assert!(f.may_contain_range(Bound::Unbounded, Bound::Unbounded));
    // Outside the prefix: empty without asking the set.
    assert!(!f.may_contain_range(Bound::Included(b"user43"), Bound::Unbounded));
    assert!(!f.may_contain_range(Bound::Unbounded, Bound::Excluded(b"user42/")));
}

#[test]
fn empty_filter_says_empty() {
    let b = RangeFilterBuilder::new(RangePolicy::bits_per_key(10.0, 8).unwrap());
    assert!(b.is_empty());
    let f = RangeFilterReader::new(&b.finish()).unwrap();
    assert!(!f.may_contain_range(Bound::Unbounded, Bound::Unbounded));
    assert_eq!(f.keys(), 0);
}

#[test]
fn policies_out_of_range_are_refused() {
    assert!(RangePolicy::bits_per_key(2.0, 8).is_err());
    assert!(RangePolicy::bits_per_key(f64::NAN, 8).is_err());
    assert!(RangePolicy::bits_per_key(10.0, 0).is_err());
    assert!(RangePolicy::bits_per_key(10.0, (1 << 40) + 1).is_err());
    assert!(RangePolicy::rate_at(0.0, 32).is_err());
    let p = RangePolicy::rate_at(0.03125, 32).unwrap();
    assert!((p.bits() - 12.0).abs() < 1e-9);
}

/// Every header field and every array byte is covered: a flipped bit anywhere is refused
/// (the checksum), and with the checksum recomputed the layout checks refuse what does not
/// fit or is not a set; nothing panics.
#[test]
fn damaged_blocks_are_refused() {
    let (_, keys) = point_keys(300, 11);
    let mut b = RangeFilterBuilder::new(RangePolicy::bits_per_key(12.0, 32).unwrap());
    for k in &keys {
        b.add_key(k);
    }
    let block = b.finish();
    for i in 0..block.len() * 8 {
        let mut d = block.clone();
        d[i / 8] ^= 1 << (i % 8);
        assert!(
            RangeFilterReader::new(&d).is_err(),
            "bit {i} flipped, still read"
        );
    }
    let reseal = |mut d: Vec<u8>| {
        let n = d.len() - 4;
        d.truncate(n);
        let crc = crc32fast::hash(&d);
        d.extend_from_slice(&crc.to_le_bytes());
        d
    };
    let err = |at: usize, v: u8| {
        let mut d = block.clone();
        d[at] = v;
        RangeFilterReader::new(&reseal(d)).unwrap_err()
    };
    assert_eq!(err(0, b'X'), RangeFilterError::BadMagic { found: *b"XBRF" });
    assert!(matches!(
        err(4, 3),
        RangeFilterError::UnsupportedVersion { found: 3, .. }
    ));
    assert_eq!(err(6, 2), RangeFilterError::UnknownKind { found: 2 });
    // The width: 1 to 8 bytes in version 2; reserved (0) in version 1.
    for width in [0, 9] {
        assert!(matches!(err(41, width), RangeFilterError::BadLayout { .. }));
    }
    let mut v1 = block.clone();
    v1[4] = 1;
    assert!(matches!(
        RangeFilterReader::new(&reseal(v1)).unwrap_err(),
        RangeFilterError::ReservedNotZero { offset: 41, .. }
    ));
    assert!(matches!(
        err(45, 1),
        RangeFilterError::ReservedNotZero { offset: 44, .. }
    ));
    assert!(matches!(err(40, 63), RangeFilterError::BadLayout { .. }));
    // A universe past 2^62, with the arrays it would have at 63 low bits: refused.
    let mut huge = block.clone();
    huge[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
    huge[7] = 63;
    assert!(matches!(
        RangeFilterReader::new(&reseal(huge)).unwrap_err(),
        RangeFilterError::BadLayout { .. }
    ));
    // More low bits than written: the lengths disagree.
    assert!(matches!(
        err(7, block[7] + 1),
        RangeFilterError::BadLayout { .. }
    ));
    assert!(matches!(
        RangeFilterReader::new(&block[..20]).unwrap_err(),
        RangeFilterError::TooShort { .. }
    ));
}

/// Every range of up to L points around each key — inside one block, or across the boundary
/// of two, the key in either — says maybe.
#[test]
fn ranges_around_each_key_are_maybe() {
    let (pts, keys) = point_keys(2000, 3);
    for max_range in [2u64, 16, 1024] {
        let f = build(&keys, 10.0, max_range);
        let key = |p: u64| [&b"user42/"[..], &p.to_be_bytes()].concat();
        for &p in pts.iter().step_by(7) {
            for len in [2, max_range / 2 + 1, max_range] {
                for d in (0..len).step_by((len as usize / 8).max(1)) {
                    let lo = p.saturating_sub(d);
                    let hi = lo.saturating_add(len - 1).max(p);
                    let (a, b) = (key(lo), key(hi));
                    assert!(
                        f.may_contain_range(Bound::Included(&a), Bound::Included(&b)),
                        "{lo:#x}..={hi:#x} around {p:#x} called empty (L {max_range})"
                    );
                }
            }
        }
    }
}

/// Key sets that stress the mapping: random points; a shared prefix longer than the 256
/// bytes a block keeps; keys alike in the 8 bytes after the prefix; runs of 0x00 and 0xFF,
/// the empty key and short keys.
fn stress_sets(rng: &mut u64) -> Vec<Vec<Vec<u8>>> {
    let mut next = || {
        *rng = crate::filter::hash::mix(*rng);
        *rng
    };
    let random = point_keys(20_000, next()).1;
    let long: Vec<Vec<u8>> = (0..5_000)
        .map(|_| {
            let mut k = vec![b'p'; 300];
            k.extend_from_slice(&next().to_be_bytes()[..(next() % 9) as usize]);
            k
        })
        .collect();
    let alike: Vec<Vec<u8>> = (0..5_000)
        .map(|_| {
            let mut k = b"t/".to_vec();
            k.extend_from_slice(&[b'A' + (next() % 2) as u8; 8]);
            k.extend_from_slice(&next().to_be_bytes()[..(next() % 9) as usize]);
            k
        })
        .collect();
    let edges: Vec<Vec<u8>> = (0..5_000)
        .map(|_| {
            let len = (next() % 12) as usize;
            (0..len)
                .map(|_| [0u8, 0xff, 0xfe, 1][(next() % 4) as usize])
                .collect()
        })
        .chain([Vec::new()])
        .collect();
    vec![random, long, alike, edges]
}

/// A bound near the key `k`: the key, with bytes added, its last byte moved, cut short, a
/// byte of it changed, a point a few steps away, or random bytes.
fn near(k: &[u8], next: &mut impl FnMut() -> u64) -> Vec<u8> {
    let mut k = k.to_vec();
    match next() % 7 {
        0 => {}
        1 => k.extend_from_slice(&next().to_be_bytes()[..(next() % 9) as usize]),
        2 => {
            if let Some(b) = k.last_mut() {
                *b = b.wrapping_add(if next().is_multiple_of(2) { 1 } else { 255 });
            }
        }
        3 => k.truncate((next() % (k.len() as u64 + 1)) as usize),
        4 if !k.is_empty() => {
            let i = (next() % k.len() as u64) as usize;
            k[i] = k[i].wrapping_add((next() % 3) as u8).wrapping_sub(1);
        }
        5 => {
            // A point a few steps from the key's, same prefix.
            let at = k.len().saturating_sub(8);
            let mut tail = [0u8; 8];
            tail[..k.len() - at].copy_from_slice(&k[at..]);
            let p = u64::from_be_bytes(tail)
                .wrapping_add(next() % 64)
                .wrapping_sub(32);
            k.truncate(at);
            k.extend_from_slice(&p.to_be_bytes());
        }
        _ => k = next().to_be_bytes()[..(next() % 9) as usize].to_vec(),
    }
    k
}

/// A bound on `k`: inclusive or exclusive, now and then none.
fn side(k: &[u8], roll: u64) -> Bound<&[u8]> {
    match roll % 100 {
        0 => Bound::Unbounded,
        r if r.is_multiple_of(2) => Bound::Included(k),
        _ => Bound::Excluded(k),
    }
}

/// ≥ 10^7 ranges over adversarial and random key sets, at policies from 3 to 20 bits per key
/// and design ranges from 1 to 2^14 points: every range that holds a key is "maybe". Run by
/// `.ci/run` (with overflow checks); `cargo test` runs the proptests above instead.
#[test]
#[ignore = "10^7 ranges: run by .ci/run with --profile fuzz"]
fn ten_million_ranges_never_empty_where_a_key_lies() {
    let mut seed = 0x5eed_u64;
    let sets = stress_sets(&mut seed);
    let mut rng = 0xC0FF_EE00_u64;
    let mut next = || {
        rng = crate::filter::hash::mix(rng);
        rng
    };
    let policies = [
        (3.0, 1u64),
        (8.0, 8),
        (12.0, 32),
        (16.0, 1024),
        (20.0, 1 << 14),
    ];
    let (mut asked, mut holding, mut empty_maybe, mut empty) = (0u64, 0u64, 0u64, 0u64);
    for keys in &sets {
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        for &(bits, max_range) in &policies {
            let f = build(keys, bits, max_range);
            for _ in 0..500_000 {
                // Mostly both bounds near one key (short ranges, often empty), else near two.
                let n = sorted.len() as u64;
                let ka = &sorted[(next() % n) as usize];
                let kb = if next().is_multiple_of(4) {
                    &sorted[(next() % n) as usize]
                } else {
                    ka
                };
                let (a, b) = (near(ka, &mut next), near(kb, &mut next));
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                let (lb, hb) = (side(&lo[..], next()), side(&hi[..], next()));
                // The truth, by binary search.
                let i = match lb {
                    Bound::Included(k) => sorted.partition_point(|x| &x[..] < k),
                    Bound::Excluded(k) => sorted.partition_point(|x| &x[..] <= k),
                    Bound::Unbounded => 0,
                };
                let holds = sorted.get(i).is_some_and(|x| match hb {
                    Bound::Included(k) => &x[..] <= k,
                    Bound::Excluded(k) => &x[..] < k,
                    Bound::Unbounded => true,
                });
                let maybe = f.may_contain_range(lb, hb);
                asked += 1;
                if holds {
                    holding += 1;
                    assert!(
                        maybe,
                        "{lb:?}..{hb:?} holds a key, called empty ({bits} bits/key, L {max_range})"
                    );
                } else if f.answers(lb, hb) {
                    empty += 1;
                    empty_maybe += u64::from(maybe);
                }
            }
        }
    }
    println!(
        "range filter: {asked} ranges, {holding} holding a key (all maybe), {empty} empty within the design ({empty_maybe} maybe)"
    );
    assert!(asked >= 10_000_000);
    assert!(
        holding > asked / 10 && empty > asked / 10,
        "{holding} holding, {empty} empty"
    );
}
