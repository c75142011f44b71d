//! Sending a snapshot: the pack openraft hands the network (`RaftNetworkV2::full_snapshot`),
//! streamed in chunks of `Config::snapshot_max_chunk_size` bytes (openraft passes it in the
//! call's `RPCOption`), each answered before the next goes (`receive.rs` is
//! the other end). A mismatch answer to a chunk restarts the stream from the start; one to
//! the last chunk (the receiver refused the whole pack) ends it with an error, as does a
//! receiver with a newer vote. The sender holds one chunk in memory.

use std::future::Future;
use std::io::SeekFrom;

use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError};
use openraft::raft::SnapshotResponse;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::receive::ChunkAnswer;
use super::snapshot::Meta as PackMeta;
use super::state_machine::SnapshotFile;
use super::wire::SnapshotChunk;
use super::{TypeConfig, Vote};

/// Restarts after mismatches before a stream gives up (openraft sends it again later).
const MAX_RESTARTS: usize = 3;

fn net_err(m: impl std::fmt::Display) -> StreamingError<TypeConfig> {
    StreamingError::Network(NetworkError::new(&std::io::Error::other(m.to_string())))
}

/// Streams `snapshot` under `vote`, `chunk_size` bytes at a time: `call` sends one chunk and returns the receiver's
/// answer. Ends early, with `Closed`, when `cancel` completes.
pub(crate) async fn send_snapshot<F, Fut>(
    vote: Vote,
    snapshot: SnapshotFile,
    chunk_size: usize,
    cancel: impl Future<Output = ReplicationClosed> + Send,
    mut call: F,
) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>>
where
    F: FnMut(SnapshotChunk) -> Fut,
    Fut: Future<Output = Result<ChunkAnswer, RPCError<TypeConfig>>>,
{
    let mut file = snapshot.snapshot;
    // The stream's id: the log id the snapshot ends at, and a nonce, so that a receiver
    // never mixes two streams of the same snapshot.
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let snapshot_id = match &snapshot.meta.last_log_id {
        Some(id) => format!(
            "{}-{}-{}-{nonce}",
            id.leader_id.term, id.leader_id.node_id, id.index
        ),
        None => format!("0-0-0-{nonce}"),
    };
    let meta = PackMeta {
        last_log_id: snapshot.meta.last_log_id,
        last_membership: snapshot.meta.last_membership,
        snapshot_id,
    };
    let stream = async {
        let mut restarts = 0;
        let mut offset = 0u64;
        let mut buf = vec![0u8; chunk_size.max(1)];
        file.seek(SeekFrom::Start(0)).await.map_err(net_err)?;
        loop {
            let mut n = 0;
            while n < buf.len() {
                let got = file.read(&mut buf[n..]).await.map_err(net_err)?;
                if got == 0 {
                    break;
                }
                n += got;
            }
            let done = n < buf.len();
            let chunk = SnapshotChunk {
                vote,
                meta: meta.clone(),
                offset,
                data: buf[..n].to_vec(),
                done,
            };
            let answer = call(chunk).await.map_err(|e| match e {
                RPCError::Timeout(t) => StreamingError::Timeout(t),
                RPCError::Unreachable(u) => StreamingError::Unreachable(u),
                RPCError::Network(n) => StreamingError::Network(n),
                RPCError::RemoteError(r) => net_err(r),
            })?;
            match answer {
                ChunkAnswer::Taken(theirs) if theirs > vote => {
                    return Ok(SnapshotResponse { vote: theirs });
                }
                ChunkAnswer::Taken(theirs) if done => return Ok(SnapshotResponse { vote: theirs }),
                ChunkAnswer::Taken(_) => offset += n as u64,
                // The receiver checked the whole pack and refused it: sending the same bytes
                // again cannot help.
                ChunkAnswer::Mismatch { .. } if done => {
                    return Err(net_err(format!(
                        "the receiver refused snapshot {}: its pack failed the checks",
                        meta.snapshot_id
                    )));
                }
                ChunkAnswer::Mismatch { .. } => {
                    restarts += 1;
                    if restarts > MAX_RESTARTS {
                        return Err(net_err(format!(
                            "snapshot {} refused {restarts} times",
                            meta.snapshot_id
                        )));
                    }
                    offset = 0;
                    file.seek(SeekFrom::Start(0)).await.map_err(net_err)?;
                }
            }
        }
    };
    tokio::select! {
        r = stream => r,
        closed = cancel => Err(StreamingError::Closed(closed)),
    }
}
