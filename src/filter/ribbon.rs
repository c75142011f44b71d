//! The Ribbon filter (Dillinger & Walzer, "Ribbon filter: practically smaller than Bloom and
//! Xor", 2021; RocksDB's Standard128Ribbon is the same construction): about 30% smaller than a
//! Bloom filter at the same false-positive rate, for slower construction.
//!
//! Instead of setting bits, it stores the solution `Z` of a linear system over GF(2). Each key
//! hash gives a row: a start slot `s`, a 128-bit coefficient `c` (bit 0 always set) covering
//! slots `s..s+128`, and an r-bit result `x`. The filter stores `r` bits per slot, chosen so that
//! for every added key `parity(c & Z[s..s+128])` equals `x` in each of the r columns. A key
//! never added matches in all r columns with probability `2^-r`: that is the false-positive
//! rate, whatever the number of keys, at `r × slots / n` bits per key. Slots exceed keys by a
//! small factor (`slots_for`) so that the system is solvable; at r = 7 (0.78%) that is 7.2–7.4
//! bits/key, against 9.6 (textbook) or 10+ (blocked) Bloom bits/key for 1%.
//!
//! Why Ribbon and not a binary fuse filter (the other ~30%-smaller candidate), measured with
//! `cargo run --release --example filter_bench -- --large-mib 64` (xorf's `BinaryFuse8` beside
//! ours, same XXH3 hashes):
//!
//! | filter | keys | bits/key | FPR | build ns/key | query ns in cache (pos / neg) | out of cache |
//! |---|---|---|---|---|---|---|
//! | blocked Bloom, 10 bits/key | 10^4 / 5.4·10^7 | 10.0 | 0.95% | 21 / 72 | 17.2 / 16.8 | 69 / 66 |
//! | Ribbon r = 7 (`ribbon-1%`) | 10^4 / 5.4·10^7 | 7.17 / 7.48 | 0.79% | 156 / 371 | 24.4 / 25.0 | 181 / 192 |
//! | binary fuse, 8-bit | 10^4 / 5.4·10^7 | 10.24 / 9.00 | 0.39% | 44 / 122 | 7.0 / 6.5 | 50 / 50 |
//!
//! The binary fuse filter queries faster (three fingerprints, one XOR), but its size moves in
//! whole fingerprint bits times ~1.125 slots: 9 bits/key at 0.39%, and a 7-bit fingerprint
//! would be 7.9 bits/key at 0.78%, over the 7.5 bits/key at ≤ 1% asked for. Ribbon reaches
//! 7.2–7.5 bits/key at 0.78% and has a size for every r; a budget level between two r gets a
//! mix of tables (`filter::budget::ribbon_split`). Its cost was build time (5–7× the blocked
//! Bloom's in the table; since `build` bands in start order and back-substitutes in registers,
//! 107–112 / 85–86 ns/key for `ribbon-1%`, 3.2–3.9× / 0.8× the blocked Bloom's, same command) and out-of-cache queries (2.6–2.9×: a row spans two 16·r-byte blocks, up to four
//! cache lines, against the blocked Bloom's one), so the store uses it only where keys stay
//! longest (`db::budget`). In cache its query is 1.4–1.5× the blocked Bloom's.
//!
//! Use: `slots_for(n)` → `build(&hashes, slots, r)` (returns `None` when banding fails, which at
//! these sizes happens in about 1 build in 20; the caller retries with `grow(slots)`) →
//! `test(&array, slots, r, h)`. Layout and derivation of `(s, c, x)` from the key hash: FORMAT.md
//! §1, kind 3.
//!
//! Construction memory: the builder holds every key's 8-byte hash (as for every kind) and, while
//! banding, 20 bytes per slot (a 128-bit coefficient and a 32-bit result): 8 + 20 × 1.05 ≈ 29
//! bytes per key (≈ 232 bits/key, RocksDB's Ribbon quotes ~230), for one table at a time. A table
//! is bounded by the memtable size (flush) or `target_file_size` (compaction), so the peak is
//! bounded by those: an 8 MiB table of 100-byte entries (~75,000 keys) needs ~2.2 MiB.
//!
//! Query cost: two SplitMix64 finalisers and, per result column, two 128-bit ANDs and a parity;
//! the parities of eight columns are taken at once in one 64-bit word (`byte_parities`), since
//! the baseline x86-64 target has no `popcnt`. An absent key is usually rejected by the first
//! four columns, and the rest are then not computed (`test_any`). On CPUs with AVX-512 (and
//! its 64-bit population count) four columns are computed per instruction instead
//! (`ribbon/simd.rs`, chosen at run time, the same answers). The query reads two adjacent
//! 16·r-byte blocks.

