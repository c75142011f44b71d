//! Leveled compaction. Level 0 holds flushed tables whose key ranges overlap; levels 1 and up
//! each hold tables with disjoint ranges, sorted by key, and level n may hold
//! `level1_max_bytes * size_ratio^(n-1)` bytes.
//!
//! `picker::pick` chooses the most urgent job that may run beside the running ones (`running.rs`):
//! all of L0 (plus the overlapping L1 tables) once L0 has `l0_compaction_trigger` tables,
//! otherwise one table of the fullest over-size level (round robin by key, skipping tables
//! other jobs hold) plus the tables it overlaps one level down. A store idle for
//! `Options::idle_compaction_after` gets the L0 job whatever its count (`level0`). `run`
//! merges the inputs (newest version of each key wins) into new tables of about `target_file_size`, each with a
//! freshly built filter for the output level. That rebuild is how deleted keys leave filters:
//! a key's bit pattern stays in a table's filter until the table is rewritten, and a tombstone
//! is dropped only when nothing older can reappear: no deeper level holds data, or no table
//! below may hold its key (its range and filter say so: `Version::may_hold_below`).
//!
//! A full output table is finished (its filter built, the rest written, the file synced) on a
//! second thread while the merge fills the next, one at a time. Measured at the defaults
//! (`db_bench --defaults --hold absent --hold-secs 0`, 2×10^6 keys, `perf record -s`): the
//! finishing threads took 8.6% of the load's samples off the compaction thread; load rate
//! 269–302 k → 294–305 k puts/s against the commit before (3 interleaved runs, within this
//! machine's noise), 270–273 k before the Ribbon build change too.

use std::path::Path;
use std::sync::Arc;

use super::cover::Cover;
use super::files::table_path;
use super::filters::TableFilters;
use super::merge::Merge;
use super::options::Options;
use super::running::Running;
use super::version::{Version, MAX_LEVELS};
use crate::error::{Error, Result};
use crate::expiry::{Now, NEVER};
use crate::table::{
    Direction, KeyRange, RangeSet, Table, TableBuilder, TableBuilderOptions, TableCursor,
};

/// A compaction to run: inputs (level, table) and where the output goes.
pub(crate) struct Job {
    /// The keyspace whose tables these are (the picker's caller sets it; 0 until then).
    pub(crate) keyspace: u32,
    pub(crate) inputs: Vec<(usize, Arc<Table>)>,
    pub(crate) output_level: usize,
    pub(crate) drop_tombstones: bool,
    /// When tombstones are kept (`drop_tombstones` false): the published table set the job
    /// was picked from, whose levels below the output say which keys an older version may
    /// still lie under (`Version::may_hold_below`). A tombstone for a key none of them may
    /// hold is dropped all the same: it hides nothing. A running job that writes deeper over
    /// these keys takes them from tables this set still holds, so an older version it moves
    /// is seen here too.
    pub(crate) below: Option<Arc<Version>>,
    /// Every entry of the inputs has expired and they shadow nothing (`expired_table`): the
    /// job drops them unread and writes nothing.
    pub(crate) expired: bool,
}

pub(super) fn overlapping(tables: &[Arc<Table>], min: &[u8], max: &[u8]) -> Vec<Arc<Table>> {
    tables
        .iter()
        .filter(|t| t.max_key() >= min && t.min_key() <= max)
        .cloned()
        .collect()
}

fn key_range(tables: &[Arc<Table>]) -> Option<(Vec<u8>, Vec<u8>)> {
    let min = tables.iter().map(|t| t.min_key()).min()?.to_vec();
    let max = tables.iter().map(|t| t.max_key()).max()?.to_vec();
    Some((min, max))
}

/// The job of `inputs` into `output_level`, if it may run beside the `running` ones. It drops
/// tombstones when no deeper level holds data and no running job writes deeper over its keys.
pub(super) fn finish_job(
    v: &Version,
    keyspace: u32,
    inputs: Vec<(usize, Arc<Table>)>,
    output_level: usize,
    running: &Running,
) -> Option<Job> {
    if running.conflicts(keyspace, &inputs, output_level) {
        return None;
    }
    let drop_tombstones = v.levels()[output_level + 1..].iter().all(Vec::is_empty)
        && !running.keeps_tombstones(keyspace, &inputs, output_level);
    Some(Job {
        keyspace,
        inputs,
        output_level,
        drop_tombstones,
        // Set when the job starts (`Inner::one_compaction`, worker.rs).
        below: None,
        expired: false,
    })
}

