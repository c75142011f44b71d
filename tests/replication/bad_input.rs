//! Bad input on a node's raft port and in snapshots: each is refused with an error, counted,
//! changes nothing, and the node goes on serving. Before a peer authenticates (mutual TLS
//! and the hello), nothing it sends is decoded: its connection is closed as a refused
//! handshake. After, a malformed frame closes the connection as a bad frame.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lsm_bloom::replication::openraft::error::ReplicationClosed;
use lsm_bloom::replication::openraft::network::RPCOption;
use lsm_bloom::replication::openraft::storage::Snapshot;
use lsm_bloom::replication::openraft::{RaftNetworkFactory, RaftNetworkV2};
use lsm_bloom::replication::tcp::{PeerAuth, RaftServer, TcpNetwork};
use lsm_bloom::replication::{BasicNode, Error, ReadPolicy, ReplicatedDb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cluster::fast_config;
use crate::tcp::TcpCluster;

/// Sends `bytes` on `s`; true when the server closed it (read gives EOF) within 5 s without
/// answering.
async fn closed_after(mut s: impl AsyncReadExt + AsyncWriteExt + Unpin, bytes: &[u8]) -> bool {
    let _ = s.write_all(bytes).await;
    let _ = s.flush().await;
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

fn frame(payload: &[u8], crc: Option<u32>) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(
        &crc.unwrap_or_else(|| crc32fast::hash(payload))
            .to_le_bytes(),
    );
    out.extend_from_slice(payload);
    out
}

pub async fn garbage_on_the_raft_port() {
    let c = TcpCluster::start(3, fast_config()).await;
    c.put("a".into(), "1".into()).await;
    let target = c.leader().unwrap().id();
    let addr = c.addrs[&target].clone();
    let count = |f: fn(&lsm_bloom::replication::tcp::TransportStats) -> u64| {
        f(c.nodes.lock().unwrap()[&target].server.stats())
    };
    let bad_frames = || count(|s| s.traffic.bad_frames.load(Ordering::Relaxed));
    let refused = || count(|s| s.refused_handshakes.load(Ordering::Relaxed));
    let (bad_before, refused_before) = (bad_frames(), refused());
    let mut rng = crate::common::Rng::new(7);
    let random: Vec<u8> = (0..4096).map(|_| rng.next() as u8).collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("random bytes", random),
        ("a frame over the limit", (u32::MAX).to_le_bytes().repeat(2)),
        (
            "a frame whose checksum fails",
            frame(&[2, 1, 2, 3], Some(12345)),
        ),
        ("a frame of an unknown message", frame(&[0x42, 0, 0], None)),
        ("a vote cut short", frame(&[2, 1, 0, 0, 0], None)),
        (
            "an append whose entry count overruns",
            frame(&[&[1u8][..], &[0; 17], &[0, 0], &[255; 4]].concat(), None),
        ),
        (
            "a pipelined append stream carrying something else",
            [frame(&[6], None), frame(&[0x42, 0, 0], None)].concat(),
        ),
    ];
    // Unauthenticated: each case as the first bytes of a plain connection. The server may
    // answer with a TLS alert, then closes.
    for (what, bytes) in &cases {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        let _ = s.write_all(bytes).await;
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await;
        assert!(read.is_ok(), "{what}: connection left open");
        assert!(
            got.first().is_none_or(|&b| b == 0x15),
            "{what}: answered with something other than a TLS alert: {got:?}"
        );
    }
    // Authenticated: each case after a good handshake, as node 2 of this cluster.
    let me = c.auth(if target == 2 { 3 } else { 2 });
    for (what, bytes) in &cases {
        let s = me.connect(&addr, target).await.unwrap();
        assert!(closed_after(s, bytes).await, "{what}: connection left open");
    }
    // Give the server's tasks a moment to count.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        refused() - refused_before,
        cases.len() as u64,
        "each unauthenticated input refused once"
    );
    assert_eq!(
        bad_frames() - bad_before,
        cases.len() as u64,
        "each bad input after the handshake counted once"
    );
    // Nothing changed, and the cluster still works.
    c.put("b".into(), "2".into()).await;
    let l = c.leader().unwrap();
    assert_eq!(
        l.get("a", ReadPolicy::Linearizable).await.unwrap(),
        Some(b"1".to_vec())
    );
    assert_eq!(
        l.get("b", ReadPolicy::Linearizable).await.unwrap(),
        Some(b"2".to_vec())
    );
}

