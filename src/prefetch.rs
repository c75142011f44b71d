//! Software prefetch: a hint to the CPU to start loading a cache line the code will read
//! soon, so that the miss overlaps other work. Used by the filters (the lines a probe reads,
//! `filter`), the data-block scan (`table::cache::find`) and the index search
//! (`table::index`); a no-op on architectures other than x86-64. Lines go into L1, except a
//! batch's filter lines (`multi_get`), which go into L2 (`CacheLevel`).

/// Which cache a prefetched line is requested into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CacheLevel {
    /// Every level down to L1 (`prefetcht0`): for a line needed soon, by one lookup whose
    /// few misses are all in flight at once (`get`).
    L1,
    /// L2 and below, not L1 (`prefetcht1`): for many lines requested long before use, as a
    /// batch does (`multi_get`). A request into L1 holds one of L1's few miss buffers until
    /// its line arrives, so a batch's hundreds of requests queued behind them; L2 has more.
    /// Measured on the stored 10^8-key store (`absent_ab time-multi`, 6 interleaved pairs):
    /// `multi_get` 249-339 → 185-235 ns per key (median ratio 0.77) with its filter lines
    /// requested into L2; at 10^7 keys, where they come from L3, no change (1.00); single
    /// gets at 10^8 were no faster with L2 (1.07, within noise), so they keep L1.
    L2,
}

/// A hint to the CPU to load the cache line holding the byte at `address` into L1 (nothing on
/// other architectures). Any address is safe: a prefetch never faults and reads nothing the
/// program sees.
#[inline(always)]
pub(crate) fn prefetch_address(address: usize) {
    prefetch_line(address, CacheLevel::L1);
}

/// A hint to the CPU to load the cache line holding the byte at `address` into `into`.
#[inline(always)]
pub(crate) fn prefetch_line(address: usize, into: CacheLevel) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        let p = std::ptr::without_provenance::<i8>(address);
        // SAFETY: a prefetch never faults, whatever the address, and changes no memory.
        #[allow(unused_unsafe)]
        unsafe {
            match into {
                CacheLevel::L1 => _mm_prefetch::<_MM_HINT_T0>(p),
                CacheLevel::L2 => _mm_prefetch::<_MM_HINT_T1>(p),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (address, into);
}

/// Hints to the CPU to load every cache line of the `len` bytes at `address` into L1,
/// whatever their alignment: one request per line, from the line holding the first byte to
/// the line holding the last.
#[inline(always)]
pub(crate) fn prefetch_lines(address: usize, len: usize) {
    prefetch_lines_into(address, len, CacheLevel::L1);
}

/// `prefetch_lines` into `into`.
#[inline(always)]
pub(crate) fn prefetch_lines_into(address: usize, len: usize, into: CacheLevel) {
    for line in (address & !63..address.saturating_add(len)).step_by(64) {
        prefetch_line(line, into);
    }
}
