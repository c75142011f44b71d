//! `ReplicatedDb`: one node of a replicated store — its log, its state machine and its
//! `openraft::Raft` — with the calls a service makes: writes through the leader, reads with
//! a chosen consistency, membership changes, metrics.
//!
//! Writes go through `Raft::client_write`: acknowledged once a majority has the entry durably
//! in its log and this node has applied it. A write on a follower is refused with
//! `Error::NotLeader` naming the leader (the caller forwards it or redirects its client).
//! A linearizable read asks the leader to confirm its leadership with a quorum (read index)
//! and waits until this node has applied up to the commit index it learnt, then reads the
//! local store, so it keeps the filters' saving: an absent key costs what it costs on one
//! node. On a leader that confirmed its leadership within its lease (`lease.rs`), the read
//! skips the round.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::watch::WatchReceiver;
use openraft::{ChangeMembers, Config, RaftMetrics, RaftNetworkFactory};

use super::batch::Batcher;
use super::lease::Lease;
use super::read_index::ReadIndex;
use super::receive::{ChunkResult, Receiver};
use super::wire::SnapshotChunk;
use super::{
    raft_err, BasicNode, Error, LogId, LogStore, NodeId, Op, Procedures, Raft, Request, Result,
    StateMachine, TypeConfig,
};
use crate::db::Options;

/// How a read is served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadPolicy {
    /// Sees every write acknowledged before the read began: the leader serves it under its
    /// lease (`ReplicationConfig::read_lease`), or confirms its leadership with a quorum
    /// first when the lease has run out (on a follower: `Error::NotLeader`). Relies on
    /// clocks whose rates differ by less than 2×.
    #[default]
    Linearizable,
    /// As `Linearizable`, but always confirms leadership with a quorum (one round per batch
    /// of concurrent readers), never relying on clocks.
    ReadIndex,
    /// This node's applied state as it is: no round trip, may miss recent writes (on a
    /// follower or a deposed leader).
    Local,
}

/// How a node runs: openraft's timing and snapshot policy, and the state machine's store.
/// `ReplicationConfig::default()` and the `with_*` setters; `#[non_exhaustive]` (see
/// `Options`).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReplicationConfig {
    /// openraft's config (heartbeats, election timeouts, snapshot policy, chunk size).
    pub raft: Config,
    /// Options of the state machine's store (filters, compression, cache); its `fs` serves the
    /// log's store too.
    pub db: Options,
    /// How long a write or a linearizable read waits for a quorum before it fails with
    /// `Error::Timeout`.
    pub request_timeout: Duration,
    /// How long after a read index round began the leader serves linearizable reads without
    /// another (`lease.rs`); at most `raft.election_timeout_max / 2`. `None`: every
    /// linearizable read runs a round, as `ReadPolicy::ReadIndex` does.
    pub read_lease: Option<Duration>,
    /// The largest snapshot this node takes from a leader, in bytes of its pack: a stream
    /// that grows past it is dropped (counted in `snapshots_refused`). A chunk is also
    /// refused while the disk has less than it and 64 MiB free.
    pub max_snapshot_bytes: u64,
    /// What `Op::Call`s run when applied; every node must have the same (`Procedures`).
    /// `None`: a call answers `NO_PROCEDURES` and writes nothing.
    pub procedures: Option<Arc<dyn Procedures>>,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        ReplicationConfig {
            raft: Config {
                cluster_name: "lsm-bloom".into(),
                heartbeat_interval: 100,
                election_timeout_min: 400,
                election_timeout_max: 800,
                // Entries kept behind the last snapshot, so a follower a little behind
                // catches up from the log rather than by a whole snapshot.
                max_in_snapshot_log_to_keep: 1000,
                snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(10_000),
                snapshot_max_chunk_size: 1 << 20,
                // A node whose directory was deleted rejoins under its id: the leader
                // restarts its search of that follower's log instead of refusing it (tested
                // by `a_wiped_follower_rejoins_under_its_id...`).
                allow_log_reversion: Some(true),
                // The transport carries no pre-vote RPC (FORMAT.md §8).
                enable_pre_vote: Some(false),
                ..Config::default()
            },
            db: Options::default(),
            request_timeout: Duration::from_secs(5),
            // A quarter of election_timeout_max: followers refuse votes for 800 ms after a
            // heartbeat, so the lease holds with clock rates up to 4x apart.
            read_lease: Some(Duration::from_millis(200)),
            max_snapshot_bytes: 256 << 30,
            procedures: None,
        }
    }
}

