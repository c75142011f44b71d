//! The store's live counters, which `stats.rs` sums into the public `DbStats` snapshot.
//!
//! The read path's counters are per thread (`ThreadLocal<ReadCounters>`, each cache-line
//! aligned): a `get` adds to its own thread's copy with a plain load and store (`bump`: no
//! locked instruction, no cache line another reader writes), and `stats()` sums every thread's
//! copy. Shared atomics counted on every get cost two threads more than a third of their
//! throughput (measured: two threads did less than one). The write path's counters are shared
//! atomics (`add`, `add_wait`): writers are serialised anyway. What each counter means:
//! `stats.rs`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use thread_local::ThreadLocal;

use super::version::MAX_LEVELS;

/// One level's read-path counters (fields as in `LevelStats`).
#[derive(Default)]
pub(crate) struct LevelCounters {
    pub(crate) filter_checks: AtomicU64,
    pub(crate) filter_useful: AtomicU64,
    pub(crate) filter_positive: AtomicU64,
    pub(crate) filter_true_positive: AtomicU64,
    pub(crate) unfiltered_probes: AtomicU64,
    pub(crate) expired_skips: AtomicU64,
    pub(crate) data_block_reads: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
    pub(crate) prefix_checks: AtomicU64,
    pub(crate) prefix_useful: AtomicU64,
    pub(crate) prefix_unfiltered: AtomicU64,
    pub(crate) scan_block_reads: AtomicU64,
    pub(crate) scan_block_cache_hits: AtomicU64,
    pub(crate) range_checks: AtomicU64,
    pub(crate) range_useful: AtomicU64,
    pub(crate) range_false_positives: AtomicU64,
    pub(crate) range_unfiltered: AtomicU64,
}

/// One thread's read-path counters. Only the owning thread writes them (see `bump`); the
/// alignment keeps two threads' copies off each other's cache lines.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct ReadCounters {
    pub(crate) levels: [LevelCounters; MAX_LEVELS],
    pub(crate) gets: AtomicU64,
    pub(crate) scans: AtomicU64,
    pub(crate) prefix_scans: AtomicU64,
    pub(crate) tables_probed: AtomicU64,
    pub(crate) block_cache_hits: AtomicU64,
    pub(crate) block_cache_misses: AtomicU64,
    /// Point lookups per keyspace slot (`lookups::slot`): what weights the filter budget's
    /// split among keyspaces.
    pub(crate) keyspace_lookups: [AtomicU64; super::lookups::SLOTS],
}

/// Every counter of one store: each thread's read counters, and the shared write-path ones.
#[derive(Default)]
pub(crate) struct Counters {
    read: ThreadLocal<ReadCounters>,
    pub(crate) flushes: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) expired_tables_dropped: AtomicU64,
    pub(crate) expired_entries_dropped: AtomicU64,
    pub(crate) compaction_bytes_read: AtomicU64,
    pub(crate) compaction_bytes_written: AtomicU64,
    pub(crate) filter_validation_failures: AtomicU64,
    pub(crate) wal_bytes_dropped: AtomicU64,
    pub(crate) write_stalls: AtomicU64,
    pub(crate) write_stall_micros: AtomicU64,
    pub(crate) longest_write_stall_micros: AtomicU64,
    pub(crate) write_slowdowns: AtomicU64,
    pub(crate) write_slowdown_micros: AtomicU64,
    pub(crate) longest_write_slowdown_micros: AtomicU64,
    pub(crate) writes_grouped: AtomicU64,
    pub(crate) most_compactions_running: AtomicU64,
}

impl Counters {
    /// This thread's read counters (created on its first read).
    pub(crate) fn reader(&self) -> &ReadCounters {
        self.read.get_or_default()
    }

    /// Every thread's read counters.
    pub(crate) fn readers(&self) -> impl Iterator<Item = &ReadCounters> {
        self.read.iter()
    }

    /// Point lookups so far per keyspace slot, over every thread.
    pub(crate) fn keyspace_lookups(&self) -> [u64; super::lookups::SLOTS] {
        let mut out = [0u64; super::lookups::SLOTS];
        for r in self.readers() {
            for (o, c) in out.iter_mut().zip(&r.keyspace_lookups) {
                *o = o.wrapping_add(c.load(Relaxed));
            }
        }
        out
    }
}

/// Adds to a shared counter.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

/// Counts one wait of `d` in `count`, `total` and `longest` (microseconds).
pub(crate) fn add_wait(
    (count, total, longest): (&AtomicU64, &AtomicU64, &AtomicU64),
    d: std::time::Duration,
) {
    let micros = d.as_micros().min(u64::MAX as u128) as u64;
    count.fetch_add(1, Relaxed);
    total.fetch_add(micros, Relaxed);
    longest.fetch_max(micros, Relaxed);
}

/// Adds to a counter of this thread's `ReadCounters`: only this thread writes it, so a plain
/// load and store suffice (no read-modify-write), and `stats()` still reads whole values.
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}
