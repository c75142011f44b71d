//! Unit tests of the C functions, called as the shim calls them.

use std::ffi::c_char;

use super::builder::*;
use super::reader::*;
use super::*;
use crate::filter::FilterReader;

fn policy(name: &str) -> *mut Policy {
    let mut family = -1;
    let mut err = [0 as c_char; 256];
    // SAFETY: valid buffers.
    let p = unsafe {
        lsm_bloom_rdb_policy_new(
            name.as_ptr().cast(),
            name.len(),
            &mut family,
            err.as_mut_ptr(),
            256,
        )
    };
    assert!(!p.is_null(), "{name}");
    p
}

fn build(b: *mut Builder, keys: &[&[u8]]) -> Vec<u8> {
    for k in keys {
        // SAFETY: live builder, valid key.
        unsafe { lsm_bloom_rdb_builder_add_key(b, k.as_ptr().cast(), k.len()) };
    }
    let (mut data, mut len) = (std::ptr::null(), 0);
    // SAFETY: live builder, writable outputs.
    assert!(unsafe { lsm_bloom_rdb_builder_finish(b, &mut data, &mut len) });
    // SAFETY: valid until the next call on `b`.
    unsafe { std::slice::from_raw_parts(data, len) }.to_vec()
}

#[test]
fn builds_and_reads_through_the_c_functions() {
    let p = policy("lsm_bloom.ribbon:10");
    // SAFETY: all pointers below are live and valid.
    unsafe {
        let b = lsm_bloom_rdb_builder_new(p, 0, false, 7, true);
        assert!(!b.is_null());
        // Duplicates adjacent in order are counted once.
        let mut keys: Vec<Vec<u8>> = (0..300u32)
            .map(|i| format!("key{i}").into_bytes())
            .collect();
        keys.insert(1, keys[0].clone());
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let block = build(b, &refs);
        assert_eq!(FilterReader::new(&block[..]).unwrap().header().n, 300);
        // The builder starts over after finish (partitioned filters reuse it).
        assert_eq!(lsm_bloom_rdb_builder_entries(b), 0);
        let mut probe = InlineProbe::NONE;
        let r = lsm_bloom_rdb_reader_new(p, block.as_ptr(), block.len(), &mut probe);
        for k in &keys {
            assert!(lsm_bloom_rdb_probe(&probe, k.as_ptr().cast(), k.len()));
        }
        let owned: Vec<String> = (0..1000u32).map(|i| format!("absent{i}")).collect();
        let refs: Vec<KeyRef> = owned
            .iter()
            .map(|k| KeyRef {
                data: k.as_ptr().cast(),
                len: k.len(),
            })
            .collect();
        let mut out = vec![true; refs.len()];
        lsm_bloom_rdb_probe_batch(&probe, refs.len(), refs.as_ptr(), out.as_mut_ptr());
        let passed = out.iter().filter(|&&m| m).count();
        assert!(
            passed < 30,
            "{passed} of 1000 absent keys passed a 10 bits/key filter"
        );
        for (k, o) in owned.iter().zip(&out) {
            assert_eq!(*o, lsm_bloom_rdb_probe(&probe, k.as_ptr().cast(), k.len()));
            // A probe the shim left zeroed (Rust could not allocate the reader) and a null
            // probe answer "may match".
            assert!(lsm_bloom_rdb_probe(
                &InlineProbe::NONE,
                k.as_ptr().cast(),
                k.len()
            ));
            assert!(lsm_bloom_rdb_probe(
                std::ptr::null(),
                k.as_ptr().cast(),
                k.len()
            ));
        }
        lsm_bloom_rdb_reader_free(r);
        lsm_bloom_rdb_builder_free(b);
        lsm_bloom_rdb_policy_free(p);
    }
}

#[test]
fn key_and_alt_are_deduplicated_as_rocksdb_specifies() {
    let p = policy("lsm_bloom.blocked:10");
    // SAFETY: live pointers.
    unsafe {
        let b = lsm_bloom_rdb_builder_new(p, 0, false, 7, true);
        let add = |k: &[u8], a: &[u8]| {
            lsm_bloom_rdb_builder_add_key_and_alt(
                b,
                k.as_ptr().cast(),
                k.len(),
                a.as_ptr().cast(),
                a.len(),
            )
        };
        add(b"ab1", b"ab");
        add(b"ab2", b"ab"); // prefix repeats: once
        add(b"ac", b"ac"); // key is its own prefix: once
        add(b"ad1", b"ac"); // new key, the previous prefix again: key only
        assert_eq!(lsm_bloom_rdb_builder_entries(b), 5);
        lsm_bloom_rdb_builder_free(b);
        lsm_bloom_rdb_policy_free(p);
    }
}

