//! Crash recovery: a child process writes and reports each acknowledged write on stdout; the
//! parent kills it with SIGKILL at a random moment, reopens the database, and checks that
//! every acknowledged write is there. 50 cycles on one directory, so crashes land during
//! writes, memtable switches, flushes, compactions and the child's own open — once with
//! `sync_writes` and once without (a process crash loses nothing acknowledged either way: the
//! log record is in the kernel's page cache before `put` returns).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{tiny_options, Rng};
use lsm_bloom::{Db, Options};

const CHILD_ENV: &str = "LSM_BLOOM_CRASH_CHILD_DIR";

const SYNC_ENV: &str = "LSM_BLOOM_CRASH_SYNC";
/// Crash cycles: 50 with `LSM_BLOOM_THOROUGH` (`.ci/run`), 15 in a plain `cargo test`.
fn cycles() -> u64 {
    common::scaled(50, 15)
}

fn options(sync_writes: bool) -> Options {
    tiny_options().with_sync_writes(sync_writes)
}

fn value_for(key: &str) -> Vec<u8> {
    format!("value-of-{key}-{}", "x".repeat(key.len() * 3)).into_bytes()
}

/// The child: writes `cycle`-tagged keys forever, printing `ack KEY` after each returns.
#[test]
#[ignore = "run by crash_recovery_keeps_every_acknowledged_write as a child process"]
fn crash_child_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let cycle: u64 = std::env::var("LSM_BLOOM_CRASH_CYCLE")
        .unwrap()
        .parse()
        .unwrap();
    let sync = std::env::var(SYNC_ENV).unwrap() == "1";
    let db = Db::open(&dir, options(sync)).unwrap();
    let mut rng = Rng::new(cycle);
    for i in 0.. {
        let key = format!("c{cycle:03}-{i:06}");
        if rng.chance(10) && i > 0 {
            // Delete an earlier key of this cycle; acknowledged as a deletion.
            let victim = format!("c{cycle:03}-{:06}", rng.below(i));
            // Announced first: if the kill lands between the delete and its ack, the parent
            // accepts either outcome for this key (then pins whichever it finds).
            println!("try-del {victim}");
            db.delete(&victim).unwrap();
            println!("del {victim}");
        } else {
            db.put(&key, value_for(&key)).unwrap();
            println!("ack {key}");
        }
    }
}

#[test]
fn crash_recovery_keeps_every_acknowledged_write_with_sync_writes() {
    crash_cycles(true);
}

#[test]
fn crash_recovery_keeps_every_acknowledged_write_without_sync_writes() {
    crash_cycles(false);
}

fn crash_cycles(sync: bool) {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng::new(0xC0FFEE + u64::from(sync));
    let mut expected: std::collections::BTreeMap<String, bool> = Default::default(); // key -> live
    for cycle in 0..cycles() {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child_writer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .env("LSM_BLOOM_CRASH_CYCLE", cycle.to_string())
            .env(SYNC_ENV, if sync { "1" } else { "0" })
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let kill_after = Duration::from_millis(30 + rng.below(300));
        let lines = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        });
        let start = Instant::now();
        while start.elapsed() < kill_after {
            std::thread::sleep(Duration::from_millis(5));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let mut in_flight_delete = None;
        for line in lines.join().unwrap() {
            if let Some(k) = line.strip_prefix("ack ") {
                expected.insert(k.to_string(), true);
            } else if let Some(k) = line.strip_prefix("try-del ") {
                in_flight_delete = Some(k.to_string());
            } else if let Some(k) = line.strip_prefix("del ") {
                expected.insert(k.to_string(), false);
                in_flight_delete = None;
            }
        }
        // Reopen in this process: every acknowledged write must be there.
        let db = Db::open(dir.path(), options(sync))
            .unwrap_or_else(|e| panic!("sync={sync} cycle {cycle}: reopen failed: {e}"));
        // A kill leaves at most a torn tail of the newest log, never damage in the middle.
        if let Some(d) = &db.recovery().wal_damage {
            assert!(d.torn_tail, "sync={sync} cycle {cycle}: {d:?}");
        }
        if let Some(k) = in_flight_delete {
            if expected.contains_key(&k) {
                let present = db.get(&k).unwrap().is_some();
                expected.insert(k, present);
            }
        }
        for (k, live) in &expected {
            let got = db.get(k).unwrap();
            if *live {
                assert_eq!(
                    got,
                    Some(value_for(k)),
                    "sync={sync} cycle {cycle}: acknowledged write of {k} lost"
                );
            } else {
                assert_eq!(
                    got, None,
                    "sync={sync} cycle {cycle}: acknowledged delete of {k} lost"
                );
            }
        }
    }
    assert!(
        expected.len() > 200,
        "sync={sync}: children acknowledged only {} writes",
        expected.len()
    );
    println!(
        "sync_writes={sync}: {} SIGKILL cycles, {} acknowledged keys checked",
        cycles(),
        expected.len()
    );
}
