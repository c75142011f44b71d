//! The state every part of the store shares (`Inner`), and the error state that stops writes.
//!
//! Locks, in the order they may be taken: `queue` (writes waiting for group commit; released
//! before the leader takes `writer`) → `writer` (one writer appends to the WAL at a time)
//! → `spare`, `throttle` (the next log and memtable, the write slowdown, `throttle.rs`) → `work` (the
//! running jobs and the manifest: held to pick a job, number a table and install a result,
//! never while a table is written; every manifest write holds it) → `publish` (serialises
//! replacing the published `State`, `version.rs`) → `signal` (background wake-ups and
//! progress). `get` and `scan` take no lock: they load the published `State` through an `ArcSwap` (arc-swap's thread-local debt slots: no write to memory
//! another reader writes).

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use arc_swap::{ArcSwap, Guard};

use super::counters::Counters;
pub(super) use super::locks::lock;
use super::options::Options;
use super::report::RecoveryReport;
use super::state::Published;
use super::version::Version;
use super::wal::WalWriter;
use crate::error::{Error, Result};

/// The next rotation's log and memtable, made ready by the flush thread
/// (`Inner::prepare_spare`, `write.rs`) and taken by a rotation (`Inner::rotate`).
pub(super) struct Spare {
    /// Created first, under the `spare` lock.
    pub(super) wal: WalWriter,
    /// Made after `wal`, outside the lock: `None` until then.
    pub(super) mem: Option<super::memtable::Memtable>,
}

/// Guarded by `Inner::signal`: wake-ups of the background threads (`worker.rs`).
#[derive(Default)]
pub(super) struct Signal {
    /// Raised by every wake-up: a thread that saw another value since it last looked for
    /// work looks again before it waits.
    pub(super) generation: u64,
    pub(super) shutdown: bool,
}

/// Guarded by `Inner::work`: what flushes and compactions need besides the table set.
pub(super) struct Work {
    /// Per keyspace and level, the largest key of the last table compacted out of it (round
    /// robin).
    pub(super) cursors: std::collections::BTreeMap<u32, Vec<Vec<u8>>>,
    /// The keyspace id the next compaction pick looks at first (keyspaces in turn).
    pub(super) next_pick: u32,
    /// The live keyspaces' names and the next id: what the manifest lists.
    pub(super) keyspaces: super::registry::Registry,
    /// `next_file` in the manifest on disk: table numbers below it are reserved.
    pub(super) reserved: u64,
    /// The compactions running now.
    pub(super) running: super::running::Running,
    /// Manual compactions (`Db::compact`) waiting for the running jobs to end; no new
    /// background compaction starts meanwhile.
    pub(super) manual: usize,
}

/// Once set, every write fails with `Error::ReadOnly` carrying the first error; reads go on.
#[derive(Default)]
pub(super) struct ErrorState {
    failed: AtomicBool,
    first: Mutex<Option<Arc<Error>>>,
}

impl ErrorState {
    /// `Err(ReadOnly)` once an error has been recorded.
    pub(super) fn check(&self) -> Result<()> {
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        match lock(&self.first).as_ref() {
            Some(first) => Err(Error::ReadOnly {
                source: Arc::clone(first),
            }),
            None => Ok(()),
        }
    }