/// Peers that fail the handshake are refused before anything they send is decoded: a
/// certificate of another CA, the right CA but another cluster id, plain TCP on a TLS port,
/// and (the caller's side) a server whose certificate names another node than the one
/// called. The refusals are counted; each names what was wrong.
pub async fn peers_that_do_not_authenticate_are_refused() {
    let c = TcpCluster::start(3, fast_config()).await;
    c.put("a".into(), "1".into()).await;
    let target = c.leader().unwrap().id();
    let addr = c.addrs[&target].clone();
    let refused = || {
        c.nodes.lock().unwrap()[&target]
            .server
            .stats()
            .refused_handshakes
            .load(Ordering::Relaxed)
    };
    let before = refused();
    let other_ca = crate::common::certs::Ca::new("another cluster");
    let cases: Vec<(&str, PeerAuth)> = vec![
        ("another CA", other_ca.auth("tcp-tests", 2)),
        ("another cluster id", c.ca.auth("other-cluster", 2)),
        (
            "plain TCP",
            PeerAuth::plain_loopback("tcp-tests", 2).unwrap(),
        ),
    ];
    for (what, auth) in &cases {
        let r = auth.connect(&addr, target).await;
        assert!(r.is_err(), "{what}: the handshake succeeded");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(refused() - before, cases.len() as u64);
    // The caller refuses a node that is not the one it called.
    let other = (1..=3).find(|&id| id != target).unwrap();
    let e = c.auth(9).connect(&addr, other).await.unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("presented the certificate of node {target}")),
        "{e}"
    );
    c.put("b".into(), "2".into()).await;
}

/// A snapshot whose pack is damaged (a flipped byte, so a file's CRC fails) or truncated:
/// refused before openraft sees it (counted), nothing installed, the receiver still running;
/// the same pack undamaged installs.
pub async fn damaged_snapshots_install_nothing() {
    let c = TcpCluster::start(3, fast_config()).await;
    for i in 0..20 {
        c.put(format!("k{i}"), format!("v{i}")).await;
    }
    let leader = c.leader().unwrap();
    leader.raft().trigger().snapshot().await.unwrap();
    let mut snap = None;
    for _ in 0..200 {
        snap = leader.state_machine().current_snapshot();
        if snap.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let meta = snap.expect("the leader built a snapshot");
    let pack_path = std::fs::read_dir(c.root.path().join(format!("n{}/sm/snapshots", leader.id())))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "pack"))
        .unwrap();
    let pack = std::fs::read(&pack_path).unwrap();
    // The receiver: a new node (id 9, empty, not yet a member), so an accepted pack would be
    // installed — and a damaged one reaching openraft would stop it with a storage error.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let fdb = ReplicatedDb::open(
        9,
        c.root.path().join("n9"),
        fast_config(),
        TcpNetwork::new(c.auth(9)),
    )
    .await
    .unwrap();
    let _server = RaftServer::serve(listener, fdb.clone(), c.auth(9)).unwrap();

    let mut flipped = pack.clone();
    let at = pack.len() - 100;
    flipped[at] ^= 0x20;
    let truncated = pack[..pack.len() / 2].to_vec();
    let mut net = TcpNetwork::new(c.auth(leader.id()));
    let mut link = net.new_client(9, &BasicNode::new(addr)).await;
    let vote = leader.metrics().vote;
    let option = || RPCOption::new(Duration::from_secs(5));
    let never = std::future::pending::<ReplicationClosed>;
    let send = |bytes: Vec<u8>, n: usize| {
        let path = c.root.path().join(format!("sent-{n}.pack"));
        std::fs::write(&path, bytes).unwrap();
        Snapshot {
            meta: meta.clone(),
            snapshot: tokio::fs::File::from_std(std::fs::File::open(path).unwrap()),
        }
    };
    for (n, (what, bytes)) in [("a flipped byte", flipped), ("a truncated pack", truncated)]
        .into_iter()
        .enumerate()
    {
        let r = link
            .full_snapshot(vote, send(bytes, n), never(), option())
            .await;
        assert!(r.is_err(), "{what}: the install was accepted");
        assert_eq!(
            fdb.state_machine().snapshots_installed(),
            0,
            "{what}: something was installed"
        );
        assert_eq!(
            fdb.state_machine().applied().unwrap().0,
            None,
            "{what}: applied moved"
        );
        assert_eq!(fdb.state_machine().scan::<&[u8], _>(..).unwrap().count(), 0);
    }
    assert_eq!(fdb.snapshots_refused(), 2);
    // The control: the same pack undamaged is installed, and the node still runs.
    let r = link
        .full_snapshot(vote, send(pack, 2), never(), option())
        .await;
    assert!(r.is_ok(), "the undamaged pack was refused: {r:?}");
    assert_eq!(fdb.state_machine().snapshots_installed(), 1);
    assert_eq!(fdb.state_machine().applied().unwrap().0, meta.last_log_id);
    assert_eq!(
        fdb.state_machine().get(b"k3").unwrap(),
        Some(b"v3".to_vec())
    );
    fdb.shutdown().await.unwrap();
    drop(fdb);
    c.put("after".into(), "x".into()).await;
    let all = c.converge().await;
    assert!(all.iter().all(|d| d == &all[0]));
}