use super::hash::mix;

#[cfg(target_arch = "x86_64")]
mod simd;

/// Width of a coefficient row, in slots.
pub(crate) const WIDTH: u64 = 128;
/// Bytes of one 128-slot block per result column.
const WORD_BYTES: usize = 16;
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Slots per key the model assumes when turning bits/key into result bits: the most
/// `slots_for` gives up to 10^7 keys (1.02 at 10^3 keys, 1.035 at 10^5, 1.06 at 10^7; 1.068 at
/// 5.4·10^7), so a table of up to 10^7 keys given `r × 1.06` bits/key gets at least r result
/// bits and never more bits than that.
pub const MODEL_SLOTS_PER_KEY: f64 = 1.06;

/// Slots for `n` keys: a multiple of 128, at least 128. The factor grows with log2(slots), as
/// the banding success rate of a 128-wide ribbon does: 0.9712 + 0.0038 × log2(n) slots per key
/// gives about 1 failure in 20 (the constants of RocksDB's `ribbon_config.cc`, measured there
/// by `FindOccupancy`; our own build tests and `filter_bench` see the same rate).
pub fn slots_for(n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let log2 = (n as f64).log2().max(1.0);
    let want = (n as f64 * (0.9712 + 0.0038 * log2)).ceil() as u64;
    want.div_ceil(WIDTH).max(1) * WIDTH
}

/// The next size to try after a banding failure: about 1.5% more, at least one more block.
pub fn grow(slots: u64) -> u64 {
    let blocks = slots / WIDTH;
    (blocks + (blocks / 64).max(1)) * WIDTH
}

/// The row of key hash `h` among `slots` slots (`slots` ≥ 128, a multiple of 128): start slot,
/// coefficient (bit 0 set), result (all 32 bits; the filter uses the low r).
#[inline]
fn row(h: u64, slots: u64) -> (u64, u128, u32) {
    let start = start(h, slots);
    let lo = mix(h);
    let hi = mix(h ^ GOLDEN);
    let coeff = (u128::from(hi) << 64) | u128::from(lo) | 1;
    (start, coeff, h as u32)
}

/// The row's start slot alone (`row`'s first part), for `row_span`: a prefetch needs no
/// coefficient, and so computes none whether or not the compiler inlines `row` (it calls it
/// out of line from `Inner::get`'s copies of the portable query).
#[inline(always)]
fn start(h: u64, slots: u64) -> u64 {
    let starts = slots - WIDTH + 1;
    ((u128::from(h) * u128::from(starts)) >> 64) as u64
}

/// The bytes `test(array, slots, r, h)` reads: the offset of its first block and the length
/// of the two blocks (the second is not read when the row starts on a block boundary).
#[inline]
pub(crate) fn row_span(slots: u64, r: u32, h: u64) -> (usize, usize) {
    let s = start(h, slots);
    let width = r as usize * WORD_BYTES;
    let blocks = if s.is_multiple_of(WIDTH) { 1 } else { 2 };
    ((s / WIDTH) as usize * width, blocks * width)
}

