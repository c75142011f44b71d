//! Conditional and read-modify-write commands are atomic across a 3-process kv_server
//! cluster (feature `replication`): clients on all three nodes race `SET NX`, `INCR` and
//! `GETDEL` on the same keys, round by round, while the leader is killed and restarted, and
//! every operation is recorded with its call and return on one logical clock. The checker:
//! - `SET NX`: at most one acknowledged winner per key, and the key holds the winner's value;
//! - `INCR`: every acknowledged value distinct, in real-time order (one that returned before
//!   another was called is smaller), and the final count at least the acknowledged ones and
//!   at most those plus the unknown ones (each counted exactly once);
//! - `GETDEL`: each value written is taken by at most one `GETDEL`;
//! - optimistic increments (WATCH, GET, MULTI, SET one higher, EXEC): the count ends at the
//!   number of EXECs that ran (give or take the unknown ones), however many were aborted.
//!
//! The negative control runs the same workload on a cluster told to decide these commands on
//! the node that receives them (`--decide-on-receiving-node`, as before they went into the
//! log as calls): the same checker must find violations there. (Such a node refuses WATCH, so
//! that run has no optimistic increments.)

#![cfg(feature = "replication")]

mod common;

use std::collections::{HashMap, HashSet};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Duration;

use common::cluster::Cluster;
use common::kv::try_call;

/// Clients, two per node.
const CLIENTS: usize = 6;
/// Counters the `INCR`s share.
const COUNTERS: usize = 4;

/// What an operation did; `None` in `Rec::result` when its outcome is unknown (an error or
/// no answer: it may or may not have been applied).
#[derive(Clone, Debug)]
enum Kind {
    /// `SET lock:r c NX`: won?
    SetNx { round: usize, client: usize },
    /// `INCR ctr:i`: the value.
    Incr { counter: usize },
    /// `SET tok:r value`.
    Set { round: usize, value: String },
    /// `GETDEL tok:r`: the value taken, if any.
    GetDel { round: usize },
    /// A step of an optimistic increment (WATCH, GET, MULTI, SET): not checked itself.
    Step,
    /// `EXEC` of an optimistic increment of `opt:i` (WATCH it, GET it, SET it one higher in
    /// MULTI): its array when it ran, a null array when a watched key changed.
    WatchIncr { counter: usize },
}

#[derive(Clone, Debug)]
struct Rec {
    kind: Kind,
    call: u64,
    ret: Option<u64>,
    /// The reply, when one came that the command may give.
    result: Option<Vec<u8>>,
}

/// A bulk reply's body, or `None` for a null.
fn bulk(r: &[u8]) -> Option<String> {
    if r == b"$-1\r\n" {
        return None;
    }
    let at = r.iter().position(|&c| c == b'\n')? + 1;
    Some(String::from_utf8_lossy(&r[at..r.len() - 2]).into_owned())
}

