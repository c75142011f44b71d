//! The TCP transport: a three-node cluster on 127.0.0.1, leaders restarted, a node caught up
//! by a snapshot sent in chunks; garbage and damaged snapshots on the raft port.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lsm_bloom::replication::openraft::SnapshotPolicy;
use lsm_bloom::replication::tcp::{PeerAuth, RaftServer, TcpNetwork};
use lsm_bloom::replication::{BasicNode, NodeId, ReplicatedDb, ReplicationConfig};
use tokio::net::TcpListener;

use crate::cluster::fast_config;

pub struct TcpNode {
    pub db: ReplicatedDb,
    pub server: RaftServer,
}

pub struct TcpCluster {
    pub root: tempfile::TempDir,
    /// The cluster's CA: the nodes talk mutual TLS.
    pub ca: crate::common::certs::Ca,
    pub addrs: BTreeMap<NodeId, String>,
    pub config: ReplicationConfig,
    pub nodes: Mutex<BTreeMap<NodeId, TcpNode>>,
}

impl TcpCluster {
    pub async fn start(n: u64, config: ReplicationConfig) -> TcpCluster {
        let mut listeners = BTreeMap::new();
        for id in 1..=n {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            listeners.insert(id, l);
        }
        let addrs: BTreeMap<NodeId, String> = listeners
            .iter()
            .map(|(id, l)| (*id, l.local_addr().unwrap().to_string()))
            .collect();
        let c = TcpCluster {
            root: tempfile::tempdir().unwrap(),
            ca: crate::common::certs::Ca::new("tcp tests"),
            addrs,
            config,
            nodes: Mutex::new(BTreeMap::new()),
        };
        for (id, l) in listeners {
            c.open_on(id, l).await;
        }
        let members = c
            .addrs
            .iter()
            .map(|(id, a)| (*id, BasicNode::new(a.clone())))
            .collect();
        let first = c.db(1).unwrap();
        assert!(first.initialize(members).await.unwrap());
        c
    }

    /// Node `id`'s identity on the raft port (a new certificate each call).
    pub fn auth(&self, id: NodeId) -> PeerAuth {
        self.ca.auth("tcp-tests", id)
    }

    fn dir(&self, id: NodeId) -> PathBuf {
        self.root.path().join(format!("n{id}"))
    }

