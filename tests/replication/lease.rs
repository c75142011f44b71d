//! Leader leases: linearizable reads on the leader without a round while the lease holds,
//! and never a stale read from a leader that has voted for another.

use std::time::{Duration, Instant};

use lsm_bloom::replication::{Error, ReadPolicy};

use super::cluster::{fast_config, steady_config, Cluster};

/// Sequential linearizable reads on the leader run almost no rounds (one per lease); reads
/// under `ReadPolicy::ReadIndex` run one each, and leases can be turned off.
pub async fn leases_serve_reads_without_rounds() {
    for lease in [true, false] {
        let mut config = steady_config();
        if !lease {
            config.read_lease = None;
        }
        let c = Cluster::start(&[1, 2, 3], config).await;
        // A leader that has committed a write: a node that has just won an election can lose
        // it to a rival's vote round (seen under load), which this test is not about.
        let deadline = Instant::now() + Duration::from_secs(20);
        let l = loop {
            let l = c.wait_for_leader(Duration::from_secs(10)).await;
            match l.put("k", "1").await {
                Ok(_) => break l,
                Err(Error::NotLeader { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("the first write: {e}"),
            }
        };
        let (rounds, leased) = (l.read_index_rounds(), l.lease_reads());
        let start = Instant::now();
        let n = 500;
        for i in 0..n {
            l.put("k", i.to_string()).await.unwrap();
            let v = l.get("k", ReadPolicy::Linearizable).await.unwrap();
            assert_eq!(v, Some(i.to_string().into_bytes()));
        }
        let (rounds, leased) = (l.read_index_rounds() - rounds, l.lease_reads() - leased);
        let secs = start.elapsed().as_secs_f64();
        println!("lease {lease}: {n} reads in {secs:.2} s: {rounds} rounds, {leased} lease reads");
        if lease {
            // One round per 200 ms lease at most, plus one after each lapse.
            let most = (secs / 0.2).ceil() as u64 + 1;
            assert!(rounds <= most, "{rounds} rounds (at most {most} expected)");
            assert_eq!(leased + rounds, n, "every read was leased or ran a round");
        } else {
            assert_eq!((rounds, leased), (n, 0));
        }
        let before = l.read_index_rounds();
        l.get("k", ReadPolicy::ReadIndex).await.unwrap();
        assert_eq!(
            l.read_index_rounds(),
            before + 1,
            "ReadIndex always runs a round"
        );
    }
}

/// A leader holding a lease votes for another node (it hands leadership over, the one way
/// openraft lets a leader vote for another while its followers' leases run) and is then cut
/// off; the new leader acknowledges a write; the old leader, its lease still running by the
/// clock, must not answer a linearizable read from its stale store.
pub async fn a_leader_that_voted_for_another_serves_no_lease_read() {
    let mut config = fast_config();
    config.raft.heartbeat_interval = 100;
    config.raft.election_timeout_min = 1500;
    config.raft.election_timeout_max = 3000;
    config.read_lease = Some(Duration::from_millis(1500));
    let c = Cluster::start(&[1, 2, 3], config).await;
    let old = c.wait_for_leader(Duration::from_secs(20)).await;
    old.put("k", "old").await.unwrap();
    c.wait_converged(Duration::from_secs(10)).await;
    let leased = Instant::now();
    assert_eq!(
        old.get("k", ReadPolicy::Linearizable).await.unwrap(),
        Some(b"old".to_vec())
    );
    let other = c
        .running()
        .into_iter()
        .find(|n| n.id() != old.id())
        .unwrap();
    old.raft()
        .trigger()
        .transfer_leader(other.id())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while other.leader() != Some(other.id()) {
        assert!(
            Instant::now() < deadline,
            "node {} was not elected",
            other.id()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Cut the old leader off, so it cannot learn of the write below.
    let ids: Vec<_> = c.running().iter().map(|n| n.id()).collect();
    c.router.partition(&[old.id()], &ids);
    other.put("k", "new").await.unwrap();
    let before = old.lease_reads();
    let r = old.get("k", ReadPolicy::Linearizable).await;
    let elapsed = leased.elapsed();
    println!("old leader's read {elapsed:?} into its 1.5 s lease: {r:?}");
    assert!(
        elapsed < Duration::from_millis(1500),
        "too slow to test the lease: {elapsed:?}"
    );
    assert!(
        matches!(r, Err(Error::NotLeader { .. }) | Ok(Some(_))),
        "unexpected answer {r:?}"
    );
    assert_ne!(
        r.ok(),
        Some(Some(b"old".to_vec())),
        "a stale read under a lease"
    );
    assert_eq!(
        old.lease_reads(),
        before,
        "served under a lease after voting"
    );
}