setters!(ReplicationConfig {
    with_raft => raft: Config,
    with_db => db: Options,
    with_request_timeout => request_timeout: Duration,
    with_read_lease => read_lease: Option<Duration>,
    with_max_snapshot_bytes => max_snapshot_bytes: u64,
    with_procedures => procedures: Option<Arc<dyn Procedures>>,
});

/// One node of a replicated lsm-bloom store (module comment).
#[derive(Clone)]
pub struct ReplicatedDb {
    id: NodeId,
    batcher: Batcher,
    reads: ReadIndex,
    lease: Lease,
    receiver: Receiver,
    timeout: Duration,
    raft: Raft,
    pub(super) sm: StateMachine,
    log: LogStore,
}

impl ReplicatedDb {
    /// Opens node `id`'s stores under `dir` (`log/`, `sm/`) and starts its Raft with
    /// `network`. A node restarted with the same directory rejoins with its state; a new
    /// cluster needs [`ReplicatedDb::initialize`] on one node, once.
    pub async fn open<N>(
        id: NodeId,
        dir: impl AsRef<Path>,
        config: ReplicationConfig,
        network: N,
    ) -> Result<ReplicatedDb>
    where
        N: RaftNetworkFactory<TypeConfig>,
        N::Network: openraft::RaftNetworkV2<TypeConfig, SnapshotData = tokio::fs::File>
            + openraft::network::NetSnapshot<TypeConfig, SnapshotData = tokio::fs::File>,
    {
        let dir = dir.as_ref();
        let log = LogStore::open_on(dir.join("log"), Arc::clone(&config.db.fs))?;
        let sm = StateMachine::open(dir.join("sm"), config.db.clone())?
            .with_procedures(config.procedures.clone());
        let raft_config = Arc::new(
            config
                .raft
                .validate()
                .map_err(|e| Error::Raft(format!("invalid raft config: {e}")))?,
        );
        if let Some(lease) = config.read_lease {
            let most = Duration::from_millis(raft_config.election_timeout_max / 2);
            if lease > most {
                return Err(crate::Error::InvalidArgument(format!(
                    "read_lease {lease:?} is longer than half of election_timeout_max ({most:?})"
                ))
                .into());
            }
        }
        if raft_config.snapshot_max_chunk_size > super::wire::MAX_SNAPSHOT_CHUNK as u64 {
            return Err(crate::Error::InvalidArgument(format!(
                "snapshot_max_chunk_size {} is over the {} bytes a node takes",
                raft_config.snapshot_max_chunk_size,
                super::wire::MAX_SNAPSHOT_CHUNK
            ))
            .into());
        }
        let raft = Raft::new(id, raft_config, network, log.clone(), sm.clone())
            .await
            .map_err(|e| Error::Raft(e.to_string()))?;
        Ok(ReplicatedDb {
            id,
            batcher: Batcher::default(),
            reads: ReadIndex::default(),
            lease: Lease::new(config.read_lease),
            receiver: Receiver::new(config.max_snapshot_bytes),
            timeout: config.request_timeout,
            raft,
            sm,
            log,
        })
    }

    /// Makes a new cluster of `members` (each node's id and address), this node among them.
    /// Returns `false`, changing nothing, when this node already belongs to a cluster (its
    /// log or vote is not empty): calling it again after a restart is harmless.
    pub async fn initialize(&self, members: BTreeMap<NodeId, BasicNode>) -> Result<bool> {
        match self.raft.initialize(members).await {
            Ok(()) => Ok(true),
            Err(openraft::error::RaftError::APIError(
                openraft::error::InitializeError::NotAllowed(_),
            )) => Ok(false),
            Err(e) => Err(Error::Raft(e.to_string())),
        }
    }

    /// Applies `request` on every node: acknowledged once a majority holds it durably and
    /// this node (the leader) has applied it.
    pub async fn write(&self, request: Request) -> Result<()> {
        self.write_answered(request).await.map(drop)
    }

