//! Where a decoded range filter keeps its bit arrays (`Words`): on the heap when small, in an
//! anonymous memory map of their own from [`MAP_FROM`] bytes.
//!
//! Why: a store opens its tables' filters one table after another, so on the heap each
//! table's range filter would lie between its point filter and the next table's. Absent
//! gets probe the point filters at random; spread over the range filters' memory too they
//! touch more pages than the TLB covers. Measured (`db_bench --workload ranges --defaults
//! --rounds 9 --threads 1`, 2·10^6 keys, range filters of 16 bits/key on the heap): absent
//! gets ran 0.91–0.93× the store without range filters, present gets 0.97×; with the point
//! filters moved to their own memory instead (`--ours-huge-pages`, 7 rounds) 0.99–1.01× and
//! 1.00×. Mapping the range filters' arrays apart leaves the heap as a store without them has
//! it. The cost: up to a page per array of rounding, and one mapping per array.

use std::ops::Deref;

/// Arrays of at least this many bytes are mapped; smaller ones stay on the heap.
pub(crate) const MAP_FROM: usize = 16 << 10;

/// A read-only array of 64-bit words.
#[derive(Debug)]
pub(crate) enum Words {
    /// On the heap.
    Heap(Vec<u64>),
    /// In an anonymous map of its own, page-aligned: `len` words from its start.
    Mapped {
        /// The map, read-only once filled.
        map: memmap2::Mmap,
        /// Words in it.
        len: usize,
    },
}

impl Words {
    /// `words`, moved to a map of its own when it is `MAP_FROM` bytes or more (kept on the
    /// heap if the map cannot be made).
    pub(crate) fn place(words: Vec<u64>) -> Words {
        let bytes = words.len() * 8;
        if bytes < MAP_FROM {
            return Words::Heap(words);
        }
        let Ok(mut map) = memmap2::MmapMut::map_anon(bytes) else {
            return Words::Heap(words);
        };
        for (at, w) in map.chunks_exact_mut(8).zip(&words) {
            at.copy_from_slice(&w.to_ne_bytes());
        }
        match map.make_read_only() {
            Ok(map) => Words::Mapped {
                map,
                len: words.len(),
            },
            Err(_) => Words::Heap(words),
        }
    }

    /// Whether the words are in a map of their own.
    #[cfg(test)]
    pub(crate) fn is_mapped(&self) -> bool {
        matches!(self, Words::Mapped { .. })
    }
}

impl Clone for Words {
    /// A copy placed as `place` places it.
    fn clone(&self) -> Self {
        Words::place(self.to_vec())
    }
}

impl Deref for Words {
    type Target = [u64];

    #[inline]
    fn deref(&self) -> &[u64] {
        match self {
            Words::Heap(v) => v,
            Words::Mapped { map, len } => {
                debug_assert!(map.len() >= len * 8 && (map.as_ptr() as usize).is_multiple_of(8));
                // SAFETY: the map starts at a page boundary, so it is aligned for u64; it
                // holds `len * 8` bytes (`place` mapped exactly that many and wrote every
                // word); every bit pattern is a valid u64; the map is read-only and lives as
                // long as `self`, which the returned slice borrows.
                unsafe { std::slice::from_raw_parts(map.as_ptr().cast::<u64>(), *len) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_arrays_stay_on_the_heap_large_ones_are_mapped_and_read_the_same() {
        for n in [0usize, 1, 100, MAP_FROM / 8 - 1, MAP_FROM / 8, 100_000] {
            let v: Vec<u64> = (0..n as u64)
                .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .collect();
            let w = Words::place(v.clone());
            assert_eq!(w.is_mapped(), n * 8 >= MAP_FROM, "{n} words");
            assert_eq!(&w[..], &v[..], "{n} words");
        }
    }
}
