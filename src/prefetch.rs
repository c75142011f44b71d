//! Software prefetch: a hint to the CPU to start loading a cache line the code will read
//! soon, so that the miss overlaps other work. Used by the filters (the lines a probe reads,
//! `filter`) and the data-block scan (`table::cache::find`); a no-op on architectures other
//! than x86-64.

/// A hint to the CPU to load the cache line holding the byte at `address` (nothing on other
/// architectures). Any address is safe: a prefetch never faults and reads nothing the
/// program sees.
#[inline(always)]
pub(crate) fn prefetch_address(address: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch never faults, whatever the address, and changes no memory.
        #[allow(unused_unsafe)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(std::ptr::without_provenance::<i8>(address));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}
