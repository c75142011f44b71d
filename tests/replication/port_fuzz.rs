//! A raft-port fuzzer against a live three-node cluster over mutual TLS: forged, garbage and
//! replayed frames of every message kind, first from peers that do not authenticate at all
//! (plain TCP on the TLS port), then from peers with a certificate of another cluster's CA.
//! Nothing they send is decoded: no state changes (no term, no vote, no entry), no node
//! stops, every connection is refused, and writes keep committing throughout.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cluster::fast_config;
use crate::common::Rng;
use crate::tcp::TcpCluster;

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Valid-looking payloads of every request kind (FORMAT.md §8), from which frames are
/// forged: an append with a huge term, a vote, a snapshot chunk, a forwarded write, a read
/// index, a stream request, and a hello.
fn seeds() -> Vec<Vec<u8>> {
    let vote = |term: u64| {
        let mut v = term.to_le_bytes().to_vec();
        v.extend_from_slice(&9u64.to_le_bytes());
        v.push(1);
        v
    };
    let put = {
        let mut r = 1u32.to_le_bytes().to_vec();
        r.push(1);
        r.extend_from_slice(&3u32.to_le_bytes());
        r.extend_from_slice(b"key");
        r.extend_from_slice(&5u32.to_le_bytes());
        r.extend_from_slice(b"value");
        r
    };
    let mut hello = vec![7u8];
    hello.extend_from_slice(&lsm_bloom::replication::tcp::PROTOCOL_VERSION.to_le_bytes());
    hello.extend_from_slice(&9u64.to_le_bytes());
    hello.extend_from_slice(&9u32.to_le_bytes());
    hello.extend_from_slice(b"tcp-tests");
    vec![
        [&[1u8][..], &vote(u64::MAX), &[0, 0], &0u32.to_le_bytes()].concat(),
        [&[1u8][..], &vote(7), &[0, 0], &0u32.to_le_bytes()].concat(),
        [&[2u8][..], &vote(1 << 40), &[0]].concat(),
        [
            &[3u8][..],
            &vote(8),
            &4u32.to_le_bytes(),
            &[0; 4],
            &0u64.to_le_bytes(),
            &3u32.to_le_bytes(),
            b"abc",
            &[1],
        ]
        .concat(),
        // A forwarded write: no parts, then the request.
        [&[4u8][..], &0u32.to_le_bytes(), &put].concat(),
        vec![5],
        vec![6],
        hello,
    ]
}

/// One forged frame: a seed, mutated (bytes flipped, cut, extended), framed with a valid or a
/// broken CRC, or just random bytes.
fn forge(rng: &mut Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut p = seeds[rng.below(seeds.len() as u64) as usize].clone();
    for _ in 0..rng.below(4) {
        if p.is_empty() {
            break;
        }
        let i = rng.below(p.len() as u64) as usize;
        p[i] ^= rng.next() as u8;
    }
    if rng.chance(10) {
        p.truncate(rng.below(p.len() as u64 + 1) as usize);
    }
    if rng.chance(10) {
        p.extend((0..rng.below(64)).map(|_| rng.next() as u8));
    }
    match rng.below(10) {
        0 => (0..rng.below(512)).map(|_| rng.next() as u8).collect(),
        1 => {
            let mut f = frame(&p);
            f[4] ^= 1;
            f
        }
        _ => frame(&p),
    }
}

/// What must not change: each node's term, vote and last log index, and the leader.
fn state(c: &TcpCluster) -> Vec<(u64, u64, Option<u64>)> {
    (1..=3)
        .map(|id| {
            let m = c.db(id).unwrap().metrics();
            (m.current_term, m.vote.leader_id.node_id, m.last_log_index)
        })
        .collect()
}

pub async fn forged_frames_before_authentication_change_nothing() {
    let plain_frames = crate::common::scaled(100_000, 3_000);
    let tls_frames = crate::common::scaled(2_000, 100);
    let c = TcpCluster::start(3, fast_config()).await;
    c.put("a".into(), "1".into()).await;
    let leader = c.leader().unwrap().id();
    let before = state(&c);
    let seeds = seeds();
    let refused = |id| {
        let n = c.nodes.lock().unwrap();
        let s = n[&id].server.stats();
        s.refused_handshakes.load(Ordering::Relaxed) + s.refused.load(Ordering::Relaxed)
    };
    let refused_before: u64 = (1..=3).map(refused).sum();
    let started = Instant::now();
    // Unauthenticated: 8 senders, each one connection at a time (under the per-address
    // handshake limit), one forged frame per connection, at every node in turn.
    let mut senders = Vec::new();
    for s in 0..8u64 {
        let addrs: Vec<String> = (1..=3).map(|id| c.addrs[&id].clone()).collect();
        let seeds = seeds.clone();
        senders.push(tokio::spawn(async move {
            let mut rng = Rng::new(1000 + s);
            for i in 0..plain_frames / 8 {
                let mut conn = TcpStream::connect(&addrs[(i as usize) % 3]).await.unwrap();
                let _ = conn.write_all(&forge(&mut rng, &seeds)).await;
                let mut sink = Vec::new();
                let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut sink))
                    .await
                    .expect("a connection was left open");
            }
        }));
    }
    for s in senders {
        s.await.unwrap();
    }
    let plain_took = started.elapsed();
    // Writes still commit.
    c.put("b".into(), "2".into()).await;
    // Another cluster's certificates: refused in the TLS handshake.
    let other = crate::common::certs::Ca::new("another cluster");
    for i in 0..tls_frames {
        let target = 1 + i % 3;
        let r = other
            .auth("tcp-tests", 9)
            .connect(&c.addrs[&target], target)
            .await;
        assert!(r.is_err(), "a peer of another CA authenticated");
    }
    c.put("c".into(), "3".into()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = state(&c);
    // The two puts are the only entries added, by the same leader in the same term.
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (a.0, a.1),
            (b.0, b.1),
            "a term or vote changed: {before:?} -> {after:?}"
        );
    }
    assert_eq!(c.leader().unwrap().id(), leader);
    let refused_after: u64 = (1..=3).map(refused).sum();
    assert!(
        refused_after - refused_before >= plain_frames / 8 * 8 + tls_frames,
        "every connection refused: {} of {}",
        refused_after - refused_before,
        plain_frames + tls_frames
    );
    let all = c.converge().await;
    assert!(all.iter().all(|d| d == &all[0]));
    println!(
        "port fuzz: {} forged frames from unauthenticated peers in {plain_took:?}, {tls_frames} handshakes with another cluster's certificates; nothing changed",
        plain_frames / 8 * 8
    );
}