    async fn open_on(&self, id: NodeId, listener: TcpListener) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let db = loop {
            let net = TcpNetwork::new(self.auth(id));
            match ReplicatedDb::open(id, self.dir(id), self.config.clone(), net).await {
                Ok(db) => break db,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("node {id}: {e}"),
            }
        };
        let server = RaftServer::serve(listener, db.clone(), self.auth(id)).unwrap();
        self.nodes
            .lock()
            .unwrap()
            .insert(id, TcpNode { db, server });
    }

    /// Reopens a stopped node on its address.
    pub async fn open(&self, id: NodeId) {
        // The address is free once the stopped server shut down; another process may still
        // briefly hold it (an outgoing connection's port), so retry for a while.
        let deadline = Instant::now() + Duration::from_secs(10);
        let l = loop {
            match TcpListener::bind(&self.addrs[&id]).await {
                Ok(l) => break l,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("binding {}: {e}", self.addrs[&id]),
            }
        };
        self.open_on(id, l).await;
    }

    pub async fn stop(&self, id: NodeId) {
        let node = self.nodes.lock().unwrap().remove(&id);
        if let Some(mut n) = node {
            n.server.shutdown().await;
            n.db.shutdown().await.unwrap();
        }
    }

    pub fn db(&self, id: NodeId) -> Option<ReplicatedDb> {
        self.nodes.lock().unwrap().get(&id).map(|n| n.db.clone())
    }

    pub fn leader(&self) -> Option<ReplicatedDb> {
        let nodes = self.nodes.lock().unwrap();
        nodes
            .values()
            .map(|n| n.db.clone())
            .filter(|d| d.leader() == Some(d.id()))
            .max_by_key(|d| d.metrics().current_term)
    }

    pub async fn put(&self, key: String, value: String) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(l) = self.leader() {
                if l.put(key.clone(), value.clone()).await.is_ok() {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "no write accepted within 20 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn converge(&self) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(l) = self.leader() {
                let target = l.metrics().last_log_index;
                let dbs: Vec<ReplicatedDb> = self
                    .nodes
                    .lock()
                    .unwrap()
                    .values()
                    .map(|n| n.db.clone())
                    .collect();
                if dbs
                    .iter()
                    .all(|d| d.metrics().last_applied.map(|x| x.index) >= target)
                {
                    return dbs
                        .iter()
                        .map(|d| {
                            d.state_machine()
                                .scan::<&[u8], _>(..)
                                .unwrap()
                                .map(Result::unwrap)
                                .collect()
                        })
                        .collect();
                }
            }
            assert!(Instant::now() < deadline, "no convergence within 30 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Writes through a TCP cluster with the leader restarted, a follower kept down until it
/// needs a snapshot (sent in 4 KiB chunks); every node ends with every write.
pub async fn replicate_with_restarts(restarts: u32) -> (usize, u64, u64) {
    let mut config = fast_config();
    config.raft.snapshot_policy = SnapshotPolicy::LogsSinceLast(100);
    config.raft.max_in_snapshot_log_to_keep = 10;
    config.raft.purge_batch_size = 1;
    config.raft.snapshot_max_chunk_size = 4096;
    let c = TcpCluster::start(3, config).await;
    let mut written = 0;
    for round in 0..restarts {
        for _ in 0..50 {
            c.put(format!("k{written:05}"), format!("v{written}")).await;
            written += 1;
        }
        let l = c.leader().unwrap();
        let (id, last) = (l.id(), l.metrics().last_log_index.unwrap_or(0));
        drop(l);
        c.stop(id).await;
        if round == 0 {
            // Down until the others purged past its log.
            loop {
                c.put(format!("k{written:05}"), format!("v{written}")).await;
                written += 1;
                let purged = c.leader().and_then(|l| l.metrics().purged).map(|p| p.index);
                if purged.is_some_and(|p| p > last) {
                    break;
                }
            }
        }
        c.open(id).await;
    }
    let contents = c.converge().await;
    for (i, data) in contents.iter().enumerate() {
        assert_eq!(data.len(), written, "node index {i}");
        assert_eq!(data, &contents[0]);
    }
    let installed: u64 = c
        .nodes
        .lock()
        .unwrap()
        .values()
        .map(|n| n.db.state_machine().snapshots_installed())
        .sum();
    let frames: u64 = c
        .nodes
        .lock()
        .unwrap()
        .values()
        .map(|n| n.server.stats().traffic.frames_in.load(Ordering::Relaxed))
        .sum();
    (written, installed, frames)
}

/// Writes made on followers reach the leader through its raft port, and a follower's read
/// after the read barrier sees every write acknowledged before it, on any node.
pub async fn followers_forward_writes_and_read_linearizably() {
    use lsm_bloom::replication::tcp::Forwarder;
    use lsm_bloom::replication::{Op, Request};
    let c = TcpCluster::start(3, fast_config()).await;
    c.put("warm".into(), "up".into()).await;
    let leader = c.leader().unwrap().id();
    let followers: Vec<_> = (1..=3).filter(|&id| id != leader).collect();
    let fwd = Forwarder::new(c.auth(followers[0]));
    for i in 0..200u32 {
        let writer = c.db(followers[(i % 2) as usize]).unwrap();
        let reader = c.db(followers[((i + 1) % 2) as usize]).unwrap();
        let key = format!("f{i}").into_bytes();
        let req = Request::new(vec![Op::Put {
            key: key.clone(),
            value: i.to_le_bytes().to_vec(),
        }]);
        fwd.write(&writer, req).await.unwrap();
        fwd.read_barrier(&reader).await.unwrap();
        assert_eq!(
            reader.state_machine().get(&key).unwrap(),
            Some(i.to_le_bytes().to_vec()),
            "write {i} not seen on the other follower after its read barrier"
        );
    }
}

/// Heartbeats (openraft sends each as a one-append stream) and idle streams reuse their
/// connections: an idle follower accepts almost none over a second of 50 ms heartbeats, and
/// read index rounds, which each wait for a heartbeat round, open none either.
pub async fn heartbeats_reuse_connections() {
    use lsm_bloom::replication::ReadPolicy;
    let c = TcpCluster::start(3, fast_config()).await;
    c.put("a".into(), "1".into()).await;
    let leader = c.leader().unwrap();
    let follower = (1..=3).find(|&id| id != leader.id()).unwrap();
    let accepted = || {
        c.nodes.lock().unwrap()[&follower]
            .server
            .stats()
            .accepted
            .load(Ordering::Relaxed)
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = accepted();
    for _ in 0..50 {
        leader.get("a", ReadPolicy::ReadIndex).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let opened = accepted() - before;
    println!("tcp: {opened} connections accepted over 50 read index rounds and 1 s of heartbeats");
    assert!(opened <= 2, "{opened} connections for heartbeats");
}

/// A stream of appends that repeats an entry-less append — what openraft sends when a
/// superseded session reads nothing from a purged log (`src/replication/stalled.rs`) — ends
/// after the first one is answered, instead of running as long as openraft feeds it.
pub async fn a_stalled_append_stream_ends() {
    use futures_util::StreamExt;
    use lsm_bloom::replication::openraft::network::RPCOption;
    use lsm_bloom::replication::openraft::raft::AppendEntriesRequest;
    use lsm_bloom::replication::openraft::{RaftNetworkFactory, RaftNetworkV2};

    let c = TcpCluster::start(3, fast_config()).await;
    c.put("a".into(), "1".into()).await;
    c.converge().await;
    let leader = c.leader().unwrap();
    let follower = (1..=3).find(|&id| id != leader.id()).unwrap();
    let m = leader.metrics();
    // The leader's own heartbeat, as a stalled session repeats it: the follower holds `prev`.
    let heartbeat = AppendEntriesRequest {
        vote: m.vote,
        prev_log_id: m.last_applied,
        leader_commit: m.last_applied,
        entries: Vec::new(),
    };
    let input = futures_util::stream::repeat(heartbeat);
    let mut link = TcpNetwork::new(c.auth(leader.id()))
        .new_client(follower, &BasicNode::new(c.addrs[&follower].clone()))
        .await;
    let answers = link
        .stream_append(input, RPCOption::new(Duration::from_secs(5)))
        .await
        .unwrap();
    let answers = tokio::time::timeout(Duration::from_secs(10), answers.collect::<Vec<_>>())
        .await
        .expect("the stream of repeated heartbeats did not end");
    assert_eq!(answers.len(), 1, "answers: {answers:?}");
    assert_eq!(
        answers[0].as_ref().unwrap().as_ref().unwrap(),
        &m.last_applied
    );
}

/// The Forwarder's pool never hands out a connection the leader closed: after the leader's
/// raft server restarts on its address (closing every connection, as its idle limit would),
/// the next forwarded write goes through on a fresh connection. It used to fail on the dead
/// pooled one (`early eof`).
pub async fn the_forwarders_pool_drops_closed_connections() {
    use lsm_bloom::replication::tcp::Forwarder;
    use lsm_bloom::replication::{Op, Request};
    let c = TcpCluster::start(3, fast_config()).await;
    c.put("warm".into(), "up".into()).await;
    let leader = c.leader().unwrap().id();
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    let fwd = Forwarder::new(c.auth(follower));
    let req = |k: &str| {
        Request::new(vec![Op::Put {
            key: k.into(),
            value: b"v".to_vec(),
        }])
    };
    let node = c.db(follower).unwrap();
    fwd.write(&node, req("before")).await.unwrap();
    // Restart the leader's raft server on the same address: its connections close.
    let addr = c.addrs[&leader].clone();
    let db = c.db(leader).unwrap();
    {
        let mut nodes = c.nodes.lock().unwrap();
        nodes.get_mut(&leader).unwrap().server.stop();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let server = RaftServer::bind(&addr, db, c.auth(leader)).await.unwrap();
    c.nodes.lock().unwrap().get_mut(&leader).unwrap().server = server;
    tokio::time::sleep(Duration::from_millis(100)).await;
    fwd.write(&node, req("after")).await.unwrap();
    assert_eq!(
        c.db(leader).unwrap().state_machine().get(b"after").unwrap(),
        Some(b"v".to_vec())
    );
}
