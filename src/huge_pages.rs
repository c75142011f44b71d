//! Memory that the kernel can back with 2 MiB pages, for the filter blocks of open tables
//! (`Options::filter_huge_pages`).
//!
//! Why: an absent get probes one filter per level, each probe a random cache line somewhere
//! in all the store's filters (117 MiB at 10^8 keys). With 4 KiB pages that is ~30,000 pages,
//! far past the TLB's reach (2,048 entries on this machine's cores, 8 MiB), so most probes pay
//! a page walk on top of the cache miss, and under a hypervisor the walk is two-dimensional.
//! With 2 MiB pages the same filters span ~60 pages. Measured (`db_bench --workload scale
//! --scale-keys 100000000 --ours-budget 10 --ours-budget-ribbon --huge-pages-ab`, the same
//! store reopened per round with and without, 3 rounds, medians): at 10^8 keys an absent get
//! 514 -> 463 ns (0.90x), bare serial probes 0.91x, with 118 MiB of `AnonHugePages` for 116.7
//! MiB of filters (a second run, after the Ribbon prefetch covered whole rows: 481 -> 400 ns,
//! 0.83x); at 10^7 (11.5 MiB of filters, inside the L3) the bare probes 0.75x but a
//! get, whose probes already overlap, 1.02x; at 10^6 0.99x. Hence by default only the levels
//! that hold most of a large store's filters use it (`Options::filter_huge_pages`,
//! `HugePages::LevelsFrom`; README, "Huge pages for filters").
//!
//! How: the arena maps anonymous regions of `REGION` bytes (more for a larger block), starts
//! each at a 2 MiB boundary and asks for huge pages with `madvise(MADV_HUGEPAGE)` (which
//! works with transparent huge pages in `madvise` or `always` mode; elsewhere the memory is
//! simply ordinary pages). Blocks are carved out first-fit, each placed so that a chosen byte
//! starts a cache line (a filter's bit array, after its 48-byte header), and given back
//! when their table closes; neighbouring free spans merge, the whole huge pages inside a free
//! span go back to the kernel at once (`MADV_DONTNEED`), and a region left empty is unmapped
//! at the arena's next allocation. Allocation happens when a table opens (a flush, a
//! compaction, recovery) and never on a read, so a mutex over a `BTreeMap` of free spans is
//! enough: a ready-made sub-allocator (`offset-allocator`) rounds sizes to float bins and
//! calls itself a prototype, and this is forty lines under unit tests. If a region cannot be
//! mapped, the caller falls back to the heap: a store never fails to open for want of huge
//! pages.
//!
//! One arena serves the process (`shared()`): the stores in it pack their filters into the
//! same regions.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The huge page size on x86-64 and ARM64 Linux.
const HUGE_PAGE: usize = 2 << 20;
/// Bytes mapped per region: 16 huge pages. A region is held while any block in it lives, so
/// smaller regions free memory sooner after compactions; larger ones pack better.
const REGION: usize = 32 << 20;
/// Alignment of every span: a cache line (`alloc_aligned_at` then skews the block in it, so
/// that a blocked filter's lines never straddle two).
const ALIGN: usize = 64;

/// Regions of huge-page memory, carved into blocks (module comment).
#[derive(Debug, Default)]
pub struct HugePageArena {
    regions: Mutex<Vec<Arc<Region>>>,
}

static SHARED: HugePageArena = HugePageArena::new();

/// The process's arena.
pub fn shared() -> &'static HugePageArena {
    &SHARED
}

impl HugePageArena {
    /// An arena with no regions yet.
    pub const fn new() -> HugePageArena {
        HugePageArena {
            regions: Mutex::new(Vec::new()),
        }
    }

    /// A zeroed block of `len` bytes, 64-byte aligned, or the error mapping a new region met.
    pub fn alloc(&self, len: usize) -> std::io::Result<HugeBytes> {
        self.alloc_aligned_at(len, 0)
    }

    /// A zeroed block of `len` bytes whose byte `at` starts a cache line (a filter block's
    /// bit array, after its header), or the error mapping a new region met.
    pub fn alloc_aligned_at(&self, len: usize, at: usize) -> std::io::Result<HugeBytes> {
        let skew = (ALIGN - at % ALIGN) % ALIGN;
        let span = len
            .checked_add(skew)
            .ok_or_else(|| std::io::Error::other(format!("a block of {len} bytes")))?;
        let (region, offset) = self.take_span(span)?;
        Ok(HugeBytes::new(region, offset, skew, len))
    }

