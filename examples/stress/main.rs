//! Stress run: N threads of random gets, puts, deletes, batches, scans, prefix scans, flushes
//! and compactions against an expected-state oracle (`oracle.rs`), with small memtables and
//! blocks so every path runs often. Keys live in three keyspaces (`oracle::KEYSPACES`), so
//! batches span keyspaces and every event below checks them whole across keyspaces. Every few seconds one event, in turn:
//! - **reopen** under new options (filter kind, budget, prefix rule, whole-key filtering,
//!   block cache on or off, sync or not, sizes), then every key checked;
//! - **power loss** (in this process): the phase ran on a `PowerLossFs` with `sync_writes`;
//!   the power is cut mid-workload, what a restart would find is written to a new directory
//!   (unsynced tails dropped, cut or kept in random pages) and every acknowledged write must be
//!   there;
//! - **SIGKILL**: a child process (this program with `--child`) runs the workload on the
//!   store, logging each write's start and acknowledgement, and is killed at a random moment;
//!   every write it acknowledged must be there.
//!
//! Any read outside its window, error, or lost write stops the run with the seed; the seed
//! replays the same options and operation choices (thread timing differs between runs).
//!
//! `cargo run --release --example stress -- --seconds 120` (`.ci/run` runs a short one;
//! `--seconds 1800` for a long one). Prints operations per kind and verifications at the end.

mod oracle;
mod worker;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use lsm_bloom::fs::{PowerLossFs, UnsyncedTail};
use lsm_bloom::{
    Db, FilterKind, FilterPolicy, Filters, HugePages, Options, PrefixExtractor, PrefixFilters,
};

use oracle::{allowed, key, Oracle};
use worker::{Counts, Rng, Shared};

#[derive(Parser, Debug, Clone)]
struct Args {
    /// Total running time.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Worker threads.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Keys written (each owned by one thread).
    #[arg(long, default_value_t = 3000)]
    keys: usize,
    /// Seconds between events.
    #[arg(long, default_value_t = 3.0)]
    event_seconds: f64,
    /// Seed (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Store directory (default: a temporary one).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Internal: run as the child of a SIGKILL event, with this options seed.
    #[arg(long, hide = true)]
    child: Option<u64>,
    /// Internal: the child's versions file and write log.
    #[arg(long, hide = true)]
    child_files: Option<PathBuf>,
}

/// The options of one phase, from its seed: every family the store has.
fn phase_options(seed: u64, power_loss: bool) -> (Options, String) {
    let mut rng = Rng::new(seed);
    let kinds = [
        FilterKind::Standard,
        FilterKind::Blocked,
        FilterKind::Ribbon,
    ];
    let mut o = Options::default()
        .with_memtable_size((8 * 1024) << rng.below(4))
        .with_block_size(256 << rng.below(4))
        .with_target_file_size(32 * 1024)
        .with_level1_max_bytes(128 * 1024)
        .with_size_ratio(4)
        .with_l0_compaction_trigger(2 + rng.below(3) as usize)
        .with_block_cache_bytes(if rng.chance(50) { 0 } else { 256 * 1024 })
        .with_sync_writes(power_loss || rng.chance(30));
    let mut what = format!(
        "memtable {} KiB, blocks {} B, cache {}, sync {}",
        o.memtable_size / 1024,
        o.block_size,
        o.block_cache_bytes > 0,
        o.sync_writes
    );
    match rng.below(6) {
        0 => {
            o.filters = Some(Filters::Budget(lsm_bloom::FilterBudget::bits_per_key(8.0)));
            what += ", filter budget 8 bits/key";
        }
        1 => what += ", the recorded filters (at first the default budget)",
        2 => {
            o.filters = Some(Filters::None);
            what += ", no filters";
        }
        _ => {
            let kind = kinds[rng.below(3) as usize];
            o.filters = Some(Filters::fixed(FilterPolicy::bits_per_key(
                kind,
                4.0 + rng.below(8) as f64,
            )));
            what += &format!(", {kind:?} filters");
        }
    }
    if rng.chance(50) {
        let whole_key_filters = rng.chance(60);
        o.prefix_filters = Some(PrefixFilters::On {
            rule: PrefixExtractor::delimiter(b':', 1),
            whole_key_filters,
        });
        what += &format!(", prefix rule (whole keys {whole_key_filters})");
    }
    // Compressed tables in a third of the phases (LZ4 on every level, or below level 0).
    match rng.below(3) {
        0 => {
            o.compression = Some(lsm_bloom::Compression::Lz4.into());
            what += ", LZ4";
        }
        1 => {
            o.compression = Some(
                lsm_bloom::Compressions::from(lsm_bloom::Compression::Lz4)
                    .with_level(0, lsm_bloom::Compression::None),
            );
            what += ", LZ4 below level 0";
        }
        _ => {}
    }
    // Tables read through memory maps, and filters in huge-page memory, each in a third.
    if rng.chance(33) {
        o.mmap_reads = true;
        what += ", mmap reads";
    }
    if rng.chance(33) {
        o.filter_huge_pages = HugePages::Always;
        what += ", filters in huge pages";
    } else if rng.chance(50) {
        o.filter_huge_pages = HugePages::Never;
        what += ", no filters in huge pages";
    }
    // Half the phases give every setting the options record keeps (the default where the
    // phase chose none), half leave those they did not choose to the record.
    if rng.chance(50) {
        o.filters.get_or_insert_with(Filters::default);
        o.prefix_filters.get_or_insert(PrefixFilters::None);
        o.compression
            .get_or_insert_with(lsm_bloom::Compressions::default);
        what += ", every recorded setting given";
    } else {
        what += ", settings not given come from the record";
    }
    (o, what)
}

