//! `kv_server` under misbehaving clients, load and kills (loopback only, bounded in count and
//! time): a request sent a byte at a time, clients that hang up mid-pipeline, 1,000
//! connections at once, malformed RESP from many connections; and a server killed with SIGKILL
//! while clients (and `redis-benchmark`, when installed) write, restarted on the same
//! directory: every SET that got `+OK` is there.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::kv::*;
use common::Rng;

/// Connections this test may open, from the open-file limit (`.ci/run` raises it).
fn connections_allowed() -> usize {
    let out = Command::new("sh")
        .args(["-c", "ulimit -n"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let limit = match text.trim() {
        "unlimited" => usize::MAX,
        n => n.parse().unwrap_or(1024),
    };
    let n = limit.saturating_sub(300) / 2;
    if n < 1000 {
        eprintln!("note: open-file limit {limit}: testing {n} connections, not 1,000");
    }
    n
}

/// Sends every byte of `bytes` in its own write.
fn trickle(s: &mut TcpStream, bytes: &[u8]) {
    s.set_nodelay(true).unwrap();
    for b in bytes {
        s.write_all(std::slice::from_ref(b)).unwrap();
        s.flush().unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn misbehaving_clients_do_not_disturb_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start_with(dir.path(), port, &["--max-clients", "1100"]);
    let mut steady = connect(port);

    // One request a byte at a time, then a pipeline of two the same way.
    let mut s = connect(port);
    trickle(&mut s, &command(&[b"SET", b"slow", b"value"]));
    assert_eq!(reply(&mut s), b"+OK\r\n");
    let mut two = command(&[b"SET", b"slow2", b"v2"]);
    two.extend(command(&[b"GET", b"slow"]));
    trickle(&mut s, &two);
    assert_eq!(reply(&mut s), b"+OK\r\n");
    assert_eq!(reply(&mut s), b"$5\r\nvalue\r\n");

    // Hang up mid-pipeline: the writes whose replies were read are there.
    for round in 0..20 {
        let mut c = connect(port);
        let mut pipeline = Vec::new();
        for i in 0..200 {
            pipeline.extend(command(&[
                b"SET",
                format!("pipe{round}:{i}").as_bytes(),
                format!("{i}").as_bytes(),
            ]));
        }
        c.write_all(&pipeline).unwrap();
        for _ in 0..50 {
            assert_eq!(reply(&mut c), b"+OK\r\n");
        }
        drop(c);
        for i in 0..50 {
            let k = format!("pipe{round}:{i}");
            let want = format!("${}\r\n{i}\r\n", i.to_string().len());
            assert_eq!(call(&mut steady, &[b"GET", k.as_bytes()]), want.as_bytes());
        }
    }

    // 1,000 connections at once, each writing and reading its own key (both ends of each
    // are in this process tree: fewer if the open-file limit would not allow it).
    let many = connections_allowed().min(1000);
    let mut conns: Vec<TcpStream> = (0..many).map(|_| connect(port)).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(&command(&[b"SET", format!("conn{i}").as_bytes(), b"x"]))
            .unwrap();
    }
    for c in conns.iter_mut() {
        assert_eq!(reply(c), b"+OK\r\n");
    }
    for (i, c) in conns.iter_mut().enumerate() {
        assert_eq!(
            call(c, &[b"EXISTS", format!("conn{i}").as_bytes()]),
            b":1\r\n"
        );
    }
    // Over the limit: refused with an error at once, the others unaffected.
    if many < 1000 {
        drop(conns);
        stop(server);
        return;
    }
    let extra: Vec<TcpStream> = (0..150).map(|_| connect(port)).collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut refused = 0;
    for mut c in extra {
        c.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 64];
        let n = std::io::Read::read(&mut c, &mut buf).unwrap_or(0);
        if buf[..n].starts_with(b"-ERR max number of clients reached") {
            refused += 1;
        }
    }
    // 1,000 + 2 open before: about 98 more fit under 1,100.
    assert!(
        (40..=60).contains(&refused),
        "{refused} of 150 over the limit were refused"
    );
    assert_eq!(call(&mut steady, &[b"PING"]), b"+PONG\r\n");
    drop(conns);

    // Malformed RESP from many connections; the steady connection keeps working.
    let mut rng = Rng::new(3);
    for i in 0..300 {
        let mut c = connect(port);
        let len = 1 + rng.below(300) as usize;
        let mut junk: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if i % 3 == 0 {
            junk.insert(0, b'*'); // looks like an array, then is not one
        }
        let _ = c.write_all(&junk);
        let _ = c.shutdown(std::net::Shutdown::Write);
        let mut got = Vec::new();
        let _ = std::io::Read::read_to_end(&mut c, &mut got);
        assert!(
            got.is_empty() || got.starts_with(b"-") || got.starts_with(b"+"),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
        if i % 50 == 0 {
            assert_eq!(call(&mut steady, &[b"GET", b"slow2"]), b"$2\r\nv2\r\n");
        }
    }
    assert_eq!(call(&mut steady, &[b"PING"]), b"+PONG\r\n");
    stop(server);
}

/// Writer `t`: pipelines SETs of its own keys `ack:t:n` from `n = from` on, 32 at a time, and
/// returns the `n` below which all got `+OK` (replies come in order).
fn writer(port: u16, t: usize, from: usize, stop: &AtomicBool) -> usize {
    let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) else {
        return from;
    };
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut acked = from;
    while !stop.load(Ordering::SeqCst) {
        let mut pipeline = Vec::new();
        for n in acked..acked + 32 {
            pipeline.extend(command(&[
                b"SET",
                format!("ack:{t}:{n}").as_bytes(),
                format!("value {t} {n}").as_bytes(),
            ]));
        }
        if c.write_all(&pipeline).is_err() {
            return acked;
        }
        for _ in 0..32 {
            let mut r = [0u8; 5];
            match std::io::Read::read_exact(&mut c, &mut r) {
                Ok(()) if &r == b"+OK\r\n" => acked += 1,
                _ => return acked, // the server died mid-pipeline
            }
        }
    }
    acked
}

#[test]
fn a_server_killed_under_load_keeps_every_acknowledged_set() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let tools = redis_tools();
    let mut rng = Rng::new(9);
    let mut total_acked = 0;
    let mut acked_by: Vec<usize> = vec![0; 4];
    // Three kills with `LSM_BLOOM_THOROUGH` (`.ci/run`), one in a plain `cargo test`.
    let rounds = common::scaled(3, 1);
    for round in 0..rounds {
        let mut server = start(dir.path(), port);
        let bench = tools.then(|| {
            Command::new("redis-benchmark")
                .args(["-p", &port.to_string(), "-t", "set", "-n", "100000000"])
                .args(["-c", "8", "-P", "16", "-r", "100000", "-q"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        });
        let halt = Arc::new(AtomicBool::new(false));
        // Each round's writers continue after the keys the last round acknowledged.
        let writers: Vec<_> = (0..4)
            .map(|t| {
                let halt = Arc::clone(&halt);
                let from = acked_by[t];
                std::thread::spawn(move || writer(port, t, from, &halt))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(400 + rng.below(800)));
        let mut child = server.0.take().unwrap();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        halt.store(true, Ordering::SeqCst);
        for (t, w) in writers.into_iter().enumerate() {
            acked_by[t] = w.join().unwrap();
        }
        if let Some(mut b) = bench {
            let _ = b.kill();
            let _ = b.wait();
        }
        // Restart on the same directory: every acknowledged SET of every round is there.
        let server = start(dir.path(), port);
        let mut c = connect(port);
        for (t, &n) in acked_by.iter().enumerate() {
            for i in 0..n {
                let want = format!("value {t} {i}");
                let got = call(&mut c, &[b"GET", format!("ack:{t}:{i}").as_bytes()]);
                assert_eq!(
                    got,
                    format!("${}\r\n{want}\r\n", want.len()).as_bytes(),
                    "round {round}: key ack:{t}:{i} of {n} acknowledged"
                );
            }
        }
        total_acked = acked_by.iter().sum::<usize>();
        assert!(
            total_acked > 100 * (round + 1),
            "only {total_acked} SETs acknowledged"
        );
        stop(server);
    }
    println!("kill/restart: {total_acked} acknowledged SETs all present after {rounds} SIGKILLs");
}

/// Before it authenticates, a client may send at most 10 arguments of at most 16 KiB (Redis's
/// limits since CVE-2021-32675): a larger request is a protocol error and the connection is
/// closed, before the server holds its arguments. After AUTH the usual limits apply.
#[test]
fn unauthenticated_clients_get_small_request_limits() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start_with(dir.path(), port, &["--requirepass", "secret"]);
    let protocol_error = |r: Vec<u8>| {
        let text = String::from_utf8_lossy(&r).into_owned();
        assert!(text.starts_with("-ERR Protocol error"), "{text}");
    };
    // 11 arguments announced (a million would be the same): refused at the header.
    let mut c = connect(port);
    c.write_all(b"*11\r\n").unwrap();
    protocol_error(reply(&mut c));
    // One argument over 16 KiB: refused at its length, before its bytes are read.
    let mut c = connect(port);
    c.write_all(format!("*2\r\n$4\r\nAUTH\r\n${}\r\n", (16 << 10) + 1).as_bytes())
        .unwrap();
    protocol_error(reply(&mut c));
    // Within the limits the client is told to authenticate, and after AUTH a request of 13
    // arguments with a 20 KiB value is served.
    let mut c = connect(port);
    c.write_all(&command(&[b"GET", b"k"])).unwrap();
    assert!(reply(&mut c).starts_with(b"-NOAUTH"));
    c.write_all(&command(&[b"AUTH", b"secret"])).unwrap();
    assert_eq!(reply(&mut c), b"+OK\r\n");
    let big = vec![b'v'; 20 << 10];
    let mut mset: Vec<&[u8]> = vec![b"MSET"];
    let keys: Vec<Vec<u8>> = (0..6).map(|i| format!("k{i}").into_bytes()).collect();
    for k in &keys {
        mset.push(k);
        mset.push(&big);
    }
    c.write_all(&command(&mset)).unwrap();
    assert_eq!(reply(&mut c), b"+OK\r\n");
    stop(server);
}
