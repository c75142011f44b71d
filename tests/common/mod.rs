//! Helpers shared by the store's integration tests.
#![allow(dead_code)]

pub mod captured;
#[cfg(feature = "tls")]
pub mod certs;
#[cfg(feature = "replication")]
pub mod cluster;
pub mod keyspaces;
pub mod kv;
#[cfg(feature = "replication")]
pub mod proxy;
pub mod redis;
mod rng;
pub mod workload;

pub use rng::Rng;

use std::path::PathBuf;
use std::process::Command;

use lsm_bloom::Options;
use lsm_bloom::PrefixFilters;

/// Whether the long runs are asked for (`LSM_BLOOM_THOROUGH=1`, as `.ci/run` sets it): the
/// tests whose cost grows with their iteration counts (fault sweeps, crash cycles, property
/// cases, kill rounds) run their full counts then, and a quicker share of the same checks in a
/// plain `cargo test`.
pub fn thorough() -> bool {
    std::env::var_os("LSM_BLOOM_THOROUGH").is_some_and(|v| v != "0")
}

/// A differential run: `steps` operations from `gen` (given the step number), each applied by
/// `apply`, which returns how the engines' answers differ, if they do. On the first
/// difference, panics naming the seed, the shortest failing prefix and its last operations.
pub fn differential_run<O: std::fmt::Debug>(
    seed: u64,
    steps: usize,
    mut gen: impl FnMut(usize) -> O,
    mut apply: impl FnMut(&O) -> Option<String>,
) {
    let mut log: Vec<O> = Vec::with_capacity(steps);
    for step in 0..steps {
        log.push(gen(step));
        if let Some(diff) = apply(&log[step]) {
            let tail: Vec<String> = log
                .iter()
                .rev()
                .take(15)
                .rev()
                .map(|o| format!("{o:?}"))
                .collect();
            panic!(
                "divergence: seed {seed}, shortest failing prefix = first {} operations; {diff}\nlast operations:\n  {}",
                step + 1,
                tail.join("\n  ")
            );
        }
    }
}

/// `full` when `thorough()`, else `quick`.
pub fn scaled<T>(full: T, quick: T) -> T {
    if thorough() {
        full
    } else {
        quick
    }
}

/// The example binary, built now if it is missing or stale (`cargo test` builds examples
/// with `test = true` only as test harnesses, not the binary the tests start).
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let bin = dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if !built.iter().any(|b| b == name) {
        let profile = if dir.ends_with("release") {
            &["--release"][..]
        } else {
            &[]
        };
        // The features this test was built with, so a test of cluster mode (feature
        // `replication`) runs a server that has it.
        let mut features = Vec::new();
        if cfg!(feature = "replication") {
            features.push("--features=replication");
        }
        if cfg!(feature = "tls") {
            features.push("--features=tls");
        }
        if cfg!(feature = "zstd") {
            features.push("--features=zstd");
        }
        let ok = Command::new(env!("CARGO"))
            .args(["build", "--example", name])
            .args(profile)
            .args(&features)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "building example {name}");
        built.push(name.to_string());
    }
    bin
}

/// Writes `n` keys `{tag}{i:06}`, each with a 100-byte value.
pub fn fill(db: &lsm_bloom::Db, tag: &str, n: usize) {
    for i in 0..n {
        db.put(format!("{tag}{i:06}"), [b'v'; 100]).unwrap();
    }
}

/// Copies the directory `from` into `to` (created), subdirectories too.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// Polls `f` every 5 ms until it holds; fails naming `what` after `limit`.
pub fn wait_until(what: &str, limit: std::time::Duration, mut f: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "timed out waiting until {what}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Options with tiny sizes so a few thousand operations flush and compact many times, with
/// several compaction threads.
pub fn tiny_options() -> Options {
    Options::default()
        .with_memtable_size(4 * 1024)
        .with_block_size(256)
        .with_target_file_size(8 * 1024)
        .with_level1_max_bytes(16 * 1024)
        .with_size_ratio(4)
        .with_l0_compaction_trigger(2)
        .with_l0_stop_writes_trigger(6)
        .with_background_threads(3)
}

/// A store at `dir` under the rule `delimiter(':', 1)`, with the fixed default filter policy, holding `tables` flushed tables, table
/// `t` holding the keys `keys(t)` (value `v`); closed before returning.
pub fn colon_prefix_store(
    dir: &std::path::Path,
    tables: usize,
    keys: impl Fn(usize) -> Vec<String>,
) {
    let opts = Options::default()
        .with_filters(Some(lsm_bloom::Filters::fixed(
            lsm_bloom::FilterPolicy::default(),
        )))
        .with_prefix_filters(Some(PrefixFilters::with(
            lsm_bloom::PrefixExtractor::delimiter(b':', 1),
        )));
    let db = lsm_bloom::Db::open(dir, opts).unwrap();
    for t in 0..tables {
        for k in keys(t) {
            db.put(k, "v").unwrap();
        }
        db.flush().unwrap();
    }
    db.close().unwrap();
}

/// A thread committing batches that set `a` and `b` to the same counter n = 1, 2, … (beside a
/// 100-byte padding key `pad{n % 300}`, so memtables fill and flush), storing each n in
/// `acked` once its `write` returned. Tests of consistent views check that a view holds `a == b`
/// and at least what was acknowledged before it was taken.
pub struct CounterWriter {
    /// The last acknowledged n.
    pub acked: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl CounterWriter {
    /// Starts writing to `db`.
    pub fn start(db: std::sync::Arc<lsm_bloom::Db>) -> Self {
        use std::sync::atomic::Ordering;
        let acked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (a, s) = (acked.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut n = 0u64;
            while !s.load(Ordering::Relaxed) {
                n += 1;
                let mut b = lsm_bloom::WriteBatch::new();
                b.put("a", n.to_be_bytes())
                    .put(format!("pad{}", n % 300), [1u8; 100])
                    .put("b", n.to_be_bytes());
                db.write(b).unwrap();
                a.store(n, Ordering::SeqCst);
            }
            n
        });
        CounterWriter {
            acked,
            stop,
            thread,
        }
    }

    /// The last acknowledged n.
    pub fn acked(&self) -> u64 {
        self.acked.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Stops the thread; returns the last n written.
    pub fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// The counter a view holds under `key` (0 when absent), as `CounterWriter` writes it.
pub fn counter(value: Option<Vec<u8>>) -> u64 {
    value.map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap()))
}

/// One random write of the read tests' workload: over keys `key(0..3000)`, a delete
/// `delete_pct`% of the time, else a put of `v{round}-{i}-` and up to 40 `x`s; applied to
/// `model` as well.
pub fn random_write(
    db: &lsm_bloom::Db,
    model: &mut std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    rng: &mut Rng,
    key: fn(u64) -> Vec<u8>,
    round: u64,
    delete_pct: u64,
) {
    let i = rng.below(3000);
    if rng.chance(delete_pct) {
        db.delete(key(i)).unwrap();
        model.remove(&key(i));
    } else {
        let v = format!("v{round}-{i}-{}", "x".repeat(rng.below(40) as usize));
        db.put(key(i), &v).unwrap();
        model.insert(key(i), v.into_bytes());
    }
}