/// Each level's urgency: level 0 its table count over `l0_compaction_trigger`, deeper levels
/// their bytes over their limit; tables `busy` says are being compacted do not count.
pub(super) fn scores(v: &Version, opts: &Options, busy: &dyn Fn(u64) -> bool) -> Vec<(usize, f64)> {
    let l0 = v.levels()[0].iter().filter(|t| !busy(t.id())).count();
    let mut scored = vec![(0, l0 as f64 / opts.l0_compaction_trigger as f64)];
    scored.extend((1..MAX_LEVELS - 1).map(|l| {
        let bytes: u64 = v.levels()[l]
            .iter()
            .filter(|t| !busy(t.id()))
            .map(|t| t.file_size())
            .sum();
        (l, bytes as f64 / opts.level_max_bytes(l))
    }));
    scored
}

/// True when some level is over its limit (whether or not a job could start now).
pub(crate) fn needed(v: &Version, opts: &Options) -> bool {
    scores(v, opts, &|_| false).iter().any(|(_, s)| *s >= 1.0)
}

/// Bytes compactions must still write to bring every level under its limit: the store's
/// compaction debt, which `Options::soft_pending_compaction_bytes_limit` and
/// `hard_pending_compaction_bytes_limit` bound (RocksDB's estimate, the same reasoning).
///
/// Level 0 at its trigger owes its bytes plus all of level 1 (the job rewrites both). Then
/// each level, carrying what the level above pushes into it, owes its excess over its limit
/// times the fan-out it will meet one level down: moving `e` bytes into a level `r` times the
/// size of this one rewrites about `e × (r + 1)` bytes. The last level owes nothing (nothing
/// lies under it). An estimate: it assumes keys spread evenly, as they do for hashed or
/// random keys; with keys that arrive in order a compaction overlaps less and pays less.
pub(crate) fn pending_bytes(v: &Version, opts: &Options) -> u64 {
    let size = |l: usize| -> f64 { v.levels()[l].iter().map(|t| t.file_size() as f64).sum() };
    let mut owed = 0.0;
    // What the level above pushes into the current one.
    let mut carried = 0.0;
    if v.levels()[0].len() >= opts.l0_compaction_trigger {
        carried = size(0);
        owed += carried + size(1);
    }
    for l in 1..MAX_LEVELS - 1 {
        let here = size(l) + carried;
        carried = 0.0;
        let excess = here - opts.level_max_bytes(l);
        if excess <= 0.0 {
            continue;
        }
        carried = excess;
        let below = size(l + 1);
        if below > 0.0 {
            owed += excess * (below / here + 1.0);
        } else {
            // Into an empty level the excess moves as it is, written once.
            owed += excess;
        }
    }
    owed as u64
}

/// All of level 0 and the level-1 tables it overlaps, into level 1, if level 0 holds any
/// table and the job may run beside the `running` ones.
pub(crate) fn level0(v: &Version, keyspace: u32, running: &Running) -> Option<Job> {
    let l0 = v.levels()[0].clone();
    let (min, max) = key_range(&l0)?;
    let mut inputs: Vec<(usize, Arc<Table>)> = l0.into_iter().map(|t| (0, t)).collect();
    inputs.extend(
        overlapping(&v.levels()[1], &min, &max)
            .into_iter()
            .map(|t| (1, t)),
    );
    finish_job(v, keyspace, inputs, 1, running)
}

/// Every table of keyspace `keyspace` (of table set `v`) into one level (the deepest in use,
/// at least 1), tombstones dropped.
pub(crate) fn full(v: &Version, keyspace: u32) -> Option<Job> {
    let output_level = v.deepest_nonempty()?.max(1);
    let inputs: Vec<(usize, Arc<Table>)> = v
        .levels()
        .iter()
        .enumerate()
        .flat_map(|(l, ts)| ts.iter().map(move |t| (l, t.clone())))
        .collect();
    Some(Job {
        keyspace,
        inputs,
        output_level,
        drop_tombstones: true,
        below: None,
        expired: false,
    })
}

