//! `--layout`: a node's storage work per replicated write in two layouts, to decide whether
//! the log and the state machine should be two keyspaces of one store (one WAL, one
//! directory) instead of two stores.
//!
//! Per write, what a node's stores do (`log_store.rs`, `state_machine/apply.rs`): append the
//! entry (`e` + index → the entry's bytes) and make it durable (a synced write: concurrent
//! ones share a sync, as the log's sync thread shares one), then apply it unsynced (`d` +
//! key → value, and `m/applied`). Run by `clients` threads at once, in the two layouts,
//! interleaved per round (two, one, one, two, …); medians printed with the ratio. Only the
//! storage differs between the layouts, so raft's own work, the same in both, is left out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use lsm_bloom::{Db, Keyspace, Options, WriteBatch, WriteOptions};

/// Where the log and the state machine are written.
enum Layout {
    /// Two stores, as the replication layer keeps them.
    Two { log: Db, sm: Db },
    /// One store, the log and the state machine two keyspaces of it.
    One { db: Db, log: Keyspace, sm: Keyspace },
}

impl Layout {
    fn open(two: bool, dir: &std::path::Path) -> Layout {
        let opts = Options::default;
        if two {
            Layout::Two {
                log: Db::open(dir.join("log"), opts()).unwrap(),
                sm: Db::open(dir.join("sm"), opts()).unwrap(),
            }
        } else {
            let db = Db::open(dir.join("one"), opts()).unwrap();
            let (log, sm) = (db.keyspace("log").unwrap(), db.keyspace("sm").unwrap());
            Layout::One { db, log, sm }
        }
    }

    /// One replicated write's storage work: the append, durable, then the apply.
    fn write(&self, index: u64, value: Vec<u8>) {
        let mut entry = Vec::with_capacity(value.len() + 40);
        entry.extend_from_slice(&[0u8; 40]); // log id, tags and lengths
        entry.extend_from_slice(&value);
        let e = [b"e".as_slice(), &index.to_be_bytes()].concat();
        let d = [b"d".as_slice(), &value[..16]].concat();
        match self {
            Layout::Two { log, sm } => {
                let mut b = WriteBatch::new();
                b.put(e, entry);
                log.write_opt(b, WriteOptions::synced()).unwrap();
                let mut b = WriteBatch::new();
                b.put(d, value);
                b.put(&b"m/applied"[..], [0u8; 25]);
                sm.write(b).unwrap();
            }
            Layout::One { db, log, sm } => {
                let mut b = WriteBatch::new();
                b.put_in(log, e, entry);
                db.write_opt(b, WriteOptions::synced()).unwrap();
                let mut b = WriteBatch::new();
                b.put_in(sm, d, value);
                b.put_in(sm, &b"m/applied"[..], [0u8; 25]);
                db.write(b).unwrap();
            }
        }
    }
}

/// Writes per second of `writes` writes by `clients` threads in one layout.
fn run(two: bool, clients: u64, writes: u64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let layout = Arc::new(Layout::open(two, dir.path()));
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..clients {
            let (layout, next) = (Arc::clone(&layout), Arc::clone(&next));
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= writes {
                    break;
                }
                layout.write(i, super::value(i));
            });
        }
    });
    writes as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the comparison and prints it.
pub fn compare(clients: &[u64], writes: u64, rounds: usize) {
    println!("storage layout: a node's log append (synced) and apply per write, {writes} writes");
    println!("| clients | two stores (writes/s) | one store, two keyspaces | one ÷ two |");
    println!("|---|---|---|---|");
    for &c in clients {
        let (mut two, mut one) = (Vec::new(), Vec::new());
        for r in 0..rounds.max(1) {
            // Interleaved, the order alternating: two, one, one, two, ...
            if r % 2 == 0 {
                two.push(run(true, c, writes));
                one.push(run(false, c, writes));
            } else {
                one.push(run(false, c, writes));
                two.push(run(true, c, writes));
            }
        }
        let (t, o) = (median(two), median(one));
        println!("| {c} | {t:.0} | {o:.0} | {:.2} |", o / t);
    }
}
