//! A three-node kv_server cluster of processes on 127.0.0.1 (feature `replication`), for the
//! tests that start, kill and query its nodes. The nodes talk mutual TLS, with certificates
//! of a CA made for the test (PEM files beside the nodes' directories).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::kv::{call, free_port};

/// One node: its ports, its data directory and its process while it runs.
pub struct Node {
    pub id: u64,
    pub port: u16,
    pub raft: String,
    pub dir: PathBuf,
    pub child: Option<Child>,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Three kv_server processes on 127.0.0.1, each with its client port and raft port.
pub struct Cluster {
    pub nodes: Vec<Mutex<Node>>,
    pub peers: String,
    /// The cluster's CA.
    pub ca: super::certs::Ca,
    /// Where the PEM files are.
    pub certs: PathBuf,
}

impl Cluster {
    pub fn new(root: &Path) -> Cluster {
        let nodes: Vec<Node> = (1..=3)
            .map(|id| Node {
                id,
                port: free_port(),
                raft: format!("127.0.0.1:{}", free_port()),
                dir: root.join(format!("n{id}")),
                child: None,
            })
            .collect();
        let peers = nodes
            .iter()
            .map(|n| format!("{}={}", n.id, n.raft))
            .collect::<Vec<_>>()
            .join(",");
        let ca = super::certs::Ca::new("kv_server cluster tests");
        let certs = root.join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        for n in &nodes {
            ca.write_pem(&certs, n.id);
        }
        Cluster {
            nodes: nodes.into_iter().map(Mutex::new).collect(),
            peers,
            ca,
            certs,
        }
    }

    /// The TLS flags of node `id`.
    pub fn tls_args(&self, id: u64) -> Vec<String> {
        let p = |name: &str| self.certs.join(name).to_str().unwrap().to_owned();
        vec![
            "--cluster-tls-cert".into(),
            p(&format!("node{id}.crt")),
            "--cluster-tls-key".into(),
            p(&format!("node{id}.key")),
            "--cluster-tls-ca".into(),
            p("ca.crt"),
        ]
    }

    /// Starts the three nodes (the first initialises the cluster) and waits for a leader.
    pub fn start_all(&self) {
        for i in 0..self.nodes.len() {
            self.start(i, i == 0);
        }
        self.wait_for_leader();
    }

    pub fn start(&self, i: usize, init: bool) {
        self.start_with(i, init, &[]);
    }

    /// Starts node `i` with `extra` arguments, and waits for its client port.
    pub fn start_with(&self, i: usize, init: bool, extra: &[&str]) {
        let mut n = self.nodes[i].lock().unwrap();
        let mut cmd = Command::new(super::example("kv_server"));
        cmd.args([
            "--dir",
            n.dir.to_str().unwrap(),
            "--port",
            &n.port.to_string(),
        ])
        .args(["--node-id", &n.id.to_string(), "--raft-addr", &n.raft])
        .args(["--peers", &self.peers, "--snapshot-logs", "2000"])
        .args(self.tls_args(n.id))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(stderr_log(&n.dir));
        if init {
            cmd.arg("--cluster-init");
        }
        n.child = Some(cmd.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", n.port)).is_err() {
            assert!(Instant::now() < deadline, "node {} did not start", n.id);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last lines node `i`'s processes wrote to stderr (kept outside its directory, so
    /// a wipe keeps them).
    pub fn stderr_tail(&self, i: usize) -> String {
        let n = self.nodes[i].lock().unwrap();
        let log = std::fs::read_to_string(n.dir.with_extension("stderr")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    pub fn kill(&self, i: usize) {
        let mut n = self.nodes[i].lock().unwrap();
        if let Some(mut c) = n.child.take() {
            c.kill().unwrap(); // SIGKILL
            c.wait().unwrap();
        }
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.lock().unwrap().port).collect()
    }

    /// The index of the node that leads, as a running node's INFO says.
    pub fn leader(&self) -> Option<usize> {
        for port in self.ports() {
            let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let info = String::from_utf8_lossy(&call(&mut s, &[b"INFO"])).into_owned();
            let id = info
                .lines()
                .find_map(|l| l.strip_prefix("leader_id:"))
                .and_then(|v| v.trim().parse::<u64>().ok());
            if let Some(id) = id {
                return Some(id as usize - 1);
            }
        }
        None
    }

    /// The index of the leader, waiting up to 20 s for one.
    pub fn wait_for_leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(l) = self.leader() {
                return l;
            }
            assert!(Instant::now() < deadline, "no leader within 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The INFO lines of node `i` that start with `prefix`.
    pub fn info_lines(&self, i: usize, prefix: &str) -> Vec<String> {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.ports()[i])) else {
            return Vec::new();
        };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let info = String::from_utf8_lossy(&call(&mut s, &[b"INFO"])).into_owned();
        info.lines()
            .filter(|l| l.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    }

    /// The lines of node `i`'s INFO `# Replication` section.
    pub fn replication_info(&self, i: usize) -> Vec<String> {
        let lines = self.info_lines(i, "");
        let start = lines.iter().position(|l| l == "# Replication");
        start.map_or_else(Vec::new, |s| {
            lines[s + 1..]
                .iter()
                .take_while(|l| !l.is_empty())
                .cloned()
                .collect()
        })
    }

    pub fn info_field(&self, i: usize, field: &str) -> Option<u64> {
        let port = self.ports()[i];
        let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let info = String::from_utf8_lossy(&call(&mut s, &[b"INFO"])).into_owned();
        let prefix = format!("{field}:");
        info.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|v| v.trim().parse().ok())
    }
}

/// Appends to `<dir>.stderr`: every process of a node writes there.
pub fn stderr_log(dir: &std::path::Path) -> Stdio {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.with_extension("stderr"))
        .map_or_else(|_| Stdio::null(), Stdio::from)
}
