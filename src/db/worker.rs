//! The background thread: flushes immutable memtables to level-0 tables and runs compactions,
//! one job at a time under the `work` lock. Every change to the table set is committed the
//! same way: new table files synced, their directory entries synced, then the manifest
//! rewritten (`manifest.rs`), then the new version published to readers, and only then are
//! files the new manifest no longer names removed.
//!
//! A job that fails, or panics, puts the store in the read-only error state (`inner.rs`): the
//! worker then runs no more jobs, and writers and `flush` waiting on it see the error instead
//! of waiting forever. Table numbers come from `new_table_id`, which first extends the
//! manifest's reservation (`next_file`) when needed, so a crash never leaves a table file the
//! next open cannot classify.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::budget::{self, Change, Outlook};
use super::compaction::{self, Job};
use super::files::table_path;
use super::filters::TableFilters;
use super::inner::{lock, Inner, Work};
use super::manifest::{self, ManifestData, TableMeta};
use super::memtable::Memtable;
use super::options::Options;
use super::stats::add;
use super::version::Version;
use super::wal;
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::table::{Table, TableBuilder};

/// File numbers reserved by one manifest write (a reservation costs one manifest write).
pub(super) const ID_RESERVATION: u64 = 64;

/// The filters a new level-0 table holding `mem` gets when added to `version`: the options'
/// level-0 policy, or what the filter budget allocates to its runs.
pub(super) fn l0_filter(
    opts: &Options,
    version: &Version,
    mem: &Memtable,
    id: u64,
) -> TableFilters {
    let Some(b) = opts.filters().budget() else {
        return opts.filters_for_level(0);
    };
    // Keys, and distinct prefixes (adjacent in key order) under the rule.
    let (mut keys, mut prefixes) = (0u64, 0u64);
    let mut last: Option<Vec<u8>> = None;
    let counted: std::result::Result<(), ()> = mem.for_each_newest(|k, _| {
        keys += 1;
        if let Some(p) = opts.prefix_rule().and_then(|r| r.prefix(k)) {
            if last.as_deref() != Some(p) {
                prefixes += 1;
                last = Some(p.to_vec());
            }
        }
        Ok(())
    });
    debug_assert!(counted.is_ok());
    let change = Change::Flush { keys, prefixes };
    budget::plan(b, version, change, Outlook::of(opts)).new_table_filters(id)
}

/// The filters for tables `job` writes: the options' policy for its output level, or what the
/// filter budget allocates to that level once the job is done.
pub(super) fn compaction_filter(opts: &Options, version: &Version, job: &Job) -> TableFilters {
    let Some(b) = opts.filters().budget() else {
        return opts.filters_for_level(job.output_level);
    };
    let change = Change::Compaction {
        inputs: &job.inputs,
        output_level: job.output_level,
        target_file_size: opts.target_file_size,
    };
    let salt = job.inputs.first().map_or(0, |(_, t)| t.id());
    budget::plan(b, version, change, Outlook::of(opts)).new_table_filters(salt)
}

/// Writes `mem` to a new level-0 table `id` with `filters` and opens it.
pub(super) fn write_l0(
    fs: &dyn FileSystem,
    dir: &Path,
    opts: &Options,
    filters: TableFilters,
    mem: &Memtable,
    id: u64,
) -> Result<Table> {
    let path = table_path(dir, id);
    let mut b = TableBuilder::create_in(fs, &path, opts.table_options(0, filters))?;
    mem.for_each_newest(|k, v| b.add(k, v))?;
    b.finish()?;
    Table::open_in(fs, &path, id, opts.table_open(0))
}

