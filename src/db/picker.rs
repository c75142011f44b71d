//! The compaction picker: which job runs next (`pick`, called by the compaction threads,
//! `worker.rs`). First a table whose every entry has expired and that shadows nothing, dropped
//! whole, unread (`expired_table`); then the levels over their limits (`compaction.rs` scores
//! them and builds the jobs); then expired data past the store's bounds, rewritten with its
//! expired entries dropped (`reclaim_expired`). docs/expiry.md says what a user sees.

use std::sync::Arc;

use super::compaction::{finish_job, level0, overlapping, scores, Job};
use super::options::Options;
use super::running::Running;
use super::version::Version;
use crate::expiry::Now;
use crate::table::Table;

/// A table of keyspace `keyspace` (of table set `v`) to drop whole, unread, if there is one
/// that may go beside the `running` jobs: every entry of it is a put expired at `now`
/// (`Properties::expire_whole_by`), and no older table holds any of its keys (none of a deeper
/// level overlaps its key range, nor an older one of level 0, nor a running job's output
/// deeper down). Such a table answers "absent" for each of its keys, and so would the store
/// without it. Snapshots hold the table sets they read, this table in them.
pub(super) fn expired_table(
    v: &Version,
    keyspace: u32,
    now: &Now,
    running: &Running,
) -> Option<Job> {
    for (level, tables) in v.levels().iter().enumerate() {
        for (i, t) in tables.iter().enumerate() {
            let Some(latest) = t.properties().expire_whole_by() else {
                continue;
            };
            if running.is_busy(t.id()) || !now.expired(latest) {
                continue;
            }
            let inputs = vec![(level, Arc::clone(t))];
            if !v.shadows_nothing(level, i)
                || running.conflicts(keyspace, &inputs, level)
                || running.keeps_tombstones(keyspace, &inputs, level)
            {
                continue;
            }
            return Some(Job {
                keyspace,
                inputs,
                output_level: level,
                drop_tombstones: true,
                below: None,
                expired: true,
            });
        }
    }
    None
}

/// Whether expired data is due to leave the disk, with no job running: a table to drop whole
/// (`expired_table`) or to rewrite (`reclaim_expired`). `Db::wait_for_compactions` waits for
/// this work too. Reads the clock only if some table holds expiring puts.
pub(crate) fn expiry_work_due(v: &Version, opts: &Options) -> bool {
    if v.expiring_entries() == 0 {
        return false;
    }
    let (now, idle) = (Now::of(&*opts.clock), Running::default());
    expired_table(v, 0, &now, &idle).is_some() || reclaim_expired(v, 0, opts, &now, &idle).is_some()
}

/// A compaction that takes expired data off the disk (`Options::expired_reclaim_after`,
/// `expired_share_to_reclaim`, `expired_ratio_to_reclaim`), if one may run beside the
/// `running` jobs: a table holding a put that expired longer ago than the bound, or whose
/// estimated expired share reaches the threshold, rewritten (`rewrite`); else, while the
/// store's estimated expired bytes pass their bound, the most expired table (`most_expired`). The rewrite drops what has expired (`run`): the output's earliest expiry
/// lies ahead, so the same table is not picked again before the bound has passed once more.
pub(super) fn reclaim_expired(
    v: &Version,
    keyspace: u32,
    opts: &Options,
    now: &Now,
    running: &Running,
) -> Option<Job> {
    let bound = opts.expired_reclaim_after.map(|d| d.as_millis() as u64);
    let due = |t: &Arc<Table>| {
        let p = t.properties();
        let Some((earliest, _)) = p.expiry_span else {
            return false;
        };
        let old = bound.is_some_and(|b| now.expired(earliest.saturating_add(b)));
        let share = opts
            .expired_share_to_reclaim
            .is_some_and(|s| p.expired_share(now.millis()) >= s);
        old || share
    };
    for (level, tables) in v.levels().iter().enumerate() {
        for t in tables.iter().filter(|t| !running.is_busy(t.id()) && due(t)) {
            if let Some(job) = rewrite(v, keyspace, level, t, running) {
                return Some(job);
            }
        }
    }
    let ratio = opts.expired_ratio_to_reclaim?;
    most_expired(v, keyspace, ratio, now, running)
}