/// What `run` produced.
pub(crate) struct Output {
    pub(crate) tables: Vec<Arc<Table>>,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
    /// Expired puts dropped or rewritten as deletions.
    pub(crate) expired: u64,
}

/// Merges the job's inputs into new tables; `next_id` hands out (reserved) file numbers. On
/// error, outputs already written are left for the next open to remove as obsolete.
pub(crate) fn run(
    job: &Job,
    dir: &Path,
    opts: &Options,
    filters: TableFilters,
    next_id: &mut dyn FnMut() -> Result<u64>,
) -> Result<Output> {
    if job.expired {
        // Nothing to read or write: the inputs only go, with every put they hold.
        return Ok(Output {
            tables: Vec::new(),
            bytes_read: 0,
            bytes_written: 0,
            expired: job
                .inputs
                .iter()
                .map(|(_, t)| t.properties().expiring)
                .sum(),
        });
    }
    // Newest first: L0 newest to oldest, then each deeper level (disjoint within a level).
    let mut ordered: Vec<&(usize, Arc<Table>)> = job.inputs.iter().collect();
    ordered.sort_by_key(|(l, t)| (*l, if *l == 0 { u64::MAX - t.id() } else { 0 }));
    // Deleted ranges (`range_deletes.rs`): an input's hide the entries of the inputs after
    // it, which go; an input one range of a newer input holds whole is not even read. All
    // the ranges go on into the outputs, which may lie above older data, unless nothing lies
    // below.
    let read: Vec<&(usize, Arc<Table>)> = ordered
        .iter()
        .enumerate()
        .filter(|(i, (_, t))| {
            let held =
                |n: &&(usize, Arc<Table>)| n.1.range_deletes().holds(t.min_key(), t.max_key());
            !ordered[..*i].iter().any(held)
        })
        .map(|(_, input)| *input)
        .collect();
    let bytes_read = read.iter().map(|(_, t)| t.file_size()).sum();
    // Whole tables, read around the block cache (a compaction's blocks are read once).
    let all = Arc::new(KeyRange::all());
    let sources = read
        .iter()
        .map(|(_, t)| TableCursor::new(Arc::clone(t), None, Arc::clone(&all), Direction::Forward))
        .collect::<Result<Vec<_>>>()?;
    let mut cover = Cover::default();
    for (i, (_, t)) in read.iter().enumerate() {
        cover.add_tables(i, [t]);
    }
    let mut ranges = if job.drop_tombstones {
        RangeSet::default()
    } else {
        RangeSet::union(
            ordered
                .iter()
                .flat_map(|(_, t)| t.range_deletes().ranges().iter().cloned())
                .collect(),
        )
    };
    let mut merged = Merge::new(sources, Direction::Forward).with_cover(Arc::new(cover));
    let mut builder_opts = opts.table_options(job.output_level as u32, filters);
    if !ranges.is_empty() {
        // Only format 6 holds them (as `flush::write_l0`).
        builder_opts.format_version = builder_opts.format_version.max(6);
    }
    let mut out = Output {
        tables: Vec::new(),
        bytes_read,
        bytes_written: 0,
        expired: 0,
    };
    // A full output table is finished (filter built; filter, index and footer written; file
    // synced; reopened) on a second thread while the merge fills the next one: at most one
    // table finishing at a time, and outputs collected in key order.
    std::thread::scope(|scope| -> Result<Output> {
        let mut finishing: Option<std::thread::ScopedJoinHandle<'_, Result<Option<Table>>>> = None;
        let mut current: Option<(u64, TableBuilder)> = None;
        // One reading of the clock for the whole job, taken at the first expiring entry.
        let now = Now::of(&*opts.clock);
        while let Some(key) = merged.key() {
            if merged.covered() {
                // Past the whole range, over the blocks it covers (`Merge::pass`).
                merged.pass()?;
                continue;
            }
            let expiry = merged.expiry();
            // A put expired at `now` is a tombstone from here on (it hides the key's older
            // versions, and its value is never read again): its value goes, and at the
            // bottom the whole entry goes, as a tombstone's does. Snapshots taken before it
            // expired hold the input tables, not these.
            let (value, expiry) = match merged.value() {
                Some(_) if now.expired(expiry) => {
                    out.expired += 1;
                    (None, NEVER)
                }
                value => (value, expiry),
            };
            let hides_nothing = || match &job.below {
                Some(below) => !below.may_hold_below(job.output_level, key),
                None => job.drop_tombstones,
            };
            if value.is_none() && hides_nothing() {
                merged.step()?;
                continue;
            }
            let b = open_output(&mut current, next_id, dir, opts, &builder_opts)?;
            b.add_with_expiry(key, value, (expiry != NEVER).then_some(expiry))?;
            merged.step()?;
            if b.estimated_size() >= opts.target_file_size {
                // The full table takes the ranges through its last key; the rest go on.
                if let Some(last) = b.last_key() {
                    let rest = ranges.split_after(last);
                    b.set_range_deletes(std::mem::replace(&mut ranges, rest))?;
                }
                collect(finishing.take(), &mut out)?;
                let full = current.take();
                let finisher = std::thread::Builder::new().name("lsm-bloom-finish".into());
                finishing = Some(
                    finisher
                        .spawn_scoped(scope, || finish_table(dir, opts, job.output_level, full))
                        .map_err(|e| Error::io("starting a table-finishing thread", e))?,
                );
            }
        }
        collect(finishing.take(), &mut out)?;
        if !ranges.is_empty() {
            // The last table takes the ranges left: one of ranges alone if none is open.
            let b = open_output(&mut current, next_id, dir, opts, &builder_opts)?;
            b.set_range_deletes(std::mem::take(&mut ranges))?;
        }
        if let Some(t) = finish_table(dir, opts, job.output_level, current.take())? {
            out.push(t);
        }
        Ok(out)
    })
}

