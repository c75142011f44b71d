//! Unauthenticated connections held against a node's raft port, and what they cost: a
//! three-node cluster over mutual TLS takes `writes` sequential writes with the port idle,
//! then again while `conns` connections from 127.0.0.2 (another host, as the server counts
//! addresses) are opened against the leader, and those the server closed are re-opened once
//! a second (by a thread and runtime of their own, as another host would be). Prints
//! the write latency p99 of both phases and their ratio, and the leader process's resident
//! memory growth per held connection (the cluster and the attacker share this process, so it
//! counts both ends' user-space memory).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lsm_bloom::replication::ReplicatedDb;

use super::catch_up::status_mib;

/// p99 of `writes` sequential puts on `leader`, in microseconds.
async fn p99(leader: &ReplicatedDb, writes: u64, tag: &str) -> f64 {
    let mut lat = Vec::with_capacity(writes as usize);
    for i in 0..writes {
        let t = Instant::now();
        leader
            .put(format!("{tag}{i:08}"), super::value(i))
            .await
            .unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    lat.sort_by(f64::total_cmp);
    lat[(lat.len() * 99 / 100).min(lat.len() - 1)]
}

/// Opens a connection to `addr` from 127.0.0.2 and keeps it, saying nothing.
async fn open(addr: std::net::SocketAddr) -> Option<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().ok()?;
    socket.bind("127.0.0.2:0".parse().ok()?).ok()?;
    socket.connect(addr).await.ok()
}

/// The attacker: `conns` connections to `addr`, opened at once, those closed re-opened once a
/// second until `stop`; on a thread and runtime of its own. Returns once all are opened,
/// with the thread (which returns how many it re-opened).
fn hold(
    addr: std::net::SocketAddr,
    conns: usize,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let (tx, rx) = std::sync::mpsc::channel();
    let attacker = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut held = Vec::new();
            for _ in 0..conns {
                held.push(open(addr).await);
            }
            let _ = tx.send(());
            let mut reopened = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                for slot in held.iter_mut() {
                    let mut b = [0u8; 64];
                    let closed = match slot {
                        // End of stream, or an error other than "nothing to read yet".
                        Some(s) => match s.try_read(&mut b) {
                            Ok(0) => true,
                            Ok(_) => false,
                            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                        },
                        None => true,
                    };
                    if closed {
                        *slot = open(addr).await;
                        reopened += 1;
                    }
                }
            }
            reopened
        })
    });
    let _ = rx.recv();
    attacker
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the phase (module comment): `rounds` rounds of an idle and a held measurement.
pub async fn run(ca: &super::certs::Ca, writes: u64, conns: usize, rounds: usize) {
    let root = tempfile::tempdir().unwrap();
    let (nodes, servers) = super::lsm_cluster(root.path(), super::Transport::Tls(ca)).await;
    let leader = nodes[0].clone();
    let addr = servers[0].local_addr();
    p99(&leader, writes / 4, "warm").await;
    let (mut idle, mut under, mut per_conn, mut reopened) = (vec![], vec![], vec![], 0);
    for round in 0..rounds.max(1) {
        idle.push(p99(&leader, writes, &format!("idle{round}-")).await);
        let rss_before = status_mib("VmRSS:");
        let stop = Arc::new(AtomicBool::new(false));
        let attacker = hold(addr, conns, Arc::clone(&stop));
        per_conn.push((status_mib("VmRSS:") - rss_before) * 1024.0 / conns as f64);
        under.push(p99(&leader, writes, &format!("held{round}-")).await);
        stop.store(true, Ordering::Relaxed);
        reopened += attacker.join().unwrap_or(0);
    }
    let refused = servers[0].stats().refused.load(Ordering::Relaxed);
    let (idle, under) = (median(idle), median(under));
    println!(
        "\n{conns} unauthenticated connections held against the leader's raft port (TLS); medians of {} rounds",
        rounds.max(1)
    );
    println!(
        "{:>16} {:>16} {:>8} {:>22} {:>10} {:>10}",
        "p99 idle (us)", "p99 held (us)", "ratio", "RSS KiB/connection", "refused", "reopened"
    );
    println!(
        "{idle:>16.0} {under:>16.0} {:>8.2} {:>22.1} {refused:>10} {reopened:>10}",
        under / idle,
        median(per_conn),
    );
    for n in &nodes {
        n.shutdown().await.unwrap();
    }
}
