//! The background threads: one flushes immutable memtables to level-0 tables, oldest first;
//! `Options::background_threads` run compactions, several at once where their tables and key
//! spans allow (`running.rs`). A flush never waits for a compaction: the two meet only on the
//! `work` lock, held to number a table and to install a result, never while a table is
//! written. Every change to the table set is committed the same way: new table files synced,
//! their directory entries synced, then, under the `work` lock, the change applied to the
//! current version, the manifest rewritten (`manifest.rs`) and the new version published to
//! readers; only then are files the new manifest no longer names removed.
//!
//! A job that fails, or panics, puts the store in the read-only error state (`inner.rs`): the
//! worker then runs no more jobs, and writers and `flush` waiting on it see the error instead
//! of waiting forever. Table numbers come from `new_table_id`, which first extends the
//! manifest's reservation (`next_file`) when needed, so a crash never leaves a table file the
//! next open cannot classify.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::budget::{self, Change};
use super::budget_parts::Part;
use super::compaction::{self, Job};
use super::counters::add;
use super::filters::TableFilters;
use super::inner::{lock, Inner, Work};
use super::manifest::{self, KeyspaceMeta, ManifestData, TableMeta};
use super::memtable::Memtable;
use super::options::Options;
use super::picker;
use super::registry::Registry;
use super::state::Published;
use super::version::{Version, MAX_LEVELS};
use crate::error::{Error, Result};

/// File numbers reserved by one manifest write (a reservation costs one manifest write).
pub(super) const ID_RESERVATION: u64 = 64;

/// `filters`, the budget's plan for a new table of `level`, logged (DEBUG).
pub(super) fn planned(level: usize, filters: TableFilters) -> TableFilters {
    tracing::debug!(
        level,
        key = ?filters.key,
        prefix = ?filters.prefix,
        range = ?filters.range,
        "filter budget planned a new table's filters"
    );
    filters
}

/// The filters for tables `job` writes: the options' policy for its output level, or what the
/// keyspace's filter budget `part` (`budget_parts.rs`) allocates to that level once the job
/// is done.
pub(super) fn compaction_filter(
    opts: &Options,
    version: &Version,
    part: Option<&Part>,
    job: &Job,
) -> TableFilters {
    let Some(part) = part else {
        return opts.filters_for_level(job.output_level);
    };
    let change = Change::Compaction {
        inputs: &job.inputs,
        output_level: job.output_level,
        target_file_size: opts.target_file_size,
    };
    let salt = job.inputs.first().map_or(0, |(_, t)| t.id());
    planned(
        job.output_level,
        budget::plan(&part.budget, version, change, part.outlook(opts)).new_table_filters(salt),
    )
}

/// The manifest describing the default keyspace and those `registry` lists, each with its
/// version from `versions` (none: no tables); a version of a keyspace the registry no longer
/// lists (one being dropped) is left out.
pub(super) fn manifest_data<'v>(
    registry: &Registry,
    versions: impl Iterator<Item = (u32, &'v Version)>,
    next_file: u64,
    log_number: u64,
) -> ManifestData {
    let metas = |v: &Version| -> Vec<Vec<TableMeta>> {
        v.levels()
            .iter()
            .map(|ts| {
                ts.iter()
                    .map(|t| TableMeta {
                        id: t.id(),
                        size: t.file_size(),
                    })
                    .collect()
            })
            .collect()
    };
    let versions: Vec<(u32, &Version)> = versions.collect();
    let levels_of = |id: u32| {
        versions
            .iter()
            .find(|(k, _)| *k == id)
            .map_or_else(Vec::new, |(_, v)| metas(v))
    };
    ManifestData {
        next_file,
        log_number,
        levels: levels_of(0),
        // A keyspace being created is listed before it is published: no tables yet.
        keyspaces: registry
            .all()
            .map(|(id, name)| KeyspaceMeta {
                id,
                name: name.to_string(),
                levels: levels_of(id),
            })
            .collect(),
        next_keyspace: registry.next_id(),
        expiring: registry.expiring,
        range_deletes: registry.range_deletes,
    }
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// What one pass of a background thread looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// Writes immutable memtables to level 0, oldest first (one thread).
    Flush,
    /// Runs compactions (`Options::background_threads` of them).
    Compact,
}

