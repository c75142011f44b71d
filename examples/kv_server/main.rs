//! A key-value service: a `Db` behind the Redis protocol, RESP2 and RESP3, so `redis-cli`,
//! `redis-benchmark` and current Redis client libraries talk to it with their defaults.
//!
//! `cargo run --release --example kv_server -- --dir PATH [--port 6380] [--bind 127.0.0.1]
//!  [--requirepass PASS | --requirepass-file FILE] [--protected-mode no]`
//!
//! Commands: PING, ECHO, QUIT, HELLO [2|3 [AUTH user pass] [SETNAME name]], AUTH,
//! CLIENT SETINFO|SETNAME|GETNAME|ID, CONFIG GET, GET, SET [NX|XX] [GET]
//! [EX|PX|EXAT|PXAT|KEEPTTL], SETNX, GETDEL, STRLEN, TYPE, DEL, EXISTS, MGET, MSET, SCAN
//! [MATCH] [COUNT] [TYPE], INFO (the store's filter statistics), COMMAND; expiry: SETEX,
//! PSETEX, GETEX, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, TTL, PTTL, EXPIRETIME, PEXPIRETIME,
//! PERSIST (`expire.rs`, in cluster mode too); read-modify-write on strings: INCR, DECR,
//! INCRBY, DECRBY, INCRBYFLOAT, APPEND, GETSET, SETRANGE, GETRANGE, MSETNX, COPY, RENAME,
//! RENAMENX (`strings.rs`); MULTI, EXEC, DISCARD, WATCH, UNWATCH (`multi.rs`); numbered
//! databases (`--databases`, 16 by default): SELECT, FLUSHDB, FLUSHALL, SWAPDB, MOVE, DBSIZE;
//! RedisBloom's BF.RESERVE, BF.ADD, BF.MADD, BF.INSERT, BF.EXISTS, BF.MEXISTS, BF.CARD,
//! BF.INFO over exact sets (`bloom.rs`, `bloom_commands.rs`).
//! Anything else, and every option not supported (CONFIG SET), gets a precise `-ERR`.
//!
//! Modules: `resp.rs` (parser, reply encoding), `commands.rs` (dispatch, sessions, auth),
//! `values.rs` (the commands on stored values, and the order of writes), `expire.rs` (keys
//! that expire), `strings.rs` (read-modify-write on strings), `combine.rs` (a pipeline's
//! counters combined across connections), `multi.rs` (transactions), `databases.rs` and
//! `db_commands.rs` (numbered databases as keyspaces), `store.rs` (local or cluster),
//! `scan.rs` (SCAN cursors and glob), `conn.rs` (one connection, shared memory budget),
//! `info.rs` (INFO text), `rmw_view.rs` (a database's strings and filters as one set of
//! typed keys), `bloom.rs` and `bloom_commands.rs` (Bloom filters).
//!
//! Access: with a password every command but AUTH, HELLO and QUIT needs authentication first;
//! passwords are compared as SHA-256 digests in constant time. Without a password the server
//! refuses to listen on a non-loopback address unless `--protected-mode no` (Redis's protected
//! mode). One thread per connection, at most `--max-clients`. Ctrl-C / SIGTERM stops accepting,
//! lets connections finish their current request, and closes the store.

mod args;
mod bloom;
mod bloom_commands;
mod bloom_sweep;
#[cfg(feature = "replication")]
mod call_codec;
mod changes;
#[cfg(feature = "replication")]
mod cluster;
mod combine;
mod commands;
mod conn;
mod databases;
mod db_commands;
mod expire;
mod info;
#[path = "../common/logging.rs"]
mod logging;
mod memory;
mod multi;
#[cfg(feature = "replication")]
mod multi_cluster;
#[cfg(feature = "replication")]
mod procs;
mod resp;
mod rmw;
mod rmw_view;
mod scan;
mod store;
mod strings;
#[cfg(feature = "tls")]
mod tls;
mod transfer;
mod values;

