//! Replication's costs, measured: a three-node cluster over TCP on 127.0.0.1 (all three in
//! this process) against one node.
//!
//! `cargo run --release --features replication,rocksdb --example replication_bench --
//!  [--writes N] [--gets N] [--clients 1,8] [--rounds 3]` (without `rocksdb`, the
//! RocksDB-backed baseline is left out)
//!
//! Per round and client count, interleaved:
//! - durable writes: one `Db` with `sync_writes` (every put synced, concurrent ones sharing a
//!   sync), a three-node openraft cluster on RocksDB (`rocks.rs`), and the lsm-bloom
//!   cluster; replicated puts go through the leader and are acknowledged once a majority
//!   synced them and the leader applied them;
//! - gets of present keys, and of absent keys, on the leader: local reads of the state
//!   machine, linearizable ones (under the leader's lease) and read index ones (a round per
//!   batch of readers), with the data-block reads per absent get of each;
//! - once, after the rounds: write latency with `--held-connections` unauthenticated
//!   connections held against the leader's raft port (`held.rs`); and a fourth node in a
//!   process of its own catches up by a snapshot of `--catch-up-mib` MiB (`catch_up.rs`), its
//!   peak resident memory printed.
//!
//! `--layout` runs only the storage layout comparison (`layout.rs`).
//!
//! Prints each figure's median over the rounds and the ratios. The three nodes and the
//! clients share this machine's cores, so a replicated write here pays three nodes' work on
//! the same CPUs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use lsm_bloom::replication::tcp::{PeerAuth, RaftServer, TcpNetwork};
use lsm_bloom::replication::{BasicNode, RaftService, ReadPolicy, ReplicatedDb, ReplicationConfig};

mod catch_up;
#[path = "../../tests/common/certs.rs"]
#[allow(
    dead_code,
    reason = "shared with the tests, which use the PEM files too"
)]
mod certs;
mod held;
mod layout;
#[path = "../common/logging.rs"]
mod logging;
#[cfg(feature = "rocksdb")]
mod rocks;
use lsm_bloom::{Db, Options};

#[derive(Parser)]
struct Args {
    /// Writes per phase.
    #[arg(long, default_value_t = 20_000)]
    writes: u64,
    /// Gets per phase.
    #[arg(long, default_value_t = 50_000)]
    gets: u64,
    /// Client counts.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    clients: Vec<u64>,
    /// Rounds (medians are printed).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Unauthenticated connections held against the leader's raft port in the last phase
    /// (0: no such phase).
    #[arg(long, default_value_t = 1000)]
    held_connections: usize,
    /// Only the storage layout comparison (`layout.rs`): a node's log and state machine as
    /// two stores or as two keyspaces of one, `--writes` writes per run.
    #[arg(long)]
    layout: bool,
    /// MiB a new node receives by snapshot in the catch-up phase (0: no such phase).
    #[arg(long, default_value_t = 256)]
    catch_up_mib: u64,
    /// Runs as the catch-up phase's learner, in this directory (used by the phase itself).
    #[arg(long, hide = true)]
    learner_dir: Option<std::path::PathBuf>,
    /// The learner's target applied index (used by the phase itself).
    #[arg(long, hide = true, default_value_t = 0)]
    learner_target: u64,
}

fn value(i: u64) -> Vec<u8> {
    format!("{i:016}-{}", "v".repeat(83)).into_bytes()
}

/// What the benchmark needs of a node besides what the transport serves.
trait BenchNode: RaftService {
    /// Makes the cluster of `members` (this node among them).
    async fn init(&self, members: BTreeMap<u64, BasicNode>);
    /// The leader this node knows of.
    fn current_leader(&self) -> Option<u64>;
}

impl BenchNode for ReplicatedDb {
    async fn init(&self, members: BTreeMap<u64, BasicNode>) {
        self.raft().initialize(members).await.unwrap();
    }
    fn current_leader(&self) -> Option<u64> {
        self.leader()
    }
}

#[cfg(feature = "rocksdb")]
impl BenchNode for rocks::RocksNode {
    async fn init(&self, members: BTreeMap<u64, BasicNode>) {
        self.raft().initialize(members).await.unwrap();
    }
    fn current_leader(&self) -> Option<u64> {
        use lsm_bloom::replication::openraft::async_runtime::watch::WatchReceiver;
        self.raft().metrics().borrow_watched().current_leader
    }
}

/// How the nodes of a cluster connect: plain TCP on loopback, or mutual TLS with
/// certificates of a CA made for the run.
#[derive(Clone, Copy)]
enum Transport<'a> {
    Plain,
    Tls(&'a certs::Ca),
}

impl Transport<'_> {
    /// Node `id`'s `PeerAuth`.
    fn auth(self, id: u64) -> PeerAuth {
        match self {
            Transport::Plain => PeerAuth::plain_loopback("bench", id).unwrap(),
            Transport::Tls(ca) => ca.auth("bench", id),
        }
    }
}

