//! What a transport's server side asks of the node it serves.
//!
//! `tcp::RaftServer` decodes each incoming call and hands it to a [`RaftService`]:
//! openraft's RPCs go to its `Raft`, and a follower's forwarded writes and read index requests
//! go to the node's own calls. [`ReplicatedDb`] is the service this crate provides. A service
//! that runs openraft over stores of its own (the benchmark's RocksDB-backed baseline does)
//! implements the trait to use the same transport.

use std::future::Future;

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{InstallSnapshotRequest, InstallSnapshotResponse};
use openraft::LogId;

use super::{NodeId, Raft, ReplicatedDb, Request, Result, TypeConfig};

/// A node as a transport's server sees it.
pub trait RaftService: Clone + Send + Sync + 'static {
    /// The node's Raft: incoming `append_entries` and `vote` calls are handed to it.
    fn raft(&self) -> &Raft;

    /// One chunk of a snapshot the leader sends. Errors are openraft's, so the sender learns
    /// of a mismatch and starts over.
    fn install_snapshot_chunk(
        &self,
        req: InstallSnapshotRequest<TypeConfig>,
    ) -> impl Future<
        Output = std::result::Result<
            InstallSnapshotResponse<NodeId>,
            RaftError<NodeId, InstallSnapshotError>,
        >,
    > + Send;

    /// A write a follower forwarded: done once committed and applied here, or
    /// `Error::NotLeader` naming the leader this node knows of.
    fn write(&self, request: Request) -> impl Future<Output = Result<()>> + Send;

    /// A read index for a follower's linearizable read: a position covering every write
    /// acknowledged before the call began (`Error::NotLeader` when this node does not lead).
    fn read_index(&self) -> impl Future<Output = Result<Option<LogId<NodeId>>>> + Send;
}

impl RaftService for ReplicatedDb {
    fn raft(&self) -> &Raft {
        ReplicatedDb::raft(self)
    }

    async fn install_snapshot_chunk(
        &self,
        req: InstallSnapshotRequest<TypeConfig>,
    ) -> std::result::Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>
    {
        ReplicatedDb::install_snapshot_chunk(self, req).await
    }

    async fn write(&self, request: Request) -> Result<()> {
        ReplicatedDb::write(self, request).await
    }

    async fn read_index(&self) -> Result<Option<LogId<NodeId>>> {
        ReplicatedDb::read_index(self).await
    }
}