use std::io::Write;
use std::net::{TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use databases::Databases;
use lsm_bloom::{Compressions, Db, Options, PrefixFilters};
use store::Store;

use args::{prefix_rule, Args};
use commands::Server;
use conn::Budget;
use resp::Limits;

/// Logs go to stderr through `tracing`: the store's events (the open and what recovery
/// decided, write stalls, background errors; flushes and compactions at DEBUG), openraft's in
/// a cluster, and the server's own, filtered by `RUST_LOG` (default `info,openraft=warn`).
fn init_logging() {
    logging::init("info,openraft=warn");
}

fn main() {
    memory::give_back_large_frees();
    let args = Args::parse();
    init_logging();
    if let Err(e) = run(args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn password(args: &Args) -> Result<Option<Vec<u8>>, String> {
    let p = match (&args.requirepass, &args.requirepass_file) {
        (Some(p), _) => p.as_bytes().to_vec(),
        (None, Some(f)) => {
            let mut p = std::fs::read(f).map_err(|e| format!("reading {}: {e}", f.display()))?;
            while p.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                p.pop();
            }
            p
        }
        (None, None) => return Ok(None),
    };
    if p.is_empty() {
        return Err("the password is empty".into());
    }
    Ok(Some(p))
}

/// A connection accepted on `listener` (non-blocking), made blocking and wrapped by `wrap`;
/// `None` when none is waiting (or accepting failed, which is reported).
fn accept(
    listener: &TcpListener,
    wrap: impl FnOnce(std::net::TcpStream) -> conn::Stream,
) -> Option<conn::Stream> {
    match listener.accept() {
        Ok((s, _)) => match s.set_nonblocking(false) {
            Ok(()) => Some(wrap(s)),
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                None
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(e) => {
            tracing::warn!(error = %e, "accept failed");
            None
        }
    }
}

/// `--tls-port`'s listener and its TLS configuration.
#[cfg(feature = "tls")]
struct TlsListener {
    listener: TcpListener,
    config: Arc<lsm_bloom::rustls::ServerConfig>,
}

#[cfg(feature = "tls")]
impl TlsListener {
    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// A waiting TLS client, its handshake still to run (as its first reads and writes go).
    fn accept(&self) -> Option<conn::Stream> {
        let config = Arc::clone(&self.config);
        let conn = lsm_bloom::rustls::ServerConnection::new(config);
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "TLS session not created");
                return None;
            }
        };
        accept(&self.listener, |s| {
            conn::Stream::Tls(Box::new(lsm_bloom::rustls::StreamOwned::new(conn, s)))
        })
    }
}

/// Binds `--tls-port` on `--bind`, with its configuration from the TLS flags.
#[cfg(feature = "tls")]
fn tls_listener(args: &Args) -> Result<Option<TlsListener>, Box<dyn std::error::Error>> {
    let (Some(port), Some(cert), Some(key)) =
        (args.tls_port, &args.tls_cert_file, &args.tls_key_file)
    else {
        return Ok(None);
    };
    let config = tls::server_config(
        cert,
        key,
        args.tls_ca_cert_file.as_deref(),
        &args.tls_auth_clients,
    )?;
    let addrs: Vec<_> = (args.bind.as_str(), port).to_socket_addrs()?.collect();
    let listener = TcpListener::bind(&addrs[..])?;
    listener.set_nonblocking(true)?;
    Ok(Some(TlsListener { listener, config }))
}

/// Without the `tls` feature, `--tls-port` is refused with what to build instead.
#[cfg(not(feature = "tls"))]
struct TlsListener;

#[cfg(not(feature = "tls"))]
impl TlsListener {
    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    fn accept(&self) -> Option<conn::Stream> {
        None
    }
}

#[cfg(not(feature = "tls"))]
fn tls_listener(args: &Args) -> Result<Option<TlsListener>, Box<dyn std::error::Error>> {
    match args.tls_port {
        Some(_) => Err("--tls-port needs a build with the tls feature: \
             cargo run --release --features tls --example kv_server -- ..."
            .into()),
        None => Ok(None),
    }
}

