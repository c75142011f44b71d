//! The block cache's admission rule: a block read from a file is cached only if it was
//! missed once before, recently (TinyLFU's "doorkeeper", Einziger et al. 2017). A block read
//! once and never again (the usual fate of a block a filter false positive or a uniformly
//! random get reads, when the data is many times the cache) then costs a read into a reused,
//! hot buffer instead of a fresh allocation, a cache insert and an eviction; a block read
//! twice within a window is cached as before.
//!
//! The record is a bit array of 16 bits per block the cache holds, two bits per block key in
//! one 64-bit word (a "blocked" Bloom filter, `filter/blocked.rs`'s idea at its smallest: one
//! load and one `fetch_or` per miss). It forgets everything once about as many new blocks
//! were recorded as the cache holds, so "recently" means "within the last cache-full of
//! misses": under uniform access over D blocks, a cache of C blocks admits about C/D of its
//! misses, and its hit rate once full is the same C/D as when it admitted every block.
//!
//! Why: present gets at 2×10^6 keys with a 32 MiB cache (~87% of gets miss it) spent ~16% of
//! their time in the cache's insert, eviction and frees (`perf record -e cpu-clock -g` on
//! `db_bench --hold present`), for the 13% that hit. The figures with and without the rule
//! are in `cache.rs`.
//!
//! The record is not cleared in one go when a window ends: each miss after that clears the
//! next `CLEAR_STEP` words, so that no get pays for the whole array. For an 8 GiB cache (2^21
//! blocks, a 4 MiB record) clearing it at once took 106–150 µs (timed alone, 5 times) in the
//! get that ended the window; a step of 32 words takes ~0.1 µs, and the record is clear again
//! after 1/128 of a window of misses. Until then its stale bits let a few blocks in one miss
//! early, and a block recorded in the new window before the step reaches its word is
//! forgotten and needs one miss more.
//!
//! Threads share the record without locks: bits are set with relaxed `fetch_or`, and the
//! count that ends a window is kept for one recorded block in eight (so two threads rarely
//! touch the counter's line). Races lose or keep a bit or a count, which changes only which
//! block is cached, never an answer.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Bits of the record per block the cache holds (two are set per block: a false "seen
/// before" for about (1 − e^(−1/8))² ≈ 1.4% of new blocks, each one block cached early).
const BITS_PER_BLOCK: u64 = 16;

/// The window's count is kept for one recorded block in `SAMPLE`.
const SAMPLE: u64 = 8;

/// Words of the record each miss clears while a clear is under way.
const CLEAR_STEP: usize = 32;

/// Which blocks were missed recently.
pub(crate) struct Doorkeeper {
    words: Box<[AtomicU64]>,
    /// The next word to clear since the last window ended (`words.len()` or more: none).
    clearing: AtomicUsize,
    /// Recorded blocks in this window, counted one in `SAMPLE`.
    sampled: AtomicU64,
    /// `sampled` at which the window ends.
    limit: u64,
}

impl Doorkeeper {
    /// A record for a cache that holds about `blocks` blocks (at least 64 are assumed).
    pub(crate) fn new(blocks: u64) -> Doorkeeper {
        let blocks = blocks.max(64);
        let words = (blocks * BITS_PER_BLOCK / 64).next_power_of_two();
        Doorkeeper {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            clearing: AtomicUsize::new(usize::MAX),
            sampled: AtomicU64::new(0),
            limit: blocks.div_ceil(SAMPLE),
        }
    }

