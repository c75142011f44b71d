//! A `kv_server` process for the integration tests, and a minimal RESP client over raw
//! sockets (so malformed input can be sent too).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running server; killed if the test fails before `stop`.
pub struct Server(pub Option<Child>);

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn start(dir: &Path, port: u16) -> Server {
    start_with(dir, port, &["--max-request-mib", "1"])
}

/// Starts the server with `extra` arguments and waits until it listens.
pub fn start_with(dir: &Path, port: u16, extra: &[&str]) -> Server {
    let mut child = Command::new(super::example("kv_server"))
        .args(["--dir", dir.to_str().unwrap(), "--port", &port.to_string()])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let server = Server(Some(child));
    assert!(
        line.contains(&format!("listening on 127.0.0.1:{port}")),
        "{line}"
    );
    server
}

pub fn stop(mut server: Server) {
    let mut child = server.0.take().unwrap();
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let status = child.wait().unwrap();
    assert!(status.success(), "server exit status {status}");
}

pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

pub fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one complete reply (simple, error, integer, bulk or array of those).
pub fn reply(s: &mut TcpStream) -> Vec<u8> {
    fn line(s: &mut TcpStream) -> Vec<u8> {
        let mut out = Vec::new();
        let mut b = [0u8; 1];
        while !out.ends_with(b"\r\n") {
            assert_eq!(s.read(&mut b).unwrap(), 1, "connection closed mid-reply");
            out.push(b[0]);
        }
        out
    }
    let head = line(s);
    let n: i64 = std::str::from_utf8(&head[1..head.len() - 2])
        .unwrap_or("0")
        .parse()
        .unwrap_or(0);
    let mut out = head.clone();
    match head[0] {
        b'$' if n >= 0 => {
            let mut body = vec![0u8; n as usize + 2];
            s.read_exact(&mut body).unwrap();
            out.extend_from_slice(&body);
        }
        b'*' => {
            for _ in 0..n.max(0) {
                out.extend_from_slice(&reply(s));
            }
        }
        _ => {}
    }
    out
}

pub fn call(s: &mut TcpStream, args: &[&[u8]]) -> Vec<u8> {
    s.write_all(&command(args)).unwrap();
    reply(s)
}

pub fn redis_tools() -> bool {
    let have = Command::new("redis-cli")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
        && Command::new("redis-benchmark")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if !have && std::env::var_os("LSM_BLOOM_REQUIRE_REDIS_TOOLS").is_some() {
        panic!("redis-cli / redis-benchmark not installed (apt-get install redis-tools)");
    }
    if !have {
        eprintln!(
            "note: redis-tools not installed; skipping the redis-cli and redis-benchmark part"
        );
    }
    have
}

pub fn cli(port: u16, args: &[&str], stdin: Option<&[u8]>) -> String {
    let mut c = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(stdin.unwrap_or_default())
        .unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

/// One call with a deadline; any failure (I/O, timeout, a malformed reply) is an error.
pub fn try_call(
    port: u16,
    conn: &mut Option<TcpStream>,
    args: &[&[u8]],
    wait: Duration,
) -> Result<Vec<u8>, String> {
    if conn.is_none() {
        let s = TcpStream::connect_timeout(&format!("127.0.0.1:{port}").parse().unwrap(), wait)
            .map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(wait)).map_err(|e| e.to_string())?;
        *conn = Some(s);
    }
    let s = conn.as_mut().unwrap();
    let r = s
        .write_all(&command(args))
        .map_err(|e| e.to_string())
        .and_then(|()| read_reply(s));
    if r.is_err() {
        *conn = None;
    }
    r
}

pub fn read_reply(s: &mut TcpStream) -> Result<Vec<u8>, String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            Ok(_) => return Err("closed".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
    if head[0] == b'$' || head[0] == b'*' {
        let n: i64 = std::str::from_utf8(&head[1..head.len() - 2])
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or("a bad length")?;
        if head[0] == b'*' {
            // An array: its elements follow, each a reply of its own.
            for _ in 0..n.max(0) {
                let item = read_reply(s)?;
                head.extend_from_slice(&item);
            }
        } else if n >= 0 {
            let mut body = vec![0u8; n as usize + 2];
            s.read_exact(&mut body).map_err(|e| e.to_string())?;
            head.extend_from_slice(&body);
        }
    }
    Ok(head)
}

/// The first of `candidates` that runs `probe` successfully (a client library installed).
fn runner(candidates: &[&str], probe: &[&str], env: &[(&str, String)]) -> Option<String> {
    candidates
        .iter()
        .find(|c| {
            Command::new(c)
                .args(probe)
                .envs(env.iter().cloned())
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(|c| c.to_string())
}

/// Runs the redis-py script `py` and the node-redis script `js` of `tests/clients/`, each
/// against a fresh server (`script PORT`; a failed check makes its exit status not 0).
/// Skipped when a library is missing, unless `LSM_BLOOM_REQUIRE_REDIS_CLIENTS` is set (as
/// `.ci/run`, which installs Debian's python3-redis and node-redis, sets it).
pub fn run_client_scripts(py: &str, js: &str) {
    let require = std::env::var_os("LSM_BLOOM_REQUIRE_REDIS_CLIENTS").is_some();
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients");
    let node_path = match std::env::var("NODE_PATH") {
        Ok(p) if !p.is_empty() => format!("{p}:/usr/share/nodejs:/usr/lib/nodejs"),
        _ => "/usr/share/nodejs:/usr/lib/nodejs".to_string(),
    };
    let node_env = [("NODE_PATH", node_path)];
    let clients = [
        (
            "redis-py",
            runner(
                &["/usr/bin/python3", "python3"],
                &["-c", "import redis"],
                &[],
            ),
            py,
            &[][..],
        ),
        (
            "node-redis",
            runner(&["node", "nodejs"], &["-e", "require('redis')"], &node_env),
            js,
            &node_env[..],
        ),
    ];
    for (name, run, script, env) in clients {
        let Some(run) = run else {
            assert!(
                !require,
                "{name} is not installed (apt-get install python3-redis node-redis)"
            );
            eprintln!("note: {name} not installed; skipping it");
            continue;
        };
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let server = start(dir.path(), port);
        let out = Command::new(&run)
            .arg(scripts.join(script))
            .arg(port.to_string())
            .envs(env.iter().cloned())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{name}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("{}", String::from_utf8_lossy(&out.stdout).trim());
        stop(server);
    }
}
