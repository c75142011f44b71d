//! Elias–Fano coding of a sorted set of distinct values below a universe `r`: the set a
//! range filter stores (FORMAT.md §9).
//!
//! Each value splits into its `l` low bits, packed in `low`, and its high part `v >> l`,
//! written in unary in `high`: value number `i` sets bit `(v_i >> l) + i`. That is
//! `count · l + count + (r − 1 >> l) + 1` bits; with `l = floor(log2(r / count))` at most
//! `l + 2` bits per value. The one query is [`EliasFano::successor`], the smallest value at or
//! above `x`: the `x >> l`-th zero of `high` marks where the values with high part `x >> l`
//! start (found from a sample taken every [`SAMPLE`] zeros, then by counting zeros a word at
//! a time), and the walk from there reads about one value.

#![expect(
    unsafe_code,
    reason = "calling the successor compiled for POPCNT and BMI2 after checking the CPU has \
              them, and BMI2's PDEP inside it"
)]

use std::sync::atomic::{AtomicU8, Ordering};

use super::words::Words;

/// Zeros of `high` between two samples. Every 256 zeros costs 32 bits per 256 high parts
/// (0.125 bits per value at the usual one zero per value) and leaves a walk of about 8 words
/// to the zero asked for.
pub(crate) const SAMPLE: u64 = 256;

/// Builds the two bit arrays, as 64-bit words (bit `i` is bit `i % 64` of word `i / 64`), for
/// `values`: strictly increasing, every one below `r`, with `l` low bits each (`l < 64`).
pub(crate) fn encode(values: &[u64], r: u64, l: u32) -> (Vec<u64>, Vec<u64>) {
    let count = values.len() as u64;
    let mut high = vec![0u64; words(high_len(count, r, l))];
    let mut low = vec![0u64; words(count * u64::from(l))];
    for (i, &v) in values.iter().enumerate() {
        let at = (v >> l) + i as u64;
        high[(at / 64) as usize] |= 1 << (at % 64);
        put_low(&mut low, i as u64, l, v & low_mask(l));
    }
    (high, low)
}

/// Bits of `high` for `count` values below `r` with `l` low bits: one per value, one zero
/// per possible high part (`r ≥ 1`).
pub(crate) fn high_len(count: u64, r: u64, l: u32) -> u64 {
    count + ((r - 1) >> l) + 1
}

/// 64-bit words holding `bits` bits.
pub(crate) fn words(bits: u64) -> usize {
    bits.div_ceil(64) as usize
}

fn low_mask(l: u32) -> u64 {
    if l == 0 {
        0
    } else {
        u64::MAX >> (64 - l)
    }
}

fn put_low(low: &mut [u64], i: u64, l: u32, v: u64) {
    if l == 0 {
        return;
    }
    let at = i * u64::from(l);
    let (w, off) = ((at / 64) as usize, (at % 64) as u32);
    low[w] |= v << off;
    if off + l > 64 {
        low[w + 1] |= v >> (64 - off);
    }
}

/// A set in Elias–Fano coding, checked whole by [`EliasFano::new`], with its zero samples.
#[derive(Clone, Debug)]
pub(crate) struct EliasFano {
    high: Words,
    low: Words,
    l: u32,
    count: u64,
    /// Position in `high` of zero number `s · SAMPLE` (the high bits' length is checked
    /// to fit 32 bits).
    samples: Vec<u32>,
    /// The largest high part a value below `r` can have.
    top: u64,
}

