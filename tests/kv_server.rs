//! The `kv_server` example end to end: started on a free loopback port, driven over raw
//! sockets (round trips, binary-safe values, malformed / oversized / truncated requests), by
//! `redis-cli` and `redis-benchmark` when `redis-tools` is installed (required when
//! `LSM_BLOOM_REQUIRE_REDIS_TOOLS=1`, as `.ci/run` sets), then stopped with SIGTERM and
//! restarted on the same directory to check the data is still there.

mod common;

use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use common::kv::*;

#[test]
fn kv_server_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start(dir.path(), port);
    let binary: Vec<u8> = (0..=255u8).chain(*b"\r\n$-1\r\n*0\r\n").collect();

    // Round trips over a raw socket, pipelined.
    let mut s = connect(port);
    assert_eq!(call(&mut s, &[b"PING"]), b"+PONG\r\n");
    assert_eq!(call(&mut s, &[b"ECHO", b"hi"]), b"$2\r\nhi\r\n");
    assert_eq!(call(&mut s, &[b"SET", b"bin", &binary]), b"+OK\r\n");
    let mut want = format!("${}\r\n", binary.len()).into_bytes();
    want.extend_from_slice(&binary);
    want.extend_from_slice(b"\r\n");
    assert_eq!(call(&mut s, &[b"GET", b"bin"]), want, "binary-safe value");
    let mut pipeline = Vec::new();
    for i in 0..100 {
        pipeline.extend(command(&[
            b"SET",
            format!("p{i}").as_bytes(),
            format!("v{i}").as_bytes(),
        ]));
    }
    s.write_all(&pipeline).unwrap();
    for _ in 0..100 {
        assert_eq!(reply(&mut s), b"+OK\r\n");
    }
    assert_eq!(call(&mut s, &[b"EXISTS", b"p1", b"p2", b"nope"]), b":2\r\n");
    assert_eq!(
        call(&mut s, &[b"MSET", b"m1", b"a", b"m2", b"b"]),
        b"+OK\r\n"
    );
    assert_eq!(
        call(&mut s, &[b"MGET", b"m1", b"nope", b"m2"]),
        b"*3\r\n$1\r\na\r\n$-1\r\n$1\r\nb\r\n"
    );
    assert_eq!(call(&mut s, &[b"DEL", b"m1", b"m2", b"nope"]), b":2\r\n");
    assert_eq!(call(&mut s, &[b"GET", b"m1"]), b"$-1\r\n");
    // DEL counts distinct keys removed, as Redis does; EXISTS counts every argument.
    assert_eq!(call(&mut s, &[b"SET", b"d", b"1"]), b"+OK\r\n");
    assert_eq!(call(&mut s, &[b"EXISTS", b"d", b"d"]), b":2\r\n");
    assert_eq!(call(&mut s, &[b"DEL", b"d", b"d"]), b":1\r\n");
    assert_eq!(call(&mut s, &[b"DEL", b"d", b"d"]), b":0\r\n");
    assert_eq!(
        call(&mut s, &[b"SET", b"k", b"v", b"EX", b"10"]),
        b"+OK\r\n"
    );
    assert_eq!(call(&mut s, &[b"TTL", b"k"]), b":10\r\n");
    assert!(call(&mut s, &[b"BGSAVE"]).starts_with(b"-ERR unknown command"));
    let size = call(&mut s, &[b"DBSIZE"]);
    let exact = format!(":{}\r\n", keys_now(&mut s));
    assert_eq!(String::from_utf8_lossy(&size), exact);
    assert!(call(&mut s, &[b"GET"]).starts_with(b"-ERR wrong number of arguments"));
    let info = call(&mut s, &[b"INFO"]);
    assert!(String::from_utf8_lossy(&info).contains("filter_checks:"));
    assert_eq!(call(&mut s, &[b"QUIT"]), b"+OK\r\n");

    // Bad input: each gets an error reply or a closed connection; the server keeps serving.
    let bad: Vec<Vec<u8>> = vec![
        b"*abc\r\n".to_vec(),
        b"*1\r\n$99999999999\r\n".to_vec(),
        b"*1\r\n$2000000\r\n".to_vec(), // over --max-request-mib 1
        b"*2\r\n:1\r\n".to_vec(),
        (0..4096u32).map(|i| (i * 37 % 256) as u8).collect(),
        vec![b'x'; 100 * 1024], // inline request without a newline
    ];
    for b in &bad {
        let mut c = connect(port);
        let _ = c.write_all(b);
        let _ = c.shutdown(std::net::Shutdown::Write);
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        assert!(
            got.is_empty()
                || got.starts_with(b"-ERR")
                || got.starts_with(b"+")
                || got.starts_with(b"$"),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
        let mut ok = connect(port);
        assert_eq!(
            call(&mut ok, &[b"PING"]),
            b"+PONG\r\n",
            "server stopped answering after bad input"
        );
    }
    // A client that disconnects mid-request: nothing is applied.
    {
        let mut c = connect(port);
        c.write_all(b"*3\r\n$3\r\nSET\r\n$4\r\nhalf\r\n$10\r\nabc")
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(call(&mut connect(port), &[b"GET", b"half"]), b"$-1\r\n");

    if redis_tools() {
        assert_eq!(cli(port, &["set", "cli-key", "cli value"], None), "OK");
        assert_eq!(cli(port, &["get", "cli-key"], None), "cli value");
        assert_eq!(cli(port, &["exists", "cli-key", "missing"], None), "1");
        assert_eq!(cli(port, &["-x", "set", "cli-bin"], Some(&binary)), "OK");
        let mut c = connect(port);
        assert_eq!(
            call(&mut c, &[b"GET", b"cli-bin"]),
            want,
            "binary value written by redis-cli -x"
        );
        assert_eq!(cli(port, &["del", "cli-key"], None), "1");
        assert_eq!(cli(port, &["get", "cli-key"], None), "");

        let out = Command::new("redis-benchmark")
            .args([
                "-p",
                &port.to_string(),
                "-t",
                "set,get",
                "-n",
                "100000",
                "-c",
                "50",
                "-P",
                "16",
                "-q",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "redis-benchmark failed: {text}");
        // It fetches `save` and `appendonly` with CONFIG GET before it starts.
        assert!(
            !stderr.contains("Could not fetch server CONFIG"),
            "{stderr}"
        );
        let finals: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("requests per second"))
            .collect();
        println!("redis-benchmark: {finals:?}");
        assert!(
            finals.iter().any(|l| l.starts_with("SET:"))
                && finals.iter().any(|l| l.starts_with("GET:")),
            "{text}"
        );
        assert!(!text.to_lowercase().contains("error"), "{text}");
    }

    // Restart: SIGTERM, then the same directory serves the same data.
    stop(server);
    let server = start(dir.path(), port);
    let mut s = connect(port);
    assert_eq!(call(&mut s, &[b"GET", b"bin"]), want);
    assert_eq!(call(&mut s, &[b"GET", b"p99"]), b"$3\r\nv99\r\n");
    assert_eq!(call(&mut s, &[b"EXISTS", b"m1"]), b":0\r\n");
    stop(server);
}

/// `SCAN 0 MATCH prefix*` on a server started with `--prefix-delimiter :` goes through the
/// prefix filters: absent prefixes skip every table (INFO's `prefix_useful`), present ones
/// return every key, across cursors.
#[test]
fn scan_match_prefix_uses_prefix_filters() {
    scan_match_prefix_with(&["--prefix-delimiter", ":"]);
}

/// The store records its prefix rule (FORMAT.md §6): a server started on it later without
/// `--prefix-delimiter` uses the prefix filters all the same.
#[test]
fn scan_match_prefix_needs_no_flags_after_the_first_start() {
    scan_match_prefix_with(&[]);
}

fn scan_match_prefix_with(flags: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    common::colon_prefix_store(dir.path(), 3, |t| {
        let users = (t..300).step_by(3);
        let keys = users.flat_map(|u| ["name", "mail"].map(|f| format!("user{u:03}:{f}")));
        keys.collect()
    });
    let port = free_port();
    let server = start_with(dir.path(), port, flags);
    let mut s = connect(port);
    for u in 0..100 {
        let absent = format!("user{u:03}x:*");
        let r = call(&mut s, &[b"SCAN", b"0", b"MATCH", absent.as_bytes()]);
        assert_eq!(r, b"*2\r\n$1\r\n0\r\n*0\r\n", "{absent}");
    }
    // A present prefix, a page at a time: COUNT 1 resumes from a saved cursor.
    let mut cursor = b"0".to_vec();
    let mut keys = Vec::new();
    loop {
        let r = call(
            &mut s,
            &[b"SCAN", &cursor, b"MATCH", b"user042:*", b"COUNT", b"1"],
        );
        let text = String::from_utf8(r).unwrap();
        let lines: Vec<&str> = text.split("\r\n").collect();
        cursor = lines[2].as_bytes().to_vec();
        keys.extend(
            lines
                .iter()
                .filter(|l| l.starts_with("user"))
                .map(|l| l.to_string()),
        );
        if cursor == b"0" {
            break;
        }
    }
    assert_eq!(keys, ["user042:mail", "user042:name"]);
    let info = String::from_utf8(call(&mut s, &[b"INFO"])).unwrap();
    let field = |name: &str| -> u64 {
        let line = info
            .lines()
            .find(|l| l.starts_with(&format!("{name}:")))
            .unwrap();
        line[name.len() + 1..].trim().parse().unwrap()
    };
    // 100 absent-prefix scans over 3 overlapping tables: nearly all skipped.
    assert!(field("prefix_scans") >= 101, "{info}");
    assert!(field("prefix_useful") >= 280, "{info}");
    assert!(field("scan_block_reads") <= 30, "{info}");
    stop(server);
}

/// The keys of the connection's database, counted by SCAN.
fn keys_now(s: &mut std::net::TcpStream) -> usize {
    let reply = call(s, &[b"SCAN", b"0", b"COUNT", b"100000"]);
    // `*2\r\n$1\r\n0\r\n*N\r\n...`: N is the count (one call covers a small store).
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("*2\r\n$1\r\n0\r\n*"), "{text}");
    text["*2\r\n$1\r\n0\r\n*".len()..]
        .split("\r\n")
        .next()
        .unwrap()
        .parse()
        .unwrap()
}
