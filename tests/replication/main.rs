//! The replicated store end to end, in one process: three nodes on disk over the in-process
//! router, with leaders stopped and restarted under concurrent writers, snapshots forced,
//! partitions, and every acknowledged write checked on every node.

mod bad_input;
mod checker;
mod cluster;
mod exactly_once;
mod fixtures;
mod keyspaces;
mod lease;
mod linearizable;
mod log_trim;
mod port_fuzz;
mod power_loss;
mod tcp;
mod tls;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::{fast_config, steady_config, Cluster};
use lsm_bloom::replication::{Error, NodeId, ReadPolicy};

#[path = "../common/mod.rs"]
mod common;

/// Four writers; the leader stopped and restarted many times; one follower kept down long
/// enough that the log it needs is purged, so it must catch up by snapshot. Every
/// acknowledged write is on every node at the end, and the nodes hold the same data.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_restarts_lose_no_acknowledged_write() {
    let kills = common::scaled(20, 8);
    let min_writes = common::scaled(5000, 2000);
    let mut config = fast_config();
    config.raft.snapshot_policy =
        lsm_bloom::replication::openraft::SnapshotPolicy::LogsSinceLast(300);
    config.raft.max_in_snapshot_log_to_keep = 20;
    config.raft.purge_batch_size = 1;
    let ids: [NodeId; 3] = [1, 2, 3];
    let c = Cluster::start(&ids, config).await;

    let acked: Arc<Mutex<BTreeMap<Vec<u8>, Vec<u8>>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for w in 0..4u32 {
        let (c, acked, stop, count) = (c.clone(), acked.clone(), stop.clone(), count.clone());
        writers.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("w{w}-{i:06}").into_bytes();
                let value = format!("{w}:{i}:{}", "v".repeat((i % 64) as usize)).into_bytes();
                let Some(l) = c.leader() else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                match l.put(key.clone(), value.clone()).await {
                    Ok(()) => {
                        acked.lock().unwrap().insert(key, value);
                        count.fetch_add(1, Ordering::Relaxed);
                        i += 1;
                    }
                    // Not acknowledged: retried under the same key, so it is written again.
                    Err(Error::NotLeader { .. } | Error::Raft(_)) => {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err(e) => panic!("writer {w}: {e}"),
                }
            }
        }));
    }

    let wait_for_writes = |n: u64| {
        let count = count.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while count.load(Ordering::Relaxed) < n {
                assert!(
                    Instant::now() < deadline,
                    "writes stalled at {}",
                    count.load(Ordering::Relaxed)
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let per_round = (min_writes as u64) / (kills as u64 + 2);
    for round in 0..kills {
        wait_for_writes(count.load(Ordering::Relaxed) + per_round).await;
        let l = c.wait_for_leader(Duration::from_secs(10)).await;
        let (leader, its_last) = (l.id(), l.metrics().last_log_index.unwrap_or(0));
        drop(l);
        c.stop(leader).await;
        if round == kills / 2 {
            // Keep it down until the new leader has purged past the end of its log: it can
            // then only catch up by snapshot.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let purged = c.leader().and_then(|l| l.metrics().purged).map(|p| p.index);
                if purged.is_some_and(|p| p > its_last) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the log was never purged past {its_last}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        c.open(leader).await;
    }
    wait_for_writes(min_writes as u64).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    c.wait_converged(Duration::from_secs(30)).await;

    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= min_writes,
        "{} acknowledged writes",
        acked.len()
    );
    let first = c.contents(1);
    for id in ids {
        let data: BTreeMap<Vec<u8>, Vec<u8>> = c.contents(id).into_iter().collect();
        let lost: Vec<_> = acked
            .iter()
            .filter(|(k, v)| data.get(*k) != Some(v))
            .collect();
        assert!(
            lost.is_empty(),
            "node {id} lost {} acknowledged writes, first {:?}",
            lost.len(),
            lost.first().map(|(k, _)| String::from_utf8_lossy(k))
        );
        assert_eq!(c.contents(id), first, "node {id} differs from node 1");
    }
    let installs = c.snapshots_installed();
    assert!(installs >= 1, "no snapshot was installed");
    println!(
        "{} acknowledged writes over {kills} leader restarts, {installs} snapshot installs, 0 lost on 3 nodes",
        acked.len()
    );
}

/// Five clients over five keys, the leader restarted every 300 ms: the history of every
/// key is linearizable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reads_and_writes_are_linearizable_across_leader_kills() {
    let ops = common::scaled(2000, 1000);
    let kills = common::scaled(10, 5);
    let o = linearizable::run(
        ops,
        kills,
        5,
        5,
        Duration::from_millis(300),
        ReadPolicy::Linearizable,
        Duration::from_millis(10),
    )
    .await;
    println!(
        "linearizable: {} operations completed, {} failed (left in flight), {} leader kills, checked in {:?}",
        o.completed, o.failed, o.kills, o.check_time
    );
    assert!(
        o.violations.is_empty(),
        "keys {:?} are not linearizable",
        o.violations
    );
}

/// The negative control: the same workload reading each node's local state (followers lag
/// the leader) must be caught by the checker.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_checker_catches_stale_local_reads() {
    // Unpaced, so reads follow writes closely: followers' lag shows.
    let o = linearizable::run(
        1000,
        0,
        3,
        5,
        Duration::from_millis(300),
        ReadPolicy::Local,
        Duration::ZERO,
    )
    .await;
    println!(
        "local reads: {} operations, {} failed, {} kills, violations on keys {:?}, checked in {:?}",
        o.completed, o.failed, o.kills, o.violations, o.check_time
    );
    assert!(!o.violations.is_empty(), "stale reads went unnoticed");
}

