//! The stress run's worker threads: each loops over random operations on the shared store
//! (read-locked per operation, so the controller can take it away between two), writes only
//! the keys it owns (`i % threads == t`), and checks every read against the oracle's window.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use lsm_bloom::{Db, WriteBatch};

use crate::oracle::{self, allowed, key, space, Oracle, GROUPS};

#[path = "../../tests/common/rng.rs"]
mod rng;
pub use rng::Rng;

const KINDS: [&str; 9] = [
    "get",
    "get (never written)",
    "put/delete",
    "batch",
    "scan",
    "scan_prefix",
    "flush",
    "compact",
    "failed (power cut)",
];

/// Operations done per kind, and reads verified.
#[derive(Default)]
pub struct Counts {
    ops: [AtomicU64; 9],
    /// Keys whose read (get or within a scan) was checked against the oracle.
    pub verified: AtomicU64,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, n) in KINDS.iter().zip(&self.ops) {
            writeln!(f, "  {k:<20} {:>12}", n.load(Ordering::Relaxed))?;
        }
        write!(
            f,
            "  reads verified       {:>12}",
            self.verified.load(Ordering::Relaxed)
        )
    }
}

/// What the controller and the workers share.
pub struct Shared {
    pub oracle: Oracle,
    pub db: RwLock<Option<Db>>,
    /// A child's write log (`S i v` before a write, `A i v` after it returned `Ok`).
    log: Option<Mutex<File>>,
    pub counts: Counts,
    pub stop: AtomicBool,
    /// The power is being cut: errors are expected, and writes stop.
    pub expect_errors: AtomicBool,
    seed: u64,
}

impl Shared {
    pub fn new(oracle: Oracle, db: Option<Db>, log: Option<File>, seed: u64) -> Arc<Self> {
        Arc::new(Shared {
            oracle,
            db: RwLock::new(db),
            log: log.map(Mutex::new),
            counts: Counts::default(),
            stop: AtomicBool::new(false),
            expect_errors: AtomicBool::new(false),
            seed,
        })
    }

    fn log(&self, what: char, i: usize, v: u64) {
        if let Some(log) = &self.log {
            let line = format!("{what} {i} {v}\n");
            let mut f = log.lock().unwrap_or_else(|p| p.into_inner());
            f.write_all(line.as_bytes()).expect("write log");
        }
    }
}

/// Starts `threads` workers over `keys` keys.
pub fn spawn(shared: &Arc<Shared>, threads: usize, keys: usize) -> Vec<JoinHandle<()>> {
    // Key indices in name order (names sort by group, then index).
    let mut sorted: Vec<usize> = (0..keys).collect();
    sorted.sort_by_key(|&i| key(i));
    let sorted = Arc::new(sorted);
    (0..threads)
        .map(|t| {
            let (shared, sorted) = (Arc::clone(shared), Arc::clone(&sorted));
            std::thread::spawn(move || work(&shared, t, threads, &sorted))
        })
        .collect()
}

/// A key and its value, as a scan yields them.
type Pair = (Vec<u8>, Vec<u8>);

