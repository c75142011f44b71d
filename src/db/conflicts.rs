//! A transaction's reads, kept for its commit (`transaction.rs`), and the check that commit
//! makes: did any write after the transaction's snapshot change what it read?
//!
//! The check runs in the group commit (`write.rs`), by the leader, under the writer lock: every
//! batch of an earlier group is then in the memtables (`check`), the batches ahead of it in its
//! own group are compared op by op (`check_ahead`), and none can slip in between the check and
//! the batch's own append. It reads
//! memtables only, never a table: the writes after the snapshot are the batches after the
//! snapshot's count in the memtable generation it saw, and every batch of the generations
//! since. Those memtables are all still in memory while the snapshot's generation has not
//! been flushed; once it has, the writes between are in a table, and the commit fails with
//! `Error::Conflict` (retry) rather than read tables under the writer lock or guess (RocksDB's
//! optimistic transactions answer `TryAgain` in the same case).
//!
//! What counts as a change: a put or delete of a key read (the same value written again
//! counts too), a range deleted over it, a key written in or a range deleted over a key range
//! read (a scan's range, whole: no phantom), a read keyspace dropped, and a value read that
//! has expired by the time of the check (the clock is read only if a value read carries an
//! expiry).

use std::ops::Bound;

use super::memtable::Memtable;
use super::spans::{Span, Spans};
use super::state::{Published, State};
use super::wal::Batch;
use crate::coding::printable;
use crate::error::{Error, Result};
use crate::expiry::{Clock, NEVER};
use crate::filter::hash_key;
use crate::table::DeletedRange;

/// One read a transaction made at its snapshot.
#[derive(Debug)]
pub(super) enum Read {
    /// A key, and the expiry of the value read (`NEVER`: none, or the key was absent).
    Key {
        keyspace: u32,
        key: Vec<u8>,
        expiry: u64,
    },
    /// Every key in a range (a scan's, whole).
    Range {
        keyspace: u32,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    },
}

/// What a transaction's commit asks be unchanged since its snapshot.
pub(super) struct Condition {
    /// The snapshot's states (its memtables name the generation it saw).
    pub(super) published: std::sync::Arc<Published>,
    /// Batches of that generation the snapshot saw.
    pub(super) mem_seen: u64,
    /// Its reads, in the order made.
    pub(super) reads: Vec<Read>,
}

/// `Ok` when no write after `cond`'s snapshot changed what it read, judged from the memtables
/// of `now` (the current states, every committed batch applied) and, for values read with an
/// expiry, `clock`; else `Error::Conflict` saying what changed.
pub(super) fn check(cond: &Condition, now: &Published, clock: &dyn Clock) -> Result<()> {
    check_reads(&cond.published, cond.mem_seen, &cond.reads, now, clock)
}

/// `check` of `reads` made at the snapshot `published` (seeing `mem_seen` batches).
pub(super) fn check_reads(
    published: &Published,
    mem_seen: u64,
    reads: &[Read],
    now: &Published,
    clock: &dyn Clock,
) -> Result<()> {
    let snapshot_lead = &published.default.mem;
    let current = &now.default;
    // Position in every keyspace's `imm` of the snapshot's generation (`imm.len()`: `mem`).
    let from = match current.mem.same_generation(snapshot_lead) {
        true => current.imm.len(),
        false => current
            .imm
            .iter()
            .position(|m| m.same_generation(snapshot_lead))
            .ok_or_else(|| conflict("the writes since the transaction's snapshot are no longer all in memory (a flush wrote them to a table)".into()))?,
    };
    let expiring = reads.iter().any(|r| match r {
        Read::Key { expiry, .. } => *expiry != NEVER,
        Read::Range { .. } => false,
    });
    let reading = expiring.then(|| clock.now_millis());
    for read in reads {
        let id = match read {
            Read::Key { keyspace, .. } | Read::Range { keyspace, .. } => *keyspace,
        };
        let Some(state) = now.get(id) else {
            let name = published.get(id).map_or("?", |s| &*s.name);
            return Err(conflict(format!(
                "keyspace {name:?}, which it read, was dropped"
            )));
        };
        match read {
            Read::Key { key, expiry, .. } => {
                let hash = hash_key(key);
                if since(state, from, mem_seen).any(|(m, after)| m.written_after(key, hash, after))
                {
                    return Err(conflict(format!(
                        "key {} of keyspace {:?}, which it read, was written since its snapshot",
                        printable(key),
                        &*state.name
                    )));
                }
                if reading.is_some_and(|r| *expiry != NEVER && *expiry <= r) {
                    return Err(conflict(format!(
                        "key {} of keyspace {:?}, which it read, has expired since",
                        printable(key),
                        &*state.name
                    )));
                }
            }
            // Checked together below, per keyspace.
            Read::Range { .. } => {}
        }
    }
    for set in read_sets(reads) {
        if set.spans.is_empty() {
            continue;
        }
        let Some(state) = now.get(set.keyspace) else {
            continue; // reported above: a range read is a read of its keyspace
        };
        let written = |(m, after): (&Memtable, u64)| {
            m.written_where(after, |k| set.spans.contains(k), |r| set.spans.meet(r))
        };
        if since(state, from, mem_seen).any(written) {
            return Err(conflict(format!(
                "a key in a range of keyspace {:?} it scanned was written since its snapshot",
                &*state.name
            )));
        }
    }
    Ok(())
}