/// A membership change naming a node that is not a member is refused with an error that
/// says so; the membership is unchanged.
pub async fn membership_changes_naming_unknown_nodes_are_refused() {
    let c = TcpCluster::start(3, fast_config()).await;
    c.put("a".into(), "1".into()).await;
    let l = c.leader().unwrap();
    let before = l.members();
    let e = l
        .change_voters(BTreeSet::from([1, 2, 9]))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::Store(_)) && e.to_string().contains("node 9"),
        "{e}"
    );
    let e = l.remove_node(9).await.unwrap_err();
    assert!(e.to_string().contains("node 9 is not a member"), "{e}");
    assert_eq!(l.members(), before);
}

/// A call dropped before its answer arrived (openraft cancels calls and times heartbeats
/// out) must not leave that answer on the link's connection for the next call to take as its
/// own. A peer answers the first vote after 300 ms, granted; every later one at once,
/// refused. The first call is dropped after 50 ms; the second must get the refusal.
pub async fn a_dropped_call_leaves_no_answer_for_the_next() {
    use lsm_bloom::replication::openraft::raft::VoteRequest;
    use lsm_bloom::replication::Vote;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let answers = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let served = answers.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let served = served.clone();
            tokio::spawn(async move {
                // The handshake: the caller's hello, then ours (FORMAT.md §8).
                let mut hello = [0u8; 8 + 1 + 4 + 8 + 4 + 1];
                if s.read_exact(&mut hello).await.is_err() {
                    return;
                }
                let mut back = vec![0x87];
                back.extend_from_slice(
                    &lsm_bloom::replication::tcp::PROTOCOL_VERSION.to_le_bytes(),
                );
                back.extend_from_slice(&9u64.to_le_bytes());
                back.extend_from_slice(&1u32.to_le_bytes());
                back.push(b'c');
                if s.write_all(&frame(&back, None)).await.is_err() {
                    return;
                }
                loop {
                    let mut header = [0u8; 8];
                    if s.read_exact(&mut header).await.is_err() {
                        return;
                    }
                    let n = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
                    let mut body = vec![0u8; n];
                    if s.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let first = served.fetch_add(1, Ordering::SeqCst) == 0;
                    if first {
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    // A vote result: vote (term 5, node 9, not committed), granted, no log id.
                    let mut payload = vec![0x82];
                    payload.extend_from_slice(&5u64.to_le_bytes());
                    payload.extend_from_slice(&9u64.to_le_bytes());
                    payload.extend_from_slice(&[0, u8::from(first), 0]);
                    if s.write_all(&frame(&payload, None)).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let mut net = TcpNetwork::new(PeerAuth::plain_loopback("c", 1).unwrap());
    let mut link = net.new_client(9, &BasicNode::new(addr)).await;
    let req = || VoteRequest {
        vote: Vote::new(5, 1),
        last_log_id: None,
        leadership_transfer: false,
    };
    let option = || RPCOption::new(Duration::from_secs(5));
    let dropped = tokio::time::timeout(Duration::from_millis(50), link.vote(req(), option())).await;
    assert!(
        dropped.is_err(),
        "the first call was not dropped: {dropped:?}"
    );
    // Let the first answer arrive on whatever connection the dropped call used.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = link.vote(req(), option()).await.unwrap();
    assert!(
        !second.vote_granted,
        "the second call took the dropped call's answer"
    );
    assert_eq!(answers.load(Ordering::SeqCst), 2);
}

/// A few connections must not starve a node. Two authenticated peers per follower send only
/// the header of a maximal frame, which used to reserve the whole read budget for 30 s (so
/// no heartbeat or append got through, and the leader's writes failed); 200 unauthenticated
/// connections sit in their handshake; a vote frame announcing 1 MiB is refused from its
/// first bytes. Meanwhile writes go on committing, and a node still connects anew.
pub async fn a_few_connections_do_not_starve_a_node() {
    use lsm_bloom::replication::tcp::MAX_HANDSHAKING_PER_IP;
    let c = TcpCluster::start(3, fast_config()).await;
    c.put("a".into(), "1".into()).await;
    let leader = c.leader().unwrap().id();
    let followers: Vec<_> = (1..=3).filter(|&id| id != leader).collect();
    let mut held = Vec::new();
    for &f in &followers {
        let addr = &c.addrs[&f];
        for me in [7, 8] {
            let mut s = c.auth(me).connect(addr, f).await.unwrap();
            // An append of 256 MiB: its header, then nothing.
            let mut header = (256u32 << 20).to_le_bytes().to_vec();
            header.extend_from_slice(&0u32.to_le_bytes());
            s.write_all(&header).await.unwrap();
            s.flush().await.unwrap();
            held.push(s);
        }
        for _ in 0..100 {
            held_tcp(&mut held, addr).await;
        }
    }
    let stats = |id| {
        let n = c.nodes.lock().unwrap();
        let s = n[&id].server.stats();
        (
            s.refused.load(Ordering::Relaxed),
            s.traffic.bad_frames.load(Ordering::Relaxed),
        )
    };
    let started = std::time::Instant::now();
    for i in 0..50 {
        c.put(format!("during{i}"), "x".into()).await;
    }
    println!(
        "50 writes in {:?} with 4 header-only frames and 200 silent connections held",
        started.elapsed()
    );
    let (refused, _) = stats(followers[0]);
    assert!(
        refused >= (100 - MAX_HANDSHAKING_PER_IP) as u64,
        "unauthenticated connections past the per-address limit were not refused: {refused}"
    );
    // A vote announcing 1 MiB: refused after its first chunk, though the rest never comes.
    let (_, bad_before) = stats(followers[0]);
    let mut s = c
        .auth(7)
        .connect(&c.addrs[&followers[0]], followers[0])
        .await
        .unwrap();
    let mut frame = (1u32 << 20).to_le_bytes().to_vec();
    frame.extend_from_slice(&0u32.to_le_bytes());
    frame.extend_from_slice(&[2u8; 70 << 10]);
    s.write_all(&frame).await.unwrap();
    s.flush().await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the long vote was not refused"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(stats(followers[0]).1, bad_before + 1);
    drop(held);
}

/// Opens a plain connection to `addr` from 127.0.0.2 (another host, as the server counts
/// addresses) and keeps it, saying nothing.
async fn held_tcp(held: &mut Vec<lsm_bloom::replication::tcp::Conn>, addr: &str) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    if let Ok(s) = socket.connect(addr.parse().unwrap()).await {
        held.push(lsm_bloom::replication::tcp::Conn::Plain(s));
    }
}

/// A snapshot stream is held to its leader and its limits: a chunk at offset 0 from an
/// older leader does not restart it, a chunk from another leader does not continue it, an id
/// that is not a plain name is refused, and a stream past `max_snapshot_bytes` is dropped
/// (counted).
pub async fn snapshot_streams_are_held_to_their_leader_and_limits() {
    use lsm_bloom::replication::{ChunkAnswer, PackMeta, SnapshotChunk, StoredMembership, Vote};
    let t = tempfile::tempdir().unwrap();
    let config = fast_config().with_max_snapshot_bytes(10_000);
    let auth = PeerAuth::plain_loopback("c", 9).unwrap();
    let node = ReplicatedDb::open(9, t.path().join("n9"), config, TcpNetwork::new(auth))
        .await
        .unwrap();
    let chunk = |vote: Vote, id: &str, offset: u64, len: usize| SnapshotChunk {
        vote,
        meta: PackMeta {
            last_log_id: None,
            last_membership: StoredMembership::default(),
            snapshot_id: id.into(),
        },
        offset,
        data: vec![7; len],
        done: false,
    };
    let mut leader = Vote::new(5, 1);
    leader.committed = true;
    let mut older = Vote::new(4, 2);
    older.committed = true;
    let taken = |r: &Result<ChunkAnswer, String>| matches!(r, Ok(ChunkAnswer::Taken(_)));
    let r = node
        .install_snapshot_chunk(chunk(leader, "s1", 0, 4000))
        .await;
    assert!(taken(&r), "{r:?}");
    let r = node.install_snapshot_chunk(chunk(older, "s0", 0, 10)).await;
    assert!(
        matches!(r, Ok(ChunkAnswer::Mismatch { .. })),
        "an older leader restarted it: {r:?}"
    );
    let r = node
        .install_snapshot_chunk(chunk(older, "s1", 4000, 10))
        .await;
    assert!(
        matches!(r, Ok(ChunkAnswer::Mismatch { .. })),
        "another leader continued it: {r:?}"
    );
    let r = node
        .install_snapshot_chunk(chunk(leader, "s1", 4000, 4000))
        .await;
    assert!(
        taken(&r),
        "the stream's leader could not continue it: {r:?}"
    );
    let r = node
        .install_snapshot_chunk(chunk(leader, "../escape", 0, 10))
        .await;
    assert!(r.unwrap_err().contains("plain name"));
    let before = node.snapshots_refused();
    let r = node
        .install_snapshot_chunk(chunk(leader, "s1", 8000, 4000))
        .await;
    assert!(r.unwrap_err().contains("max_snapshot_bytes"));
    assert_eq!(node.snapshots_refused(), before + 1);
    // Dropped: the next chunk of that stream does not continue it.
    let r = node
        .install_snapshot_chunk(chunk(leader, "s1", 12000, 10))
        .await;
    assert!(matches!(r, Ok(ChunkAnswer::Mismatch { .. })), "{r:?}");
    node.shutdown().await.unwrap();
}
