//! `--workload latency`: what a service sees under a sustained write load — the tail, not the
//! median. Each engine at its own defaults (`--defaults` implied) is loaded with `--keys`
//! random 16-byte keys and settled; then for `--latency-secs` seconds T writer threads write
//! new keys as fast as they can while T reader threads get random keys (half present, half
//! absent), for each T of `--threads`. Every write and every get is timed on its own.
//!
//! Per engine: writes/s, the longest single write and write p99.9, get p50 / p99 / p99.9 and
//! the longest get, and write amplification (bytes the process handed to `write` during the
//! phase, `/proc/self/io` `wchar`, ÷ the key and value bytes written). Engines run in turn,
//! each round starting with the next one, on a fresh store each; medians of `--rounds`
//! rounds, and ours ÷ the best peer per column. Ours also prints its write stalls and
//! slowdowns (`DbStats`). `--latency-ours-mib 64` runs ours in RocksDB's default shape
//! (64 MiB memtables and tables, a 256 MiB level 1).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::{
    key, load, median, mix, open_fjall, open_rocks, ours_options, value, Args, Engine, Ours, ABSENT,
};

/// One engine's figures from one round.
#[derive(Clone, Default)]
struct Round {
    writes_per_sec: f64,
    write_max_ms: f64,
    write_p999_us: f64,
    get_p50_us: f64,
    get_p99_us: f64,
    get_p999_us: f64,
    get_max_ms: f64,
    write_amp: f64,
    /// Ours only: stalls, slowdowns, and the longest of either in ms.
    stalls: Option<(u64, u64, f64)>,
}

fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("wchar: ")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// The `q` quantile of sorted nanosecond samples, in µs.
fn quantile_us(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * q) as usize).min(sorted.len() - 1);
    sorted[i] as f64 / 1e3
}

fn nanos(d: Duration) -> u32 {
    d.as_nanos().min(u32::MAX as u128) as u32
}

/// The timed phase on `e` with `threads` writers and as many readers.
fn phase(e: &dyn Engine, args: &Args, threads: usize, secs: f64) -> Round {
    let stop = AtomicBool::new(false);
    let next = AtomicU64::new(0);
    let user_bytes = (16 + args.value_size) as u64;
    let wchar0 = written_bytes();
    let t0 = Instant::now();
    let (writes, gets) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut lat = Vec::with_capacity(1 << 20);
                    let mut v = Vec::with_capacity(args.value_size);
                    while !stop.load(Ordering::Relaxed) {
                        // New keys: numbers past the loaded ones, below the absent ones.
                        let i = args.keys + next.fetch_add(1, Ordering::Relaxed);
                        value(args, i, &mut v);
                        let k = key(i);
                        let t = Instant::now();
                        e.put(&k, &v);
                        lat.push(nanos(t.elapsed()));
                    }
                    lat
                })
            })
            .collect();
        let readers: Vec<_> = (0..threads)
            .map(|r| {
                let stop = &stop;
                s.spawn(move || {
                    let mut lat = Vec::with_capacity(1 << 20);
                    let mut x = mix(0xC0FFEE + r as u64);
                    while !stop.load(Ordering::Relaxed) {
                        x = mix(x);
                        let k = if x & 1 == 0 {
                            key((x >> 8) % args.keys)
                        } else {
                            key(ABSENT + (x >> 8) % (1 << 30))
                        };
                        let t = Instant::now();
                        let found = e.get(&k);
                        lat.push(nanos(t.elapsed()));
                        std::hint::black_box(found);
                    }
                    lat
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        let join = |hs: Vec<std::thread::ScopedJoinHandle<'_, Vec<u32>>>| -> Vec<u32> {
            hs.into_iter()
                .flat_map(|h| h.join().expect("benchmark thread"))
                .collect()
        };
        (join(writers), join(readers))
    });
    let elapsed = t0.elapsed().as_secs_f64();
    let wchar = written_bytes() - wchar0;
    let (mut writes, mut gets) = (writes, gets);
    writes.sort_unstable();
    gets.sort_unstable();
    Round {
        writes_per_sec: writes.len() as f64 / elapsed,
        write_max_ms: writes.last().copied().unwrap_or(0) as f64 / 1e6,
        write_p999_us: quantile_us(&writes, 0.999),
        get_p50_us: quantile_us(&gets, 0.5),
        get_p99_us: quantile_us(&gets, 0.99),
        get_p999_us: quantile_us(&gets, 0.999),
        get_max_ms: gets.last().copied().unwrap_or(0) as f64 / 1e6,
        write_amp: wchar as f64 / (writes.len() as u64 * user_bytes).max(1) as f64,
        stalls: None,
    }
}

