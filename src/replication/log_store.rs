//! The Raft log in a `Db` of its own (openraft's `RaftLogStorage`).
//!
//! Keys (FORMAT.md §7.1): `e` + the index big-endian for each entry, so entries sort by
//! index; `m/vote`, `m/committed`, `m/purged` for the vote and the two marks; `m/format` for
//! the layout's version. An append is one `WriteBatch` (one of more than 64 MiB is written as
//! several, in order: a crash between them leaves a prefix of its entries, none reported
//! durable). A truncation or a purge is one range delete (`WriteBatch::delete_range`): one
//! operation however many entries it removes, applied whole, so a crash leaves the log as it
//! was or as asked, never a hole; a purge writes its mark in the same batch. (Logs written by
//! builds before range deletes may hold entries at or below the purge mark, left by a crash
//! part-way through a purge made of several batches: `open` deletes them, `log_trim.rs`.)
//!
//! Durability, the contract openraft states for each method:
//! - `append`: the entries are written (unsynced) before it returns, so they are readable at
//!   once; its callback runs only once they are durable. The syncs run on a thread of their
//!   own (`Flusher`): appends queue behind one another and one `Db::sync_wal` completes every
//!   append written before it, in order (group commit: a busy leader pays one sync for many
//!   appends, never one per append).
//! - `save_vote` and `truncate_after` are durable before they return (a synced write, which also
//!   makes every earlier append durable, since the log's file is written in order).
//! - `purge` and `save_committed` are not synced: losing one in a power loss only keeps
//!   entries longer, or makes the node learn the commit index from the leader again.

use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::RaftLogReader;

use super::codec;
use super::log_tail::Tail;
use super::log_trim::{self, entry_key, index_of, ENTRY};
use super::{Entry, LogId, TypeConfig, Vote};
use crate::db::{Db, Filters, Options, WriteBatch, WriteOptions};

const VOTE: &[u8] = b"m/vote";
const COMMITTED: &[u8] = b"m/committed";
const PURGED: &[u8] = b"m/purged";
/// An append is written in batches of about this many bytes (one batch must stay under the
/// store's `MAX_BATCH_SIZE` however many large entries openraft appends at once).
const APPEND_BATCH_BYTES: usize = 64 << 20;

type StorageResult<T> = Result<T, std::io::Error>;

fn read_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("reading the raft log: {e}"))
}

fn write_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("writing the raft log: {e}"))
}

/// The Raft log of one node. Clones share the store (a clone is openraft's log reader).
#[derive(Clone)]
pub struct LogStore {
    shared: Arc<Shared>,
}

struct Shared {
    db: Arc<Db>,
    /// The last purged and the last present log ids, kept in step with the store.
    state: Mutex<LogState<TypeConfig>>,
    /// The last commit mark saved.
    committed: Mutex<Option<LogId>>,
    /// The newest entries, for reads without a scan (`log_tail.rs`).
    tail: Mutex<Tail>,
    /// The vote as last made durable (a leader's lease reads compare it: `node.rs`).
    vote: Mutex<Option<Vote>>,
    /// Appends waiting for their sync, in order.
    flusher: Mutex<Option<mpsc::Sender<IOFlushed<TypeConfig>>>>,
    flush_thread: Mutex<Option<thread::JoinHandle<()>>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Ok(mut f) = self.flusher.lock() {
            f.take();
        }
        if let Some(t) = self.flush_thread.get_mut().ok().and_then(Option::take) {
            let _ = t.join();
        }
    }
}

