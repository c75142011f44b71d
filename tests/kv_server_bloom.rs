//! kv_server's RedisBloom commands (`examples/kv_server/bloom.rs`):
//! - a model test: a random stream of BF.RESERVE, BF.ADD, BF.MADD, BF.INSERT, BF.EXISTS,
//!   BF.MEXISTS, BF.CARD with SET, DEL, TYPE, EXISTS, GET, RENAME and EXPIRE among them, each
//!   reply equal byte for byte to what a set per filter answers; the server restarted half
//!   way loses nothing;
//! - errors and replies (RESP2 and RESP3) byte for byte as RedisBloom gives them;
//! - a cluster (feature `replication`): two clients on two nodes `BF.ADD` the same items at
//!   once, and each item is answered "newly added" exactly once;
//! - the items of a removed filter are gone from the store; redis-py and node-redis use
//!   the commands; a crawler's dedup is exact across a SIGKILL.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::kv::*;
use common::Rng;

/// A filter of the model: its items, and its capacity if it does not scale.
#[derive(Default)]
struct Model {
    items: BTreeSet<String>,
    fixed: Option<usize>,
}

enum Key {
    String,
    Filter(Model),
}

fn int(n: i64) -> Vec<u8> {
    format!(":{n}\r\n").into_bytes()
}

fn array(items: &[Vec<u8>]) -> Vec<u8> {
    let mut r = format!("*{}\r\n", items.len()).into_bytes();
    items.iter().for_each(|i| r.extend_from_slice(i));
    r
}

const WRONGTYPE: &[u8] = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
const FULL: &[u8] = b"-ERR non scaling filter is full\r\n";

/// Adds `items` to the model's filter `k` (made as `make` says if absent): the reply.
fn add(
    keys: &mut BTreeMap<String, Key>,
    k: &str,
    items: &[String],
    make: Option<Option<usize>>,
    many: bool,
) -> Vec<u8> {
    if matches!(keys.get(k), Some(Key::String)) {
        return WRONGTYPE.to_vec();
    }
    if !keys.contains_key(k) {
        match make {
            None => return b"-ERR not found\r\n".to_vec(),
            Some(fixed) => {
                keys.insert(
                    k.into(),
                    Key::Filter(Model {
                        items: BTreeSet::new(),
                        fixed,
                    }),
                );
            }
        }
    }
    let Some(Key::Filter(m)) = keys.get_mut(k) else {
        unreachable!()
    };
    let mut answers = Vec::new();
    for item in items {
        if m.items.contains(item) {
            answers.push(int(0));
        } else if m.fixed.is_some_and(|cap| m.items.len() >= cap) {
            answers.push(FULL.to_vec());
            break;
        } else {
            m.items.insert(item.clone());
            answers.push(int(1));
        }
    }
    match many {
        true => array(&answers),
        false => answers.pop().unwrap(),
    }
}

