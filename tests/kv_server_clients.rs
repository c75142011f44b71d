//! `kv_server` as current clients meet it: the `redis` crate at its defaults over RESP2 and
//! with RESP3 (`HELLO 3` on connect), `redis-cli` in both protocols, `AUTH` and protected
//! mode, SCAN over 10,000+ keys, the handshake commands, atomic conditional writes, and the
//! shared request-memory budget. (`redis-benchmark`'s CONFIG fetch is checked in
//! `kv_server.rs`, which already runs it.)

mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

use common::kv::*;
use redis::{Commands, RedisResult, Value};

fn client(port: u16, query: &str) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/{query}"))
        .unwrap()
        .get_connection()
        .unwrap()
}

fn exercise(con: &mut redis::Connection, tag: &str) {
    // Round trips, binary values.
    let binary: Vec<u8> = (0..=255u8).chain(b"\r\n$-1\r\n".iter().copied()).collect();
    let key = format!("{tag}:bin");
    let _: () = con.set(&key, &binary).unwrap();
    let got: Vec<u8> = con.get(&key).unwrap();
    assert_eq!(got, binary);
    let missing: Option<Vec<u8>> = con.get(format!("{tag}:missing")).unwrap();
    assert_eq!(missing, None);
    // A pipeline of 200 commands.
    let mut p = redis::pipe();
    for i in 0..100 {
        p.set(format!("{tag}:p{i}"), i).ignore();
    }
    for i in 0..100 {
        p.get(format!("{tag}:p{i}"));
    }
    let values: Vec<i64> = p.query(con).unwrap();
    assert_eq!(values, (0..100).collect::<Vec<_>>());
    // Conditional writes and the small commands.
    let set: bool = con.set_nx(format!("{tag}:nx"), "a").unwrap();
    let again: bool = con.set_nx(format!("{tag}:nx"), "b").unwrap();
    assert!(set && !again);
    let old: Option<String> = redis::cmd("SET")
        .arg(format!("{tag}:nx"))
        .arg("c")
        .arg("XX")
        .arg("GET")
        .query(con)
        .unwrap();
    assert_eq!(old.as_deref(), Some("a"));
    let len: i64 = redis::cmd("STRLEN")
        .arg(format!("{tag}:nx"))
        .query(con)
        .unwrap();
    assert_eq!(len, 1);
    let kind: String = redis::cmd("TYPE")
        .arg(format!("{tag}:nx"))
        .query(con)
        .unwrap();
    assert_eq!(kind, "string");
    let gone: Option<String> = redis::cmd("GETDEL")
        .arg(format!("{tag}:nx"))
        .query(con)
        .unwrap();
    assert_eq!(gone.as_deref(), Some("c"));
    let kind: String = redis::cmd("TYPE")
        .arg(format!("{tag}:nx"))
        .query(con)
        .unwrap();
    assert_eq!(kind, "none");
    let deleted: i64 = con.del(&[&key, &key]).unwrap();
    assert_eq!(deleted, 1);
    // Keys expire (the differential test against Redis: `kv_server_expiry.rs`).
    let () = redis::cmd("SET")
        .arg(format!("{tag}:ex"))
        .arg("v")
        .arg("EX")
        .arg(5)
        .query(con)
        .unwrap();
    let ttl: i64 = con.ttl(format!("{tag}:ex")).unwrap();
    assert_eq!(ttl, 5);
    let set: bool = con.persist(format!("{tag}:ex")).unwrap();
    assert!(set);
    let ttl: i64 = con.ttl(format!("{tag}:ex")).unwrap();
    assert_eq!(ttl, -1);
    let r: RedisResult<()> = redis::cmd("SELECT").arg(16).query(con);
    assert!(r.unwrap_err().to_string().contains("out of range"));
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(con).unwrap();
    assert!(id > 0);
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(tag)
        .query(con)
        .unwrap();
    let name: String = redis::cmd("CLIENT").arg("GETNAME").query(con).unwrap();
    assert_eq!(name, tag);
}

fn scan_all(con: &mut redis::Connection, pattern: &str) -> Vec<String> {
    con.scan_match::<_, String>(pattern)
        .unwrap()
        .collect::<RedisResult<Vec<_>>>()
        .unwrap()
}

