//! kv_server as a three-node cluster of processes on 127.0.0.1 (feature `replication`):
//! the leader SIGKILLed and restarted over and over while checking writers (and
//! `redis-benchmark`, when installed) write through every node; no acknowledged SET is lost
//! on any node. Then a node whose data directory was deleted restarts and catches up by
//! snapshot. And the numbered databases, replicated keyspaces, through every node.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::kv::{call, command, free_port, redis_tools, reply};

/// Writer `t`: SETs `ack:t:n` one at a time through the nodes in turn (any node takes a
/// write); a SET is acknowledged when `+OK` comes back. Returns the acknowledged `n`s.
fn writer(ports: Vec<u16>, t: usize, stop: &AtomicBool) -> Vec<usize> {
    let mut acked = Vec::new();
    let mut n = 0;
    let mut turn = t;
    let mut conn: Option<TcpStream> = None;
    while !stop.load(Ordering::SeqCst) {
        if conn.is_none() {
            turn += 1;
            conn = TcpStream::connect(("127.0.0.1", ports[turn % ports.len()])).ok();
            if let Some(c) = &conn {
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            } else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        let req = command(&[
            b"SET",
            format!("ack:{t}:{n}").as_bytes(),
            format!("v{t}.{n}").as_bytes(),
        ]);
        let mut r = [0u8; 5];
        if c.write_all(&req).is_ok() && c.read_exact(&mut r).is_ok() {
            if &r == b"+OK\r\n" {
                acked.push(n);
            } else {
                // An error reply (no leader yet): drain its line, try another node.
                let mut rest = Vec::new();
                let mut b = [0u8; 1];
                while c.read_exact(&mut b).is_ok() && b[0] != b'\n' {
                    rest.push(b[0]);
                }
                conn = None;
                std::thread::sleep(Duration::from_millis(20));
            }
        } else {
            conn = None;
        }
        n += 1;
    }
    acked
}

/// Every acknowledged key, read back through node `i` (a linearizable read on that node).
fn missing_on(port: u16, acked: &[(usize, Vec<usize>)]) -> Vec<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut missing = Vec::new();
    for (t, ns) in acked {
        for &n in ns {
            let want = format!("v{t}.{n}");
            let got = call(&mut s, &[b"GET", format!("ack:{t}:{n}").as_bytes()]);
            if got != format!("${}\r\n{want}\r\n", want.len()).as_bytes() {
                missing.push(format!("ack:{t}:{n} -> {}", String::from_utf8_lossy(&got)));
            }
        }
    }
    missing
}

