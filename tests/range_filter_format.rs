//! The frozen range-filter fixtures (FORMAT.md §9, version 1), and what the reader does with
//! them.
//!
//! `fixtures/range-filter-v1/` holds one block per shape, built from the keys of
//! `fixtures/filter-v1/keys.txt`. They are frozen: today's builder must reproduce them byte for
//! byte, and today's reader must read them. A missing fixture is written only when
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
}

fn fixtures() -> Vec<Fixture> {
    let f = |name, bits_per_key, max_range, keys, prefix| Fixture {
        name,
        bits_per_key,
        max_range,
        keys,
        prefix,
    };
    vec![
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
    ]
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

fn keys(f: &Fixture) -> Vec<Vec<u8>> {
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

fn stored(f: &Fixture, fresh: &[u8]) -> Vec<u8> {
    let path = root().join(format!("range-filter-v1/{}.rangefilter", f.name));
    match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(_) if std::env::var_os("LSM_BLOOM_WRITE_MISSING_FIXTURES").is_some() => {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, fresh).unwrap();
            fresh.to_vec()
        }
        Err(e) => panic!("missing fixture {}: {e}", path.display()),
    }
}

#[test]
fn builder_reproduces_every_fixture_byte_for_byte() {
    for f in fixtures() {
        let fresh = build(&f);
        assert!(
            stored(&f, &fresh) == fresh,
            "{}: builder output differs from the frozen fixture",
            f.name
        );
    }
}

/// Every key of a fixture is found, alone and inside every range of up to the design's
/// length that holds it; the header's figures read back.
#[test]
fn every_fixture_reads_and_finds_its_keys() {
    for f in fixtures() {
        let block = stored(&f, &build(&f));
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
    }
}

/// A fixture with one bit flipped anywhere is refused, never read as another set.
#[test]
fn damaged_fixtures_are_refused() {
    let f = &fixtures()[3];
    let block = stored(f, &build(f));
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
