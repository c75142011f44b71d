//! The baseline: openraft over RocksDB, built the way openraft's `raft-kv-rocksdb` and
//! `rocksstore` examples build their stores, with the same type config, transport and
//! clients as the lsm-bloom cluster it is compared with.
//!
//! - Log: one RocksDB (`log/`) with column families `logs` (key: the index big-endian,
//!   value: the entry, bincode) and `meta` (vote, commit mark, purge mark). An append is one
//!   `WriteBatch`, written unsynced; its callback runs after `flush_wal(true)`. Those flushes
//!   run on a thread of their own, one covering every append queued before it (the same
//!   group commit the lsm-bloom log store uses), so the comparison measures the stores, not
//!   the pipeline. `save_vote` and `truncate` are flushed before they return.
//! - State machine: a second RocksDB (`sm/`), data and the applied position in one unsynced
//!   batch per `apply`. A snapshot is every key and value of a RocksDB snapshot, written to
//!   a file with bincode after `flush_wal(true)`; installing one rewrites the data.
//!
//! Validation is what a baseline needs, not what a product does: entries it wrote itself are
//! decoded with `expect`.

use std::io::Read;

use lsm_bloom::replication::openraft::async_runtime::watch::WatchReceiver;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};

use futures_util::{Stream, StreamExt};
use lsm_bloom::replication::openraft::alias::SnapshotMetaOf;
use lsm_bloom::replication::openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, StreamAppendResult, VoteRequest, VoteResponse,
};
use lsm_bloom::replication::openraft::storage::{
    EntryResponder, IOFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot,
};
use lsm_bloom::replication::openraft::{
    Config, EntryPayload, RaftLogReader, RaftSnapshotBuilder, ReadPolicy,
};
use lsm_bloom::replication::tcp::TcpNetwork;
use lsm_bloom::replication::{
    ChunkAnswer, ChunkResult, Entry, Error, LogId, NodeId, Op, RaftService, Request, Response,
    RpcAnswer, SnapshotChunk, SnapshotFile, StoredMembership, TypeConfig, Vote,
};
use rocksdb::{ColumnFamilyDescriptor, IteratorMode, Options, WriteBatch, DB};

type StorageResult<T> = Result<T, std::io::Error>;
type Meta = SnapshotMetaOf<TypeConfig>;
/// openraft over the baseline's state machine.
type Raft = lsm_bloom::replication::openraft::Raft<TypeConfig, RocksSm>;

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

fn enc<T: serde::Serialize>(v: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(v, bincode::config::standard()).expect("encodes")
}

fn dec<T: serde::de::DeserializeOwned>(b: &[u8]) -> T {
    bincode::serde::decode_from_slice(b, bincode::config::standard())
        .expect("a value this baseline wrote")
        .0
}

fn open(dir: &Path, cfs: &[&str]) -> Arc<DB> {
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    let cfs = cfs
        .iter()
        .map(|n| ColumnFamilyDescriptor::new(*n, Options::default()));
    Arc::new(DB::open_cf_descriptors(&opts, dir, cfs).expect("opening RocksDB"))
}

/// The log (module comment).
#[derive(Clone)]
pub struct RocksLog {
    db: Arc<DB>,
    flusher: mpsc::Sender<IOFlushed<TypeConfig>>,
}

impl RocksLog {
    fn open(dir: &Path) -> RocksLog {
        let db = open(dir, &["logs", "meta"]);
        let (tx, rx) = mpsc::channel::<IOFlushed<TypeConfig>>();
        let flush_db = Arc::clone(&db);
        std::thread::spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut batch = vec![first];
                batch.extend(rx.try_iter());
                let r = flush_db.flush_wal(true);
                for cb in batch {
                    cb.io_completed(r.clone().map_err(std::io::Error::other));
                }
            }
        });
        RocksLog { db, flusher: tx }
    }

    fn meta(&self, key: &str) -> Option<Vec<u8>> {
        let cf = self.db.cf_handle("meta").expect("cf");
        self.db.get_cf(cf, key).expect("reading meta")
    }

    fn put_meta(&self, key: &str, v: Vec<u8>, flush: bool) -> Result<(), rocksdb::Error> {
        let cf = self.db.cf_handle("meta").expect("cf");
        self.db.put_cf(cf, key, v)?;
        if flush {
            self.db.flush_wal(true)?;
        }
        Ok(())
    }
}