/// The store-wide bound (`Options::expired_ratio_to_reclaim`): once the tables' estimated
/// expired bytes pass `ratio` times their estimated live bytes, the table with the largest
/// estimated expired share is rewritten (greedy: the most taken off the disk per byte
/// rewritten), then the next as the picker is called again, until the estimate is back
/// under the bound. Each table's estimate is its expired share (`Properties::expired_share`)
/// of its file size.
fn most_expired(
    v: &Version,
    keyspace: u32,
    ratio: f64,
    now: &Now,
    running: &Running,
) -> Option<Job> {
    let (mut expired, mut live) = (0.0f64, 0.0f64);
    let mut shares: Vec<(f64, usize, &Arc<Table>)> = Vec::new();
    for (level, tables) in v.levels().iter().enumerate() {
        for t in tables {
            let size = t.file_size() as f64;
            let p = t.properties();
            // The clock is read only for tables with expiring puts.
            let share = match p.expiry_span {
                Some(_) => p.expired_share(now.millis()),
                None => 0.0,
            };
            expired += share * size;
            live += (1.0 - share) * size;
            if share > 0.0 {
                shares.push((share, level, t));
            }
        }
    }
    if expired <= ratio * live {
        return None;
    }
    shares.sort_by(|a, b| b.0.total_cmp(&a.0));
    shares
        .into_iter()
        .filter(|(_, _, t)| !running.is_busy(t.id()))
        .find_map(|(_, level, t)| rewrite(v, keyspace, level, t, running))
}

/// Table `t` of `level` rewritten to drop what has expired: in place on level 1 and deeper; on
/// level 0, with the rest of level 0 into level 1 (`level0`). `None` if it may not run beside
/// the `running` jobs.
fn rewrite(
    v: &Version,
    keyspace: u32,
    level: usize,
    t: &Arc<Table>,
    running: &Running,
) -> Option<Job> {
    match level {
        0 => level0(v, keyspace, running),
        _ => finish_job(v, keyspace, vec![(level, Arc::clone(t))], level, running),
    }
}

/// The most urgent compaction of keyspace `keyspace` (of table set `v`) that may run beside the
/// `running` ones, if any level is over its limit; before that, a table whose entries have all
/// expired (`expired_table`). `cursors[l]` is the largest key of the last table compacted out of level `l`
/// (round robin): a level's tables are tried from there on, skipping those that conflict.
pub(crate) fn pick(
    v: &Version,
    keyspace: u32,
    opts: &Options,
    cursors: &mut [Vec<u8>],
    running: &Running,
) -> Option<Job> {
    // The clock is read only when some table holds expiring puts.
    let now = Now::of(&*opts.clock);
    if let Some(job) = expired_table(v, keyspace, &now, running) {
        return Some(job);
    }
    let mut scored = scores(v, opts, &|id| running.is_busy(id));
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (level, _) in scored.into_iter().take_while(|(_, s)| *s >= 1.0) {
        if level == 0 {
            if let Some(job) = level0(v, keyspace, running) {
                return Some(job);
            }
            continue;
        }
        let tables = &v.levels()[level];
        let start = tables
            .iter()
            .position(|t| t.min_key() > cursors[level].as_slice())
            .unwrap_or(0);
        for i in 0..tables.len() {
            let t = &tables[(start + i) % tables.len()];
            let mut inputs = vec![(level, t.clone())];
            inputs.extend(
                overlapping(&v.levels()[level + 1], t.min_key(), t.max_key())
                    .into_iter()
                    .map(|x| (level + 1, x)),
            );
            if let Some(job) = finish_job(v, keyspace, inputs, level + 1, running) {
                cursors[level] = t.max_key().to_vec();
                return Some(job);
            }
        }
    }
    reclaim_expired(v, keyspace, opts, &now, running)
}