    pub(super) fn is_set(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Records `e` (if it is the first) and returns it, for the caller whose operation failed.
    pub(super) fn set(&self, e: Error) -> Error {
        let mut first = lock(&self.first);
        if first.is_none() {
            *first = Some(Arc::new(e.replicate()));
            self.failed.store(true, Ordering::Release);
        }
        e
    }
}

pub(super) struct Inner {
    pub(super) dir: PathBuf,
    pub(super) opts: Options,
    pub(super) state: ArcSwap<Published>,
    /// Held while a new `State` is built from the current one and published.
    pub(super) publish: Mutex<()>,
    /// Verified, decoded data blocks (`None` when `Options::block_cache_bytes` is 0).
    /// Shared with snapshots (`snapshot.rs`), which read through it.
    pub(super) cache: Option<Arc<crate::table::BlockCache>>,
    /// Writes waiting for group commit (`write.rs`); taken before `writer`, never while
    /// holding it.
    pub(super) queue: Mutex<super::write_queue::WriteQueue>,
    /// Groups committed so far: a waiting write spins on it briefly before it parks
    /// (`write.rs`).
    pub(super) groups_done: std::sync::atomic::AtomicU64,
    pub(super) writer: Mutex<WalWriter>,
    /// An empty log and memtable made ahead by the flush thread for the next memtable
    /// rotation; taken under `writer`.
    pub(super) spare: Mutex<Option<Spare>>,
    /// The write slowdown; taken by a group's leader under `writer`.
    pub(super) throttle: Mutex<super::throttle::Throttle>,
    pub(super) work: Mutex<Work>,
    pub(super) signal: Mutex<Signal>,
    pub(super) wake_worker: Condvar,
    pub(super) progress: Condvar,
    /// Shared with scan iterators, which count their reads after the call returns (an
    /// iterator must not keep the whole store, and its directory lock, alive).
    pub(super) counters: Arc<Counters>,
    /// Group commits so far: `idle` watches it stand still (`Options::idle_compaction_after`).
    /// A count rather than a clock reading, so a write pays no `clock_gettime`: with the
    /// throttle check made lock-free too, one writer's puts went from 0.97 to 1.00 M/s
    /// (medians of 5 alternated runs).
    pub(super) writes: AtomicU64,
    /// The count `idle` last saw, and since when it has not moved.
    pub(super) quiet: Mutex<(u64, std::time::Instant)>,
    /// Whether the write slowdown is on: read without the `throttle` lock by every group.
    pub(super) slowing: std::sync::atomic::AtomicBool,
    /// The manifest says the logs may hold expiring puts (`Registry::expiring`, mirrored here
    /// so that an expiring write checks it without the work lock: `expiring.rs`).
    pub(super) expiring: std::sync::atomic::AtomicBool,
    /// The manifest says the logs may hold range deletes (`Registry::range_deletes`, mirrored
    /// as `expiring` is: `range_deletes.rs`).
    pub(super) range_deletes: std::sync::atomic::AtomicBool,
    /// A time the store's clock has been seen to reach (ms; 0: none yet): raised by reads that
    /// read the clock. A get skips a table expired whole by then without reading the clock
    /// itself (`ReadPath::seen`).
    pub(super) seen_now: std::sync::atomic::AtomicU64,
    /// A keyspace's memtable reached its own `KeyspaceOptions::memtable_size`: the next group
    /// commit rotates the generation (set by the commit that filled it, cleared by `rotate`).
    pub(super) keyspace_full: std::sync::atomic::AtomicBool,
    /// Lookups per keyspace slot, decayed: the weights of the filter budget's split
    /// (`budget_parts.rs`).
    pub(super) lookup_weights: Mutex<super::lookups::Weights>,
    /// `compaction::pending_bytes` of the current version, set as each version is installed:
    /// read by every group commit (the slowdown) and rotation (the stop) without a lock.
    pub(super) pending_compaction_bytes: AtomicU64,
    /// The most level-0 tables any keyspace holds, set with `pending_compaction_bytes`: read
    /// by every group commit (the slowdown) and rotation (the stop), which then need not walk
    /// every keyspace.
    pub(super) level0_tables: std::sync::atomic::AtomicUsize,
    /// Callers of `Db::wait_for_compactions` waiting now: while any is, level 0 is compacted
    /// away as if the store were idle.
    pub(super) settling: AtomicU64,
    /// Replaced tables and memtables, dropped by background threads (`graveyard.rs`).
    pub(super) graveyard: super::graveyard::Graveyard,
    /// The next file number to hand out (tables and logs share one sequence).
    pub(super) next_file: AtomicU64,
    pub(super) errors: ErrorState,
    pub(super) recovery: RecoveryReport,
    /// Live snapshots, for `DbStats` (shared with each `Snapshot`).
    pub(super) snapshots: Arc<super::snapshot_list::Snapshots>,
    pub(super) _lock: File,
}

impl Inner {
    /// True when no write came for `Options::idle_compaction_after`, or a caller waits for the
    /// store to settle.
    pub(super) fn idle(&self) -> bool {
        let Some(after) = self.opts.idle_compaction_after else {
            return false;
        };
        if self.settling.load(Ordering::Relaxed) > 0 {
            return true;
        }
        // Called now and then by the compaction threads (at least every `after`): the store
        // is idle once the count has stood still that long, so at most about 2 × `after`
        // after its last write.
        let writes = self.writes.load(Ordering::Relaxed);
        let mut quiet = lock(&self.quiet);
        if quiet.0 != writes {
            *quiet = (writes, std::time::Instant::now());
            return false;
        }
        quiet.1.elapsed() >= after
    }

