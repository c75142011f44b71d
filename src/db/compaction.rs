//! Leveled compaction. Level 0 holds flushed tables whose key ranges overlap; levels 1 and up
//! each hold tables with disjoint ranges, sorted by key, and level n may hold
//! `level1_max_bytes * size_ratio^(n-1)` bytes.
//!
//! `pick` chooses the most urgent job: all of L0 (plus the overlapping L1 tables) once L0 has
//! `l0_compaction_trigger` tables, otherwise one table of the fullest over-size level (round
//! robin by key) plus the tables it overlaps one level down. `run` merges the inputs
//! (newest version of each key wins) into new tables of about `target_file_size`, each with a
//! freshly built filter for the output level. That rebuild is how deleted keys leave filters:
//! a key's bit pattern stays in a table's filter until the table is rewritten, and a tombstone
//! is dropped only when no deeper level holds data, i.e. nothing older can reappear.

use std::path::Path;
use std::sync::Arc;

use super::merge::{MergeIter, Source};
use super::options::TableFilters;
use super::version::{Version, MAX_LEVELS};
use super::{table_path, Options};
use crate::error::Result;
use crate::table::{Table, TableBuilder};

/// A compaction to run: inputs (level, table) and where the output goes.
pub(crate) struct Job {
    pub(crate) inputs: Vec<(usize, Arc<Table>)>,
    pub(crate) output_level: usize,
    pub(crate) drop_tombstones: bool,
}

fn overlapping(tables: &[Arc<Table>], min: &[u8], max: &[u8]) -> Vec<Arc<Table>> {
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

fn max_bytes(opts: &Options, level: usize) -> f64 {
    opts.level1_max_bytes as f64 * (opts.size_ratio as f64).powi(level as i32 - 1)
}

fn finish_job(v: &Version, inputs: Vec<(usize, Arc<Table>)>, output_level: usize) -> Job {
    let drop_tombstones = v.levels()[output_level + 1..].iter().all(Vec::is_empty);
    Job {
        inputs,
        output_level,
        drop_tombstones,
    }
}

/// The most urgent compaction, if any level is over its limit. `cursors[l]` is the largest key
/// of the last table compacted out of level `l` (round robin).
pub(crate) fn pick(v: &Version, opts: &Options, cursors: &mut [Vec<u8>]) -> Option<Job> {
    let l0_score = v.levels()[0].len() as f64 / opts.l0_compaction_trigger as f64;
    let (level, score) = (1..MAX_LEVELS - 1)
        .map(|l| (l, v.level_bytes(l) as f64 / max_bytes(opts, l)))
        .fold(
            (0, l0_score),
            |best, cur| if cur.1 > best.1 { cur } else { best },
        );
    if score < 1.0 {
        return None;
    }
    if level == 0 {
        let l0 = v.levels()[0].clone();
        let (min, max) = key_range(&l0)?;
        let mut inputs: Vec<(usize, Arc<Table>)> = l0.into_iter().map(|t| (0, t)).collect();
        inputs.extend(
            overlapping(&v.levels()[1], &min, &max)
                .into_iter()
                .map(|t| (1, t)),
        );
        return Some(finish_job(v, inputs, 1));
    }
    let tables = &v.levels()[level];
    let cursor = &cursors[level];
    let t = tables
        .iter()
        .find(|t| t.min_key() > cursor.as_slice())
        .or(tables.first())?
        .clone();
    cursors[level] = t.max_key().to_vec();
    let mut inputs = vec![(level, t.clone())];
    inputs.extend(
        overlapping(&v.levels()[level + 1], t.min_key(), t.max_key())
            .into_iter()
            .map(|x| (level + 1, x)),
    );
    Some(finish_job(v, inputs, level + 1))
}

/// Every table into one level (the deepest in use, at least 1), tombstones dropped.
pub(crate) fn full(v: &Version) -> Option<Job> {
    let output_level = v.deepest_nonempty()?.max(1);
    let inputs: Vec<(usize, Arc<Table>)> = v
        .levels()
        .iter()
        .enumerate()
        .flat_map(|(l, ts)| ts.iter().map(move |t| (l, t.clone())))
        .collect();
    Some(Job {
        inputs,
        output_level,
        drop_tombstones: true,
    })
}

/// What `run` produced.
pub(crate) struct Output {
    pub(crate) tables: Vec<Arc<Table>>,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
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
    // Newest first: L0 newest to oldest, then each deeper level (disjoint within a level).
    let mut ordered: Vec<&(usize, Arc<Table>)> = job.inputs.iter().collect();
    ordered.sort_by_key(|(l, t)| (*l, if *l == 0 { u64::MAX - t.id() } else { 0 }));
    let bytes_read = ordered.iter().map(|(_, t)| t.file_size()).sum();
    let sources: Vec<Source> = ordered
        .iter()
        .map(|(_, t)| Box::new(t.iter(std::ops::Bound::Unbounded)) as Source)
        .collect();
    let merged = MergeIter::new(sources)?;
    let builder_opts = opts.table_options(job.output_level as u32, filters);
    let mut out = Output {
        tables: Vec::new(),
        bytes_read,
        bytes_written: 0,
    };
    let mut current: Option<(u64, TableBuilder)> = None;
    let finish = |cur: Option<(u64, TableBuilder)>, out: &mut Output| -> Result<()> {
        if let Some((id, b)) = cur {
            if b.entries() == 0 {
                return Ok(());
            }
            b.finish()?;
            let t = Table::open_in(&*opts.fs, &table_path(dir, id), id, opts.table_open())?;
            out.bytes_written += t.file_size();
            out.tables.push(Arc::new(t));
        }
        Ok(())
    };
    for entry in merged {
        let e = entry?;
        if e.value.is_none() && job.drop_tombstones {
            continue;
        }
        if current.is_none() {
            let id = next_id()?;
            current = Some((
                id,
                TableBuilder::create_in(&*opts.fs, &table_path(dir, id), builder_opts.clone())?,
            ));
        }
        if let Some((_, b)) = current.as_mut() {
            b.add(&e.key, e.value.as_deref())?;
            if b.estimated_size() >= opts.target_file_size {
                finish(current.take(), &mut out)?;
            }
        }
    }
    finish(current.take(), &mut out)?;
    Ok(out)
}