    /// A span of `len` bytes: its region and where it starts there.
    fn take_span(&self, len: usize) -> std::io::Result<(Arc<Region>, usize)> {
        let mut regions = lock(&self.regions);
        // Regions emptied since the last allocation go now (the newest stays for reuse).
        let newest = regions.len().saturating_sub(1);
        let mut i = 0;
        regions.retain(|r| {
            i += 1;
            i - 1 == newest || lock(&r.spans).used > 0
        });
        for r in regions.iter() {
            if let Some(offset) = lock(&r.spans).take(len) {
                return Ok((r.clone(), offset));
            }
        }
        let size = len
            .checked_next_multiple_of(HUGE_PAGE)
            .filter(|s| s.checked_add(HUGE_PAGE).is_some())
            .ok_or_else(|| std::io::Error::other(format!("a block of {len} bytes")))?;
        let r = Arc::new(Region::map(size.max(REGION))?);
        let offset = lock(&r.spans)
            .take(len)
            .ok_or_else(|| std::io::Error::other("a new region cannot hold the block"))?;
        regions.push(r.clone());
        Ok((r, offset))
    }

    /// Bytes mapped and bytes handed out, over all regions.
    pub fn usage(&self) -> (usize, usize) {
        let regions = lock(&self.regions);
        let mapped = regions.iter().map(|r| r.len).sum();
        let used = regions.iter().map(|r| lock(&r.spans).used).sum();
        (mapped, used)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The data under these locks is updated in single steps that cannot panic half-way, so
    // a poisoned lock still guards consistent spans.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One mapping, its usable part starting at a huge-page boundary.
#[derive(Debug)]
struct Region {
    /// Keeps the mapping alive; written only through `HugeBytes`, each in its own span.
    map: memmap2::MmapMut,
    /// Where `base` is in `map`.
    skip: usize,
    /// The first byte at a 2 MiB boundary.
    base: *mut u8,
    len: usize,
    spans: Mutex<Spans>,
}

// SAFETY: `base` points into `_map`, which lives as long as the region; the bytes behind it
// are only reached through `HugeBytes`, whose spans never overlap (`Spans`).
unsafe impl Send for Region {}
// SAFETY: as for `Send`; the shared state (`spans`) is behind a mutex.
unsafe impl Sync for Region {}

impl Region {
    fn map(len: usize) -> std::io::Result<Region> {
        // One huge page more than needed, so that a 2 MiB boundary falls in the first one.
        let map = memmap2::MmapOptions::new()
            .len(len + HUGE_PAGE)
            .map_anon()?;
        let skip = map.as_ptr().align_offset(HUGE_PAGE);
        #[cfg(target_os = "linux")]
        {
            // No transparent huge pages (mode `never`, or an old kernel): ordinary pages.
            let _ = map.advise_range(memmap2::Advice::HugePage, skip, len);
        }
        let base = map.as_ptr().wrapping_add(skip).cast_mut();
        let mut free = BTreeMap::new();
        free.insert(0, len);
        Ok(Region {
            map,
            skip,
            base,
            len,
            spans: Mutex::new(Spans { free, used: 0 }),
        })
    }

    /// Returns the whole huge pages inside the free span `[start, start + size)` to the
    /// kernel (`MADV_DONTNEED`: they read as zeros when next touched), so that memory a
    /// compaction freed is not held until the region empties. The caller holds the region's
    /// `spans` lock, so no block is carved out of the span meanwhile.
    fn release(&self, start: usize, size: usize) {
        let first = start.next_multiple_of(HUGE_PAGE);
        let end = (start + size) / HUGE_PAGE * HUGE_PAGE;
        #[cfg(unix)]
        if end > first {
            // SAFETY: the range is inside the mapping (a free span lies in the region) and
            // inside a free span, which no `HugeBytes` covers: nothing reads these bytes until
            // a later `take` hands them out again, and `HugeBytes::new` zeroes them then.
            let _ = unsafe {
                self.map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    self.skip + first,
                    end - first,
                )
            };
        }
    }
}

/// The free spans of a region by offset (never two adjacent), and the bytes handed out.
#[derive(Debug)]
struct Spans {
    free: BTreeMap<usize, usize>,
    used: usize,
}

fn rounded(len: usize) -> usize {
    len.max(1).div_ceil(ALIGN) * ALIGN
}

impl Spans {
    /// The offset of a span of `len` bytes taken first-fit, or `None`.
    fn take(&mut self, len: usize) -> Option<usize> {
        let want = rounded(len);
        let (&at, &size) = self.free.iter().find(|(_, &size)| size >= want)?;
        self.free.remove(&at);
        if size > want {
            self.free.insert(at + want, size - want);
        }
        self.used += want;
        Some(at)
    }

