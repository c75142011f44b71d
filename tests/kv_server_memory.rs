//! `kv_server`'s memory under clients that try to make it hold more (loopback only, bounded in
//! count and time): a flood of unauthenticated connections each holding the most it may before
//! AUTH, an MGET whose reply is far larger than memory should hold, a pipeline of GETs of a
//! large value from a client that reads nothing, clients that stop reading large replies, and
//! values larger than the whole output budget.
//! Each prints the server's resident memory beyond its idle figure (`--nocapture`).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::kv::*;

/// A memory figure of the server process (`VmRSS`, `VmHWM`), in bytes.
fn status_bytes(server: &Server, field: &str) -> u64 {
    let pid = server.0.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// The server process's resident memory, in bytes.
fn rss(server: &Server) -> u64 {
    status_bytes(server, "VmRSS:")
}

/// The most resident memory the server process has had, in bytes (the kernel's own mark).
fn rss_peak(server: &Server) -> u64 {
    status_bytes(server, "VmHWM:")
}

const MIB: u64 = 1 << 20;

/// The most resident memory seen over `for_` (sampled every 20 ms).
fn peak_rss(server: &Server, for_: Duration) -> u64 {
    let end = Instant::now() + for_;
    let mut peak = rss(server);
    while Instant::now() < end {
        peak = peak.max(rss(server));
        std::thread::sleep(Duration::from_millis(20));
    }
    peak
}

#[test]
fn an_unauthenticated_flood_holds_little_memory() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start_with(
        dir.path(),
        port,
        &["--requirepass", "secret", "--max-clients", "600"],
    );
    let mut steady = connect(port);
    assert_eq!(call(&mut steady, &[b"AUTH", b"secret"]), b"+OK\r\n");
    assert_eq!(call(&mut steady, &[b"SET", b"k", b"v"]), b"+OK\r\n");
    std::thread::sleep(Duration::from_millis(300));
    let idle = rss(&server);
    // 512 connections, each sending 9 arguments of 3,200 bytes and most of a 10th, the most a
    // request may hold before AUTH (32 KiB), and never finishing it.
    let mut flood = Vec::new();
    for _ in 0..512 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut req = b"*10\r\n".to_vec();
        for _ in 0..9 {
            req.extend_from_slice(b"$3200\r\n");
            req.extend_from_slice(&[b'x'; 3200]);
            req.extend_from_slice(b"\r\n");
        }
        req.extend_from_slice(b"$3000\r\n");
        req.extend_from_slice(&[b'y'; 2000]);
        s.write_all(&req).unwrap();
        flood.push(s);
    }
    // Authenticated clients keep being served meanwhile.
    for i in 0..50 {
        let key = format!("during{i}");
        assert_eq!(
            call(&mut steady, &[b"SET", key.as_bytes(), b"x"]),
            b"+OK\r\n"
        );
        assert_eq!(call(&mut steady, &[b"GET", key.as_bytes()]), b"$1\r\nx\r\n");
    }
    let peak = peak_rss(&server, Duration::from_secs(1));
    let grown = peak.saturating_sub(idle);
    println!(
        "512 unauthenticated connections holding 32 KiB requests: server resident memory \
         {} MiB beyond idle ({} MiB idle)",
        grown / MIB,
        idle / MIB
    );
    assert!(grown <= 64 * MIB, "{} MiB beyond idle", grown / MIB);
    // One more byte past the pre-AUTH limit is refused by name.
    let mut over = connect(port);
    over.write_all(b"*2\r\n$16384\r\n").unwrap();
    over.write_all(&[b'z'; 16384]).unwrap();
    over.write_all(b"\r\n$16384\r\n").unwrap();
    let got = String::from_utf8_lossy(&reply(&mut over)).to_string();
    assert!(got.contains("request too large"), "{got}");
    drop(flood);
    stop(server);
}

/// Sets `n` keys `big0..` to values of `mib` MiB each.
fn big_values(s: &mut TcpStream, n: usize, mib: usize) -> Vec<u8> {
    let value = vec![b'v'; mib << 20];
    for i in 0..n {
        let key = format!("big{i}");
        assert_eq!(call(s, &[b"SET", key.as_bytes(), &value]), b"+OK\r\n");
    }
    value
}

/// Reads until `want` bytes arrived or the server closed; returns the bytes read.
fn drain(s: &mut TcpStream, want: u64) -> u64 {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0u64;
    while got < want {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n as u64,
        }
    }
    got
}

#[test]
fn large_replies_are_streamed_not_held() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start_with(dir.path(), port, &["--write-timeout-secs", "3"]);
    let mut s = connect(port);
    big_values(&mut s, 4, 1);
    std::thread::sleep(Duration::from_millis(300));
    let idle = rss(&server);

    // MGET of 600 one-MiB values (a 600 MiB reply) from a client that reads nothing at first,
    // then reads it all.
    let keys: Vec<Vec<u8>> = (0..600)
        .map(|i| format!("big{}", i % 4).into_bytes())
        .collect();
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(keys.iter().map(Vec::as_slice));
    let mut m = connect(port);
    m.write_all(&command(&args)).unwrap();
    let held = peak_rss(&server, Duration::from_secs(1)).saturating_sub(idle);
    let per_value = (1 << 20) + 2 + "$1048576\r\n".len() as u64;
    let total = "*600\r\n".len() as u64 + 600 * per_value;
    let got = drain(&mut m, total);
    assert_eq!(got, total, "the whole MGET reply arrives");
    // A pipeline of 6,500 GETs of a 1 MiB value in one 64 KiB write (6.3 GiB of replies) from a
    // client that never reads: the server holds little, and closes it once a write of 64 KiB
    // has waited the write timeout.
    let mut p = connect(port);
    let pipeline = b"GET big0\r\n".repeat(6500);
    p.write_all(&pipeline).unwrap();
    let held_pipeline = peak_rss(&server, Duration::from_secs(2)).saturating_sub(idle);
    std::thread::sleep(Duration::from_secs(3));
    let received = drain(&mut p, u64::MAX);
    println!(
        "server resident memory beyond idle: MGET of a 600 MiB reply unread {} MiB; 6,500 \
         pipelined GETs of 1 MiB unread {} MiB",
        held / MIB,
        held_pipeline / MIB
    );
    assert!(
        received < 6500 * per_value / 2,
        "the pipeline's client got {received} bytes: it should have been closed"
    );
    assert!(held <= 64 * MIB, "MGET: {} MiB beyond idle", held / MIB);
    assert!(
        held_pipeline <= 64 * MIB,
        "pipeline: {} MiB beyond idle",
        held_pipeline / MIB
    );
    // The server still serves.
    assert_eq!(call(&mut s, &[b"SET", b"after", b"1"]), b"+OK\r\n");
    stop(server);
}

