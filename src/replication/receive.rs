//! Receiving a snapshot in chunks, verified before openraft sees it.
//!
//! openraft leaves moving a snapshot to the network: the sender (`send.rs`) streams its pack
//! in chunks, and the transports hand each one to [`Receiver::chunk`]. A state machine that
//! refused a damaged pack would be a storage error, which stops the node, so nothing reaches
//! openraft unchecked: chunks are appended to a file under the state machine's
//! `snapshots/`, in order (a chunk that does not continue the stream is answered with a
//! mismatch, and the sender starts over); the last one is
//! followed by a full check of the pack (`snapshot::verify`: every name, size and CRC) and of
//! its meta against the announced one, once the pack is synced to disk. Only a pack that
//! passes is given to `Raft::install_full_snapshot`. One that fails is removed, counted, and
//! answered with a mismatch at offset 0, so the sender sends it again from the start.
//!
//! Only the leader that opened a stream (its vote: same term and node) or a newer one can
//! restart it with a chunk at offset 0. A stream may grow to `max_snapshot_bytes`, and each
//! chunk needs its size and `DISK_RESERVE` free on the disk (the last one, the pack's size
//! again, for unpacking); otherwise the stream is dropped and the call fails.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::async_runtime::watch::WatchReceiver;
use openraft::storage::Snapshot;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};
use tokio::sync::Mutex;

use super::snapshot;
use super::wire::{Segment, SnapshotChunk};
use super::{Raft, StateMachine, Vote};

/// Bytes a received chunk must leave free on the disk.
const DISK_RESERVE: u64 = 64 << 20;

/// A stream being received.
struct Stream {
    /// The vote of the leader sending it.
    vote: Vote,
    id: String,
    offset: u64,
    file: tokio::fs::File,
}

/// One node's snapshot receiver. Clones share it.
#[derive(Clone)]
pub(crate) struct Receiver {
    stream: Arc<Mutex<Option<Stream>>>,
    refused: Arc<AtomicU64>,
    max_bytes: u64,
}

/// What a receiver answers a chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChunkAnswer {
    /// Taken (the whole snapshot installed, after the last chunk): the receiver's vote.
    Taken(Vote),
    /// The chunk does not continue the stream the receiver has: the sender starts over.
    Mismatch {
        /// Where the receiver's stream stands.
        expect: Segment,
        /// Where the chunk began.
        got: Segment,
    },
}

/// A receiver's failure (its storage, or the node stopping): the message says which.
pub type ChunkResult = Result<ChunkAnswer, String>;

fn mismatch(expect: (&str, u64), got: (&str, u64)) -> ChunkAnswer {
    let seg = |(id, offset): (&str, u64)| Segment {
        id: id.to_owned(),
        offset,
    };
    ChunkAnswer::Mismatch {
        expect: seg(expect),
        got: seg(got),
    }
}

fn fatal(e: impl std::fmt::Display) -> String {
    format!("receiving a snapshot: {e}")
}

impl Receiver {
    /// A receiver taking snapshots of up to `max_bytes`.
    pub(crate) fn new(max_bytes: u64) -> Receiver {
        Receiver {
            stream: Arc::default(),
            refused: Arc::default(),
            max_bytes,
        }
    }

    /// Snapshots refused because their pack failed its checks, or was too large for the
    /// limit or the disk.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Takes one chunk of a snapshot stream for `raft`, whose state machine is `sm`.
    pub(crate) async fn chunk(
        &self,
        raft: &Raft,
        sm: &StateMachine,
        req: SnapshotChunk,
    ) -> ChunkResult {
        let my_vote = raft.metrics().borrow_watched().vote;
        let resp = ChunkAnswer::Taken(my_vote);
        if req.vote < my_vote {
            return Ok(resp);
        }
        snapshot::check_snapshot_id(&req.meta.snapshot_id).map_err(fatal)?;
        let id = req.meta.snapshot_id.clone();
        let mut guard = self.stream.lock().await;
        if req.offset == 0 {
            // Only the stream's own leader, or a newer one, starts it over.
            if let Some(s) = guard.as_ref().filter(|s| req.vote < s.vote) {
                return Ok(mismatch((&s.id, s.offset), (&id, req.offset)));
            }
            let file = sm.begin_receiving_snapshot().await.map_err(fatal)?;
            *guard = Some(Stream {
                vote: req.vote,
                id: id.clone(),
                offset: 0,
                file,
            });
        }
        let Some(stream) = guard.as_mut() else {
            return Ok(mismatch((&id, 0), (&id, req.offset)));
        };
        if stream.id != id || stream.offset != req.offset || stream.vote != req.vote {
            return Ok(mismatch((&stream.id, stream.offset), (&id, req.offset)));
        }
        let size = stream.offset.saturating_add(req.data.len() as u64);
        // The last chunk needs room for the unpacked store too (about the pack's size).
        let room = match req.done {
            true => (req.data.len() as u64).saturating_add(size),
            false => req.data.len() as u64,
        };
        let refusal = if size > self.max_bytes {
            Some(format!(
                "snapshot {id} is over max_snapshot_bytes ({} bytes)",
                self.max_bytes
            ))
        } else {
            match sm.free_bytes() {
                Some(free) if free < room.saturating_add(DISK_RESERVE) => Some(format!(
                    "snapshot {id}: {free} bytes free on the disk, {room} needed and {DISK_RESERVE} kept"
                )),
                _ => None,
            }
        };
        if let Some(why) = refusal {
            *guard = None;
            self.refused.fetch_add(1, Ordering::Relaxed);
            sm.discard_received();
            return Err(fatal(why));
        }
        stream.file.write_all(&req.data).await.map_err(fatal)?;
        stream.offset += req.data.len() as u64;
        if !req.done {
            return Ok(resp);
        }
        let Some(mut stream) = guard.take() else {
            return Ok(mismatch((&id, 0), (&id, req.offset)));
        };
        drop(guard);
        stream.file.flush().await.map_err(fatal)?;
        // On disk before it is checked, and so before it can become this node's snapshot.
        stream.file.sync_all().await.map_err(fatal)?;
        stream.file.rewind().await.map_err(fatal)?;
        let check = stream
            .file
            .try_clone()
            .await
            .map_err(fatal)?
            .into_std()
            .await;
        let verified = tokio::task::spawn_blocking(move || snapshot::verify(check))
            .await
            .map_err(fatal)?;
        let ok = match &verified {
            Ok(m) => {
                m.last_log_id == req.meta.last_log_id
                    && m.last_membership == req.meta.last_membership
            }
            Err(_) => false,
        };
        if !ok {
            self.refused.fetch_add(1, Ordering::Relaxed);
            sm.discard_received();
            return Ok(mismatch((&id, 0), (&id, req.offset)));
        }
        stream.file.rewind().await.map_err(fatal)?;
        let snapshot = Snapshot {
            meta: req.meta.raft(),
            snapshot: stream.file,
        };
        let r = raft
            .install_full_snapshot(req.vote, snapshot)
            .await
            .map_err(fatal)?;
        Ok(ChunkAnswer::Taken(r.vote))
    }
}
