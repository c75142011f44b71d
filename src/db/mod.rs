//! The embedded store: a log-structured merge tree whose point lookups skip every table whose
//! filter says "absent".
//!
//! Use: `Db::open(dir, Options)` → `put` / `delete` / `write(batch)` / `get` / `scan` from any
//! number of threads → drop (or `close`). Files in the directory (formats in FORMAT.md):
//! `NNNNNN.wal` (write-ahead logs), `NNNNNN.sst` (tables), `MANIFEST` (live tables per level),
//! `LOCK` (held while open).
//!
//! Write path: a batch is appended to the WAL as one record, then applied to the memtable.
//! A full memtable becomes immutable and a background thread flushes it to a level-0 table,
//! then runs leveled compaction (`compaction.rs`). Writes wait when flushes fall behind
//! (`max_immutable_memtables`) or level 0 piles up (`l0_stop_writes_trigger`).
//!
//! Read path (`get`): memtables newest first, then level-0 tables newest first, then one
//! table per deeper level found by binary search. The key is hashed once; a table is read
//! only if its key range holds the key and its filter says "maybe". A table whose filter
//! failed validation at open is read without one (counted in `DbStats`). Readers clone a
//! snapshot of the table set under a short read lock, so they never wait for compactions.

mod compaction;
pub mod manifest;
mod memtable;
mod merge;
pub mod stats;
mod wal;

use std::collections::BTreeMap;
use std::fs::File;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use compaction::{Job, Version};
use memtable::Memtable;
use merge::{MergeIter, Source};
use stats::{add, Counters, DbStats, LevelStats, MAX_LEVELS};
use wal::{Ops, WalWriter};

use crate::error::{Error, Result};
use crate::filter::{hash_key, FilterPolicy};
use crate::table::{Entry, FilterState, Table, TableBuilder, TableBuilderOptions, TableReadStats};

/// Largest key accepted, in bytes.
pub const MAX_KEY_SIZE: usize = 16 * 1024;
/// Largest value accepted, in bytes.
pub const MAX_VALUE_SIZE: usize = 64 * 1024 * 1024;
/// Largest write batch accepted (keys plus values), in bytes.
pub const MAX_BATCH_SIZE: usize = 256 * 1024 * 1024;

/// How the store behaves. `Options::default()` suits most services.
#[derive(Clone, Debug)]
pub struct Options {
    /// Memtable size that triggers a flush, in bytes (default 8 MiB).
    pub memtable_size: usize,
    /// Target data block size in bytes (default 4 KiB).
    pub block_size: usize,
    /// Filter for every level (default blocked Bloom, 10 bits/key); `None` disables filters.
    pub filter_policy: Option<FilterPolicy>,
    /// Per-level overrides of `filter_policy` (`None` disables the filter on that level).
    pub filter_policy_per_level: BTreeMap<usize, Option<FilterPolicy>>,
    /// `fdatasync` the WAL on every write (default false: a write survives a process crash,
    /// not a power loss).
    pub sync_writes: bool,
    /// Size ratio between adjacent levels (default 10).
    pub size_ratio: u32,
    /// Bytes level 1 may hold before it is compacted into level 2 (default 64 MiB).
    pub level1_max_bytes: u64,
    /// Level-0 table count that triggers a compaction (default 4).
    pub l0_compaction_trigger: usize,
    /// Level-0 table count at which writes wait for compaction (default 12).
    pub l0_stop_writes_trigger: usize,
    /// Target size of compaction output tables (default 8 MiB).
    pub target_file_size: u64,
    /// Immutable memtables waiting for flush before writes wait (default 2).
    pub max_immutable_memtables: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            memtable_size: 8 << 20,
            block_size: 4096,
            filter_policy: Some(FilterPolicy::default()),
            filter_policy_per_level: BTreeMap::new(),
            sync_writes: false,
            size_ratio: 10,
            level1_max_bytes: 64 << 20,
            l0_compaction_trigger: 4,
            l0_stop_writes_trigger: 12,
            target_file_size: 8 << 20,
            max_immutable_memtables: 2,
        }
    }
}