/// The leader cut off from the other two: it acknowledges no write and answers no
/// linearizable read; the majority elects a leader and goes on; once healed, all three
/// converge on the majority's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_minority_acknowledges_nothing_and_converges_after_healing() {
    let mut config = fast_config();
    config.request_timeout = Duration::from_millis(1500);
    let ids: [NodeId; 3] = [1, 2, 3];
    let c = Cluster::start(&ids, config).await;
    let old = c.wait_for_leader(Duration::from_secs(10)).await;
    old.put("before", "1").await.unwrap();
    c.router.partition(&[old.id()], &ids);

    // The minority side: writes and linearizable reads fail (time out or are refused).
    let w = old.put("minority", "x").await;
    println!("minority write: {w:?}");
    assert!(w.is_err(), "the isolated leader acknowledged a write");
    let r = old.get("before", ReadPolicy::Linearizable).await;
    assert!(
        r.is_err(),
        "the isolated leader answered a linearizable read: {r:?}"
    );

    // The majority side elects a leader of its own and takes writes.
    let deadline = Instant::now() + Duration::from_secs(10);
    let new = loop {
        let l = c
            .running()
            .into_iter()
            .find(|n| n.id() != old.id() && n.leader() == Some(n.id()));
        if let Some(l) = l {
            break l;
        }
        assert!(Instant::now() < deadline, "the majority elected no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for i in 0..50 {
        new.put(format!("majority-{i}"), "y").await.unwrap();
    }
    assert!(c.router.dropped() > 0);

    c.router.heal();
    c.wait_converged(Duration::from_secs(20)).await;
    let first = c.contents(ids[0]);
    for id in ids {
        let data = c.contents(id);
        assert_eq!(data, first, "node {id} differs after healing");
        assert!(
            data.iter().any(|(k, _)| k == b"majority-49"),
            "node {id} lacks the majority's writes"
        );
    }
    // The minority's write was never acknowledged; it may or may not have survived, but
    // every node agrees on it.
    let l = c.wait_for_leader(Duration::from_secs(10)).await;
    assert_eq!(
        l.get("before", ReadPolicy::Linearizable).await.unwrap(),
        Some(b"1".to_vec())
    );
}

