//! Flushes: the oldest memtable generation (every keyspace's memtable of one log, retired
//! together, `state::Published`) written to level 0, one table per keyspace that holds
//! anything, installed in one manifest write; then the generation's log is removed. Runs on
//! the flush thread only, so generations reach level 0 in the order they were retired.

use std::path::Path;
use std::sync::Arc;

use super::budget::{self, Change};
use super::budget_parts::Part;
use super::counters::add;
use super::files::table_path;
use super::filters::TableFilters;
use super::inner::Inner;
use super::memtable::Memtable;
use super::options::Options;
use super::range_deletes::cut_to_older;
use super::version::Version;
use super::wal;
use crate::error::Result;
use crate::expiry::NEVER;
use crate::fs::FileSystem;
use crate::table::{RangeSet, Table, TableBuilder};

/// The filters a new level-0 table holding `mem` gets when added to `version`: the options'
/// level-0 policy, or what the keyspace's filter budget `part` (`budget_parts.rs`) allocates
/// to its runs.
pub(super) fn l0_filter(
    opts: &Options,
    version: &Version,
    part: Option<&Part>,
    mem: &Memtable,
    id: u64,
) -> TableFilters {
    let Some(part) = part else {
        return opts.filters_for_level(0);
    };
    // Keys, and distinct prefixes (adjacent in key order) under the rule.
    let (mut keys, mut prefixes) = (0u64, 0u64);
    let mut last: Option<Vec<u8>> = None;
    let counted: std::result::Result<(), ()> = mem.for_each_newest(|k, _, _| {
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
    super::worker::planned(
        0,
        budget::plan(&part.budget, version, change, part.outlook(opts)).new_table_filters(id),
    )
}

/// Writes `mem` to a new level-0 table `id` with `filters` and opens it, on top of `older`
/// (the keyspace's tables: everything older than `mem`), whose keys bound the ranges `mem`
/// deleted (`range_deletes::cut_to_older`). `None` when nothing is left to write: every
/// entry was deleted by a range of `mem`, and its ranges hide nothing older.
pub(super) fn write_l0(
    fs: &dyn FileSystem,
    dir: &Path,
    opts: &Options,
    filters: TableFilters,
    (mem, older): (&Memtable, &Version),
    id: u64,
) -> Result<Option<Table>> {
    let ranges = if mem.has_ranges() {
        cut_to_older(mem.ranges_at(mem.visible()), older)?
    } else {
        RangeSet::default()
    };
    let path = table_path(dir, id);
    let mut table_opts = opts.table_options(0, filters);
    if !ranges.is_empty() {
        // Only format 6 holds them. A store that logged them already needs a build that
        // reads format 6 (its manifest is of version 4), whatever format it was told to write.
        table_opts.format_version = table_opts.format_version.max(6);
    }
    let mut b = TableBuilder::create_in(fs, &path, table_opts)?;
    mem.for_each_newest(|k, v, expiry| {
        b.add_with_expiry(k, v, (expiry != NEVER).then_some(expiry))
    })?;
    if b.entries() == 0 && ranges.is_empty() {
        drop(b);
        fs.remove_file(&path)
            .map_err(|e| crate::error::Error::io(format!("removing {}", path.display()), e))?;
        return Ok(None);
    }
    b.set_range_deletes(ranges)?;
    b.finish()?;
    Table::open_in(fs, &path, id, opts.table_open(0)).map(Some)
}

impl Inner {
    /// Flushes the oldest memtable generation; false when there is none.
    pub(super) fn one_flush(&self) -> Result<bool> {
        self.errors.check()?;
        let Some(first) = self.read_state().default.imm.first().cloned() else {
            return Ok(false);
        };
        self.flush_generation(&first)?;
        self.prepare_spare(&first)?;
        Ok(true)
    }

    /// Writes the generation of `first` (the default keyspace's memtable of it) to level 0
    /// and installs it.
    fn flush_generation(&self, first: &Arc<Memtable>) -> Result<()> {
        let began = std::time::Instant::now();
        let of_generation = |m: &Arc<Memtable>| m.same_generation(first);
        // Each keyspace's memtable of the generation and options, and its filter budget
        // (`budget_parts.rs`), all from one state.
        let published = self.read_state();
        let members: Vec<(u32, Arc<Memtable>, Arc<Options>)> = published
            .all()
            .filter_map(|(id, s)| {
                let mem = s.imm.iter().find(|m| of_generation(m))?;
                Some((id, mem.clone(), s.opts.clone()))
            })
            .collect();
        let pending: Vec<(u32, u64)> = members
            .iter()
            .map(|(id, m, _)| (*id, m.key_count() as u64))
            .collect();
        let parts = self.budget_parts(&published, &pending);
        drop(published);
        let mut written = Vec::new();
        for (ks, mem, opts) in members.iter().filter(|(_, m, _)| !m.is_empty()) {
            let Some(version) = self.version_of(*ks) else {
                continue; // dropped meanwhile: nothing of it is kept
            };
            let id = self.new_table_id()?;
            let part = parts.iter().find(|p| p.0 == *ks).and_then(|p| p.1);
            let filters = l0_filter(opts, &version, part.as_ref(), mem, id);
            let fs = &*self.opts.fs;
            let Some(t) = write_l0(fs, &self.dir, opts, filters, (mem, &version), id)? else {
                continue;
            };
            // Read back through the file system: a filter that fails its check then is
            // counted like one found damaged at open.
            add(
                &self.counters.filter_validation_failures,
                t.rejected_filters(),
            );
            written.push((*ks, Arc::new(t)));
        }
        if !written.is_empty() {
            crate::fs::sync_dir(&*self.opts.fs, &self.dir)?;
        }
        let mut work = self.lock_checked(&self.work);
        self.errors.check()?;
        let log_number = self.log_number_after(Some(first));
        let mut edits = Vec::new();
        for (ks, t) in &written {
            match self.version_of(*ks) {
                Some(v) => {
                    let mut v = (*v).clone();
                    v.edit(|levels| levels[0].push(Arc::clone(t)));
                    edits.push((*ks, v));
                }
                // Dropped while its table was written (drops hold the work lock): the
                // table is no keyspace's.
                None => self.remove_obsolete(t.path()),
            }
        }
        self.commit(&mut work, edits, log_number, |p| {
            for (_, s) in p.all_mut() {
                s.imm.retain(|m| !of_generation(m));
            }
        })?;
        drop(work);
        for (_, mem, _) in members {
            self.graveyard.bury_memtable(mem);
        }
        self.remove_obsolete(&wal::wal_path(&self.dir, first.wal_id));
        add(&self.counters.flushes, 1);
        let millis = began.elapsed().as_millis() as u64;
        for (keyspace, t) in &written {
            tracing::debug!(
                wal = first.wal_id,
                keyspace,
                table = t.id(),
                entries = t.properties().entries,
                bytes = t.file_size(),
                millis,
                "flush: memtable written to level 0"
            );
        }
        if written.is_empty() {
            tracing::debug!(wal = first.wal_id, "flush: empty memtable retired");
        }
        Ok(())
    }
}