/// Solves the system for `hashes` with `slots` slots and `r` result bits (1..=30) and returns
/// the array (`slots × r / 8` bytes), or `None` when the rows are not independent (retry with
/// `grow(slots)`). Identical hashes are the same row and cost nothing. Sorts `hashes`.
///
/// The array does not depend on the order the rows are banded in, so they are banded in the
/// order of their start slots: the set of slots that end up holding a row (the lowest set bit
/// of some vector in the rows' span, for each) and the solution with every other slot 0 are
/// properties of the system, not of the elimination order; the fixtures' byte-for-byte test
/// and `banding_order_does_not_change_the_array` check it. A row's start grows with its hash
/// (`row`), so sorting the hashes sorts the rows, and banding then walks `coeffs` forwards
/// instead of jumping to a random slot per key.
///
/// Measured (`filter_bench --large-mib 64 --rounds 1 --queries 500000`, two interleaved runs
/// of each build, build ns/key at 10^4 / 5.4·10^7 keys), before (banding in key order, then
/// per slot and column a 128-bit window read from the array and a software `count_ones`) and
/// after (sorted banding, `back_substitute`): `ribbon` (10 bits/key, r = 9) 123–146 / 262–304
/// → 122–139 / 102–129; `ribbon-1%` (r = 7) 107–110 / 242–274 → 107–112 / 85–86. In cache
/// nothing changed; out of cache the random walk through `coeffs` was most of the build.
pub(crate) fn build(hashes: &mut [u64], slots: u64, r: u32) -> Option<Vec<u8>> {
    debug_assert!(slots >= WIDTH && slots.is_multiple_of(WIDTH) && (1..=30).contains(&r));
    hashes.sort_unstable();
    let (coeffs, results) = band(hashes, slots)?;
    Some(back_substitute(&coeffs, &results, r))
}

/// Banding: Gaussian elimination as the rows arrive; slot s keeps the row whose lowest set
/// coefficient bit is s. Every row's coefficient stays inside slots..slots+128 ∩ [0, slots).
/// `None` when a row reduces to 0 with a nonzero result (the system has no solution).
fn band(hashes: &[u64], slots: u64) -> Option<(Vec<u128>, Vec<u32>)> {
    let n = slots as usize;
    let mut coeffs = vec![0u128; n];
    let mut results = vec![0u32; n];
    for &h in hashes {
        let (mut s, mut c, mut x) = row(h, slots);
        loop {
            let i = s as usize;
            if coeffs[i] == 0 {
                coeffs[i] = c;
                results[i] = x;
                break;
            }
            c ^= coeffs[i];
            x ^= results[i];
            if c == 0 {
                if x == 0 {
                    break; // the same row again (a duplicate key)
                }
                return None;
            }
            let tz = c.trailing_zeros();
            s += u64::from(tz);
            c >>= tz;
        }
    }
    Some((coeffs, results))
}

/// Back-substitution from the last slot: slot s's bit in column j makes its row's parity
/// equal its result. Slots without a row are free; they keep 0. Each column keeps the 128
/// solution bits from slot s up in one register, shifted left by one per slot (bit 0 is slot
/// s, still 0 when the parity is taken), so a slot reads no memory but its row; at a block's
/// first slot the registers are that block's words. The r parities of a slot are taken
/// together, eight per 64-bit word (`fold8`, `byte_parities`), as `test` does.
fn back_substitute(coeffs: &[u128], results: &[u32], r: u32) -> Vec<u8> {
    let r = r as usize;
    let n = coeffs.len();
    let blocks = n / WIDTH as usize;
    let mut words = vec![0u128; blocks * r];
    let mut state = [0u128; 30];
    let state = &mut state[..r];
    for s in (0..n).rev() {
        for w in state.iter_mut() {
            *w <<= 1;
        }
        let c = coeffs[s];
        if c != 0 {
            let bits = parities(r, |j| state[j] & c) ^ results[s];
            for (j, w) in state.iter_mut().enumerate() {
                *w |= u128::from((bits >> j) & 1);
            }
        }
        if s % WIDTH as usize == 0 {
            let b = s / WIDTH as usize;
            words[b * r..(b + 1) * r].copy_from_slice(state);
        }
    }
    let mut out = Vec::with_capacity(words.len() * WORD_BYTES);
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out
}