/// One random command and the model's reply to it.
fn step(rng: &mut Rng, keys: &mut BTreeMap<String, Key>) -> (Vec<String>, Vec<u8>) {
    let k = format!("f{}", rng.below(6));
    let item = |rng: &mut Rng| format!("i{}", rng.below(24));
    let items =
        |rng: &mut Rng| -> Vec<String> { (0..1 + rng.below(5)).map(|_| item(rng)).collect() };
    let cmd = |parts: &[&str], rest: &[String]| -> Vec<String> {
        parts
            .iter()
            .map(|s| s.to_string())
            .chain(rest.iter().cloned())
            .collect()
    };
    match rng.below(14) {
        0 => {
            let i = item(rng);
            let r = add(keys, &k, std::slice::from_ref(&i), Some(None), false);
            (cmd(&["BF.ADD", &k], &[i]), r)
        }
        1 | 2 => {
            let is = items(rng);
            let r = add(keys, &k, &is, Some(None), true);
            (cmd(&["BF.MADD", &k], &is), r)
        }
        3 => {
            let is = items(rng);
            let (opts, make): (Vec<&str>, _) = match rng.below(3) {
                0 => (vec!["NOCREATE"], None),
                1 => (vec!["CAPACITY", "3", "NONSCALING"], Some(Some(3))),
                _ => (vec!["ERROR", "0.001"], Some(None)),
            };
            let r = add(keys, &k, &is, make, true);
            let mut c = cmd(&["BF.INSERT", &k], &[]);
            c.extend(opts.iter().map(|s| s.to_string()));
            c.push("ITEMS".into());
            c.extend(is);
            (c, r)
        }
        4 => {
            let r = match keys.get(&k) {
                Some(Key::String) => WRONGTYPE.to_vec(),
                Some(Key::Filter(_)) => b"-ERR item exists\r\n".to_vec(),
                None => {
                    keys.insert(
                        k.clone(),
                        Key::Filter(Model {
                            items: BTreeSet::new(),
                            fixed: Some(2),
                        }),
                    );
                    b"+OK\r\n".to_vec()
                }
            };
            (cmd(&["BF.RESERVE", &k, "0.01", "2", "NONSCALING"], &[]), r)
        }
        5 | 6 => {
            let is = items(rng);
            let answers: Vec<Vec<u8>> = is
                .iter()
                .map(|i| {
                    int(i64::from(
                        matches!(keys.get(&k), Some(Key::Filter(m)) if m.items.contains(i)),
                    ))
                })
                .collect();
            (cmd(&["BF.MEXISTS", &k], &is), array(&answers))
        }
        7 => {
            let i = item(rng);
            let hit = matches!(keys.get(&k), Some(Key::Filter(m)) if m.items.contains(&i));
            (cmd(&["BF.EXISTS", &k], &[i]), int(i64::from(hit)))
        }
        8 => {
            let r = match keys.get(&k) {
                Some(Key::String) => WRONGTYPE.to_vec(),
                Some(Key::Filter(m)) => int(m.items.len() as i64),
                None => int(0),
            };
            (cmd(&["BF.CARD", &k], &[]), r)
        }
        9 => {
            keys.insert(k.clone(), Key::String);
            (cmd(&["SET", &k, "v"], &[]), b"+OK\r\n".to_vec())
        }
        10 => {
            let r = int(i64::from(keys.remove(&k).is_some()));
            (cmd(&["DEL", &k], &[]), r)
        }
        11 => {
            let r: &[u8] = match keys.get(&k) {
                Some(Key::String) => b"+string\r\n",
                Some(Key::Filter(_)) => b"+MBbloom--\r\n",
                None => b"+none\r\n",
            };
            (cmd(&["TYPE", &k], &[]), r.to_vec())
        }
        12 => {
            let r = match keys.get(&k) {
                Some(Key::String) => b"$1\r\nv\r\n".to_vec(),
                Some(Key::Filter(_)) => WRONGTYPE.to_vec(),
                None => b"$-1\r\n".to_vec(),
            };
            (cmd(&["GET", &k], &[]), r)
        }
        _ => {
            let to = format!("f{}", rng.below(6));
            let r = match keys.remove(&k) {
                None => b"-ERR no such key\r\n".to_vec(),
                Some(v) => {
                    keys.insert(to.clone(), v);
                    b"+OK\r\n".to_vec()
                }
            };
            (cmd(&["RENAME", &k, &to], &[]), r)
        }
    }
}

fn send(s: &mut std::net::TcpStream, args: &[String]) -> Vec<u8> {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    call(s, &args)
}

#[test]
fn bf_commands_answer_as_a_set_per_filter_does() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = start(dir.path(), port);
    let mut rng = Rng::new(59);
    let mut keys = BTreeMap::new();
    let steps = common::scaled(6000, 2000);
    let mut s = connect(port);
    for n in 0..steps {
        if n == steps / 2 {
            drop(s);
            stop(server);
            server = start(dir.path(), port);
            s = connect(port);
        }
        let (args, want) = step(&mut rng, &mut keys);
        let got = send(&mut s, &args);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "step {n}: {args:?}"
        );
    }
    // DBSIZE-free check of every key's type and every filter's items after the run.
    for (k, v) in &keys {
        let t = send(&mut s, &["TYPE".into(), k.clone()]);
        match v {
            Key::String => assert_eq!(t, b"+string\r\n"),
            Key::Filter(m) => {
                assert_eq!(t, b"+MBbloom--\r\n");
                let card = send(&mut s, &["BF.CARD".into(), k.clone()]);
                assert_eq!(card, int(m.items.len() as i64), "{k}");
            }
        }
    }
    stop(server);
}

/// The whole reply to `args`, whatever its shape (a RESP3 map too): read through to the
/// answer of a PING sent after it.
fn whole(s: &mut std::net::TcpStream, args: &[&[u8]]) -> Vec<u8> {
    use std::io::{Read, Write};
    s.write_all(&command(args)).unwrap();
    s.write_all(&command(&[b"PING"])).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"+PONG\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed");
        got.extend_from_slice(&buf[..n]);
    }
    got.truncate(got.len() - 7);
    got
}

