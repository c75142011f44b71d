//! A `redis-server` beside a `kv_server`, for tests that compare their replies byte for byte.
//! Needs `redis-server` (`apt-get install redis-server`): `pair` is `None` without it, unless
//! `LSM_BLOOM_REQUIRE_REDIS_SERVER=1` (as `.ci/run` sets), which makes its absence a failure.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::kv::{connect, free_port, start, Server};

/// A `redis-server` on `port`, without persistence; killed when dropped.
pub struct Redis(Child);

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `redis-server` on a free port, or `None` when it is not installed (a failure when
/// `LSM_BLOOM_REQUIRE_REDIS_SERVER` is set).
pub fn redis() -> Option<(Redis, u16)> {
    let port = free_port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(child) = child else {
        assert!(
            std::env::var_os("LSM_BLOOM_REQUIRE_REDIS_SERVER").is_none(),
            "redis-server not installed (apt-get install redis-server)"
        );
        eprintln!("note: redis-server not installed; skipping the comparison with Redis");
        return None;
    };
    let redis = Redis(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((redis, port))
}

/// A `kv_server` on `dir` and a `redis-server`, each with a connection.
pub struct Pair {
    pub redis: Redis,
    pub server: Server,
    pub ours: TcpStream,
    pub theirs: TcpStream,
    /// The `kv_server`'s port and `redis-server`'s, for more connections.
    pub ports: (u16, u16),
}

/// Both servers started (`None` without `redis-server`, as `redis` says).
pub fn pair(dir: &std::path::Path) -> Option<Pair> {
    let (redis, redis_port) = redis()?;
    let port = free_port();
    let server = start(dir, port);
    let (ours, theirs) = (connect(port), connect(redis_port));
    Some(Pair {
        redis,
        server,
        ours,
        theirs,
        ports: (port, redis_port),
    })
}
