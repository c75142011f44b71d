//! The calling side: [`TcpNetwork`] (openraft's network factory) and its per-peer
//! [`TcpLink`]s, each keeping one connection for plain calls and opening pipelined append
//! streams (`pipeline.rs`) and snapshot transfers (`send.rs`) as openraft asks.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use openraft::base::{BoxFuture, BoxStream};
use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{RaftNetworkFactory, RaftNetworkV2};
use tokio::io::AsyncReadExt;

use super::{
    allowance, pipeline, read_payload, write_frame, Conn, PeerAuth, Tally, TransportStats,
};
use crate::replication::receive::ChunkAnswer;
use crate::replication::send::send_snapshot;
use crate::replication::stalled::end_when_stalled;
use crate::replication::state_machine::SnapshotFile;
use crate::replication::wire::{self, Response, FRAME_HEADER, MAX_FRAME};
use crate::replication::{BasicNode, NodeId, TypeConfig, Vote};

/// Outgoing calls over TCP (openraft's `RaftNetworkFactory`): one link per peer, to the
/// address its membership entry names, authenticated as `PeerAuth` says. Clones share the
/// counters.
#[derive(Clone)]
pub struct TcpNetwork {
    auth: PeerAuth,
    stats: Arc<TransportStats>,
}

impl TcpNetwork {
    /// A network with fresh counters, calling as `auth`.
    pub fn new(auth: PeerAuth) -> TcpNetwork {
        TcpNetwork {
            auth,
            stats: Arc::default(),
        }
    }

    /// Its counters (the client side of every link).
    pub fn stats(&self) -> &TransportStats {
        &self.stats
    }
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpLink;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> TcpLink {
        TcpLink {
            target,
            addr: node.addr.clone(),
            auth: self.auth.clone(),
            stream: None,
            tally: self.stats.tally(target),
        }
    }
}

/// One peer's link (openraft's `RaftNetwork`).
pub struct TcpLink {
    pub(super) target: NodeId,
    pub(super) addr: String,
    pub(super) auth: PeerAuth,
    pub(super) stream: Option<Conn>,
    pub(super) tally: Tally,
}

/// Why a call failed: the peer could not be reached, or the exchange broke off.
pub(super) enum CallError {
    Unreachable(io::Error),
    Network(io::Error),
}

impl From<CallError> for RPCError<TypeConfig> {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
        }
    }
}

impl TcpLink {
    /// Sends `payload` and reads the answer within `ttl` and the payload's `allowance`; any
    /// failure drops the connection.
    pub(super) async fn call(
        &mut self,
        payload: &[u8],
        ttl: Duration,
    ) -> Result<Response, CallError> {
        self.call_framed(&wire::frame(payload), ttl).await
    }

