//! The group-commit queue (`write.rs` runs it): writes waiting for a leader, and the results
//! of committed ones not yet collected. `Inner::queue` holds it under its own lock, taken
//! before the writer lock and released before the leader takes that.

use std::collections::{HashMap, VecDeque};

use super::conflicts::Condition;
use super::wal::Batch;
use crate::error::Result;

/// Records one leader appends with one write, at most (a single larger record goes alone).
const MAX_GROUP_BYTES: usize = 1 << 20;

/// A write waiting for a leader: its ticket, WAL record and operations, and its thread (woken
/// alone when its result is in, or when it may lead: a shared condvar woke every waiting
/// writer for every group, and with kv_server's 50 connections those wake-ups were half the
/// profile).
pub(super) struct Queued {
    pub(super) ticket: u64,
    pub(super) record: Vec<u8>,
    pub(super) ops: Batch,
    /// Durable before acknowledged (`WriteOptions::sync`): the group's append is synced.
    pub(super) sync: bool,
    pub(super) thread: std::thread::Thread,
    /// A transaction's commit: applied only if nothing it read changed (`conflicts.rs`),
    /// checked by the leader against the memtables and the writes ahead of it in its group.
    pub(super) condition: Option<Box<Condition>>,
}

/// Writes waiting to be committed, and the results of committed ones not yet collected.
#[derive(Default)]
pub(super) struct WriteQueue {
    pub(super) next_ticket: u64,
    pub(super) pending: VecDeque<Queued>,
    pub(super) results: HashMap<u64, Result<()>>,
    pub(super) leader_active: bool,
}

/// The first waiting writes, up to `MAX_GROUP_BYTES` of records (always at least one).
pub(super) fn take_group(pending: &mut VecDeque<Queued>) -> Vec<Queued> {
    let mut group = Vec::new();
    let mut bytes = 0;
    while let Some(w) = pending.front() {
        if !group.is_empty() && bytes + w.record.len() > MAX_GROUP_BYTES {
            break;
        }
        bytes += w.record.len();
        group.extend(pending.pop_front());
    }
    group
}