impl Options {
    /// The filter policy for tables written to `level`.
    pub fn filter_for_level(&self, level: usize) -> Option<FilterPolicy> {
        self.filter_policy_per_level
            .get(&level)
            .copied()
            .unwrap_or(self.filter_policy)
    }

    fn validate(&self) -> Result<()> {
        let bad = |s: &str| Err(Error::InvalidArgument(s.to_string()));
        if self.memtable_size < 1024 {
            return bad("memtable_size must be at least 1024 bytes");
        }
        if !(64..=1 << 24).contains(&self.block_size) {
            return bad("block_size must be between 64 bytes and 16 MiB");
        }
        if self.size_ratio < 2 {
            return bad("size_ratio must be at least 2");
        }
        if self.l0_compaction_trigger == 0
            || self.l0_stop_writes_trigger <= self.l0_compaction_trigger
        {
            return bad("need 0 < l0_compaction_trigger < l0_stop_writes_trigger");
        }
        if self.max_immutable_memtables == 0
            || self.target_file_size < 1024
            || self.level1_max_bytes < 1024
        {
            return bad(
                "max_immutable_memtables, target_file_size and level1_max_bytes must be positive",
            );
        }
        for level in self.filter_policy_per_level.keys() {
            if *level >= MAX_LEVELS {
                return Err(Error::InvalidArgument(format!(
                    "filter override for level {level}, levels are 0..{MAX_LEVELS}"
                )));
            }
        }
        for p in std::iter::once(&self.filter_policy)
            .chain(self.filter_policy_per_level.values())
            .flatten()
        {
            p.validate()?;
        }
        Ok(())
    }
}

/// Writes applied together: all or none survive a crash, and readers see all or none.
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    ops: Ops,
    bytes: usize,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets `key` to `value`.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        let (k, v) = (key.into(), value.into());
        self.bytes += k.len() + v.len();
        self.ops.push((k, Some(v)));
        self
    }
    /// Deletes `key`.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> &mut Self {
        let k = key.into();
        self.bytes += k.len();
        self.ops.push((k, None));
        self
    }
    /// Operations in the batch.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// True when the batch holds nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

fn bound_slice(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

pub(crate) fn table_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:06}.sst"))
}

struct State {
    mem: Arc<Memtable>,
    /// Oldest first.
    imm: Vec<Arc<Memtable>>,
    version: Arc<Version>,
}

#[derive(Default)]
struct Signal {
    pending: bool,
    shutdown: bool,
    /// The worker is running jobs.
    busy: bool,
}

struct Inner {
    dir: PathBuf,
    opts: Options,
    state: RwLock<State>,
    writer: Mutex<WalWriter>,
    /// Held while a flush or compaction edits the table set.
    work: Mutex<()>,
    signal: Mutex<Signal>,
    wake_worker: Condvar,
    progress: Condvar,
    counters: Counters,
    next_file: AtomicU64,
    bg_error: Mutex<Option<String>>,
    cursors: Mutex<Vec<Vec<u8>>>,
    _lock: File,
}

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
    worker: Option<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn list_numbered(dir: &Path, ext: &str) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(id) = name.strip_suffix(ext).and_then(|s| s.parse::<u64>().ok()) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

fn remove(path: &Path) {
    // Best effort: a leftover file is an orphan that the next open deletes again.
    let _ = std::fs::remove_file(path);
}