    /// Notes a group commit. Leaders commit one at a time (under the writer lock), so a load
    /// and a store count every one, without a locked instruction.
    pub(super) fn note_write(&self) {
        let n = self.writes.load(Ordering::Relaxed);
        self.writes.store(n + 1, Ordering::Relaxed);
    }

    /// Waits on `progress` for at most `timeout` (flushes and compactions notify it).
    pub(super) fn wait_progress<'a>(
        &self,
        sig: MutexGuard<'a, Signal>,
        timeout: Duration,
    ) -> MutexGuard<'a, Signal> {
        self.progress
            .wait_timeout(sig, timeout)
            .unwrap_or_else(|p| p.into_inner())
            .0
    }

    /// Locks the writer or work mutex. If a thread panicked while holding it (mid-append or
    /// mid-commit), what it guards may be half-changed: the store turns read-only, and the
    /// caller's `errors.check()` reports it.
    pub(super) fn lock_checked<'a, T>(&self, m: &'a Mutex<T>) -> MutexGuard<'a, T> {
        m.lock().unwrap_or_else(|p| {
            self.errors.set(Error::Panicked {
                message: "a thread panicked while writing the log or committing tables".into(),
            });
            p.into_inner()
        })
    }

    /// Asks every background thread to look for work, and tells waiters progress was made.
    pub(super) fn wake(&self) {
        lock(&self.signal).generation += 1;
        self.wake_worker.notify_all();
        self.progress.notify_all();
    }

    /// Best-effort removal of a file the manifest no longer needs: one left behind is proven
    /// obsolete by the manifest and removed by the next open.
    pub(super) fn remove_obsolete(&self, path: &std::path::Path) {
        let _ = self.opts.fs.remove_file(path);
    }
}

/// Reading and replacing the published state (`version.rs` says why it is never changed in
/// place).
impl Inner {
    /// The published state of every keyspace. The guard is for one operation (a get, a
    /// check); hold an `Arc` (`snapshot`, `version_of`) for anything longer.
    pub(super) fn read_state(&self) -> Guard<Arc<Published>> {
        self.state.load()
    }

    /// Publishes a copy of the state with `f` applied; concurrent readers keep the one they
    /// loaded.
    pub(super) fn update_state<R>(&self, f: impl FnOnce(&mut Published) -> R) -> R {
        let _publishing = lock(&self.publish);
        let mut next = Published::clone(&self.state.load());
        let r = f(&mut next);
        self.state.store(Arc::new(next));
        r
    }

    /// Leaves the tables a lookup may pass over by `at` out of every keyspace's search
    /// (`Version::pruned`, `SearchSet`), after a lookup at `at` passed over one. `at` is a
    /// time the store has seen (`seen_now`), so every lookup that loads the pruned state
    /// reads a `seen` of at least `at` after it: none searches at an earlier time.
    ///
    /// Taken after the work lock, as a flush or compaction installing a version is, so that
    /// none builds on the version from before and publishes it over this one. If one is
    /// installing now, nothing is done: a later lookup passing over the table asks again.
    #[cold]
    #[inline(never)]
    pub(super) fn prune_lookups(&self, at: u64) {
        let Ok(_work) = self.work.try_lock() else {
            return;
        };
        let stale = self
            .read_state()
            .all()
            .any(|(_, s)| s.version.next_passable() <= at);
        if !stale {
            return;
        }
        self.update_state(|p| {
            for (_, s) in p.all_mut() {
                if let Some(v) = s.version.pruned(at) {
                    s.version = Arc::new(v);
                }
            }
        });
    }

    /// Keyspace `id`'s current table set; `None` once it is dropped.
    pub(super) fn version_of(&self, id: u32) -> Option<Arc<Version>> {
        self.read_state().get(id).map(|s| s.version.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_error_wins_and_later_checks_carry_it() {
        let s = ErrorState::default();
        assert!(s.check().is_ok());
        let e = s.set(Error::InvalidArgument("first".into()));
        assert!(e.to_string().contains("first"));
        s.set(Error::InvalidArgument("second".into()));
        match s.check() {
            Err(Error::ReadOnly { source }) => assert!(source.to_string().contains("first")),
            other => panic!("{other:?}"),
        }
    }
}