/// Three nodes opened by `open` (id, directory, its network), each served over TCP on
/// 127.0.0.1 as `transport` says; node 1 initializes the cluster and leads.
async fn cluster<S, F, Fut>(
    root: &std::path::Path,
    transport: Transport<'_>,
    open: F,
) -> (Vec<S>, Vec<RaftServer>)
where
    S: BenchNode,
    F: Fn(u64, std::path::PathBuf, TcpNetwork) -> Fut,
    Fut: std::future::Future<Output = S>,
{
    let mut listeners = Vec::new();
    for _ in 0..3 {
        listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
    }
    let members: BTreeMap<u64, BasicNode> = listeners
        .iter()
        .enumerate()
        .map(|(i, l)| {
            (
                i as u64 + 1,
                BasicNode::new(l.local_addr().unwrap().to_string()),
            )
        })
        .collect();
    let (mut nodes, mut servers) = (Vec::new(), Vec::new());
    for (i, l) in listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        let auth = transport.auth(id);
        let node = open(
            id,
            root.join(format!("n{id}")),
            TcpNetwork::new(auth.clone()),
        )
        .await;
        servers.push(RaftServer::serve(l, node.clone(), auth).unwrap());
        nodes.push(node);
    }
    nodes[0].init(members).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while nodes[0].current_leader() != Some(1) {
        assert!(Instant::now() < deadline, "node 1 did not become leader");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (nodes, servers)
}

/// Three lsm-bloom nodes at their defaults (`cluster`).
async fn lsm_cluster(
    root: &std::path::Path,
    transport: Transport<'_>,
) -> (Vec<ReplicatedDb>, Vec<RaftServer>) {
    cluster(root, transport, |id, dir, net| async move {
        ReplicatedDb::open(id, dir, ReplicationConfig::default(), net)
            .await
            .unwrap()
    })
    .await
}