/// The manifest describing `v`.
pub(super) fn manifest_data(v: &Version, next_file: u64, log_number: u64) -> ManifestData {
    ManifestData {
        next_file,
        log_number,
        levels: v
            .levels()
            .iter()
            .map(|ts| {
                ts.iter()
                    .map(|t| TableMeta {
                        id: t.id(),
                        size: t.file_size(),
                    })
                    .collect()
            })
            .collect(),
    }
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

impl Inner {
    pub(super) fn background_loop(&self) {
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
            while !self.errors.is_set() {
                match catch_unwind(AssertUnwindSafe(|| self.one_job())) {
                    Ok(Ok(true)) => self.progress.notify_all(),
                    Ok(Ok(false)) => break,
                    Ok(Err(e)) => {
                        self.errors.set(e);
                    }
                    Err(p) => {
                        self.errors.set(Error::Panicked {
                            message: panic_message(p.as_ref()),
                        });
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
        let mut work = self.lock_checked(&self.work);
        self.errors.check()?;
        let state = self.state.load_full();
        if let Some(mem) = state.imm.first() {
            self.flush_memtable(&mut work, mem)?;
            return Ok(true);
        }
        match compaction::pick(&state.version, &self.opts, &mut work.cursors) {
            Some(job) => {
                self.run_compaction(&mut work, &job)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// A file number for a new table, below the manifest's `next_file` (extended first if
    /// needed).
    pub(super) fn new_table_id(&self, work: &mut Work) -> Result<u64> {
        let id = self.next_file.fetch_add(1, Ordering::SeqCst);
        if id >= work.reserved {
            work.reserved = id + 1 + ID_RESERVATION;
            let version = self.version();
            self.write_manifest(work, &version, self.log_number_after(None))?;
        }
        Ok(id)
    }

    /// Writes the manifest for `version`. Called with the work lock held.
    fn write_manifest(&self, work: &mut Work, version: &Version, log_number: u64) -> Result<()> {
        work.reserved = work.reserved.max(self.next_file.load(Ordering::SeqCst));
        let data = manifest_data(version, work.reserved, log_number);
        manifest::write(&*self.opts.fs, &self.dir, &data)
    }

    /// Makes `version` durable and visible: table directory entries synced, manifest written,
    /// then published (with `also`, applied under the same state lock).
    fn commit(
        &self,
        work: &mut Work,
        version: Version,
        log_number: u64,
        also: impl FnOnce(&mut super::version::State),
    ) -> Result<()> {
        crate::fs::sync_dir(&*self.opts.fs, &self.dir)?;
        self.write_manifest(work, &version, log_number)?;
        self.update_state(|s| {
            also(s);
            s.version = Arc::new(version);
        });
        Ok(())
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

    fn flush_memtable(&self, work: &mut Work, mem: &Arc<Memtable>) -> Result<()> {
        let mut version = (*self.version()).clone();
        if !mem.is_empty() {
            let id = self.new_table_id(work)?;
            let filters = l0_filter(&self.opts, &version, mem, id);
            let t = write_l0(&*self.opts.fs, &self.dir, &self.opts, filters, mem, id)?;
            // Read back through the file system: a filter that fails its check then is
            // counted like one found damaged at open.
            add(
                &self.counters.filter_validation_failures,
                t.rejected_filters(),
            );
            version.edit(|levels| levels[0].push(Arc::new(t)));
        }
        let log_number = self.log_number_after(Some(mem));
        self.commit(work, version, log_number, |s| {
            s.imm.retain(|m| !Arc::ptr_eq(m, mem));
        })?;
        self.remove_obsolete(&wal::wal_path(&self.dir, mem.wal_id));
        add(&self.counters.flushes, 1);
        Ok(())
    }

    /// Runs `job` and installs its output. Called with the work lock held.
    pub(super) fn run_compaction(&self, work: &mut Work, job: &Job) -> Result<()> {
        let filters = compaction_filter(&self.opts, &self.version(), job);
        let out = compaction::run(job, &self.dir, &self.opts, filters, &mut || {
            self.new_table_id(work)
        })?;
        let mut version = (*self.version()).clone();
        let gone: std::collections::HashSet<u64> = job.inputs.iter().map(|(_, t)| t.id()).collect();
        for t in &out.tables {
            add(
                &self.counters.filter_validation_failures,
                t.rejected_filters(),
            );
        }
        version.edit(|levels| {
            for tables in levels.iter_mut() {
                tables.retain(|t| !gone.contains(&t.id()));
            }
            let level = &mut levels[job.output_level];
            level.extend(out.tables.iter().cloned());
            level.sort_by(|a, b| a.min_key().cmp(b.min_key()));
        });
        let log_number = self.log_number_after(None);
        self.commit(work, version, log_number, |_| {})?;
        for (_, t) in &job.inputs {
            self.remove_obsolete(t.path()); // open handles keep serving readers that hold it
        }
        add(&self.counters.compactions, 1);
        add(&self.counters.compaction_bytes_read, out.bytes_read);
        add(&self.counters.compaction_bytes_written, out.bytes_written);
        Ok(())
    }
}