/// Applies are not synced; a power loss of the state machine's store after many snapshots
/// and purges loses no acknowledged write (the log still holds what the store dropped).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_power_loss_of_the_state_machine_loses_no_acknowledged_write() {
    use lsm_bloom::fs::UnsyncedTail;
    let writes = common::scaled(1000, 400);
    for (seed, tail) in [
        UnsyncedTail::Dropped,
        UnsyncedTail::RandomPrefix,
        UnsyncedTail::RandomPages,
    ]
    .into_iter()
    .enumerate()
    {
        let lost = power_loss::round(writes, tail, seed as u64).await;
        println!("power loss ({tail:?}): {lost} of {writes} acknowledged writes lost");
        assert_eq!(lost, 0, "{tail:?}: {lost} acknowledged writes lost");
    }
}

/// Replicated keyspaces against a model of maps: puts and deletes in them, clears and swaps,
/// a follower caught up by snapshot, every node restarted (`keyspaces.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicated_keyspaces_follow_a_model_through_a_snapshot_and_restarts() {
    for seed in 0..common::scaled(4, 1) as u64 {
        keyspaces::model_run(seed, 300).await;
    }
}

/// Range deletes reach every node, and an unbounded one leaves the state machine's own keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn range_deletes_reach_every_node() {
    keyspaces::range_deletes_on_every_node().await;
}

/// `fixtures/replication-v1/node/` (layout version 1) reads as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn layout_v1_fixture_still_reads() {
    fixtures::check(1).await;
}

/// `fixtures/replication-v2/node/` (layout version 2: writes with ids) reads as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn layout_v2_fixture_still_reads() {
    fixtures::check(2).await;
}

/// `fixtures/replication-v3/node/` (layout version 3: keyspace operations) reads as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn layout_v3_fixture_still_reads() {
    fixtures::check(3).await;
}

/// `fixtures/replication-v4/node/` (layout version 4: puts with an expiry) reads as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn layout_v4_fixture_still_reads() {
    fixtures::check(4).await;
}

/// `fixtures/replication-v5/node/` (layout version 5: range deletes) reads as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn layout_v5_fixture_still_reads() {
    fixtures::check(5).await;
}

/// `fixtures/replication-v6/node/` (layout version 6: procedure calls) reads as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn layout_v6_fixture_still_reads() {
    fixtures::check(6).await;
}

/// Over TCP on 127.0.0.1: leaders restarted, a node caught up by a snapshot in 4 KiB chunks;
/// every node ends with every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tcp_cluster_replicates_through_restarts_and_a_chunked_snapshot() {
    let (written, installed, frames) = tcp::replicate_with_restarts(common::scaled(6, 3)).await;
    println!("tcp: {written} writes on every node, {installed} snapshot installs, {frames} frames served");
    assert!(installed >= 1, "no snapshot was installed");
}

/// A call dropped midway leaves no answer on its connection for the next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_leaves_no_answer_for_the_next() {
    bad_input::a_dropped_call_leaves_no_answer_for_the_next().await;
}

/// Garbage on the raft port: each kind closes its connection, is counted once, and changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn garbage_on_the_raft_port_is_counted_and_changes_nothing() {
    bad_input::garbage_on_the_raft_port().await;
}

/// Peers of another CA or cluster, plain TCP on a TLS port, and a node answering for
/// another: each handshake refused, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn peers_that_do_not_authenticate_are_refused() {
    bad_input::peers_that_do_not_authenticate_are_refused().await;
}

/// Certificates made by `docs/cluster-certs.sh` (openssl), as README shows, authenticate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssl_certificates_authenticate_nodes() {
    tls::openssl_certificates_authenticate_nodes().await;
}