/// `Ok` when none of `ahead` (the batches before the transaction in its group, appended
/// with it but not yet applied) changes what `cond` read, else `Error::Conflict`.
pub(super) fn check_ahead(cond: &Condition, ahead: &[&Batch]) -> Result<()> {
    if ahead.is_empty() {
        return Ok(());
    }
    for set in read_sets(&cond.reads) {
        let hit = ahead.iter().any(|batch| {
            part(batch, set.keyspace)
                .iter()
                .any(|op| set.holds(&op.key))
                || batch.ranges_of(set.keyspace).any(|r| set.meets(r))
        });
        if hit {
            let name = cond.published.get(set.keyspace).map_or("?", |s| &*s.name);
            return Err(conflict(format!(
                "a write committed just ahead of it in keyspace {name:?} changed what it read"
            )));
        }
    }
    Ok(())
}

/// A transaction's reads of one keyspace, arranged to be asked of many writes: the keys read,
/// sorted, and the ranges scanned, as spans.
struct ReadSet<'a> {
    keyspace: u32,
    keys: Vec<&'a [u8]>,
    spans: Spans<'a>,
}

impl ReadSet<'_> {
    /// Whether it read `key`.
    fn holds(&self, key: &[u8]) -> bool {
        self.keys.binary_search(&key).is_ok() || self.spans.contains(key)
    }

    /// Whether the deleted range `r` may cover something it read: the first key read at or
    /// after the range's start is inside it if any is.
    fn meets(&self, r: &DeletedRange) -> bool {
        let first = self.keys.partition_point(|k| *k < r.start.as_slice());
        self.keys.get(first).is_some_and(|k| r.covers(k)) || self.spans.meet(r)
    }
}

/// `reads` by keyspace (`ReadSet`), in one pass and one sort per keyspace.
fn read_sets(reads: &[Read]) -> Vec<ReadSet<'_>> {
    // Per keyspace: its id, the keys read and the ranges scanned.
    type Gathered<'a> = (u32, Vec<&'a [u8]>, Vec<Span<'a>>);
    let mut by: Vec<Gathered<'_>> = Vec::new();
    for read in reads {
        let id = match read {
            Read::Key { keyspace, .. } | Read::Range { keyspace, .. } => *keyspace,
        };
        let at = match by.iter().position(|(k, _, _)| *k == id) {
            Some(i) => i,
            None => {
                by.push((id, Vec::new(), Vec::new()));
                by.len() - 1
            }
        };
        match read {
            Read::Key { key, .. } => by[at].1.push(key),
            Read::Range { start, end, .. } => by[at].2.push((
                start.as_ref().map(Vec::as_slice),
                end.as_ref().map(Vec::as_slice),
            )),
        }
    }
    by.into_iter()
        .map(|(keyspace, mut keys, ranges)| {
            keys.sort_unstable();
            ReadSet {
                keyspace,
                keys,
                spans: Spans::new(ranges),
            }
        })
        .collect()
}

/// Keyspace `id`'s operations in `batch`.
fn part(batch: &Batch, id: u32) -> &[super::wal::Op] {
    match id {
        0 => &batch.default,
        _ => batch
            .spaces
            .iter()
            .find(|(k, _)| *k == id)
            .map_or(&[], |(_, ops)| ops.as_slice()),
    }
}

/// `state`'s memtables from generation position `from` on, each with the last batch the
/// snapshot saw in it (`mem_seen` in the snapshot's own generation, none in later ones).
fn since(state: &State, from: usize, mem_seen: u64) -> impl Iterator<Item = (&Memtable, u64)> {
    let imm = state.imm.get(from..).unwrap_or(&[]);
    imm.iter()
        .chain(std::iter::once(&state.mem))
        .enumerate()
        .map(move |(i, m)| (&**m, if i == 0 { mem_seen } else { 0 }))
}

fn conflict(reason: String) -> Error {
    Error::Conflict { reason }
}
