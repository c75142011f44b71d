//! kv_server's numbered databases (`--databases`, SELECT, FLUSHDB, FLUSHALL, SWAPDB, MOVE,
//! DBSIZE), each a keyspace of the store: kept apart, kept across restarts and SIGKILLs,
//! flushed while other connections scan and write them, and a store of an earlier kv_server
//! served as database 0. redis-py and node-redis (`db=3` at connect) in `kv_server_clients`.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::kv::*;
use redis::{Commands, RedisResult};

fn client(port: u16, db: usize) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/{db}"))
        .unwrap()
        .get_connection()
        .unwrap()
}

fn dbsize(c: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(c).unwrap()
}

fn get(c: &mut redis::Connection, k: &str) -> Option<String> {
    c.get(k).unwrap()
}

/// Every key of the connection's database, by SCAN.
fn keys(c: &mut redis::Connection) -> BTreeSet<String> {
    let iter: redis::Iter<String> = c.scan().unwrap();
    iter.map(|k| k.unwrap()).collect()
}

/// The store's keyspaces, the server stopped.
fn keyspaces(dir: &std::path::Path) -> Vec<String> {
    let db = lsm_bloom::Db::open(dir, lsm_bloom::Options::default()).unwrap();
    let names = db.keyspace_names();
    db.close().unwrap();
    names
}