fn int(r: &[u8]) -> Option<i64> {
    std::str::from_utf8(r.strip_prefix(b":")?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Client `c` of a run of `rounds`, talking to node `c % 3` only.
fn client(
    ports: &[u16],
    c: usize,
    rounds: usize,
    clock: &AtomicU64,
    barrier: &Barrier,
    progress: &AtomicUsize,
    optimistic: bool,
) -> Vec<Rec> {
    let port = ports[c % ports.len()];
    let mut conn: Option<TcpStream> = None;
    let mut out = Vec::new();
    let wait = Duration::from_secs(3);
    let mut run = |kind: Kind, args: &[&[u8]], ok: fn(&[u8]) -> bool| {
        let call = clock.fetch_add(1, Ordering::SeqCst);
        let r = try_call(port, &mut conn, args, wait);
        let ret = clock.fetch_add(1, Ordering::SeqCst);
        match r {
            Ok(r) if ok(&r) => {
                out.push(Rec {
                    kind,
                    call,
                    ret: Some(ret),
                    result: Some(r.clone()),
                });
                Some(r)
            }
            _ => {
                // A fresh connection next: no MULTI or WATCH of this one carries over.
                conn = None;
                out.push(Rec {
                    kind,
                    call,
                    ret: None,
                    result: None,
                });
                std::thread::sleep(Duration::from_millis(50));
                None
            }
        }
    };
    for round in 0..rounds {
        barrier.wait();
        progress.store(round, Ordering::Relaxed);
        let lock = format!("lock:{round}");
        let me = format!("c{c}");
        run(
            Kind::SetNx { round, client: c },
            &[b"SET", lock.as_bytes(), me.as_bytes(), b"NX"],
            |r| r == b"+OK\r\n" || r == b"$-1\r\n",
        );
        let counter = (round + c) % COUNTERS;
        run(
            Kind::Incr { counter },
            &[b"INCR", format!("ctr:{counter}").as_bytes()],
            |r| int(r).is_some(),
        );
        let tok = format!("tok:{round}");
        let value = format!("c{c}r{round}");
        run(
            Kind::Set {
                round,
                value: value.clone(),
            },
            &[b"SET", tok.as_bytes(), value.as_bytes()],
            |r| r == b"+OK\r\n",
        );
        run(Kind::GetDel { round }, &[b"GETDEL", tok.as_bytes()], |r| {
            r.starts_with(b"$")
        });
        if optimistic {
            let counter = (round + c) % COUNTERS;
            let key = format!("opt:{counter}");
            let key = key.as_bytes();
            let ok = |r: &[u8]| r == b"+OK\r\n";
            let Some(_) = run(Kind::Step, &[b"WATCH", key], ok) else {
                continue;
            };
            let Some(v) = run(Kind::Step, &[b"GET", key], |r| r.starts_with(b"$")) else {
                continue;
            };
            let next = bulk(&v).map_or(0, |v| v.parse::<i64>().unwrap_or(0)) + 1;
            let Some(_) = run(Kind::Step, &[b"MULTI"], ok) else {
                continue;
            };
            let queued = |r: &[u8]| r == b"+QUEUED\r\n";
            let next = next.to_string();
            let set = [b"SET", key, next.as_bytes()];
            let Some(_) = run(Kind::Step, &set, queued) else {
                continue;
            };
            run(Kind::WatchIncr { counter }, &[b"EXEC"], |r| {
                r == b"*-1\r\n" || r == b"*1\r\n+OK\r\n"
            });
        }
    }
    out
}

/// A read through any node that answers (retried while the cluster elects).
fn read(ports: &[u16], args: &[&[u8]]) -> Vec<u8> {
    for _ in 0..200 {
        for &p in ports {
            let mut conn = None;
            if let Ok(r) = try_call(p, &mut conn, args, Duration::from_secs(3)) {
                if !r.starts_with(b"-") {
                    return r;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no node answered {args:?}");
}

/// Everything the history shows that a linearizable run could not have done.
fn violations(h: &[Rec], ports: &[u16]) -> Vec<String> {
    let mut bad = Vec::new();
    // SET NX: winners per lock.
    let mut winners: HashMap<usize, Vec<usize>> = HashMap::new();
    for r in h {
        if let (Kind::SetNx { round, client }, Some(b"+OK\r\n")) = (&r.kind, r.result.as_deref()) {
            winners.entry(*round).or_default().push(*client);
        }
    }
    for (round, w) in &winners {
        if w.len() > 1 {
            bad.push(format!(
                "lock:{round} has {} winners: clients {w:?}",
                w.len()
            ));
        } else {
            let held = bulk(&read(ports, &[b"GET", format!("lock:{round}").as_bytes()]));
            if held != Some(format!("c{}", w[0])) {
                bad.push(format!("lock:{round} won by c{} holds {held:?}", w[0]));
            }
        }
    }
    // INCR: distinct, ordered in real time, counted once.
    for counter in 0..COUNTERS {
        let ops: Vec<&Rec> = h
            .iter()
            .filter(|r| matches!(r.kind, Kind::Incr { counter: c } if c == counter))
            .collect();
        let acked: Vec<(u64, u64, i64)> = ops
            .iter()
            .filter_map(|r| Some((r.call, r.ret?, int(r.result.as_deref()?)?)))
            .collect();
        let unknown = ops.len() - acked.len();
        let mut values: Vec<i64> = acked.iter().map(|a| a.2).collect();
        values.sort_unstable();
        let before = values.len();
        values.dedup();
        if values.len() != before {
            bad.push(format!(
                "ctr:{counter}: {} acknowledged INCRs share a value",
                before - values.len()
            ));
        }
        for a in &acked {
            if let Some(b) = acked.iter().find(|b| a.1 < b.0 && a.2 >= b.2) {
                bad.push(format!(
                    "ctr:{counter}: INCR answered {} before one called later answered {}",
                    a.2, b.2
                ));
                break;
            }
        }
        let last: i64 = bulk(&read(ports, &[b"GET", format!("ctr:{counter}").as_bytes()]))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if last < acked.len() as i64 || last > (acked.len() + unknown) as i64 {
            bad.push(format!(
                "ctr:{counter} ends at {last} after {} acknowledged and {unknown} unknown INCRs",
                acked.len()
            ));
        }
    }
    // Optimistic increments: the count is the EXECs that ran, give or take the unknown ones.
    for counter in 0..COUNTERS {
        let execs: Vec<&Rec> = h
            .iter()
            .filter(|r| matches!(r.kind, Kind::WatchIncr { counter: c } if c == counter))
            .collect();
        if execs.is_empty() {
            continue;
        }
        let ran = execs
            .iter()
            .filter(|r| r.result.as_deref() == Some(b"*1\r\n+OK\r\n"))
            .count() as i64;
        let unknown = execs.iter().filter(|r| r.result.is_none()).count() as i64;
        let last: i64 = bulk(&read(ports, &[b"GET", format!("opt:{counter}").as_bytes()]))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if last < ran || last > ran + unknown {
            bad.push(format!(
                "opt:{counter} ends at {last} after {ran} EXECs ran and {unknown} unknown"
            ));
        }
    }
    // GETDEL: each value taken once, and only a value written.
    let written: HashSet<(usize, &str)> = h
        .iter()
        .filter_map(|r| match &r.kind {
            Kind::Set { round, value } => Some((*round, value.as_str())),
            _ => None,
        })
        .collect();
    let mut taken: HashMap<(usize, String), usize> = HashMap::new();
    for r in h {
        if let (Kind::GetDel { round }, Some(reply)) = (&r.kind, &r.result) {
            if let Some(v) = bulk(reply) {
                if !written.contains(&(*round, v.as_str())) {
                    bad.push(format!("GETDEL tok:{round} took {v:?}, never written"));
                }
                *taken.entry((*round, v)).or_default() += 1;
            }
        }
    }
    for ((round, v), n) in taken {
        if n > 1 {
            bad.push(format!(
                "tok:{round}'s value {v:?} was taken by {n} GETDELs"
            ));
        }
    }
    bad
}

/// Runs the workload on a fresh cluster started with `extra` flags, killing the leader
/// `kills` times meanwhile; the history and the ports.
fn run(extra: &[&str], rounds: usize, kills: usize) -> (Vec<Rec>, Vec<String>) {
    let root = tempfile::tempdir().unwrap();
    let c = Cluster::new(root.path());
    for i in 0..3 {
        c.start_with(i, i == 0, extra);
    }
    c.wait_for_leader();
    let ports = c.ports();
    // Wait for the cluster to take writes.
    read(&ports, &[b"SET", b"ready", b"1"]);
    let clock = AtomicU64::new(0);
    let barrier = Barrier::new(CLIENTS);
    let done = AtomicBool::new(false);
    let progress = AtomicUsize::new(0);
    let history = Mutex::new(Vec::new());
    let killed = std::thread::scope(|s| {
        // Each kill at its share of the rounds, while the clients run.
        let killer = s.spawn(|| {
            let mut killed = 0;
            for k in 1..=kills {
                while progress.load(Ordering::Relaxed) < k * rounds / (kills + 1) {
                    if done.load(Ordering::Relaxed) {
                        return killed;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                let Some(l) = c.leader() else { continue };
                c.kill(l);
                if !done.load(Ordering::Relaxed) {
                    killed += 1;
                }
                std::thread::sleep(Duration::from_millis(700));
                c.start_with(l, false, extra);
            }
            killed
        });
        let clients: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let (ports, clock, barrier, history) = (&ports, &clock, &barrier, &history);
                let progress = &progress;
                // WATCH needs the log: a node deciding on its own refuses it.
                let optimistic = extra.is_empty();
                s.spawn(move || {
                    let h = client(ports, i, rounds, clock, barrier, progress, optimistic);
                    history.lock().unwrap().extend(h);
                })
            })
            .collect();
        for t in clients {
            t.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        killer.join().unwrap()
    });
    let h = history.into_inner().unwrap();
    let bad = violations(&h, &ports);
    let acked = h.iter().filter(|r| r.ret.is_some()).count();
    let of = |what: &str| bad.iter().filter(|b| b.starts_with(what)).count();
    println!(
        "{extra:?}: {} operations ({} SET NX/INCR/GETDEL), {acked} acknowledged, {killed} leader \
         kills; violations: {} SET NX, {} INCR, {} GETDEL, {} WATCH/EXEC{}",
        h.len(),
        h.iter()
            .filter(|r| !matches!(r.kind, Kind::Set { .. } | Kind::Step))
            .count(),
        of("lock:"),
        of("ctr:"),
        of("tok:") + of("GETDEL"),
        of("opt:"),
        bad.first()
            .map_or(String::new(), |b| format!("; first: {b}")),
    );
    assert_eq!(
        killed, kills,
        "the leader was not killed while the clients ran"
    );
    (h, bad)
}

#[test]
fn conditional_writes_are_atomic_across_the_cluster_and_the_negative_control_is_caught() {
    // 3 of the 4 operations per client and round are SET NX, INCR or GETDEL.
    let rounds = common::scaled(120, 40);
    let (h, bad) = run(&[], rounds, common::scaled(3, 1));
    let counted = h
        .iter()
        .filter(|r| {
            matches!(
                r.kind,
                Kind::SetNx { .. } | Kind::Incr { .. } | Kind::GetDel { .. }
            )
        })
        .count();
    assert!(counted >= CLIENTS * rounds * 3, "{counted} operations");
    let execs = |ran: bool| {
        h.iter()
            .filter(|r| matches!(r.kind, Kind::WatchIncr { .. }))
            .filter(|r| {
                r.result
                    .as_deref()
                    .is_some_and(|a| (a == b"*1\r\n+OK\r\n") == ran)
            })
            .count()
    };
    println!(
        "optimistic increments: {} EXECs ran, {} aborted",
        execs(true),
        execs(false)
    );
    assert!(
        execs(true) > 0 && execs(false) > 0,
        "the optimistic increments never raced"
    );
    let acked = h.iter().filter(|r| r.ret.is_some()).count();
    assert!(
        acked * 10 >= h.len() * 7,
        "only {acked} of {} acknowledged",
        h.len()
    );
    assert!(bad.is_empty(), "{} violations: {bad:#?}", bad.len());

    let (_, bad) = run(&["--decide-on-receiving-node"], rounds, 0);
    assert!(
        !bad.is_empty(),
        "the checker found nothing wrong with conditions decided on the receiving node"
    );
}
