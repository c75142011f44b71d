//! Cluster mode: this server as one node of a store replicated with openraft
//! (`lsm_bloom::replication`), its Raft RPCs on `--raft-addr`.
//!
//! Any node takes any command. A write on a follower is forwarded to the leader over the
//! leader's raft port, and a read on a follower first asks the leader for a read index and
//! waits to have applied that far (`tcp::Forwarder`): every read is linearizable, and a
//! client needs no cluster support — `redis-cli`, `redis-benchmark` and any client library
//! may talk to any node, and keep working when the leader changes. (Refusing with an error
//! naming the leader would need clients that follow it; Redis clients follow `MOVED` only in
//! Redis Cluster's slot protocol, which this is not.) With no leader reachable within the
//! request timeout a command fails with `CLUSTERDOWN`, and a write that timed out may still
//! be applied. Database `n` is the replicated keyspace `db<n>` (database 0 the default one,
//! `""`, where clusters before databases kept their data); `FLUSHDB` and `SWAPDB` are
//! replicated `Clear` and `Swap` operations. Conditional and read-modify-write commands
//! (`SET NX`, `GETDEL`, `DEL`, `INCR`, ...: `rmw.rs`) go into the log as one call each, decided
//! when the entry is applied, the same on every node (`procs.rs`): atomic across the cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lsm_bloom::replication::tcp::{Forwarder, PeerAuth, PeerKey, RaftServer, TcpNetwork};
use lsm_bloom::replication::{
    BasicNode, Error, NodeId, Op, Procedures, ReplicatedDb, ReplicationConfig, Request, Scan,
};
use lsm_bloom::{DbStats, KeyExpiry, Options};

use super::call_codec;
use super::procs::{self, KvProcedures};
use super::resp::Reply;
use super::rmw::Change;
use super::store::StoreResult;

pub struct Cluster {
    rt: tokio::runtime::Runtime,
    /// Set by `close`: the Raft core stopping is then expected, not a failure.
    closing: Arc<AtomicBool>,
    node: ReplicatedDb,
    fwd: Forwarder,
    /// The outgoing side of the raft transport (a clone sharing its counters).
    net: TcpNetwork,
    tls: bool,
    server: Option<RaftServer>,
    /// Decide conditional and read-modify-write commands on the node that receives them,
    /// not in the log (`--decide-on-receiving-node`): not atomic across nodes. Only the
    /// tests' negative control sets it.
    pub decide_locally: bool,
}

fn fail(e: Error) -> Reply {
    match e {
        // No leader now, or none reachable: Redis clients retry on CLUSTERDOWN.
        Error::NotLeader { .. } | Error::Timeout(_) | Error::Unreachable(_) => {
            Reply::Error(format!("CLUSTERDOWN {e}"))
        }
        // The leader was reached but the call broke off: the write may have been applied.
        Error::Interrupted(_) => Reply::Error(format!("TRYAGAIN {e}")),
        e => Reply::err(e.to_string()),
    }
}

/// Parses `--peers`: `ID=HOST:PORT` pairs, comma-separated.
pub fn parse_peers(s: &str, flag: &str) -> Result<BTreeMap<NodeId, String>, String> {
    let mut out = BTreeMap::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| format!("{flag} entry {part:?} is not ID=HOST:PORT"))?;
        let id: NodeId = id
            .trim()
            .parse()
            .map_err(|_| format!("{flag} entry {part:?}: {id:?} is not a node id"))?;
        if out.insert(id, addr.trim().to_owned()).is_some() {
            return Err(format!("{flag} names node {id} twice"));
        }
    }
    Ok(out)
}

/// How this node's raft connections authenticate: mutual TLS from the `tls` files
/// (certificate, key, CA), or plain TCP on loopback when asked for by name.
pub fn peer_auth(
    id: NodeId,
    cluster: &str,
    tls: Option<(&Path, &Path, &Path)>,
    plain_loopback: bool,
) -> Result<PeerAuth, String> {
    match (tls, plain_loopback) {
        (Some((cert, key, ca)), _) => PeerAuth::tls_from_pem(cluster, id, cert, key, ca),
        (None, true) => PeerAuth::plain_loopback(cluster, id),
        (None, false) => {
            return Err(
                "cluster mode needs --cluster-tls-cert, --cluster-tls-key and \
                 --cluster-tls-ca (mutual TLS between the nodes), or --cluster-plain-loopback \
                 for a cluster on one machine's loopback addresses"
                    .into(),
            )
        }
    }
    .map_err(|e| format!("the raft port: {e}"))
}

