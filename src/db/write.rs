//! The write path: group commit of `WriteBatch`es (`batch.rs`), WAL append, memtable
//! rotation, and how failures stop writes.
//!
//! Group commit (LevelDB's write queue): a write encodes its batch as one WAL record and joins
//! the queue. If no leader is running, the oldest waiting write's thread becomes leader: it
//! takes the queued records (up to `MAX_GROUP_BYTES`), takes the writer lock, checks the error
//! state, rotates the memtable if it is full (waiting while flushes or level 0 are behind),
//! appends all the records with one write (and one sync with `sync_writes`), applies each
//! batch to the memtable in order (each visible whole, `memtable.rs`), then hands every write
//! of the group its result. Only then does a write return `Ok`. Each batch stays its own
//! record, so recovery is unchanged. Measured through kv_server (50 connections, SET): one
//! thread at a time on the writer lock queued the others in the kernel (half the profile was
//! context switches). A write that waits while at most one other does spins for a few
//! microseconds on the count of groups done before it parks: two threads committing
//! transactions in turn on 2 cores spent a fifth of their time in futex wake-ups and context
//! switches handing the leadership over (`perf record`, `db_bench --workload transactions`);
//! with 100 looks (~4 µs) they went from 236–251 k to 333–364 k transactions/s. 500 looks
//! (~20 µs) gained no more there and cost two threads bulk-loading 2×10^6 puts 12% of their
//! process's wall time (the spin's CPU taken from the flush and compactions), 100 looks none
//! (0.99×, `farm-bench --vs`, 10 pairs). With more writes waiting, the leader's group takes
//! longer than a spin is worth, and they park at once.
//! Any failure to append, sync,
//! create or sync a log puts the store in the read-only error state: that write returns the
//! I/O error, every later one `Error::ReadOnly`. The WAL writer has already cut the log back
//! to its last whole record, so nothing acknowledged is lost and nothing that failed is
//! replayed — and since nothing is ever appended after a failure, replay cannot stop early
//! and drop an acknowledged write behind it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::batch::WriteBatch;
use super::conflicts::{self, Condition};
use super::inner::{lock, Inner, Spare};
use super::memtable::Memtable;
use super::state::State;
use super::throttle;
use super::wal::{self, Batch, WalWriter};
use super::write_queue::{take_group, Queued};
use crate::error::{Error, Result};

/// A waiting write spins before it parks only while fewer writes than this wait.
const SPIN_BELOW_WAITING: usize = 2;

/// Looks at `groups_done` a spinning write takes before it parks (a `pause` each, ~4 µs in
/// all; the module comment says why this many).
const SPIN_LOOKS: usize = 100;

/// Hands out the group's results when the leader is done, or `Error::Panicked` to every write
/// of the group if the leader unwinds (a panicking file system), so no writer waits forever.
struct Leader<'a> {
    inner: &'a Inner,
    /// The group's tickets and threads.
    members: Vec<(u64, std::thread::Thread)>,
    /// The group's outcome, once committed (`None` while running, or after a panic).
    outcome: Option<Result<()>>,
    /// The tickets of the writes whose conditions failed, and why: they get this, not
    /// `outcome`.
    rejected: Vec<(u64, Error)>,
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        let mut q = lock(&self.inner.queue);
        for (t, _) in &self.members {
            if let Some((_, e)) = self.rejected.iter().find(|(r, _)| r == t) {
                q.results.insert(*t, Err(e.replicate()));
                continue;
            }
            let r = match &self.outcome {
                Some(Ok(())) => Ok(()),
                Some(Err(e)) => Err(e.replicate()),
                None => Err(Error::Panicked {
                    message: "the thread writing this batch's group panicked".into(),
                }),
            };
            q.results.insert(*t, r);
        }
        q.leader_active = false;
        let next = q.pending.front().map(|w| w.thread.clone());
        drop(q);
        self.inner.groups_done.fetch_add(1, Ordering::Release);
        let me = std::thread::current().id();
        for (_, thread) in self.members.iter().filter(|(_, t)| t.id() != me) {
            thread.unpark();
        }
        if let Some(t) = next {
            t.unpark(); // the oldest waiting write may now lead
        }
    }
}

impl Inner {
    /// Commits `batch` (see the module comment): `Ok` once it is in the WAL and the memtable,
    /// and durable too with `sync` (or `Options::sync_writes`).
    pub(super) fn write_batch(&self, batch: WriteBatch, sync: bool) -> Result<()> {
        self.write_batch_if(batch, sync, None)
    }

