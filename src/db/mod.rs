//! The embedded store: a log-structured merge tree whose point lookups skip every table whose
//! filter says "absent".
//!
//! Use: `Db::open(dir, Options)` → `put` / `delete` / `write(batch)` / `get` / `scan` from any
//! number of threads → drop (or `close`). Files in the directory (formats in FORMAT.md):
//! `NNNNNN.wal` (write-ahead logs), `NNNNNN.sst` (tables), `MANIFEST` (keyspaces and their live
//! tables per level),
//! `OPTIONS` (the filter and prefix settings tables are written with), `LOCK` (held while
//! open).
//!
//! One concern per file:
//! - `options.rs`: `Options`, `WalRecovery`.
//! - `recovery.rs`: `open` — lock, manifest, which files are obsolete, log replay rules.
//! - `batch.rs`: `WriteBatch`, `WriteOptions`. `write.rs`: group commit, WAL append, memtable
//!   rotation, the read-only error state.
//!   `expiring.rs`: puts with an expiry, `expiry_of`, and the manifest version they need
//!   (the clock and the expiry rules: `crate::expiry`).
//! - `worker.rs`: the background threads (one flushing, `Options::background_threads`
//!   compacting), and how a change to the table sets is committed (table synced → directory
//!   synced → manifest → published → old removed). `flush.rs`: a memtable generation written
//!   to level 0. `running.rs`: which compactions may run side by side. `throttle.rs`: the
//!   write slowdown. `graveyard.rs`: replaced tables and memtables dropped off the read path.
//! - `keyspace.rs`: the `Keyspace` handle and the read API it shares with `Db`;
//!   `keyspaces.rs`: creating, listing and dropping keyspaces; `registry.rs`: their names.
//! - `read.rs`: `get`. `iter.rs`: `scan`. `cursor.rs`: `DbCursor`. `snapshot.rs`: `Snapshot`;
//!   `checkpoint.rs`: a snapshot written out as a store. `inner.rs`: shared state and lock
//!   order. `version.rs`: what readers load (`Published`: every keyspace's `State`).
//! - `stored_options.rs`: the `OPTIONS` record and how it merges with the options passed.
//! - `wal.rs`, `manifest.rs`, `memtable/` (log, hash index, sorted runs), `compaction.rs`,
//!   `merge.rs`. `counters.rs`: the live counters; `stats.rs`: the `DbStats` taken from them.
//!
//! Guarantees (README "What survives what"): a write that returned `Ok` survives a process
//! crash, and with `sync_writes` a power loss; after any write-path I/O error (full disk,
//! failed sync) or a failure or panic in a background thread the store turns read-only —
//! reads go on, writes fail with `Error::ReadOnly`, reopening recovers — so it never
//! acknowledges a write that recovery would drop. Open never deletes a file the manifest does
//! not prove obsolete.

mod allocation;
mod batch;
pub(crate) mod budget;
pub(crate) mod budget_parts;
mod checkpoint;
mod compaction;
mod conflicts;
mod counters;
mod cover;
mod cursor;
mod exists;
mod expiring;
#[cfg(feature = "replication")]
pub(crate) use expiring::scan_at;
mod files;
mod filter_checks;
mod filters;
mod flush;
mod graveyard;
mod inner;
mod iter;
mod keyspace;
mod keyspace_options;
mod keyspaces;
mod level_cursor;
mod limits;
mod locks;
pub(crate) mod lookups;
pub mod manifest;
mod memtable;
mod merge;
mod multi_get;
mod options;
mod picker;
mod range_deletes;
mod read;
mod recovery;
mod registry;
mod report;
mod running;
mod search_set;
mod snapshot;
mod snapshot_list;
mod spans;
mod state;
pub mod stats;
pub(crate) mod stored_options;
mod throttle;
mod transaction;
mod transaction_iter;
mod transaction_writes;
pub(crate) mod version;
pub(crate) mod wal;
mod wal_range;
mod worker;
mod write;
mod write_queue;