/// Header-only frames, silent connections and an overlong vote do not stop writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_few_connections_do_not_starve_a_node() {
    bad_input::a_few_connections_do_not_starve_a_node().await;
}

/// A snapshot stream is restarted or continued only by its leader, and held to its limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_streams_are_held_to_their_leader_and_limits() {
    bad_input::snapshot_streams_are_held_to_their_leader_and_limits().await;
}

/// Forged frames of every kind from peers that never authenticate change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_frames_before_authentication_change_nothing() {
    port_fuzz::forged_frames_before_authentication_change_nothing().await;
}

/// A forwarded write after the leader closed the pooled connection goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_forwarders_pool_drops_closed_connections() {
    tcp::the_forwarders_pool_drops_closed_connections().await;
}

/// A forwarded write sent again after "not the leader" is applied once, on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forward_resent_to_the_new_leader_is_applied_once() {
    exactly_once::a_forward_resent_to_the_new_leader_is_applied_once().await;
}

/// A damaged or truncated snapshot sent to a follower installs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn damaged_snapshots_install_nothing() {
    bad_input::damaged_snapshots_install_nothing().await;
}

/// Membership changes naming unknown nodes are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn membership_changes_naming_unknown_nodes_are_refused() {
    bad_input::membership_changes_naming_unknown_nodes_are_refused().await;
}

/// Followers forward writes to the leader and serve linearizable reads after a read index.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn followers_forward_writes_and_read_linearizably() {
    tcp::followers_forward_writes_and_read_linearizably().await;
}

/// Heartbeats and read index rounds reuse connections rather than open one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heartbeats_reuse_connections() {
    tcp::heartbeats_reuse_connections().await;
}

/// An append stream that repeats an entry-less append ends after answering it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_append_stream_ends() {
    tcp::a_stalled_append_stream_ends().await;
}

/// Concurrent read index reads share rounds: 64 at once take far fewer than 64 rounds, and
/// each still sees the write acknowledged before it began.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_linearizable_reads_share_read_index_rounds() {
    let c = Cluster::start(&[1, 2, 3], steady_config()).await;
    let l = c.wait_for_leader(Duration::from_secs(10)).await;
    l.put("k", "1").await.unwrap();
    let before = l.read_index_rounds();
    let start = Arc::new(tokio::sync::Barrier::new(64));
    let reads: Vec<_> = (0..64)
        .map(|_| {
            let (l, start) = (l.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                l.get("k", ReadPolicy::ReadIndex).await
            })
        })
        .collect();
    for r in reads {
        assert_eq!(r.await.unwrap().unwrap(), Some(b"1".to_vec()));
    }
    let rounds = l.read_index_rounds() - before;
    println!("64 concurrent linearizable reads: {rounds} read index rounds");
    // One round per read (64) without sharing.
    assert!(
        (1..=16).contains(&rounds),
        "{rounds} rounds for 64 concurrent reads"
    );
}

/// Sequential linearizable reads on the leader run one round per lease, not one per read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leases_serve_reads_without_rounds() {
    lease::leases_serve_reads_without_rounds().await;
}

/// A leader that voted for another node serves no read under its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_that_voted_for_another_serves_no_lease_read() {
    lease::a_leader_that_voted_for_another_serves_no_lease_read().await;
}