impl LogStore {
    /// Opens (or creates) the log in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> crate::Result<LogStore> {
        Self::open_on(dir, Arc::new(crate::fs::StdFs))
    }

    /// Opens (or creates) the log in `dir`, its files through `fs` (a node's
    /// `ReplicationConfig::db.fs`, so a fault-injecting file system covers both its stores).
    pub fn open_on(
        dir: impl AsRef<Path>,
        fs: Arc<dyn crate::fs::FileSystem>,
    ) -> crate::Result<LogStore> {
        let opts = Options::default()
            .with_filters(Some(Filters::None))
            .with_fs(fs);
        let db = Arc::new(Db::open(dir.as_ref(), opts)?);
        codec::check_layout(&db, "raft log")?;
        let last_purged_log_id = match db.get(PURGED)? {
            None => None,
            Some(b) => {
                codec::decode_opt_log_id(&b).map_err(|r| corrupt(dir.as_ref(), "purged mark", r))?
            }
        };
        // A purge of a build before range deletes wrote its mark before it deleted the entries
        // in several batches (`log_trim.rs`): entries a crash left at or below the mark are
        // deleted now.
        if let Some(p) = &last_purged_log_id {
            log_trim::delete_entries(&db, 0, p.index, WriteBatch::new(), false)?;
        }
        let last = db
            .scan([ENTRY].as_slice()..[ENTRY + 1].as_slice())?
            .next_back();
        let last_log_id = match last {
            None => last_purged_log_id,
            Some(kv) => {
                let (_, v) = kv?;
                let e =
                    codec::decode_entry(&v).map_err(|r| corrupt(dir.as_ref(), "last entry", r))?;
                Some(e.log_id).max(last_purged_log_id)
            }
        };
        let committed = match db.get(COMMITTED)? {
            None => None,
            Some(b) => {
                codec::decode_opt_log_id(&b).map_err(|r| corrupt(dir.as_ref(), "commit mark", r))?
            }
        };
        let vote = match db.get(VOTE)? {
            None => None,
            Some(b) => Some(codec::decode_vote(&b).map_err(|r| corrupt(dir.as_ref(), "vote", r))?),
        };
        let (tx, rx) = mpsc::channel::<IOFlushed<TypeConfig>>();
        let flush_db = Arc::clone(&db);
        let flush_thread = thread::Builder::new()
            .name("raft-log-sync".into())
            .spawn(move || flush_loop(&flush_db, &rx))
            .map_err(|e| crate::Error::io("starting the raft log's sync thread", e))?;
        Ok(LogStore {
            shared: Arc::new(Shared {
                db,
                state: Mutex::new(LogState {
                    last_purged_log_id,
                    last_log_id,
                }),
                committed: Mutex::new(committed),
                vote: Mutex::new(vote),
                tail: Mutex::default(),
                flusher: Mutex::new(Some(tx)),
                flush_thread: Mutex::new(Some(flush_thread)),
            }),
        })
    }

    /// The last commit position openraft saved (the commit index, as this node knows it).
    pub fn committed(&self) -> Option<LogId> {
        *self
            .shared
            .committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The vote as last made durable. openraft saves a vote before it answers the request
    /// that changed it, so once a node has granted another candidate its vote, or learnt of
    /// a newer leader, this no longer returns the vote it led under.
    pub fn vote(&self) -> Option<Vote> {
        *self
            .shared
            .vote
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The id of the last entry written (readable, perhaps not yet durable or committed).
    /// A leader writes every entry here before it sends it to anyone, so no node can have
    /// applied an entry past this one.
    pub fn last_log_id(&self) -> Option<LogId> {
        self.state().last_log_id
    }

    /// The store holding the log (for its statistics).
    pub fn db(&self) -> &Db {
        &self.shared.db
    }

    fn state(&self) -> LogState<TypeConfig> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, Tail> {
        self.shared
            .tail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn update(&self, f: impl FnOnce(&mut LogState<TypeConfig>)) {
        f(&mut self
            .shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner));
    }

    fn get_meta(&self, key: &[u8]) -> crate::Result<Option<Vec<u8>>> {
        self.shared.db.get(key)
    }
}

fn corrupt(dir: &Path, what: &str, reason: String) -> crate::Error {
    crate::Error::Corruption {
        path: dir.to_path_buf(),
        reason: format!("raft log {what}: {reason}"),
    }
}

/// Completes queued appends: one sync for all that are waiting, then their callbacks in
/// order. Ends when the store is dropped.
fn flush_loop(db: &Db, rx: &mpsc::Receiver<IOFlushed<TypeConfig>>) {
    while let Ok(first) = rx.recv() {
        let mut waiting = vec![first];
        waiting.extend(rx.try_iter());
        let result = db.sync_wal();
        for cb in waiting {
            cb.io_completed(match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(std::io::Error::other(format!("syncing the raft log: {e}"))),
            });
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    /// Entries with indexes in `range`, in order. Contract: entries that are present are
    /// returned contiguously; a hole in the middle is a storage error (it cannot happen
    /// with one batch per change, so it means damage).
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + std::fmt::Debug + Send>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry>> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end_index = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => u64::MAX,
        };
        let last = self.state().last_log_id.map(|l| l.index);
        if let Some(entries) = self.tail().get(start, end_index, last) {
            return Ok(entries);
        }
        let end = match range.end_bound() {
            Bound::Included(&e) => Bound::Included(entry_key(e)),
            Bound::Excluded(&e) => Bound::Excluded(entry_key(e)),
            Bound::Unbounded => Bound::Excluded([ENTRY + 1; 9]),
        };
        let lo = entry_key(start);
        let iter = self
            .shared
            .db
            .scan::<[u8; 9], _>((Bound::Included(lo), end))
            .map_err(read_err)?;
        let mut out = Vec::new();
        for kv in iter {
            let (k, v) = kv.map_err(read_err)?;
            let index = index_of(&k).ok_or_else(|| read_err("a key that is not an entry's"))?;
            let e = codec::decode_entry(&v).map_err(|r| read_err(format!("entry {index}: {r}")))?;
            if e.log_id.index != index {
                return Err(read_err(format!(
                    "entry stored at {index} says index {}",
                    e.log_id.index
                )));
            }
            if let Some(prev) = out.last().map(|p: &Entry| p.log_id.index) {
                if index != prev + 1 {
                    return Err(read_err(format!(
                        "hole in the log between {prev} and {index}"
                    )));
                }
            }
            out.push(e);
        }
        Ok(out)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote>> {
        match self.get_meta(VOTE).map_err(read_err)? {
            None => Ok(None),
            Some(b) => codec::decode_vote(&b)
                .map(Some)
                .map_err(|r| std::io::Error::other(format!("reading the vote: {r}"))),
        }
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        Ok(self.state())
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    /// Durable before it returns (a synced write).
    async fn save_vote(&mut self, vote: &Vote) -> StorageResult<()> {
        let mut b = WriteBatch::new();
        b.put(VOTE, codec::encode_vote(vote));
        self.shared
            .db
            .write_opt(b, WriteOptions { sync: true })
            .map_err(|e| std::io::Error::other(format!("saving the vote: {e}")))?;
        *self
            .shared
            .vote
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> StorageResult<()> {
        let mut b = WriteBatch::new();
        b.put(COMMITTED, codec::encode_opt_log_id(committed.as_ref()));
        self.shared.db.write(b).map_err(write_err)?;
        *self
            .shared
            .committed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId>> {
        match self.get_meta(COMMITTED).map_err(read_err)? {
            None => Ok(None),
            Some(b) => codec::decode_opt_log_id(&b).map_err(read_err),
        }
    }

    /// Readable when it returns; `callback` once durable, after every earlier append's.
    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut b = WriteBatch::new();
        let mut last = None;
        // The newest of these entries, for the tail once they are written.
        let mut fresh = Tail::default();
        let write = |b: WriteBatch| self.shared.db.write(b).inspect_err(|_| self.tail().clear());
        for e in entries {
            let encoded = codec::encode_entry(&e);
            let size = encoded.len();
            b.put(entry_key(e.log_id.index), encoded);
            last = Some(e.log_id);
            fresh.push([(e, size)]);
            if b.encoded_len() >= APPEND_BATCH_BYTES {
                // In order, so a crash between batches leaves a prefix of the entries (no
                // hole), and none of them was reported durable.
                write(std::mem::take(&mut b)).map_err(write_err)?;
            }
        }
        if !b.is_empty() {
            write(b).map_err(write_err)?;
        }
        if let Some(last) = last {
            self.update(|s| s.last_log_id = Some(last));
            self.tail().append(fresh);
        }
        let sender = self
            .shared
            .flusher
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match sender {
            Some(tx) => tx
                .send(callback)
                .map_err(|_| write_err("the raft log's sync thread has stopped")),
            None => Err(write_err("the raft log is closed")),
        }
    }

    /// Removes the entries after `last_log_id` (all of them for `None`), durably, in one
    /// batch.
    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> StorageResult<()> {
        let from = last_log_id.as_ref().map_or(0, |l| l.index + 1);
        self.tail().truncate(from);
        // Every entry from `from` on, in one operation, synced.
        let mut batch = WriteBatch::new();
        batch.delete_range((
            Bound::Included(entry_key(from).to_vec()),
            Bound::Excluded(vec![ENTRY + 1]),
        ));
        self.shared
            .db
            .write_opt(batch, WriteOptions { sync: true })
            .map_err(write_err)?;
        self.update(|s| {
            if s.last_log_id.as_ref().is_some_and(|l| l.index >= from) {
                s.last_log_id = last_log_id.or(s.last_purged_log_id);
            }
        });
        Ok(())
    }

    /// Records `log_id` as purged and removes every entry up to it, in one batch: the mark
    /// and one range delete.
    async fn purge(&mut self, log_id: LogId) -> StorageResult<()> {
        let mut batch = WriteBatch::new();
        batch.put(PURGED, codec::encode_opt_log_id(Some(&log_id)));
        batch.delete_range(entry_key(0)..=entry_key(log_id.index));
        self.tail().purge(log_id.index);
        self.shared.db.write(batch).map_err(write_err)?;
        self.update(|s| {
            s.last_purged_log_id = Some(log_id);
            if s.last_log_id < Some(log_id) {
                s.last_log_id = Some(log_id);
            }
        });
        Ok(())
    }
}