use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use inner::{lock, Inner};
use stats::DbStats;

use crate::error::{Error, Result};

pub use batch::{BatchOps, WriteBatch, WriteOptions};
pub use budget::{Allocation, FilterBudget, FilterMemory, LevelAllocation};
pub use checkpoint::CheckpointReport;
pub use cursor::DbCursor;
pub(crate) use files::table_path;
pub use filters::{Compressions, Filters, PrefixFilters, RangeFilters};
pub use iter::DbIter;
use iter::{own_bounds, prefix_range};
pub use keyspace::{Keyspace, DEFAULT_KEYSPACE};
pub use keyspace_options::KeyspaceOptions;
pub use limits::{MAX_BATCH_SIZE, MAX_KEY_SIZE, MAX_VALUE_SIZE};
pub use options::{HugePages, Options, WalRecovery};
pub use report::{OptionChange, OptionsReport, RecoveryReport, WalDamage};
pub use snapshot::{Snapshot, SnapshotKeyspace};
pub use transaction::{Transaction, DEFAULT_TRANSACTION_LIMIT};
pub use transaction_iter::TransactionIter;

/// An open database. `Send + Sync`: share it between threads with `Arc<Db>`.
///
/// ```
/// use lsm_bloom::{Db, Options};
/// let dir = tempfile::tempdir().expect("temporary directory");
/// let db = Db::open(dir.path(), Options::default())?;
/// db.put(b"user:1", b"alice")?;
/// assert_eq!(db.get(b"user:1")?, Some(b"alice".to_vec()));
/// db.delete(b"user:1")?;
/// assert_eq!(db.get(b"user:1")?, None);
/// # Ok::<(), lsm_bloom::Error>(())
/// ```
pub struct Db {
    inner: Arc<Inner>,
    /// The flush thread and the compaction threads (`worker.rs`).
    workers: Vec<JoinHandle<()>>,
}