/// Runs `clients` tasks that share `n` operations; returns operations per second.
async fn timed<F, Fut>(n: u64, clients: u64, op: F) -> f64
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut i = c;
                while i < n {
                    op(i).await;
                    i += clients;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// The median; NaN for no figures (a phase not built in).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The read policies measured, with their column names.
const POLICIES: [(ReadPolicy, &str); 3] = [
    (ReadPolicy::Local, "local"),
    (ReadPolicy::Linearizable, "linearizable"),
    (ReadPolicy::ReadIndex, "read index"),
];

#[derive(Default)]
struct Figures {
    single_sync: Vec<f64>,
    rocks: Vec<f64>,
    replicated: Vec<f64>,
    /// The same two clusters with mutual TLS between the nodes.
    rocks_tls: Vec<f64>,
    replicated_tls: Vec<f64>,
    /// Gets per second by (absent keys, policy).
    gets: BTreeMap<(bool, usize), Vec<f64>>,
    /// Data-block reads per absent get, by policy.
    reads: BTreeMap<usize, Vec<f64>>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    // The stores' and openraft's warnings and errors (write stalls, failures) on stderr,
    // beside the figures; `RUST_LOG` shows more.
    logging::init("warn");
    if let Some(dir) = &args.learner_dir {
        return catch_up::learner(dir, args.learner_target).await;
    }
    if args.layout {
        let (clients, writes, rounds) = (args.clients.clone(), args.writes, args.rounds);
        tokio::task::spawn_blocking(move || layout::compare(&clients, writes, rounds))
            .await
            .unwrap();
        return;
    }
    let mut figures: BTreeMap<u64, Figures> = BTreeMap::new();
    let ca = certs::Ca::new("replication_bench");
    for round in 0..args.rounds {
        for &clients in &args.clients {
            let f = figures.entry(clients).or_default();
            let root = tempfile::tempdir().unwrap();
            // One node, every put durable before it returns.
            let single = Arc::new(
                Db::open(
                    root.path().join("single"),
                    Options::default().with_sync_writes(true),
                )
                .unwrap(),
            );
            let db = single.clone();
            let ops = timed(args.writes, clients, move |i| {
                let db = db.clone();
                async move {
                    tokio::task::spawn_blocking(move || {
                        db.put(format!("k{i:09}"), value(i)).unwrap()
                    })
                    .await
                    .unwrap();
                }
            })
            .await;
            f.single_sync.push(ops);
            drop(single);

            #[cfg(feature = "rocksdb")]
            for transport in [Transport::Plain, Transport::Tls(&ca)] {
                let dir = root.path().join(match transport {
                    Transport::Plain => "rocks",
                    Transport::Tls(_) => "rocks-tls",
                });
                let (nodes, _servers) = cluster(&dir, transport, |id, dir, net| {
                    rocks::RocksNode::open(id, dir, ReplicationConfig::default().raft, net)
                })
                .await;
                let l = nodes[0].clone();
                let ops = timed(args.writes, clients, move |i| {
                    let l = l.clone();
                    async move { l.put(format!("k{i:09}").into_bytes(), value(i)).await }
                })
                .await;
                match transport {
                    Transport::Plain => f.rocks.push(ops),
                    Transport::Tls(_) => f.rocks_tls.push(ops),
                }
                assert!(
                    nodes[1].sm.get(b"k000000000").is_some()
                        || nodes[2].sm.get(b"k000000000").is_some()
                );
                for n in &nodes {
                    n.raft().shutdown().await.unwrap();
                }
            }

            // lsm-bloom's cluster with TLS between the nodes: writes only.
            {
                let (nodes, _servers) =
                    lsm_cluster(&root.path().join("tls"), Transport::Tls(&ca)).await;
                let l = nodes[0].clone();
                let ops = timed(args.writes, clients, move |i| {
                    let l = l.clone();
                    async move { l.put(format!("k{i:09}"), value(i)).await.unwrap() }
                })
                .await;
                f.replicated_tls.push(ops);
                for n in &nodes {
                    n.shutdown().await.unwrap();
                }
            }

            let (nodes, _servers) = lsm_cluster(root.path(), Transport::Plain).await;
            let leader = nodes[0].clone();
            let l = leader.clone();
            let ops = timed(args.writes, clients, move |i| {
                let l = l.clone();
                async move { l.put(format!("k{i:09}"), value(i)).await.unwrap() }
            })
            .await;
            f.replicated.push(ops);

            // Gets read tables, as in a store larger than its memtable.
            leader.state_machine().db().flush().unwrap();
            let writes = args.writes;
            for absent in [false, true] {
                let key = move |i: u64| {
                    if absent {
                        format!("k{:09}x", i % writes)
                    } else {
                        format!("k{:09}", i % writes)
                    }
                };
                for (p, (policy, _)) in POLICIES.iter().enumerate() {
                    let policy = *policy;
                    let before = leader.state_machine().db().stats().total.data_block_reads;
                    let l = leader.clone();
                    let ops = timed(args.gets, clients, move |i| {
                        let l = l.clone();
                        let k = key(i);
                        async move {
                            let v = l.get(&k, policy).await.unwrap();
                            assert_eq!(v.is_some(), !absent, "{k}");
                        }
                    })
                    .await;
                    f.gets.entry((absent, p)).or_default().push(ops);
                    if absent {
                        let after = leader.state_machine().db().stats().total.data_block_reads;
                        let per_get = (after - before) as f64 / args.gets as f64;
                        f.reads.entry(p).or_default().push(per_get);
                    }
                }
            }
            for n in &nodes {
                n.shutdown().await.unwrap();
            }
            eprintln!("round {round}, {clients} clients done");
        }
    }
    println!(
        "replication_bench: 3 nodes over TCP on 127.0.0.1 in one process; medians of {} rounds",
        args.rounds
    );
    println!(
        "\ndurable writes per second (RocksDB-backed: openraft on rust-rocksdb, same transport)"
    );
    println!(
        "{:>8} {:>12} {:>10} {:>10} {:>8} {:>9} {:>10} {:>10} {:>9} {:>9}",
        "clients",
        "1 node sync",
        "RocksDB",
        "lsm-bloom",
        "/1 node",
        "/RocksDB",
        "RocksDB+TLS",
        "ours+TLS",
        "TLS/plain",
        "/RocksDB+TLS"
    );
    let ratio = |a: f64, b: f64| {
        if a.is_nan() || b.is_nan() {
            "n/a".to_string()
        } else {
            format!("{:.2}", a / b)
        }
    };
    for (clients, f) in &mut figures {
        let (s, k, r) = (
            median(&mut f.single_sync),
            median(&mut f.rocks),
            median(&mut f.replicated),
        );
        let (kt, rt) = (median(&mut f.rocks_tls), median(&mut f.replicated_tls));
        println!(
            "{clients:>8} {s:>12.0} {k:>10.0} {r:>10.0} {:>8.2} {:>9} {kt:>10.0} {rt:>10.0} {:>9.2} {:>9}",
            r / s,
            ratio(r, k),
            rt / r,
            ratio(rt, kt),
        );
    }
    println!("\ngets per second on the leader (linearizable: under its lease; read index: a round per batch of readers)");
    println!(
        "{:>8} {:>8} {:>12} {:>14} {:>7} {:>12} {:>7} {:>22}",
        "clients",
        "keys",
        "local",
        "linearizable",
        "ratio",
        "read index",
        "ratio",
        "block reads/get l/l/r"
    );
    for (clients, f) in &mut figures {
        for absent in [false, true] {
            let g: Vec<f64> = (0..POLICIES.len())
                .map(|p| f.gets.get_mut(&(absent, p)).map_or(f64::NAN, |v| median(v)))
                .collect();
            let reads = if absent {
                (0..POLICIES.len())
                    .map(|p| format!("{:.3}", f.reads.get_mut(&p).map_or(f64::NAN, |v| median(v))))
                    .collect::<Vec<_>>()
                    .join("/")
            } else {
                String::new()
            };
            println!(
                "{clients:>8} {:>8} {:>12.0} {:>14.0} {:>7.2} {:>12.0} {:>7.2} {reads:>22}",
                if absent { "absent" } else { "present" },
                g[0],
                g[1],
                g[1] / g[0],
                g[2],
                g[2] / g[0],
            );
        }
    }
    if args.held_connections > 0 {
        held::run(&ca, args.writes, args.held_connections, args.rounds).await;
    }
    if args.catch_up_mib > 0 {
        catch_up::run(args.catch_up_mib).await;
    }
}