#[test]
fn bf_replies_and_errors_are_redisblooms() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start(dir.path(), port);
    let mut s = connect(port);
    let cases: &[(&[&str], &[u8])] = &[
        (&["BF.RESERVE", "r", "x", "10"], b"-ERR bad error rate\r\n"),
        (
            &["BF.RESERVE", "r", "1", "10"],
            b"-ERR error rate must be in the range (0.000000, 1.000000)\r\n",
        ),
        (&["BF.RESERVE", "r", "0.1", "x"], b"-ERR bad capacity\r\n"),
        (
            &["BF.RESERVE", "r", "0.1", "0"],
            b"-ERR capacity must be in the range [1, 1073741824]\r\n",
        ),
        (
            &["BF.RESERVE", "r", "0.1", "1073741825"],
            b"-ERR capacity must be in the range [1, 1073741824]\r\n",
        ),
        (
            &["BF.RESERVE", "r", "0.1", "10", "EXPANSION"],
            b"-ERR no expansion\r\n",
        ),
        (
            &["BF.RESERVE", "r", "0.1", "10", "EXPANSION", "x"],
            b"-ERR bad expansion\r\n",
        ),
        (
            &["BF.RESERVE", "r", "0.1", "10", "EXPANSION", "32769"],
            b"-ERR expansion must be in the range [0, 32768]\r\n",
        ),
        (
            &[
                "BF.RESERVE",
                "r",
                "0.1",
                "10",
                "NONSCALING",
                "EXPANSION",
                "2",
            ],
            b"-Nonscaling filters cannot expand\r\n",
        ),
        (
            &["BF.RESERVE", "r"],
            b"-ERR wrong number of arguments for 'bf.reserve' command\r\n",
        ),
        (&["EXISTS", "r"], b":0\r\n"),
        (
            &["BF.RESERVE", "r", "0.1", "10", "EXPANSION", "0"],
            b"+OK\r\n",
        ),
        (&["BF.RESERVE", "r", "0.1", "10"], b"-ERR item exists\r\n"),
        (&["BF.INFO", "r", "EXPANSION"], b"*1\r\n$-1\r\n"),
        (&["BF.INFO", "r", "CAPACITY"], b"*1\r\n:10\r\n"),
        (
            &["BF.INFO", "r", "BOGUS"],
            b"-Invalid information value\r\n",
        ),
        (&["BF.INFO", "nope"], b"-ERR not found\r\n"),
        (&["BF.CARD", "nope"], b":0\r\n"),
        (&["BF.EXISTS", "nope", "a"], b":0\r\n"),
        (
            &["BF.INSERT", "i", "NOCREATE", "ITEMS", "a"],
            b"-ERR not found\r\n",
        ),
        (
            &["BF.INSERT", "i", "CAPACITY", "0", "ITEMS", "a"],
            b"-Bad capacity\r\n",
        ),
        (
            &["BF.INSERT", "i", "ERROR", "2", "ITEMS", "a"],
            b"-Bad error rate\r\n",
        ),
        (
            &["BF.INSERT", "i", "EXPANSION", "x", "ITEMS", "a"],
            b"-Bad expansion\r\n",
        ),
        (
            &["BF.INSERT", "i", "WAT", "ITEMS", "a"],
            b"-Unknown argument received\r\n",
        ),
        (
            &["BF.INSERT", "i", "CAPACITY", "10"],
            b"-ERR wrong number of arguments for 'bf.insert' command\r\n",
        ),
        (
            &[
                "BF.INSERT",
                "i",
                "CAPACITY",
                "2",
                "NONSCALING",
                "ITEMS",
                "a",
                "b",
                "a",
                "c",
                "d",
            ],
            b"*4\r\n:1\r\n:1\r\n:0\r\n-ERR non scaling filter is full\r\n",
        ),
        (&["BF.CARD", "i"], b":2\r\n"),
        (
            &["BF.ADD", "i", "c"],
            b"-ERR non scaling filter is full\r\n",
        ),
        (&["BF.ADD", "i", "a"], b":0\r\n"),
        (&["SET", "s", "1"], b"+OK\r\n"),
        (&["BF.ADD", "s", "a"], WRONGTYPE),
        (&["BF.INFO", "s"], WRONGTYPE),
        (&["BF.EXISTS", "s", "a"], b":0\r\n"),
        (&["INCR", "i"], WRONGTYPE),
        (&["APPEND", "i", "x"], WRONGTYPE),
        (&["STRLEN", "i"], WRONGTYPE),
        (&["SETNX", "i", "x"], b":0\r\n"),
        (&["EXPIRE", "i", "100"], b":1\r\n"),
        (&["TTL", "i"], b":100\r\n"),
        (&["PERSIST", "i"], b":1\r\n"),
        (&["TTL", "i"], b":-1\r\n"),
        (&["SET", "i", "now a string"], b"+OK\r\n"),
        (&["TYPE", "i"], b"+string\r\n"),
        (&["DEL", "i"], b":1\r\n"),
        (&["TYPE", "i"], b"+none\r\n"),
        (&["BF.ADD", "i", "a"], b":1\r\n"),
        (&["BF.CARD", "i"], b":1\r\n"),
    ];
    for (args, want) in cases {
        let got = call(
            &mut s,
            args.iter()
                .map(|a| a.as_bytes())
                .collect::<Vec<_>>()
                .as_slice(),
        );
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "{args:?}"
        );
    }
    // RESP3: booleans, and BF.INFO as a map.
    assert_eq!(whole(&mut s, &[b"HELLO", b"3"])[0], b'%');
    assert_eq!(call(&mut s, &[b"BF.ADD", b"i", b"z"]), b"#t\r\n");
    assert_eq!(
        call(&mut s, &[b"BF.MEXISTS", b"i", b"z", b"y"]),
        b"*2\r\n#t\r\n#f\r\n"
    );
    let info = whole(&mut s, &[b"BF.INFO", b"i"]);
    assert!(
        info.starts_with(b"%5\r\n+Capacity\r\n:100\r\n+Size\r\n:"),
        "{}",
        String::from_utf8_lossy(&info)
    );
    stop(server);
}

