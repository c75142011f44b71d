//! A key-value service: a `Db` behind the Redis protocol (RESP), so `redis-cli`,
//! `redis-benchmark` and Redis client libraries talk to it unchanged.
//!
//! `cargo run --release --example kv_server -- --dir PATH [--port 6380] [--bind 127.0.0.1]`
//!
//! Commands: PING, ECHO, GET, SET (plain `SET key value` only), DEL, EXISTS, MGET, MSET, DBSIZE
//! (an honest error: the store keeps no key count), INFO (the store's filter statistics),
//! QUIT, COMMAND (an empty reply, enough for `redis-cli`). Anything else: `-ERR unknown command`.
//!
//! One thread per connection, at most `--max-clients` at once; pipelined requests are answered
//! in order with one write per batch. A request larger than `--max-request-mib`, a bulk longer
//! than the store's value limit, or malformed RESP gets `-ERR Protocol error` and the
//! connection is closed; other clients are unaffected. Ctrl-C / SIGTERM stops accepting, lets
//! connections finish their current request, and closes the store (every acknowledged write is
//! already in its WAL).

use std::io::{BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use lsm_bloom::{Db, Options, WriteBatch};

#[derive(Parser)]
#[command(about = "lsm-bloom behind the Redis protocol")]
struct Args {
    /// Database directory (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// TCP port.
    #[arg(long, default_value_t = 6380)]
    port: u16,
    /// Address to bind (loopback by default).
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    /// Concurrent connections accepted; more are refused with an error reply.
    #[arg(long, default_value_t = 512)]
    max_clients: usize,
    /// Largest request (one command with its arguments) in MiB.
    #[arg(long, default_value_t = 80)]
    max_request_mib: usize,
}

/// Limits applied while parsing, so a client cannot make the server allocate without bound.
#[derive(Clone, Copy)]
struct Limits {
    max_request: usize,
    max_bulk: usize,
    max_args: usize,
}

/// Why a request could not be parsed; the connection is closed after replying.
#[derive(Debug)]
struct ProtocolError(String);

/// Parses one request from the front of `buf`: `Ok(None)` when more bytes are needed,
/// `Ok(Some((args, consumed)))` for a complete one.
fn parse(buf: &[u8], limits: Limits) -> Result<Option<(Vec<Vec<u8>>, usize)>, ProtocolError> {
    let err = |s: &str| Err(ProtocolError(s.to_string()));
    let line_end = |from: usize| {
        buf[from..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| from + p)
    };
    let int = |s: &[u8]| {
        std::str::from_utf8(s)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
    };
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != b'*' {
        // Inline command: one line of space-separated words.
        let Some(end) = buf.iter().position(|&b| b == b'\n') else {
            return if buf.len() > 64 * 1024 {
                err("too big inline request")
            } else {
                Ok(None)
            };
        };
        let line = buf[..end].strip_suffix(b"\r").unwrap_or(&buf[..end]);
        let args = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|w| !w.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        return Ok(Some((args, end + 1)));
    }
    let Some(end) = line_end(1) else {
        return if buf.len() > 64 {
            err("invalid multibulk length")
        } else {
            Ok(None)
        };
    };
    let n = match int(&buf[1..end]) {
        Some(n) if (0..=limits.max_args as i64).contains(&n) => n as usize,
        _ => return err("invalid multibulk length"),
    };
    let mut pos = end + 2;
    let mut args = Vec::with_capacity(n.min(1024));
    let mut total = 0usize;
    for _ in 0..n {
        if pos >= buf.len() {
            return Ok(None);
        }
        if buf[pos] != b'$' {
            return err(&format!(
                "expected '$', got '{}'",
                char::from(buf[pos]).escape_default()
            ));
        }
        let Some(end) = line_end(pos + 1) else {
            return if buf.len() - pos > 64 {
                err("invalid bulk length")
            } else {
                Ok(None)
            };
        };
        let len = match int(&buf[pos + 1..end]) {
            Some(l) if (0..=limits.max_bulk as i64).contains(&l) => l as usize,
            _ => return err("invalid bulk length"),
        };
        total += len;
        if total > limits.max_request {
            return err("request too large");
        }
        let start = end + 2;
        if buf.len() < start + len + 2 {
            return Ok(None);
        }
        if &buf[start + len..start + len + 2] != b"\r\n" {
            return err("bulk string not terminated by CRLF");
        }
        args.push(buf[start..start + len].to_vec());
        pos = start + len + 2;
    }
    Ok(Some((args, pos)))
}

fn bulk(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        Some(v) => {
            out.extend_from_slice(format!("${}\r\n", v.len()).as_bytes());
            out.extend_from_slice(v);
            out.extend_from_slice(b"\r\n");
        }
        None => out.extend_from_slice(b"$-1\r\n"),
    }
}

