//! kv_server's `BF.MEXISTS` against what a Redis user without the RedisBloom module runs
//! today: an exact set in Redis (`SADD` / `SMISMEMBER`, Debian's `redis-server`). Both
//! servers get the same items, then answer the same pipelined lookups of absent items, the
//! same client code for both, in rounds that alternate the servers, at 1 and 2 client
//! threads; it prints each round, the medians and their ratio, each server's resident memory
//! (VmRSS) after the load, and kv_server's data-block reads per absent `BF.EXISTS` (from its
//! INFO).
//!
//! ```sh
//! cargo build --release --example kv_server --example bf_bench
//! target/release/examples/bf_bench --items 10000000
//! ```
//!
//! (RedisBloom itself is not packaged by Debian, so Redis's own `BF.*` cannot run here.)

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;

#[derive(Parser)]
#[command(about = "kv_server BF.MEXISTS against Redis SMISMEMBER")]
struct Args {
    /// Items each server holds.
    #[arg(long, default_value_t = 10_000_000)]
    items: u64,
    /// Items per command (SADD / BF.MADD, SMISMEMBER / BF.MEXISTS).
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Commands in flight per connection.
    #[arg(long, default_value_t = 16)]
    depth: usize,
    /// Absent items looked up per server, per round and thread count.
    #[arg(long, default_value_t = 2_000_000)]
    lookups: u64,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// kv_server's binary (default: beside this one).
    #[arg(long)]
    kv_server: Option<PathBuf>,
    #[arg(long, default_value = "redis-server")]
    redis_server: String,
    /// kv_server's directory (default: a temporary one).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn wait_for(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(e) if Instant::now() > deadline => panic!("no server on {port}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// One connection: RESP commands out, replies (integers, arrays of them, simple strings,
/// bulk strings) counted back.
struct Conn {
    out: TcpStream,
    inp: BufReader<TcpStream>,
}

impl Conn {
    fn new(port: u16) -> Conn {
        let s = wait_for(port);
        s.set_nodelay(true).expect("nodelay");
        Conn {
            inp: BufReader::with_capacity(1 << 16, s.try_clone().expect("clone")),
            out: s,
        }
    }

    fn send(&mut self, buf: &[u8]) {
        self.out.write_all(buf).expect("write");
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.inp.read_line(&mut l).expect("read");
        assert!(!l.is_empty(), "connection closed");
        l
    }

    /// One reply; the ones among an array's integers (a hit count), or the text of a
    /// bulk string.
    fn reply(&mut self) -> (u64, String) {
        let l = self.line();
        match l.as_bytes()[0] {
            b'*' => {
                let n: usize = l[1..].trim().parse().expect("array length");
                let mut ones = 0;
                for _ in 0..n {
                    let e = self.line();
                    assert!(e.starts_with(':'), "not an integer: {e}");
                    ones += u64::from(e.trim() == ":1");
                }
                (ones, String::new())
            }
            b':' | b'+' => (0, l),
            b'$' => {
                let n: usize = l[1..].trim().parse().expect("bulk length");
                let mut body = vec![0u8; n + 2];
                std::io::Read::read_exact(&mut self.inp, &mut body).expect("bulk");
                (0, String::from_utf8_lossy(&body[..n]).into_owned())
            }
            _ => panic!("error reply: {l}"),
        }
    }
}

fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut b = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        b.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        b.extend_from_slice(a);
        b.extend_from_slice(b"\r\n");
    }
    b
}

fn present(i: u64) -> String {
    format!("https://site{}.example/page/{i}", i % 97)
}

/// An item next to present ones in key order (so tables' key ranges do not rule it out:
/// only their filters can), never one of them.
fn absent(i: u64) -> String {
    format!("https://site{}.example/page/{i}#", i % 97)
}