#[test]
fn databases_are_apart_and_kept_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start_with(dir.path(), port, &["--databases", "4"]);
    let mut d: Vec<redis::Connection> = (0..4).map(|n| client(port, n)).collect();
    for (n, c) in d.iter_mut().enumerate() {
        for i in 0..=n {
            let _: () = c.set(format!("k{i}"), format!("db{n}")).unwrap();
        }
    }
    for (n, c) in d.iter_mut().enumerate() {
        assert_eq!(dbsize(c), n as i64 + 1);
        assert_eq!(get(c, "k0").as_deref(), Some(format!("db{n}").as_str()));
        assert_eq!(keys(c).len(), n + 1);
    }
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("databases")
        .query(&mut d[0])
        .unwrap();
    assert_eq!(cfg, ["databases", "4"]);
    // SELECT within one connection, and its errors.
    let _: () = redis::cmd("SELECT").arg(2).query(&mut d[0]).unwrap();
    assert_eq!(get(&mut d[0], "k2").as_deref(), Some("db2"));
    let _: () = redis::cmd("SELECT").arg(0).query(&mut d[0]).unwrap();
    for bad in ["4", "-1"] {
        let r: RedisResult<()> = redis::cmd("SELECT").arg(bad).query(&mut d[0]);
        assert!(r
            .unwrap_err()
            .to_string()
            .contains("DB index is out of range"));
    }
    let r: RedisResult<()> = redis::cmd("SELECT").arg("x").query(&mut d[0]);
    assert!(r.unwrap_err().to_string().contains("not an integer"));

    // SWAPDB: at once for every connection.
    let _: () = redis::cmd("SWAPDB").arg(1).arg(3).query(&mut d[0]).unwrap();
    assert_eq!(get(&mut d[1], "k0").as_deref(), Some("db3"));
    assert_eq!(dbsize(&mut d[1]), 4);
    assert_eq!(get(&mut d[3], "k0").as_deref(), Some("db1"));
    assert_eq!(dbsize(&mut d[3]), 2);
    let r: RedisResult<()> = redis::cmd("SWAPDB").arg(1).arg(9).query(&mut d[0]);
    assert!(r.unwrap_err().to_string().contains("out of range"));

    // MOVE: 1 when moved; 0 when absent here or present there; the value goes with it.
    let moved: i64 = redis::cmd("MOVE")
        .arg("k2")
        .arg(2)
        .query(&mut d[1])
        .unwrap();
    assert_eq!(moved, 0, "k2 is in database 2 already");
    let _: () = d[1].set("only1", "v1").unwrap();
    let moved: i64 = redis::cmd("MOVE")
        .arg("only1")
        .arg(2)
        .query(&mut d[1])
        .unwrap();
    assert_eq!(moved, 1);
    assert_eq!(get(&mut d[1], "only1"), None);
    assert_eq!(get(&mut d[2], "only1").as_deref(), Some("v1"));
    let moved: i64 = redis::cmd("MOVE")
        .arg("nothing")
        .arg(2)
        .query(&mut d[1])
        .unwrap();
    assert_eq!(moved, 0);
    let r: RedisResult<i64> = redis::cmd("MOVE").arg("k0").arg(1).query(&mut d[1]);
    assert!(r.unwrap_err().to_string().contains("same"));
    // A MOVE into a database nothing was written to yet.
    let _: () = redis::cmd("FLUSHDB").query(&mut d[0]).unwrap();
    let moved: i64 = redis::cmd("MOVE")
        .arg("k1")
        .arg(0)
        .query(&mut d[3])
        .unwrap();
    assert_eq!(moved, 1);
    assert_eq!(get(&mut d[0], "k1").as_deref(), Some("db1"));

    // FLUSHDB empties one database only.
    let _: () = redis::cmd("FLUSHDB").query(&mut d[3]).unwrap();
    assert_eq!(dbsize(&mut d[3]), 0);
    assert!(keys(&mut d[3]).is_empty());
    assert_eq!(dbsize(&mut d[1]), 4);
    let _: () = d[3].set("after", "flush").unwrap();
    let before: Vec<(String, Option<String>)> = (0..4)
        .flat_map(|n| ["k0", "k1", "k2", "k3", "only1", "after"].map(|k| (n, k)))
        .map(|(n, k)| (format!("{n}/{k}"), get(&mut d[n], k)))
        .collect();
    drop(d);
    stop(server);

    // Everything as it was after a restart (SWAPDB, MOVE and FLUSHDB included).
    let server = start_with(dir.path(), port, &["--databases", "4"]);
    let mut d: Vec<redis::Connection> = (0..4).map(|n| client(port, n)).collect();
    let after: Vec<(String, Option<String>)> = (0..4)
        .flat_map(|n| ["k0", "k1", "k2", "k3", "only1", "after"].map(|k| (n, k)))
        .map(|(n, k)| (format!("{n}/{k}"), get(&mut d[n], k)))
        .collect();
    assert_eq!(before, after);
    drop(d);
    stop(server);

    // Fewer databases than hold data: refused, naming the database; nothing is lost.
    let out = std::process::Command::new(common::example("kv_server"))
        .args([
            "--dir",
            dir.path().to_str().unwrap(),
            "--port",
            &port.to_string(),
        ])
        .args(["--databases", "2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("database 2") && err.contains("database 3") && err.contains("--databases 4"),
        "{err}"
    );

    // FLUSHALL: every database empty, the store holding no database keyspace.
    let server = start_with(dir.path(), port, &["--databases", "4"]);
    let mut c = client(port, 2);
    let _: () = redis::cmd("FLUSHALL").arg("SYNC").query(&mut c).unwrap();
    for n in 0..4 {
        assert_eq!(dbsize(&mut client(port, n)), 0);
    }
    drop(c);
    stop(server);
    let left: Vec<String> = keyspaces(dir.path())
        .into_iter()
        .filter(|k| k.starts_with("db."))
        .collect();
    assert!(left.is_empty(), "keyspaces left after FLUSHALL: {left:?}");
}

