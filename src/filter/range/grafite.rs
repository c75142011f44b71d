//! Grafite's hash (Costa, Ferragina and Vinciguerra, "Grafite: Taming Adversarial Queries
//! with Optimal Range Filters", SIGMOD 2024), implemented from the paper.
//!
//! Keys are points `x` of the u64 line (`map.rs`). The line is cut into blocks of `L = 2^log_l`
//! points; block `j = x >> log_l` is placed in the reduced universe `[0, r)` at an offset
//! `q(j)`, and `h(x) = (q(j) + x mod L) mod r`. Inside one block `h` is a shift, so a query
//! range of at most `L` points — one block, or the end of one and the start of the next —
//! is at most two runs of the reduced universe, each at most two intervals once it wraps at
//! `r`. The filter stores `h` of every key and answers "maybe" when a stored value lies in
//! one of those intervals.
//!
//! **The bound.** A key inside the range always lands in its intervals (no false "empty").
//! A key outside it in the same block lands outside them (a shift of distinct points, and
//! `r ≥ 2L`); a key in another block lands at `q(j) + offset` with `q` pairwise independent,
//! so in an interval of length `ℓ` with probability `ℓ / r`. Over `v` stored values the
//! rate is at most `ℓ · v / r`, **whatever the queries are**: the hash is drawn after nothing
//! about them. The builder takes `r = v · 2^(B − 2)` for `B` bits per key (the set then codes
//! in about `B` bits per value, `elias_fano.rs`), so the rate is at most `ℓ / 2^(B − 2)`:
//! 0.195% for `ℓ = 32` at 16 bits per key, 3.125% at 12.
//!
//! **`q` is pairwise independent over all 2^64 blocks:** `q(j) = ⌊(((a · j + b) mod 2^128)
//! >> 64) · r / 2^64⌋` with `a`, `b` 128-bit (Dietzfelbinger's multiply-add-shift, strongly
//! universal from 64 to 64 bits), then the multiply-shift reduction to `[0, r)` (off uniform
//! by at most `r / 2^64`). A hash taken modulo a 61-bit prime, as some implementations do,
//! sends blocks `j` and `j + p` to the same place.

use crate::filter::hash::mix;

/// Grafite's hash with its parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hash {
    a: u128,
    b: u128,
    r: u64,
    log_l: u32,
}

impl Hash {
    /// The hash drawn from `seed` (FORMAT.md §9: `a = mix(seed ^ C1) << 64 | mix(seed ^ C2)`,
    /// `b` likewise with C3 and C4), for a reduced universe of `r` values and blocks of
    /// `2^log_l` points. Needs `2^log_l ≤ r`.
    pub(crate) fn new(seed: u64, r: u64, log_l: u32) -> Hash {
        let word = |c: u64| u128::from(mix(seed ^ c));
        Hash {
            a: word(C1) << 64 | word(C2),
            b: word(C3) << 64 | word(C4),
            r,
            log_l,
        }
    }

    /// The longest range answered: `L` points.
    pub(crate) fn block(self) -> u64 {
        1 << self.log_l
    }

    #[inline]
    fn q(self, j: u64) -> u64 {
        let y = (self.a.wrapping_mul(u128::from(j)).wrapping_add(self.b) >> 64) as u64;
        ((u128::from(y) * u128::from(self.r)) >> 64) as u64
    }

    /// Where block `j` starts in the reduced universe, plus `offset` (`< L ≤ r`).
    #[inline]
    fn place(self, j: u64, offset: u64) -> u64 {
        let s = self.q(j) + offset;
        if s >= self.r {
            s - self.r
        } else {
            s
        }
    }

    /// `h(x)`.
    #[inline]
    pub(crate) fn of(self, x: u64) -> u64 {
        self.place(x >> self.log_l, x & (self.block() - 1))
    }