impl Inner {
    /// A background thread: runs jobs of its `role` until none is left, then waits for a
    /// wake-up (`Inner::wake`). Any wake-up since it last looked makes it look again, so
    /// none is lost between finding nothing and waiting.
    pub(super) fn background_loop(&self, role: Role) {
        let mut seen = None;
        loop {
            {
                let mut sig = lock(&self.signal);
                // Compaction threads also look by themselves now and then, to notice that
                // writes stopped (`Options::idle_compaction_after`).
                let every = match role {
                    Role::Compact => self.opts.idle_compaction_after,
                    Role::Flush => None,
                };
                while seen == Some(sig.generation) && !sig.shutdown {
                    let Some(every) = every else {
                        sig = self
                            .wake_worker
                            .wait(sig)
                            .unwrap_or_else(|p| p.into_inner());
                        continue;
                    };
                    let (s, waited) = self
                        .wake_worker
                        .wait_timeout(sig, every)
                        .unwrap_or_else(|p| p.into_inner());
                    sig = s;
                    if waited.timed_out() {
                        break;
                    }
                }
                if sig.shutdown {
                    return;
                }
                seen = Some(sig.generation);
            }
            // Drops replaced tables no reader holds, on a compaction thread: closing one
            // may wait for the device (`graveyard.rs`), which the flush thread must not.
            if role == Role::Compact {
                self.graveyard.sweep();
            }
            while !self.errors.is_set() {
                let job = || match role {
                    Role::Flush => self.one_flush(),
                    Role::Compact => self.one_compaction(),
                };
                match catch_unwind(AssertUnwindSafe(job)) {
                    // A job done may give the other threads work (a flush fills level 0, a
                    // compaction frees tables another job waited for).
                    Ok(Ok(true)) => {
                        if role == Role::Compact {
                            self.graveyard.sweep();
                        }
                        self.wake();
                    }
                    Ok(Ok(false)) => break,
                    Ok(Err(e)) => {
                        tracing::error!(job = ?role, error = %e, "background job failed: the store is read-only");
                        self.errors.set(e);
                    }
                    Err(p) => {
                        let message = panic_message(p.as_ref());
                        tracing::error!(job = ?role, %message, "background job panicked: the store is read-only");
                        self.errors.set(Error::Panicked { message });
                    }
                }
                if lock(&self.signal).shutdown {
                    return;
                }
            }
            self.progress.notify_all();
        }
    }

    /// Picks and runs one compaction that may run beside the others; false when there is
    /// none (nothing over its limit, everything over it already being compacted, or a manual
    /// compaction waiting to start).
    fn one_compaction(&self) -> Result<bool> {
        self.errors.check()?;
        let (job, ticket) = {
            let mut work = self.lock_checked(&self.work);
            if work.manual > 0 {
                return Ok(false);
            }
            let published = self.read_state();
            let Work {
                cursors,
                running,
                next_pick,
                ..
            } = &mut *work;
            // The background's look at the clock is the store's too: gets skip a table expired
            // whole by this time (`ReadPath::seen`), so a store read only by absent gets,
            // which read no clock, skips one from the next wake-up on.
            if self.expiring.load(Ordering::Relaxed) {
                let now = self.opts.clock.now_millis();
                self.seen_now.fetch_max(now, Ordering::Relaxed);
            }
            // Keyspaces in turn, from the one after the last picked, so that a busy keyspace
            // does not starve the others.
            let spaces: Vec<(u32, &Arc<Version>)> =
                published.all().map(|(id, s)| (id, &s.version)).collect();
            let from = spaces
                .iter()
                .position(|(id, _)| *id >= *next_pick)
                .unwrap_or(0);
            let turn = || spaces[from..].iter().chain(&spaces[..from]);
            let mut picked = turn().find_map(|&(id, v)| {
                let cursors = cursors
                    .entry(id)
                    .or_insert_with(|| vec![Vec::new(); MAX_LEVELS]);
                picker::pick(v, id, &self.opts, cursors, running).map(|job| (id, job))
            });
            // Idle (or asked to settle): level 0 away once nothing else is left to do.
            let idle = running.len() == 0 && published.default.imm.is_empty();
            if picked.is_none() && idle && self.idle() {
                picked = turn()
                    .find_map(|&(id, v)| compaction::level0(v, id, running).map(|job| (id, job)));
            }
            let Some((id, mut job)) = picked else {
                return Ok(false);
            };
            if !job.drop_tombstones {
                // What lies below the output, as the job was picked (`Job::below`).
                job.below = spaces
                    .iter()
                    .find(|(space, _)| *space == id)
                    .map(|(_, v)| Arc::clone(v));
            }
            *next_pick = id + 1;
            let ticket = running.register(id, &job.inputs, job.output_level);
            self.counters
                .most_compactions_running
                .fetch_max(running.len() as u64, Ordering::Relaxed);
            (job, ticket)
        };
        let done = self.run_compaction(&job);
        self.lock_checked(&self.work).running.release(ticket);
        done.map(|()| true)
    }

