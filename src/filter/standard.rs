//! The textbook Bloom filter: m bits, k probes per key at `(h1 + i*h2) mod m`
//! (Kirsch–Mitzenmacher double hashing; the exact derivation is in FORMAT.md §1).
//!
//! Expected false-positive rate is `(1 - e^(-kn/m))^k` (see `math::standard_fpr`); the tests
//! in `tests/filter_fpr.rs` measure it within ±15% of that formula for several (bits/key, k)
//! pairs, optimal and not. Each probe touches a different cache line, so a negative lookup in
//! a large filter costs up to k cache misses (in practice ~2: it stops at the first zero bit).

use super::hash::mix;

/// Bytes needed for `m` bits: whole 64-bit words.
pub(crate) fn array_len(m: u64) -> Option<u64> {
    m.checked_add(63).map(|v| v / 64 * 8)
}

/// Sets the k probe bits of hash `h`. `bits` is `array_len(m)` bytes long and `m > 0`.
#[inline]
pub(crate) fn set(bits: &mut [u8], m: u64, k: u32, h: u64) {
    let (mut pos, delta) = start(m, h);
    for _ in 0..k {
        bits[(pos >> 3) as usize] |= 1 << (pos & 7);
        pos = step(pos, delta, m);
    }
}

/// Tests the k probe bits of hash `h`; false as soon as one is clear.
#[inline]
pub(crate) fn test(bits: &[u8], m: u64, k: u32, h: u64) -> bool {
    let (mut pos, delta) = start(m, h);
    for _ in 0..k {
        // `pos < m <= 8 * bits.len()`, checked when the block was validated.
        if bits[(pos >> 3) as usize] & (1 << (pos & 7)) == 0 {
            return false;
        }
        pos = step(pos, delta, m);
    }
    true
}

/// First position and stride, both in `[0, m)`: multiply-shift range reduction of `h` and
/// `mix(h)` (a multiplication instead of two 64-bit divisions).
#[inline]
pub(crate) fn start(m: u64, h: u64) -> (u64, u64) {
    (reduce(h, m), reduce(mix(h), m))
}

/// `floor(x * m / 2^64)`: maps a uniform u64 onto `[0, m)`.
#[inline]
fn reduce(x: u64, m: u64) -> u64 {
    ((u128::from(x) * u128::from(m)) >> 64) as u64
}

/// `(pos + delta) mod m` for `pos, delta < m`, without overflow and without a division.
#[inline]
fn step(pos: u64, delta: u64, m: u64) -> u64 {
    let room = m - pos;
    if delta >= room {
        delta - room
    } else {
        pos + delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_wraps_like_modulo() {
        for m in [1u64, 2, 7, 64, 1000] {
            for pos in 0..m.min(50) {
                for delta in 0..m.min(50) {
                    assert_eq!(step(pos, delta, m), (pos + delta) % m);
                }
            }
        }
        let big = u64::MAX - 3;
        assert_eq!(step(big - 1, big - 2, big), big - 3);
    }

    #[test]
    fn probes_match_the_documented_formula() {
        let (m, k, h) = (1_000_003u64, 7u32, 0x1234_5678_9abc_def0u64);
        let mut bits = vec![0u8; array_len(m).unwrap() as usize];
        set(&mut bits, m, k, h);
        for i in 0..k as u128 {
            let h1 = (h as u128 * m as u128) >> 64;
            let h2 = (mix(h) as u128 * m as u128) >> 64;
            let p = (h1 + i * h2) % m as u128;
            assert_ne!(
                bits[(p / 8) as usize] & (1 << (p % 8)),
                0,
                "probe {i} not set"
            );
        }
        assert!(test(&bits, m, k, h));
    }
}