#[test]
fn the_redis_crate_works_over_resp2_and_resp3_and_scan_returns_each_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start(dir.path(), port);
    let mut resp2 = client(port, "");
    let mut resp3 = client(port, "?protocol=resp3");
    exercise(&mut resp2, "two");
    exercise(&mut resp3, "three");
    // The handshake reply over RESP3 is a map naming protocol 3.
    let hello: Value = redis::cmd("HELLO").arg(3).query(&mut resp3).unwrap();
    match hello {
        Value::Map(pairs) => assert!(pairs
            .iter()
            .any(|(k, v)| *k == Value::BulkString(b"proto".to_vec()) && *v == Value::Int(3))),
        other => panic!("HELLO 3 answered {other:?}"),
    }
    let info: String = redis::cmd("INFO").query(&mut resp3).unwrap();
    assert!(info.contains("filter_checks:"), "{info}");
    let config: Value = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query(&mut resp3)
        .unwrap();
    assert!(matches!(config, Value::Map(_)), "{config:?}");

    // 12,000 keys, some flushed to tables: SCAN returns each exactly once, in both protocols.
    let mut p = redis::pipe();
    for i in 0..12_000 {
        p.set(format!("scan:{i:05}"), i).ignore();
    }
    let _: () = p.query(&mut resp2).unwrap();
    for (con, label) in [(&mut resp2, "RESP2"), (&mut resp3, "RESP3")] {
        let keys = scan_all(con, "scan:*");
        let distinct: HashSet<&String> = keys.iter().collect();
        assert_eq!(keys.len(), 12_000, "{label}: {} keys returned", keys.len());
        assert_eq!(distinct.len(), 12_000, "{label}: duplicates");
        let some = scan_all(con, "scan:0001?");
        assert_eq!(some.len(), 10, "{label}: {some:?}");
    }
    // COUNT bounds the work of one call; a huge COUNT is capped, not an error.
    let (cursor, keys): (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("COUNT")
        .arg(5)
        .query(&mut resp2)
        .unwrap();
    assert!(cursor != 0 && keys.len() == 5);
    let (_, keys): (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg("scan:*")
        .arg("COUNT")
        .arg(u64::MAX / 2)
        .query(&mut resp2)
        .unwrap();
    assert_eq!(keys.len(), 12_000);
    for bad in [
        &["SCAN", "x"][..],
        &["SCAN", "0", "COUNT", "0"],
        &["SCAN", "0", "BOGUS", "1"],
    ] {
        let mut c = redis::cmd(bad[0]);
        for a in &bad[1..] {
            c.arg(*a);
        }
        let r: RedisResult<Value> = c.query(&mut resp2);
        assert!(r.is_err(), "{bad:?} was accepted");
    }
    let r: RedisResult<Value> = redis::cmd("SCAN").arg(12345).query(&mut resp2);
    assert!(r.unwrap_err().to_string().contains("expired"));
    drop((resp2, resp3));
    stop(server);
}

#[test]
fn hello_and_auth_over_raw_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let pass_file = dir.path().join("pass");
    std::fs::write(&pass_file, "s3cret\n").unwrap();
    let server = start_with(
        &dir.path().join("db"),
        port,
        &["--requirepass-file", pass_file.to_str().unwrap()],
    );
    let mut s = connect(port);
    assert!(call(&mut s, &[b"GET", b"k"]).starts_with(b"-NOAUTH"));
    assert!(call(&mut s, &[b"PING"]).starts_with(b"-NOAUTH"));
    assert!(call(&mut s, &[b"HELLO", b"3"]).starts_with(b"-NOAUTH"));
    assert!(call(&mut s, &[b"HELLO", b"4"]).starts_with(b"-NOPROTO"));
    assert!(call(&mut s, &[b"AUTH", b"wrong"]).starts_with(b"-WRONGPASS"));
    assert!(call(&mut s, &[b"AUTH", b"s3cre"]).starts_with(b"-WRONGPASS"));
    assert!(call(&mut s, &[b"AUTH", b"other", b"s3cret"]).starts_with(b"-WRONGPASS"));
    assert!(call(&mut s, &[b"GET", b"k"]).starts_with(b"-NOAUTH"));
    // HELLO 3 AUTH authenticates and switches protocol in one step; null is then `_`.
    s.write_all(&command(&[
        b"HELLO", b"3", b"AUTH", b"default", b"s3cret", b"SETNAME", b"t",
    ]))
    .unwrap();
    let mut head = [0u8; 2];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"%7");
    let mut rest = vec![0u8; 4096];
    let n = s.read(&mut rest).unwrap();
    let text = String::from_utf8_lossy(&rest[..n]);
    assert!(
        text.contains("proto\r\n:3") && text.contains("standalone"),
        "{text}"
    );
    assert_eq!(call(&mut s, &[b"GET", b"missing"]), b"_\r\n");
    assert_eq!(call(&mut s, &[b"CLIENT", b"GETNAME"]), b"$1\r\nt\r\n");
    assert_eq!(call(&mut s, &[b"AUTH", b"s3cret"]), b"+OK\r\n");
    assert!(call(&mut s, &[b"CLIENT", b"KILL"]).starts_with(b"-ERR unknown subcommand"));
    assert!(call(&mut s, &[b"CONFIG", b"SET", b"save", b""]).starts_with(b"-ERR CONFIG SET"));
    // The redis crate with the password in its URL, both protocols.
    for q in ["", "?protocol=resp3"] {
        let url = format!("redis://:s3cret@127.0.0.1:{port}/{q}");
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: () = con.set("authed", q).unwrap();
        let bad = format!("redis://:nope@127.0.0.1:{port}/{q}");
        assert!(redis::Client::open(bad).unwrap().get_connection().is_err());
        // No password: RESP3's HELLO 3 is refused at connect, RESP2's first command after.
        let none = format!("redis://127.0.0.1:{port}/{q}");
        match redis::Client::open(none).unwrap().get_connection() {
            Ok(mut con) => {
                assert_eq!(q, "", "HELLO 3 without AUTH was accepted");
                let r: RedisResult<Option<String>> = con.get("authed");
                assert!(r.unwrap_err().to_string().contains("NOAUTH"));
            }
            Err(e) => {
                assert_ne!(q, "", "RESP2 connects, then gets NOAUTH");
                assert!(e.to_string().contains("NOAUTH"), "{e}");
            }
        }
    }
    // Without a password, AUTH is an error that says so.
    let open_port = free_port();
    let open = start(&dir.path().join("db2"), open_port);
    let mut s = connect(open_port);
    assert!(call(&mut s, &[b"AUTH", b"x"]).starts_with(b"-ERR AUTH <password> called without"));
    assert_eq!(call(&mut s, &[b"HELLO", b"2"])[..3], *b"*14");
    stop(open);
    stop(server);
}

