//! The cache-local ("blocked") Bloom filter: the key's hash picks one 64-byte line (512 bits)
//! and all k probes fall inside it, so a lookup costs one cache miss whatever k is. The price
//! is a higher false-positive rate than the textbook filter at the same bits/key, because
//! lines fill unevenly (a Poisson number of keys lands on each): `math::blocked_fpr` models it.
//!
//! Line and probe derivation are specified in FORMAT.md §1. The choice of k per bits/key is
//! `math::blocked_default_k`, where the measured table lives.

/// Bits in one line.
pub(crate) const LINE_BITS: u64 = 512;
/// Bytes in one line.
pub(crate) const LINE_BYTES: usize = 64;

/// The k probe bits of `h` as a 512-bit mask (8 little-endian words; FORMAT.md §1): k
/// distinct bits drawn from 9-bit fields of a SplitMix64 stream seeded by `h`, a field that
/// repeats an earlier probe being skipped.
#[inline]
fn probe_mask(h: u64, k: u32) -> [u64; 8] {
    let mut mask = [0u64; 8];
    let mut x = super::hash::mix(h);
    let mut left = 7; // 9-bit fields left in x
    let mut found = 0;
    let mut round = 0u64;
    while found < k {
        if left == 0 {
            round += 1;
            x = super::hash::mix(h ^ round.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            left = 7;
        }
        let bit = (x & 511) as usize;
        x >>= 9;
        left -= 1;
        let (w, b) = (bit >> 6, 1u64 << (bit & 63));
        found += u32::from(mask[w] & b == 0);
        mask[w] |= b;
    }
    mask
}

/// The byte offset of the line hash `h` uses, among `lines` lines (`1..=2^32`).
#[inline]
pub(crate) fn line_start(h: u64, lines: u64) -> usize {
    ((((h >> 32) * lines) >> 32) as usize) * LINE_BYTES
}

/// Sets the k probe bits of `h`. `bits` holds `lines >= 1` lines.
#[inline]
pub(crate) fn set(bits: &mut [u8], lines: u64, k: u32, h: u64) {
    let start = line_start(h, lines);
    let mask = probe_mask(h, k);
    for (word, m) in bits[start..start + LINE_BYTES]
        .chunks_exact_mut(8)
        .zip(mask)
    {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        word.copy_from_slice(&(u64::from_le_bytes(w) | m).to_le_bytes());
    }
}

/// Tests the k probe bits of `h`: all of them set in the key's line.
///
/// Fast path (k ≤ 7, every default k up to ~14 bits/key): the first k 9-bit fields of
/// `mix(h)` are the probes unless two of them are equal (probability ≈ k(k−1)/1024, 4% at
/// k = 7), so they are tested straight from the line and checked for repeats branch-free
/// (`fields_repeat`); only a repeat takes the exact loop of `probe_mask`. Same bits, same
/// answer (unit test `fast_path_answers_as_the_probe_mask`). Being branch-free, probes of
/// successive keys overlap their cache misses. Measured with `filter_bench --large-mib 8
/// --queries 2000000 --rounds 3`, negative probes, before → after: 23.8 → 14.9 ns
/// in cache, 69.6 → 25.3 ns for an 8 MiB filter (the `fastbloom` crate: 14.4 and 23.9 ns).
///
/// The repeat check runs only when all k bits are set: a clear bit among the first k fields
/// answers "absent" whether or not two of them are equal (the probes, the first k distinct
/// fields, include them all). It had run on every probe, 8.7% of an absent `multi_get`'s
/// samples at 2×10^6 keys configured alike (`perf record --call-graph dwarf` on `db_bench
/// --hold absent-multi`, `blocked.rs` lines of `fields_repeat`). `filter_bench --large-mib 16
/// --queries 2000000 --rounds 3` (k = 6), two interleaved runs of each build: negative probes
/// in cache 15.3–15.4 → 11.5–11.6 ns, positive 15.4–15.5 → 15.8–15.9 ns; the 16 MiB filter's
/// figures moved within this machine's noise (negative 72.4 / 76.4 → 65.7 / 34.0 ns).
///
/// Early "absent" for k > 7 (what the filter budget gives the young levels, ~14–21 bits/key):
/// the same seven fields are all probes then, so a clear bit among them answers at once, and
/// only keys whose seven bits are all set (1/128 of absent keys in a half-full line) build
/// the mask in `test_exact`. Before, every probe built it: a k-step loop through a mask on
/// the stack, 18.7% of an absent get's samples at the defaults (`db_bench --defaults --hold
/// absent`, 2×10^6 keys). `filter_bench --bits-per-key 20 --large-mib 16 --queries 1000000`
/// (k = 14), negative probes, before → after: 39.4 → 11.6 ns in cache, 140–183 → 73–77 ns
/// for a 16 MiB filter; positive probes, which now test seven bits before the loop, 39.4 →
/// 49.4 ns in cache.
#[inline(always)]
pub(crate) fn test(bits: &[u8], lines: u64, k: u32, h: u64) -> bool {
    let start = line_start(h, lines);
    let Some(line) = bits
        .get(start..start + LINE_BYTES)
        .and_then(|l| <&[u8; LINE_BYTES]>::try_from(l).ok())
    else {
        return true; // unreachable for a validated block; "maybe" is the safe answer
    };
    let x = super::hash::mix(h);
    // Bit i of `set`: field i's bit is set in the line (all 7 fields; lanes ≥ k ignored).
    let mut set = 0u32;
    for i in 0..7 {
        let bit = ((x >> (9 * i)) & 511) as usize;
        set |= u32::from((line[bit >> 3] >> (bit & 7)) & 1) << i;
    }
    if k <= 7 {
        let want = (1u32 << k) - 1;
        if set & want != want {
            // A clear bit among the first k fields answers "absent" whether or not two of
            // them repeat: the probes are the first k distinct fields, so these are among them.
            return false;
        }
        if !fields_repeat(x, k) {
            return true;
        }
    } else if set != 0x7F {
        // k > 7: the first 7 fields are all among the key's probes (the first k distinct
        // fields, and 7 fields hold at most 7 distinct values), so one clear bit among them
        // answers "absent" without building the mask.
        return false;
    }
    test_exact(line, h, k)
}

/// The seven 9-bit fields of `x` (bits 0..63) as SWAR lanes.
const LANES: u64 = (1 << 63) - 1;
/// Each lane's low 8 bits (`0x0040_2010_0804_0201` has bit 9i set for each lane i).
const LANE_LOW: u64 = (0x00FF * 0x0040_2010_0804_0201) & LANES;

/// `VALID[k][j]`: top bits of the lanes i where lanes i and (i + j) mod 7 are both below k.
const VALID: [[u64; 4]; 8] = {
    let mut v = [[0u64; 4]; 8];
    let mut k = 0;
    while k < 8 {
        let mut j = 1;
        while j < 4 {
            let mut i = 0;
            while i < 7 {
                if i < k && (i + j) % 7 < k {
                    v[k][j] |= 0x100 << (9 * i);
                }
                i += 1;
            }
            j += 1;
        }
        k += 1;
    }
    v
};

/// True when two of the first `k` (≤ 7) 9-bit fields of `x` are equal. Lane i of `x` against
/// lane i + j (mod 7) for j = 1, 2, 3 covers every pair; a lane of their XOR is zero exactly
/// when the two fields are equal, found branch-free without carries between lanes
/// (`(v & low) + low` reaches a lane's top bit iff its low 8 bits are non-zero).
#[inline(always)]
fn fields_repeat(x: u64, k: u32) -> bool {
    let lanes = x & LANES;
    let valid = &VALID[k as usize & 7];
    let mut zero = 0u64;
    for (j, valid) in valid.iter().enumerate().skip(1) {
        let s = 9 * j as u32;
        let rotated = ((lanes >> s) | (lanes << (63 - s))) & LANES;
        let d = lanes ^ rotated;
        zero |= !(((d & LANE_LOW) + LANE_LOW) | d) & valid;
    }
    zero != 0
}

/// `test` by the full probe mask (any k, repeats skipped).
#[inline(never)]
fn test_exact(line: &[u8; LINE_BYTES], h: u64, k: u32) -> bool {
    let mask = probe_mask(h, k);
    // Branch-free over the 8 words: all probes share one cache line, so checking every word
    // is cheaper than a mispredicted early exit.
    let mut missing = 0u64;
    for (word, m) in line.chunks_exact(8).zip(mask) {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        missing |= m & !u64::from_le_bytes(w);
    }
    missing == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `test` (both fast paths) answers exactly as the full probe mask, for every k from 1 to
    /// 20 (the budget gives young levels k up to ~14), on lines about half full (most answers
    /// "absent") and on lines ~90% full (many "maybe", so k > 7 reaches the exact loop).
    #[test]
    fn fast_path_answers_as_the_probe_mask() {
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let lines = 64u64;
        let half: Vec<u8> = (0..lines as usize * LINE_BYTES)
            .map(|_| (next() & next()) as u8 | (next() as u8 & 0x0f))
            .collect();
        let dense: Vec<u8> = (0..lines as usize * LINE_BYTES)
            .map(|_| !((next() & next() & next()) as u8))
            .collect();
        let (mut yes, mut no, mut repeats) = ([0u32; 21], [0u32; 21], 0);
        let hashes: u32 = crate::test_counts::scaled(100_000, 20_000);
        for bits in [&half, &dense] {
            for _ in 0..hashes {
                let h = next();
                for k in 1..=20 {
                    let start = line_start(h, lines);
                    let line: &[u8; LINE_BYTES] =
                        bits[start..start + LINE_BYTES].try_into().unwrap();
                    let exact = test_exact(line, h, k);
                    let mask = probe_mask(h, k);
                    let by_mask = line
                        .chunks_exact(8)
                        .zip(mask)
                        .all(|(w, m)| u64::from_le_bytes(w.try_into().unwrap()) & m == m);
                    assert_eq!(exact, by_mask, "h {h:#x} k {k}");
                    assert_eq!(test(bits, lines, k, h), exact, "h {h:#x} k {k}");
                    if exact {
                        yes[k as usize] += 1;
                    } else {
                        no[k as usize] += 1;
                    }
                    let m = mix_fields(h, k);
                    if k <= 7 {
                        assert_eq!(
                            fields_repeat(crate::filter::hash::mix(h), k),
                            m,
                            "h {h:#x} k {k}"
                        );
                    }
                    repeats += u32::from(m);
                }
            }
        }
        // Both answers occur often at every k, and repeats reach the exact loop.
        for k in 1..=20 {
            assert!(
                yes[k] > hashes / 20 && no[k] > hashes / 20,
                "k {k}: {} yes, {} no",
                yes[k],
                no[k]
            );
        }
        assert!(repeats > hashes / 100, "{repeats} repeats");
    }

    /// True when the first k fields of `mix(h)` repeat one another (k ≤ 7).
    fn mix_fields(h: u64, k: u32) -> bool {
        let x = crate::filter::hash::mix(h);
        let f: Vec<u64> = (0..k.min(7)).map(|i| (x >> (9 * i)) & 511).collect();
        (1..f.len()).any(|i| f[..i].contains(&f[i]))
    }

    #[test]
    fn every_probe_stays_in_one_line() {
        let lines = 17u64;
        for h in [
            0u64,
            1,
            u64::MAX,
            0xdead_beef_0000_0001,
            0x8000_0000_ffff_ffff,
        ] {
            let mut bits = vec![0u8; lines as usize * LINE_BYTES];
            set(&mut bits, lines, 8, h);
            let touched: Vec<usize> = bits
                .chunks(LINE_BYTES)
                .enumerate()
                .filter(|(_, c)| c.iter().any(|&b| b != 0))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(touched.len(), 1, "hash {h:#x} touched lines {touched:?}");
            assert!(test(&bits, lines, 8, h));
        }
    }

    #[test]
    fn line_choice_uses_upper_bits() {
        assert_eq!(line_start(0x0000_0000_ffff_ffff, 4), 0);
        assert_eq!(line_start(0xffff_ffff_0000_0000, 4), 3 * LINE_BYTES);
    }
}