/// Checks every key of a quiet store against the oracle and sets each to what was found.
fn verify_all(db: &Db, oracle: &Oracle, what: &str) -> u64 {
    let (acked, started) = (oracle.acked_all(), oracle.started_all());
    for i in 0..oracle.len() {
        let seen = db
            .keyspace(oracle::space(i))
            .and_then(|ks| ks.get(key(i)))
            .unwrap_or_else(|e| panic!("{what}: get of key {i} failed: {e}"));
        match allowed(i, seen.as_deref(), acked[i], started[i]) {
            Ok(v) => oracle.reset(i, v),
            Err(msg) => panic!("{what}: {msg}"),
        }
    }
    let live = (0..oracle.len())
        .filter(|&i| oracle::value(i, oracle.before(i)).is_some())
        .count();
    let scanned: usize = oracle::KEYSPACES
        .iter()
        .map(|name| {
            db.keyspace(name)
                .and_then(|ks| ks.iter())
                .expect("scan")
                .count()
        })
        .sum();
    assert_eq!(
        scanned, live,
        "{what}: a full scan saw {scanned} keys, {live} live"
    );
    oracle.len() as u64
}

fn run_child(args: &Args, dir: &Path, opts_seed: u64) {
    let files = args.child_files.clone().expect("--child-files");
    let versions: Vec<u64> = std::fs::read_to_string(files.with_extension("versions"))
        .expect("versions file")
        .lines()
        .map(|l| l.parse().expect("version"))
        .collect();
    let (opts, _) = phase_options(opts_seed, false);
    let db = Db::open(dir, opts).expect("child: open");
    let log = std::fs::File::create(files.with_extension("log")).expect("child: log");
    let shared = Shared::new(Oracle::new(&versions), Some(db), Some(log), opts_seed);
    let handles = worker::spawn(&shared, args.threads, args.keys);
    println!("ready");
    std::io::stdout().flush().ok();
    // The parent kills this process; if it does not, stop after a minute.
    std::thread::sleep(Duration::from_secs(60));
    shared.stop.store(true, Ordering::SeqCst);
    for h in handles {
        let _ = h.join();
    }
}