    /// Compactions running now.
    pub(super) fn compactions_running(&self) -> u64 {
        self.lock_checked(&self.work).running.len() as u64
    }

    /// True when nothing is left to do: no immutable memtable, no compaction running, no
    /// level over its limit, no expired data due to leave the disk
    /// (`picker::expiry_work_due`), and (with `Options::idle_compaction_after`) level 0 empty
    /// (`Db::wait_for_compactions`).
    pub(super) fn settled(&self) -> bool {
        let work = self.lock_checked(&self.work);
        let published = self.read_state();
        published.default.imm.is_empty()
            && work.running.len() == 0
            && published.all().all(|(_, s)| {
                !compaction::needed(&s.version, &self.opts)
                    && !picker::expiry_work_due(&s.version, &self.opts)
                    && (self.opts.idle_compaction_after.is_none()
                        || s.version.levels()[0].is_empty())
            })
    }

    /// A file number for a new table, below the manifest's `next_file` (extended first if
    /// needed).
    pub(super) fn new_table_id(&self) -> Result<u64> {
        let id = self.next_file.fetch_add(1, Ordering::SeqCst);
        let mut work = self.lock_checked(&self.work);
        if id >= work.reserved {
            work.reserved = id + 1 + ID_RESERVATION;
            self.write_manifest(&mut work, &[], self.log_number_after(None))?;
        }
        Ok(id)
    }

    /// Writes the manifest for the published versions with `edited` ones in their place (by
    /// keyspace id) and the keyspaces `work.keyspaces` lists. Called with the work lock held.
    pub(super) fn write_manifest(
        &self,
        work: &mut Work,
        edited: &[(u32, Version)],
        log_number: u64,
    ) -> Result<()> {
        work.reserved = work.reserved.max(self.next_file.load(Ordering::SeqCst));
        let published = self.read_state();
        let versions = published.all().map(|(id, s)| {
            let edit = edited.iter().find(|(k, _)| *k == id);
            (id, edit.map_or(&*s.version, |(_, v)| v))
        });
        let data = manifest_data(&work.keyspaces, versions, work.reserved, log_number);
        manifest::write(&*self.opts.fs, &self.dir, &data)
    }

    /// Makes `edited` (new versions of keyspaces, built from their current ones under the
    /// work lock) durable and visible: manifest written, then published (with `also`, applied
    /// under the same state lock). The new tables' directory entries must be synced already.
    /// Called with the work lock held, which every change to a table set takes: the versions
    /// edited are the latest, whatever other jobs installed while this one ran.
    pub(super) fn commit(
        &self,
        work: &mut Work,
        edited: Vec<(u32, Version)>,
        log_number: u64,
        also: impl FnOnce(&mut Published),
    ) -> Result<()> {
        self.write_manifest(work, &edited, log_number)?;
        self.update_state(|p| {
            also(p);
            for (id, v) in edited {
                if let Some(s) = p.get_mut(id) {
                    s.version = Arc::new(v);
                }
            }
        });
        self.note_table_sets();
        Ok(())
    }

    /// Sets `pending_compaction_bytes` (every keyspace's debt) and `level0_tables` from the
    /// published versions.
    pub(super) fn note_table_sets(&self) {
        let published = self.read_state();
        let (mut pending, mut level0) = (0, 0);
        for (_, s) in published.all() {
            pending += compaction::pending_bytes(&s.version, &self.opts);
            level0 = level0.max(s.version.levels()[0].len());
        }
        self.pending_compaction_bytes
            .store(pending, Ordering::Relaxed);
        self.level0_tables.store(level0, Ordering::Relaxed);
    }

    /// Oldest WAL still needed once the generation of `flushed` (the default keyspace's
    /// memtable of it) is in tables.
    pub(super) fn log_number_after(&self, flushed: Option<&Arc<Memtable>>) -> u64 {
        let s = &self.read_state().default;
        s.imm
            .iter()
            .filter(|m| flushed.is_none_or(|f| !Arc::ptr_eq(m, f)))
            .map(|m| m.wal_id)
            .chain(std::iter::once(s.mem.wal_id))
            .min()
            .unwrap_or(s.mem.wal_id)
    }