    /// [`ReplicatedDb::write`], answering each [`Op::Call`] of `request`, in order: `None` for
    /// a call whose write was skipped (a copy of a forwarded write applied before: its answer
    /// was given to the first copy's caller).
    pub async fn write_answered(&self, request: Request) -> Result<Vec<Option<Vec<u8>>>> {
        request
            .validate()
            .map_err(|m| Error::Store(crate::Error::InvalidArgument(m)))?;
        self.batcher.write(&self.raft, request, self.timeout).await
    }

    /// Sets `key` to `value` (a one-operation [`ReplicatedDb::write`]).
    pub async fn put(&self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<()> {
        self.write(Request::new(vec![Op::Put {
            key: key.into(),
            value: value.into(),
        }]))
        .await
    }

    /// Removes `key` (a one-operation [`ReplicatedDb::write`]).
    pub async fn delete(&self, key: impl Into<Vec<u8>>) -> Result<()> {
        self.write(Request::new(vec![Op::Delete { key: key.into() }]))
            .await
    }

    /// Waits until a read under `policy` may be served from the local store.
    pub async fn read_barrier(&self, policy: ReadPolicy) -> Result<()> {
        match policy {
            ReadPolicy::Local => Ok(()),
            ReadPolicy::Linearizable => {
                self.read_index().await?;
                Ok(())
            }
            ReadPolicy::ReadIndex => {
                self.read_index_round().await?;
                Ok(())
            }
        }
    }

    /// The read index, applied here: a position that covers every write acknowledged before
    /// this call began (`Error::NotLeader` on a follower). Under a valid lease, the last entry
    /// of this leader's log, with no round trip (`lease.rs`); otherwise a round
    /// ([`ReplicatedDb::read_index_round`]), which renews the lease.
    pub async fn read_index(&self) -> Result<Option<LogId>> {
        if let Some(position) = self.lease.read_position(&self.log) {
            self.wait_applied(position.map(|p| p.index)).await?;
            return Ok(position);
        }
        self.read_index_round().await
    }

    /// The read index by a round: the leader confirms with a quorum that it still leads and
    /// returns its commit position, having applied up to it (`Error::NotLeader` on a
    /// follower).
    ///
    /// Concurrent readers share rounds: those arriving while one runs are all answered by
    /// the next (`read_index.rs`).
    pub async fn read_index_round(&self) -> Result<Option<LogId>> {
        let proof = self.lease.before_round(self.id, &self.log);
        let index = self.reads.get(&self.raft, self.timeout).await?;
        if let Some(proof) = proof {
            self.lease.after_round(&self.log, proof);
        }
        Ok(index)
    }

    /// Read index rounds run (each serves every linearizable read waiting when it began).
    pub fn read_index_rounds(&self) -> u64 {
        self.reads.rounds_run()
    }

    /// Linearizable reads this node served under its lease, with no round.
    pub fn lease_reads(&self) -> u64 {
        self.lease.reads()
    }

    /// Waits until this node has applied up to `index`, within the request timeout.
    pub async fn wait_applied(&self, index: Option<u64>) -> Result<()> {
        let applied = self
            .raft
            .metrics()
            .borrow_watched()
            .last_applied
            .map(|l| l.index);
        if index.is_none() || applied >= index {
            return Ok(());
        }
        self.raft
            .wait(Some(self.timeout))
            .applied_index_at_least(index, "read index")
            .await
            .map(|_| ())
            .map_err(|e| Error::Raft(format!("waiting to apply up to {index:?}: {e}")))
    }

    /// The request timeout (`ReplicationConfig::request_timeout`).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Adds node `id` at `addr` as a learner and waits until it has caught up with the log
    /// (or a snapshot). Leader only.
    pub async fn add_learner(&self, id: NodeId, addr: impl Into<String>) -> Result<()> {
        self.raft
            .add_learner(id, BasicNode::new(addr.into()), true)
            .await
            .map_err(raft_err)?;
        Ok(())
    }

    /// Makes exactly `voters` the voting members (each must be a member already, as a
    /// learner or voter); nodes no longer voters are removed. Leader only.
    pub async fn change_voters(&self, voters: BTreeSet<NodeId>) -> Result<()> {
        let known = self.members();
        if let Some(id) = voters.iter().find(|id| !known.contains_key(id)) {
            return Err(crate::Error::InvalidArgument(format!(
                "node {id} is not a member: add it as a learner first"
            ))
            .into());
        }
        self.raft
            .change_membership(ChangeMembers::ReplaceAllVoters(voters), false)
            .await
            .map_err(raft_err)?;
        Ok(())
    }

    /// Removes node `id` from the cluster (a voter is demoted and removed). Leader only.
    pub async fn remove_node(&self, id: NodeId) -> Result<()> {
        let m = self.membership();
        if !m.membership().nodes().any(|(n, _)| *n == id) {
            return Err(crate::Error::InvalidArgument(format!("node {id} is not a member")).into());
        }
        let voters: BTreeSet<NodeId> = m.membership().voter_ids().filter(|v| *v != id).collect();
        if voters.len() != m.membership().voter_ids().count() {
            self.raft
                .change_membership(ChangeMembers::ReplaceAllVoters(voters), false)
                .await
                .map_err(raft_err)?;
        } else {
            self.raft
                .change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([id])), false)
                .await
                .map_err(raft_err)?;
        }
        Ok(())
    }

    /// Every member (voters and learners) with its address, as this node knows them.
    pub fn members(&self) -> BTreeMap<NodeId, String> {
        let m = self.membership();
        m.membership()
            .nodes()
            .map(|(id, n)| (*id, n.addr.clone()))
            .collect()
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// openraft's metrics of this node (role, term, leader, log and applied indexes; on the
    /// leader, each follower's replication progress).
    pub fn metrics(&self) -> RaftMetrics<TypeConfig> {
        self.raft.metrics().borrow_watched().clone()
    }

    /// The membership this node knows of (its latest membership entry, committed or not).
    fn membership(&self) -> std::sync::Arc<super::StoredMembership> {
        self.raft
            .metrics()
            .borrow_watched()
            .membership_config
            .clone()
    }

    /// The leader this node knows of, if any.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.metrics().borrow_watched().current_leader
    }

    /// The leader this node knows of and its raft address, as its membership names it.
    pub fn leader_addr(&self) -> Option<(NodeId, String)> {
        let id = self.leader()?;
        let addr = self.membership().membership().get_node(&id)?.addr.clone();
        Some((id, addr))
    }

    /// The underlying `Raft`, for what this type does not wrap (and for the network's server
    /// side: incoming RPCs are handed to it).
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Takes one chunk of a snapshot a leader is sending (the server side of a transport's
    /// `install_snapshot`): the whole pack is checked before openraft installs it, and a
    /// damaged one is refused (`snapshots_refused`) with a mismatch that makes the sender
    /// start over (`replication::receive`).
    pub async fn install_snapshot_chunk(&self, req: SnapshotChunk) -> ChunkResult {
        self.receiver.chunk(&self.raft, &self.sm, req).await
    }

    /// Snapshots received whole but refused because their pack failed its checks.
    pub fn snapshots_refused(&self) -> u64 {
        self.receiver.refused()
    }

    /// The state machine (its store, and reads with no barrier).
    pub fn state_machine(&self) -> &StateMachine {
        &self.sm
    }

    /// The log store.
    pub fn log_store(&self) -> &LogStore {
        &self.log
    }

    /// Resolves once this node's Raft core has stopped — shut down, or failed (a panic, a
    /// storage error) — with openraft's account of why. After a failure every call answers
    /// the same error for good: a server watches this to exit with that message instead, so
    /// its supervisor restarts it.
    pub async fn stopped(&self) -> String {
        let mut metrics = self.raft.metrics();
        while metrics.changed().await.is_ok() {}
        match self.raft.is_initialized().await {
            Err(e) => e.to_string(),
            Ok(_) => "the Raft core stopped".into(),
        }
    }

    /// Stops this node's Raft; the stores close when the last clone is dropped.
    pub async fn shutdown(&self) -> Result<()> {
        self.raft
            .shutdown()
            .await
            .map_err(|e| Error::Raft(format!("shutting down: {e}")))
    }
}