#[test]
fn protected_mode_refuses_a_network_address_without_a_password() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(common::example("kv_server"))
        .args(["--dir", dir.path().to_str().unwrap(), "--bind", "0.0.0.0"])
        .args(["--port", &free_port().to_string()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("protected mode") && err.contains("--requirepass"),
        "{err}"
    );
    assert!(
        !dir.path().join("MANIFEST").exists(),
        "the store was opened anyway"
    );
}

#[test]
fn the_request_memory_budget_is_shared_by_all_connections() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start_with(
        dir.path(),
        port,
        &["--max-request-mib", "4", "--max-total-request-mib", "3"],
    );
    // Two clients each start a 2 MiB value and stop half way: together over the 3 MiB budget.
    // The second starts only once INFO shows the first one's bytes held against the budget
    // (else which of the two is refused depends on scheduling).
    let header = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2097152\r\n";
    let mut a = connect(port);
    a.write_all(header).unwrap();
    a.write_all(&vec![b'a'; 1_900_000]).unwrap();
    let mut probe = connect(port);
    let held = |probe: &mut std::net::TcpStream| -> u64 {
        let info = String::from_utf8(call(probe, &[b"INFO"])).unwrap();
        let line = info
            .lines()
            .find(|l| l.starts_with("request_budget_used:"))
            .unwrap();
        line["request_budget_used:".len()..].trim().parse().unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while held(&mut probe) < 1_900_000 - 64 * 1024 {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never read the request"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut b = connect(port);
    b.write_all(header).unwrap();
    let _ = b.write_all(&vec![b'b'; 1_900_000]);
    let mut got = Vec::new();
    let _ = b.read_to_end(&mut got);
    assert!(
        String::from_utf8_lossy(&got).contains("memory budget exhausted"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    // The first client can finish its request, and the budget comes back.
    a.write_all(&vec![b'a'; 2_097_152 - 1_900_000]).unwrap();
    a.write_all(b"\r\n").unwrap();
    assert_eq!(reply(&mut a), b"+OK\r\n");
    assert_eq!(held(&mut probe), 0);
    // The budget came back: a whole 2 MiB request fits again.
    let mut c = connect(port);
    c.write_all(header).unwrap();
    c.write_all(&vec![b'c'; 2_097_152]).unwrap();
    c.write_all(b"\r\n").unwrap();
    assert_eq!(reply(&mut c), b"+OK\r\n");
    stop(server);
}

#[test]
fn redis_cli_works_in_both_protocols() {
    if !redis_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start(dir.path(), port);
    assert_eq!(cli(port, &["set", "k", "v"], None), "OK");
    // Formatted output (as on a terminal): RESP3 types show as redis-cli renders them.
    assert_eq!(cli(port, &["-3", "--no-raw", "get", "k"], None), "\"v\"");
    assert_eq!(cli(port, &["-3", "--no-raw", "get", "nope"], None), "(nil)");
    assert_eq!(cli(port, &["--no-raw", "get", "nope"], None), "(nil)");
    let hello = cli(port, &["-3", "--no-raw", "hello", "3"], None);
    assert!(hello.contains("proto") && hello.contains("3"), "{hello}");
    assert!(cli(port, &["-3", "info"], None).contains("filter_checks"));
    for i in 0..50 {
        cli(port, &["set", &format!("cli:{i:02}"), "x"], None);
    }
    let scanned = cli(port, &["--scan", "--pattern", "cli:*"], None);
    assert_eq!(scanned.lines().count(), 50, "{scanned}");
    stop(server);
}

#[test]
fn conditional_writes_are_atomic_across_connections() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start(dir.path(), port);
    for round in 0..20 {
        let key = format!("race{round}");
        let winners: i64 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|t| {
                    let key = key.clone();
                    s.spawn(move || {
                        let mut con = client(port, "");
                        // Four SETNX on one key race each other and four plain SETs on
                        // another: exactly one SETNX wins.
                        if t % 2 == 0 {
                            let won: bool = con.set_nx(&key, t).unwrap();
                            i64::from(won)
                        } else {
                            let _: () = con.set(format!("{key}-plain"), t).unwrap();
                            0
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(winners, 1, "round {round}: {winners} SETNX calls won");
    }
    stop(server);
}

/// A pipeline's plain SETs are committed together: replies keep their order, a GET between
/// SETs sees the ones before it, a later SET of a key wins, and a SET the store refuses (a
/// key over the limit) gets its own error without failing its neighbours.
#[test]
fn pipelined_sets_are_committed_together_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start(&dir.path().join("db"), port);
    let mut s = connect(port);
    let big_key = vec![b'k'; lsm_bloom::db::MAX_KEY_SIZE + 1];
    let mut pipeline = Vec::new();
    for args in [
        &[&b"SET"[..], b"a", b"1"][..],
        &[b"SET", b"b", b"2"],
        &[b"GET", b"a"],
        &[b"SET", b"a", b"3"],
        &[b"set", &big_key, b"x"],
        &[b"SET", b"c", b"4"],
        &[b"SET", b"a", b"5"],
        &[b"GET", b"a"],
        &[b"MGET", b"a", b"b", b"c"],
    ] {
        pipeline.extend(command(args));
    }
    s.write_all(&pipeline).unwrap();
    let replies: Vec<Vec<u8>> = (0..9).map(|_| reply(&mut s)).collect();
    let text: Vec<String> = replies
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect();
    assert_eq!(text[0], "+OK\r\n");
    assert_eq!(text[1], "+OK\r\n");
    assert_eq!(text[2], "$1\r\n1\r\n");
    assert_eq!(text[3], "+OK\r\n");
    assert!(
        text[4].starts_with("-ERR") && text[4].contains("key"),
        "{}",
        text[4]
    );
    assert_eq!(text[5], "+OK\r\n");
    assert_eq!(text[6], "+OK\r\n");
    assert_eq!(text[7], "$1\r\n5\r\n");
    assert_eq!(text[8], "*3\r\n$1\r\n5\r\n$1\r\n2\r\n$1\r\n4\r\n");
    drop(s);
    stop(server);
}