/// `total` items (named by `name(i)` from `from`) sent as commands `verb key item…` of
/// `batch` items, `depth` in flight; the hits among the replies.
fn run(
    c: &mut Conn,
    verb: &str,
    from: u64,
    total: u64,
    batch: usize,
    depth: usize,
    name: fn(u64) -> String,
) -> u64 {
    let mut hits = 0;
    let mut in_flight = 0;
    let mut i = from;
    while i < from + total || in_flight > 0 {
        while in_flight < depth && i < from + total {
            let end = (i + batch as u64).min(from + total);
            let items: Vec<String> = (i..end).map(name).collect();
            let mut args: Vec<&[u8]> = vec![verb.as_bytes(), b"seen"];
            args.extend(items.iter().map(|s| s.as_bytes()));
            c.send(&command(&args));
            in_flight += 1;
            i = end;
        }
        hits += c.reply().0;
        in_flight -= 1;
    }
    hits
}

/// Resident memory of `pid` in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// A field of INFO's text.
fn info_field(c: &mut Conn, field: &str) -> u64 {
    c.send(&command(&[b"INFO"]));
    let (_, text) = c.reply();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Absent lookups per second on `port` with `threads` connections.
fn lookups(port: u16, verb: &'static str, a: &Args, threads: u64, round: u64) -> f64 {
    let per = a.lookups / threads;
    let (batch, depth) = (a.batch, a.depth);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut c = Conn::new(port);
                let from = (round * threads + t) * per;
                let hits = run(&mut c, verb, from, per, batch, depth, absent);
                assert_eq!(hits, 0, "{verb} said an absent item is present");
            });
        }
    });
    (per * threads) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let a = Args::parse();
    let kv_bin = a.kv_server.clone().unwrap_or_else(|| {
        let me = std::env::current_exe().expect("this binary's path");
        me.with_file_name("kv_server")
    });
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let dir = a.dir.clone().unwrap_or_else(|| tmp.path().join("kv"));
    let (rp, kp) = (free_port(), free_port());
    let quiet = || Stdio::null();
    let redis = Proc(
        Command::new(&a.redis_server)
            .args([
                "--port",
                &rp.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no"])
            .stdout(quiet())
            .spawn()
            .expect("redis-server (apt-get install redis-server)"),
    );
    let spawn_kv = || {
        Proc(
            Command::new(&kv_bin)
                .args(["--dir", dir.to_str().expect("a UTF-8 path")])
                .args(["--port", &kp.to_string()])
                .stdout(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("{}: {e}", kv_bin.display())),
        )
    };
    let kv = spawn_kv();
    let (mut rc, mut kc) = (Conn::new(rp), Conn::new(kp));
    println!(
        "loading {} items into each (batches of {}, {} in flight)",
        a.items, a.batch, a.depth
    );
    for (name, c, verb) in [
        ("redis SADD", &mut rc, "SADD"),
        ("kv_server BF.MADD", &mut kc, "BF.MADD"),
    ] {
        let t = Instant::now();
        run(c, verb, 0, a.items, a.batch, a.depth, present);
        let s = t.elapsed().as_secs_f64();
        println!(
            "  {name:<18} {:>8.1} s  {:>10.0} items/s",
            s,
            a.items as f64 / s
        );
    }
    // Spot checks: present items are found by both.
    for (c, verb) in [(&mut rc, "SMISMEMBER"), (&mut kc, "BF.MEXISTS")] {
        assert_eq!(
            run(c, verb, 0, 1000, 1000, 1, present),
            1000,
            "{verb} lost items"
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    let f = |c: &mut Conn, name: &str| info_field(c, name) as f64 / (1 << 20) as f64;
    println!(
        "kv_server after the load: {} tables, {:.0} MiB of tables, {:.1} MiB of filters, {:.1} MiB of block cache",
        info_field(&mut kc, "tables"),
        f(&mut kc, "table_bytes"),
        f(&mut kc, "filter_bytes"),
        f(&mut kc, "block_cache_bytes")
    );
    let (rr, kr) = (rss_mib(redis.0.id()), rss_mib(kv.0.id()));
    println!(
        "resident memory 2 s after the load: redis {rr:.0} MiB, kv_server {kr:.0} MiB: {:.3}x",
        kr / rr
    );
    // Once the load's flushes and compactions are done and kv_server has given back what
    // they freed (`examples/kv_server/memory.rs`): what a server idle after a load holds.
    std::thread::sleep(Duration::from_secs(10));
    let (rr, kr) = (rss_mib(redis.0.id()), rss_mib(kv.0.id()));
    println!(
        "resident memory 12 s after the load: redis {rr:.0} MiB, kv_server {kr:.0} MiB: {:.3}x",
        kr / rr
    );
    println!(
        "absent lookups/s ({} per server and round, {} per command, {} in flight):",
        a.lookups, a.batch, a.depth
    );
    let mut rounds: Vec<[f64; 4]> = Vec::new();
    for r in 0..a.rounds as u64 {
        let mut row = [0.0; 4];
        for (j, threads) in [1u64, 2].into_iter().enumerate() {
            // Alternate which server goes first.
            let order = if r % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let (port, verb) = [(rp, "SMISMEMBER"), (kp, "BF.MEXISTS")][which];
                row[j * 2 + which] = lookups(port, verb, &a, threads, r * 2 + j as u64);
            }
        }
        println!(
            "  round {r}: 1 thread redis {:>10.0} kv {:>10.0} | 2 threads redis {:>10.0} kv {:>10.0}",
            row[0], row[1], row[2], row[3]
        );
        rounds.push(row);
    }
    let m: Vec<f64> = (0..4)
        .map(|i| median(rounds.iter().map(|r| r[i]).collect()))
        .collect();
    println!("medians:");
    println!(
        "  1 thread:  redis SMISMEMBER {:>10.0}  kv_server BF.MEXISTS {:>10.0}  {:.2}x",
        m[0],
        m[1],
        m[1] / m[0]
    );
    println!(
        "  2 threads: redis SMISMEMBER {:>10.0}  kv_server BF.MEXISTS {:>10.0}  {:.2}x",
        m[2],
        m[3],
        m[3] / m[2]
    );
    // Data-block reads per absent BF.EXISTS, from INFO.
    let n = 100_000u64;
    let before = (
        info_field(&mut kc, "data_block_reads"),
        info_field(&mut kc, "gets"),
    );
    run(&mut kc, "BF.EXISTS", 1 << 40, n, 1, a.depth * 4, absent);
    let after = (
        info_field(&mut kc, "data_block_reads"),
        info_field(&mut kc, "gets"),
    );
    println!(
        "kv_server: {:.4} data-block reads per absent BF.EXISTS ({} reads, {} gets, {n} commands)",
        (after.0 - before.0) as f64 / n as f64,
        after.0 - before.0,
        after.1 - before.1
    );
    let (rr2, kr2) = (rss_mib(redis.0.id()), rss_mib(kv.0.id()));
    println!(
        "resident memory just after the lookups: redis {rr2:.0} MiB, kv_server {kr2:.0} MiB: {:.3}x",
        kr2 / rr2
    );
    std::thread::sleep(Duration::from_secs(5));
    let (rr2, kr2) = (rss_mib(redis.0.id()), rss_mib(kv.0.id()));
    println!(
        "resident memory 5 s after the lookups: redis {rr2:.0} MiB, kv_server {kr2:.0} MiB: {:.3}x",
        kr2 / rr2
    );
    // The same store served by a fresh process: what a server holds to serve lookups, without
    // the write burst's memtables or the allocator's free pages left from it.
    drop(kc);
    let mut kv = kv;
    let _ = Command::new("kill")
        .args(["-TERM", &kv.0.id().to_string()])
        .status();
    let _ = kv.0.wait();
    let kv = spawn_kv();
    drop(Conn::new(kp));
    let again = lookups(kp, "BF.MEXISTS", &a, 2, 1 << 20);
    let kr3 = rss_mib(kv.0.id());
    println!(
        "kv_server restarted on the same store: {again:.0} absent lookups/s at 2 threads, \
         resident memory {kr3:.0} MiB: {:.3}x redis's",
        kr3 / rr2
    );
}
