//! Linearizability under leader kills, checked by `checker` (Wing–Gong with memoisation): five
//! clients write unique values to and read a few keys through whichever node leads, while
//! the leader is stopped and restarted. Each key is a register and linearizability is local
//! (a history is linearizable iff each object's is), so each key is checked on its own.
//!
//! An operation that fails may still take effect later (a write proposed before its leader
//! died can be committed by the next), so it is recorded with no response: the checker may
//! place it anywhere after its invocation, or nowhere. The negative control reads each node's local state instead, and the
//! checker must catch it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::checker::{self, Kind, Op};
use crate::cluster::{fast_config, Cluster};
use crate::common::Rng;
use lsm_bloom::replication::ReadPolicy;

/// Each key's history, stamped with one logical clock.
struct History {
    clock: AtomicU64,
    ops: Vec<Mutex<Vec<Op>>>,
}

pub struct Outcome {
    pub completed: u64,
    pub failed: u64,
    pub kills: u32,
    /// Keys whose history is not linearizable.
    pub violations: Vec<usize>,
    pub check_time: Duration,
}

/// Runs the workload until `ops` operations completed and the leader was restarted
/// `min_kills` times (one every `kill_every`): `keys` keys, `clients` clients, reads under
/// `reads`, each client pausing up to `pace` between operations.
pub async fn run(
    ops: u64,
    min_kills: u32,
    keys: usize,
    clients: u64,
    kill_every: Duration,
    reads: ReadPolicy,
    pace: Duration,
) -> Outcome {
    let c = Cluster::start(&[1, 2, 3], fast_config()).await;
    let history = Arc::new(History {
        clock: AtomicU64::new(0),
        ops: (0..keys).map(|_| Mutex::new(Vec::new())).collect(),
    });
    let completed = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let next_value = Arc::new(AtomicU64::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for client in 0..clients {
        let (c, history, completed, failed, next_value, stop) = (
            c.clone(),
            history.clone(),
            completed.clone(),
            failed.clone(),
            next_value.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(client + 1);
            while !stop.load(Ordering::Relaxed) {
                let key = rng.below(keys as u64) as usize;
                let k = format!("reg-{key}").into_bytes();
                let write = rng.below(2) == 0;
                let nodes = c.running();
                let node = match reads {
                    ReadPolicy::Local if !write && !nodes.is_empty() => {
                        Some(nodes[rng.below(nodes.len() as u64) as usize].clone())
                    }
                    _ => c.leader(),
                };
                let Some(node) = node else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                let call = history.clock.fetch_add(1, Ordering::SeqCst);
                let result = if write {
                    let v = next_value.fetch_add(1, Ordering::Relaxed);
                    node.put(k, v.to_le_bytes().to_vec())
                        .await
                        .map(|()| Kind::Write(v))
                        .map_err(|_| Kind::Write(v))
                } else {
                    node.get(&k, reads)
                        .await
                        .map(|v| Kind::Read(v.map(|b| u64::from_le_bytes(b.try_into().unwrap()))))
                        .map_err(|_| Kind::Read(None))
                };
                let ret = history.clock.fetch_add(1, Ordering::SeqCst);
                match result {
                    Ok(kind) => {
                        history.ops[key].lock().unwrap().push(Op {
                            call,
                            ret: Some(ret),
                            kind,
                        });
                        completed.fetch_add(1, Ordering::Relaxed);
                        // Paced, so the history spans the leader kills.
                        let ms = rng.below(pace.as_millis() as u64 + 1);
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                    }
                    Err(kind) => {
                        // Outcome unknown: a write may still take effect, any time after.
                        history.ops[key].lock().unwrap().push(Op {
                            call,
                            ret: None,
                            kind,
                        });
                        failed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut kills = 0;
    let mut last_kill = Instant::now();
    while completed.load(Ordering::Relaxed) < ops || kills < min_kills {
        assert!(
            Instant::now() < deadline,
            "stalled at {} operations",
            completed.load(Ordering::Relaxed)
        );
        if last_kill.elapsed() >= kill_every {
            if let Some(l) = c.leader() {
                let id = l.id();
                drop(l);
                c.stop(id).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                c.open(id).await;
                kills += 1;
            }
            last_kill = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let started = Instant::now();
    let history = Arc::try_unwrap(history).unwrap_or_else(|_| panic!("history still shared"));
    let violations = tokio::task::spawn_blocking(move || {
        history
            .ops
            .into_iter()
            .enumerate()
            .filter(|(_, ops)| !checker::linearizable(&ops.lock().unwrap(), None))
            .map(|(key, _)| key)
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    Outcome {
        completed: completed.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
        kills,
        violations,
        check_time: started.elapsed(),
    }
}