impl EliasFano {
    /// The set coded by `high` and `low` (words as `encode` gives them) for `count` values
    /// below `r` with `l` low bits. Checked whole, so that every query reads a valid set:
    /// the array lengths; exactly `count` ones in `high` within its length, zeros after;
    /// values strictly increasing and below `r`. Work is linear in the arrays' length.
    pub(crate) fn new(
        high: Vec<u64>,
        low: Vec<u64>,
        count: u64,
        r: u64,
        l: u32,
    ) -> Result<EliasFano, String> {
        if l >= 64 {
            return Err(format!("{l} low bits per value (at most 63)"));
        }
        if r == 0 {
            return Err("a universe of 0 values".into());
        }
        let bits = count
            .checked_add((r - 1) >> l)
            .and_then(|b| b.checked_add(1))
            .ok_or("the high bits' length overflows")?;
        if bits > u64::from(u32::MAX) {
            return Err(format!("{count} values: more than this build reads (2^31)"));
        }
        if high.len() != words(bits) {
            return Err(format!(
                "{} words of high bits, {} expected",
                high.len(),
                words(bits)
            ));
        }
        let low_bits = count
            .checked_mul(u64::from(l))
            .ok_or("the low bits' length overflows")?;
        if low.len() != words(low_bits) {
            return Err(format!(
                "{} words of low bits, {} expected",
                low.len(),
                words(low_bits)
            ));
        }
        if bits % 64 != 0 && high.last().is_some_and(|w| w >> (bits % 64) != 0) {
            return Err("bits set past the end of the high bits".into());
        }
        if low_bits % 64 != 0 && low.last().is_some_and(|w| w >> (low_bits % 64) != 0) {
            return Err("bits set past the end of the low bits".into());
        }
        let ones: u64 = high.iter().map(|w| u64::from(w.count_ones())).sum();
        if ones != count {
            return Err(format!("{ones} values in the high bits, {count} expected"));
        }
        let mut ef = EliasFano {
            high: Words::place(high),
            low: Words::place(low),
            l,
            count,
            samples: Vec::new(),
            top: (r - 1) >> l,
        };
        // One pass, a word at a time: the samples, and each value against the one before and
        // the universe. (Bit by bit it took 24 ms at 10^6 values; `range_filter_bench`.)
        let (mut zeros, mut i, mut prev) = (0u64, 0u64, None::<u64>);
        for (w, &word) in ef.high.iter().enumerate() {
            let base = w as u64 * 64;
            let valid = (bits - base).min(64);
            let mask = if valid == 64 {
                u64::MAX
            } else {
                (1 << valid) - 1
            };
            // Zeros of this word within the length; a sample where the count passes a multiple.
            let zero_bits = !word & mask;
            let z = u64::from(zero_bits.count_ones());
            let mut next_sample = zeros.div_ceil(SAMPLE) * SAMPLE;
            while next_sample < zeros + z {
                let at =
                    base + u64::from(nth_one::<false>(zero_bits, (next_sample - zeros) as u32));
                ef.samples.push(at as u32);
                next_sample += SAMPLE;
            }
            // Ones: value i's high part is its position less the values before it.
            let mut ones = word;
            while ones != 0 {
                let at = base + u64::from(ones.trailing_zeros());
                ones &= ones - 1;
                let high = at - i;
                let v = (high << l) | ef.low(i);
                if high > ef.top || v > r - 1 || prev.is_some_and(|p| p >= v) {
                    return Err(format!("value {i} out of order or past the universe"));
                }
                prev = Some(v);
                i += 1;
            }
            zeros += z;
        }
        Ok(ef)
    }

    /// The `i`-th value's low bits.
    #[inline]
    fn low(&self, i: u64) -> u64 {
        self.probe().low(i)
    }

    /// The set's arrays as slices, for one query: a mapped array's `Words` is matched once,
    /// not at every word read (callgrind, `range_filter_bench` at 10^4 keys: 188 instructions
    /// per `any_between`, 10 of them in `Words::deref`).
    #[inline(always)]
    fn probe(&self) -> Probe<'_> {
        Probe {
            high: &self.high,
            low: &self.low,
            samples: &self.samples,
            l: self.l,
            count: self.count,
        }
    }

    /// Whether a value lies in `s..=e` (`s ≤ e`). Compiled twice: for CPUs with POPCNT and
    /// BMI2 (x86-64 since Haswell), chosen at run time, and portable; the baseline x86-64
    /// target has neither, and counting zeros and finding one in a word took a third of a
    /// probe in the portable build (`range_filter_bench` at 10^4 keys: 132 → 96 ns).
    #[inline]
    pub(crate) fn any_between(&self, s: u64, e: u64) -> bool {
        #[cfg(target_arch = "x86_64")]
        if fast_available() {
            // SAFETY: the CPU has POPCNT, BMI1 and BMI2 (`fast_available`).
            return unsafe { self.any_between_fast(s, e) };
        }
        self.any_between_with::<false>(s, e)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "popcnt,bmi1,bmi2")]
    fn any_between_fast(&self, s: u64, e: u64) -> bool {
        self.any_between_with::<true>(s, e)
    }

    #[inline(always)]
    fn any_between_with<const BMI2: bool>(&self, s: u64, e: u64) -> bool {
        let hs = s >> self.l;
        if hs > self.top {
            return false;
        }
        let p = self.probe();
        // Where the values with high part hs start, and how many come before.
        let mut at = if hs == 0 {
            0
        } else {
            p.select0::<BMI2>(hs - 1) + 1
        };
        let mut i = at - hs;
        // The values with high part hs, in order: the first at or above s decides.
        while i < p.count && p.bit(at) {
            let v = (hs << p.l) | p.low(i);
            if v >= s {
                return v <= e;
            }
            at += 1;
            i += 1;
        }
        // None in s's bucket at or above s. An interval inside the bucket — a short range's
        // almost always is — ends here; else value i, the next, is in a later bucket.
        if e >> p.l == hs || i >= p.count {
            return false;
        }
        let next = p.next_one(at);
        ((next - i) << p.l) | p.low(i) <= e
    }

    /// Bytes held in memory.
    pub(crate) fn memory(&self) -> usize {
        8 * (self.high.len() + self.low.len()) + 4 * self.samples.len()
    }
}