#[cfg(feature = "replication")]
#[test]
fn concurrent_adds_on_two_nodes_answer_newly_added_once() {
    use common::cluster::Cluster;
    let root = tempfile::tempdir().unwrap();
    let c = Cluster::new(root.path());
    for i in 0..3 {
        c.start_with(i, i == 0, &["--bloom-sweep-secs", "1"]);
    }
    c.wait_for_leader();
    let ports = c.ports();
    // Until the cluster takes writes (an error before its first leader).
    let mut conn = None;
    let wait = std::time::Duration::from_secs(10);
    while !try_call(ports[1], &mut conn, &[b"BF.ADD", b"ready", b"x"], wait)
        .is_ok_and(|r| r == b":1\r\n")
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let n = common::scaled(10_000, 2_000);
    let items: Vec<String> = (0..n).map(|i| format!("url:{i}")).collect();
    let added: Vec<Vec<i64>> = std::thread::scope(|s| {
        let clients: Vec<_> = [1usize, 2]
            .into_iter()
            .map(|node| {
                let items = &items;
                let ports = &ports;
                s.spawn(move || {
                    use std::io::Write;
                    let port = ports[node];
                    let mut got = vec![0i64; items.len()];
                    // The two clients walk the items in opposite orders, 100 at a time.
                    let mut order: Vec<usize> = (0..items.len()).collect();
                    if node == 2 {
                        order.reverse();
                    }
                    let mut conn = connect(port);
                    for chunk in order.chunks(100) {
                        // 100 BF.ADDs pipelined: each its own change, decided in the log.
                        let sent: Vec<u8> = chunk
                            .iter()
                            .flat_map(|&i| command(&[b"BF.ADD", b"crawled", items[i].as_bytes()]))
                            .collect();
                        conn.write_all(&sent).unwrap();
                        for &i in chunk {
                            let r = reply(&mut conn);
                            // An error (a leader change under load): applied or not,
                            // unknown (-1).
                            got[i] = match r.as_slice() {
                                b":1\r\n" => 1,
                                b":0\r\n" => 0,
                                e if e.starts_with(b"-") => -1,
                                other => panic!("BF.ADD: {}", String::from_utf8_lossy(other)),
                            };
                        }
                    }
                    got
                })
            })
            .collect();
        clients.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut unknown = 0;
    for (i, (&a, &b)) in added[0].iter().zip(&added[1]).enumerate() {
        if a < 0 || b < 0 {
            unknown += 1;
            assert!(
                a.max(0) + b.max(0) <= 1,
                "item {i} answered newly added twice"
            );
        } else {
            assert_eq!(a + b, 1, "item {i} answered newly added {a} + {b} times");
        }
    }
    eprintln!("{n} items, {unknown} with an answer lost to an error");
    let card = if unknown == 0 { n } else { n - unknown };
    // Every node answers the whole set, and nothing else.
    for port in &ports {
        let mut conn = connect(*port);
        // Items whose every answer was lost may or may not have been added.
        let got = call(&mut conn, &[b"BF.CARD", b"crawled"]);
        let got: usize = String::from_utf8_lossy(&got[1..]).trim().parse().unwrap();
        assert!(
            (card..=n).contains(&got),
            "BF.CARD {got}, {card} to {n} expected"
        );
        assert_eq!(
            call(&mut conn, &[b"BF.EXISTS", b"crawled", b"url:0"]),
            b":1\r\n"
        );
        assert_eq!(
            call(&mut conn, &[b"BF.EXISTS", b"crawled", b"nope"]),
            b":0\r\n"
        );
    }
    moves_are_decided_in_the_log(&ports);
    // An expired filter's items are swept by a call from the leader.
    let mut conn = connect(ports[0]);
    assert_eq!(
        call(&mut conn, &[b"BF.MADD", b"exp", b"a", b"b"]),
        array(&[int(1), int(1)])
    );
    assert_eq!(call(&mut conn, &[b"PEXPIRE", b"exp", b"100"]), b":1\r\n");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let swept = || (0..3).any(|i| c.stderr_tail(i).contains("swept Bloom filter items"));
    while !swept() {
        assert!(std::time::Instant::now() < deadline, "no sweep logged");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// MOVE and COPY in a cluster are calls decided at apply: a filter moves or is copied with
/// its items, read the same from every node; two nodes moving the same strings to two
/// databases at once leave each in exactly one, answered 1 once.
#[cfg(feature = "replication")]
fn moves_are_decided_in_the_log(ports: &[u16]) {
    let card = call(&mut connect(ports[0]), &[b"BF.CARD", b"crawled"]);
    let mut c = connect(ports[2]);
    assert_eq!(call(&mut c, &[b"MOVE", b"crawled", b"3"]), b":1\r\n");
    assert_eq!(call(&mut c, &[b"MOVE", b"crawled", b"3"]), b":0\r\n");
    for port in ports {
        let mut conn = connect(*port);
        assert_eq!(call(&mut conn, &[b"EXISTS", b"crawled"]), b":0\r\n");
        assert_eq!(call(&mut conn, &[b"SELECT", b"3"]), b"+OK\r\n");
        assert_eq!(call(&mut conn, &[b"BF.CARD", b"crawled"]), card);
        assert_eq!(
            call(&mut conn, &[b"BF.MEXISTS", b"crawled", b"url:0", b"nope"]),
            array(&[int(1), int(0)])
        );
    }
    let mut c = connect(ports[1]);
    assert_eq!(call(&mut c, &[b"SELECT", b"3"]), b"+OK\r\n");
    assert_eq!(call(&mut c, &[b"BF.ADD", b"crawled", b"url:1"]), b":0\r\n");
    assert_eq!(
        call(&mut c, &[b"COPY", b"crawled", b"copy", b"DB", b"4"]),
        b":1\r\n"
    );
    assert_eq!(call(&mut c, &[b"BF.ADD", b"crawled", b"new"]), b":1\r\n");
    for port in ports {
        let mut conn = connect(*port);
        assert_eq!(call(&mut conn, &[b"SELECT", b"4"]), b"+OK\r\n");
        assert_eq!(call(&mut conn, &[b"BF.CARD", b"copy"]), card);
        assert_eq!(
            call(&mut conn, &[b"BF.MEXISTS", b"copy", b"url:0", b"new"]),
            array(&[int(1), int(0)])
        );
    }

    let keys: Vec<String> = (0..200).map(|i| format!("mv:{i}")).collect();
    let mut mset: Vec<&[u8]> = vec![b"MSET"];
    for k in &keys {
        mset.extend([k.as_bytes(), b"v".as_slice()]);
    }
    assert_eq!(call(&mut connect(ports[0]), &mset), b"+OK\r\n");
    let answers: Vec<Vec<i64>> = std::thread::scope(|s| {
        let movers: Vec<_> = [1usize, 2]
            .into_iter()
            .map(|node| {
                let keys = &keys;
                s.spawn(move || {
                    use std::io::Write;
                    let mut conn = connect(ports[node]);
                    let to = node.to_string();
                    let sent: Vec<u8> = keys
                        .iter()
                        .flat_map(|k| command(&[b"MOVE", k.as_bytes(), to.as_bytes()]))
                        .collect();
                    conn.write_all(&sent).unwrap();
                    keys.iter()
                        .map(|_| match reply(&mut conn).as_slice() {
                            b":1\r\n" => 1,
                            b":0\r\n" => 0,
                            e if e.starts_with(b"-") => -1,
                            other => panic!("MOVE: {}", String::from_utf8_lossy(other)),
                        })
                        .collect()
                })
            })
            .collect();
        movers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut conn = connect(ports[0]);
    let mut exists_in = |db: &[u8], k: &str| {
        assert_eq!(call(&mut conn, &[b"SELECT", db]), b"+OK\r\n");
        call(&mut conn, &[b"EXISTS", k.as_bytes()]) == b":1\r\n"
    };
    for (i, k) in keys.iter().enumerate() {
        let (a, b) = (answers[0][i], answers[1][i]);
        assert!(a.max(0) + b.max(0) <= 1, "{k} moved twice ({a}, {b})");
        assert!(a < 0 || b < 0 || a + b == 1, "{k} moved {a} + {b} times");
        let places = [b"0", b"1", b"2"].map(|db| exists_in(db, k));
        assert_eq!(
            places.iter().filter(|&&p| p).count(),
            1,
            "{k} is in databases 0, 1, 2: {places:?}"
        );
        // Both answers lost: it may not have moved.
        assert!(a.max(b) < 0 || !places[0], "{k} was not moved");
    }
}

/// COPY and MOVE take a filter with its items and expiry, under a generation of its own (the
/// copy and the original change apart); REPLACE replaces a string or a filter; a filter of
/// more items than a transfer takes is refused with nothing written.
#[test]
fn copy_and_move_take_filters_with_their_items() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start(dir.path(), port);
    let mut s = connect(port);
    let bools = |v: &[i64]| array(&v.iter().map(|&b| int(b)).collect::<Vec<_>>());
    assert_eq!(
        call(&mut s, &[b"BF.MADD", b"f", b"a", b"b", b"c"]),
        bools(&[1, 1, 1])
    );
    assert_eq!(call(&mut s, &[b"PEXPIRE", b"f", b"100000"]), b":1\r\n");
    assert_eq!(call(&mut s, &[b"COPY", b"f", b"g"]), b":1\r\n");
    assert_eq!(call(&mut s, &[b"TYPE", b"g"]), b"+MBbloom--\r\n");
    let ttl = call(&mut s, &[b"PTTL", b"g"]);
    let ttl: i64 = String::from_utf8_lossy(&ttl[1..]).trim().parse().unwrap();
    assert!((90_000..=100_000).contains(&ttl), "the copy's PTTL {ttl}");
    assert_eq!(call(&mut s, &[b"BF.ADD", b"g", b"d"]), b":1\r\n");
    assert_eq!(
        call(&mut s, &[b"BF.MEXISTS", b"g", b"a", b"b", b"c", b"d", b"z"]),
        bools(&[1, 1, 1, 1, 0])
    );
    assert_eq!(call(&mut s, &[b"BF.EXISTS", b"f", b"d"]), b":0\r\n");
    assert_eq!(call(&mut s, &[b"COPY", b"f", b"g"]), b":0\r\n");
    assert_eq!(call(&mut s, &[b"COPY", b"f", b"g", b"REPLACE"]), b":1\r\n");
    assert_eq!(call(&mut s, &[b"BF.CARD", b"g"]), b":3\r\n");
    assert_eq!(call(&mut s, &[b"SET", b"s", b"v"]), b"+OK\r\n");
    assert_eq!(call(&mut s, &[b"COPY", b"f", b"s", b"REPLACE"]), b":1\r\n");
    assert!(call(&mut s, &[b"GET", b"s"]).starts_with(b"-WRONGTYPE"));
    assert_eq!(call(&mut s, &[b"BF.EXISTS", b"s", b"c"]), b":1\r\n");
    assert_eq!(
        call(&mut s, &[b"COPY", b"f", b"s2", b"DB", b"2"]),
        b":1\r\n"
    );
    assert_eq!(call(&mut s, &[b"MOVE", b"g", b"2"]), b":1\r\n");
    assert_eq!(call(&mut s, &[b"SET", b"g", b"string"]), b"+OK\r\n");
    assert_eq!(call(&mut s, &[b"MOVE", b"g", b"2"]), b":0\r\n", "2 has one");
    assert_eq!(call(&mut s, &[b"DBSIZE"]), b":3\r\n");
    assert_eq!(call(&mut s, &[b"SELECT", b"2"]), b"+OK\r\n");
    assert_eq!(call(&mut s, &[b"BF.CARD", b"s2"]), b":3\r\n");
    assert_eq!(call(&mut s, &[b"BF.EXISTS", b"g", b"b"]), b":1\r\n");
    assert_eq!(call(&mut s, &[b"DBSIZE"]), b":2\r\n");
    // One item more than a transfer takes: refused, nothing written.
    // (Parts under the test server's 1 MiB request limit, each argument charged 64 bytes.)
    for part in 0..8 {
        let items: Vec<String> = (0..12_501)
            .map(|i| format!("{}", part * 12_501 + i))
            .collect();
        let mut args: Vec<&[u8]> = vec![b"BF.MADD", b"big"];
        args.extend(items.iter().map(|i| i.as_bytes()));
        let r = call(&mut s, &args);
        assert!(r.starts_with(b"*12501\r\n:1\r\n"));
    }
    for args in [
        &[b"MOVE".as_slice(), b"big", b"3"][..],
        &[b"COPY", b"big", b"big2"],
    ] {
        let e = call(&mut s, args);
        assert!(
            e.starts_with(b"-ERR MOVE or COPY of a Bloom filter of more than 100000 items"),
            "{}",
            String::from_utf8_lossy(&e)
        );
    }
    assert_eq!(call(&mut s, &[b"BF.CARD", b"big"]), b":100008\r\n");
    assert_eq!(call(&mut s, &[b"EXISTS", b"big2"]), b":0\r\n");
    assert_eq!(call(&mut s, &[b"SELECT", b"3"]), b"+OK\r\n");
    assert_eq!(call(&mut s, &[b"DBSIZE"]), b":0\r\n");
    stop(server);
}

/// Deleting a filter deletes its items too (a range delete of its generation), and SET over
/// one and FLUSHDB leave none behind; a renamed or moved filter keeps its items. Counted in
/// the store itself once the server has stopped.
#[test]
fn removed_filters_leave_no_items_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start(dir.path(), port);
    let mut s = connect(port);
    assert_eq!(call(&mut s, &[b"SELECT", b"1"]), b"+OK\r\n");
    let items: Vec<String> = (0..1000).map(|i| format!("item:{i}")).collect();
    for k in ["big", "over", "moved"] {
        let mut args: Vec<&[u8]> = vec![b"BF.MADD", k.as_bytes()];
        args.extend(items.iter().map(|i| i.as_bytes()));
        assert!(call(&mut s, &args).starts_with(b"*1000\r\n:1\r\n"));
    }
    assert_eq!(call(&mut s, &[b"BF.ADD", b"keep", b"x"]), b":1\r\n");
    assert_eq!(call(&mut s, &[b"DEL", b"big"]), b":1\r\n");
    assert_eq!(call(&mut s, &[b"SET", b"over", b"v", b"XX"]), b"+OK\r\n");
    assert_eq!(call(&mut s, &[b"RENAME", b"keep", b"kept"]), b"+OK\r\n");
    assert_eq!(call(&mut s, &[b"MOVE", b"moved", b"2"]), b":1\r\n");
    assert_eq!(call(&mut s, &[b"BF.EXISTS", b"kept", b"x"]), b":1\r\n");
    assert_eq!(call(&mut s, &[b"DBSIZE"]), b":2\r\n");
    let scan = call(&mut s, &[b"SCAN", b"0", b"TYPE", b"MBbloom--"]);
    assert!(
        scan.ends_with(b"*1\r\n$4\r\nkept\r\n"),
        "{}",
        String::from_utf8_lossy(&scan)
    );
    assert_eq!(call(&mut s, &[b"SELECT", b"2"]), b"+OK\r\n");
    assert_eq!(call(&mut s, &[b"BF.CARD", b"moved"]), b":1000\r\n");
    assert_eq!(
        call(&mut s, &[b"BF.EXISTS", b"moved", b"item:999"]),
        b":1\r\n"
    );
    assert_eq!(call(&mut s, &[b"BF.ADD", b"gone", b"x"]), b":1\r\n");
    assert_eq!(call(&mut s, &[b"FLUSHDB"]), b"+OK\r\n");
    drop(s);
    stop(server);
    let items_left = items_on_disk(dir.path());
    assert_eq!(items_left, 1, "only kept's item is left");
}

/// The items of filters that expired are range-deleted by the periodic sweep
/// (`--bloom-sweep-secs`), before, between and after live filters' generations and in
/// every database; live filters, and one made after the sweeps, keep theirs.
#[test]
fn expired_filters_items_are_swept() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let args = ["--max-request-mib", "1", "--bloom-sweep-secs", "1"];
    let server = start_with(dir.path(), port, &args);
    let mut s = connect(port);
    let items: Vec<String> = (0..500).map(|i| format!("item:{i}")).collect();
    let cases: [(&[u8], &[u8], bool); 4] = [
        (b"0", b"first", true),
        (b"0", b"kept", false),
        (b"0", b"last", true),
        (b"1", b"other", true),
    ];
    for (db, key, expires) in cases {
        assert_eq!(call(&mut s, &[b"SELECT", db]), b"+OK\r\n");
        let mut args: Vec<&[u8]> = vec![b"BF.MADD", key];
        args.extend(items.iter().map(|i| i.as_bytes()));
        assert!(call(&mut s, &args).starts_with(b"*500\r\n:1\r\n"));
        if expires {
            assert_eq!(call(&mut s, &[b"PEXPIRE", key, b"200"]), b":1\r\n");
        }
    }
    // Past the expiry, then past two sweeps.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(call(&mut s, &[b"SELECT", b"0"]), b"+OK\r\n");
    assert_eq!(call(&mut s, &[b"BF.ADD", b"late", b"x"]), b":1\r\n");
    assert_eq!(call(&mut s, &[b"BF.CARD", b"kept"]), b":500\r\n");
    assert_eq!(call(&mut s, &[b"EXISTS", b"first", b"last"]), b":0\r\n");
    stop(server);
    let items_left = items_on_disk(dir.path());
    assert_eq!(items_left, 501, "kept's items and late's one are left");
}

/// The filter items in the stopped server's store at `dir`, in every database.
fn items_on_disk(dir: &std::path::Path) -> usize {
    let db = lsm_bloom::Db::open(dir, lsm_bloom::Options::default()).unwrap();
    let mut items = 0;
    for name in db.keyspace_names().iter().filter(|n| n.starts_with("bf.")) {
        let ks = db.keyspace(name).unwrap();
        items += ks.scan_prefix(b"i").unwrap().count();
    }
    items
}

/// redis-py's `r.bf()` and node-redis's `client.bf` (`tests/clients/bloom.py`, `bloom.js`).
#[test]
fn redis_py_and_node_redis_use_the_bf_commands() {
    run_client_scripts("bloom.py", "bloom.js");
}

/// Crawler dedup end to end: a stream of URLs of which half repeat earlier ones, in
/// pipelined batches of BF.MEXISTS then BF.MADD (the crawler's "seen?" and "mark seen"):
/// every answer exact against a set; the server killed (SIGKILL) half way and started
/// again loses no URL it acknowledged.
#[test]
fn crawler_dedup_is_exact_across_a_kill() {
    use std::collections::HashSet;
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut server = start(dir.path(), port);
    let total = common::scaled(1_000_000u64, 100_000);
    let mut rng = Rng::new(7);
    let mut seen: HashSet<u64> = HashSet::new();
    let mut next_new = 0u64;
    let mut s = connect(port);
    let batch = 1000;
    let (mut sent, mut killed) = (0, false);
    while sent < total {
        if sent >= total / 2 && !killed {
            killed = true;
            // Kill without warning, then start again on the same directory.
            drop(s);
            drop(server);
            server = start(dir.path(), port);
            s = connect(port);
        }
        // Half new URLs, half repeats of earlier ones (or of this batch's).
        let ids: Vec<u64> = (0..batch)
            .map(|_| {
                if next_new == 0 || rng.below(2) == 0 {
                    next_new += 1;
                    next_new - 1
                } else {
                    rng.below(next_new)
                }
            })
            .collect();
        let urls: Vec<String> = ids
            .iter()
            .map(|i| format!("https://site{}.example/page/{i}", i % 97))
            .collect();
        let mut args: Vec<&[u8]> = vec![b"BF.MEXISTS", b"crawled"];
        args.extend(urls.iter().map(|u| u.as_bytes()));
        let mut madd: Vec<&[u8]> = vec![b"BF.MADD", b"crawled"];
        madd.extend(urls.iter().map(|u| u.as_bytes()));
        // Pipelined: both sent, then both read.
        s.write_all(&[command(&args), command(&madd)].concat())
            .unwrap();
        let exists = reply(&mut s);
        let added = reply(&mut s);
        let mut want_exists = vec![b"*1000\r\n".to_vec()];
        let mut want_added = vec![b"*1000\r\n".to_vec()];
        let mut batch_seen = HashSet::new();
        for id in &ids {
            let before = seen.contains(id);
            want_exists.push(int(i64::from(before)));
            want_added.push(int(i64::from(!before && batch_seen.insert(*id))));
        }
        assert_eq!(exists, want_exists.concat(), "BF.MEXISTS at {sent}");
        assert_eq!(added, want_added.concat(), "BF.MADD at {sent}");
        seen.extend(batch_seen);
        sent += batch;
    }
    let card = call(&mut s, &[b"BF.CARD", b"crawled"]);
    assert_eq!(card, int(seen.len() as i64));
    // INFO counts the tables and filters of the filters keyspace too (the default keyspace,
    // database 0's strings, holds none here).
    let info = String::from_utf8_lossy(&call(&mut s, &[b"INFO"])).into_owned();
    let field = |name: &str| -> u64 {
        let line = info
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")));
        line.and_then(|v| v.trim().parse().ok()).unwrap_or(0)
    };
    assert!(field("tables") > 0 && field("filter_bytes") > 0, "{info}");
    drop(s);
    stop(server);
}

/// A BF.MADD or BF.INSERT longer than one change (`ADD_CHUNK`, 10,000 items) answers every
/// item as one would: repeats across the parts answered 0, and a non-scaling filter's
/// refusal ends the reply where it falls, whichever part it is in.
#[test]
fn long_adds_run_in_parts_and_answer_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start_with(dir.path(), port, &["--max-request-mib", "8"]);
    let mut s = connect(port);
    // 25,000 items: 0..20,000, then 5,000 repeats of the first ones.
    let items: Vec<String> = (0..25_000).map(|i| format!("{}", i % 20_000)).collect();
    let mut args: Vec<&[u8]> = vec![b"BF.MADD", b"long"];
    args.extend(items.iter().map(|i| i.as_bytes()));
    let mut want = vec![b"*25000\r\n".to_vec()];
    want.extend((0..25_000).map(|i| int(i64::from(i < 20_000))));
    assert!(call(&mut s, &args) == want.concat(), "BF.MADD of 25,000");
    assert_eq!(call(&mut s, &[b"BF.CARD", b"long"]), int(20_000));
    // A non-scaling filter of 15,000 refuses the 15,001st new item, in the second part; the
    // third part (repeats, which would answer 0) is not run.
    let mut args: Vec<&[u8]> = vec![
        b"BF.INSERT",
        b"fixed",
        b"CAPACITY",
        b"15000",
        b"NONSCALING",
        b"ITEMS",
    ];
    args.extend(items.iter().map(|i| i.as_bytes()));
    let mut want = vec![b"*15001\r\n".to_vec()];
    want.extend((0..15_000).map(|_| int(1)));
    want.push(FULL.to_vec());
    assert!(
        call(&mut s, &args) == want.concat(),
        "BF.INSERT past capacity"
    );
    assert_eq!(call(&mut s, &[b"BF.CARD", b"fixed"]), int(15_000));
    stop(server);
}