    /// `call` with the request already framed (`wire::frame`).
    pub(super) async fn call_framed(
        &mut self,
        frame: &[u8],
        ttl: Duration,
    ) -> Result<Response, CallError> {
        let ttl = ttl + allowance(frame.len());
        let result = tokio::time::timeout(ttl, self.exchange(frame)).await;
        let result = match result {
            Ok(r) => r,
            Err(_) => Err(CallError::Network(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no answer from node {} at {} within {ttl:?}",
                    self.target, self.addr
                ),
            ))),
        };
        if result.is_err() {
            self.tally.failed();
        }
        result
    }

    /// One request and its answer. The connection is taken out of the link for the
    /// exchange and put back only once the answer is read whole: a call dropped midway (openraft
    /// cancels calls, and times heartbeats out) closes the connection rather than leave an
    /// answer unread on it for the next call to take as its own.
    async fn exchange(&mut self, frame: &[u8]) -> Result<Response, CallError> {
        let mut stream = match self.stream.take() {
            Some(s) => s,
            None => {
                let s = self
                    .auth
                    .connect(&self.addr, self.target)
                    .await
                    .map_err(CallError::Unreachable)?;
                self.tally.connected();
                s
            }
        };
        write_frame(&mut stream, frame)
            .await
            .map_err(CallError::Network)?;
        self.tally.frame_out(frame.len());
        let mut header = [0u8; FRAME_HEADER];
        stream
            .read_exact(&mut header)
            .await
            .map_err(CallError::Network)?;
        let bad =
            |what: String| CallError::Network(io::Error::new(io::ErrorKind::InvalidData, what));
        let (body, _) = read_payload(&mut stream, &header, None)
            .await
            .map_err(|_| bad(format!("a malformed frame from node {}", self.target)))?;
        let r = wire::decode_response(&body).map_err(|m| {
            self.tally.bad_frame();
            bad(format!("node {} answered: {m}", self.target))
        })?;
        self.tally.frame_in(FRAME_HEADER + body.len());
        self.stream = Some(stream);
        Ok(r)
    }

    /// The error for an answer that is not the call's.
    pub(super) fn unexpected(&self, r: Response) -> NetworkError<TypeConfig> {
        let msg = match r {
            Response::Failed(m) => format!("node {} failed the call: {m}", self.target),
            _ => format!("node {} answered with the wrong message", self.target),
        };
        NetworkError::new(&io::Error::other(msg))
    }
}

impl RaftNetworkV2<TypeConfig> for TcpLink {
    type SnapshotData = tokio::fs::File;

    /// Pipelined appends, on a connection of the stream's own (`pipeline.rs`); a stream of one
    /// append (a heartbeat) is a plain call on the link's connection. The stream ends at a
    /// repeated entry-less append (`stalled.rs`).
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<'s, Result<BoxStream<'s, pipeline::StreamItem>, RPCError<TypeConfig>>>
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
    {
        Box::pin(pipeline::stream(self, end_when_stalled(input), option))
    }

    /// Sends as many entries as fit one frame; when that is fewer than asked, a success is
    /// reported as a partial one up to the last entry sent (openraft sends the rest next).
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let (frame, sent) = wire::append_frame(&rpc, MAX_FRAME);
        match self.call_framed(&frame, option.hard_ttl()).await? {
            Response::Append(AppendEntriesResponse::Success) if sent < rpc.entries.len() => {
                Ok(AppendEntriesResponse::PartialSuccess(
                    rpc.entries.get(sent.wrapping_sub(1)).map(|e| e.log_id),
                ))
            }
            Response::Append(a) => Ok(a),
            r => Err(RPCError::Network(self.unexpected(r))),
        }
    }

    /// Streams the snapshot's pack in chunks (`send.rs`), one call per chunk.
    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: SnapshotFile,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let chunk_size = option.snapshot_chunk_size().unwrap_or(1 << 20);
        let ttl = option.hard_ttl();
        let link = tokio::sync::Mutex::new(self);
        send_snapshot(vote, snapshot, chunk_size, cancel, |chunk| {
            let link = &link;
            // The last chunk's answer comes once the receiver has checked, unpacked and synced
            // the whole pack: its deadline grows with the pack's size.
            let ttl = match chunk.done {
                true => ttl + allowance(usize::try_from(chunk.offset).unwrap_or(usize::MAX)),
                false => ttl,
            };
            async move {
                let mut link = link.lock().await;
                match link.call(&wire::encode_snapshot(&chunk), ttl).await? {
                    Response::Snapshot(vote) => Ok(ChunkAnswer::Taken(vote)),
                    Response::SnapshotMismatch { expect, got } => {
                        Ok(ChunkAnswer::Mismatch { expect, got })
                    }
                    r => Err(RPCError::Network(link.unexpected(r))),
                }
            }
        })
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        match self
            .call(&wire::encode_vote_request(&rpc), option.hard_ttl())
            .await?
        {
            Response::Vote(v) => Ok(v),
            r => Err(RPCError::Network(self.unexpected(r))),
        }
    }
}
