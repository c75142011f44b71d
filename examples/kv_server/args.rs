//! kv_server's command line (`Args`), with the checks of its flags that need no store.

use std::path::PathBuf;

use clap::Parser;
use lsm_bloom::PrefixExtractor;

#[derive(Parser)]
#[command(about = "lsm-bloom behind the Redis protocol")]
pub struct Args {
    /// Database directory (created if missing).
    #[arg(long)]
    pub dir: PathBuf,
    /// TCP port.
    #[arg(long, default_value_t = 6380)]
    pub port: u16,
    /// TLS port for Redis clients (feature `tls`), beside `--port`.
    #[arg(long, requires_all = ["tls_cert_file", "tls_key_file"])]
    pub tls_port: Option<u16>,
    /// The server's certificate (PEM) on `--tls-port`.
    #[arg(long, requires = "tls_port")]
    pub tls_cert_file: Option<PathBuf>,
    /// The server's private key (PEM).
    #[arg(long, requires = "tls_port")]
    pub tls_key_file: Option<PathBuf>,
    /// CA certificate(s) (PEM) that sign clients' certificates.
    #[arg(long, requires = "tls_port")]
    pub tls_ca_cert_file: Option<PathBuf>,
    /// Whether clients must present a certificate the CA signed: `yes` (Redis's default),
    /// `optional`, `no`.
    #[arg(long, default_value = "yes", value_parser = ["yes", "optional", "no"])]
    pub tls_auth_clients: String,
    /// Address to bind (loopback by default).
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: String,
    /// Concurrent connections accepted; more are refused with an error reply.
    #[arg(long, default_value_t = 512)]
    pub max_clients: usize,
    /// Largest request (one command with its arguments) in MiB.
    #[arg(long, default_value_t = 80)]
    pub max_request_mib: usize,
    /// Request bytes all connections together may buffer (beyond 64 KiB each), in MiB.
    #[arg(long, default_value_t = 512)]
    pub max_total_request_mib: usize,
    /// Reply bytes all connections together may hold unwritten (beyond 64 KiB each), in MiB;
    /// a connection whose replies would overrun it is closed.
    #[arg(long, default_value_t = 512)]
    pub max_total_output_mib: usize,
    /// Close a connection that sends nothing for this many seconds (Redis `timeout`; 0:
    /// never).
    #[arg(long, default_value_t = 0)]
    pub timeout: u64,
    /// Close a connection whose client reads none of a reply for this many seconds.
    #[arg(long, default_value_t = 30)]
    pub write_timeout_secs: u64,
    /// Password clients must give (AUTH or HELLO ... AUTH default PASS). Visible in `ps`:
    /// prefer --requirepass-file.
    #[arg(long, conflicts_with = "requirepass_file")]
    pub requirepass: Option<String>,
    /// File holding the password (one line; a trailing newline is ignored).
    #[arg(long)]
    pub requirepass_file: Option<PathBuf>,
    /// `no` allows serving a non-loopback address without a password.
    #[arg(long, default_value = "yes", value_parser = ["yes", "no"])]
    pub protected_mode: String,
    /// Prefix filters by delimiter: a key's prefix runs up to and including its
    /// `--prefix-delimiter-count`-th occurrence of this one ASCII character (e.g. `:`), and
    /// `SCAN 0 MATCH prefix*` skips tables without that prefix. The store records the rule
    /// (its options record): later starts on the same directory keep it without the flag.
    #[arg(long, conflicts_with = "prefix_len")]
    pub prefix_delimiter: Option<char>,
    /// Which occurrence of `--prefix-delimiter` ends the prefix.
    #[arg(long, default_value_t = 1, requires = "prefix_delimiter")]
    pub prefix_delimiter_count: u32,
    /// Prefix filters by length: a key's prefix is its first N bytes (recorded, as above).
    #[arg(long)]
    pub prefix_len: Option<u32>,
    /// Testing only: in cluster mode, decide conditional and read-modify-write commands on
    /// the node that receives them instead of in the log, so they are not atomic across
    /// nodes (the negative control of the cluster's linearizability test).
    #[arg(long, hide = true)]
    pub decide_on_receiving_node: bool,
    /// No prefix filters for new tables, whatever the store recorded.
    #[arg(long, conflicts_with_all = ["prefix_len", "prefix_delimiter"])]
    pub no_prefix_filters: bool,
    /// Data block compression of new tables: `none`, `lz4`, or `zstd[:level]` in a build
    /// with the `zstd` feature. Recorded in the store, like the prefix rule: later starts
    /// need not repeat it, and `none` turns a recorded one off.
    #[arg(long)]
    pub compression: Option<lsm_bloom::Compression>,
    /// Numbered databases served (`SELECT 0` to `N-1`), each a keyspace of the store; 16 by
    /// default, as Redis. Every node of a cluster should be given the same number.
    #[arg(long)]
    pub databases: Option<usize>,
    /// Cluster mode (feature `replication`): this node's id. `--dir` then holds the node's
    /// log and state machine.
    #[arg(long, requires = "raft_addr")]
    pub node_id: Option<u64>,
    /// Cluster mode: the address this node's Raft RPCs listen on (HOST:PORT), as its peers
    /// reach it.
    #[arg(long, requires = "node_id")]
    pub raft_addr: Option<String>,
    /// Cluster mode: the other nodes, `ID=HOST:PORT,...` (their raft addresses).
    #[arg(long, default_value = "", requires = "node_id")]
    pub peers: String,
    /// Cluster mode: dial these nodes at other addresses than their raft addresses,
    /// `ID=HOST:PORT,...` (a proxy, a tunnel, a translated address). The node reached must
    /// still prove its id.
    #[arg(long, default_value = "", requires = "node_id")]
    pub peer_routes: String,
    /// Cluster mode: make a new cluster of this node and `--peers`. Give it on one node,
    /// once; on a node that already belongs to a cluster it changes nothing.
    #[arg(long, requires = "node_id")]
    pub cluster_init: bool,
    /// Cluster mode: take a snapshot every this many log entries (and keep a tenth of that
    /// behind it, for followers slightly behind).
    #[arg(long, default_value_t = 10_000, requires = "node_id")]
    pub snapshot_logs: u64,
    /// Cluster mode: the cluster's id, sent in every raft connection's handshake: nodes of
    /// two clusters never exchange a message.
    #[arg(long, default_value = "lsm-bloom", requires = "node_id")]
    pub cluster_id: String,
    /// Cluster mode: this node's certificate (PEM), signed by the cluster's CA and naming
    /// the node as the URI subject alternative name `lsm-bloom://node/<id>`. With
    /// `--cluster-tls-key` and `--cluster-tls-ca`: mutual TLS on the raft port.
    #[arg(long, requires_all = ["cluster_tls_key", "cluster_tls_ca", "node_id"])]
    pub cluster_tls_cert: Option<PathBuf>,
    /// Cluster mode: this node's private key (PEM).
    #[arg(long, requires = "cluster_tls_cert")]
    pub cluster_tls_key: Option<PathBuf>,
    /// Cluster mode: the cluster's CA certificate (PEM), which signed every node's.
    #[arg(long, requires = "cluster_tls_cert")]
    pub cluster_tls_ca: Option<PathBuf>,
    /// Cluster mode without TLS: plain TCP between nodes, which authenticates nothing, so
    /// only on loopback addresses (a cluster on one machine).
    #[arg(long, conflicts_with = "cluster_tls_cert", requires = "node_id")]
    pub cluster_plain_loopback: bool,
    /// Every this many seconds, the items of Bloom filters that expired are range-deleted
    /// (`bloom_sweep.rs`; a cluster sweeps from its leader). 0: never.
    #[arg(long, default_value_t = 600)]
    pub bloom_sweep_secs: u64,
    /// For fault tests: every fsync of this server's files (the store's, or a node's log
    /// and state machine) first waits this many milliseconds, as on a slow disk. 0: off.
    #[arg(long, default_value_t = 0)]
    pub debug_sync_delay_ms: u64,
}

/// The prefix rule the flags ask for.
pub fn prefix_rule(args: &Args) -> Result<Option<PrefixExtractor>, String> {
    match (args.prefix_delimiter, args.prefix_len) {
        (Some(c), _) => {
            let byte = u8::try_from(c)
                .ok()
                .filter(u8::is_ascii)
                .ok_or_else(|| format!("--prefix-delimiter {c:?} is not one ASCII character"))?;
            Ok(Some(PrefixExtractor::delimiter(
                byte,
                args.prefix_delimiter_count,
            )))
        }
        (None, Some(len)) => Ok(Some(PrefixExtractor::fixed(len))),
        (None, None) => Ok(None),
    }
}
