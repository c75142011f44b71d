//! The frozen range-filter fixtures (FORMAT.md §9), and what the reader does with them.
//!
//! `fixtures/range-filter-v1/` and `fixtures/range-filter-v2/` hold one block per shape, built
//! from the keys of `fixtures/filter-v1/keys.txt` (v2 adds one of fixed-length counters, whose
//! points are narrower than 8 bytes). They are frozen: today's builder must reproduce the v2
//! ones byte for byte, and the v1 ones but for the version, the width byte and the CRC;
//! today's reader must read both. A missing fixture is written only when
//! `LSM_BLOOM_WRITE_MISSING_FIXTURES=1`; an existing one is never overwritten.

use std::ops::Bound;
use std::path::PathBuf;

use lsm_bloom::filter::{RangeFilterBuilder, RangeFilterError, RangeFilterReader, RangePolicy};

struct Fixture {
    name: &'static str,
    bits_per_key: f64,
    max_range: u64,
    /// How many of `keys.txt`'s keys it holds, from the first.
    keys: usize,
    /// Put before every key (a long shared prefix, stripped by the builder).
    prefix: &'static str,
    /// Instead of `keys.txt`'s keys: `ctr:` and the 3-byte big-endian counters `0, 5, 10, …`.
    counters: bool,
}

/// The fixtures of format `version`.
fn fixtures(version: u32) -> Vec<Fixture> {
    let f = |name, bits_per_key, max_range, keys, prefix| Fixture {
        name,
        bits_per_key,
        max_range,
        keys,
        prefix,
        counters: false,
    };
    let mut all = vec![
        f("grafite-12bpk-32", 12.0, 32, 1500, ""),
        f("grafite-16bpk-1024", 16.0, 1024, 1500, ""),
        f(
            "grafite-10bpk-8-prefixed",
            10.0,
            8,
            700,
            "tenant/0042/events/",
        ),
        f("grafite-12bpk-1key", 12.0, 32, 1, ""),
        f("grafite-empty", 12.0, 32, 0, ""),
    ];
    if version >= 2 {
        all.push(Fixture {
            counters: true,
            ..f("grafite-12bpk-32-counters", 12.0, 32, 2000, "")
        });
    }
    all
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn keys(f: &Fixture) -> Vec<Vec<u8>> {
    if f.counters {
        return (0..f.keys as u32)
            .map(|i| [&b"ctr:"[..], &(i * 5).to_be_bytes()[1..]].concat())
            .collect();
    }
    let text = std::fs::read_to_string(root().join("filter-v1/keys.txt"))
        .expect("fixtures/filter-v1/keys.txt");
    text.lines()
        .take(f.keys)
        .map(|k| format!("{}{k}", f.prefix).into_bytes())
        .collect()
}

fn build(f: &Fixture) -> Vec<u8> {
    let mut b =
        RangeFilterBuilder::new(RangePolicy::bits_per_key(f.bits_per_key, f.max_range).unwrap());
    for k in keys(f) {
        b.add_key(&k);
    }
    b.finish()
}

fn stored(version: u32, f: &Fixture, fresh: &[u8]) -> Vec<u8> {
    let path = root().join(format!("range-filter-v{version}/{}.rangefilter", f.name));
    match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(_)
            if version == 2 && std::env::var_os("LSM_BLOOM_WRITE_MISSING_FIXTURES").is_some() =>
        {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, fresh).unwrap();
            fresh.to_vec()
        }
        Err(e) => panic!("missing fixture {}: {e}", path.display()),
    }
}

#[test]
fn builder_reproduces_every_fixture_byte_for_byte() {
    for f in fixtures(2) {
        let fresh = build(&f);
        assert!(
            stored(2, &f, &fresh) == fresh,
            "{}: builder output differs from the frozen fixture",
            f.name
        );
    }
    // Version 1 blocks are today's but for the version (bytes 4..6), the width byte (41,
    // reserved then; every v1 fixture's keys make points of 8 bytes or hold one point) and
    // the CRC.
    for f in fixtures(1) {
        let fresh = build(&f);
        let old = stored(1, &f, &fresh);
        assert_eq!(old.len(), fresh.len(), "{}", f.name);
        let differ: Vec<usize> = (0..old.len()).filter(|&i| old[i] != fresh[i]).collect();
        let crc = old.len() - 4;
        assert!(
            differ.iter().all(|&i| i == 4 || i == 41 || i >= crc),
            "{}: v1 fixture differs at {differ:?}",
            f.name
        );
        assert_eq!((old[4], old[41]), (1, 0), "{}", f.name);
    }
}

/// Every key of a fixture is found, alone and inside every range of up to the design's
/// length that holds it; the header's figures read back.
#[test]
fn every_fixture_reads_and_finds_its_keys() {
    for (version, f) in (1..=2).flat_map(|v| fixtures(v).into_iter().map(move |f| (v, f))) {
        let block = stored(version, &f, &build(&f));
        let r = RangeFilterReader::new(&block).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        let keys = keys(&f);
        assert_eq!(r.keys(), keys.len() as u64, "{}", f.name);
        assert_eq!(r.max_range(), f.max_range, "{}", f.name);
        assert!(r.prefix().starts_with(f.prefix.as_bytes()), "{}", f.name);
        for k in &keys {
            assert!(r.may_contain(k), "{}: {k:?} called absent", f.name);
            // The key as the last point of a range of max_range points ending at it.
            let mut lo = k.clone();
            let last = lo.len() - 1;
            lo[last] = lo[last].saturating_sub(3);
            assert!(
                r.may_contain_range(Bound::Included(&lo), Bound::Included(k)),
                "{}",
                f.name
            );
            assert!(
                r.may_contain_range(Bound::Excluded(&lo), Bound::Unbounded),
                "{}",
                f.name
            );
        }
        if keys.is_empty() {
            assert!(!r.may_contain_range(Bound::Unbounded, Bound::Unbounded));
        }
        assert_eq!(r.info().version, version as u16, "{}", f.name);
        if f.counters {
            // The counters stay below 2^16, so the prefix takes their first byte and points
            // are the last 2: the 4 counters between two keys are an empty range of 4.
            assert_eq!(r.info().width, 2);
            let empty = (0..keys.len() as u32 - 1)
                .filter(|i| {
                    let lo = [&b"ctr:"[..], &(i * 5 + 1).to_be_bytes()[1..]].concat();
                    let hi = [&b"ctr:"[..], &(i * 5 + 4).to_be_bytes()[1..]].concat();
                    !r.may_contain_range(Bound::Included(&lo), Bound::Included(&hi))
                })
                .count();
            assert!(
                empty * 100 > (keys.len() - 1) * 95,
                "{empty} empty of {}",
                keys.len()
            );
        }
    }
}

/// A fixture with one bit flipped anywhere is refused, never read as another set.
#[test]
fn damaged_fixtures_are_refused() {
    let f = &fixtures(2)[3];
    let block = stored(2, f, &build(f));
    for i in 0..block.len() * 8 {
        let mut d = block.clone();
        d[i / 8] ^= 1 << (i % 8);
        let e = RangeFilterReader::new(&d).expect_err("a flipped bit read");
        assert!(
            matches!(
                e,
                RangeFilterError::ChecksumMismatch { .. }
                    | RangeFilterError::BadMagic { .. }
                    | RangeFilterError::UnsupportedVersion { .. }
            ),
            "bit {i}: {e}"
        );
    }
}