/// One engine, one round: a fresh store, loaded, settled, then the timed phase.
fn run_one(name: &str, args: &Args, threads: usize, secs: f64) -> Round {
    let dir = tempfile::tempdir().expect("tempdir");
    match name {
        "lsm-bloom" => {
            let mut opts = ours_options(args);
            if let Some(mib) = args.latency_ours_mib {
                opts = opts
                    .with_memtable_size((mib << 20) as usize)
                    .with_target_file_size(mib << 20)
                    .with_level1_max_bytes(mib << 22);
            }
            let e = Ours(lsm_bloom::Db::open(dir.path(), opts).expect("open lsm-bloom"));
            load(&e, args, 1);
            let before = e.0.stats();
            let mut r = phase(&e, args, threads, secs);
            let after = e.0.stats();
            r.stalls = Some((
                after.write_stalls - before.write_stalls,
                after.write_slowdowns - before.write_slowdowns,
                after
                    .longest_write_stall_micros
                    .max(after.longest_write_slowdown_micros) as f64
                    / 1e3,
            ));
            r
        }
        "rocksdb" => {
            let e = open_rocks(dir.path(), args, |_, _| {});
            load(&e, args, 1);
            phase(&e, args, threads, secs)
        }
        _ => {
            let e = open_fjall(dir.path(), args);
            load(&e, args, 1);
            phase(&e, args, threads, secs)
        }
    }
}

/// `--workload latency`: see the module docs.
pub(crate) fn run(args: &Args) {
    let mut args = args.clone();
    args.defaults = true;
    let args = &args;
    let secs = args.latency_secs;
    let names = ["lsm-bloom", "rocksdb", "fjall"];
    eprintln!(
        "LATENCY: every engine at its defaults; {} keys x (16-byte key, {}-byte value) loaded and settled; then {secs} s of T writers (new keys, as fast as they go) + T readers (random keys, half absent); {} rounds, engines in turn",
        args.keys, args.value_size, args.rounds
    );
    for &threads in &args.threads {
        let mut rounds: Vec<Vec<Round>> = vec![Vec::new(); names.len()];
        for round in 0..args.rounds {
            for j in 0..names.len() {
                let i = (round + j) % names.len();
                let r = run_one(names[i], args, threads, secs);
                eprintln!(
                    "  round {round} {:>9} {threads}w+{threads}r: {:.0} writes/s, longest write {:.1} ms, get p99.9 {:.1} µs, longest get {:.1} ms, write amp {:.1}{}",
                    names[i],
                    r.writes_per_sec,
                    r.write_max_ms,
                    r.get_p999_us,
                    r.get_max_ms,
                    r.write_amp,
                    r.stalls.map_or(String::new(), |(s, d, m)| format!(
                        "; stalls {s}, slowdowns {d}, longest {m:.1} ms"
                    ))
                );
                rounds[i].push(r);
            }
        }
        print_table(&names, &rounds, threads);
    }
}

fn print_table(names: &[&str], rounds: &[Vec<Round>], threads: usize) {
    type Col = (&'static str, fn(&Round) -> f64, bool);
    // (title, figure, higher is better)
    let cols: [Col; 9] = [
        ("writes/s", |r| r.writes_per_sec, true),
        ("longest write ms", |r| r.write_max_ms, false),
        ("write p99.9 µs", |r| r.write_p999_us, false),
        ("get p50 µs", |r| r.get_p50_us, false),
        ("get p99 µs", |r| r.get_p99_us, false),
        ("get p99.9 µs", |r| r.get_p999_us, false),
        ("longest get ms", |r| r.get_max_ms, false),
        ("write amp", |r| r.write_amp, false),
        ("(rounds)", |_| 0.0, false),
    ];
    println!("\nlatency, {threads} writer(s) + {threads} reader(s), medians:");
    print!("{:>24}", "");
    for n in names {
        print!(" {n:>10}");
    }
    println!(" {:>14}", "ours/best peer");
    for (title, f, higher) in &cols[..8] {
        let m: Vec<f64> = rounds
            .iter()
            .map(|rs| median(rs.iter().map(f).collect()))
            .collect();
        let best_peer = if *higher {
            m[1].max(m[2])
        } else {
            m[1].min(m[2])
        };
        print!("{title:>24}");
        for x in &m {
            print!(" {x:>10.1}");
        }
        println!(" {:>14.2}", m[0] / best_peer.max(1e-9));
    }
    let stalls: Vec<String> = rounds[0]
        .iter()
        .filter_map(|r| r.stalls)
        .map(|(s, d, m)| format!("{s} stalls, {d} slowdowns, longest {m:.1} ms"))
        .collect();
    println!("{:>24} {}", "ours, per round", stalls.join("; "));
}
