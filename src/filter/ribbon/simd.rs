//! The Ribbon query (`ribbon::test`) with AVX-512, four result columns per instruction, for
//! the CPUs that have it (x86-64 with AVX-512F and VPOPCNTDQ: Intel Ice Lake and later, AMD
//! Zen 4 and later), chosen at run time (`available`); elsewhere `test` runs the portable
//! code. Same answer bit for bit: `tests::simd_query_answers_as_the_portable_one`.
//!
//! A column's parity is that of `(lo & c_lo) ^ (hi & c_hi)` over 128 bits, where `lo` and
//! `hi` are the column's words in the row's two blocks. Four columns' words lie side by side in
//! each block (64 bytes), so one 512-bit load per block, two ANDs with the broadcast
//! coefficient halves, an XOR and a per-64-bit population count give eight half-parities;
//! the XOR of each lane's pair is the column's parity. The portable code spends ~20
//! instructions per column (`fold8`, `byte_parities`: the baseline x86-64 target has no
//! `popcnt`); this spends ~10 per four columns.

#![expect(
    unsafe_code,
    reason = "AVX-512 intrinsics: masked loads through raw pointers inside the row's blocks, \
              and calling a target-feature function after checking the CPU has the feature"
)]

use std::arch::x86_64::{
    __m512i, _mm512_and_si512, _mm512_broadcast_i32x4, _mm512_maskz_loadu_epi64,
    _mm512_popcnt_epi64, _mm512_set1_epi64, _mm512_test_epi64_mask, _mm512_xor_si512,
    _mm_set_epi64x,
};
use std::sync::atomic::{AtomicU8, Ordering};

use super::{low_bits, query, FIRST, WORD_BYTES};

/// 0: not checked yet, 1: no, 2: yes.
static AVAILABLE: AtomicU8 = AtomicU8::new(0);

/// True when this CPU runs `test_avx512`. Checked once per process; then one relaxed load.
#[inline(always)]
pub(super) fn available() -> bool {
    match AVAILABLE.load(Ordering::Relaxed) {
        2 => true,
        1 => false,
        _ => {
            let yes = std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512vpopcntdq");
            AVAILABLE.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
    }
}

/// `ribbon::test`'s answer computed with AVX-512, or `None` when this CPU lacks it.
#[inline(always)]
pub(super) fn test(array: &[u8], slots: u64, r: u32, h: u64) -> Option<bool> {
    if !available() {
        return None;
    }
    // SAFETY: the CPU has both target features (`available`).
    Some(unsafe { test_avx512(array, slots, r, h) })
}

/// `ribbon::test` with AVX-512: false if the key with hash `h` was certainly not in the set.
/// `array` holds `slots / 128` blocks of r 16-byte words, as for `test`.
#[target_feature(enable = "avx512f,avx512vpopcntdq")]
fn test_avx512(array: &[u8], slots: u64, r: u32, h: u64) -> bool {
    let Some((lo_block, hi_block, c_lo, c_hi, x)) = query(array, slots, r, h) else {
        return true; // unreachable for a decoded block; "maybe" is always a safe answer
    };
    let r = r as usize;
    let lane = |v: u128| _mm512_broadcast_i32x4(_mm_set_epi64x((v >> 64) as i64, v as i64));
    let (c_lo, c_hi) = (lane(c_lo), lane(c_hi));
    let one = _mm512_set1_epi64(1);
    // Columns g..g + 4 (fewer in the last group), the first FIRST = 4 alone rejecting most
    // absent keys as in the portable code.
    const _: () = assert!(FIRST == 4);
    let mut g = 0;
    while g < r {
        let columns = (r - g).min(4);
        // Two 64-bit elements per column; masked-off elements are not read.
        let mask = (1u16 << (2 * columns)) - 1;
        let words = |block: &[u8]| -> __m512i {
            // SAFETY: the mask reads bytes 16g..16(g + columns) of `block`, which has 16r
            // bytes, and g + columns ≤ r; the CPU has AVX-512F (checked by the caller).
            unsafe {
                _mm512_maskz_loadu_epi64(mask as u8, block.as_ptr().add(g * WORD_BYTES).cast())
            }
        };
        let v = _mm512_xor_si512(
            _mm512_and_si512(words(lo_block), c_lo),
            _mm512_and_si512(words(hi_block), c_hi),
        );
        // Bit i: the parity of 64-bit element i; a column's parity is its two bits' XOR.
        let odd = u32::from(_mm512_test_epi64_mask(_mm512_popcnt_epi64(v), one));
        let p = (odd ^ (odd >> 1)) & 0x55;
        let got = (p & 1) | ((p >> 1) & 2) | ((p >> 2) & 4) | ((p >> 3) & 8);
        if got != (x >> g) & low_bits(columns) {
            return false;
        }
        g += 4;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::tests::{build_grown, hashes};
    use super::super::{row_span, test_portable};
    use super::*;

    /// The AVX-512 query (where this CPU has it) answers as the portable one for every width,
    /// rows starting on a block boundary or not, added keys and others; both pass every added
    /// key.
    #[test]
    fn simd_query_answers_as_the_portable_one() {
        if !available() {
            eprintln!("this CPU has no AVX-512F + VPOPCNTDQ: only the portable query is run");
        }
        for r in [1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 16, 20, 30] {
            let added = hashes(3_000, u64::from(r));
            let (array, slots, _) = build_grown(&added, r);
            let (mut maybe, mut aligned) = (0, 0);
            let others = hashes(40_000, 1_000 + u64::from(r));
            for (i, &h) in added.iter().chain(&others).enumerate() {
                let portable = test_portable(&array, slots, r, h);
                if i < added.len() {
                    assert!(portable, "r = {r}: added key {i} rejected");
                }
                if let Some(fast) = test(&array, slots, r, h) {
                    assert_eq!(fast, portable, "r = {r}, hash {h:#x}");
                }
                maybe += usize::from(portable);
                aligned += usize::from(row_span(slots, r, h).1 == r as usize * WORD_BYTES);
            }
            // "Absent" answers occur too, and rows that start on a block boundary were among
            // the rows asked about.
            assert!(maybe < added.len() + others.len() / 2, "r = {r}");
            assert!(aligned > 0, "r = {r}: no row started on a block boundary");
        }
    }
}