/// FLUSHDB (and FLUSHDB ASYNC, and SWAPDB) while other connections scan the database, read
/// 5,000 keys at a time from it (MGET, long enough to span a flush) and write it: every call
/// of theirs succeeds (a command that began before the flush finishes on the data it began
/// on), the scan never returns a key twice, and after the last flush the database holds only
/// what was written after it.
#[test]
fn flushdb_while_others_scan_and_write() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start(dir.path(), port);
    let stop_flag = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..2 {
        let stop_flag = Arc::clone(&stop_flag);
        workers.push(std::thread::spawn(move || {
            let mut c = client(port, 5);
            let mut i = 0u64;
            while !stop_flag.load(Ordering::Relaxed) {
                let r: RedisResult<()> = c.set(format!("w{w}:{i}"), "v");
                r.unwrap_or_else(|e| panic!("SET during flushes: {e}"));
                let r: RedisResult<Option<String>> = c.get(format!("w{w}:{}", i / 2));
                r.unwrap_or_else(|e| panic!("GET during flushes: {e}"));
                i += 1;
            }
            i
        }));
    }
    let scanner = {
        let stop_flag = Arc::clone(&stop_flag);
        std::thread::spawn(move || {
            let mut c = client(port, 5);
            let mut scans = 0;
            while !stop_flag.load(Ordering::Relaxed) {
                let mut seen = BTreeSet::new();
                let mut cursor = 0u64;
                loop {
                    let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("COUNT")
                        .arg(50)
                        .query(&mut c)
                        .unwrap_or_else(|e| panic!("SCAN during flushes: {e}"));
                    for k in keys {
                        assert!(seen.insert(k.clone()), "{k} returned twice by one scan");
                    }
                    cursor = next;
                    if cursor == 0 {
                        break;
                    }
                }
                scans += 1;
            }
            scans
        })
    };
    let reader = {
        let stop_flag = Arc::clone(&stop_flag);
        std::thread::spawn(move || {
            let mut c = client(port, 5);
            let keys: Vec<String> = (0..5000).map(|i| format!("bulk{i}")).collect();
            let mut reads = 0;
            while !stop_flag.load(Ordering::Relaxed) {
                let r: RedisResult<Vec<Option<String>>> = c.mget(&keys);
                r.unwrap_or_else(|e| panic!("MGET during flushes: {e}"));
                reads += 1;
            }
            reads
        })
    };
    let mut c = client(port, 5);
    let mut other = client(port, 6);
    let bulk: Vec<(String, String)> = (0..5000)
        .map(|i| (format!("bulk{i}"), "v".into()))
        .collect();
    for round in 0..20 {
        let _: () = c.mset(&bulk).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        match round % 3 {
            0 => redis::cmd("FLUSHDB").query::<()>(&mut c).unwrap(),
            1 => redis::cmd("FLUSHDB")
                .arg("ASYNC")
                .query::<()>(&mut c)
                .unwrap(),
            // Swapped out and back: the writers' keys stay in database 5.
            _ => {
                redis::cmd("SWAPDB")
                    .arg(5)
                    .arg(6)
                    .query::<()>(&mut c)
                    .unwrap();
                redis::cmd("SWAPDB")
                    .arg(6)
                    .arg(5)
                    .query::<()>(&mut other)
                    .unwrap();
            }
        }
    }
    redis::cmd("FLUSHDB").query::<()>(&mut c).unwrap();
    stop_flag.store(true, Ordering::Relaxed);
    let written: Vec<u64> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let scans = scanner.join().unwrap();
    let reads = reader.join().unwrap();
    assert!(
        written.iter().all(|&n| n > 100),
        "writers stalled: {written:?}"
    );
    assert!(scans > 0 && reads > 0);
    // Only keys written after the last flush remain; DBSIZE counts them exactly.
    let remaining = keys(&mut c);
    assert_eq!(dbsize(&mut c), remaining.len() as i64);
    assert!(
        remaining.len() < 1000,
        "{} keys survived the last flush",
        remaining.len()
    );
    drop((c, other));
    stop(server);
    // Every flushed keyspace was dropped: the store holds at most databases 5's and 6's (6
    // holds what was written to 5 while they were swapped).
    let left: Vec<String> = keyspaces(dir.path())
        .into_iter()
        .filter(|k| k.starts_with("db."))
        .collect();
    assert!(left.len() <= 2, "flushed keyspaces left: {left:?}");
}

