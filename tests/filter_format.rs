//! The frozen format-v1 fixtures, and what the reader does with damaged blocks.
//!
//! `fixtures/filter-v1/` holds the key list, one block per kind and shape, and the dump JSON
//! of each. They are frozen: this test checks that today's builder reproduces them byte for
//! byte. A missing fixture is written only when `LSM_BLOOM_WRITE_MISSING_FIXTURES=1`; an
//! existing one is never overwritten.

use std::path::PathBuf;

use lsm_bloom::filter::{
    format, FilterBuilder, FilterError, FilterKind, FilterPolicy, FilterReader,
};
use lsm_bloom::inspect::FilterReport;

struct Fixture {
    name: &'static str,
    policy: FilterPolicy,
    /// How many of `keys.txt`'s keys it holds, from the first.
    keys: usize,
    /// The kind its header records (a Ribbon policy writes a blocked Bloom block where that
    /// is smaller at the same rate).
    holds: FilterKind,
    written: Writer,
}

/// Which builder wrote a fixture.
#[derive(Clone, Copy, PartialEq)]
enum Writer {
    /// Today's: it reproduces the fixture byte for byte.
    Current,
    /// One that gave a textbook array exactly `n × bits/key` bits; today's takes the whole
    /// 64-bit words those bits occupy (same block length, same k, a larger m), so the bytes
    /// differ. The block still reads, and finds every key.
    PartialWords,
}

fn fixtures() -> Vec<Fixture> {
    use FilterKind::*;
    let all = keys().len();
    let fixture = |name, policy: FilterPolicy, keys, written| Fixture {
        name,
        policy,
        keys,
        holds: policy.kind,
        written,
    };
    vec![
        fixture(
            "standard-10bpk",
            FilterPolicy::bits_per_key(Standard, 10.0),
            all,
            Writer::PartialWords,
        ),
        fixture(
            "blocked-10bpk",
            FilterPolicy::bits_per_key(Blocked, 10.0),
            all,
            Writer::Current,
        ),
        fixture(
            "standard-9.5bpk-k5",
            FilterPolicy::bits_per_key(Standard, 9.5).with_num_probes(5),
            all,
            Writer::PartialWords,
        ),
        fixture(
            "standard-empty",
            FilterPolicy::bits_per_key(Standard, 10.0),
            0,
            Writer::Current,
        ),
        fixture(
            "blocked-empty",
            FilterPolicy::bits_per_key(Blocked, 10.0),
            0,
            Writer::Current,
        ),
        // Kind 3, added to format version 1 later.
        fixture(
            "ribbon-1pct",
            FilterPolicy::target_fpr(Ribbon, 0.01),
            all,
            Writer::Current,
        ),
        fixture(
            "ribbon-10bpk",
            FilterPolicy::bits_per_key(Ribbon, 10.0),
            all,
            Writer::Current,
        ),
        fixture(
            "ribbon-empty",
            FilterPolicy::bits_per_key(Ribbon, 10.0),
            0,
            Writer::Current,
        ),
        // Written by the builder that sizes every kind for its rate at any key count
        // (`filter/builder.rs`): textbook arrays in whole words, at least one; Ribbon's result
        // bits at least the policy's, as a blocked Bloom block where that is smaller.
        fixture(
            "standard-10bpk-words",
            FilterPolicy::bits_per_key(Standard, 10.0),
            all,
            Writer::Current,
        ),
        fixture(
            "standard-10bpk-6keys",
            FilterPolicy::bits_per_key(Standard, 10.0),
            6,
            Writer::Current,
        ),
        Fixture {
            holds: Blocked,
            ..fixture(
                "ribbon-10bpk-40keys",
                FilterPolicy::bits_per_key(Ribbon, 10.0),
                40,
                Writer::Current,
            )
        },
        fixture(
            "ribbon-10bpk-100keys",
            FilterPolicy::bits_per_key(Ribbon, 10.0),
            100,
            Writer::Current,
        ),
    ]
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/filter-v1")
}

fn keys() -> Vec<String> {
    let text =
        std::fs::read_to_string(dir().join("keys.txt")).expect("fixtures/filter-v1/keys.txt");
    text.lines().map(str::to_owned).collect()
}

fn build(f: &Fixture) -> Vec<u8> {
    let mut b = FilterBuilder::new(f.policy).unwrap();
    for k in &keys()[..f.keys] {
        b.add_key(k.as_bytes());
    }
    b.finish()
}

