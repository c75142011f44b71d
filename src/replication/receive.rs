//! Receiving a snapshot in chunks, verified before openraft sees it.
//!
//! openraft's own receiver hands the assembled snapshot straight to the state machine, and a
//! state machine that refuses it (a damaged pack) is a storage error, which stops the node.
//! So the transports call [`Receiver::chunk`] instead: chunks are appended to a file under
//! the state machine's `snapshots/`, in order (a chunk that does not continue the stream is
//! answered with openraft's `SnapshotMismatch`, and the sender starts over); the last one is
//! followed by a full check of the pack (`snapshot::verify`: every name, size and CRC) and of
//! its meta against the announced one. Only a pack that passes is given to
//! `Raft::install_full_snapshot`. One that fails is removed, counted, and answered with a
//! mismatch at offset 0, so the sender sends it again from the start.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::error::{InstallSnapshotError, RaftError, SnapshotMismatch};
use openraft::raft::{InstallSnapshotRequest, InstallSnapshotResponse};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::SnapshotSegmentId;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};
use tokio::sync::Mutex;

use super::snapshot;
use super::{NodeId, Raft, StateMachine, TypeConfig};

/// A stream being received.
struct Stream {
    id: String,
    offset: u64,
    file: Box<tokio::fs::File>,
}

/// One node's snapshot receiver. Clones share it.
#[derive(Clone, Default)]
pub(crate) struct Receiver {
    stream: Arc<Mutex<Option<Stream>>>,
    refused: Arc<AtomicU64>,
}

type ChunkResult = Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>;

fn mismatch(expect: (&str, u64), got: (&str, u64)) -> RaftError<NodeId, InstallSnapshotError> {
    RaftError::APIError(InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
        expect: SnapshotSegmentId {
            id: expect.0.to_owned(),
            offset: expect.1,
        },
        got: SnapshotSegmentId {
            id: got.0.to_owned(),
            offset: got.1,
        },
    }))
}

fn fatal(e: impl std::fmt::Display) -> RaftError<NodeId, InstallSnapshotError> {
    RaftError::Fatal(openraft::error::Fatal::StorageError(
        openraft::StorageIOError::<NodeId>::write_snapshot(
            None,
            openraft::AnyError::error(e.to_string()),
        )
        .into(),
    ))
}

impl Receiver {
    /// Snapshots refused because their pack failed its checks.
    pub(crate) fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Takes one chunk of a snapshot stream for `raft`, whose state machine is `sm`.
    pub(crate) async fn chunk(
        &self,
        raft: &Raft,
        sm: &StateMachine,
        req: InstallSnapshotRequest<TypeConfig>,
    ) -> ChunkResult {
        let my_vote = raft.metrics().borrow().vote;
        let resp = InstallSnapshotResponse { vote: my_vote };
        if req.vote < my_vote {
            return Ok(resp);
        }
        let id = req.meta.snapshot_id.clone();
        let mut guard = self.stream.lock().await;
        if req.offset == 0 {
            let file = sm.clone().begin_receiving_snapshot().await.map_err(fatal)?;
            *guard = Some(Stream {
                id: id.clone(),
                offset: 0,
                file,
            });
        }
        let Some(stream) = guard.as_mut() else {
            return Err(mismatch((&id, 0), (&id, req.offset)));
        };
        if stream.id != id || stream.offset != req.offset {
            return Err(mismatch((&stream.id, stream.offset), (&id, req.offset)));
        }
        stream.file.write_all(&req.data).await.map_err(fatal)?;
        stream.offset += req.data.len() as u64;
        if !req.done {
            return Ok(resp);
        }
        let Some(mut stream) = guard.take() else {
            return Err(mismatch((&id, 0), (&id, req.offset)));
        };
        drop(guard);
        stream.file.flush().await.map_err(fatal)?;
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
            Ok(m) => m.last_log_id == req.meta.last_log_id && m.snapshot_id == id,
            Err(_) => false,
        };
        if !ok {
            self.refused.fetch_add(1, Ordering::Relaxed);
            sm.discard_received();
            return Err(mismatch((&id, 0), (&id, req.offset)));
        }
        stream.file.rewind().await.map_err(fatal)?;
        let snapshot = Snapshot {
            meta: req.meta,
            snapshot: stream.file,
        };
        let r = raft
            .install_full_snapshot(req.vote, snapshot)
            .await
            .map_err(RaftError::Fatal)?;
        Ok(InstallSnapshotResponse { vote: r.vote })
    }
}
