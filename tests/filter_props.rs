//! Property tests: a filter never says "absent" for a key that was added, whatever the kind,
//! size, bits/key or k; and the reader never panics on arbitrary bytes.

mod common;

use lsm_bloom::filter::{hash_key, FilterBuilder, FilterKind, FilterPolicy, FilterReader};
use proptest::prelude::*;

fn kind() -> impl Strategy<Value = FilterKind> {
    prop_oneof![
        Just(FilterKind::Standard),
        Just(FilterKind::Blocked),
        Just(FilterKind::Ribbon)
    ]
}

proptest! {
    // 200 cases each with `LSM_BLOOM_THOROUGH` (`.ci/run`), 40 in a plain `cargo test`.
    #![proptest_config(ProptestConfig::with_cases(common::scaled(200, 40)))]

    #[test]
    fn no_false_negatives(
        kind in kind(),
        bits_per_key in 0.5f64..40.0,
        k in proptest::option::of(1u32..=30),
        keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..3000),
    ) {
        let mut policy = FilterPolicy::bits_per_key(kind, bits_per_key);
        if let Some(k) = k {
            policy = policy.with_num_probes(k);
        }
        let mut b = FilterBuilder::new(policy).unwrap();
        for key in &keys {
            b.add_key(key);
        }
        let block = b.finish();
        let r = FilterReader::new(&block[..]).unwrap();
        for key in &keys {
            prop_assert!(r.may_contain(key));
            prop_assert!(r.may_contain_hash(hash_key(key)));
        }
        prop_assert_eq!(r.info().n, keys.len() as u64);
    }

    #[test]
    fn reader_never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = FilterReader::new(&bytes[..]);
    }

    #[test]
    fn reader_never_panics_on_damaged_headers(
        kind in kind(),
        n in 0u64..200,
        at in 0usize..52,
        value in any::<u8>(),
    ) {
        let mut b = FilterBuilder::new(FilterPolicy::bits_per_key(kind, 10.0)).unwrap();
        for i in 0..n {
            b.add_key(&i.to_le_bytes());
        }
        let mut block = b.finish();
        let at = at.min(block.len() - 1);
        block[at] = value;
        // Fix the checksum so the field checks behind it run too.
        let body = block.len() - 4;
        let crc = crc32fast::hash(&block[..body]);
        block[body..].copy_from_slice(&crc.to_le_bytes());
        if let Ok(r) = FilterReader::new(&block[..]) {
            let _ = r.may_contain(b"probe");
            let _ = r.info();
        }
    }
}

/// Ten million member probes per kind over many filter sizes (one million in a plain `cargo
/// test`, ten with `LSM_BLOOM_THOROUGH`, as `.ci/run` runs it): not one false negative.
#[test]
fn millions_of_member_probes_without_a_false_negative() {
    let target: u64 = common::scaled(10_000_000, 1_000_000);
    for kind in [
        FilterKind::Standard,
        FilterKind::Blocked,
        FilterKind::Ribbon,
    ] {
        let mut probes = 0u64;
        let mut size = 1u64;
        let mut round = 0u64;
        while probes < target {
            let bpk = [4.0, 7.5, 10.0, 16.0][(round % 4) as usize];
            let mut b = FilterBuilder::new(FilterPolicy::bits_per_key(kind, bpk)).unwrap();
            let base = round << 40;
            for i in 0..size {
                b.add_hash(hash_key(&(base + i).to_le_bytes()));
            }
            let block = b.finish();
            let r = FilterReader::new(&block[..]).unwrap();
            for i in 0..size {
                assert!(
                    r.may_contain(&(base + i).to_le_bytes()),
                    "{kind} size {size} key {i}"
                );
            }
            probes += size;
            size = (size * 3 / 2 + 1).min(1_000_000);
            round += 1;
        }
        assert!(probes >= target);
    }
}