/// An `EliasFano`'s arrays borrowed as slices for one query (`EliasFano::probe`).
struct Probe<'a> {
    high: &'a [u64],
    low: &'a [u64],
    samples: &'a [u32],
    l: u32,
    count: u64,
}

impl Probe<'_> {
    /// The `i`-th value's low bits.
    #[inline(always)]
    fn low(&self, i: u64) -> u64 {
        if self.l == 0 {
            return 0;
        }
        let at = i * u64::from(self.l);
        let (w, off) = ((at / 64) as usize, (at % 64) as u32);
        let mut v = self.low[w] >> off;
        if off + self.l > 64 {
            v |= self.low[w + 1] << (64 - off);
        }
        v & low_mask(self.l)
    }

    /// Position in `high` of zero number `k` (`k ≤ top`, so it exists).
    #[inline(always)]
    fn select0<const BMI2: bool>(&self, k: u64) -> u64 {
        let s = (k / SAMPLE) as usize;
        let pos = u64::from(self.samples[s]);
        let mut left = k - s as u64 * SAMPLE;
        let mut w = (pos / 64) as usize;
        let mut zeros = !self.high[w] & (u64::MAX << (pos % 64));
        loop {
            let z = u64::from(zeros.count_ones());
            if left < z {
                return w as u64 * 64 + u64::from(nth_one::<BMI2>(zeros, left as u32));
            }
            left -= z;
            w += 1;
            zeros = !self.high[w];
        }
    }

    #[inline(always)]
    fn bit(&self, at: u64) -> bool {
        self.high[(at / 64) as usize] >> (at % 64) & 1 == 1
    }

    /// The first one at or after `at` (one exists: a value is left).
    #[inline]
    fn next_one(&self, at: u64) -> u64 {
        let mut w = (at / 64) as usize;
        let mut ones = self.high[w] & (u64::MAX << (at % 64));
        while ones == 0 {
            w += 1;
            ones = self.high[w];
        }
        w as u64 * 64 + u64::from(ones.trailing_zeros())
    }
}

/// 0: not checked yet, 1: no, 2: yes.
static FAST: AtomicU8 = AtomicU8::new(0);

/// True when this CPU runs `successor_fast`. Checked once per process; then one relaxed load.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn fast_available() -> bool {
    match FAST.load(Ordering::Relaxed) {
        2 => true,
        1 => false,
        _ => {
            let yes = std::is_x86_feature_detected!("popcnt")
                && std::is_x86_feature_detected!("bmi1")
                && std::is_x86_feature_detected!("bmi2");
            FAST.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
    }
}