/// A store an earlier kv_server wrote (keys in the default keyspace) is served as database 0;
/// its FLUSHDB empties database 0 at once and the old keys are deleted in the background, the
/// deletion resumed after a SIGKILL. A keyspace a crash left unnamed (created, never mapped)
/// is dropped at the next start.
#[test]
fn an_earlier_store_is_database_0_and_leftovers_go() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = lsm_bloom::Db::open(dir.path(), lsm_bloom::Options::default()).unwrap();
        let mut b = lsm_bloom::WriteBatch::new();
        for i in 0..20_000 {
            b.put(format!("old{i:05}"), "v");
        }
        db.write(b).unwrap();
        db.keyspace("db.7.99").unwrap().put("orphan", "x").unwrap();
        db.close().unwrap();
    }
    let port = free_port();
    let server = start(dir.path(), port);
    let mut c = client(port, 0);
    assert_eq!(dbsize(&mut c), 20_000);
    assert_eq!(get(&mut c, "old00042").as_deref(), Some("v"));
    assert_eq!(
        dbsize(&mut client(port, 7)),
        0,
        "the orphan keyspace is no database"
    );
    let _: () = redis::cmd("FLUSHDB").query(&mut c).unwrap();
    assert_eq!(dbsize(&mut c), 0);
    assert_eq!(get(&mut c, "old00042"), None);
    let _: () = c.set("new", "1").unwrap();
    drop(c);
    stop(server);
    let names = keyspaces(dir.path());
    assert!(!names.contains(&"db.7.99".to_string()), "{names:?}");
    // The old keys are gone from the default keyspace (deleted before the stop, or by the
    // start after it).
    let server = start(dir.path(), port);
    let mut c = client(port, 0);
    assert_eq!(get(&mut c, "new").as_deref(), Some("1"));
    drop(c);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    stop(server);
    loop {
        let db = lsm_bloom::Db::open(dir.path(), lsm_bloom::Options::default()).unwrap();
        let left = db.iter().count();
        db.close().unwrap();
        if left == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{left} old keys left");
        let server = start(dir.path(), port);
        std::thread::sleep(std::time::Duration::from_millis(500));
        stop(server);
    }
}

/// SIGKILL right after FLUSHDB, SWAPDB and writes answered: all of them hold after the
/// restart.
#[test]
fn database_changes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    for round in 0..=3 {
        let server = start(dir.path(), port);
        let mut a = client(port, 1);
        let mut b = client(port, 2);
        if round > 0 {
            // The state the last round left: database 1 flushed then written, 2 swapped in.
            assert_eq!(
                get(&mut a, "r").as_deref(),
                Some(&*format!("a{}", round - 1))
            );
            assert_eq!(dbsize(&mut a), 1);
            assert_eq!(
                get(&mut b, "r").as_deref(),
                Some(&*format!("b{}", round - 1))
            );
            assert_eq!(dbsize(&mut b), 1);
        }
        if round == 3 {
            drop((a, b));
            stop(server);
            break;
        }
        let _: () = a.set("x", "1").unwrap();
        let _: () = redis::cmd("FLUSHDB").query(&mut a).unwrap();
        let _: () = a.set("r", format!("b{round}")).unwrap();
        let _: () = b.set("r", format!("a{round}")).unwrap();
        let _: () = b.set("y", "1").unwrap();
        let _: () = redis::cmd("FLUSHDB").query(&mut b).unwrap();
        let _: () = b.set("r", format!("a{round}")).unwrap();
        let _: () = redis::cmd("SWAPDB").arg(1).arg(2).query(&mut a).unwrap();
        drop((a, b));
        let mut server = server;
        let mut child = server.0.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

#[test]
fn redis_py_and_node_redis_choose_and_change_databases() {
    run_client_scripts("databases.py", "databases.js");
}
