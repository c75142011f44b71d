//! Software prefetch: a hint to the CPU to start loading a cache line the code will read
//! soon, so that the miss overlaps other work. Used by the filters (the lines a probe reads,
//! `filter`), the data-block scan (`table::cache::find`) and the index search
//! (`table::index`); a no-op on architectures other than x86-64.

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

/// Hints to the CPU to load every cache line of the `len` bytes at `address`, whatever their
/// alignment: one request per line, from the line holding the first byte to the line holding
/// the last.
#[inline(always)]
pub(crate) fn prefetch_lines(address: usize, len: usize) {
    for line in (address & !63..address.saturating_add(len)).step_by(64) {
        prefetch_address(line);
    }
}