/// Position of the `n`-th set bit of `word` (`n < word.count_ones()`): with BMI2, PDEP
/// deposits bit `n` at it; without, bytes are skipped by their counts, then bits.
#[inline(always)]
fn nth_one<const BMI2: bool>(word: u64, mut n: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if BMI2 {
        // SAFETY: instantiated with BMI2 only inside `successor_fast`, which runs only on a
        // CPU with BMI2.
        return unsafe { std::arch::x86_64::_pdep_u64(1 << n, word) }.trailing_zeros();
    }
    let mut base = 0;
    let mut w = word;
    loop {
        let c = (w & 0xff).count_ones();
        if n < c {
            break;
        }
        n -= c;
        w >>= 8;
        base += 8;
    }
    for _ in 0..n {
        w &= w - 1;
    }
    base + w.trailing_zeros()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(values: &[u64], r: u64, l: u32) -> EliasFano {
        let (high, low) = encode(values, r, l);
        EliasFano::new(high, low, values.len() as u64, r, l).unwrap()
    }

    /// Every answer, against a scan of the sorted values, for sets dense and sparse, with l
    /// from 0 up, intervals inside a bucket and across several, values at both ends of the
    /// universe; the portable build answers as the one chosen at run time.
    #[test]
    fn any_between_matches_a_scan() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (count, r) in [
            (1u64, 1u64),
            (1, 1000),
            (5, 5),
            (100, 1000),
            (3000, 1 << 20),
            (700, 70_000),
        ] {
            let mut v: Vec<u64> = (0..count).map(|_| next() % r).chain([0, r - 1]).collect();
            v.sort_unstable();
            v.dedup();
            for l in [0, (r / v.len() as u64).max(1).ilog2(), 3] {
                let ef = set(&v, r, l);
                for k in 0..20_000u64 {
                    let s = if k < 3000 { k.min(r - 1) } else { next() % r };
                    let e = s + next() % [1, 4, 40, 3000][(k % 4) as usize];
                    let want = v.iter().any(|&x| s <= x && x <= e);
                    assert_eq!(ef.any_between(s, e), want, "r {r} l {l} {s}..={e}");
                    assert_eq!(ef.any_between_with::<false>(s, e), want, "portable");
                }
                assert!(!ef.any_between(r, u64::MAX));
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn nth_one_fast(word: u64, n: u32) -> u32 {
        #[target_feature(enable = "bmi2")]
        fn with_bmi2(word: u64, n: u32) -> u32 {
            nth_one::<true>(word, n)
        }
        // SAFETY: called only after `fast_available` found BMI2.
        unsafe { with_bmi2(word, n) }
    }

    #[test]
    fn nth_one_finds_each_bit() {
        for word in [1u64, u64::MAX, 0x8000_0000_0000_0001, 0xf0f0_0f0f_1234_5678] {
            let bits: Vec<u32> = (0..64).filter(|b| word >> b & 1 == 1).collect();
            for (n, &b) in bits.iter().enumerate() {
                assert_eq!(nth_one::<false>(word, n as u32), b);
                #[cfg(target_arch = "x86_64")]
                if fast_available() {
                    assert_eq!(nth_one_fast(word, n as u32), b);
                }
            }
        }
    }

    /// Sets that are not sets are refused: values out of order, a value repeated, a value
    /// past the universe, a one missing, bits past the end.
    #[test]
    fn malformed_sets_are_refused() {
        let (r, l) = (1000u64, 3);
        let (high, low) = encode(&[5, 9, 700], r, l);
        assert!(EliasFano::new(high.clone(), low.clone(), 3, r, l).is_ok());
        // Low bits of value 1 made smaller than value 0's, same bucket (5 = 0b101, 9 = 1·8+1).
        let (h2, lo2) = encode(&[5, 6, 700], r, l);
        let mut swapped = lo2.clone();
        swapped[0] = (swapped[0] & !0b111_111) | 0b101 << 3 | 0b110;
        assert!(EliasFano::new(h2.clone(), swapped, 3, r, l).is_err());
        let mut same = lo2;
        same[0] = (same[0] & !0b111_111) | 0b101 << 3 | 0b101;
        assert!(EliasFano::new(h2, same, 3, r, l).is_err());
        assert!(EliasFano::new(high.clone(), low.clone(), 2, r, l).is_err());
        assert!(EliasFano::new(high.clone(), low.clone(), 3, 600, l).is_err());
        let mut past = high.clone();
        *past.last_mut().unwrap() |= 1 << 63;
        assert!(EliasFano::new(past, low.clone(), 4, r, l).is_err());
        assert!(EliasFano::new(high, low, 3, r, 64).is_err());
    }
}
