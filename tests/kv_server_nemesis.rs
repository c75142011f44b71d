//! The nemesis: a 3-node kv_server cluster (processes, mutual TLS) under faults while
//! clients read and write, every operation recorded and each key's history checked for
//! linearizability (`replication/checker.rs`): no acknowledged write lost, no stale read, no
//! write applied twice (a value coming back after it was overwritten).
//!
//! Every raft connection goes through a proxy per direction of each link (`--peer-routes`,
//! `common/proxy.rs`), so the faults are: the leader cut off from both peers; every link
//! delayed; a follower's links black-holed (bytes vanish, connections stay open); the leader
//! frozen (SIGSTOP, then SIGCONT); the leader killed (SIGKILL, restarted later); a 63 MiB
//! SET among the small operations; and throughout, one node on a slow disk (every fsync
//! waits 15 ms first). After each fault that takes the leader away, a prober
//! measures failover from a client's side: the time from the fault to the first write
//! acknowledged through another node.

#![cfg(feature = "replication")]

#[path = "replication/checker.rs"]
mod checker;
#[path = "common/mod.rs"]
mod common;

use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use checker::{Kind, Op};
use common::cluster::Cluster;
use common::kv::try_call;
use common::proxy::{Mode, Proxy};
use common::Rng;

const KEYS: usize = 16;
const CLIENTS: usize = 4;

/// Each key's history, on one logical clock.
struct History {
    clock: AtomicU64,
    ops: Vec<Mutex<Vec<Op>>>,
}

impl History {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }
}

/// A client: random reads and writes of unique values through random nodes until `stop`.
fn client(ports: &[u16], id: u64, h: &History, next: &AtomicU64, stop: &AtomicBool) -> (u64, u64) {
    let mut rng = Rng::new(0x5eed + id);
    let mut conns: Vec<Option<TcpStream>> = ports.iter().map(|_| None).collect();
    let (mut done, mut unknown) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        let node = rng.below(ports.len() as u64) as usize;
        let key = rng.below(KEYS as u64) as usize;
        let k = format!("reg{key}");
        let wait = Duration::from_secs(8);
        if rng.below(2) == 0 {
            let v = next.fetch_add(1, Ordering::Relaxed);
            let call = h.tick();
            let r = try_call(
                ports[node],
                &mut conns[node],
                &[b"SET", k.as_bytes(), v.to_string().as_bytes()],
                wait,
            );
            let ret = match r {
                Ok(r) if r == b"+OK\r\n" => Some(h.tick()),
                _ => None,
            };
            if ret.is_none() {
                unknown += 1;
            }
            h.ops[key].lock().unwrap().push(Op {
                call,
                ret,
                kind: Kind::Write(v),
            });
        } else {
            let call = h.tick();
            let r = try_call(ports[node], &mut conns[node], &[b"GET", k.as_bytes()], wait);
            let read = match r {
                Ok(r) if r == b"$-1\r\n" => Some(None),
                Ok(r) if r.starts_with(b"$") => {
                    let body = &r[r.iter().position(|&c| c == b'\n').unwrap() + 1..r.len() - 2];
                    Some(Some(
                        std::str::from_utf8(body).unwrap().parse::<u64>().unwrap(),
                    ))
                }
                _ => None,
            };
            if let Some(v) = read {
                let ret = h.tick();
                h.ops[key].lock().unwrap().push(Op {
                    call,
                    ret: Some(ret),
                    kind: Kind::Read(v),
                });
            }
        }
        done += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    (done, unknown)
}

/// The leader's index, asked of the nodes in `among` (never a frozen one).
fn leader_among(c: &Cluster, among: &[usize]) -> Option<usize> {
    for &i in among {
        let mut conn = None;
        let port = c.nodes[i].lock().unwrap().port;
        if let Ok(info) = try_call(port, &mut conn, &[b"INFO"], Duration::from_secs(2)) {
            let info = String::from_utf8_lossy(&info).into_owned();
            if let Some(id) = info.lines().find_map(|l| l.strip_prefix("leader_id:")) {
                if let Ok(id) = id.trim().parse::<usize>() {
                    return Some(id - 1);
                }
            }
        }
    }
    None
}