fn work(s: &Shared, t: usize, threads: usize, sorted: &[usize]) {
    let keys = sorted.len();
    let mut rng = Rng::new(s.seed ^ (t as u64 + 1) << 40);
    let own = |rng: &mut Rng| {
        let i = rng.below(keys as u64) as usize;
        i - i % threads + t
    };
    while !s.stop.load(Ordering::SeqCst) {
        let guard = s.db.read().unwrap_or_else(|p| p.into_inner());
        let (Some(db), false) = (guard.as_ref(), s.expect_errors.load(Ordering::SeqCst)) else {
            drop(guard);
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        let roll = rng.below(100);
        let (kind, result) = match roll {
            0..=39 => (0, get(s, db, rng.below(keys as u64) as usize)),
            40..=41 => (1, absent(db, keys + rng.below(keys as u64) as usize)),
            42..=64 => {
                let i = own(&mut rng);
                (2, if i < keys { write(s, db, &[i]) } else { Ok(()) })
            }
            65..=74 => {
                let mut batch: Vec<usize> = (0..2 + rng.below(5)).map(|_| own(&mut rng)).collect();
                batch.retain(|&i| i < keys);
                batch.sort_unstable();
                batch.dedup();
                (3, write(s, db, &batch))
            }
            75..=86 => {
                let j = rng.below(keys as u64) as usize;
                let range: Vec<usize> = sorted[j..(j + 40).min(keys)].to_vec();
                (4, scan(s, db, &range, false))
            }
            87..=94 => {
                let g = rng.below(GROUPS as u64) as usize;
                let range: Vec<usize> =
                    sorted.iter().copied().filter(|i| i % GROUPS == g).collect();
                (5, scan(s, db, &range, true))
            }
            95..=97 => (6, db.flush().map_err(|e| e.to_string())),
            // A full compaction is heavy: one in five of these rolls.
            _ if rng.chance(20) => (7, db.compact().map_err(|e| e.to_string())),
            _ => (0, get(s, db, rng.below(keys as u64) as usize)),
        };
        match result {
            Ok(()) => s.counts.ops[kind].fetch_add(1, Ordering::Relaxed),
            Err(_) if s.expect_errors.load(Ordering::SeqCst) => {
                s.counts.ops[8].fetch_add(1, Ordering::Relaxed)
            }
            Err(e) => {
                // Stop the whole run now, not when the threads are joined.
                eprintln!("DIVERGENCE (seed {}): {} failed: {e}", s.seed, KINDS[kind]);
                std::process::exit(2);
            }
        };
    }
}

/// The keyspace of key `i` in `db`.
fn keyspace(db: &Db, i: usize) -> Result<lsm_bloom::Keyspace, String> {
    db.keyspace(space(i)).map_err(|e| e.to_string())
}

fn get(s: &Shared, db: &Db, i: usize) -> Result<(), String> {
    let ks = keyspace(db, i)?;
    let lo = s.oracle.before(i);
    let seen = ks.get(key(i)).map_err(|e| e.to_string())?;
    let hi = s.oracle.after(i);
    allowed(i, seen.as_deref(), lo, hi).map_err(|m| format!("WRONG ANSWER: {m}"))?;
    s.counts.verified.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn absent(db: &Db, i: usize) -> Result<(), String> {
    match keyspace(db, i)?.get(key(i)).map_err(|e| e.to_string())? {
        None => Ok(()),
        Some(v) => Err(format!("WRONG ANSWER: never-written key {i} holds {v:?}")),
    }
}

fn write(s: &Shared, db: &Db, keys: &[usize]) -> Result<(), String> {
    let mut b = WriteBatch::new();
    let mut versions = Vec::with_capacity(keys.len());
    for &i in keys {
        let v = s.oracle.start(i);
        s.log('S', i, v);
        let ks = keyspace(db, i)?;
        match oracle::value(i, v) {
            Some(val) => b.put_in(&ks, key(i), val),
            None => b.delete_in(&ks, key(i)),
        };
        versions.push((i, v));
    }
    db.write(b).map_err(|e| e.to_string())?;
    for (i, v) in versions {
        s.oracle.ack(i, v);
        s.log('A', i, v);
    }
    Ok(())
}

/// Scans the keys `range` (in name order) in the keyspace of its first key — by
/// `scan_prefix` of their group, or a bounded scan — and checks each key of that keyspace,
/// present or not, against its window.
fn scan(s: &Shared, db: &Db, range: &[usize], by_prefix: bool) -> Result<(), String> {
    let (Some(&first), Some(&last)) = (range.first(), range.last()) else {
        return Ok(());
    };
    let ks = keyspace(db, first)?;
    let range: Vec<usize> = range
        .iter()
        .copied()
        .filter(|&i| space(i) == space(first))
        .collect();
    let lo: Vec<u64> = range.iter().map(|&i| s.oracle.before(i)).collect();
    let it = if by_prefix {
        ks.scan_prefix(oracle::prefix(first % GROUPS))
    } else {
        ks.scan(key(first)..=key(last))
    }
    .map_err(|e| e.to_string())?;
    // Half the scans read backward (by the range's first key), in descending key order.
    let backward = first % 2 == 1;
    let it: Box<dyn Iterator<Item = lsm_bloom::Result<Pair>>> = match backward {
        false => Box::new(it),
        true => Box::new(it.rev()),
    };
    let mut seen = BTreeMap::new();
    let mut last: Option<Vec<u8>> = None;
    for r in it {
        let (k, v) = r.map_err(|e| e.to_string())?;
        if last
            .as_ref()
            .is_some_and(|p| (*p >= k) != backward || *p == k)
        {
            return Err(format!(
                "WRONG ANSWER: scan (backward: {backward}) out of order at {k:?}"
            ));
        }
        last = Some(k.clone());
        seen.insert(k, v);
    }
    let hi: Vec<u64> = range.iter().map(|&i| s.oracle.after(i)).collect();
    for (n, &i) in range.iter().enumerate() {
        let v = seen.remove(&key(i));
        allowed(i, v.as_deref(), lo[n], hi[n]).map_err(|m| format!("WRONG ANSWER in scan: {m}"))?;
    }
    if let Some((k, _)) = seen.first_key_value() {
        return Err(format!("WRONG ANSWER: scan returned the unknown key {k:?}"));
    }
    s.counts
        .verified
        .fetch_add(range.len() as u64, Ordering::Relaxed);
    Ok(())
}