fn load_or_write(name: &str, fresh: &[u8]) -> Vec<u8> {
    let path = dir().join(name);
    match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(_) if std::env::var_os("LSM_BLOOM_WRITE_MISSING_FIXTURES").is_some() => {
            std::fs::write(&path, fresh).unwrap();
            fresh.to_vec()
        }
        Err(e) => panic!("missing fixture {}: {e}", path.display()),
    }
}

fn fixture_blocks() -> Vec<(String, Vec<u8>)> {
    fixtures()
        .iter()
        .map(|f| {
            let name = format!("{}.filter", f.name);
            let stored = load_or_write(&name, &build(f));
            (name, stored)
        })
        .collect()
}

#[test]
fn keys_fixture_has_enough_keys() {
    assert!(keys().len() >= 1000);
}

#[test]
fn builder_reproduces_every_fixture_byte_for_byte() {
    for f in fixtures() {
        let fresh = build(&f);
        let stored = load_or_write(&format!("{}.filter", f.name), &fresh);
        match f.written {
            Writer::Current => assert!(
                stored == fresh,
                "{}: builder output differs from the frozen fixture",
                f.name
            ),
            Writer::PartialWords => {
                let (old, new) = (
                    format::decode(&stored).unwrap(),
                    format::decode(&fresh).unwrap(),
                );
                assert_eq!(
                    (new.kind, new.k, new.n),
                    (old.kind, old.k, old.n),
                    "{}",
                    f.name
                );
                assert_eq!(new.m, old.m.div_ceil(64) * 64, "{}", f.name);
                assert_eq!(stored.len(), fresh.len(), "{}", f.name);
            }
        }
    }
}

#[test]
fn reader_decodes_fixtures_and_finds_every_key() {
    let keys = keys();
    for f in fixtures() {
        let block = load_or_write(&format!("{}.filter", f.name), &build(&f));
        let r = FilterReader::new(&block[..]).unwrap();
        let info = r.info();
        assert_eq!(info.kind, f.holds, "{}", f.name);
        assert_eq!(info.version, 1);
        assert_eq!(info.n, f.keys as u64, "{}", f.name);
        if f.keys == 0 {
            assert_eq!(info.m, 0);
        } else if f.holds == f.policy.kind && f.holds != FilterKind::Ribbon {
            assert_eq!(info.k, f.policy.k());
        }
        for (i, k) in keys.iter().enumerate() {
            if i < f.keys {
                assert!(
                    r.may_contain(k.as_bytes()),
                    "{}: false negative for {k}",
                    f.name
                );
            } else if f.keys == 0 {
                assert!(
                    !r.may_contain(k.as_bytes()),
                    "{}: an empty filter matched",
                    f.name
                );
            }
        }
    }
}

#[test]
fn dump_json_matches_fixture() {
    for (name, block) in fixture_blocks() {
        let report = lsm_bloom::inspect::Report::Filter(FilterReport::from_block(&block).unwrap());
        let json = serde_json::to_string_pretty(&report).unwrap() + "\n";
        let json_name = name.replace(".filter", ".json");
        let stored = load_or_write(&json_name, json.as_bytes());
        let stored: serde_json::Value = serde_json::from_slice(&stored).unwrap();
        let fresh: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(stored, fresh, "{json_name}");
    }
}

#[test]
fn every_single_bit_flip_is_rejected() {
    for (name, block) in fixture_blocks() {
        let mut damaged = block.clone();
        for bit in 0..block.len() * 8 {
            damaged[bit / 8] ^= 1 << (bit % 8);
            assert!(
                FilterReader::new(&damaged[..]).is_err(),
                "{name}: flip of bit {bit} accepted"
            );
            damaged[bit / 8] ^= 1 << (bit % 8);
        }
    }
}

#[test]
fn every_truncation_and_extension_is_rejected() {
    for (name, block) in fixture_blocks() {
        for len in 0..block.len() {
            assert!(
                FilterReader::new(&block[..len]).is_err(),
                "{name}: truncation to {len} accepted"
            );
        }
        let mut longer = block.clone();
        longer.push(0);
        assert!(
            FilterReader::new(&longer[..]).is_err(),
            "{name}: extra byte accepted"
        );
    }
}

