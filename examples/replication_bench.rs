//! Replication's costs, measured: a three-node cluster over TCP on 127.0.0.1 (all three in
//! this process) against one node.
//!
//! `cargo run --release --features replication --example replication_bench -- [--writes N]
//!  [--gets N] [--clients 1,8] [--rounds 3]`
//!
//! Per round and client count, interleaved:
//! - durable writes: one `Db` with `sync_writes` (every put synced, concurrent ones sharing a
//!   sync) against replicated puts through the leader (acknowledged once a majority synced
//!   them and the leader applied them);
//! - gets of present keys, and of absent keys, on the leader: local reads of the state
//!   machine against linearizable ones (a read index round each), with the data-block reads
//!   per get of each.
//!
//! Prints each figure's median over the rounds and the ratios. The three nodes and the
//! clients share this machine's cores, so a replicated write here pays three nodes' work on
//! the same CPUs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use lsm_bloom::replication::tcp::{RaftServer, TcpNetwork};
use lsm_bloom::replication::{BasicNode, ReadPolicy, ReplicatedDb, ReplicationConfig};
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
}

fn value(i: u64) -> Vec<u8> {
    format!("{i:016}-{}", "v".repeat(83)).into_bytes()
}

async fn cluster(root: &std::path::Path) -> (Vec<ReplicatedDb>, Vec<RaftServer>) {
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
        let node = ReplicatedDb::open(
            id,
            root.join(format!("n{id}")),
            ReplicationConfig::default(),
            TcpNetwork::new(),
        )
        .await
        .unwrap();
        servers.push(RaftServer::serve(l, node.clone()).unwrap());
        nodes.push(node);
    }
    nodes[0].initialize(members).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while nodes[0].leader() != Some(1) {
        assert!(Instant::now() < deadline, "node 1 did not become leader");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (nodes, servers)
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

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[derive(Default)]
struct Figures {
    single_sync: Vec<f64>,
    replicated: Vec<f64>,
    local_present: Vec<f64>,
    linear_present: Vec<f64>,
    local_absent: Vec<f64>,
    linear_absent: Vec<f64>,
    reads_local_absent: Vec<f64>,
    reads_linear_absent: Vec<f64>,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let mut figures: BTreeMap<u64, Figures> = BTreeMap::new();
    for round in 0..args.rounds {
        for &clients in &args.clients {
            let f = figures.entry(clients).or_default();
            let root = tempfile::tempdir().unwrap();
            // One node, every put durable before it returns.
            let single = Arc::new(
                Db::open(
                    root.path().join("single"),
                    Options {
                        sync_writes: true,
                        ..Options::default()
                    },
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

            let (nodes, _servers) = cluster(root.path()).await;
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
            for (absent, local, linear, reads_local, reads_linear) in [
                (
                    false,
                    &mut f.local_present,
                    &mut f.linear_present,
                    None,
                    None,
                ),
                (
                    true,
                    &mut f.local_absent,
                    &mut f.linear_absent,
                    Some(&mut f.reads_local_absent),
                    Some(&mut f.reads_linear_absent),
                ),
            ] {
                let key = move |i: u64| {
                    if absent {
                        format!("k{:09}x", i % writes)
                    } else {
                        format!("k{:09}", i % writes)
                    }
                };
                for (policy, out, reads) in [
                    (
                        ReadPolicy::Local,
                        &mut *local,
                        reads_local.map(|r| r as &mut Vec<f64>),
                    ),
                    (
                        ReadPolicy::Linearizable,
                        &mut *linear,
                        reads_linear.map(|r| r as &mut Vec<f64>),
                    ),
                ] {
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
                    out.push(ops);
                    if let Some(r) = reads {
                        let after = leader.state_machine().db().stats().total.data_block_reads;
                        r.push((after - before) as f64 / args.gets as f64);
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
        "{:>8} {:>14} {:>14} {:>7} {:>12} {:>12} {:>7} {:>12} {:>12} {:>7} {:>10}",
        "clients",
        "1 node sync/s",
        "replicated/s",
        "ratio",
        "local get/s",
        "linear get/s",
        "ratio",
        "local abs/s",
        "linear abs/s",
        "ratio",
        "reads/abs"
    );
    for (clients, f) in &mut figures {
        let (s, r) = (median(&mut f.single_sync), median(&mut f.replicated));
        let (lp, zp) = (median(&mut f.local_present), median(&mut f.linear_present));
        let (la, za) = (median(&mut f.local_absent), median(&mut f.linear_absent));
        println!(
            "{clients:>8} {s:>14.0} {r:>14.0} {:>7.2} {lp:>12.0} {zp:>12.0} {:>7.2} {la:>12.0} {za:>12.0} {:>7.2} {:>4.3}/{:.3}",
            r / s,
            zp / lp,
            za / la,
            median(&mut f.reads_local_absent),
            median(&mut f.reads_linear_absent)
        );
    }
}