    /// Gives back the span of `len` bytes at `at`, merged with free neighbours; returns the
    /// free span it is now part of (start and size).
    fn give(&mut self, at: usize, len: usize) -> (usize, usize) {
        let (mut start, mut size) = (at, rounded(len));
        self.used -= size;
        if let Some((&prev, &prev_size)) = self.free.range(..at).next_back() {
            if prev + prev_size == at {
                self.free.remove(&prev);
                start = prev;
                size += prev_size;
            }
        }
        if let Some(next_size) = self.free.remove(&(at + rounded(len))) {
            size += next_size;
        }
        self.free.insert(start, size);
        (start, size)
    }
}

/// A block of arena memory, zeroed when handed out; given back when dropped. It starts `skew`
/// bytes into its span (`HugePageArena::alloc_aligned_at`).
#[derive(Debug)]
pub struct HugeBytes {
    region: Arc<Region>,
    /// Where the span (`skew + len` bytes) starts in the region.
    offset: usize,
    skew: usize,
    len: usize,
}

impl HugeBytes {
    fn new(region: Arc<Region>, offset: usize, skew: usize, len: usize) -> HugeBytes {
        let mut b = HugeBytes {
            region,
            offset,
            skew,
            len,
        };
        // A freed span holds an earlier block's bytes (the skew in front is never read).
        b.as_mut().fill(0);
        b
    }

    /// Where the block starts (for tests of alignment).
    pub fn as_ptr(&self) -> *const u8 {
        self.region.base.wrapping_add(self.offset + self.skew)
    }
}

impl AsRef<[u8]> for HugeBytes {
    #[inline(always)]
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `offset + skew + len` ends the span, which lies inside the region's mapping
        // (`Spans::take` hands out at most the region's length), alive while `self.region`
        // is; no `&mut` to these bytes exists while `&self` is borrowed (`as_mut` takes
        // `&mut self`, and the span is this block's alone).
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }
}