/// The store: one `Db`, or with `--node-id` a node of a replicated cluster.
fn open_store(args: &Args, opts: Options) -> Result<Store, Box<dyn std::error::Error>> {
    match (args.node_id, &args.raft_addr) {
        (None, _) => {
            let count = args.databases.unwrap_or(16);
            Ok(Store::Local(Databases::open(
                Db::open(&args.dir, opts)?,
                count,
            )?))
        }
        #[cfg(feature = "replication")]
        (Some(id), Some(raft_addr)) => {
            let peers = cluster::parse_peers(&args.peers, "--peers")?;
            let tls = match (
                &args.cluster_tls_cert,
                &args.cluster_tls_key,
                &args.cluster_tls_ca,
            ) {
                (Some(c), Some(k), Some(a)) => Some((c.as_path(), k.as_path(), a.as_path())),
                _ => None,
            };
            let mut auth =
                cluster::peer_auth(id, &args.cluster_id, tls, args.cluster_plain_loopback)?;
            for (node, addr) in cluster::parse_peers(&args.peer_routes, "--peer-routes")? {
                auth = auth.with_route(node, addr);
            }
            let count = args.databases.unwrap_or(16);
            if count == 0 || count > databases::MAX_DATABASES {
                let most = databases::MAX_DATABASES;
                return Err(format!("--databases must be 1 to {most}, not {count}").into());
            }
            let mut node = cluster::Cluster::open(
                auth,
                id,
                &args.dir,
                raft_addr,
                peers,
                args.cluster_init,
                args.snapshot_logs,
                opts,
            )?;
            node.decide_locally = args.decide_on_receiving_node;
            Ok(Store::Cluster(Box::new(node), count))
        }
        #[cfg(feature = "replication")]
        (Some(_), None) => Err("--node-id needs --raft-addr".into()),
        #[cfg(not(feature = "replication"))]
        (Some(_), _) => Err(
            "cluster mode (--node-id) needs a build with the replication feature: \
             cargo run --release --features replication --example kv_server -- ..."
                .into(),
        ),
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let password = password(&args)?;
    let addrs: Vec<_> = (args.bind.as_str(), args.port).to_socket_addrs()?.collect();
    if password.is_none() && args.protected_mode == "yes" {
        if let Some(a) = addrs.iter().find(|a| !a.ip().is_loopback()) {
            return Err(format!(
                "refusing to listen on {a} without a password (protected mode): give \
                 --requirepass-file (or --requirepass), bind a loopback address, or pass \
                 --protected-mode no to serve unauthenticated clients on the network"
            )
            .into());
        }
    }
    let opts = Options::default()
        .with_prefix_filters(match prefix_rule(&args)? {
            Some(rule) => Some(PrefixFilters::with(rule)),
            None => args.no_prefix_filters.then_some(PrefixFilters::None),
        })
        .with_compression(args.compression.map(Compressions::from));
    let opts = if args.debug_sync_delay_ms > 0 {
        let slow = lsm_bloom::fs::FaultyFs::new();
        slow.delay_syncs(std::time::Duration::from_millis(args.debug_sync_delay_ms));
        opts.with_fs(std::sync::Arc::new(slow))
    } else {
        opts
    };
    let db = open_store(&args, opts)?;
    let config = vec![
        ("save", String::new()),
        ("appendonly", "yes".into()),
        ("appendfsync", "no".into()),
        ("databases", db.databases().to_string()),
        ("maxclients", args.max_clients.to_string()),
        ("port", args.port.to_string()),
        ("bind", args.bind.clone()),
        ("protected-mode", args.protected_mode.clone()),
        ("dir", args.dir.display().to_string()),
    ];
    let server = Server::new(db, password.as_deref(), config);
    let budget = Arc::new(Budget::new(
        args.max_total_request_mib << 20,
        server.request_bytes.clone(),
    ));
    let output_budget = Arc::new(Budget::new(
        args.max_total_output_mib << 20,
        server.output_bytes.clone(),
    ));
    let server = Arc::new(server);
    if args.bloom_sweep_secs > 0 {
        let every = Duration::from_secs(args.bloom_sweep_secs);
        bloom_sweep::sweep_every(Arc::clone(&server), every);
    }
    let watched = Arc::clone(&server);
    memory::trim_when_settled(move || {
        let s = watched.db.stats();
        s.flushes + s.compactions + s.gets + s.scans
    });
    let listener = TcpListener::bind(&addrs[..])?;
    listener.set_nonblocking(true)?;
    let tls = tls_listener(&args)?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))?;
    }
    let config = conn::Config {
        limits: Limits {
            max_request: args.max_request_mib << 20,
            max_bulk: lsm_bloom::db::MAX_VALUE_SIZE.min(args.max_request_mib << 20),
            max_args: 1 << 20,
        },
        idle: (args.timeout > 0).then(|| Duration::from_secs(args.timeout)),
        write_timeout: Duration::from_secs(args.write_timeout_secs.max(1)),
    };
    println!(
        "lsm-bloom kv_server listening on {} (database {}{}){}",
        listener.local_addr()?,
        args.dir.display(),
        if password.is_some() {
            ", password required"
        } else {
            ""
        },
        match &tls {
            Some(t) => format!(", TLS on {}", t.local_addr()?),
            None => String::new(),
        }
    );
    std::io::stdout().flush()?;
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::SeqCst) {
        let mut accepted = accept(&listener, conn::Stream::Plain);
        if accepted.is_none() {
            if let Some(t) = &tls {
                accepted = t.accept();
            }
        }
        let Some(stream) = accepted else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        if active.load(Ordering::SeqCst) >= args.max_clients {
            stream.refuse(b"-ERR max number of clients reached\r\n");
            continue;
        }
        active.fetch_add(1, Ordering::SeqCst);
        let (server, stop, active) = (server.clone(), stop.clone(), active.clone());
        let (budget, output_budget) = (budget.clone(), output_budget.clone());
        std::thread::spawn(move || {
            if let Err(e) = conn::serve(stream, &server, &stop, config, &budget, &output_budget) {
                if !matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::UnexpectedEof
                        | std::io::ErrorKind::InvalidData
                ) {
                    tracing::info!(error = %e, "connection error");
                }
            }
            active.fetch_sub(1, Ordering::SeqCst);
        });
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
    match Arc::try_unwrap(server) {
        Ok(server) => server.db.close()?,
        Err(_) => {
            tracing::warn!(
                "connections still open after 5 s; the WAL holds every acknowledged write"
            )
        }
    }
    let _ = writeln!(std::io::stdout(), "closed");
    Ok(())
}
