//! What a transport's server side asks of the node it serves.
//!
//! `tcp::RaftServer` decodes each incoming call and hands it to a [`RaftService`]:
//! openraft's RPCs go to its `Raft`, and a follower's forwarded writes and read index requests
//! go to the node's own calls. [`ReplicatedDb`] is the service this crate provides. A service
//! that runs openraft over stores of its own (the benchmark's RocksDB-backed baseline does)
//! implements the trait to use the same transport.

use std::future::Future;

use futures_util::{Stream, StreamExt};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, StreamAppendResult, VoteRequest, VoteResponse,
};

use super::receive::ChunkResult;
use super::wire::SnapshotChunk;
use super::{LogId, ReplicatedDb, Request, Result, TypeConfig};

/// What a service answers an RPC: openraft's response, or why the node failed the call.
pub type RpcAnswer<T> = std::result::Result<T, String>;

/// A node as a transport's server sees it.
pub trait RaftService: Clone + Send + Sync + 'static {
    /// An incoming `append_entries`, handed to the node's `Raft`.
    fn append_entries(
        &self,
        req: AppendEntriesRequest<TypeConfig>,
    ) -> impl Future<Output = RpcAnswer<AppendEntriesResponse<TypeConfig>>> + Send;

    /// An incoming pipelined stream of appends, handed to the node's `Raft`
    /// (`Raft::stream_append`): one answer per append, in order.
    fn stream_append<S>(
        &self,
        input: S,
    ) -> impl Stream<Item = RpcAnswer<StreamAppendResult<TypeConfig>>> + Send + 'static
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + 'static;

    /// An incoming `vote`, handed to the node's `Raft`.
    fn vote(
        &self,
        req: VoteRequest<TypeConfig>,
    ) -> impl Future<Output = RpcAnswer<VoteResponse<TypeConfig>>> + Send;

    /// One chunk of a snapshot the leader sends: taken, or a mismatch, so the sender starts
    /// over; an error is the receiver's failure.
    fn install_snapshot_chunk(
        &self,
        req: SnapshotChunk,
    ) -> impl Future<Output = ChunkResult> + Send;

    /// A write a follower forwarded: done once committed and applied here, answering its
    /// calls' answers (`ReplicatedDb::write_answered`), or `Error::NotLeader` naming the
    /// leader this node knows of.
    fn write(&self, request: Request) -> impl Future<Output = Result<Vec<Option<Vec<u8>>>>> + Send;

    /// A read index for a follower's linearizable read: a position covering every write
    /// acknowledged before the call began (`Error::NotLeader` when this node does not lead).
    fn read_index(&self) -> impl Future<Output = Result<Option<LogId>>> + Send;
}

impl RaftService for ReplicatedDb {
    async fn append_entries(
        &self,
        req: AppendEntriesRequest<TypeConfig>,
    ) -> RpcAnswer<AppendEntriesResponse<TypeConfig>> {
        self.raft()
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
        self.raft()
            .stream_append(input)
            .map(|r| r.map_err(|e| e.to_string()))
    }

    async fn vote(&self, req: VoteRequest<TypeConfig>) -> RpcAnswer<VoteResponse<TypeConfig>> {
        self.raft().vote(req).await.map_err(|e| e.to_string())
    }

    async fn install_snapshot_chunk(&self, req: SnapshotChunk) -> ChunkResult {
        ReplicatedDb::install_snapshot_chunk(self, req).await
    }

    async fn write(&self, request: Request) -> Result<Vec<Option<Vec<u8>>>> {
        ReplicatedDb::write_answered(self, request).await
    }

    async fn read_index(&self) -> Result<Option<LogId>> {
        ReplicatedDb::read_index(self).await
    }
}
