//! `kv_server`'s MULTI, EXEC, DISCARD, WATCH and UNWATCH against Redis itself: two clients of
//! each server take turns at random, sending the same commands to both (transactions opened,
//! queued, aborted by a refused command, executed, discarded; keys watched, then changed or
//! not by the other client, or expired), and every reply must be equal byte for byte.
//!
//! Needs `redis-server`: skipped without it, unless `LSM_BLOOM_REQUIRE_REDIS_SERVER=1`.

mod common;

use std::net::TcpStream;
use std::time::{SystemTime, UNIX_EPOCH};

use common::kv::*;
use common::redis::{pair, Pair};
use common::Rng;

fn pick<'a>(rng: &mut Rng, from: &[&'a str]) -> &'a str {
    from[rng.below(from.len() as u64) as usize]
}

/// One random command. `soon` is an absolute expiry (ms) a little ahead, on a 100 ms grid.
fn random_command(rng: &mut Rng, soon: u64) -> Vec<String> {
    let k = format!("k{}", rng.below(4));
    let w = |s: &str| s.to_string();
    match rng.below(20) {
        0..=2 => vec![w("MULTI")],
        3..=5 => vec![w("EXEC")],
        6 => vec![w("DISCARD")],
        7 | 8 => {
            let mut c = vec![w("WATCH"), k];
            if rng.below(2) == 0 {
                c.push(format!("k{}", rng.below(4)));
            }
            c
        }
        9 => vec![w("UNWATCH")],
        10 | 11 => vec![w("SET"), k, format!("v{}", rng.below(10))],
        12 => vec![w("INCR"), k],
        13 => vec![w("GET"), k],
        14 => vec![w("DEL"), k],
        15 => vec![w("SET"), k, w("x"), w("PXAT"), soon.to_string()],
        16 => vec![w(pick(rng, &["FOO", "GET", "EXEC", "WATCH"]))],
        17 => vec![w("SET"), k, w("v"), w(pick(rng, &["NX", "XX", "BAD"]))],
        18 => vec![w("EXISTS"), k],
        _ => vec![w("SETNX"), k, w("n")],
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Waits until the clock is at least 10 ms from a 100 ms grid point, so that a key expiring on
/// the grid lies on the same side of its expiry for both servers.
fn away_from_the_grid() {
    while !(10..90).contains(&(now_ms() % 100)) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn transactions_answer_as_redis_does() {
    let dir = tempfile::tempdir().unwrap();
    let Some(Pair {
        redis: _redis,
        server,
        ours,
        theirs,
        ports,
    }) = pair(dir.path())
    else {
        return;
    };
    // Two clients of each server: ours[i] and theirs[i] are the same client.
    let mut clients: [(TcpStream, TcpStream); 2] =
        [(ours, theirs), (connect(ports.0), connect(ports.1))];
    let mut rng = Rng::new(5859);
    let steps = if common::thorough() { 12_000 } else { 3_000 };
    let (mut executed, mut aborted, mut refused) = (0, 0, 0);
    for step in 0..steps {
        if rng.below(50) == 0 {
            std::thread::sleep(std::time::Duration::from_millis(rng.below(150)));
        }
        let c = rng.below(2) as usize;
        let soon = (now_ms() / 100 + 1 + rng.below(3)) * 100;
        let cmd = random_command(&mut rng, soon);
        let args: Vec<&[u8]> = cmd.iter().map(|w| w.as_bytes()).collect();
        away_from_the_grid();
        let (ours, theirs) = &mut clients[c];
        let (a, b) = (call(ours, &args), call(theirs, &args));
        assert_eq!(
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b),
            "step {step}, client {c}: {cmd:?}"
        );
        if cmd[0] == "EXEC" {
            executed += usize::from(a.starts_with(b"*") && a != b"*-1\r\n");
            aborted += usize::from(a == b"*-1\r\n");
            refused += usize::from(a.starts_with(b"-EXECABORT"));
        }
    }
    eprintln!("{steps} commands: {executed} EXECs ran, {aborted} aborted by a watched key, {refused} refused");
    assert!(
        executed > 50 && aborted > 10 && refused > 10,
        "the stream reached too little"
    );
    stop(server);
}

/// A client that queues and never runs EXEC is held to a bound: past 64 MiB of queued commands
/// a command is refused (and EXEC answers EXECABORT); past 1,024 open WATCH calls another is
/// refused. Redis has neither limit; a normal transaction comes nowhere near them.
#[test]
fn queued_commands_and_watches_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = start(dir.path(), port);
    let mut c = connect(port);
    // Under the test server's 1 MiB request limit.
    let value = vec![b'v'; 512 << 10];
    assert_eq!(call(&mut c, &[b"MULTI"]), b"+OK\r\n");
    let per_command = 3 + 1 + value.len() + 3 * 64;
    let fits = (64 << 20) / per_command;
    for _ in 0..fits {
        assert_eq!(call(&mut c, &[b"SET", b"k", &value]), b"+QUEUED\r\n");
    }
    let refused = call(&mut c, &[b"SET", b"k", &value]);
    assert!(
        refused.starts_with(b"-ERR the transaction's queued commands"),
        "{:?}",
        String::from_utf8_lossy(&refused)
    );
    assert!(call(&mut c, &[b"EXEC"]).starts_with(b"-EXECABORT"));
    assert_eq!(call(&mut c, &[b"GET", b"k"]), b"$-1\r\n");
    for _ in 0..1024 {
        assert_eq!(call(&mut c, &[b"WATCH", b"k"]), b"+OK\r\n");
    }
    assert!(call(&mut c, &[b"WATCH", b"k"]).starts_with(b"-ERR more than 1024 WATCH"));
    assert_eq!(call(&mut c, &[b"UNWATCH"]), b"+OK\r\n");
    assert_eq!(call(&mut c, &[b"WATCH", b"k"]), b"+OK\r\n");
    stop(server);
}
