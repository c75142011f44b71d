//! The memtable's log: its entries in the order appended, each at a number that never
//! changes, so that a reader holds `&Entry` while the writer appends. One writer (the store's
//! writer lock), any number of lock-free readers.
//!
//! The log is a list of segments, each allocated whole when the first entry lands in it: the
//! first holds `FIRST` entries, each next one twice as many up to `SEGMENT`, then `SEGMENT`
//! each. Capping the size bounds what one append can cost: `boxcar::Vec`, which this
//! replaced, doubles its buckets without a cap and allocates the next one, zeroed, at 7/8 of
//! the current one — measured under a sustained write load, single writes waited 8–16 ms at
//! those points with 8 MiB memtables and up to 102 ms with 64 MiB ones (a 23 MB bucket).
//! A segment of `SEGMENT` entries takes ~0.1 ms to allocate and set up. Small first segments
//! keep an idle keyspace's memtable small (a rotation makes one for every keyspace).
//!
//! A slot is a `OnceLock`: the writer sets it before it publishes the entry's number (the
//! count, an index slot or a link, all stored with `Release`), and a reader that loaded that
//! number with `Acquire` finds it set.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Entries in the first segment.
const FIRST: usize = 32;
/// Entries in each segment once they stop doubling (~384 KiB of 96-byte slots).
const SEGMENT: usize = 4096;
/// Segments that double (32, 64, …, `SEGMENT`).
const DOUBLING: u32 = (SEGMENT / FIRST).trailing_zeros() + 1;
/// Entries in the doubling segments together.
const DOUBLED: usize = FIRST * ((1 << DOUBLING) - 1);

/// The segment entry `i` lies in, its place there, and that segment's length.
fn locate(i: usize) -> (usize, usize, usize) {
    if i < DOUBLED {
        let seg = (i / FIRST + 1).ilog2() as usize;
        (seg, i - FIRST * ((1 << seg) - 1), FIRST << seg)
    } else {
        let past = i - DOUBLED;
        (DOUBLING as usize + past / SEGMENT, past % SEGMENT, SEGMENT)
    }
}

/// An append-only log (see the module comment).
pub(super) struct Log<T> {
    segments: boxcar::Vec<Box<[OnceLock<T>]>>,
    /// Entries appended.
    len: AtomicUsize,
}

impl<T> Default for Log<T> {
    fn default() -> Self {
        Log {
            segments: boxcar::Vec::new(),
            len: AtomicUsize::new(0),
        }
    }
}

impl<T> Log<T> {
    /// Writer only: appends `value`; its number.
    pub(super) fn push(&self, value: T) -> usize {
        let i = self.len.load(Ordering::Relaxed);
        let (seg, at, len) = locate(i);
        if seg == self.segments.count() {
            self.segments
                .push((0..len).map(|_| OnceLock::new()).collect());
        }
        #[expect(
            clippy::expect_used,
            reason = "the one writer appends at the count, in a segment made above or before"
        )]
        let slot = self
            .segments
            .get(seg)
            .and_then(|s| s.get(at))
            .expect("log slot at the count");
        if slot.set(value).is_err() {
            unreachable!("log slot {i} set twice: the log has one writer");
        }
        self.len.store(i + 1, Ordering::Release);
        i
    }

    /// Entry `i`, `None` when it was not appended (or not yet seen by this thread).
    pub(super) fn get(&self, i: usize) -> Option<&T> {
        let (seg, at, _) = locate(i);
        self.segments.get(seg)?.get(at)?.get()
    }

    /// Entries appended.
    pub(super) fn count(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_tile_the_numbers_without_gap_or_overlap() {
        let mut next = (0, 0);
        for i in 0..DOUBLED + 3 * SEGMENT {
            let (seg, at, len) = locate(i);
            assert_eq!((seg, at), next, "entry {i}");
            assert!(at < len && len <= SEGMENT);
            next = if at + 1 == len {
                (seg + 1, 0)
            } else {
                (seg, at + 1)
            };
        }
        assert_eq!(locate(0), (0, 0, FIRST));
        assert_eq!(
            locate(DOUBLED - 1),
            (DOUBLING as usize - 1, SEGMENT - 1, SEGMENT)
        );
    }

    #[test]
    fn entries_keep_their_numbers_while_readers_read() {
        let log = Log::default();
        let n = DOUBLED + 2 * SEGMENT + 5;
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                for i in 0..n {
                    assert_eq!(log.push(i * 3), i);
                }
            });
            loop {
                // Looked at before the count: a writer that stopped early ends the loop.
                let stopped = writer.is_finished();
                let seen = log.count();
                for i in (0..seen).step_by(97) {
                    assert_eq!(log.get(i), Some(&(i * 3)));
                }
                if stopped {
                    break;
                }
            }
        });
        assert_eq!(log.count(), n);
        assert_eq!(log.get(n), None);
        let first: &usize = log.get(0).unwrap_or(&usize::MAX);
        assert_eq!(*first, 0);
    }
}
