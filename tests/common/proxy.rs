//! A TCP proxy for one direction of one link between two nodes (the caller's connections to
//! the callee's raft port), which a test can cut, slow or black-hole: the network faults of
//! the nemesis runs. Threads, not async: the tests that use it drive processes.
//!
//! Modes: `Pass` copies bytes both ways; `Delay(ms)` holds each chunk that long before it
//! goes on; `Drop` reads and discards everything (the peer sees a link that went silent, not
//! closed); `Cut` closes every connection and accepts new ones only to close them.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the link does to its traffic now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Delay(u64),
    Drop,
    Cut,
}

impl Mode {
    fn encode(self) -> u64 {
        match self {
            Mode::Pass => 0,
            Mode::Drop => 1,
            Mode::Cut => 2,
            Mode::Delay(ms) => 3 + ms,
        }
    }

    fn decode(v: u64) -> Mode {
        match v {
            0 => Mode::Pass,
            1 => Mode::Drop,
            2 => Mode::Cut,
            ms => Mode::Delay(ms - 3),
        }
    }
}

/// One proxied link. Stops (and closes its connections) when dropped.
pub struct Proxy {
    pub addr: String,
    mode: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

/// How often a blocked read looks at the mode.
const POLL: Duration = Duration::from_millis(20);

impl Proxy {
    /// A proxy on a free loopback port to `upstream`.
    pub fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let mode = Arc::new(AtomicU64::new(Mode::Pass.encode()));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, st) = (mode.clone(), stop.clone());
        std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((down, _)) => {
                        if Mode::decode(m.load(Ordering::Relaxed)) == Mode::Cut {
                            continue; // closed as it drops
                        }
                        let Ok(up) = TcpStream::connect(&upstream) else {
                            continue;
                        };
                        for s in [&down, &up] {
                            let _ = s.set_nonblocking(false);
                            let _ = s.set_nodelay(true);
                            let _ = s.set_read_timeout(Some(POLL));
                        }
                        let (d2, u2) = (down.try_clone().unwrap(), up.try_clone().unwrap());
                        let (m1, m2, s1, s2) = (m.clone(), m.clone(), st.clone(), st.clone());
                        std::thread::spawn(move || pump(down, up, &m1, &s1));
                        std::thread::spawn(move || pump(u2, d2, &m2, &s2));
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(POLL),
                    Err(_) => std::thread::sleep(POLL),
                }
            }
        });
        Proxy { addr, mode, stop }
    }

    pub fn set(&self, mode: Mode) {
        self.mode.store(mode.encode(), Ordering::Relaxed);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Copies `from` to `to` under the mode; closes both when cut, stopped, or either end
/// closes. A delay is latency, not a rate: chunks are read as they come and each is written
/// its delay after it was read (a writer thread and a queue between).
fn pump(mut from: TcpStream, to: TcpStream, mode: &AtomicU64, stop: &AtomicBool) {
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let mut writer_end = to.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        for (due, chunk) in rx {
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if writer_end.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let m = Mode::decode(mode.load(Ordering::Relaxed));
        if m == Mode::Cut || stop.load(Ordering::Relaxed) || writer.is_finished() {
            break;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        let due = match Mode::decode(mode.load(Ordering::Relaxed)) {
            Mode::Pass => Instant::now(),
            Mode::Delay(ms) => Instant::now() + Duration::from_millis(ms),
            Mode::Drop => continue,
            Mode::Cut => break,
        };
        if tx.send((due, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
    drop(tx);
    let _ = writer.join();
}
