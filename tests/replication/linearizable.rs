//! Linearizability under leader kills, checked by stateright's `LinearizabilityTester`: five
//! clients write unique values to and read a few keys through whichever node leads, while
//! the leader is stopped and restarted. Each key is a register and linearizability is local
//! (a history is linearizable iff each object's is), so each key is checked on its own.
//!
//! An operation that fails may still take effect later (a write proposed before its leader
//! died can be committed by the next), so it stays in flight forever and its client goes on
//! under a new thread id. The negative control reads each node's local state instead, and the
//! checker must catch it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lsm_bloom::replication::ReadPolicy;
use stateright::semantics::register::{Register, RegisterOp, RegisterRet};
use stateright::semantics::{ConsistencyTester, LinearizabilityTester};

use crate::cluster::{fast_config, Cluster};
use crate::common::Rng;

type Tester = LinearizabilityTester<u64, Register<Option<u64>>>;

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
/// `reads`.
pub async fn run(
    ops: u64,
    min_kills: u32,
    keys: usize,
    clients: u64,
    kill_every: Duration,
    reads: ReadPolicy,
) -> Outcome {
    let c = Cluster::start(&[1, 2, 3], fast_config()).await;
    let testers: Arc<Vec<Mutex<Tester>>> = Arc::new(
        (0..keys)
            .map(|_| Mutex::new(Tester::new(Register(None))))
            .collect(),
    );
    let completed = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let next_value = Arc::new(AtomicU64::new(1));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for client in 0..clients {
        let (c, testers, completed, failed, next_value, stop) = (
            c.clone(),
            testers.clone(),
            completed.clone(),
            failed.clone(),
            next_value.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(client + 1);
            let mut incarnation = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let thread = client * 1_000_000 + incarnation;
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
                let op = if write {
                    RegisterOp::Write(Some(next_value.fetch_add(1, Ordering::Relaxed)))
                } else {
                    RegisterOp::Read
                };
                testers[key]
                    .lock()
                    .unwrap()
                    .on_invoke(thread, op.clone())
                    .unwrap();
                let ret = match op {
                    RegisterOp::Write(Some(v)) => node
                        .put(k, v.to_le_bytes().to_vec())
                        .await
                        .map(|()| RegisterRet::WriteOk),
                    _ => node.get(&k, reads).await.map(|v| {
                        RegisterRet::ReadOk(v.map(|b| u64::from_le_bytes(b.try_into().unwrap())))
                    }),
                };
                match ret {
                    Ok(ret) => {
                        testers[key].lock().unwrap().on_return(thread, ret).unwrap();
                        completed.fetch_add(1, Ordering::Relaxed);
                        // Paced, so the history spans the leader kills without growing past
                        // what the checker's search handles quickly.
                        tokio::time::sleep(Duration::from_millis(rng.below(10))).await;
                    }
                    Err(_) => {
                        // Outcome unknown: left in flight; the client continues as a new thread.
                        failed.fetch_add(1, Ordering::Relaxed);
                        incarnation += 1;
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
    let testers = Arc::try_unwrap(testers).unwrap_or_else(|_| panic!("testers still shared"));
    let violations = tokio::task::spawn_blocking(move || {
        let mut v = Vec::new();
        for (key, t) in testers.into_iter().enumerate() {
            if !t.into_inner().unwrap().is_consistent() {
                v.push(key);
            }
        }
        v
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