#[test]
fn leader_kills_lose_no_acknowledged_set_and_a_wiped_node_catches_up() {
    let root = tempfile::tempdir().unwrap();
    let c = Arc::new(Cluster::new(root.path()));
    c.start(0, true);
    c.start(1, false);
    c.start(2, false);
    c.wait_for_leader();
    let ports = c.ports();
    let bench = redis_tools().then(|| {
        Command::new("redis-benchmark")
            .args(["-p", &ports[1].to_string(), "-t", "set", "-n", "100000000"])
            .args(["-c", "4", "-r", "100000", "-q"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    });
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|t| {
            let (ports, stop) = (ports.clone(), stop.clone());
            std::thread::spawn(move || (t, writer(ports, t, &stop)))
        })
        .collect();
    let kills = common::scaled(10, 3);
    let mut failovers = Vec::new();
    for k in 0..kills {
        std::thread::sleep(Duration::from_millis(600));
        let l = c.wait_for_leader();
        c.kill(l);
        let killed = Instant::now();
        // Failover: from the SIGKILL to the first write acknowledged by a survivor (it
        // forwards to the new leader once one is elected).
        let other = ports[(l + 1) % 3];
        loop {
            assert!(
                killed.elapsed() < Duration::from_secs(30),
                "no write accepted after a leader kill"
            );
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", other)) {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                if call(&mut s, &[b"SET", format!("probe:{k}").as_bytes(), b"1"]) == b"+OK\r\n" {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        failovers.push(killed.elapsed());
        c.start(l, false);
    }
    failovers.sort();
    println!(
        "failover (leader SIGKILL to the first acknowledged write, default timeouts): median {:?}, max {:?} over {kills}",
        failovers[failovers.len() / 2],
        failovers[failovers.len() - 1]
    );
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    let acked: Vec<(usize, Vec<usize>)> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    if let Some(mut b) = bench {
        let _ = b.kill();
        let _ = b.wait();
    }
    let total: usize = acked.iter().map(|(_, v)| v.len()).sum();
    assert!(total > 100, "only {total} SETs acknowledged");
    for (i, port) in ports.iter().enumerate() {
        let missing = missing_on(*port, &acked);
        assert!(
            missing.is_empty(),
            "node {} lost {} acknowledged SETs: {:?}",
            i + 1,
            missing.len(),
            &missing[..missing.len().min(5)]
        );
    }
    println!(
        "cluster: {total} acknowledged SETs all present on 3 nodes after {kills} leader SIGKILLs"
    );

    // A follower's data directory deleted: it restarts empty and catches up by snapshot.
    let l = c.wait_for_leader();
    let f = (l + 1) % 3;
    c.kill(f);
    std::fs::remove_dir_all(&c.nodes[f].lock().unwrap().dir).unwrap();
    // Enough writes after the wipe that the leader's snapshot and purge run past index 0.
    let mut s = TcpStream::connect(("127.0.0.1", ports[l])).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for i in 0..2500 {
        assert_eq!(
            call(&mut s, &[b"SET", format!("after:{i}").as_bytes(), b"x"]),
            b"+OK\r\n"
        );
    }
    c.start(f, false);
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.info_field(f, "snapshots_installed").unwrap_or(0) == 0 {
        assert!(
            Instant::now() < deadline,
            "the wiped node installed no snapshot"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Then it must apply what the leader committed after the snapshot, or each linearizable
    // GET below waits out its read timeout (11,000 of them: hours, not a failure).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let commit = c.info_field(l, "commit_index").unwrap_or(u64::MAX);
        let applied = c.info_field(f, "applied_index").unwrap_or(0);
        if applied >= commit {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the wiped node stopped at applied index {applied} after its snapshot, the leader \
             committed {commit}; the leader's replication: {:?}; the wiped node's: {:?}; its \
             stderr ends:\n{}",
            c.replication_info(l),
            c.replication_info(f),
            c.stderr_tail(f)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let missing = missing_on(ports[f], &acked);
    assert!(
        missing.is_empty(),
        "the wiped node lacks {} acknowledged SETs: {:?}; its stderr ends:\n{}",
        missing.len(),
        &missing[..missing.len().min(5)],
        c.stderr_tail(f)
    );
    let mut s = TcpStream::connect(("127.0.0.1", ports[f])).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(call(&mut s, &[b"GET", b"after:2499"]), b"$1\r\nx\r\n");
    println!("a wiped node caught up by snapshot");
}

/// Cluster mode asks how nodes authenticate: without the TLS flags it refuses to start
/// unless plain TCP is asked for by name, and plain TCP serves loopback only, whatever
/// protected mode says.
#[test]
fn a_raft_port_without_tls_needs_plain_loopback_asked_for_and_a_loopback_address() {
    let dir = tempfile::tempdir().unwrap();
    let run = |raft: &str, extra: &[&str]| {
        let out = Command::new(common::example("kv_server"))
            .args([
                "--dir",
                dir.path().to_str().unwrap(),
                "--port",
                &free_port().to_string(),
            ])
            .args(["--node-id", "1", "--raft-addr", raft, "--cluster-init"])
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{raft} {extra:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let loopback = format!("127.0.0.1:{}", free_port());
    let err = run(&loopback, &[]);
    assert!(
        err.contains("--cluster-tls-cert") && err.contains("--cluster-plain-loopback"),
        "{err}"
    );
    let any = format!("0.0.0.0:{}", free_port());
    let err = run(
        &any,
        &["--cluster-plain-loopback", "--protected-mode", "no"],
    );
    assert!(err.contains("not a loopback address"), "{err}");
}

/// The numbered databases of a cluster: each a replicated keyspace, so a write to database 3
/// through one node is read from database 3 on every node, and FLUSHDB, FLUSHALL, SWAPDB and
/// MOVE through any node hold on all of them, across a SIGKILL and restart of every node.
#[test]
fn a_clusters_databases_are_replicated() {
    let root = tempfile::tempdir().unwrap();
    let c = Cluster::new(root.path());
    for i in 0..3 {
        c.start_with(i, i == 0, &["--databases", "8"]);
    }
    c.wait_for_leader();
    let ports = c.ports();
    let conn = |i: usize, db: usize| {
        let mut s = TcpStream::connect(("127.0.0.1", ports[i])).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(
            call(&mut s, &[b"SELECT", db.to_string().as_bytes()]),
            b"+OK\r\n"
        );
        s
    };
    // Until the cluster commits (a fresh leader may still be settling).
    let deadline = Instant::now() + Duration::from_secs(20);
    while call(&mut conn(1, 0), &[b"SET", b"k", b"db0"]) != b"+OK\r\n" {
        assert!(Instant::now() < deadline, "the cluster takes no write");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A SET answered "no leader" (an election under the parallel tests' load) is sent again:
    // it writes the same either way.
    let set = |i: usize, db: usize, k: &[u8], v: &[u8]| loop {
        let r = call(&mut conn(i, db), &[b"SET", k, v]);
        if r == b"+OK\r\n" {
            break;
        }
        assert!(
            r.starts_with(b"-CLUSTERDOWN") && Instant::now() < deadline,
            "SET: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    set(2, 3, b"k", b"db3");
    set(0, 3, b"only3", b"x");
    for i in 0..3 {
        assert_eq!(
            call(&mut conn(i, 0), &[b"GET", b"k"]),
            b"$3\r\ndb0\r\n",
            "node {i}"
        );
        assert_eq!(
            call(&mut conn(i, 3), &[b"GET", b"k"]),
            b"$3\r\ndb3\r\n",
            "node {i}"
        );
        assert_eq!(call(&mut conn(i, 3), &[b"DBSIZE"]), b":2\r\n", "node {i}");
        assert_eq!(
            call(&mut conn(i, 5), &[b"GET", b"k"]),
            b"$-1\r\n",
            "node {i}"
        );
    }
    assert!(call(&mut conn(0, 0), &[b"SELECT", b"8"]).starts_with(b"-ERR DB index is out of range"));
    // SWAPDB through one node, MOVE through another.
    assert_eq!(call(&mut conn(1, 0), &[b"SWAPDB", b"0", b"3"]), b"+OK\r\n");
    assert_eq!(call(&mut conn(2, 0), &[b"MOVE", b"only3", b"5"]), b":1\r\n");
    assert_eq!(call(&mut conn(2, 0), &[b"MOVE", b"only3", b"5"]), b":0\r\n");
    // FLUSHDB of database 3 (which holds database 0's old data now).
    assert_eq!(call(&mut conn(0, 3), &[b"FLUSHDB"]), b"+OK\r\n");
    let check = |when: &str| {
        for i in 0..3 {
            assert_eq!(
                call(&mut conn(i, 0), &[b"GET", b"k"]),
                b"$3\r\ndb3\r\n",
                "{when}: node {i}"
            );
            assert_eq!(
                call(&mut conn(i, 0), &[b"DBSIZE"]),
                b":1\r\n",
                "{when}: node {i}"
            );
            assert_eq!(
                call(&mut conn(i, 3), &[b"DBSIZE"]),
                b":0\r\n",
                "{when}: node {i}"
            );
            assert_eq!(
                call(&mut conn(i, 5), &[b"GET", b"only3"]),
                b"$1\r\nx\r\n",
                "{when}: node {i}"
            );
        }
    };
    check("after SWAPDB, MOVE and FLUSHDB");
    for i in 0..3 {
        c.kill(i);
    }
    for i in 0..3 {
        c.start_with(i, false, &["--databases", "8"]);
    }
    c.wait_for_leader();
    check("after every node's SIGKILL and restart");
    assert_eq!(call(&mut conn(1, 0), &[b"FLUSHALL", b"ASYNC"]), b"+OK\r\n");
    for i in 0..3 {
        for db in [0, 3, 5] {
            assert_eq!(
                call(&mut conn(i, db), &[b"DBSIZE"]),
                b":0\r\n",
                "FLUSHALL: node {i} db {db}"
            );
        }
    }
}

/// Milliseconds since the Unix epoch, by this machine's clock (the nodes').
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// An integer reply's value.
fn int(reply: &[u8]) -> i64 {
    let s = std::str::from_utf8(reply).unwrap();
    s.strip_prefix(':')
        .and_then(|s| s.strip_suffix("\r\n"))
        .unwrap_or_else(|| panic!("not an integer reply: {s:?}"))
        .parse()
        .unwrap()
}

/// Keys expire in a cluster as on one server, through any node, and at the same moment on
/// every node: a relative expiry becomes one absolute time in the log entry, so every node
/// answers the same PEXPIRETIME; a key is gone from every node once it passes; PERSIST and
/// GETEX through one node change what every node answers; a node SIGKILLed and restarted
/// answers the same.
#[test]
fn a_clusters_keys_expire_alike_on_every_node() {
    let root = tempfile::tempdir().unwrap();
    let c = Cluster::new(root.path());
    c.start_all();
    let ports = c.ports();
    let conn = |i: usize| {
        let s = TcpStream::connect(("127.0.0.1", ports[i])).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while call(&mut conn(1), &[b"SET", b"warm", b"up"]) != b"+OK\r\n" {
        assert!(Instant::now() < deadline, "the cluster takes no write");
        std::thread::sleep(Duration::from_millis(50));
    }
    let before = now_ms();
    assert_eq!(
        call(&mut conn(1), &[b"SET", b"a", b"1", b"EX", b"100"]),
        b"+OK\r\n"
    );
    let after = now_ms();
    let soon = (now_ms() + 1500).to_string();
    assert_eq!(
        call(
            &mut conn(2),
            &[b"SET", b"b", b"2", b"PXAT", soon.as_bytes()]
        ),
        b"+OK\r\n"
    );
    assert_eq!(call(&mut conn(0), &[b"SET", b"c", b"3"]), b"+OK\r\n");
    assert_eq!(call(&mut conn(0), &[b"EXPIRE", b"c", b"200"]), b":1\r\n");
    assert_eq!(
        call(&mut conn(2), &[b"SETEX", b"d", b"300", b"4"]),
        b"+OK\r\n"
    );
    assert_eq!(call(&mut conn(1), &[b"PERSIST", b"d"]), b":1\r\n");
    // A time already passed deletes the key, on every node.
    assert_eq!(call(&mut conn(1), &[b"SET", b"e", b"5"]), b"+OK\r\n");
    assert_eq!(
        call(&mut conn(2), &[b"PEXPIREAT", b"e", b"1000"]),
        b":1\r\n"
    );

    let a_at = int(&call(&mut conn(0), &[b"PEXPIRETIME", b"a"]));
    assert!(
        (before + 100_000..=after + 100_000).contains(&(a_at as u64)),
        "PEXPIRETIME a = {a_at}, set between {before} and {after} with EX 100"
    );
    let check = |when: &str| {
        for i in 0..3 {
            let mut s = conn(i);
            let at = |s: &mut TcpStream, k: &[u8]| int(&call(s, &[b"PEXPIRETIME", k]));
            assert_eq!(at(&mut s, b"a"), a_at, "{when}: node {i}, a");
            assert_eq!(at(&mut s, b"d"), -1, "{when}: node {i}, d");
            assert_eq!(at(&mut s, b"e"), -2, "{when}: node {i}, e");
            assert_eq!(
                call(&mut s, &[b"GET", b"a"]),
                b"$1\r\n1\r\n",
                "{when}: node {i}"
            );
            let ttl = int(&call(&mut s, &[b"TTL", b"c"]));
            assert!(
                (198..=200).contains(&ttl),
                "{when}: node {i}: TTL c = {ttl}"
            );
        }
    };
    check("at once");
    for i in 0..3 {
        let at = int(&call(&mut conn(i), &[b"PEXPIRETIME", b"b"]));
        assert_eq!(at.to_string(), soon, "node {i}, b");
    }
    // Past b's expiry: gone from every node.
    std::thread::sleep(Duration::from_millis(
        (soon.parse::<u64>().unwrap() + 50).saturating_sub(now_ms()),
    ));
    for i in 0..3 {
        let mut s = conn(i);
        assert_eq!(call(&mut s, &[b"GET", b"b"]), b"$-1\r\n", "node {i}");
        assert_eq!(call(&mut s, &[b"EXISTS", b"b"]), b":0\r\n", "node {i}");
        assert_eq!(call(&mut s, &[b"TTL", b"b"]), b":-2\r\n", "node {i}");
    }
    // GETEX through one node sets a short expiry every node keeps.
    assert_eq!(call(&mut conn(2), &[b"SET", b"f", b"6"]), b"+OK\r\n");
    assert_eq!(
        call(&mut conn(1), &[b"GETEX", b"f", b"PX", b"300"]),
        b"$1\r\n6\r\n"
    );
    for i in 0..3 {
        let ttl = int(&call(&mut conn(i), &[b"PTTL", b"f"]));
        assert!((1..=300).contains(&ttl), "node {i}: PTTL f = {ttl}");
    }
    std::thread::sleep(Duration::from_millis(350));
    for i in 0..3 {
        assert_eq!(call(&mut conn(i), &[b"GET", b"f"]), b"$-1\r\n", "node {i}");
    }
    c.kill(2);
    c.start(2, false);
    c.wait_for_leader();
    check("after node 2's SIGKILL and restart");
}

/// Counters, string edits and MULTI/EXEC through any node reach every node; INCRs sent to
/// one node in a pipeline are one call and all counted; a WATCH on one node sees a write
/// taken by another; a command that is not a change is refused inside MULTI.
#[test]
fn a_clusters_counters_and_transactions_are_replicated() {
    let root = tempfile::tempdir().unwrap();
    let c = Cluster::new(root.path());
    c.start_all();
    let ports = c.ports();
    let conn = |i: usize| {
        let s = TcpStream::connect(("127.0.0.1", ports[i])).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while call(&mut conn(1), &[b"INCR", b"n"]) != b":1\r\n" {
        assert!(Instant::now() < deadline, "the cluster takes no write");
        call(&mut conn(1), &[b"DEL", b"n"]);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(call(&mut conn(2), &[b"INCRBY", b"n", b"10"]), b":11\r\n");
    assert_eq!(call(&mut conn(0), &[b"DECR", b"n"]), b":10\r\n");
    // A pipeline of 20 INCRs on one node, combined into one write.
    let mut s = conn(2);
    let pipeline: Vec<u8> = (0..20).flat_map(|_| command(&[b"INCR", b"n"])).collect();
    s.write_all(&pipeline).unwrap();
    for i in 0..20 {
        assert_eq!(reply(&mut s), format!(":{}\r\n", 11 + i).into_bytes());
    }
    assert_eq!(call(&mut conn(1), &[b"APPEND", b"s", b"ab"]), b":2\r\n");
    assert_eq!(call(&mut conn(0), &[b"RENAME", b"s", b"t"]), b"+OK\r\n");
    let mut m = conn(1);
    assert_eq!(call(&mut m, &[b"MULTI"]), b"+OK\r\n");
    assert_eq!(call(&mut m, &[b"INCR", b"n"]), b"+QUEUED\r\n");
    assert_eq!(call(&mut m, &[b"APPEND", b"t", b"c"]), b"+QUEUED\r\n");
    assert_eq!(call(&mut m, &[b"EXEC"]), b"*2\r\n:31\r\n:3\r\n");
    // WATCH on one node sees a write taken by another: EXEC runs nothing.
    let mut w = conn(0);
    assert_eq!(call(&mut w, &[b"WATCH", b"n"]), b"+OK\r\n");
    assert_eq!(call(&mut conn(2), &[b"SET", b"n", b"100"]), b"+OK\r\n");
    assert_eq!(call(&mut w, &[b"MULTI"]), b"+OK\r\n");
    assert_eq!(call(&mut w, &[b"INCR", b"n"]), b"+QUEUED\r\n");
    assert_eq!(call(&mut w, &[b"EXEC"]), b"*-1\r\n");
    // Unchanged since the WATCH: it runs, its GET seeing its INCR.
    assert_eq!(call(&mut w, &[b"WATCH", b"n"]), b"+OK\r\n");
    assert_eq!(call(&mut w, &[b"MULTI"]), b"+OK\r\n");
    assert_eq!(call(&mut w, &[b"INCR", b"n"]), b"+QUEUED\r\n");
    assert_eq!(call(&mut w, &[b"GET", b"n"]), b"+QUEUED\r\n");
    assert_eq!(call(&mut w, &[b"EXEC"]), b"*2\r\n:101\r\n$3\r\n101\r\n");
    // Watched keys are bounded: past 65,536 the WATCH is refused.
    let many: Vec<Vec<u8>> = (0..65_537).map(|i| format!("w{i}").into_bytes()).collect();
    let mut watch: Vec<&[u8]> = vec![b"WATCH"];
    watch.extend(many.iter().map(Vec::as_slice));
    assert!(call(&mut w, &watch).starts_with(b"-ERR more than 65536 keys"));
    // A command that is not a change cannot be queued in a cluster transaction.
    assert_eq!(call(&mut w, &[b"MULTI"]), b"+OK\r\n");
    assert!(call(&mut w, &[b"PING"]).starts_with(b"-ERR PING is not supported inside MULTI"));
    assert!(call(&mut w, &[b"EXEC"]).starts_with(b"-EXECABORT"));
    for i in 0..3 {
        assert_eq!(
            call(&mut conn(i), &[b"GET", b"n"]),
            b"$3\r\n101\r\n",
            "node {i}"
        );
        assert_eq!(
            call(&mut conn(i), &[b"GET", b"t"]),
            b"$3\r\nabc\r\n",
            "node {i}"
        );
        assert_eq!(
            call(&mut conn(i), &[b"EXISTS", b"s"]),
            b":0\r\n",
            "node {i}"
        );
    }
}