impl RaftLogReader<TypeConfig> for RocksLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + std::fmt::Debug + Send>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry>> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s + 1,
            Bound::Unbounded => 0,
        };
        let cf = self.db.cf_handle("logs").expect("cf");
        let key = start.to_be_bytes();
        let mode = IteratorMode::From(&key, rocksdb::Direction::Forward);
        let mut out = Vec::new();
        for kv in self.db.iterator_cf(cf, mode) {
            let (k, v) = kv.map_err(io_err)?;
            let index = u64::from_be_bytes(k[..8].try_into().expect("8-byte key"));
            if !range.contains(&index) {
                break;
            }
            out.push(dec(&v));
        }
        Ok(out)
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote>> {
        Ok(self.meta("vote").map(|b| dec(&b)))
    }
}

impl RaftLogStorage<TypeConfig> for RocksLog {
    type LogReader = RocksLog;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let purged: Option<LogId> = self.meta("purged").and_then(|b| dec(&b));
        let cf = self.db.cf_handle("logs").expect("cf");
        let last = self
            .db
            .iterator_cf(cf, IteratorMode::End)
            .next()
            .map(|kv| dec::<Entry>(&kv.expect("reading the log").1).log_id);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last.or(purged),
        })
    }

    async fn get_log_reader(&mut self) -> RocksLog {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> StorageResult<()> {
        self.put_meta("vote", enc(vote), true).map_err(io_err)
    }

    async fn save_committed(&mut self, c: Option<LogId>) -> StorageResult<()> {
        self.put_meta("committed", enc(&c), false).map_err(io_err)
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId>> {
        Ok(self.meta("committed").and_then(|b| dec(&b)))
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let cf = self.db.cf_handle("logs").expect("cf");
        let mut b = WriteBatch::default();
        for e in entries {
            b.put_cf(cf, e.log_id.index.to_be_bytes(), enc(&e));
        }
        self.db.write(b).map_err(io_err)?;
        self.flusher
            .send(callback)
            .map_err(|_| io_err("the flush thread stopped"))
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> StorageResult<()> {
        let cf = self.db.cf_handle("logs").expect("cf");
        let mut b = WriteBatch::default();
        let from = last.map_or(0, |l| l.index + 1);
        b.delete_range_cf(cf, from.to_be_bytes(), u64::MAX.to_be_bytes());
        self.db.write(b).map_err(io_err)?;
        self.db.flush_wal(true).map_err(io_err)
    }

    async fn purge(&mut self, log_id: LogId) -> StorageResult<()> {
        let (logs, meta) = (
            self.db.cf_handle("logs").expect("cf"),
            self.db.cf_handle("meta").expect("cf"),
        );
        let mut b = WriteBatch::default();
        b.put_cf(meta, "purged", enc(&Some(log_id)));
        b.delete_range_cf(logs, 0u64.to_be_bytes(), (log_id.index + 1).to_be_bytes());
        self.db.write(b).map_err(io_err)
    }
}

/// The state machine (module comment).
#[derive(Clone)]
pub struct RocksSm {
    db: Arc<DB>,
    dir: PathBuf,
    current: Arc<Mutex<Option<(Meta, PathBuf)>>>,
    seq: Arc<Mutex<u64>>,
}

impl RocksSm {
    fn open(dir: &Path) -> RocksSm {
        std::fs::create_dir_all(dir.join("snapshots")).expect("snapshot dir");
        RocksSm {
            db: open(&dir.join("db"), &["data", "meta"]),
            dir: dir.to_path_buf(),
            current: Arc::default(),
            seq: Arc::default(),
        }
    }

    fn next_path(&self) -> PathBuf {
        let mut s = self.seq.lock().unwrap();
        *s += 1;
        self.dir.join("snapshots").join(format!("snap-{}", *s))
    }

    /// A local read (no consensus round).
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let cf = self.db.cf_handle("data").expect("cf");
        self.db.get_cf(cf, key).expect("reading")
    }
}

impl RaftSnapshotBuilder<TypeConfig> for RocksSm {
    type SnapshotData = tokio::fs::File;

    async fn build_snapshot(&mut self) -> StorageResult<SnapshotFile> {
        self.db.flush_wal(true).map_err(io_err)?;
        let snap = self.db.snapshot();
        let (data, meta) = (
            self.db.cf_handle("data").expect("cf"),
            self.db.cf_handle("meta").expect("cf"),
        );
        let applied: Option<LogId> = snap
            .get_cf(meta, "applied")
            .map_err(io_err)?
            .and_then(|b| dec(&b));
        let membership: StoredMembership = snap
            .get_cf(meta, "membership")
            .map_err(io_err)?
            .map(|b| dec(&b))
            .unwrap_or_default();
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = snap
            .iterator_cf(data, IteratorMode::Start)
            .map(|kv| kv.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .map_err(io_err)?;
        let path = self.next_path();
        std::fs::write(&path, enc(&pairs)).map_err(io_err)?;
        let meta = Meta {
            last_log_id: applied,
            last_membership: membership,
        };
        *self.current.lock().unwrap() = Some((meta.clone(), path.clone()));
        let file = tokio::fs::File::open(&path).await.map_err(io_err)?;
        Ok(Snapshot {
            meta,
            snapshot: file,
        })
    }
}

impl RaftStateMachine<TypeConfig> for RocksSm {
    type SnapshotData = tokio::fs::File;
    type SnapshotBuilder = RocksSm;

    async fn applied_state(&mut self) -> StorageResult<(Option<LogId>, StoredMembership)> {
        let cf = self.db.cf_handle("meta").expect("cf");
        let get = |k: &str| self.db.get_cf(cf, k).expect("reading meta");
        Ok((
            get("applied").and_then(|b| dec(&b)),
            get("membership").map(|b| dec(&b)).unwrap_or_default(),
        ))
    }

    async fn apply<S>(&mut self, entries: S) -> StorageResult<()>
    where
        S: Stream<Item = Result<EntryResponder<TypeConfig>, std::io::Error>> + Unpin + Send,
    {
        let (data, meta) = (
            self.db.cf_handle("data").expect("cf"),
            self.db.cf_handle("meta").expect("cf"),
        );
        let mut entries = entries;
        let mut b = WriteBatch::default();
        let mut responders = Vec::new();
        // One batch per run of entries at hand, as the lsm-bloom state machine does.
        loop {
            let next = match futures_util::FutureExt::now_or_never(entries.next()) {
                Some(next) => next,
                None => {
                    self.db.write(std::mem::take(&mut b)).map_err(io_err)?;
                    for r in responders.drain(..).flatten() {
                        lsm_bloom::replication::openraft::storage::ApplyResponder::send(
                            r,
                            Response::default(),
                        );
                    }
                    entries.next().await
                }
            };
            let Some(item) = next else { break };
            let (e, responder) = item?;
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(r) => {
                    for op in r.ops {
                        match op {
                            Op::Put { key, value } => b.put_cf(data, key, value),
                            Op::Delete { key } => b.delete_cf(data, key),
                            other => {
                                return Err(std::io::Error::other(format!(
                                    "the RocksDB baseline store takes puts and deletes only, not {other:?}"
                                )))
                            }
                        }
                    }
                }
                EntryPayload::Membership(m) => b.put_cf(
                    meta,
                    "membership",
                    enc(&StoredMembership::new(Some(e.log_id), m)),
                ),
            }
            b.put_cf(meta, "applied", enc(&Some(e.log_id)));
            responders.push(responder);
        }
        self.db.write(b).map_err(io_err)?;
        for r in responders.into_iter().flatten() {
            lsm_bloom::replication::openraft::storage::ApplyResponder::send(r, Response::default());
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> RocksSm {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: tokio::fs::File,
    ) -> StorageResult<()> {
        let mut file = snapshot.into_std().await;
        let mut bytes = Vec::new();
        std::io::Seek::rewind(&mut file).map_err(io_err)?;
        file.read_to_end(&mut bytes).map_err(io_err)?;
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = dec(&bytes);
        let (data, m) = (
            self.db.cf_handle("data").expect("cf"),
            self.db.cf_handle("meta").expect("cf"),
        );
        let mut b = WriteBatch::default();
        b.delete_range_cf(data, [0u8].as_slice(), [0xffu8; 1024].as_slice());
        for (k, v) in pairs {
            b.put_cf(data, k, v);
        }
        b.put_cf(m, "applied", enc(&meta.last_log_id));
        b.put_cf(m, "membership", enc(&meta.last_membership));
        self.db.write(b).map_err(io_err)?;
        self.db.flush_wal(true).map_err(io_err)?;
        let path = self.next_path();
        std::fs::write(&path, &bytes).map_err(io_err)?;
        *self.current.lock().unwrap() = Some((meta.clone(), path));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<SnapshotFile>> {
        let Some((meta, path)) = self.current.lock().unwrap().clone() else {
            return Ok(None);
        };
        let file = tokio::fs::File::open(&path).await.map_err(io_err)?;
        Ok(Some(Snapshot {
            meta,
            snapshot: file,
        }))
    }
}

/// One node of the RocksDB-backed cluster, served by the crate's TCP transport.
#[derive(Clone)]
pub struct RocksNode {
    raft: Raft,
    /// Its state machine (local reads).
    pub sm: RocksSm,
    /// A snapshot being received: its bytes so far.
    receiving: Arc<tokio::sync::Mutex<Vec<u8>>>,
}

impl RocksNode {
    /// Opens node `id` under `dir` with openraft's `config`.
    pub async fn open(id: NodeId, dir: PathBuf, config: Config, net: TcpNetwork) -> RocksNode {
        let log = RocksLog::open(&dir.join("log"));
        let sm = RocksSm::open(&dir.join("sm"));
        let config = Arc::new(config.validate().expect("valid config"));
        let raft = Raft::new(id, config, net, log, sm.clone())
            .await
            .expect("starting raft");
        RocksNode {
            raft,
            sm,
            receiving: Arc::default(),
        }
    }

    /// Its Raft.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// A replicated write (leader only), acknowledged once committed and applied here.
    pub async fn put(&self, key: Vec<u8>, value: Vec<u8>) {
        let ops = vec![Op::Put { key, value }];
        self.raft
            .client_write(Request::new(ops))
            .await
            .expect("a write on the leader");
    }
}

impl RaftService for RocksNode {
    async fn append_entries(
        &self,
        req: AppendEntriesRequest<TypeConfig>,
    ) -> RpcAnswer<AppendEntriesResponse<TypeConfig>> {
        self.raft
            .append_entries(req)
            .await
            .map_err(|e| e.to_string())
    }

    fn stream_append<S>(
        &self,
        input: S,
    ) -> impl Stream<Item = RpcAnswer<StreamAppendResult<TypeConfig>>> + Send + 'static
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + 'static,
    {
        self.raft
            .stream_append(input)
            .map(|r| r.map_err(|e| e.to_string()))
    }

    async fn vote(&self, req: VoteRequest<TypeConfig>) -> RpcAnswer<VoteResponse<TypeConfig>> {
        self.raft.vote(req).await.map_err(|e| e.to_string())
    }

    /// Chunks are gathered in memory (a baseline: no checks); the last one installs them.
    async fn install_snapshot_chunk(&self, req: SnapshotChunk) -> ChunkResult {
        let mut buf = self.receiving.lock().await;
        if req.offset == 0 {
            buf.clear();
        }
        buf.extend_from_slice(&req.data);
        if !req.done {
            return Ok(ChunkAnswer::Taken(
                self.raft.metrics().borrow_watched().vote,
            ));
        }
        let path = self.sm.next_path();
        std::fs::write(&path, &*buf).map_err(|e| e.to_string())?;
        buf.clear();
        let file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| e.to_string())?;
        let snapshot = Snapshot {
            meta: req.meta.raft(),
            snapshot: file,
        };
        let r = self
            .raft
            .install_full_snapshot(req.vote, snapshot)
            .await
            .map_err(|e| e.to_string())?;
        Ok(ChunkAnswer::Taken(r.vote))
    }

    /// A forwarded write; this store runs no procedures, so there are no answers.
    async fn write(
        &self,
        request: Request,
    ) -> lsm_bloom::replication::Result<Vec<Option<Vec<u8>>>> {
        self.raft
            .client_write(request)
            .await
            .map(|_| Vec::new())
            .map_err(|e| Error::Raft(e.to_string()))
    }

    async fn read_index(&self) -> lsm_bloom::replication::Result<Option<LogId>> {
        self.raft
            .ensure_linearizable(ReadPolicy::ReadIndex)
            .await
            .map(|id| Some(*id.log_id()))
            .map_err(|e| Error::Raft(e.to_string()))
    }
}