impl Db {
    /// Opens (creating if needed) the database in `dir`, recovering from its WAL.
    ///
    /// Fails with `Error::UnsupportedVersion` for files written by a newer format, with
    /// `Error::Corruption` for a damaged manifest, table footer, index or properties block,
    /// and with `Error::InvalidArgument` when another process has the directory open.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Db> {
        opts.validate()?;
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let lock_path = dir.join("LOCK");
        let lock_file = File::create(&lock_path)
            .map_err(|e| Error::io(format!("creating {}", lock_path.display()), e))?;
        match lock_file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::InvalidArgument(format!(
                    "{} is already open in another process or handle",
                    dir.display()
                )))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::io(format!("locking {}", lock_path.display()), e))
            }
        }
        let counters = Counters::default();
        let manifest = manifest::read(&dir)?.unwrap_or_default();
        let mut version = Version::empty();
        let mut live = std::collections::HashSet::new();
        if manifest.levels.len() > MAX_LEVELS {
            return Err(Error::corruption(
                dir.join(manifest::MANIFEST_FILE),
                format!("{} levels, at most {MAX_LEVELS}", manifest.levels.len()),
            ));
        }
        for (level, tables) in manifest.levels.iter().enumerate() {
            for meta in tables {
                let t = Table::open(&table_path(&dir, meta.id), meta.id)?;
                if matches!(t.filter(), FilterState::Invalid(_)) {
                    add(&counters.filter_validation_failures, 1);
                }
                live.insert(meta.id);
                version.levels[level].push(Arc::new(t));
            }
        }
        let mut max_id = manifest.next_file.max(1);
        for id in list_numbered(&dir, ".sst")? {
            max_id = max_id.max(id + 1);
            if !live.contains(&id) {
                remove(&table_path(&dir, id)); // output of a flush or compaction that never committed
            }
        }
        let wal_ids = list_numbered(&dir, ".wal")?;
        max_id = max_id.max(wal_ids.last().map_or(0, |i| i + 1));
        let next_file = AtomicU64::new(max_id);

        // Replay logs the manifest does not cover into one memtable.
        let recovered = Memtable::new(0);
        for &id in wal_ids.iter().filter(|&&id| id >= manifest.log_number) {
            let replay = wal::replay(&wal::wal_path(&dir, id))?;
            add(&counters.wal_bytes_dropped, replay.dropped_bytes);
            for ops in replay.batches {
                recovered.apply(ops);
            }
        }
        let wal_id = next_file.fetch_add(1, Ordering::SeqCst);
        let writer = WalWriter::create(&dir, wal_id)?;
        if !recovered.is_empty() {
            let id = next_file.fetch_add(1, Ordering::SeqCst);
            let t = Self::write_l0(&dir, &opts, &recovered, id)?;
            version.levels[0].push(Arc::new(t));
        }
        let data = Self::manifest_data(&version, next_file.load(Ordering::SeqCst), wal_id);
        manifest::write(&dir, &data)?;
        for id in wal_ids {
            remove(&wal::wal_path(&dir, id));
        }

        let inner = Arc::new(Inner {
            dir,
            state: RwLock::new(State {
                mem: Arc::new(Memtable::new(wal_id)),
                imm: Vec::new(),
                version: Arc::new(version),
            }),
            writer: Mutex::new(writer),
            work: Mutex::new(()),
            signal: Mutex::new(Signal {
                pending: true,
                shutdown: false,
                busy: false,
            }),
            wake_worker: Condvar::new(),
            progress: Condvar::new(),
            counters,
            next_file,
            bg_error: Mutex::new(None),
            cursors: Mutex::new(vec![Vec::new(); MAX_LEVELS]),
            opts,
            _lock: lock_file,
        });
        let bg = Arc::clone(&inner);
        let worker = std::thread::Builder::new()
            .name("lsm-bloom-compaction".into())
            .spawn(move || bg.background_loop())
            .map_err(|e| Error::io("starting the compaction thread", e))?;
        Ok(Db {
            inner,
            worker: Some(worker),
        })
    }

    fn write_l0(dir: &Path, opts: &Options, mem: &Memtable, id: u64) -> Result<Table> {
        let mut b = TableBuilder::create(
            &table_path(dir, id),
            TableBuilderOptions {
                block_size: opts.block_size,
                filter: opts.filter_for_level(0),
                level: 0,
            },
        )?;
        for (k, v) in mem.range(Bound::Unbounded, Bound::Unbounded) {
            b.add(&k, v.as_deref())?;
        }
        b.finish()?;
        Table::open(&table_path(dir, id), id)
    }

    fn manifest_data(v: &Version, next_file: u64, log_number: u64) -> manifest::ManifestData {
        manifest::ManifestData {
            next_file,
            log_number,
            levels: v
                .levels
                .iter()
                .map(|ts| {
                    ts.iter()
                        .map(|t| manifest::TableMeta {
                            id: t.id(),
                            size: t.file_size(),
                        })
                        .collect()
                })
                .collect(),
        }
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.write_ops(vec![(key.as_ref().to_vec(), Some(value.as_ref().to_vec()))])
    }

    /// Deletes `key` (a no-op if absent).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.write_ops(vec![(key.as_ref().to_vec(), None)])
    }

    /// Applies a batch atomically.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        if batch.bytes > MAX_BATCH_SIZE {
            return Err(Error::InvalidArgument(format!(
                "write batch of {} bytes exceeds the {MAX_BATCH_SIZE}-byte limit",
                batch.bytes
            )));
        }
        if batch.is_empty() {
            return Ok(());
        }
        self.write_ops(batch.ops)
    }

    fn write_ops(&self, ops: Ops) -> Result<()> {
        for (k, v) in &ops {
            if k.len() > MAX_KEY_SIZE {
                return Err(Error::InvalidArgument(format!(
                    "key of {} bytes exceeds the {MAX_KEY_SIZE}-byte limit",
                    k.len()
                )));
            }
            if let Some(v) = v {
                if v.len() > MAX_VALUE_SIZE {
                    return Err(Error::InvalidArgument(format!(
                        "value of {} bytes exceeds the {MAX_VALUE_SIZE}-byte limit",
                        v.len()
                    )));
                }
            }
        }
        let record = wal::encode_batch(&ops);
        let inner = &self.inner;
        let mut writer = lock(&inner.writer);
        inner.check_bg_error()?;
        let mut mem = inner.read_state().mem.clone();
        if mem.approximate_size() >= inner.opts.memtable_size {
            mem = inner.rotate(&mut writer)?;
        }
        writer.append(&record, inner.opts.sync_writes)?;
        mem.apply(ops);
        Ok(())
    }

    /// The value of `key`, or `None`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        let inner = &self.inner;
        add(&inner.counters.gets, 1);
        let (mem, imm, version) = inner.snapshot();
        if let Some(v) = mem.get(key) {
            return Ok(v);
        }
        for m in imm.iter().rev() {
            if let Some(v) = m.get(key) {
                return Ok(v);
            }
        }
        let hash = hash_key(key);
        for t in version.levels[0].iter().rev() {
            if let Some(v) = inner.probe(0, t, key, hash)? {
                return Ok(v);
            }
        }
        for (level, tables) in version.levels.iter().enumerate().skip(1) {
            let i = tables.partition_point(|t| t.max_key() < key);
            if let Some(t) = tables.get(i) {
                if let Some(v) = inner.probe(level, t, key, hash)? {
                    return Ok(v);
                }
            }
        }
        Ok(None)
    }

    /// Live keys and values in `range`, in key order. The iterator reads from a snapshot of
    /// the table set taken now; writes made after the call may or may not be seen.
    pub fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Result<DbIter> {
        let own = |b: Bound<&K>| match b {
            Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let (start, end) = (own(range.start_bound()), own(range.end_bound()));
        let (mem, imm, version) = self.inner.snapshot();
        let (s, e) = (bound_slice(&start), bound_slice(&end));
        if let (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) =
            (s, e)
        {
            if a > b {
                return Ok(DbIter {
                    merge: MergeIter::new(Vec::new())?,
                    end: Bound::Unbounded,
                    done: true,
                });
            }
        }
        let mut sources: Vec<Source> = Vec::new();
        for m in std::iter::once(&mem).chain(imm.iter().rev()) {
            let entries: Vec<Result<Entry>> = m
                .range(s, e)
                .into_iter()
                .map(|(key, value)| Ok(Entry { key, value }))
                .collect();
            sources.push(Box::new(entries.into_iter()));
        }
        let in_range = |t: &Table| {
            let after_start = match s {
                Bound::Included(k) => t.max_key() >= k,
                Bound::Excluded(k) => t.max_key() > k,
                Bound::Unbounded => true,
            };
            let before_end = match e {
                Bound::Included(k) => t.min_key() <= k,
                Bound::Excluded(k) => t.min_key() < k,
                Bound::Unbounded => true,
            };
            t.properties().entries > 0 && after_start && before_end
        };
        for t in version.levels[0]
            .iter()
            .rev()
            .chain(version.levels[1..].iter().flatten())
        {
            if in_range(t) {
                sources.push(Box::new(t.iter(s)));
            }
        }
        Ok(DbIter {
            merge: MergeIter::new(sources)?,
            end,
            done: false,
        })
    }

    /// Writes the memtable to a table now and waits until every memtable is flushed.
    pub fn flush(&self) -> Result<()> {
        let inner = &self.inner;
        {
            let mut writer = lock(&inner.writer);
            inner.check_bg_error()?;
            let empty = inner.read_state().mem.is_empty();
            if !empty {
                inner.rotate(&mut writer)?;
            }
        }
        let mut sig = lock(&inner.signal);
        loop {
            inner.check_bg_error()?;
            if inner.read_state().imm.is_empty() {
                return Ok(());
            }
            sig.pending = true;
            inner.wake_worker.notify_all();
            sig = inner.wait_progress(sig, Duration::from_millis(50));
        }
    }

    /// Waits until no flush or compaction is pending: the table set has settled into the shape
    /// the compaction policy wants (benchmarks call this after a bulk load).
    pub fn wait_for_compactions(&self) -> Result<()> {
        let inner = &self.inner;
        let mut sig = lock(&inner.signal);
        sig.pending = true;
        inner.wake_worker.notify_all();
        loop {
            inner.check_bg_error()?;
            if !sig.pending && !sig.busy {
                return Ok(());
            }
            sig = inner.wait_progress(sig, Duration::from_millis(50));
        }
    }

    /// Flushes, then merges every table into one level (the deepest in use), dropping
    /// tombstones and rebuilding every filter. Returns when done.
    pub fn compact(&self) -> Result<()> {
        self.flush()?;
        let inner = &self.inner;
        let _work = lock(&inner.work);
        let version = inner.version();
        if let Some(job) = compaction::full(&version) {
            inner.run_compaction(&job)?;
        }
        Ok(())
    }

    /// Counters and per-level figures.
    pub fn stats(&self) -> DbStats {
        let inner = &self.inner;
        let version = inner.version();
        let c = &inner.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut s = DbStats {
            gets: load(&c.gets),
            tables_probed: load(&c.tables_probed),
            flushes: load(&c.flushes),
            compactions: load(&c.compactions),
            compaction_bytes_read: load(&c.compaction_bytes_read),
            compaction_bytes_written: load(&c.compaction_bytes_written),
            filter_validation_failures: load(&c.filter_validation_failures),
            wal_bytes_dropped: load(&c.wal_bytes_dropped),
            write_stalls: load(&c.write_stalls),
            ..DbStats::default()
        };
        let mut total = LevelStats::default();
        for (level, tables) in version.levels.iter().enumerate() {
            let mut l = LevelStats {
                level: Some(level),
                tables: tables.len() as u64,
                ..LevelStats::default()
            };
            for t in tables {
                l.table_bytes += t.file_size();
                if let FilterState::Valid(f) = t.filter() {
                    let h = f.header();
                    l.filter_keys += h.n;
                    l.filter_bytes += t.filter_bytes();
                    l.expected_fpr_sum += h.kind.expected_fpr(h.m, h.n, h.k);
                }
            }
            l.add_counters(&c.levels[level]);
            total.add(&l);
            s.levels.push(l);
        }
        s.total = total;
        s
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Stops the background thread and syncs the WAL, reporting any error (drop does the
    /// same, silently).
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<()> {
        {
            let mut sig = lock(&self.inner.signal);
            sig.shutdown = true;
            self.inner.wake_worker.notify_all();
        }
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
        lock(&self.inner.writer).sync()?;
        self.inner.check_bg_error()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

impl Inner {
    /// The current state, read-locked (briefly: clone what you need and drop the guard).
    fn read_state(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The current table set.
    fn version(&self) -> Arc<Version> {
        self.read_state().version.clone()
    }

    /// Waits on `progress` for at most `timeout` (flushes and compactions notify it).
    fn wait_progress<'a>(
        &self,
        sig: MutexGuard<'a, Signal>,
        timeout: Duration,
    ) -> MutexGuard<'a, Signal> {
        self.progress
            .wait_timeout(sig, timeout)
            .unwrap_or_else(|p| p.into_inner())
            .0
    }

    fn snapshot(&self) -> (Arc<Memtable>, Vec<Arc<Memtable>>, Arc<Version>) {
        let s = self.read_state();
        (s.mem.clone(), s.imm.clone(), s.version.clone())
    }

    fn check_bg_error(&self) -> Result<()> {
        match lock(&self.bg_error).as_ref() {
            Some(e) => Err(Error::InvalidArgument(format!(
                "database is read-only after a background error: {e}"
            ))),
            None => Ok(()),
        }
    }

    /// Consults `t` for `key`: range, then filter, then one data block.
    fn probe(
        &self,
        level: usize,
        t: &Table,
        key: &[u8],
        hash: u64,
    ) -> Result<Option<Option<Vec<u8>>>> {
        if !t.covers(key) {
            return Ok(None);
        }
        add(&self.counters.tables_probed, 1);
        let c = &self.counters.levels[level];
        let filtered = match t.filter() {
            FilterState::Valid(f) => {
                add(&c.filter_checks, 1);
                let maybe = if f.header().seed == crate::filter::hash::DEFAULT_SEED {
                    f.may_contain_hash(hash)
                } else {
                    f.may_contain(key)
                };
                if !maybe {
                    add(&c.filter_useful, 1);
                    return Ok(None);
                }
                add(&c.filter_positive, 1);
                true
            }
            FilterState::None | FilterState::Invalid(_) => {
                add(&c.unfiltered_probes, 1);
                false
            }
        };
        let mut reads = TableReadStats::default();
        let found = t.get(key, &mut reads);
        add(&c.data_block_reads, reads.blocks);
        add(&c.bytes_read, reads.bytes);
        let found = found?;
        if filtered && found.is_some() {
            add(&c.filter_true_positive, 1);
        }
        Ok(found)
    }

    /// Makes the memtable immutable and starts a new one with a new WAL. Waits first while
    /// flushes or level 0 are behind. Called with the writer lock held.
    fn rotate(&self, writer: &mut WalWriter) -> Result<Arc<Memtable>> {
        let mut stalled = false;
        loop {
            self.check_bg_error()?;
            let behind = {
                let s = self.read_state();
                s.imm.len() >= self.opts.max_immutable_memtables
                    || s.version.levels[0].len() >= self.opts.l0_stop_writes_trigger
            };
            if !behind {
                break;
            }
            if !stalled {
                add(&self.counters.write_stalls, 1);
                stalled = true;
            }
            let mut sig = lock(&self.signal);
            sig.pending = true;
            self.wake_worker.notify_all();
            drop(self.wait_progress(sig, Duration::from_millis(20)));
        }
        let id = self.next_file.fetch_add(1, Ordering::SeqCst);
        *writer = WalWriter::create(&self.dir, id)?;
        let mem = Arc::new(Memtable::new(id));
        {
            let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
            let old = std::mem::replace(&mut s.mem, mem.clone());
            s.imm.push(old);
        }
        let mut sig = lock(&self.signal);
        sig.pending = true;
        self.wake_worker.notify_all();
        Ok(mem)
    }

    fn background_loop(&self) {
        loop {
            {
                let mut sig = lock(&self.signal);
                while !sig.pending && !sig.shutdown {
                    sig = self
                        .wake_worker
                        .wait(sig)
                        .unwrap_or_else(|p| p.into_inner());
                }
                if sig.shutdown {
                    return;
                }
                sig.pending = false;
                sig.busy = true;
            }
            loop {
                match self.one_job() {
                    Ok(true) => self.progress.notify_all(),
                    Ok(false) => break,
                    Err(e) => {
                        *lock(&self.bg_error) = Some(e.to_string());
                        break;
                    }
                }
                if lock(&self.signal).shutdown {
                    return;
                }
            }
            lock(&self.signal).busy = false;
            self.progress.notify_all();
        }
    }

    /// Runs one flush or compaction; false when there was nothing to do.
    fn one_job(&self) -> Result<bool> {
        let _work = lock(&self.work);
        let (_, imm, version) = self.snapshot();
        if let Some(mem) = imm.first() {
            self.flush_memtable(mem)?;
            return Ok(true);
        }
        let job = compaction::pick(&version, &self.opts, &mut lock(&self.cursors));
        match job {
            Some(job) => {
                self.run_compaction(&job)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Oldest WAL still needed once `flushed` is in a table.
    fn log_number_after(&self, flushed: Option<&Arc<Memtable>>) -> u64 {
        let s = self.read_state();
        s.imm
            .iter()
            .filter(|m| flushed.is_none_or(|f| !Arc::ptr_eq(m, f)))
            .map(|m| m.wal_id)
            .chain(std::iter::once(s.mem.wal_id))
            .min()
            .unwrap_or(s.mem.wal_id)
    }

    fn flush_memtable(&self, mem: &Arc<Memtable>) -> Result<()> {
        let table = if mem.is_empty() {
            None
        } else {
            let id = self.next_file.fetch_add(1, Ordering::SeqCst);
            Some(Arc::new(Db::write_l0(&self.dir, &self.opts, mem, id)?))
        };
        let mut version = (*self.version()).clone();
        if let Some(t) = &table {
            version.levels[0].push(t.clone());
        }
        let log_number = self.log_number_after(Some(mem));
        manifest::write(
            &self.dir,
            &Db::manifest_data(&version, self.next_file.load(Ordering::SeqCst), log_number),
        )?;
        {
            let mut s = self.state.write().unwrap_or_else(|p| p.into_inner());
            s.imm.retain(|m| !Arc::ptr_eq(m, mem));
            s.version = Arc::new(version);
        }
        remove(&wal::wal_path(&self.dir, mem.wal_id));
        add(&self.counters.flushes, 1);
        Ok(())
    }

    /// Runs `job` and installs its output. Called with the work lock held.
    fn run_compaction(&self, job: &Job) -> Result<()> {
        let next_id = || self.next_file.fetch_add(1, Ordering::SeqCst);
        let out = compaction::run(job, &self.dir, &self.opts, &next_id)?;
        let mut version = (*self.version()).clone();
        let gone: std::collections::HashSet<u64> = job.inputs.iter().map(|(_, t)| t.id()).collect();
        for tables in &mut version.levels {
            tables.retain(|t| !gone.contains(&t.id()));
        }
        let level = &mut version.levels[job.output_level];
        level.extend(out.tables.iter().cloned());
        level.sort_by(|a, b| a.min_key().cmp(b.min_key()));
        let log_number = self.log_number_after(None);
        manifest::write(
            &self.dir,
            &Db::manifest_data(&version, self.next_file.load(Ordering::SeqCst), log_number),
        )?;
        self.state
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .version = Arc::new(version);
        for (_, t) in &job.inputs {
            remove(t.path()); // open handles keep serving readers that still hold the table
        }
        add(&self.counters.compactions, 1);
        add(&self.counters.compaction_bytes_read, out.bytes_read);
        add(&self.counters.compaction_bytes_written, out.bytes_written);
        Ok(())
    }
}

/// Iterator returned by `Db::scan`: `(key, value)` in key order, tombstones hidden.
pub struct DbIter {
    merge: MergeIter,
    end: Bound<Vec<u8>>,
    done: bool,
}

impl Iterator for DbIter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let e = match self.merge.next()? {
                Ok(e) => e,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            let past_end = match &self.end {
                Bound::Included(k) => e.key > *k,
                Bound::Excluded(k) => e.key >= *k,
                Bound::Unbounded => false,
            };
            if past_end {
                self.done = true;
                return None;
            }
            if let Some(v) = e.value {
                return Some(Ok((e.key, v)));
            }
        }
        None
    }
}