/// `v`'s 64 bits xor-folded to 8 (same parity).
#[inline]
fn fold8(v: u64) -> u64 {
    let v = v ^ (v >> 32);
    let v = v ^ (v >> 16);
    (v ^ (v >> 8)) & 0xFF
}

/// Bit j of the result is the parity of byte j of `y`: eight parities at once, without the
/// `popcnt` instruction (not in the baseline x86-64 target this crate builds for).
#[inline]
fn byte_parities(y: u64) -> u32 {
    let y = y ^ (y >> 4);
    let y = y ^ (y >> 2);
    let y = (y ^ (y >> 1)) & 0x0101_0101_0101_0101;
    // Moves bit 8j to bit 56 + j; no two partial products share a bit, so nothing carries.
    (y.wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32
}

/// False if the key with hash `h` was certainly not in the set `array` was built for. `array`
/// holds `slots / 128` blocks of r 16-byte words (checked by `format::decode`).
#[inline]
pub(crate) fn test(array: &[u8], slots: u64, r: u32, h: u64) -> bool {
    // With AVX-512 (chosen at run time), four columns per instruction: `filter_bench
    // --large-mib 16 --queries 2000000 --rounds 3`, two interleaved runs of each build, in
    // cache: negative probes 18.8-20.4 → 15.8-17.5 ns at r = 9, 17.8-18.8 → 16.0-17.5 ns at
    // r = 7; positive ones 24.0-27.5 → 21.1-23.7 and 21.5-23.8 → 18.2-22.4 ns.
    #[cfg(target_arch = "x86_64")]
    if let Some(answer) = simd::test(array, slots, r, h) {
        return answer;
    }
    test_portable(array, slots, r, h)
}

/// `test` without AVX-512.
#[inline(always)]
fn test_portable(array: &[u8], slots: u64, r: u32, h: u64) -> bool {
    // The common widths get a copy with the column loop unrolled. filter_bench, 10,000 keys
    // (in cache), r = 7 against the blocked Bloom at 10 bits/key, 3 runs: positive probes
    // 1.68-1.82x its time with the loop, 1.24-1.55x unrolled; negative 1.66-2.03x, 1.28-1.86x.
    match r {
        4 => test_r::<4>(array, slots, h),
        5 => test_r::<5>(array, slots, h),
        6 => test_r::<6>(array, slots, h),
        7 => test_r::<7>(array, slots, h),
        8 => test_r::<8>(array, slots, h),
        9 => test_r::<9>(array, slots, h),
        10 => test_r::<10>(array, slots, h),
        _ => test_any(array, slots, r, h),
    }
}

#[inline]
fn test_r<const R: u32>(array: &[u8], slots: u64, h: u64) -> bool {
    test_any(array, slots, R, h)
}

/// What a query reads and compares: the row's two blocks, its coefficient shifted into each
/// and its result bits (see `query`).
type Query<'a> = (&'a [u8], &'a [u8], u128, u128, u32);

/// The query of key hash `h`, shared by `test_any` and the AVX-512 query: the row's two
/// blocks (`array`'s words for slots 128·b.., and 128·(b + 1).. or the first again when the
/// row starts on a block boundary), its coefficient shifted into each and its result bits;
/// `None` if the first block is past the array (never for a decoded block).
#[inline(always)]
fn query(array: &[u8], slots: u64, r: u32, h: u64) -> Option<Query<'_>> {
    let (s, c, x) = row(h, slots);
    let width = r as usize * WORD_BYTES;
    let (b, o) = ((s / WIDTH) as usize, (s % WIDTH) as u32);
    // The row covers slots s..s+128: bits o.. of block b and, when o > 0, bits ..o of block
    // b + 1 (which then exists, since s ≤ slots - 128). With o = 0 the second mask is empty.
    let c_lo = c << o;
    let c_hi = (c >> 1) >> (127 - o) & if o == 0 { 0 } else { u128::MAX };
    let lo_block = array.get(b * width..(b + 1) * width)?;
    let hi_block = array
        .get((b + 1) * width..(b + 2) * width)
        .unwrap_or(lo_block);
    Some((lo_block, hi_block, c_lo, c_hi, x))
}

