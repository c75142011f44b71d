//! An in-process cluster for the replication tests: nodes on disk under one temporary
//! directory, connected by a `Router`, each stopped and reopened at will.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lsm_bloom::replication::network::Router;
use lsm_bloom::replication::{BasicNode, Error, NodeId, ReplicatedDb, ReplicationConfig};

pub struct Cluster {
    pub router: Router,
    pub root: tempfile::TempDir,
    pub config: ReplicationConfig,
    nodes: Mutex<BTreeMap<NodeId, ReplicatedDb>>,
    /// Snapshots installed by node incarnations already stopped.
    installed_before: Mutex<u64>,
}

/// Quick timings, so a test with many failovers runs in seconds.
pub fn fast_config() -> ReplicationConfig {
    let mut c = ReplicationConfig::default();
    c.raft.heartbeat_interval = 50;
    c.raft.election_timeout_min = 200;
    c.raft.election_timeout_max = 400;
    c
}

/// For tests that count what one leader does (rounds, log entries) and kill no node: elections
/// slow enough that a stall of the loaded test machine does not move the leadership midway.
pub fn steady_config() -> ReplicationConfig {
    let mut c = ReplicationConfig::default();
    c.raft.heartbeat_interval = 100;
    c.raft.election_timeout_min = 1500;
    c.raft.election_timeout_max = 3000;
    c
}

pub fn addr(id: NodeId) -> String {
    format!("node-{id}")
}

impl Cluster {
    /// Opens nodes `ids` and initializes a cluster of them on the first.
    pub async fn start(ids: &[NodeId], config: ReplicationConfig) -> Arc<Cluster> {
        let c = Arc::new(Cluster {
            router: Router::new(),
            root: tempfile::tempdir().unwrap(),
            config,
            nodes: Mutex::new(BTreeMap::new()),
            installed_before: Mutex::new(0),
        });
        for &id in ids {
            c.open(id).await;
        }
        let members: BTreeMap<NodeId, BasicNode> = ids
            .iter()
            .map(|&id| (id, BasicNode::new(addr(id))))
            .collect();
        assert!(c.node(ids[0]).unwrap().initialize(members).await.unwrap());
        c.wait_for_leader(Duration::from_secs(10)).await;
        c
    }

    /// Opens node `id` on its directory (retrying while a stopped incarnation's last handles
    /// still hold the stores) and routes to it.
    pub async fn open(&self, id: NodeId) -> ReplicatedDb {
        let dir = self.root.path().join(format!("n{id}"));
        let deadline = Instant::now() + Duration::from_secs(10);
        let db = loop {
            match ReplicatedDb::open(id, &dir, self.config.clone(), self.router.network(id)).await {
                Ok(db) => break db,
                Err(Error::Store(lsm_bloom::Error::Locked { .. })) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("opening node {id}: {e}"),
            }
        };
        self.router.register(id, db.clone());
        self.nodes.lock().unwrap().insert(id, db.clone());
        db
    }

    /// Stops node `id`: unreachable at once, its Raft shut down, its handle dropped.
    pub async fn stop(&self, id: NodeId) {
        self.router.unregister(id);
        let db = self.nodes.lock().unwrap().remove(&id);
        if let Some(db) = db {
            *self.installed_before.lock().unwrap() += db.state_machine().snapshots_installed();
            db.shutdown().await.unwrap();
        }
    }

    pub fn node(&self, id: NodeId) -> Option<ReplicatedDb> {
        self.nodes.lock().unwrap().get(&id).cloned()
    }

    pub fn running(&self) -> Vec<ReplicatedDb> {
        self.nodes.lock().unwrap().values().cloned().collect()
    }

    /// Snapshots installed by every node incarnation so far.
    pub fn snapshots_installed(&self) -> u64 {
        *self.installed_before.lock().unwrap()
            + self
                .running()
                .iter()
                .map(|n| n.state_machine().snapshots_installed())
                .sum::<u64>()
    }

    /// A running node that believes it leads (the newest term's, if two do).
    pub fn leader(&self) -> Option<ReplicatedDb> {
        self.running()
            .into_iter()
            .filter(|n| n.leader() == Some(n.id()))
            .max_by_key(|n| n.metrics().current_term)
    }

    pub async fn wait_for_leader(&self, limit: Duration) -> ReplicatedDb {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(l) = self.leader() {
                return l;
            }
            assert!(Instant::now() < deadline, "no leader within {limit:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until every running node has applied the leader's last log entry.
    pub async fn wait_converged(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(l) = self.leader() {
                let target = l.metrics().last_log_index;
                if self
                    .running()
                    .iter()
                    .all(|n| n.metrics().last_applied.map(|x| x.index) >= target)
                {
                    return;
                }
            }
            if Instant::now() >= deadline {
                // What each node has, to tell a stall from slowness when this fails.
                let seen: Vec<String> = self
                    .running()
                    .iter()
                    .map(|n| {
                        let m = n.metrics();
                        format!(
                            "node {}: {:?} ({:?}), term {}, leader {:?}, last log {:?}, \
                             applied {:?}, snapshot {:?}, purged {:?}, snapshots refused {}",
                            n.id(),
                            m.state,
                            m.running_state,
                            m.current_term,
                            m.current_leader,
                            m.last_log_index,
                            m.last_applied.map(|x| x.index),
                            m.snapshot.map(|x| x.index),
                            m.purged.map(|x| x.index),
                            n.snapshots_refused()
                        )
                    })
                    .collect();
                panic!(
                    "nodes did not converge within {limit:?}:\n{}",
                    seen.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every key and value of node `id`'s state machine.
    pub fn contents(&self, id: NodeId) -> Vec<(Vec<u8>, Vec<u8>)> {
        let n = self.node(id).unwrap();
        n.state_machine()
            .scan::<&[u8], _>(..)
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }
}