impl AsMut<[u8]> for HugeBytes {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_ref`, and `&mut self` makes this the only view of the span.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr().cast_mut(), self.len) }
    }
}

impl Drop for HugeBytes {
    fn drop(&mut self) {
        let mut spans = lock(&self.region.spans);
        let (start, size) = spans.give(self.offset, self.skew + self.len);
        self.region.release(start, size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks of the given lengths, each with the given byte on a line: each checked zeroed,
    /// aligned and as long as asked, then filled with its index; none overwrote another.
    fn filled(
        arena: &HugePageArena,
        blocks: impl Iterator<Item = (usize, usize)>,
    ) -> Vec<HugeBytes> {
        let mut out = Vec::new();
        for (i, (len, at)) in blocks.enumerate() {
            let mut b = arena.alloc_aligned_at(len, at).unwrap();
            assert_eq!((b.as_ptr() as usize + at) % ALIGN, 0);
            assert_eq!(b.as_ref().len(), len);
            assert!(b.as_ref().iter().all(|&x| x == 0), "block {i} not zeroed");
            b.as_mut().fill(i as u8);
            out.push(b);
        }
        for (i, b) in out.iter().enumerate() {
            assert!(
                b.as_ref().iter().all(|&x| x == i as u8),
                "block {i} overwritten"
            );
        }
        out
    }

    #[test]
    fn blocks_are_aligned_disjoint_zeroed_and_given_back() {
        let arena = HugePageArena::new();
        let blocks = filled(&arena, (0..200).map(|i| (1 + i * 997, 0)));
        let (mapped, used) = arena.usage();
        assert_eq!(mapped % HUGE_PAGE, 0);
        let want: usize = (0..200).map(|i| rounded(1 + i * 997)).sum();
        assert_eq!(used, want);
        // Every other block freed, then the rest: the spans merge back into whole regions.
        let mut odd = Vec::new();
        for (i, b) in blocks.into_iter().enumerate() {
            if i % 2 == 1 {
                odd.push(b);
            }
        }
        assert!(arena.usage().1 < want);
        drop(odd);
        assert_eq!(arena.usage().1, 0);
        let regions = lock(&arena.regions);
        for r in regions.iter() {
            let spans = lock(&r.spans);
            assert_eq!(spans.free.len(), 1, "{:?}", spans.free);
            assert_eq!(spans.free.get(&0), Some(&r.len));
        }
    }

    #[test]
    fn regions_start_on_huge_page_boundaries_and_empty_ones_are_unmapped() {
        let arena = HugePageArena::new();
        // A block larger than a region gets a region of its own, here filled exactly.
        let big = arena.alloc(REGION + HUGE_PAGE).unwrap();
        assert_eq!(big.as_ptr() as usize % HUGE_PAGE, 0);
        let small = arena.alloc(100).unwrap();
        assert_eq!(arena.usage().0, REGION + HUGE_PAGE + REGION);
        drop(big);
        // The emptied region goes at the next allocation; the newest stays.
        let again = arena.alloc(100).unwrap();
        assert_eq!(arena.usage().0, REGION);
        drop((small, again));
        assert_eq!(arena.usage(), (REGION, 0));
    }

    /// Whole huge pages inside a freed span go back to the kernel at once (they read as
    /// zeros), while bytes in the pages a live block shares keep theirs until handed out
    /// again (and zeroed then).
    #[test]
    #[cfg(unix)]
    fn freed_whole_huge_pages_go_back_to_the_kernel() {
        let arena = HugePageArena::new();
        let keep = arena.alloc(100).unwrap();
        let mut big = arena.alloc(3 * HUGE_PAGE).unwrap();
        let after = arena.alloc(100).unwrap();
        big.as_mut().fill(7);
        let (region, start) = (big.region.clone(), big.offset);
        assert_eq!(start, 128);
        drop(big);
        // SAFETY: inside the region's mapping, which `region` keeps alive; no block covers
        // these bytes now.
        let read = |at: usize| unsafe { *region.base.add(at) };
        // Pages 1 and 2 lay wholly inside the freed span; pages 0 and 3 are shared with
        // `keep` and `after`.
        assert_eq!(read(HUGE_PAGE), 0);
        assert_eq!(read(2 * HUGE_PAGE + 5), 0);
        assert_eq!(read(3 * HUGE_PAGE - 1), 0);
        assert_eq!(read(start), 7);
        assert_eq!(read(start + 3 * HUGE_PAGE - 1), 7);
        // Handed out again, the span is zeroed as ever.
        let again = arena.alloc(3 * HUGE_PAGE).unwrap();
        assert!(again.as_ref().iter().all(|&x| x == 0));
        drop((keep, after, again));
        assert_eq!(arena.usage().1, 0);
    }

    #[test]
    fn a_block_can_be_aligned_at_a_byte_inside_it() {
        let arena = HugePageArena::new();
        let blocks = filled(&arena, (0..50).map(|i| (100 + i * 31, 48)));
        drop(blocks);
        assert_eq!(arena.usage().1, 0);
    }

    #[test]
    fn an_impossible_size_is_an_error_not_a_panic() {
        let arena = HugePageArena::new();
        assert!(arena.alloc(usize::MAX - 5).is_err());
        assert!(arena.alloc(usize::MAX / 2).is_err());
        assert_eq!(arena.usage(), (0, 0));
    }

    #[test]
    fn first_fit_reuses_freed_spans() {
        let mut s = Spans {
            free: BTreeMap::from([(0, 1024)]),
            used: 0,
        };
        let a = s.take(100).unwrap();
        let b = s.take(64).unwrap();
        let c = s.take(200).unwrap();
        assert_eq!((a, b, c), (0, 128, 192));
        s.give(b, 64);
        assert_eq!(s.take(10), Some(128));
        assert_eq!(s.take(2000), None);
        s.give(a, 100);
        s.give(128, 10);
        s.give(c, 200);
        assert_eq!(s.free, BTreeMap::from([(0, 1024)]));
        assert_eq!(s.used, 0);
    }
}