#[inline(always)]
fn test_any(array: &[u8], slots: u64, r: u32, h: u64) -> bool {
    let Some((lo_block, hi_block, c_lo, c_hi, x)) = query(array, slots, r, h) else {
        return true; // unreachable for a decoded block; "maybe" is always a safe answer
    };
    // Words by index, not `chunks_exact(..).zip(..)`: that pair was an out-of-line `Zip::new`
    // with two hardware divisions (its lengths), 5.7% of an absent get at the defaults (2×10^6
    // keys, `perf record --call-graph dwarf` on `db_bench --defaults --hold absent`).
    let column = |j: usize| (word(lo_block, j) & c_lo) ^ (word(hi_block, j) & c_hi);
    let r = r as usize;
    // The first FIRST columns alone reject an absent key with probability 1 - 2^-FIRST: the
    // rest are computed only when they all match (an absent key's rarely, so the branch is
    // well predicted on the path that matters). `filter_bench --large-mib 16 --queries
    // 2000000 --rounds 3`, two interleaved runs of each build, in cache: negative probes
    // 25.5-27.1 → 18.8-18.9 ns at r = 9, 20.9-22.3 → 17.6-18.0 ns at r = 7; positive ones
    // 25.4-27.8 → 23.8-24.4 and 21.0-23.6 → 21.5-22.3 ns.
    if r > FIRST {
        if parities(FIRST, column) != x & low_bits(FIRST) {
            return false;
        }
        return parities(r - FIRST, |j| column(j + FIRST)) == (x >> FIRST) & low_bits(r - FIRST);
    }
    parities(r, column) == x & low_bits(r)
}

/// Result columns `test` checks before the rest: see there.
const FIRST: usize = 4;

/// The low `n` (≤ 32) bits set.
#[inline(always)]
fn low_bits(n: usize) -> u32 {
    if n >= 32 {
        u32::MAX
    } else {
        (1u32 << n) - 1
    }
}

/// Bit j (j < r ≤ 32) is the parity of `value(j)`: eight at a time, each 128-bit value folded
/// to a byte of one 64-bit word (`fold8`) whose byte parities are taken together
/// (`byte_parities`). Shared by the query and the back-substitution.
#[inline(always)]
fn parities(r: usize, value: impl Fn(usize) -> u128) -> u32 {
    let mut found = 0u32;
    let mut packed = 0u64;
    for j in 0..r {
        let v = value(j);
        packed |= fold8(v as u64 ^ (v >> 64) as u64) << (8 * (j % 8));
        if j % 8 == 7 {
            found |= byte_parities(packed) << (j - 7);
            packed = 0;
        }
    }
    if !r.is_multiple_of(8) {
        found |= byte_parities(packed) << (r - r % 8);
    }
    found
}