/// Concurrent writes share log entries (far fewer entries than writes), and each stays
/// whole: every operation of every acknowledged write is on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_share_log_entries_and_stay_whole() {
    let c = Cluster::start(&[1, 2, 3], steady_config()).await;
    let l = c.wait_for_leader(Duration::from_secs(10)).await;
    let before = l.metrics().last_log_index.unwrap_or(0);
    let start = Arc::new(tokio::sync::Barrier::new(64));
    let writes: Vec<_> = (0..64)
        .map(|i| {
            let (l, start) = (l.clone(), start.clone());
            tokio::spawn(async move {
                let mut b = lsm_bloom::WriteBatch::new();
                b.put(format!("w{i}-a"), format!("{i}"));
                b.put(format!("w{i}-b"), format!("{i}"));
                b.delete(format!("w{i}-a"));
                start.wait().await;
                l.write(b.try_into().unwrap()).await
            })
        })
        .collect();
    for w in writes {
        w.await.unwrap().unwrap();
    }
    let entries = l.metrics().last_log_index.unwrap_or(0) - before;
    println!("64 concurrent writes: {entries} log entries");
    assert!(entries <= 16, "{entries} entries for 64 concurrent writes");
    c.wait_converged(Duration::from_secs(10)).await;
    for n in c.running() {
        for i in 0..64 {
            let sm = n.state_machine();
            assert_eq!(sm.get(format!("w{i}-a").as_bytes()).unwrap(), None);
            assert_eq!(
                sm.get(format!("w{i}-b").as_bytes()).unwrap(),
                Some(i.to_string().into_bytes())
            );
        }
    }
}

/// A follower whose directory is deleted restarts empty under the same id, while writes go
/// on: the leader takes its log going back (no panic; openraft's
/// `loosen-follower-log-revert`), and it catches up with every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wiped_follower_rejoins_under_its_id_while_writes_go_on() {
    let c = Cluster::start(&[1, 2, 3], fast_config()).await;
    let l = c.wait_for_leader(Duration::from_secs(10)).await;
    let f = [1, 2, 3].into_iter().find(|&id| id != l.id()).unwrap();
    for round in 0..3 {
        for i in 0..200 {
            l.put(format!("r{round}-{i}"), "v").await.unwrap();
        }
        c.wait_converged(Duration::from_secs(10)).await;
        c.stop(f).await;
        std::fs::remove_dir_all(c.root.path().join(format!("n{f}"))).unwrap();
        let writes = {
            let l = l.clone();
            tokio::spawn(async move {
                for i in 200..400 {
                    l.put(format!("r{round}-{i}"), "v").await.unwrap();
                }
            })
        };
        c.open(f).await;
        writes.await.unwrap();
        c.wait_converged(Duration::from_secs(20)).await;
        for i in 0..400 {
            let k = format!("r{round}-{i}");
            assert_eq!(
                c.node(f)
                    .unwrap()
                    .state_machine()
                    .get(k.as_bytes())
                    .unwrap(),
                Some(b"v".to_vec()),
                "{k} on the wiped node"
            );
        }
    }
}

/// The current snapshot can be opened while newer ones replace it: each open gets a readable
/// file, never a storage error for a pack deleted under it (that race stopped a leader's Raft
/// for good under load).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_current_snapshot_opens_while_newer_ones_replace_it() {
    use lsm_bloom::replication::openraft::storage::RaftStateMachine;
    let c = Cluster::start(&[1], steady_config()).await;
    let l = c.wait_for_leader(Duration::from_secs(10)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (mut sm, stop) = (l.state_machine().clone(), Arc::clone(&stop));
        readers.push(tokio::spawn(async move {
            let mut opened = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let snap = sm
                    .get_current_snapshot()
                    .await
                    .expect("opening the snapshot");
                opened += u64::from(snap.is_some());
                tokio::task::yield_now().await;
            }
            opened
        }));
    }
    for i in 0..common::scaled(200u64, 60) {
        l.put(format!("k{i}"), "v").await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Triggered again until it covers the write (a trigger while one is built is dropped).
        while l
            .state_machine()
            .current_snapshot()
            .and_then(|m| m.last_log_id)
            .map(|x| x.index)
            < l.metrics().last_applied.map(|x| x.index)
        {
            let m = l.metrics();
            assert!(m.running_state.is_ok(), "{:?}", m.running_state);
            assert!(Instant::now() < deadline, "no snapshot of write {i}");
            l.raft().trigger().snapshot().await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.await.unwrap() > 0, "no snapshot opened");
    }
}
