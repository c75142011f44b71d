//! An in-process network: nodes of one process call each other's `Raft` directly, through a
//! [`Router`] that can cut chosen links (partitions) and count what it dropped.
//!
//! It is a real openraft network (`RaftNetworkFactory`): snapshots travel as the same chunked
//! `install_snapshot` calls a TCP transport carries. It serves tests, and services that run
//! several nodes in one process; a cut link behaves as an unreachable peer.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use std::future::Future;

use futures_util::Stream;
use openraft::base::{BoxFuture, BoxStream};
use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::raft::{StreamAppendResult, TransferLeaderRequest, TransferLeaderResponse};
use openraft::{RaftNetworkFactory, RaftNetworkV2};

use super::send::send_snapshot;
use super::stalled::end_when_stalled;
use super::state_machine::SnapshotFile;
use super::{BasicNode, NodeId, ReplicatedDb, TypeConfig, Vote};

/// Connects the nodes of one process (module comment). Clones share the routes.
#[derive(Clone, Default)]
pub struct Router {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    nodes: Mutex<HashMap<NodeId, ReplicatedDb>>,
    /// Cut links, as (from, to).
    cut: Mutex<BTreeSet<(NodeId, NodeId)>>,
    dropped: AtomicU64,
}

impl Router {
    /// A router with no nodes.
    pub fn new() -> Router {
        Router::default()
    }

    /// Routes calls for `id` to `node` (replacing an earlier registration: a restarted node).
    pub fn register(&self, id: NodeId, node: ReplicatedDb) {
        self.inner
            .nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, node);
    }

    /// Stops routing to `id` (a stopped node: calls to it fail as unreachable).
    pub fn unregister(&self, id: NodeId) {
        self.inner
            .nodes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }

    /// Cuts every link between a node of `side` and a node not in it, both ways.
    pub fn partition(&self, side: &[NodeId], all: &[NodeId]) {
        let mut cut = self
            .inner
            .cut
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for &a in side {
            for &b in all.iter().filter(|b| !side.contains(b)) {
                cut.insert((a, b));
                cut.insert((b, a));
            }
        }
    }

    /// Restores every cut link.
    pub fn heal(&self) {
        self.inner
            .cut
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Calls dropped because their link was cut or their target was not registered.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed)
    }

    /// The network factory for node `from`.
    pub fn network(&self, from: NodeId) -> RouterNetwork {
        RouterNetwork {
            router: self.clone(),
            from,
        }
    }

    fn route(&self, from: NodeId, to: NodeId) -> Result<ReplicatedDb, Unreachable<TypeConfig>> {
        let cut = self
            .inner
            .cut
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&(from, to));
        let raft = if cut {
            None
        } else {
            self.inner
                .nodes
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&to)
                .cloned()
        };
        raft.ok_or_else(|| {
            self.inner.dropped.fetch_add(1, Ordering::Relaxed);
            Unreachable::new(&std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("no route from node {from} to node {to}"),
            ))
        })
    }
}

/// Node `from`'s side of a [`Router`] (openraft's `RaftNetworkFactory`).
#[derive(Clone)]
pub struct RouterNetwork {
    router: Router,
    from: NodeId,
}

/// One link of a [`Router`] (openraft's `RaftNetwork`).
pub struct RouterLink {
    router: Router,
    from: NodeId,
    to: NodeId,
}

impl RaftNetworkFactory<TypeConfig> for RouterNetwork {
    type Network = RouterLink;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> RouterLink {
        RouterLink {
            router: self.router.clone(),
            from: self.from,
            to: target,
        }
    }
}

impl RouterLink {
    /// The target node, checked again after the call: a link cut while the call ran
    /// loses the answer, as a real network would.
    fn node(&self) -> Result<ReplicatedDb, Unreachable<TypeConfig>> {
        self.router.route(self.from, self.to)
    }

    fn still_up<T>(&self, v: T) -> Result<T, Unreachable<TypeConfig>> {
        self.node().map(|_| v)
    }

    fn remote(&self, e: impl std::fmt::Display) -> RPCError<TypeConfig> {
        RPCError::Network(NetworkError::new(&std::io::Error::other(format!(
            "node {}: {e}",
            self.to
        ))))
    }
}

impl RaftNetworkV2<TypeConfig> for RouterLink {
    type SnapshotData = tokio::fs::File;

    /// openraft's sequential stream (each append answered before the next is sent), ended at
    /// a repeated entry-less append (`stalled.rs`).
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<
        's,
        Result<
            BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RPCError<TypeConfig>>>,
            RPCError<TypeConfig>,
        >,
    >
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + Send + Unpin + 'static,
    {
        openraft::network::stream_append_sequential(self, end_when_stalled(input), option)
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        let node = self.node().map_err(RPCError::Unreachable)?;
        let resp = node
            .raft()
            .append_entries(rpc)
            .await
            .map_err(|e| self.remote(e))?;
        self.still_up(resp).map_err(RPCError::Unreachable)
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: SnapshotFile,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let chunk_size = option.snapshot_chunk_size().unwrap_or(1 << 20);
        send_snapshot(vote, snapshot, chunk_size, cancel, |chunk| {
            let link = RouterLink {
                router: self.router.clone(),
                from: self.from,
                to: self.to,
            };
            async move {
                let node = link.node().map_err(RPCError::Unreachable)?;
                let answer = node
                    .install_snapshot_chunk(chunk)
                    .await
                    .map_err(|e| link.remote(e))?;
                link.still_up(answer).map_err(RPCError::Unreachable)
            }
        })
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        let node = self.node().map_err(RPCError::Unreachable)?;
        let resp = node.raft().vote(rpc).await.map_err(|e| self.remote(e))?;
        self.still_up(resp).map_err(RPCError::Unreachable)
    }

    /// Leadership transfer (`Raft::trigger().transfer_leader`), which the TCP transport
    /// does not carry.
    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let node = self.node().map_err(RPCError::Unreachable)?;
        let resp = node
            .raft()
            .handle_transfer_leader(req)
            .await
            .map_err(|e| self.remote(e))?;
        self.still_up(resp).map_err(RPCError::Unreachable)
    }
}