    /// Whether block (`table`, `offset`) was recorded in this window; if not, records it.
    /// `true`: cache it.
    pub(crate) fn admit(&self, table: u64, offset: u64) -> bool {
        let h = mix(table, offset);
        let Some(word) = self.words.get((h >> 32) as usize & (self.words.len() - 1)) else {
            return true; // unreachable: the length is a power of two and the index masked
        };
        // A clear under way takes its step on every miss, seen block or not (a record full
        // of stale bits would otherwise admit every block and never finish clearing).
        if self.clearing.load(Relaxed) < self.words.len() {
            let from = self.clearing.fetch_add(CLEAR_STEP, Relaxed);
            for w in self.words.iter().skip(from).take(CLEAR_STEP) {
                w.store(0, Relaxed);
            }
        }
        let bits = (1u64 << (h & 63)) | (1u64 << ((h >> 6) & 63));
        if word.load(Relaxed) & bits == bits {
            return true;
        }
        if (h >> 12).is_multiple_of(SAMPLE) && self.sampled.fetch_add(1, Relaxed) + 1 >= self.limit
        {
            self.sampled.store(0, Relaxed);
            self.clearing.store(0, Relaxed);
        }
        word.fetch_or(bits, Relaxed);
        false
    }
}

/// A well-mixed 64-bit hash of a block key (the filters' splitmix64 finaliser over both
/// halves).
fn mix(table: u64, offset: u64) -> u64 {
    crate::filter::hash::mix(table.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_admitted_on_its_second_miss_in_a_window() {
        let d = Doorkeeper::new(1000);
        let early = (0..500u64).filter(|o| d.admit(7, o * 4096)).count();
        assert!(early < 10, "{early} first misses admitted");
        let again = (0..500u64).filter(|o| d.admit(7, o * 4096)).count();
        assert_eq!(
            again, 500,
            "every block missed twice in the window is admitted"
        );
    }

    #[test]
    fn few_new_blocks_pass_for_seen_ones() {
        let d = Doorkeeper::new(100_000);
        for offset in 0..50_000u64 {
            d.admit(1, offset);
        }
        let false_admits = (0..50_000u64).filter(|o| d.admit(2, *o)).count();
        // Expected ~ (1 - e^(-50000*2/(100000*16)))^2 ≈ 0.4% of 50,000, in 64-bit blocks a
        // little more.
        assert!(false_admits < 750, "{false_admits} new blocks admitted");
    }

    #[test]
    fn the_record_forgets_after_a_cache_full_of_misses() {
        let d = Doorkeeper::new(1000);
        assert!(!d.admit(3, 0));
        // About 1000 other blocks missed: the window ends (give the sampled count slack).
        for offset in 1..3000u64 {
            d.admit(3, offset);
        }
        let remembered = (1..100u64).filter(|o| d.admit(3, *o)).count();
        assert!(remembered < 100, "nothing forgotten after 3000 misses");
        // Blocks missed in the new window are admitted on the next miss.
        let (mut fresh, mut kept) = (0, 0);
        for offset in 10_000..10_100u64 {
            if !d.admit(3, offset) {
                fresh += 1;
                kept += u32::from(d.admit(3, offset));
            }
        }
        assert!(
            fresh > 0 && kept == fresh,
            "{kept} of {fresh} admitted on their second miss"
        );
    }

    /// When a window ends the record is cleared `CLEAR_STEP` words per miss, not at once: one
    /// miss later the old bits are gone from the first words only, and after a record's worth
    /// of steps from every word.
    #[test]
    fn a_window_end_clears_the_record_in_steps() {
        let d = Doorkeeper::new(64 * 1024); // 16,384 words
        let words = d.words.len();
        for w in d.words.iter() {
            w.store(u64::MAX, Relaxed);
        }
        d.clearing.store(0, Relaxed); // as when a window ends
        assert!(d.admit(9, 0), "a stale bit admits");
        let set = |d: &Doorkeeper| d.words.iter().filter(|w| w.load(Relaxed) != 0).count();
        let cleared = words - set(&d);
        assert_eq!(
            cleared, CLEAR_STEP,
            "{cleared} of {words} words cleared by one miss"
        );
        for o in 0..(words / CLEAR_STEP) as u64 {
            d.admit(10, o);
        }
        // The stale bits are gone: left are at most the words the misses since recorded into
        // (one each).
        assert!(set(&d) <= words / CLEAR_STEP, "{} words still set", set(&d));
        assert!(d.clearing.load(Relaxed) >= words);
    }
}
