//! Exactly-once forwarding: a forwarded write that reaches the log twice is applied once.
//!
//! The double apply this guards against: a follower forwards `k = a`; the leader appends it
//! and then answers "not the leader" (openraft does so for an entry it appended and may yet
//! commit); another client sets `k = b`; the forwarder sends `k = a` again to the leader it
//! was named, and the retry overwrote `b`. Here a fake leader plays that part on the real
//! leader's raft address: it passes the forwarded frame to the real leader (whose raft
//! server moved to another port), writes `k = b`, and answers "not the leader" naming the
//! moved server.

use std::time::Duration;

use lsm_bloom::replication::tcp::{Forwarder, RaftServer};
use lsm_bloom::replication::{Op, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::cluster::fast_config;
use crate::tcp::TcpCluster;

/// A frame (FORMAT.md §8): length, CRC-32 of the payload, the payload.
fn frame(payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    f.extend_from_slice(payload);
    f
}

async fn read_frame(s: &mut (impl AsyncReadExt + Unpin)) -> Vec<u8> {
    let mut header = [0u8; 8];
    s.read_exact(&mut header).await.unwrap();
    let n = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
    let mut payload = vec![0u8; n];
    s.read_exact(&mut payload).await.unwrap();
    payload
}

/// The error response "not the leader", naming node `id` at `addr`.
fn not_leader(id: u64, addr: &str) -> Vec<u8> {
    let mut p = vec![0xff, 3, 1];
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&(addr.len() as u32).to_le_bytes());
    p.extend_from_slice(addr.as_bytes());
    p
}

/// A forwarded write's answer when it was applied: tag 0x84, no calls' answers (FORMAT.md §8).
const APPLIED: [u8; 5] = [0x84, 0, 0, 0, 0];

pub async fn a_forward_resent_to_the_new_leader_is_applied_once() {
    let c = TcpCluster::start(3, fast_config()).await;
    c.put("warm".into(), "up".into()).await;
    let leader = c.leader().unwrap();
    let lid = leader.id();
    let follower = (1..=3).find(|&id| id != lid).unwrap();
    // The leader's raft server moves to another port; a fake takes its address.
    let addr = c.addrs[&lid].clone();
    c.nodes.lock().unwrap().get_mut(&lid).unwrap().server.stop();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let moved = RaftServer::bind("127.0.0.1:0", leader.clone(), c.auth(lid))
        .await
        .unwrap();
    let moved_addr = moved.local_addr().to_string();
    let fake = TcpListener::bind(&addr).await.unwrap();
    let (auth, fake_auth) = (c.auth(lid), c.auth(lid));
    let fake_leader = leader.clone();
    let moved_to = moved_addr.clone();
    let fake = tokio::spawn(async move {
        let (tcp, _) = fake.accept().await.unwrap();
        let (mut conn, _) = fake_auth.accept(tcp).await.unwrap();
        let forwarded = read_frame(&mut conn).await;
        assert_eq!(forwarded[0], 4, "not a forwarded write");
        // The entry reaches the log and is applied...
        let mut real = auth.connect(&moved_to, lid).await.unwrap();
        real.write_all(&frame(&forwarded)).await.unwrap();
        real.flush().await.unwrap();
        assert_eq!(
            read_frame(&mut real).await,
            APPLIED,
            "the first copy failed"
        );
        // ... another client writes after it ...
        fake_leader.put("k", "b").await.unwrap();
        // ... and the forwarder hears "not the leader".
        conn.write_all(&frame(&not_leader(lid, &moved_to)))
            .await
            .unwrap();
        conn.flush().await.unwrap();
        forwarded
    });
    let fwd = Forwarder::new(c.auth(follower));
    // A write the leader would refuse is refused on the follower, naming what is wrong.
    let too_long = Request::new(vec![Op::Delete {
        key: vec![b'x'; lsm_bloom::replication::MAX_REPLICATED_KEY_SIZE + 1],
    }]);
    match fwd.write(&c.db(follower).unwrap(), too_long).await {
        Err(lsm_bloom::replication::Error::Store(e)) => {
            assert!(e.to_string().contains("key of"), "{e}")
        }
        r => panic!("an over-long key was not refused as bad input: {r:?}"),
    }
    let put_a = Request::new(vec![Op::Put {
        key: b"k".to_vec(),
        value: b"a".to_vec(),
    }]);
    fwd.write(&c.db(follower).unwrap(), put_a).await.unwrap();
    let forwarded = fake.await.unwrap();
    assert_eq!(
        leader.state_machine().get(b"k").unwrap(),
        Some(b"b".to_vec()),
        "the resent write was applied again, over the later one"
    );
    // The same frame once more (a copy delayed in the network): answered as done, not
    // applied.
    let mut s = c.auth(follower).connect(&moved_addr, lid).await.unwrap();
    s.write_all(&frame(&forwarded)).await.unwrap();
    s.flush().await.unwrap();
    assert_eq!(read_frame(&mut s).await, APPLIED);
    assert_eq!(
        leader.state_machine().get(b"k").unwrap(),
        Some(b"b".to_vec())
    );
    // Every node applied the same: once the followers catch up, all hold `b`.
    c.put("last".into(), "x".into()).await;
    for id in 1..=3 {
        let db = c.db(id).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while db.state_machine().get(b"last").unwrap().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "node {id} did not catch up"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            db.state_machine().get(b"k").unwrap(),
            Some(b"b".to_vec()),
            "node {id}"
        );
    }
    drop(moved);
}