#[test]
fn damaged_blocks_answer_may_match_and_are_counted() {
    let p = policy("lsm_bloom.blocked:10");
    // SAFETY: live pointers.
    unsafe {
        let b = lsm_bloom_rdb_builder_new(p, 0, false, 7, true);
        let mut block = build(b, &[b"k1", b"k2"]);
        // First the intact block: its probe rules keys out.
        let mut probe = InlineProbe::NONE;
        let r = lsm_bloom_rdb_reader_new(p, block.as_ptr(), block.len(), &mut probe);
        let absent = |probe: &InlineProbe| {
            (0..1000u32)
                .filter(|i| {
                    let k = format!("zz{i}");
                    !lsm_bloom_rdb_probe(probe, k.as_ptr().cast(), k.len())
                })
                .count()
        };
        assert!(absent(&probe) > 900);
        lsm_bloom_rdb_reader_free(r);
        let at = block.len() / 2;
        block[at] ^= 0x10;
        let before = crate::rocksdb::stats().rejected_blocks;
        // The same probe, refilled: "rejected" overwrites what it held.
        let r = lsm_bloom_rdb_reader_new(p, block.as_ptr(), block.len(), &mut probe);
        assert!((*r).filter.is_none());
        assert!(crate::rocksdb::stats().rejected_blocks > before);
        assert_eq!(absent(&probe), 0);
        lsm_bloom_rdb_reader_free(r);
        // Null and empty input are rejected, not read.
        let r = lsm_bloom_rdb_reader_new(p, std::ptr::null(), 100, &mut probe);
        assert!((*r).filter.is_none());
        assert!(lsm_bloom_rdb_probe(&probe, b"zz".as_ptr().cast(), 2));
        lsm_bloom_rdb_reader_free(r);
        lsm_bloom_rdb_builder_free(b);
        lsm_bloom_rdb_policy_free(p);
    }
}

#[test]
fn a_budget_gives_new_level0_files_more_bits_than_the_big_level() {
    let p = policy("lsm_bloom.budget:blocked:10");
    let keys = |n: u32, tag: u8| -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| [&[tag][..], &i.to_be_bytes()[..]].concat())
            .collect()
    };
    let bits = |block: &[u8]| FilterReader::new(block).unwrap().info().bits_per_key;
    // SAFETY: live pointers; each block outlives its reader.
    unsafe {
        let big = lsm_bloom_rdb_builder_new(p, 6, true, 7, true);
        let k = keys(200_000, 1);
        let last = build(big, &k.iter().map(|k| &k[..]).collect::<Vec<_>>());
        let r_last = lsm_bloom_rdb_reader_new(p, last.as_ptr(), last.len(), std::ptr::null_mut());
        let l0 = lsm_bloom_rdb_builder_new(p, 0, false, 7, true);
        let k = keys(20_000, 2);
        let young = build(l0, &k.iter().map(|k| &k[..]).collect::<Vec<_>>());
        // Alone, the big level got the average; beside it, the young run gets more.
        assert!((bits(&last) - 10.0).abs() < 0.6, "{}", bits(&last));
        assert!(bits(&young) > 12.0, "{}", bits(&young));
        // Once the big level's table is closed, it no longer counts.
        lsm_bloom_rdb_reader_free(r_last);
        let again = build(l0, &k.iter().map(|k| &k[..]).collect::<Vec<_>>());
        assert!((bits(&again) - 10.0).abs() < 0.6, "{}", bits(&again));
        lsm_bloom_rdb_builder_free(big);
        lsm_bloom_rdb_builder_free(l0);
        lsm_bloom_rdb_policy_free(p);
    }
}

#[test]
fn bad_names_fail_with_a_message() {
    let name = "lsm_bloom.blocked:lots";
    let mut err = [0 as c_char; 16];
    let mut family = -1;
    // SAFETY: valid buffers; the message is cut to fit 16 bytes.
    let p = unsafe {
        lsm_bloom_rdb_policy_new(
            name.as_ptr().cast(),
            name.len(),
            &mut family,
            err.as_mut_ptr(),
            16,
        )
    };
    assert!(p.is_null());
    // SAFETY: NUL-terminated within the buffer.
    let msg = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) };
    assert_eq!(msg.to_bytes().len(), 15);
}

#[test]
fn space_estimates_match_what_finish_builds() {
    for name in [
        "lsm_bloom.blocked:10",
        "lsm_bloom.standard:7",
        "lsm_bloom.ribbon:8",
    ] {
        let p = policy(name);
        // SAFETY: live pointers.
        unsafe {
            let b = lsm_bloom_rdb_builder_new(p, 0, false, 7, true);
            let keys: Vec<Vec<u8>> = (0..5000u32).map(|i| i.to_be_bytes().to_vec()).collect();
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let space = lsm_bloom_rdb_builder_space(b, keys.len());
            let block = build(b, &refs);
            let diff = (space as f64 - block.len() as f64).abs() / block.len() as f64;
            assert!(
                diff < 0.02,
                "{name}: estimate {space}, built {}",
                block.len()
            );
            let n = lsm_bloom_rdb_builder_entries_for(b, space);
            assert!(n >= keys.len() && n < keys.len() * 11 / 10, "{name}: {n}");
            let fpr = lsm_bloom_rdb_builder_fp_rate(b, keys.len(), block.len());
            assert!(fpr > 0.0 && fpr < 0.1, "{name}: {fpr}");
            lsm_bloom_rdb_builder_free(b);
            lsm_bloom_rdb_policy_free(p);
        }
    }
}
