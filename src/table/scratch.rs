//! Per-thread buffers that data blocks which are not cached are read into: the block cache's
//! doorkeeper (`doorkeeper.rs`) turns most misses of a store much larger than its cache into
//! such reads, and a store without a cache makes every read one. Reusing a buffer saves the
//! allocation, the zeroing and the free of a fresh one, and the kernel copies the block into
//! lines that are already in the CPU's cache instead of cold ones.
//!
//! Use: `Scratch::take()` lends one of this thread's buffers (or a new one if none is left);
//! the read fills it; dropping the `Scratch` hands it back. A get holds one at a time; a scan
//! holds one per table it has open (`iter.rs`), so a thread keeps up to `KEEP_BUFFERS`.

use std::cell::RefCell;

/// A buffer larger than this is not kept for the next read (a block of one huge value).
const KEEP_BYTES: usize = 64 << 10;

/// Buffers a thread keeps: a scan's tables open at once (memtables aside, one per level-0
/// table and one per deeper level), with room to spare.
const KEEP_BUFFERS: usize = 16;

thread_local! {
    static BUFFERS: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// One of this thread's read buffers, lent out; it holds a verified block payload once read.
pub(crate) struct Scratch(pub(crate) Vec<u8>);

impl Scratch {
    /// Borrows one of this thread's buffers (a new, empty one if all are lent).
    pub(crate) fn take() -> Scratch {
        let kept = BUFFERS.try_with(|b| b.borrow_mut().pop()).ok().flatten();
        Scratch(kept.unwrap_or_default())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.0.capacity() <= KEEP_BYTES {
            let buf = std::mem::take(&mut self.0);
            // During thread teardown the slot may be gone: the buffer is then just freed.
            let _ = BUFFERS.try_with(|b| {
                let mut kept = b.borrow_mut();
                if kept.len() < KEEP_BUFFERS {
                    kept.push(buf);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_comes_back_and_huge_ones_are_not_kept() {
        let mut s = Scratch::take();
        s.0.resize(4096, 1);
        let ptr = s.0.as_ptr();
        drop(s);
        let s = Scratch::take();
        assert_eq!(
            (s.0.as_ptr(), s.0.len()),
            (ptr, 4096),
            "the same buffer is lent again"
        );
        let other = Scratch::take();
        assert_eq!(other.0.capacity(), 0, "a second loan gets a new buffer");
        drop(other);
        drop(s);
        let mut big = Scratch::take();
        big.0.resize(KEEP_BYTES + 1, 0);
        drop(big);
        assert!(Scratch::take().0.capacity() <= KEEP_BYTES);
    }
}