fn error(out: &mut Vec<u8>, msg: &str) {
    out.extend_from_slice(b"-ERR ");
    out.extend_from_slice(msg.replace(['\r', '\n'], " ").as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn wrong_args(out: &mut Vec<u8>, cmd: &str) {
    error(
        out,
        &format!(
            "wrong number of arguments for '{}' command",
            cmd.to_ascii_lowercase()
        ),
    );
}

fn info(db: &Db) -> String {
    let s = db.stats();
    let t = &s.total;
    let mut text = String::from("# Server\r\nredis_version:7.0.0\r\nlsm_bloom_version:");
    text += env!("CARGO_PKG_VERSION");
    text += "\r\n\r\n# Filters\r\n";
    text += &format!(
        "gets:{}\r\nfilter_checks:{}\r\nfilter_useful:{}\r\nfilter_positive:{}\r\nfilter_true_positive:{}\r\nobserved_fpr:{:.6}\r\nexpected_fpr_sum:{:.6}\r\nfilter_bytes:{}\r\nfilter_validation_failures:{}\r\ndata_block_reads:{}\r\nbytes_read:{}\r\ntables_probed:{}\r\n",
        s.gets, t.filter_checks, t.filter_useful, t.filter_positive, t.filter_true_positive, t.observed_fpr(), t.expected_fpr_sum,
        t.filter_bytes, s.filter_validation_failures, t.data_block_reads, t.bytes_read, s.tables_probed
    );
    text += &format!(
        "\r\n# Storage\r\ntables:{}\r\ntable_bytes:{}\r\nflushes:{}\r\ncompactions:{}\r\n",
        t.tables, t.table_bytes, s.flushes, s.compactions
    );
    for l in s.levels.iter().filter(|l| l.tables > 0) {
        text += &format!(
            "level{}:tables={},filter_checks={},filter_useful={}\r\n",
            l.level.unwrap_or(0),
            l.tables,
            l.filter_checks,
            l.filter_useful
        );
    }
    text
}

/// Executes one command, appending its reply. Returns false when the connection should close.
fn execute(db: &Db, args: &[Vec<u8>], out: &mut Vec<u8>) -> bool {
    let Some(name) = args.first() else {
        return true;
    };
    let cmd = String::from_utf8_lossy(name).to_ascii_uppercase();
    let rest = &args[1..];
    let db_err = |out: &mut Vec<u8>, e: lsm_bloom::Error| error(out, &e.to_string());
    match cmd.as_str() {
        "PING" => match rest {
            [] => out.extend_from_slice(b"+PONG\r\n"),
            [msg] => bulk(out, Some(msg)),
            _ => wrong_args(out, &cmd),
        },
        "ECHO" => match rest {
            [msg] => bulk(out, Some(msg)),
            _ => wrong_args(out, &cmd),
        },
        "GET" => match rest {
            [k] => match db.get(k) {
                Ok(v) => bulk(out, v.as_deref()),
                Err(e) => db_err(out, e),
            },
            _ => wrong_args(out, &cmd),
        },
        "SET" => match rest {
            [k, v] => match db.put(k, v) {
                Ok(()) => out.extend_from_slice(b"+OK\r\n"),
                Err(e) => db_err(out, e),
            },
            [_, _, ..] => error(out, "syntax error: only the plain form SET key value is supported (no EX/PX/NX/XX/GET/KEEPTTL)"),
            _ => wrong_args(out, &cmd),
        },
        "DEL" | "EXISTS" if !rest.is_empty() => {
            let mut count = 0u64;
            let mut batch = WriteBatch::new();
            // DEL counts distinct keys removed (`DEL k k` is 1, as in Redis); EXISTS counts
            // every argument that exists (`EXISTS k k` is 2).
            let mut seen = std::collections::HashSet::new();
            for k in rest {
                if cmd == "DEL" && !seen.insert(k.as_slice()) {
                    continue;
                }
                match db.get(k) {
                    Ok(Some(_)) => {
                        count += 1;
                        batch.delete(k.clone());
                    }
                    Ok(None) => {}
                    Err(e) => {
                        db_err(out, e);
                        return true;
                    }
                }
            }
            if cmd == "DEL" && !batch.is_empty() {
                if let Err(e) = db.write(batch) {
                    db_err(out, e);
                    return true;
                }
            }
            out.extend_from_slice(format!(":{count}\r\n").as_bytes());
        }
        "MGET" if !rest.is_empty() => {
            let mut values = Vec::with_capacity(rest.len());
            for k in rest {
                match db.get(k) {
                    Ok(v) => values.push(v),
                    Err(e) => {
                        db_err(out, e);
                        return true;
                    }
                }
            }
            out.extend_from_slice(format!("*{}\r\n", values.len()).as_bytes());
            for v in &values {
                bulk(out, v.as_deref());
            }
        }
        "MSET" if !rest.is_empty() && rest.len() % 2 == 0 => {
            let mut batch = WriteBatch::new();
            for pair in rest.chunks_exact(2) {
                batch.put(pair[0].clone(), pair[1].clone());
            }
            match db.write(batch) {
                Ok(()) => out.extend_from_slice(b"+OK\r\n"),
                Err(e) => db_err(out, e),
            }
        }
        "DEL" | "EXISTS" | "MGET" | "MSET" => wrong_args(out, &cmd),
        "DBSIZE" => error(out, "DBSIZE is not supported: lsm-bloom keeps no key count (counting would read every table)"),
        "INFO" => bulk(out, Some(info(db).as_bytes())),
        "COMMAND" => out.extend_from_slice(b"*0\r\n"),
        "QUIT" => {
            out.extend_from_slice(b"+OK\r\n");
            return false;
        }
        _ => {
            let first = rest.first().map(|a| String::from_utf8_lossy(a).into_owned()).unwrap_or_default();
            error(out, &format!("unknown command '{}', with args beginning with: '{first}'", String::from_utf8_lossy(name)));
        }
    }
    true
}

fn serve(stream: TcpStream, db: &Db, stop: &AtomicBool, limits: Limits) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut reader = stream.try_clone()?;
    let mut writer = BufWriter::with_capacity(64 * 1024, stream);
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut out = Vec::with_capacity(16 * 1024);
    loop {
        // Answer every complete request already buffered (a pipeline), then write once.
        let mut consumed = 0;
        let mut open = true;
        loop {
            match parse(&buf[consumed..], limits) {
                Ok(Some((args, used))) => {
                    consumed += used;
                    open = execute(db, &args, &mut out);
                    if !open {
                        break;
                    }
                }
                Ok(None) => break,
                Err(ProtocolError(msg)) => {
                    error(&mut out, &format!("Protocol error: {msg}"));
                    open = false;
                    break;
                }
            }
        }
        buf.drain(..consumed);
        if !out.is_empty() {
            writer.write_all(&out)?;
            writer.flush()?;
            out.clear();
        }
        if !open {
            return Ok(());
        }
        match reader.read(&mut chunk) {
            Ok(0) => return Ok(()), // client closed (possibly mid-request: nothing was applied)
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        }
    }
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let db = Arc::new(Db::open(&args.dir, Options::default())?);
    let listener = TcpListener::bind((args.bind.as_str(), args.port))?;
    listener.set_nonblocking(true)?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))?;
    }
    let limits = Limits {
        max_request: args.max_request_mib << 20,
        max_bulk: lsm_bloom::db::MAX_VALUE_SIZE.min(args.max_request_mib << 20),
        max_args: 1 << 20,
    };
    println!(
        "lsm-bloom kv_server listening on {} (database {})",
        listener.local_addr()?,
        args.dir.display()
    );
    std::io::stdout().flush()?;
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((mut stream, _)) => {
                if active.load(Ordering::SeqCst) >= args.max_clients {
                    let _ = stream.write_all(b"-ERR max number of clients reached\r\n");
                    continue;
                }
                stream.set_nonblocking(false)?;
                active.fetch_add(1, Ordering::SeqCst);
                let (db, stop, active) = (db.clone(), stop.clone(), active.clone());
                std::thread::spawn(move || {
                    if let Err(e) = serve(stream, &db, &stop, limits) {
                        if !matches!(
                            e.kind(),
                            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                        ) {
                            eprintln!("connection error: {e}");
                        }
                    }
                    active.fetch_sub(1, Ordering::SeqCst);
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => eprintln!("accept failed: {e}"),
        }
    }
    // The terminal or pipe may be gone by now: status lines are best effort.
    let _ = writeln!(
        std::io::stdout(),
        "shutting down: waiting for {} connection(s)",
        active.load(Ordering::SeqCst)
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while active.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    db.flush()?;
    match Arc::try_unwrap(db) {
        Ok(db) => db.close()?,
        Err(_) => {
            eprintln!("connections still open after 5 s; the WAL holds every acknowledged write")
        }
    }
    let _ = writeln!(std::io::stdout(), "closed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits {
        max_request: 1 << 20,
        max_bulk: 1 << 16,
        max_args: 1000,
    };

    #[test]
    fn parses_pipelines_partial_input_and_inline_commands() {
        let req = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPING\r\n";
        let (args, used) = parse(req, L).unwrap().unwrap();
        assert_eq!(args, vec![b"GET".to_vec(), b"k".to_vec()]);
        let (args, _) = parse(&req[used..], L).unwrap().unwrap();
        assert_eq!(args, vec![b"PING".to_vec()]);
        for cut in 1..used {
            assert!(parse(&req[..cut], L).unwrap().is_none(), "cut {cut}");
        }
        let (args, _) = parse(b"set a  b\r\n", L).unwrap().unwrap();
        assert_eq!(args.len(), 3);
    }

    #[test]
    fn rejects_oversized_and_malformed_requests() {
        assert!(parse(b"*99999999\r\n", L).is_err());
        assert!(parse(b"*1\r\n$99999999\r\n", L).is_err());
        assert!(parse(b"*1\r\n$-5\r\n", L).is_err());
        assert!(parse(b"*1\r\n:3\r\n", L).is_err());
        assert!(parse(b"*1\r\n$1\r\nab\r\n", L).is_err());
        assert!(parse(b"*x\r\n", L).is_err());
        assert!(parse(&vec![b'a'; 70 * 1024], L).is_err());
    }
}
