//! Catch-up by snapshot, and the memory it takes: a three-node cluster holds `mib` MiB, its
//! log purged behind a snapshot; a fourth node, in a process of its own (this binary run
//! with `--learner-dir`), joins as a learner, so it must receive the whole snapshot, in
//! chunks. The learner prints its resident memory when it opened, and its peak once it has
//! applied everything; the parent prints both beside the snapshot's size.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lsm_bloom::replication::tcp::{PeerAuth, RaftServer, TcpNetwork};
use lsm_bloom::replication::{ReplicatedDb, ReplicationConfig};

/// `VmRSS` or `VmHWM` of this process, in MiB (Linux).
pub fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// The learner's side: opens node 4 in `dir`, serves it, tells the parent its address, and
/// once it has applied up to `target` prints its memory and exits.
pub async fn learner(dir: &Path, target: u64) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let auth = PeerAuth::plain_loopback("bench", 4).unwrap();
    let network = TcpNetwork::new(auth.clone());
    let node = ReplicatedDb::open(4, dir, ReplicationConfig::default(), network)
        .await
        .unwrap();
    let _server = RaftServer::serve(listener, node.clone(), auth).unwrap();
    println!("addr {addr} rss {:.1}", status_mib("VmRSS:"));
    let deadline = Instant::now() + Duration::from_secs(600);
    while node.metrics().last_applied.map(|l| l.index) < Some(target) {
        assert!(Instant::now() < deadline, "the learner did not catch up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let installed = node.state_machine().snapshots_installed();
    println!(
        "done peak {:.1} installed {installed}",
        status_mib("VmHWM:")
    );
    node.shutdown().await.unwrap();
}

/// The parent's side (module comment).
pub async fn run(mib: u64) {
    let root = tempfile::tempdir().unwrap();
    let (nodes, _servers) = super::lsm_cluster(root.path(), super::Transport::Plain).await;
    let leader = nodes[0].clone();
    // 64 KiB values, 8 writers.
    let writes = mib * 16;
    super::timed(writes, 8, move |i| {
        let l = leader.clone();
        async move {
            let v = vec![(i % 251) as u8; 64 << 10];
            l.put(format!("big{i:08}"), v).await.unwrap()
        }
    })
    .await;
    let leader = &nodes[0];
    let last = leader.metrics().last_applied.unwrap().index;
    leader.raft().trigger().snapshot().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while leader.metrics().snapshot.map(|s| s.index) < Some(last) {
        assert!(Instant::now() < deadline, "no snapshot");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    leader.raft().trigger().purge_log(last).await.unwrap();
    while leader.metrics().purged.map(|p| p.index) < Some(last) {
        assert!(Instant::now() < deadline, "the log was not purged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pack = std::fs::read_dir(root.path().join("n1/sm/snapshots"))
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .max()
        .unwrap_or(0) as f64
        / (1 << 20) as f64;

    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--learner-dir")
        .arg(root.path().join("n4"))
        .arg("--learner-target")
        .arg(last.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = out.next().unwrap().unwrap();
    let mut words = first.split_whitespace();
    let (addr, start_rss) = (
        words.nth(1).unwrap().to_string(),
        words.nth(1).unwrap().to_string(),
    );
    let started = Instant::now();
    leader.add_learner(4, addr).await.unwrap();
    let done = tokio::task::spawn_blocking(move || out.next().unwrap().unwrap())
        .await
        .unwrap();
    let secs = started.elapsed().as_secs_f64();
    assert!(child.wait().unwrap().success());
    let mut words = done.split_whitespace();
    let peak = words.nth(2).unwrap().to_string();
    let installed = words.nth(1).unwrap().to_string();
    assert_ne!(installed, "0", "the learner caught up without a snapshot");
    println!(
        "\ncatch-up by snapshot: {mib} MiB written, snapshot pack {pack:.0} MiB sent in 1 MiB chunks in {secs:.1} s; \
         learner process RSS {start_rss} MiB on opening, peak {peak} MiB"
    );
    for n in &nodes {
        n.shutdown().await.unwrap();
    }
}