impl Db {
    /// Opens the database in `dir` (creating it if `Options::create_if_missing`), recovering
    /// from its write-ahead logs by `Options::wal_recovery`; `Db::recovery` says what was found.
    ///
    /// Fails with `Error::Locked` when the directory is open elsewhere, `Error::NotFound` /
    /// `Error::AlreadyExists` as `create_if_missing` / `error_if_exists` say,
    /// `Error::MissingManifest` for a directory with tables or logs but no manifest,
    /// `Error::UnsupportedVersion` for files of a newer format, and `Error::Corruption` for a
    /// damaged manifest, table footer, index or properties block, or (`TornTailOnly`) log.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let inner = Arc::new(recovery::open(dir.as_ref(), opts)?);
        let mut db = Db {
            inner,
            workers: Vec::new(),
        };
        let roles =
            std::iter::once(("lsm-bloom-flush", worker::Role::Flush)).chain(std::iter::repeat_n(
                ("lsm-bloom-compact", worker::Role::Compact),
                db.inner.opts.background_threads,
            ));
        for (name, role) in roles {
            let bg = Arc::clone(&db.inner);
            let thread = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || bg.background_loop(role))
                .map_err(|e| Error::io("starting a background thread", e))?;
            db.workers.push(thread);
        }
        Ok(db)
    }

    /// What the last open found and did: logs replayed, damage and bytes dropped, files removed.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key.as_ref(), value.as_ref());
        self.write(b)
    }

    /// Deletes `key` (a no-op if absent).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key.as_ref());
        self.write(b)
    }

    /// Applies a batch atomically.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.inner.write_batch(batch, false)
    }

    /// Applies a batch atomically, as `opts` says: with `WriteOptions::synced()` it is
    /// durable before this returns `Ok`, whatever `Options::sync_writes` says (RocksDB's
    /// `WriteOptions::sync`).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use lsm_bloom::{Db, Options, WriteBatch, WriteOptions};
    /// let db = Db::open(dir.path(), Options::default())?; // sync_writes: false
    /// let mut batch = WriteBatch::new();
    /// batch.put("order:7", "paid");
    /// db.write_opt(batch, WriteOptions::synced())?; // survives a power loss from here
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_opt(&self, batch: WriteBatch, opts: WriteOptions) -> Result<()> {
        self.inner.write_batch(batch, opts.sync)
    }

    /// Makes every write acknowledged so far durable: the write-ahead log is synced
    /// (RocksDB's `FlushWAL(true)`). With `sync_writes` off, this is how a caller chooses when
    /// to pay for a sync. A failure puts the store in its read-only error state, as a failed
    /// write does.
    pub fn sync_wal(&self) -> Result<()> {
        self.inner.sync_wal()
    }

    /// The value of `key`, or `None`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.view().get(key.as_ref())
    }

    /// `f` of the value of `key`, or `None` when the key is absent: the value is lent where
    /// it lies (a memtable, the block cache, the table's map, or the block read for this
    /// lookup), not copied. A caller learns the value's size before it spends memory on it,
    /// and copies only what it keeps. The store's state stays pinned while `f` runs: keep it
    /// short (no waiting on a client in it).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = lsm_bloom::Db::open(dir.path(), lsm_bloom::Options::default())?;
    /// db.put("a", "123")?;
    /// assert_eq!(db.get_with("a", |v| v.len())?, Some(3));
    /// assert_eq!(db.get_with("b", |v| v.len())?, None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn get_with<R>(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<Option<R>> {
        self.view().get_with(key.as_ref(), f)
    }

    /// The values of `keys`, in the same order, each exactly what `get` would return. All keys
    /// are read from one point in time (as under one snapshot), and faster than one `get`
    /// each: the batch goes down the levels together, overlapping its filter probes' memory
    /// loads and reading each needed data block once. A key whose read fails gets its error
    /// (as `get` would); the others are unaffected. Duplicates are allowed.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = lsm_bloom::Db::open(dir.path(), lsm_bloom::Options::default())?;
    /// db.put("a", "1")?;
    /// let found = db.multi_get(&["a", "b", "a"]);
    /// assert_eq!(found[0].as_ref().ok(), Some(&Some(b"1".to_vec())));
    /// assert_eq!(found[1].as_ref().ok(), Some(&None));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn multi_get<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Vec<u8>>>> {
        self.view().multi_get(keys)
    }

    /// Live keys and values in `range`, in key order. The iterator reads from a snapshot of
    /// the table set taken now; writes made after the call may or may not be seen. An empty
    /// or reversed range yields nothing.
    pub fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<DbIter> {
        let (start, end) = own_bounds(&range);
        Ok(self.iter_over(start, end))
    }

    /// Every live key and value in key order: `scan(..)`, with nothing to name and nothing to
    /// handle before the first item (a failed read comes out as an item).
    pub fn iter(&self) -> DbIter {
        self.iter_over(Bound::Unbounded, Bound::Unbounded)
    }

    /// The iterator of `scan` and `iter`, over the default keyspace's state published now.
    fn iter_over(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> DbIter {
        keyspace::iter_in(&self.inner, &self.inner.read_state().default, start, end)
    }

    /// The read API on the default keyspace.
    fn view(&self) -> keyspace::View<'_> {
        keyspace::View {
            inner: &self.inner,
            id: 0,
            name: DEFAULT_KEYSPACE,
        }
    }

    /// A cursor over every live entry (`DbCursor`): seek, walk both ways, and read each entry
    /// in place, copying nothing. It reads the store as of this call, as a scan does; it is
    /// on nothing until its first seek.
    pub fn cursor(&self) -> DbCursor {
        self.cursor_in::<&[u8], _>(..)
    }

    /// A cursor that never leaves `range`: seeks and walks stop at its bounds, and with both
    /// bounds set, tables whose range filter says the range is empty are passed over, as
    /// `scan`'s are.
    pub fn cursor_in<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> DbCursor {
        keyspace::cursor_in(&self.inner, &self.inner.read_state().default, range)
    }

    /// Whether any live key lies in `range`: the first entry of `scan(range)`, if any. With
    /// range filters (`Options::range_filters`), a short range that holds no key of a table
    /// costs a filter probe there and no data-block read; a range holding only deleted keys
    /// is `false` (their tombstones are read to know it).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = lsm_bloom::Db::open(dir.path(), lsm_bloom::Options::default())?;
    /// db.put("event:42:0017", "login")?;
    /// assert!(db.contains_range("event:42:0010".."event:42:0020")?);
    /// assert!(!db.contains_range("event:42:0020"..="event:42:0029")?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn contains_range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<bool> {
        self.view().contains_range(range)
    }

    /// Writes a consistent, openable copy of the store as of now to the new directory `dir`
    /// (`Error::AlreadyExists` if it exists): tables hard-linked where the file system allows
    /// (copied otherwise), the memtables' contents as a log, a manifest and the options
    /// record. Safe while writes, flushes and compactions run, and holds none of them up. The
    /// copy appears under `dir` only once complete and synced. Open it with `Db::open(dir,
    /// ..)` like any store; it shares nothing with this one afterwards (a linked table is
    /// immutable, and either store deletes only its own name for it).
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<CheckpointReport> {
        checkpoint::checkpoint(&self.inner, &Snapshot::take(&self.inner), dir.as_ref())
    }

    /// `checkpoint`, of the store as `snapshot` sees it rather than as of now: a caller that
    /// read something from the snapshot (a replicated store's applied log position, say) gets
    /// a copy that agrees with what it read. `Error::InvalidArgument` if `snapshot` was taken
    /// from another store.
    pub fn checkpoint_of(
        &self,
        snapshot: &Snapshot,
        dir: impl AsRef<Path>,
    ) -> Result<CheckpointReport> {
        checkpoint::checkpoint(&self.inner, snapshot, dir.as_ref())
    }

    /// Begins an optimistic transaction (`Transaction`): reads as of now plus its own writes,
    /// committed as one batch unless something it read was written meanwhile
    /// (`Error::Conflict`). Serializable; nothing is locked while it runs
    /// (docs/transactions.md).
    pub fn transaction(&self) -> Transaction {
        Transaction::begin(Arc::clone(&self.inner))
    }

    /// A consistent read-only view of the store as of now (`Snapshot`): its `get`, `scan` and
    /// `scan_prefix` see every write acknowledged before this call and none after. Lock-free;
    /// readers that hold no snapshot pay nothing for it.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::take(&self.inner)
    }

    /// Live keys starting with `prefix`, in key order: the scan of `[prefix, the first key
    /// after every key starting with prefix)`. With a prefix rule (`Options::prefix_filters`) and
    /// `prefix` long enough for the rule to give it a prefix, tables whose prefix filter lacks
    /// that prefix are skipped; the result is always exactly the unfiltered scan's.
    pub fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<DbIter> {
        self.scan(prefix_range(prefix.as_ref()))
    }

    /// Writes the memtable to a table now and waits until it (and every memtable before it)
    /// is in a table: every write acknowledged before the call is then in a table.
    pub fn flush(&self) -> Result<()> {
        let inner = &self.inner;
        let target = {
            let mut writer = inner.lock_checked(&inner.writer);
            inner.errors.check()?;
            let s = &inner.read_state().default;
            if s.mem.generation_size() > 0 {
                Some(inner.rotate(&mut writer)?)
            } else {
                s.imm.last().cloned()
            }
        };
        let Some(target) = target else {
            return Ok(());
        };
        inner.wake();
        let mut sig = lock(&inner.signal);
        loop {
            if !inner
                .read_state()
                .default
                .imm
                .iter()
                .any(|m| Arc::ptr_eq(m, &target))
            {
                return Ok(());
            }
            inner.errors.check()?;
            sig = inner.wait_progress(sig, Duration::from_millis(50));
        }
    }

    /// Waits until no flush or compaction is pending: the table set has settled into the shape
    /// the compaction policy wants — with `Options::idle_compaction_after` (the default), level
    /// 0 compacted away too, as an idle store's would be — and expired data due to leave the
    /// disk by the options' bounds has left it (docs/expiry.md). Benchmarks call this after a bulk
    /// load. Writes made meanwhile are fine; it returns once they too have settled.
    pub fn wait_for_compactions(&self) -> Result<()> {
        let inner = &self.inner;
        inner
            .settling
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let settled = (|| loop {
            inner.wake();
            inner.errors.check()?;
            if inner.settled() {
                return Ok(());
            }
            drop(inner.wait_progress(lock(&inner.signal), Duration::from_millis(50)));
        })();
        inner
            .settling
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        settled
    }

    /// Flushes, then merges every table of each keyspace into one level (the deepest in use),
    /// dropping tombstones and rebuilding every filter. Returns when done. A failure makes the
    /// store read-only, as a background compaction failure does.
    pub fn compact(&self) -> Result<()> {
        self.flush()?;
        let ids: Vec<u32> = self.inner.read_state().all().map(|(id, _)| id).collect();
        for id in ids {
            self.compact_keyspace(id)?;
        }
        Ok(())
    }

    /// `compact`'s merge of keyspace `id`.
    fn compact_keyspace(&self, id: u32) -> Result<()> {
        let inner = &self.inner;
        let Some((job, ticket)) = inner.start_manual_compaction(id)? else {
            return Ok(());
        };
        let run =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.run_compaction(&job)));
        inner.end_manual_compaction(ticket);
        match run {
            Ok(result) => result.map_err(|e| inner.errors.set(e)),
            Err(panic) => {
                inner.errors.set(Error::Panicked {
                    message: "a compaction panicked".into(),
                });
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// The default keyspace's live tables per level, as a `get` consults them: level 0
    /// oldest first, deeper levels in key order. For tools and benchmarks that look at the
    /// filters themselves.
    pub fn levels(&self) -> Vec<Vec<Arc<crate::table::Table>>> {
        self.inner.read_state().default.version.levels().to_vec()
    }

    /// Counters, and per-level figures of the default keyspace.
    pub fn stats(&self) -> DbStats {
        let version = Arc::clone(&self.inner.read_state().default.version);
        let mut s = stats::collect(&self.inner.counters, &version);
        s.keyspaces = self.inner.keyspace_stats();
        // The default keyspace's allocation, planned once for both places.
        s.filter_budget = s.keyspaces.first().and_then(|k| k.filter_budget.clone());
        s.read_only_error = self.inner.errors.check().err().map(|e| e.to_string());
        s.immutable_memtables = self.inner.read_state().default.imm.len() as u64;
        s.compactions_running = self.inner.compactions_running();
        s.pending_compaction_bytes = self
            .inner
            .pending_compaction_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        (s.live_snapshots, s.oldest_snapshot_age) = self.inner.snapshots.summary();
        if let Some(c) = &self.inner.cache {
            s.block_cache_bytes = c.bytes();
            s.block_cache_capacity = c.capacity();
        }
        s
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Stops the background threads and syncs the WAL, reporting any error, including the one
    /// that made the store read-only (drop does the same, silently).
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        {
            let mut sig = lock(&self.inner.signal);
            sig.shutdown = true;
            self.inner.wake_worker.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        let synced = lock(&self.inner.writer).sync();
        self.inner.errors.check()?;
        synced.map_err(|e| self.inner.errors.set(e))
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // A panic here (from a `FileSystem` implementation) must not abort a thread that is
        // already unwinding; what matters is on disk already. An error has nobody to return
        // to: it is logged (`close` returns it).
        let closed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.shutdown()));
        match closed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(dir = %self.inner.dir.display(), error = %e, "store dropped with an error (Db::close returns it)");
            }
            Err(_) => {
                tracing::error!(dir = %self.inner.dir.display(), "store dropped: closing panicked");
            }
        }
    }
}