/// The output table being filled (`current`), created first if none is: the next file number
/// from `next_id`, written with `builder_opts`.
fn open_output<'c>(
    current: &'c mut Option<(u64, TableBuilder)>,
    next_id: &mut dyn FnMut() -> Result<u64>,
    dir: &Path,
    opts: &Options,
    builder_opts: &TableBuilderOptions,
) -> Result<&'c mut TableBuilder> {
    if current.is_none() {
        let id = next_id()?;
        let b = TableBuilder::create_in(&*opts.fs, &table_path(dir, id), builder_opts.clone())?;
        *current = Some((id, b));
    }
    #[expect(clippy::unwrap_used, reason = "set just above when it was not")]
    Ok(&mut current.as_mut().unwrap().1)
}

/// Finishes `table` (id and builder) and opens it as a table of `level`; `None` for none or
/// an empty one.
fn finish_table(
    dir: &Path,
    opts: &Options,
    level: usize,
    table: Option<(u64, TableBuilder)>,
) -> Result<Option<Table>> {
    let Some((id, b)) = table else {
        return Ok(None);
    };
    if b.entries() == 0 && b.range_deletes() == 0 {
        return Ok(None);
    }
    b.finish()?;
    Table::open_in(&*opts.fs, &table_path(dir, id), id, opts.table_open(level)).map(Some)
}

/// Waits for the table being finished, if any, and adds it to `out`. A panic there (a file
/// system that panics) continues here, on the job's thread, where the worker catches it.
fn collect(
    finishing: Option<std::thread::ScopedJoinHandle<'_, Result<Option<Table>>>>,
    out: &mut Output,
) -> Result<()> {
    let Some(h) = finishing else {
        return Ok(());
    };
    match h.join() {
        Ok(t) => {
            if let Some(t) = t? {
                out.push(t);
            }
            Ok(())
        }
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

impl Output {
    fn push(&mut self, t: Table) {
        self.bytes_written += t.file_size();
        self.tables.push(Arc::new(t));
    }
}

#[cfg(test)]
#[path = "compaction_tests.rs"]
mod tests;