/// Failover from a client's side: from `since` until a write through a node other than
/// `old` is acknowledged, the client giving each attempt 300 ms before it tries the other
/// node (a write stuck behind a frozen leader waits out the whole request timeout).
fn failover(c: &Cluster, old: usize, since: Instant, n: &mut u64) -> Duration {
    let others: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    let ports: Vec<u16> = others
        .iter()
        .map(|&i| c.nodes[i].lock().unwrap().port)
        .collect();
    let mut conns: Vec<Option<TcpStream>> = vec![None, None];
    loop {
        for (j, &port) in ports.iter().enumerate() {
            *n += 1;
            let r = try_call(
                port,
                &mut conns[j],
                &[b"SET", format!("probe{n}").as_bytes(), b"1"],
                Duration::from_millis(300),
            );
            if matches!(r, Ok(ref r) if r == b"+OK\r\n") {
                return since.elapsed();
            }
            assert!(
                since.elapsed() < Duration::from_secs(30),
                "no failover within 30 s"
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn signal(c: &Cluster, i: usize, sig: &str) {
    let pid = c.nodes[i].lock().unwrap().child.as_ref().unwrap().id();
    assert!(Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success());
}

#[test]
fn faults_keep_the_cluster_linearizable_and_fail_over_quickly() {
    let cycles = common::scaled(2, 1);
    let root = tempfile::tempdir().unwrap();
    let c = Cluster::new(root.path());
    let raft: Vec<String> = (0..3)
        .map(|i| c.nodes[i].lock().unwrap().raft.clone())
        .collect();
    // proxies[i][j]: node i's connections to node j.
    let proxies: Vec<Vec<Option<Proxy>>> = (0..3)
        .map(|i| {
            (0..3)
                .map(|j| (i != j).then(|| Proxy::start(raft[j].clone())))
                .collect()
        })
        .collect();
    let args: Vec<Vec<String>> = (0..3)
        .map(|i| {
            let routes = (0..3)
                .filter(|&j| j != i)
                .map(|j| format!("{}={}", j + 1, proxies[i][j].as_ref().unwrap().addr))
                .collect::<Vec<_>>()
                .join(",");
            let mut a = vec![
                "--peer-routes".into(),
                routes,
                "--max-request-mib".into(),
                "80".into(),
            ];
            // Node 3's disk is slow: each fsync waits 15 ms (a fast disk's takes ~0.1 ms).
            if i == 2 {
                a.extend(["--debug-sync-delay-ms".into(), "15".into()]);
            }
            a
        })
        .collect();
    let start = |i: usize, init: bool| {
        let a: Vec<&str> = args[i].iter().map(String::as_str).collect();
        c.start_with(i, init, &a);
    };
    for i in 0..3 {
        start(i, i == 0);
    }
    c.wait_for_leader();
    // The proxies of node `n`'s links, both directions.
    let links_of = |n: usize| -> Vec<&Proxy> {
        proxies
            .iter()
            .enumerate()
            .flat_map(|(i, row)| {
                row.iter()
                    .enumerate()
                    .filter_map(move |(j, p)| p.as_ref().filter(|_| i == n || j == n))
            })
            .collect()
    };
    let all: Vec<&Proxy> = proxies.iter().flatten().flatten().collect();

    let ports = c.ports();
    let h = History {
        clock: AtomicU64::new(0),
        ops: (0..KEYS).map(|_| Mutex::new(Vec::new())).collect(),
    };
    let next = AtomicU64::new(1);
    let stop = AtomicBool::new(false);
    let mut failovers = Vec::new();
    let mut probes = 0u64;
    let started = Instant::now();
    let totals = std::thread::scope(|s| {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|t| {
                let (ports, h, next, stop) = (&ports, &h, &next, &stop);
                s.spawn(move || client(ports, t as u64, h, next, stop))
            })
            .collect();
        let calm = || std::thread::sleep(Duration::from_secs(2));
        calm();
        for cycle in 0..cycles {
            // The leader cut off from both peers.
            let l = leader_among(&c, &[0, 1, 2]).expect("a leader");
            let t = Instant::now();
            for p in links_of(l) {
                p.set(Mode::Cut);
            }
            failovers.push(("partition", failover(&c, l, t, &mut probes)));
            eprintln!("nemesis: cycle {cycle}: partition {:?}", failovers.last());
            std::thread::sleep(Duration::from_secs(1));
            for p in &all {
                p.set(Mode::Pass);
            }
            calm();
            // Every link delayed by 40 ms.
            for p in &all {
                p.set(Mode::Delay(40));
            }
            std::thread::sleep(Duration::from_secs(3));
            for p in &all {
                p.set(Mode::Pass);
            }
            calm();
            // A follower's links black-holed.
            let l = leader_among(&c, &[0, 1, 2]).expect("a leader");
            let f = (l + 1 + cycle) % 3;
            let f = if f == l { (l + 1) % 3 } else { f };
            for p in links_of(f) {
                p.set(Mode::Drop);
            }
            std::thread::sleep(Duration::from_secs(3));
            for p in &all {
                p.set(Mode::Pass);
            }
            calm();
            // The leader frozen.
            let l = leader_among(&c, &[0, 1, 2]).expect("a leader");
            let t = Instant::now();
            signal(&c, l, "-STOP");
            failovers.push(("SIGSTOP", failover(&c, l, t, &mut probes)));
            std::thread::sleep(Duration::from_secs(1));
            signal(&c, l, "-CONT");
            calm();
            // The leader killed, restarted later.
            let l = leader_among(&c, &[0, 1, 2]).expect("a leader");
            let t = Instant::now();
            c.kill(l);
            failovers.push(("SIGKILL", failover(&c, l, t, &mut probes)));
            std::thread::sleep(Duration::from_secs(1));
            start(l, false);
            calm();
            // A 63 MiB SET among the small operations.
            let big: Vec<u8> = (0..(63u32 << 20) - 1024).map(|i| (i % 251) as u8).collect();
            let t = Instant::now();
            let mut conn = None;
            let mut ok = false;
            while t.elapsed() < Duration::from_secs(60) && !ok {
                let node = (cycle + 1) % 3;
                let r = try_call(
                    ports[node],
                    &mut conn,
                    &[b"SET", b"big", &big],
                    Duration::from_secs(30),
                );
                ok = matches!(r, Ok(ref r) if r == b"+OK\r\n");
            }
            assert!(ok, "the 63 MiB SET was not acknowledged within 60 s");
            println!("nemesis: a 63 MiB SET acknowledged in {:?}", t.elapsed());
            calm();
        }
        stop.store(true, Ordering::Relaxed);
        clients
            .into_iter()
            .map(|t| t.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    // Healed: every node serves, and the final value of each key is read through each node.
    let leader = c.wait_for_leader();
    let _ = leader;
    for key in 0..KEYS {
        for (i, &port) in ports.iter().enumerate() {
            let k = format!("reg{key}");
            let mut conn = None;
            let call = h.tick();
            let deadline = Instant::now() + Duration::from_secs(20);
            let r = loop {
                match try_call(
                    port,
                    &mut conn,
                    &[b"GET", k.as_bytes()],
                    Duration::from_secs(5),
                ) {
                    Ok(r) if r.starts_with(b"$") => break r,
                    r => assert!(
                        Instant::now() < deadline,
                        "node {} does not answer GET: {r:?}",
                        i + 1
                    ),
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let v = if r == b"$-1\r\n" {
                None
            } else {
                let body = &r[r.iter().position(|&c| c == b'\n').unwrap() + 1..r.len() - 2];
                Some(std::str::from_utf8(body).unwrap().parse::<u64>().unwrap())
            };
            let ret = h.tick();
            h.ops[key].lock().unwrap().push(Op {
                call,
                ret: Some(ret),
                kind: Kind::Read(v),
            });
        }
    }
    eprintln!("nemesis: checking {} histories", h.ops.len());
    let checked = Instant::now();
    let mut violations = Vec::new();
    let mut ops = 0;
    for (key, hist) in h.ops.iter().enumerate() {
        let hist = hist.lock().unwrap();
        ops += hist.len();
        if !checker::linearizable(&hist, None) {
            violations.push(key);
        }
    }
    let mut times: Vec<Duration> = failovers.iter().map(|f| f.1).collect();
    times.sort();
    let median = times[times.len() / 2];
    println!(
        "nemesis: {} cycles in {:?}; {} operations ({} writes unanswered), {ops} in the histories, checked in {:?}; failovers {:?}; median {median:?}",
        cycles,
        started.elapsed(),
        totals.0,
        totals.1,
        checked.elapsed(),
        failovers,
    );
    assert!(
        violations.is_empty(),
        "keys whose history is not linearizable: {violations:?}"
    );
    assert!(totals.0 > 1000, "too few operations: {}", totals.0);
}
