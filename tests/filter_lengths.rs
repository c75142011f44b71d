//! Every filter kind holds its false-positive rate at every size: the criteria of LevelDB's
//! `util/bloom_test.cc` (`VaryingLengths`) and RocksDB's (`FullBloomTest.FullVaryingLengths`).
//!
//! Lengths 1..10 step 1, 10..100 step 10, 100..1,000 step 100, 1,000..10,000 step 1,000; the
//! keys are the 4-byte little-endian integers `0..length`; 10 bits/key; the rate is measured
//! over the 10,000 integers from 10^9 on. Every added key matches; the rate is at most 2% at
//! every length; "mediocre" filters (rate over 1.25%) are at most a fifth of the good ones;
//! the bit array is at most `length × 10 / 8` bytes plus 40 (LevelDB's allowance, for the
//! textbook filter) or plus 2 × 64 + 5 (RocksDB's, for its cache-local filters: blocked Bloom
//! and Ribbon), beyond the block's fixed framing (header and trailer).
//!
//! `cargo test --test filter_lengths -- --nocapture` prints the rate and size per length.

use lsm_bloom::filter::format::{HEADER_LEN, TRAILER_LEN};
use lsm_bloom::filter::{FilterBuilder, FilterKind, FilterPolicy, FilterReader};

/// LevelDB's `NextLength`.
fn lengths() -> Vec<u32> {
    let mut out = Vec::new();
    let mut n = 1;
    while n <= 10_000 {
        out.push(n);
        n += if n < 10 {
            1
        } else if n < 100 {
            10
        } else if n < 1000 {
            100
        } else {
            1000
        };
    }
    out
}

/// One filter of `length` keys: (false-positive rate, bit-array bytes, the kind it holds).
fn measure(policy: FilterPolicy, length: u32) -> (f64, usize, FilterKind) {
    let mut b = FilterBuilder::new(policy).unwrap();
    for i in 0..length {
        b.add_key(&i.to_le_bytes());
    }
    let block = b.finish();
    let r = FilterReader::new(&block[..]).unwrap();
    for i in 0..length {
        assert!(
            r.may_contain(&i.to_le_bytes()),
            "{policy:?} length {length}: key {i} was added and does not match"
        );
    }
    let hits = (0..10_000u32)
        .filter(|i| r.may_contain(&(i + 1_000_000_000).to_le_bytes()))
        .count();
    let array = block.len() - HEADER_LEN - TRAILER_LEN;
    (hits as f64 / 10_000.0, array, r.header().kind)
}

fn varying_lengths(kind: FilterKind, allowance: usize) {
    let policy = FilterPolicy::bits_per_key(kind, 10.0);
    let (mut good, mut mediocre) = (0, 0);
    let mut failures = Vec::new();
    println!("{kind}: length, rate, array bytes (limit), kind held");
    for length in lengths() {
        let (rate, bytes, held) = measure(policy, length);
        let limit = length as usize * 10 / 8 + allowance;
        println!(
            "{kind} {length:>6} {:>7.3}% {bytes:>6} ({limit}) {held}",
            rate * 100.0
        );
        if rate > 0.02 {
            failures.push(format!("length {length}: rate {:.2}% > 2%", rate * 100.0));
        }
        if bytes > limit {
            failures.push(format!("length {length}: {bytes} bytes > {limit}"));
        }
        if rate > 0.0125 {
            mediocre += 1;
        } else {
            good += 1;
        }
    }
    println!("{kind}: {good} good, {mediocre} mediocre");
    if mediocre * 5 > good {
        failures.push(format!("{mediocre} mediocre filters, {good} good"));
    }
    assert!(failures.is_empty(), "{kind}: {failures:#?}");
}

#[test]
fn standard_holds_its_rate_at_every_length() {
    varying_lengths(FilterKind::Standard, 40);
}

#[test]
fn blocked_holds_its_rate_at_every_length() {
    varying_lengths(FilterKind::Blocked, 2 * 64 + 5);
}

#[test]
fn ribbon_holds_its_rate_at_every_length() {
    varying_lengths(FilterKind::Ribbon, 2 * 64 + 5);
}