    /// Runs `job` and installs its output. The caller has registered it as running
    /// (`running.rs`), so no other job touches its tables meanwhile; the work lock is taken
    /// only to number new tables and to install the result.
    pub(super) fn run_compaction(&self, job: &Job) -> Result<()> {
        let began = std::time::Instant::now();
        let published = self.read_state();
        let Some(state) = published.get(job.keyspace) else {
            return Ok(()); // dropped: its tables are gone with it
        };
        let (version, opts) = (state.version.clone(), state.opts.clone());
        let parts = self.budget_parts(&published, &[]);
        drop(published);
        let part = parts.iter().find(|p| p.0 == job.keyspace).and_then(|p| p.1);
        let filters = compaction_filter(&opts, &version, part.as_ref(), job);
        let out = compaction::run(job, &self.dir, &opts, filters, &mut || self.new_table_id())?;
        for t in &out.tables {
            add(
                &self.counters.filter_validation_failures,
                t.rejected_filters(),
            );
        }
        crate::fs::sync_dir(&*self.opts.fs, &self.dir)?;
        let gone: std::collections::HashSet<u64> = job.inputs.iter().map(|(_, t)| t.id()).collect();
        let mut work = self.lock_checked(&self.work);
        self.errors.check()?;
        let log_number = self.log_number_after(None);
        let Some(version) = self.version_of(job.keyspace) else {
            // Dropped while this ran (drops hold the work lock): the output is no one's.
            for t in &out.tables {
                self.remove_obsolete(t.path());
            }
            return Ok(());
        };
        let mut version = (*version).clone();
        version.edit(|levels| {
            for tables in levels.iter_mut() {
                tables.retain(|t| !gone.contains(&t.id()));
            }
            let level = &mut levels[job.output_level];
            level.extend(out.tables.iter().cloned());
            level.sort_by(|a, b| a.min_key().cmp(b.min_key()));
        });
        self.commit(&mut work, vec![(job.keyspace, version)], log_number, |_| {})?;
        drop(work);
        for (_, t) in &job.inputs {
            self.remove_obsolete(t.path()); // open handles keep serving readers that hold it
        }
        self.graveyard
            .bury_tables(job.inputs.iter().map(|(_, t)| Arc::clone(t)));
        add(&self.counters.compaction_bytes_read, out.bytes_read);
        add(&self.counters.compaction_bytes_written, out.bytes_written);
        add(&self.counters.expired_entries_dropped, out.expired);
        if job.expired {
            let dropped = job.inputs.len() as u64;
            add(&self.counters.expired_tables_dropped, dropped);
            tracing::debug!(
                tables = ?job.inputs.iter().map(|(l, t)| (*l, t.id())).collect::<Vec<_>>(),
                "expired tables dropped"
            );
            return Ok(());
        }
        add(&self.counters.compactions, 1);
        tracing::debug!(
            inputs = ?job.inputs.iter().map(|(l, t)| (*l, t.id())).collect::<Vec<_>>(),
            output_level = job.output_level,
            outputs = ?out.tables.iter().map(|t| t.id()).collect::<Vec<_>>(),
            bytes_read = out.bytes_read,
            bytes_written = out.bytes_written,
            millis = began.elapsed().as_millis() as u64,
            "compaction"
        );
        Ok(())
    }
}

/// Manual compactions (`Db::compact`): they wait for the running jobs, holding new ones off,
/// then compact every table at once.
impl Inner {
    /// Registers a compaction of every table of keyspace `id` once no other compaction runs;
    /// `None` when it holds no table (or was dropped). Pair with `end_manual_compaction`.
    pub(super) fn start_manual_compaction(&self, id: u32) -> Result<Option<(Job, u64)>> {
        self.lock_checked(&self.work).manual += 1;
        loop {
            let mut work = self.lock_checked(&self.work);
            let ready = self.errors.check().map(|()| work.running.len() == 0);
            match ready {
                Ok(true) => {
                    let full = self.version_of(id).and_then(|v| compaction::full(&v, id));
                    let Some(job) = full else {
                        work.manual -= 1;
                        return Ok(None);
                    };
                    let ticket = work.running.register(id, &job.inputs, job.output_level);
                    return Ok(Some((job, ticket)));
                }
                Ok(false) => {}
                Err(e) => {
                    work.manual -= 1;
                    return Err(e);
                }
            }
            drop(work);
            drop(self.wait_progress(lock(&self.signal), Duration::from_millis(10)));
        }
    }

    /// Releases the manual compaction of `ticket` and lets background compactions start again.
    pub(super) fn end_manual_compaction(&self, ticket: u64) {
        let mut work = self.lock_checked(&self.work);
        work.running.release(ticket);
        work.manual -= 1;
        drop(work);
        self.wake();
    }
}