/// Runs a child on `dir` and kills it; raises the oracle to the versions the child
/// started and acknowledged (from its log).
fn kill_child(args: &Args, dir: &Path, oracle: &Oracle, opts_seed: u64, rng: &mut Rng) {
    let files = dir.with_extension("child");
    let versions: String = oracle
        .acked_all()
        .iter()
        .map(|v| format!("{v}\n"))
        .collect();
    std::fs::write(files.with_extension("versions"), versions).expect("versions file");
    let mut child = Command::new(std::env::current_exe().expect("exe"))
        .args(["--dir", &dir.display().to_string()])
        .args(["--child", &opts_seed.to_string()])
        .args(["--child-files", &files.display().to_string()])
        .args(["--threads", &args.threads.to_string()])
        .args(["--keys", &args.keys.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("child output");
    assert_eq!(line.trim(), "ready", "the child did not start");
    std::thread::sleep(Duration::from_millis(100 + rng.below(1500)));
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(
        status.code() != Some(2),
        "the child process found a divergence (its message is above)"
    );
    let log = std::fs::read_to_string(files.with_extension("log")).expect("child log");
    // Whole lines only (each was one write; a kill cannot cut one, but do not rely on it).
    let whole = &log[..log.rfind('\n').map_or(0, |p| p + 1)];
    for l in whole.lines() {
        let mut p = l.split(' ');
        let (Some(kind), Some(i), Some(v)) = (p.next(), p.next(), p.next()) else {
            continue;
        };
        let (Ok(i), Ok(v)) = (i.parse::<usize>(), v.parse::<u64>()) else {
            continue;
        };
        match kind {
            "S" => oracle.raise_started(i, v),
            "A" => oracle.ack(i, v),
            _ => {}
        }
    }
}

fn main() {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let tmp = tempfile::tempdir().expect("temporary directory");
    let base = args.dir.clone().unwrap_or_else(|| tmp.path().join("store"));
    if let Some(opts_seed) = args.child {
        return run_child(&args, &base, opts_seed);
    }
    println!(
        "stress: seed {seed}, {} threads, {} keys",
        args.threads, args.keys
    );
    let mut rng = Rng::new(seed);
    let mut dir = base.clone();
    let mut phase = 0u64;
    let phase_seed = |p: u64| seed ^ (p + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let (opts, what) = phase_options(phase_seed(phase), false);
    println!("phase 0: {what}");
    let shared = Shared::new(
        Oracle::new(&vec![0; args.keys]),
        Some(Db::open(&dir, opts).expect("open")),
        None,
        seed,
    );
    let handles = worker::spawn(&shared, args.threads, args.keys);
    let start = Instant::now();
    let mut events = [0u64; 3];
    let mut checked = 0u64;
    let mut power: Option<PowerLossFs> = None;
    while start.elapsed() < Duration::from_secs(args.seconds) {
        std::thread::sleep(Duration::from_secs_f64(args.event_seconds));
        let event = phase % 3;
        let label = format!("seed {seed} phase {phase}");
        if event == 1 {
            // Power loss: cut while the workers run.
            shared.expect_errors.store(true, Ordering::SeqCst);
            power.as_ref().expect("power-loss phase").cut_now();
        }
        let mut db = shared.db.write().unwrap_or_else(|p| p.into_inner());
        drop(db.take());
        match event {
            1 => {
                let fs = power.take().expect("power-loss phase");
                let new_dir = base.with_extension(format!("p{phase}"));
                std::fs::create_dir_all(&new_dir).expect("directory");
                let tail = [
                    UnsyncedTail::Dropped,
                    UnsyncedTail::RandomPrefix,
                    UnsyncedTail::RandomPages,
                ][rng.below(3) as usize];
                fs.write_durable(&dir, &new_dir, tail, rng.next())
                    .expect("writing the durable image");
                let _ = std::fs::remove_dir_all(&dir);
                dir = new_dir;
                shared.expect_errors.store(false, Ordering::SeqCst);
            }
            2 => kill_child(&args, &dir, &shared.oracle, phase_seed(phase) ^ 1, &mut rng),
            _ => {}
        }
        events[event as usize] += 1;
        // Reopen on the real file system and check every key.
        let (opts, _) = phase_options(phase_seed(phase) ^ 2, false);
        let check = Db::open(&dir, opts).unwrap_or_else(|e| panic!("{label}: reopen: {e}"));
        checked += verify_all(&check, &shared.oracle, &label);
        drop(check);
        // The next phase; the one before a power loss runs on a PowerLossFs.
        phase += 1;
        let next_is_power_loss = phase % 3 == 1;
        let (mut opts, what) = phase_options(phase_seed(phase), next_is_power_loss);
        if next_is_power_loss {
            let fs = PowerLossFs::adopting(&dir).expect("adopting the directory");
            opts.fs = Arc::new(fs.clone());
            power = Some(fs);
        }
        println!(
            "phase {phase}: {what}{}",
            if next_is_power_loss {
                ", ends in a power loss"
            } else {
                ""
            }
        );
        *db = Some(Db::open(&dir, opts).unwrap_or_else(|e| panic!("{label}: open: {e}")));
    }
    shared.stop.store(true, Ordering::SeqCst);
    for h in handles {
        h.join().expect("worker panicked");
    }
    let c: &Counts = &shared.counts;
    println!(
        "done in {:.0} s: {} reopens, {} power losses, {} SIGKILLed children; {} keys checked \
         after events",
        start.elapsed().as_secs_f64(),
        events[0],
        events[1],
        events[2],
        checked
    );
    println!("{c}");
}