/// Rewrites bytes `at..` with `value`, then fixes the CRC so only the field is wrong.
fn patched(block: &[u8], at: usize, value: &[u8]) -> Vec<u8> {
    let mut b = block.to_vec();
    b[at..at + value.len()].copy_from_slice(value);
    let body = b.len() - format::TRAILER_LEN;
    let crc = crc32fast::hash(&b[..body]);
    b[body..].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn each_kind_of_damage_gets_its_own_error() {
    let (_, block) = fixture_blocks().into_iter().next().unwrap();
    let err = |b: &[u8]| FilterReader::new(b).unwrap_err();

    assert_eq!(
        err(&block[..10]),
        FilterError::TooShort { len: 10, min: 52 }
    );
    assert!(
        matches!(err(&patched(&block, 0, b"XBFB")), FilterError::BadMagic { found } if &found == b"XBFB")
    );
    let v99 = patched(&block, 4, &99u16.to_le_bytes());
    assert_eq!(
        err(&v99),
        FilterError::UnsupportedVersion {
            found: 99,
            supported: 1
        }
    );
    // Unsupported version wins even when the CRC was not fixed up.
    let mut v99_raw = block.clone();
    v99_raw[4] = 99;
    assert!(matches!(
        err(&v99_raw),
        FilterError::UnsupportedVersion { found: 99, .. }
    ));
    assert!(matches!(
        err(&patched(&block, 6, &[7])),
        FilterError::UnknownKind { found: 7 }
    ));
    assert!(matches!(
        err(&patched(&block, 7, &[9])),
        FilterError::UnknownHashFunction { found: 9 }
    ));
    assert!(matches!(
        err(&patched(&block, 20, &[1])),
        FilterError::ReservedNotZero { offset: 20, .. }
    ));
    assert!(matches!(
        err(&patched(&block, 40, &[1])),
        FilterError::ReservedNotZero { offset: 40, .. }
    ));
    assert!(matches!(
        err(&patched(&block, 16, &0u32.to_le_bytes())),
        FilterError::BadParameters { .. }
    ));
    assert!(matches!(
        err(&patched(&block, 16, &31u32.to_le_bytes())),
        FilterError::BadParameters { .. }
    ));
    let m = u64::from_le_bytes(block[24..32].try_into().unwrap());
    assert!(matches!(
        err(&patched(&block, 24, &(m + 64).to_le_bytes())),
        FilterError::BadParameters { .. }
    ));
    assert!(matches!(
        err(&patched(&block, 24, &u64::MAX.to_le_bytes())),
        FilterError::BadParameters { .. }
    ));
    let mut bad_crc = block.clone();
    let last = bad_crc.len() - 1;
    bad_crc[last] ^= 0x80;
    assert!(
        matches!(err(&bad_crc), FilterError::ChecksumMismatch { expected, actual } if expected != actual)
    );
    // Messages name what was found.
    assert!(err(&v99).to_string().contains("99"));
}

#[test]
fn blocked_m_must_be_whole_lines() {
    let block = fixture_blocks()
        .into_iter()
        .find(|(n, _)| n == "blocked-10bpk.filter")
        .unwrap()
        .1;
    let m = u64::from_le_bytes(block[24..32].try_into().unwrap());
    let e = FilterReader::new(patched(&block, 24, &(m - 8).to_le_bytes())).unwrap_err();
    assert!(
        matches!(e, FilterError::BadParameters { ref reason } if reason.contains("512")),
        "{e}"
    );
}

#[test]
fn ribbon_m_must_be_whole_blocks_of_r_columns() {
    let block = fixture_blocks()
        .into_iter()
        .find(|(n, _)| n == "ribbon-1pct.filter")
        .unwrap()
        .1;
    assert_eq!(block[6], 3, "kind id");
    assert_eq!(
        u32::from_le_bytes(block[16..20].try_into().unwrap()),
        7,
        "r"
    );
    let m = u64::from_le_bytes(block[24..32].try_into().unwrap());
    // m 8 bits short: no longer whole 128-slot blocks of 7 columns.
    let e = FilterReader::new(patched(&block, 24, &(m - 8).to_le_bytes())).unwrap_err();
    assert!(
        matches!(e, FilterError::BadParameters { ref reason } if reason.contains("128")),
        "{e}"
    );
    // r changed to 5 with m unchanged: m (12 blocks × 128 slots × 7) is not a multiple of
    // 128 × 5.
    assert_eq!(m, 12 * 128 * 7);
    let e = FilterReader::new(patched(&block, 16, &5u32.to_le_bytes())).unwrap_err();
    assert!(matches!(e, FilterError::BadParameters { .. }), "{e}");
}