#[test]
fn clients_that_stop_reading_share_one_output_budget() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start_with(
        dir.path(),
        port,
        &["--max-total-output-mib", "40", "--write-timeout-secs", "20"],
    );
    let mut s = connect(port);
    big_values(&mut s, 1, 32);
    // Each GET's 32 MiB reply waits on a client that does not read: the first holds ~32 MiB
    // of the 40, so the second is refused and closed.
    let mut first = connect(port);
    first.write_all(&command(&[b"GET", b"big0"])).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let mut second = connect(port);
    second.write_all(&command(&[b"GET", b"big0"])).unwrap();
    let got = String::from_utf8_lossy(&reply(&mut second)).to_string();
    assert!(got.contains("output memory budget exhausted"), "{got}");
    // The first still gets its whole reply once it reads.
    let want = (32u64 << 20) + 2 + format!("${}\r\n", 32 << 20).len() as u64;
    assert_eq!(drain(&mut first, want), want);
    stop(server);
}

#[test]
fn idle_connections_are_closed_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start_with(dir.path(), port, &["--timeout", "1"]);
    let mut idle = connect(port);
    let mut busy = connect(port);
    let start = Instant::now();
    for _ in 0..12 {
        assert_eq!(call(&mut busy, &[b"PING"]), b"+PONG\r\n");
        std::thread::sleep(Duration::from_millis(250));
    }
    // The idle one was closed after about a second; the busy one, never quiet that long, not.
    let mut b = [0u8; 1];
    assert_eq!(
        idle.read(&mut b).unwrap(),
        0,
        "the idle connection is closed"
    );
    assert!(start.elapsed() >= Duration::from_secs(1));
    assert_eq!(call(&mut busy, &[b"PING"]), b"+PONG\r\n");
    stop(server);
}

#[test]
fn a_value_is_charged_before_it_is_copied() {
    let dir = tempfile::tempdir().unwrap();
    // A 24 MiB value, written by one server process and read by a fresh one (its peak
    // resident memory then owes nothing to the write), whose output budget is 8 MiB.
    let port = free_port();
    let server = start_with(dir.path(), port, &["--max-request-mib", "32"]);
    let mut s = connect(port);
    big_values(&mut s, 1, 24);
    stop(server);
    let port = free_port();
    let server = start_with(dir.path(), port, &["--max-total-output-mib", "8"]);
    let mut s = connect(port);
    assert_eq!(call(&mut s, &[b"STRLEN", b"big0"]), b":25165824\r\n");
    let before = rss_peak(&server);
    // GET, MGET and SET … GET of it: each is refused before the value is copied.
    let asks: [&[&[u8]]; 3] = [
        &[b"GET", b"big0"],
        &[b"MGET", b"big0", b"big0"],
        &[b"SET", b"big0", b"small", b"GET"],
    ];
    for args in asks {
        let mut c = connect(port);
        let got = String::from_utf8_lossy(&call(&mut c, args)).to_string();
        assert!(
            got.contains("output memory budget exhausted"),
            "{args:?}: {got}"
        );
    }
    let grown = rss_peak(&server).saturating_sub(before);
    println!(
        "peak resident memory while three replies of a 24 MiB value were refused by an 8 MiB \
         output budget: +{} MiB",
        grown / MIB
    );
    // Each read, STRLEN's included, has the store read the 24 MiB block that holds the value
    // into its own buffer (freed after): that is in `before`. A copy of the value, or its
    // encoding, held beside that block would add 24 MiB each.
    assert!(grown < 12 * MIB, "+{} MiB", grown / MIB);
    // Refused SET … GET wrote nothing; STRLEN needs no copy and no budget.
    assert_eq!(call(&mut s, &[b"STRLEN", b"big0"]), b":25165824\r\n");
    // SCAN's keys are charged as it gathers them: 600 keys of 16 KiB (9.4 MiB) are more than
    // the budget holds; the first 100 keys (`big0` and 99 of them) are not.
    for i in 0..600u32 {
        let mut key = format!("k{i:05}").into_bytes();
        key.resize(16 << 10, b'k');
        assert_eq!(call(&mut s, &[b"SET", &key, b"v"]), b"+OK\r\n");
    }
    let got = call(&mut s, &[b"SCAN", b"0", b"COUNT", b"100"]);
    assert!(got.len() > 99 * (16 << 10), "{} bytes", got.len());
    let mut c = connect(port);
    let got =
        String::from_utf8_lossy(&call(&mut c, &[b"SCAN", b"0", b"COUNT", b"1000"])).to_string();
    assert!(got.contains("output memory budget exhausted"), "{got}");
    stop(server);
}