    /// `write_batch`, applied only if `condition` holds when the batch's turn comes
    /// (`conflicts::check`), else `Error::Conflict` and nothing written.
    pub(super) fn write_batch_if(
        &self,
        mut batch: WriteBatch,
        sync: bool,
        condition: Option<Box<Condition>>,
    ) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        // The clock, read once for the batch if a keyspace it writes has a default TTL.
        let mut now = None;
        for i in 0..batch.keyspaces.len() {
            let k = &batch.keyspaces[i];
            if !k.of(self) {
                return Err(Error::InvalidArgument(format!(
                    "the write batch changes keyspace {:?} of another store",
                    k.name()
                )));
            }
            let id = k.id();
            let Some(ttl) = self.read_state().get(id).map(|s| s.opts.keyspace_ttl) else {
                return Err(Error::KeyspaceDropped {
                    name: k.name().to_string(),
                });
            };
            if let Some(ttl) = ttl {
                let now = *now.get_or_insert_with(|| self.opts.clock.now_millis());
                batch.expire_unset(id, now.saturating_add(ttl));
            }
        }
        batch.validate()?;
        if batch.expiring() {
            self.admit_expiring()?;
        }
        if batch.deletes_ranges() {
            self.admit_range_deletes()?;
        }
        let record = wal::encode_batch(&batch.ops)?;
        let mut q = lock(&self.queue);
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.pending.push_back(Queued {
            ticket,
            record,
            ops: batch.ops,
            sync,
            thread: std::thread::current(),
            condition,
        });
        loop {
            if let Some(r) = q.results.remove(&ticket) {
                return r;
            }
            if !q.leader_active {
                q.leader_active = true;
                let group = take_group(&mut q.pending);
                drop(q);
                self.lead(group);
                q = lock(&self.queue);
                continue;
            }
            // With fewer writes waiting than cores, the leader's group usually ends within
            // microseconds: watch for it before sleeping, so that neither side pays a futex
            // wake-up and a context switch. Read under the queue lock, so that a group ending
            // after the look changes it.
            let spin = q.pending.len() < SPIN_BELOW_WAITING;
            let seen = self.groups_done.load(Ordering::Acquire);
            drop(q);
            if spin && self.group_ends(seen) {
                q = lock(&self.queue);
                continue;
            }
            // Woken by the leader that committed this write or that finished before it; a
            // spurious wake-up just looks again.
            std::thread::park();
            q = lock(&self.queue);
        }
    }

    /// Whether a group ends (`groups_done` passes `seen`) within a short spin.
    fn group_ends(&self, seen: u64) -> bool {
        for _ in 0..SPIN_LOOKS {
            if self.groups_done.load(Ordering::Acquire) != seen {
                return true;
            }
            std::hint::spin_loop();
        }
        false
    }

    /// Commits `group` as its leader; results go to the queue (also if this panics).
    fn lead(&self, group: Vec<Queued>) {
        let mut leader = Leader {
            inner: self,
            members: group.iter().map(|w| (w.ticket, w.thread.clone())).collect(),
            outcome: None,
            rejected: Vec::new(),
        };
        leader.outcome = Some(self.commit_group(group, &mut leader.rejected));
    }

    /// Appends the group's records with one write, then applies each batch in order. A write
    /// whose condition fails is left out, its ticket and error put in `rejected`.
    fn commit_group(&self, mut group: Vec<Queued>, rejected: &mut Vec<(u64, Error)>) -> Result<()> {
        let mut writer = self.lock_checked(&self.writer);
        self.errors.check()?;
        // A rotation leaves the table sets as they are: this count holds after one too.
        let level0 = self.level0_tables.load(Ordering::Relaxed);
        let full = self.read_state().default.mem.generation_size() >= self.opts.memtable_size
            || self.keyspace_full.load(Ordering::Relaxed);
        if full {
            self.rotate(&mut writer)?;
        }
        // Keyspaces are created and dropped under the writer lock, and only a rotation (under
        // it too) replaces memtables: this state's memtables are the ones to apply to.
        let state = self.read_state();
        // Transactions' conditions, in the group's order: against every earlier group (now in
        // the memtables), then against the writes ahead in this one.
        let mut i = 0;
        while i < group.len() {
            if let Some(cond) = group[i].condition.as_deref() {
                let checked = conflicts::check(cond, &state, &*self.opts.clock).and_then(|()| {
                    let ahead: Vec<&Batch> = group[..i].iter().map(|w| &w.ops).collect();
                    conflicts::check_ahead(cond, &ahead)
                });
                if let Err(e) = checked {
                    rejected.push((group.remove(i).ticket, e));
                    continue;
                }
            }
            i += 1;
        }
        if group.is_empty() {
            return Ok(());
        }
        let imm = state.default.imm.len();
        self.slow_down(imm, level0, group.iter().map(|w| w.record.len()).sum());
        // One sync for the group when any of its writes asks for one.
        let sync = self.opts.sync_writes || group.iter().any(|w| w.sync);
        let appended = match group.as_slice() {
            [one] => writer.append(&one.record, sync),
            _ => {
                let mut all = Vec::with_capacity(group.iter().map(|w| w.record.len()).sum());
                for w in &group {
                    all.extend_from_slice(&w.record);
                }
                writer.append(&all, sync)
            }
        };
        appended.map_err(|e| self.errors.set(e))?;
        self.note_write();
        super::counters::add(&self.counters.writes_grouped, group.len() as u64 - 1);
        let lead = &state.default.mem;
        for w in group {
            let seq = lead.next();
            for (id, ops, ranges) in w.ops.into_parts() {
                if id == 0 {
                    state.default.mem.append(ops, seq);
                    state.default.mem.append_ranges(ranges, seq);
                    continue;
                }
                // A keyspace dropped after the write was queued: its part goes with it.
                if let Some(s) = state.get(id) {
                    s.mem.append(ops, seq);
                    s.mem.append_ranges(ranges, seq);
                    // Its own, smaller memtable size (the store's is the generation's).
                    if s.mem.approximate_size() >= s.opts.memtable_size {
                        self.keyspace_full.store(true, Ordering::Relaxed);
                    }
                }
            }
            lead.publish(seq);
        }
        Ok(())
    }

    /// Creates an empty log for the next rotation to take, if none is waiting, and an empty
    /// memtable for it sized from `last` (the generation just flushed: `Memtable::sized`); run
    /// by the flush thread. An empty log left by a crash or a close is replayed (nothing) and
    /// removed at the next open like any other.
    pub(super) fn prepare_spare(&self, last: &Memtable) -> Result<()> {
        let id = {
            let mut spare = lock(&self.spare);
            match &*spare {
                Some(Spare { mem: Some(_), .. }) => return Ok(()),
                Some(Spare { wal, mem: None }) => wal.id(),
                None => {
                    let id = self.next_file.fetch_add(1, Ordering::SeqCst);
                    let wal = WalWriter::create(&*self.opts.fs, &self.dir, id)?;
                    *spare = Some(Spare { wal, mem: None });
                    id
                }
            }
        };
        // Made outside the lock (zeroing the index takes milliseconds at 64 MiB): a rotation
        // may take the log meanwhile, and the memtable goes only with the log it was made for.
        let most = self.opts.memtable_size / super::memtable::ENTRY_OVERHEAD;
        let mem = Memtable::sized(id, last.key_count().min(most));
        if let Some(spare) = lock(&self.spare).as_mut().filter(|s| s.wal.id() == id) {
            spare.mem = Some(mem);
        }
        Ok(())
    }

    /// Sleeps as the write slowdown says for a group of `bytes` with `imm` immutable
    /// memtables waiting, `l0` level-0 tables and the current compaction debt
    /// (`throttle.rs`). Called by the group's leader with the writer lock held, so the writes
    /// queued behind it wait too.
    fn slow_down(&self, imm: usize, l0: usize, bytes: usize) {
        let pending = self.pending_compaction_bytes.load(Ordering::Relaxed);
        let now = throttle::pressure(&self.opts, imm, l0, pending);
        let slowing = now.is_some();
        // The common case, neither slowing nor ending a slowdown, takes no lock.
        if !slowing && !self.slowing.load(Ordering::Relaxed) {
            return;
        }
        let wait = {
            let mut t = lock(&self.throttle);
            self.slowing.store(slowing, Ordering::Relaxed);
            match (now, t.active()) {
                (None, false) => return,
                (None, true) => {
                    t.reset();
                    tracing::info!(
                        immutable_memtables = imm,
                        level0_tables = l0,
                        pending_compaction_bytes = pending,
                        "write slowdown ends"
                    );
                    return;
                }
                (Some(now), active) => {
                    if !active {
                        tracing::info!(
                            reason = now.reason(),
                            immutable_memtables = imm,
                            level0_tables = l0,
                            pending_compaction_bytes = pending,
                            "write slowdown begins"
                        );
                    }
                    t.delay(bytes, now, self.opts.delayed_write_rate)
                }
            }
        };
        if let Some(wait) = wait {
            std::thread::sleep(wait);
            let c = &self.counters;
            let counters = (
                &c.write_slowdowns,
                &c.write_slowdown_micros,
                &c.longest_write_slowdown_micros,
            );
            super::counters::add_wait(counters, wait);
        }
    }

    /// Makes every write acknowledged so far durable (`Db::sync_wal`): under the writer lock,
    /// every committed group's records are in the current log, and earlier logs were synced
    /// when they were retired. A failed sync puts the store in the error state, as a failed
    /// append does.
    pub(super) fn sync_wal(&self) -> Result<()> {
        let mut writer = self.lock_checked(&self.writer);
        self.errors.check()?;
        writer.sync().map_err(|e| self.errors.set(e))
    }

    /// Makes the memtable immutable and starts a new one with a new WAL (the empty one the
    /// flush thread created ahead, when there is one: creating a log and syncing its directory
    /// took the writer up to 18 ms under load); returns the retired memtable. Waits first
    /// while flushes, level 0 or the compaction debt are behind. The retired log is synced
    /// before the new one takes writes, so a power loss cannot keep a newer log's records
    /// while losing an older one's. That sync is the rotation's cost (3 ms on average, up to
    /// 16 ms at 8 MiB memtables and 35 ms at 64 MiB under `db_bench --workload latency`). It
    /// cannot simply move to the flush thread: an older log that lost whole records at a page
    /// boundary reads as intact (`tests/db_power_loss.rs` fails at once); moved with marks in
    /// the log that let recovery tell, it did not shorten the longest write (docs/design.md).
    /// Called with the writer lock held.
    pub(super) fn rotate(&self, writer: &mut WalWriter) -> Result<Arc<Memtable>> {
        let mut stalled: Option<(Instant, &str)> = None;
        loop {
            // Checked under the signal lock: a flush or compaction installed after the check
            // notifies only once this thread waits (checking first and locking after lost that
            // wake-up, and a stall then lasted the whole 20 ms timeout).
            let sig = lock(&self.signal);
            let behind = {
                let s = self.read_state();
                if s.default.imm.len() >= self.opts.max_immutable_memtables {
                    Some("immutable memtables waiting for a flush")
                } else if self.level0_tables.load(Ordering::Relaxed)
                    >= self.opts.l0_stop_writes_trigger
                {
                    Some("level 0 at l0_stop_writes_trigger")
                } else if self
                    .opts
                    .hard_pending_compaction_bytes_limit
                    .is_some_and(|hard| {
                        self.pending_compaction_bytes.load(Ordering::Relaxed) >= hard
                    })
                {
                    Some("pending compaction bytes at hard_pending_compaction_bytes_limit")
                } else {
                    None
                }
            };
            let (Some(why), Ok(())) = (behind, self.errors.check()) else {
                break;
            };
            if stalled.is_none() {
                stalled = Some((Instant::now(), why));
                drop(sig);
                self.wake();
                continue;
            }
            // Flushes and compactions notify `progress` as each one is installed.
            drop(self.wait_progress(sig, Duration::from_millis(20)));
        }
        if let Some((since, why)) = stalled {
            let c = &self.counters;
            let waited = since.elapsed();
            let counters = (
                &c.write_stalls,
                &c.write_stall_micros,
                &c.longest_write_stall_micros,
            );
            super::counters::add_wait(counters, waited);
            tracing::warn!(
                reason = why,
                waited_ms = waited.as_millis() as u64,
                "writes stopped"
            );
        }
        self.errors.check()?;
        writer.sync().map_err(|e| self.errors.set(e))?;
        // The log and memtable the flush thread made ready (`prepare_spare`), or new ones.
        // Log numbers are drawn only under the `spare` lock, so each log a rotation starts has
        // a higher number than the one before it: replay goes in that order.
        let mut spare = lock(&self.spare);
        let mem = match spare.take() {
            Some(Spare { wal, mem }) => {
                *writer = wal;
                mem
            }
            None => {
                let id = self.next_file.fetch_add(1, Ordering::SeqCst);
                *writer = WalWriter::create(&*self.opts.fs, &self.dir, id)
                    .map_err(|e| self.errors.set(e))?;
                None
            }
        };
        drop(spare);
        // Every keyspace's memtable retires together (`state::Published`); the default
        // one's leads the generation.
        let lead = Arc::new(mem.unwrap_or_else(|| Memtable::new(writer.id())));
        let retired = self.update_state(|p| {
            let retire = |s: &mut State, mem| {
                let old = std::mem::replace(&mut s.mem, mem);
                s.imm.push(Arc::clone(&old));
                old
            };
            for (_, s) in &mut p.others {
                retire(s, Arc::new(Memtable::following(&lead)));
            }
            retire(&mut p.default, lead)
        });
        self.keyspace_full.store(false, Ordering::Relaxed);
        self.wake();
        Ok(retired)
    }
}