    /// Whether `hit` holds for one of the intervals of the reduced universe (inclusive)
    /// that the points `lo..=hi` hash into (`lo ≤ hi`, `hi − lo < 2L`): one run per block the
    /// range touches (at most three), each one interval, or two where it wraps at `r`.
    ///
    /// Ranges of up to `2L` points are answered, not only `L`: the bound's argument holds per
    /// block (a key of another block lands in a run of `k` values with probability `k / r`,
    /// and the runs add up to `ℓ`), so the rate stays `ℓ · v / r`, at one more probe. It
    /// matters at the design length: a scan `[s, s + L)` whose exclusive end bound ends in a
    /// 0 byte maps to `L + 1` points (`map.rs`), which is 1 in 256 such scans.
    #[inline]
    pub(crate) fn any_interval(
        self,
        lo: u64,
        hi: u64,
        mut hit: impl FnMut(u64, u64) -> bool,
    ) -> bool {
        let mask = self.block() - 1;
        let (ja, jb) = (lo >> self.log_l, hi >> self.log_l);
        if ja == jb {
            return self.run(self.place(ja, lo & mask), hi - lo + 1, &mut hit);
        }
        if self.run(
            self.place(ja, lo & mask),
            self.block() - (lo & mask),
            &mut hit,
        ) {
            return true;
        }
        // A block wholly inside (only when the range is longer than `L`).
        if jb - ja == 2 && self.run(self.place(ja + 1, 0), self.block(), &mut hit) {
            return true;
        }
        self.run(self.place(jb, 0), (hi & mask) + 1, &mut hit)
    }

    /// `hit` on the `len` values from `start` on, wrapping at `r` (`len ≤ r`).
    #[inline]
    fn run(self, start: u64, len: u64, hit: &mut impl FnMut(u64, u64) -> bool) -> bool {
        let end = start + (len - 1);
        if end < self.r {
            hit(start, end)
        } else {
            hit(start, self.r - 1) || hit(0, end - self.r)
        }
    }
}

/// The constants `a` and `b` are drawn with (FORMAT.md §9).
const C1: u64 = 0x243F_6A88_85A3_08D3;
const C2: u64 = 0x1319_8A2E_0370_7344;
const C3: u64 = 0xA409_3822_299F_31D0;
const C4: u64 = 0x082E_FA98_EC4E_6C89;

#[cfg(test)]
mod tests {
    use super::*;

    /// Each point of a range lands in one of its intervals, across block boundaries (a range
    /// of up to 2L points touches three blocks) and the wrap at r, and the intervals hold
    /// exactly as many values as the range has points.
    #[test]
    fn a_range_hashes_into_its_intervals() {
        for (r, log_l) in [(64u64, 3u32), (1000, 5), (1 << 20, 10), (37, 0)] {
            let h = Hash::new(7, r, log_l);
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            for _ in 0..3000 {
                x = mix(x);
                let lo = if x.is_multiple_of(3) {
                    u64::MAX - x % 100
                } else {
                    x
                };
                // Up to 2L points: three blocks at most.
                let len = 1 + (mix(x) % (2 * h.block()));
                let hi = lo.saturating_add(len - 1);
                let mut spans = Vec::new();
                assert!(!h.any_interval(lo, hi, |a, b| {
                    spans.push((a, b));
                    false
                }));
                let total: u64 = spans.iter().map(|(a, b)| b - a + 1).sum();
                assert_eq!(total, hi - lo + 1);
                for p in lo..=hi {
                    let v = h.of(p);
                    assert!(v < r);
                    assert!(spans.iter().any(|&(a, b)| a <= v && v <= b));
                }
            }
        }
    }

    /// q spreads blocks evenly: a 2^61-periodic hash (a prime modulus) would put blocks j
    /// and j + (2^61 − 1) at the same place every time.
    #[test]
    fn blocks_far_apart_are_placed_independently() {
        let r = 1 << 20;
        let h = Hash::new(1, r, 0);
        let p = (1u64 << 61) - 1;
        let same = (0..10_000u64).filter(|&j| h.q(j) == h.q(j + p)).count();
        assert!(same < 5, "{same} of 10,000 pairs placed together");
    }
}