/// The `j`th 16-byte word of `block`, little-endian (0 past its end, which a decoded block
/// never reaches).
#[inline(always)]
fn word(block: &[u8], j: usize) -> u128 {
    block
        .get(j * WORD_BYTES..(j + 1) * WORD_BYTES)
        .and_then(|w| <[u8; WORD_BYTES]>::try_from(w).ok())
        .map_or(0, u128::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn hashes(n: u64, salt: u64) -> Vec<u64> {
        (0..n).map(|i| mix(i ^ salt.wrapping_mul(GOLDEN))).collect()
    }

    /// Builds, growing on failure as `FilterBuilder` does; returns the array and final slots.
    pub(super) fn build_grown(hs: &[u64], r: u32) -> (Vec<u8>, u64, u32) {
        let mut slots = slots_for(hs.len() as u64);
        let mut attempts = 1;
        loop {
            if let Some(a) = build(&mut hs.to_vec(), slots, r) {
                return (a, slots, attempts);
            }
            slots = grow(slots);
            attempts += 1;
        }
    }

    #[test]
    fn every_added_key_passes_and_absent_keys_pass_at_2_pow_minus_r() {
        for (n, r) in [
            (1u64, 7u32),
            (100, 7),
            (5_000, 1),
            (20_000, 4),
            (20_000, 5),
            (20_000, 7),
            (20_000, 10),
            // Past the unrolled widths, and more than 8 columns after `test`'s first FIRST.
            (3_000, 13),
        ] {
            let hs = hashes(n, r.into());
            let (array, slots, _) = build_grown(&hs, r);
            assert_eq!(array.len() as u64, slots * u64::from(r) / 8);
            assert!(hs.iter().all(|&h| test(&array, slots, r, h)), "n {n} r {r}");
            let probes = 200_000u64;
            let hits = hashes(probes, 999)
                .iter()
                .filter(|&&h| test(&array, slots, r, h))
                .count() as f64;
            let want = probes as f64 / f64::from(1u32 << r);
            // Within 5 standard deviations of the binomial count.
            let sd = (want * (1.0 - want / probes as f64)).sqrt();
            assert!(
                (hits - want).abs() < 5.0 * sd + 2.0,
                "n {n} r {r}: {hits} vs {want}"
            );
        }
    }

    #[test]
    fn sizing_stays_within_the_stated_overhead_and_rarely_fails() {
        let mut failures = 0;
        let builds = 40;
        for salt in 0..builds {
            let hs = hashes(50_000, salt + 100);
            let (_, slots, attempts) = build_grown(&hs, 7);
            failures += attempts - 1;
            let per_key = slots as f64 / 50_000.0;
            assert!(per_key < 1.08, "{per_key}");
        }
        // About 1 in 20 expected; 10 of 40 would mean the sizing is wrong.
        assert!(
            failures < 10,
            "{failures} banding failures in {builds} builds"
        );
        assert!((slots_for(1_000_000) as f64 / 1e6 - 1.047).abs() < 0.01);
        assert_eq!(slots_for(0), 0);
        assert_eq!(slots_for(1), 128);
        assert!(grow(128) == 256 && grow(128 * 640) == 128 * 650);
    }

    /// The back-substitution as first written, one slot and column at a time through a
    /// 128-bit window read from the array: the oracle for `back_substitute`.
    fn back_substitute_by_windows(coeffs: &[u128], results: &[u32], r: usize) -> Vec<u8> {
        let (n, w) = (coeffs.len(), WIDTH as usize);
        let blocks = n / w;
        let mut words = vec![0u128; blocks * r];
        for s in (0..n).rev().filter(|&s| coeffs[s] != 0) {
            let (b, o) = (s / w, s % w);
            for j in 0..r {
                let mut window = words[b * r + j] >> o;
                if o > 0 && b + 1 < blocks {
                    window |= words[(b + 1) * r + j] << (w - o);
                }
                let bit = ((window & coeffs[s]).count_ones() ^ (results[s] >> j)) & 1;
                words[b * r + j] |= u128::from(bit) << o;
            }
        }
        words.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Banding in key order, reversed or sorted gives one array, and the register
    /// back-substitution equals the window one, for r across one and several 8-column groups.
    #[test]
    fn banding_order_does_not_change_the_array() {
        for (n, r) in [
            (1u64, 1u32),
            (300, 7),
            (3_000, 8),
            (3_000, 9),
            (20_000, 17),
            (5_000, 30),
        ] {
            let hs = hashes(n, u64::from(r) + 77);
            let (built, slots, _) = build_grown(&hs, r);
            let mut reversed = hs.clone();
            reversed.reverse();
            for order in [&hs, &reversed] {
                let (coeffs, results) = band(order, slots).expect("solvable in any order");
                let by_windows = back_substitute_by_windows(&coeffs, &results, r as usize);
                assert_eq!(by_windows, built, "n {n} r {r}");
                assert_eq!(back_substitute(&coeffs, &results, r), built, "n {n} r {r}");
            }
        }
    }

    #[test]
    fn duplicate_hashes_are_one_row() {
        let mut hs = hashes(3_000, 5);
        hs.extend_from_within(..1_000);
        let (array, slots, _) = build_grown(&hs, 8);
        assert!(hs.iter().all(|&h| test(&array, slots, 8, h)));
    }
}