impl Cluster {
    /// Opens node `id` on `dir`, serving its Raft on `raft_addr` to nodes that authenticate
    /// as `auth` says; with `init`, makes a new cluster of `peers` (harmless on a node that
    /// already has one).
    #[expect(
        clippy::too_many_arguments,
        reason = "one per kv_server flag it serves"
    )]
    pub fn open(
        auth: PeerAuth,
        id: NodeId,
        dir: &Path,
        raft_addr: &str,
        peers: BTreeMap<NodeId, String>,
        init: bool,
        snapshot_logs: u64,
        db: Options,
    ) -> Result<Cluster, Box<dyn std::error::Error>> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let procedures: Arc<dyn Procedures> = Arc::new(KvProcedures);
        let mut config = ReplicationConfig::default()
            .with_db(db)
            .with_procedures(Some(procedures));
        config.raft.snapshot_policy =
            lsm_bloom::replication::openraft::SnapshotPolicy::LogsSinceLast(snapshot_logs.max(1));
        config.raft.max_in_snapshot_log_to_keep = snapshot_logs / 10;
        let network = TcpNetwork::new(auth.clone());
        let tls = auth.is_tls();
        let (node, server) = rt.block_on(async {
            let listener = tokio::net::TcpListener::bind(raft_addr).await?;
            let node = ReplicatedDb::open(id, dir, config, network.clone()).await?;
            let server = RaftServer::serve(listener, node.clone(), auth.clone())?;
            if init {
                let mut members: BTreeMap<NodeId, BasicNode> = peers
                    .iter()
                    .map(|(i, a)| (*i, BasicNode::new(a.clone())))
                    .collect();
                members.insert(id, BasicNode::new(raft_addr));
                node.initialize(members).await?;
            }
            Ok::<_, Box<dyn std::error::Error>>((node, server))
        })?;
        // A Raft core that failed answers every call with the same error for good: exit with
        // its reason instead, so a supervisor restarts the process.
        let closing = Arc::new(AtomicBool::new(false));
        let (watched, expected) = (node.clone(), Arc::clone(&closing));
        rt.spawn(async move {
            let why = watched.stopped().await;
            if !expected.load(Ordering::SeqCst) {
                tracing::error!(node = id, reason = %why, "the Raft core stopped; exiting");
                std::process::exit(70);
            }
        });
        Ok(Cluster {
            rt,
            closing,
            node,
            fwd: Forwarder::new(auth),
            net: network,
            tls,
            server: Some(server),
            decide_locally: false,
        })
    }

    /// A linearizable read barrier: the reads after it see every write acknowledged before.
    pub fn barrier(&self) -> StoreResult<()> {
        self.rt
            .block_on(self.fwd.read_barrier(&self.node))
            .map_err(fail)
    }

    /// `key`'s value in the replicated keyspace `keyspace` lent to `f`, after a read
    /// barrier.
    pub fn get_with<R>(
        &self,
        keyspace: &str,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> StoreResult<Option<R>> {
        self.barrier()?;
        self.node
            .state_machine()
            .get_with_in(keyspace, key, f)
            .map_err(|e| Reply::err(e.to_string()))
    }

    /// `key`'s value in `keyspace` lent to `f`, as applied on this node (after `barrier`).
    pub fn peek_with<R>(
        &self,
        keyspace: &str,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> StoreResult<Option<R>> {
        self.node
            .state_machine()
            .get_with_in(keyspace, key, f)
            .map_err(|e| Reply::err(e.to_string()))
    }

    /// Whether `key` is live in `keyspace` and until when, after a read barrier, by this
    /// node's clock.
    pub fn expiry_of(&self, keyspace: &str, key: &[u8]) -> StoreResult<KeyExpiry> {
        self.barrier()?;
        self.node
            .state_machine()
            .expiry_of_in(keyspace, key)
            .map_err(|e| Reply::err(e.to_string()))
    }

    /// Runs `change` in `keyspace` as one call, decided when its entry is applied, on every
    /// node alike (`procs.rs`); its reply.
    pub fn call(&self, keyspace: &str, change: &Change) -> StoreResult<Reply> {
        let answers = self.write_answered(vec![procs::call_op(keyspace, change)])?;
        match answers.first() {
            Some(a) => Ok(call_codec::decode_reply(a)),
            None => Err(Reply::err("internal: a call came back without its answer")),
        }
    }

    /// Replicates `ops` as one write (through the leader): the answers of its calls.
    pub fn write_answered(&self, ops: Vec<Op>) -> StoreResult<Vec<Vec<u8>>> {
        self.rt
            .block_on(self.fwd.write_answered(&self.node, Request::new(ops)))
            .map_err(fail)
    }

    /// Replicates `ops` as one write (through the leader).
    pub fn write(&self, ops: Vec<Op>) -> StoreResult<()> {
        self.rt
            .block_on(self.fwd.write(&self.node, Request::new(ops)))
            .map_err(fail)
    }

    pub fn scan(&self, keyspace: &str, start: Vec<u8>, end: Bound<Vec<u8>>) -> StoreResult<Scan> {
        self.barrier()?;
        self.node
            .state_machine()
            .scan_in(keyspace, (Bound::Included(start), end))
            .map_err(|e| Reply::err(e.to_string()))
    }

    /// The keys of `keyspace`: after a read barrier with `exact_up_to`, counted exactly up to
    /// that; without (`None`, for INFO), this node's upper bound.
    pub fn len(&self, keyspace: &str, exact_up_to: Option<u64>) -> StoreResult<u64> {
        if exact_up_to.is_some() {
            self.barrier()?;
        }
        self.node
            .state_machine()
            .len_in(keyspace, exact_up_to.unwrap_or(0))
            .map_err(|e| Reply::err(e.to_string()))
    }

    /// This node's upper bound of the keys of `keyspace` with an expiry, without a read
    /// barrier (for INFO).
    pub fn expiring_len(&self, keyspace: &str) -> StoreResult<u64> {
        self.node
            .state_machine()
            .expiring_len_in(keyspace)
            .map_err(|e| Reply::err(e.to_string()))
    }

    /// Whether this node leads now.
    pub fn leads(&self) -> bool {
        let m = self.node.metrics();
        m.current_leader == Some(m.id)
    }

    pub fn stats(&self) -> DbStats {
        self.node.state_machine().db().stats()
    }

    /// INFO's `# Replication` section.
    pub fn info(&self) -> String {
        let m = self.node.metrics();
        let role = match m.state {
            lsm_bloom::replication::openraft::ServerState::Leader => "master",
            lsm_bloom::replication::openraft::ServerState::Learner => "learner",
            lsm_bloom::replication::openraft::ServerState::Candidate => "candidate",
            _ => "slave",
        };
        let mut s = String::new();
        let _ = write!(
            s,
            "role:{role}\r\ncluster_enabled:1\r\nnode_id:{}\r\nraft_state:{:?}\r\ncurrent_term:{}\r\n",
            m.id, m.state, m.current_term
        );
        let members = self.node.members();
        match m.current_leader {
            Some(l) => {
                let _ = write!(
                    s,
                    "leader_id:{l}\r\nleader_raft_addr:{}\r\n",
                    members.get(&l).map_or("", String::as_str)
                );
            }
            None => s.push_str("leader_id:none\r\n"),
        }
        let last = m.last_log_index.unwrap_or(0);
        let _ = write!(
            s,
            "last_log_index:{last}\r\ncommit_index:{}\r\napplied_index:{}\r\nsnapshot_index:{}\r\npurged_index:{}\r\nsnapshots_installed:{}\r\nsnapshots_refused:{}\r\n",
            self.node.log_store().committed().map_or(0, |x| x.index),
            m.last_applied.map_or(0, |x| x.index),
            m.snapshot.map_or(0, |x| x.index),
            m.purged.map_or(0, |x| x.index),
            self.node.state_machine().snapshots_installed(),
            self.node.snapshots_refused(),
        );
        self.transport_info(&mut s);
        let voters: BTreeSet<NodeId> = m.membership_config.membership().voter_ids().collect();
        let _ = write!(s, "members:{}\r\n", members.len());
        if let Some(repl) = &m.replication {
            let others = repl.iter().filter(|(id, _)| **id != m.id);
            for (i, (id, matched)) in others.enumerate() {
                let at = matched.map_or(0, |x| x.index);
                let kind = if voters.contains(id) {
                    "voter"
                } else {
                    "learner"
                };
                let _ = write!(
                    s,
                    "follower{i}:id={id},addr={},kind={kind},match_index={at},lag={}\r\n",
                    members.get(id).map_or("", String::as_str),
                    last.saturating_sub(at)
                );
            }
        }
        s
    }

    /// The raft transport's counters: the server's (connections and frames in), the calls
    /// this node makes (to its peers, and forwarded to the leader); totals, then one line per
    /// peer node (`<prefix>_peer<id>:connections=…,frames_in=…,…`, as Redis lists replicas).
    fn transport_info(&self, s: &mut String) {
        use std::sync::atomic::Ordering::Relaxed;
        let _ = write!(s, "raft_port_tls:{}\r\n", u8::from(self.tls));
        let mut sources = vec![
            ("raft_calls", self.net.stats()),
            ("raft_forwarded", self.fwd.stats()),
        ];
        if let Some(server) = &self.server {
            let st = server.stats();
            let _ = write!(
                s,
                "raft_port_accepted:{}\r\nraft_port_refused:{}\r\nraft_port_refused_handshakes:{}\r\n",
                st.accepted.load(Relaxed),
                st.refused.load(Relaxed),
                st.refused_handshakes.load(Relaxed),
            );
            sources.insert(0, ("raft_port", st));
        }
        for (name, st) in &sources {
            for (field, v) in st.traffic.counts() {
                let _ = write!(s, "{name}_{field}:{v}\r\n");
            }
        }
        for (name, st) in &sources {
            for (peer, p) in st.peers() {
                let peer = match peer {
                    PeerKey::Node(id) => id.to_string(),
                    PeerKey::Other => "_other".into(),
                };
                let mut fields = vec![format!("connections={}", p.connections.load(Relaxed))];
                fields.extend(p.traffic.counts().iter().map(|(k, v)| format!("{k}={v}")));
                let _ = write!(s, "{name}_peer{peer}:{}\r\n", fields.join(","));
            }
        }
    }

    /// `CLUSTER INFO | ADD-LEARNER id raft-addr | VOTERS id... | REMOVE id` (membership
    /// changes on the leader).
    pub fn command(&self, args: &[Vec<u8>]) -> Reply {
        let sub = args
            .first()
            .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase());
        let id = |a: &Vec<u8>| -> Result<NodeId, Reply> {
            std::str::from_utf8(a)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| {
                    Reply::err(format!("{:?} is not a node id", String::from_utf8_lossy(a)))
                })
        };
        let done = |r: lsm_bloom::replication::Result<()>| r.map_or_else(fail, |()| Reply::ok());
        match (sub.as_deref(), &args[1.min(args.len())..]) {
            (Some("INFO"), []) => Reply::Verbatim(self.info()),
            (Some("ADD-LEARNER"), [n, addr]) => match id(n) {
                Ok(n) => done(
                    self.rt.block_on(
                        self.node
                            .add_learner(n, String::from_utf8_lossy(addr).into_owned()),
                    ),
                ),
                Err(r) => r,
            },
            (Some("VOTERS"), ids) if !ids.is_empty() => {
                match ids.iter().map(id).collect::<Result<BTreeSet<_>, _>>() {
                    Ok(set) => done(self.rt.block_on(self.node.change_voters(set))),
                    Err(r) => r,
                }
            }
            (Some("REMOVE"), [n]) => match id(n) {
                Ok(n) => done(self.rt.block_on(self.node.remove_node(n))),
                Err(r) => r,
            },
            _ => Reply::err(
                "CLUSTER INFO | ADD-LEARNER <id> <raft-addr> | VOTERS <id>... | REMOVE <id>",
            ),
        }
    }

    pub fn close(mut self) -> Result<(), Box<dyn std::error::Error>> {
        self.closing.store(true, Ordering::SeqCst);
        if let Some(mut s) = self.server.take() {
            s.stop();
        }
        self.rt.block_on(self.node.shutdown())?;
        Ok(())
    }
}
