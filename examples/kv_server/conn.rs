//! One connection: read, parse (resumable, `resp.rs`), execute every complete request of a
//! pipeline, and write the replies as they are made. Memory a connection holds is bounded on
//! both sides:
//! - Input: the bytes a connection buffers beyond 64 KiB (arguments charged with their
//!   allocation, `resp::ARG_OVERHEAD`) are charged to one `Budget` shared by all connections
//!   (`--max-total-request-mib`), so the sum over clients is bounded, not just each client's
//!   `--max-request-mib`; a connection whose request would overrun it gets an error and is
//!   closed, and its charge is returned. Before AUTH the limits are `UNAUTHENTICATED`'s.
//! - Output: each reply is charged to a second shared `Budget` (`--max-total-output-mib`)
//!   before its bytes are held, beyond 64 KiB per connection; a stored value is encoded
//!   straight from where the store lends it (`values.rs`), so its size is charged before it is
//!   copied. Over the budget the connection gets an error and is closed, as Redis closes a
//!   client over its `client-output-buffer-limit`. Replies are gathered up to `OUT_FLUSH`
//!   bytes and then written, each `OUT_FLUSH` waiting at most `--write-timeout-secs` for a
//!   client that does not read (then the connection is closed); MGET's reply is written as it
//!   is made.
//! - Idle: with `--timeout N`, a connection that sends nothing for N seconds is closed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::commands::Server;
use super::resp::{Limits, Out, Parsed, Parser, Proto, ProtocolError, Reply, UNAUTHENTICATED};

/// A client's connection: plain TCP, or TLS over it (`--tls-port`, `tls.rs`). The TLS
/// handshake runs as the first reads and writes go.
pub enum Stream {
    Plain(TcpStream),
    #[cfg(feature = "tls")]
    Tls(Box<lsm_bloom::rustls::StreamOwned<lsm_bloom::rustls::ServerConnection, TcpStream>>),
}

impl Stream {
    /// Sends `reply` on a plain connection being turned away (a TLS one is just closed: its
    /// handshake has not run).
    pub fn refuse(self, reply: &[u8]) {
        match self {
            Stream::Plain(mut s) => {
                let _ = s.write_all(reply);
            }
            #[cfg(feature = "tls")]
            Stream::Tls(_) => {}
        }
    }

    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            #[cfg(feature = "tls")]
            Stream::Tls(s) => &s.sock,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// Reply bytes gathered before they are written: a pipeline's replies go out as they are
/// made, so a connection holds at most this plus the reply being made.
const OUT_FLUSH: usize = 64 * 1024;
/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 16 * 1024;
/// How a connection is served.
#[derive(Clone, Copy)]
pub struct Config {
    /// Parser limits once authenticated (or where no password is required).
    pub limits: Limits,
    /// Close a connection idle this long (`--timeout`; `None`: never).
    pub idle: Option<Duration>,
    /// How long one write may wait for a client that does not read.
    pub write_timeout: Duration,
}

/// Bytes each connection may buffer without drawing on the shared budget.
const FREE_PER_CONNECTION: usize = 64 * 1024;

/// Request (or reply) bytes buffered by all connections together.
pub struct Budget {
    limit: usize,
    /// Shared with `Server::request_bytes` (or `output_bytes`), which INFO reports.
    used: Arc<AtomicUsize>,
}

impl Budget {
    pub fn new(limit: usize, used: Arc<AtomicUsize>) -> Budget {
        Budget { limit, used }
    }

    fn try_take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|&t| t <= self.limit)
            })
            .is_ok()
    }

    fn give(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// One connection's share of the budget; returned when dropped.
struct Charge<'a> {
    budget: &'a Budget,
    held: usize,
}

impl Charge<'_> {
    /// Charges for `bytes` buffered; false if the budget cannot cover it.
    fn set(&mut self, bytes: usize) -> bool {
        let want = bytes.saturating_sub(FREE_PER_CONNECTION);
        if want == self.held {
            // Nothing to move: no write to the counter every connection shares.
            return true;
        }
        if want > self.held {
            if !self.budget.try_take(want - self.held) {
                return false;
            }
        } else {
            self.budget.give(self.held - want);
        }
        self.held = want;
        true
    }
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        self.budget.give(self.held);
    }
}

/// A run of pipelined SETs is committed once it holds this many key and value bytes (well
/// under the store's batch limit, and a bounded cost for one failed commit).
const SET_RUN_BYTES: usize = 1 << 20;

/// Replies on their way to the client (see the module docs).
struct Output<'a> {
    stream: Stream,
    /// The stream's write timeout (asking the socket costs a system call per write).
    timeout: Duration,
    buf: Vec<u8>,
    charge: Charge<'a>,
    /// A reply the output budget could not hold was refused: nothing more is appended, and
    /// the connection is closed after an error (`refuse`).
    refused: bool,
    /// Bytes a reply being made holds outside `buf` (`Out::hold`), charged with it.
    making: usize,
}

impl Out for Output<'_> {
    fn reply(&mut self, reply: &Reply, proto: Proto) -> bool {
        if !self.room(reply.encoded_len(proto)) {
            return false;
        }
        reply.encode(proto, &mut self.buf);
        self.making = 0;
        true
    }

    fn bulk(&mut self, value: &[u8]) -> bool {
        let head = format!("${}\r\n", value.len());
        if !self.room(head.len() + value.len() + 2) {
            return false;
        }
        self.buf.extend_from_slice(head.as_bytes());
        self.buf.extend_from_slice(value);
        self.buf.extend_from_slice(b"\r\n");
        true
    }

    fn array(&mut self, len: usize) -> bool {
        let head = format!("*{len}\r\n");
        if !self.room(head.len()) {
            return false;
        }
        self.buf.extend_from_slice(head.as_bytes());
        true
    }

    fn hold(&mut self, bytes: usize) -> bool {
        if !self.room(bytes) {
            return false;
        }
        self.making += bytes;
        true
    }

    fn mark(&self) -> usize {
        self.buf.len()
    }

    fn undo(&mut self, mark: usize) {
        self.buf.truncate(mark);
    }

    fn gathered(&mut self) -> std::io::Result<()> {
        if !self.refused && self.buf.len() >= OUT_FLUSH {
            self.send()?;
        }
        Ok(())
    }
}

impl Output<'_> {
    /// Charges the output budget for `more` bytes on top of what is gathered, and makes room
    /// for them: past `OUT_FLUSH` exactly (a `Vec` left to grow by doubling could hold up to
    /// twice what was charged), below it by doubling (small replies one after another would
    /// otherwise reallocate each time). False, and `refused` set, when the budget cannot hold
    /// them.
    fn room(&mut self, more: usize) -> bool {
        if self.refused {
            return false;
        }
        let total = self.buf.len().saturating_add(more);
        if !self.charge.set(total.saturating_add(self.making)) {
            self.refused = true;
            return false;
        }
        if total > OUT_FLUSH {
            self.buf.reserve_exact(more);
        } else {
            self.buf.reserve(more);
        }
        true
    }

    /// After a refusal: drops what is gathered, writes the error in its place, and returns
    /// (the caller closes the connection), as Redis closes a client over its
    /// `client-output-buffer-limit`.
    fn refuse(&mut self, proto: Proto) -> std::io::Result<()> {
        self.buf.clear();
        self.charge.set(0);
        Reply::err(
            "server output memory budget exhausted (--max-total-output-mib): closing this \
             connection; read replies sooner, or retry later",
        )
        .encode(proto, &mut self.buf);
        self.send()
    }

    /// Writes what is gathered and returns its memory past `OUT_FLUSH` and its charge. Each
    /// `OUT_FLUSH` bytes must be taken by the client within the write timeout, or this fails
    /// (`TimedOut`) and the connection closes: a client reading a few bytes now and then
    /// would otherwise keep a reply, and its memory, for as long as it liked (the socket's
    /// own timeout restarts on every bit of progress).
    fn send(&mut self) -> std::io::Result<()> {
        let timeout = self.timeout;
        for piece in self.buf.chunks(OUT_FLUSH) {
            let start = Instant::now();
            let mut at = 0;
            while at < piece.len() {
                match self.stream.write(&piece[at..]) {
                    Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                    Ok(n) => at += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
                if at < piece.len() && start.elapsed() >= timeout {
                    return Err(std::io::ErrorKind::TimedOut.into());
                }
            }
        }
        // TLS holds written bytes until a flush; plain TCP has none to hold.
        self.stream.flush()?;
        self.buf.clear();
        self.buf.shrink_to(OUT_FLUSH);
        self.charge.set(0);
        Ok(())
    }
}

pub fn serve(
    stream: Stream,
    server: &Server,
    stop: &AtomicBool,
    config: Config,
    budget: &Budget,
    output_budget: &Budget,
) -> std::io::Result<()> {
    let tcp = stream.tcp();
    tcp.set_nodelay(true)?;
    tcp.set_read_timeout(Some(Duration::from_millis(200)))?;
    tcp.set_write_timeout(Some(config.write_timeout))?;
    let mut out = Output {
        stream,
        timeout: config.write_timeout,
        buf: Vec::new(),
        charge: Charge {
            budget: output_budget,
            held: 0,
        },
        refused: false,
        making: 0,
    };
    let mut session = server.session();
    let mut parser = Parser::default();
    let mut charge = Charge { budget, held: 0 };
    let mut buf: Vec<u8> = Vec::new();
    let mut last_read = Instant::now();
    loop {
        // Answer every complete request already buffered (a pipeline), each reply gathered
        // and written once `OUT_FLUSH` is reached. Runs of plain SETs (and counter commands)
        // are committed as one batch (`Server::set_many`): measured with redis-benchmark -P 16,
        // one commit per SET queued 50 connections on the store's writer, SET at 230k-280k
        // requests/s against 480k before group commit.
        let mut consumed = 0;
        let mut open = true;
        let mut sets: Vec<Vec<Vec<u8>>> = Vec::new();
        loop {
            // Until the client authenticates (where a password is required), the small limits.
            let now = if session.authed {
                config.limits
            } else {
                UNAUTHENTICATED
            };
            match parser.feed(&buf[consumed..], &now) {
                Ok((used, Parsed::Request(args))) => {
                    consumed += used;
                    if args.is_empty() {
                        continue;
                    }
                    if Server::is_batchable(&session, &args) {
                        sets.push(args);
                        let bytes: usize = sets.iter().flatten().map(Vec::len).sum();
                        if bytes >= SET_RUN_BYTES {
                            server.set_many(&mut sets, &mut out, &session);
                        }
                    } else {
                        server.set_many(&mut sets, &mut out, &session);
                        open = server.execute(&mut session, args, &mut out)?;
                    }
                    if out.refused {
                        break;
                    }
                    out.gathered()?;
                    if !open {
                        break;
                    }
                }
                Ok((used, Parsed::Incomplete)) => {
                    consumed += used;
                    break;
                }
                Err(ProtocolError(msg)) => {
                    // Replies stay in order.
                    server.set_many(&mut sets, &mut out, &session);
                    out.reply(&Reply::err(format!("Protocol error: {msg}")), session.proto);
                    open = false;
                    break;
                }
            }
        }
        server.set_many(&mut sets, &mut out, &session);
        if out.refused {
            return out.refuse(session.proto);
        }
        buf.drain(..consumed);
        if buf.capacity() > 4 * READ_CHUNK && buf.len() < READ_CHUNK {
            buf.shrink_to(READ_CHUNK);
        }
        if open && !charge.set(buf.len() + parser.held()) {
            out.reply(
                &Reply::err(
                    "server request memory budget exhausted (--max-total-request-mib): closing \
                     this connection; retry later",
                ),
                session.proto,
            );
            open = false;
        }
        out.send()?;
        if !open {
            return Ok(());
        }
        let at = buf.len();
        buf.resize(at + READ_CHUNK, 0);
        let read = out.stream.read(&mut buf[at..]);
        buf.truncate(at + *read.as_ref().unwrap_or(&0));
        match read {
            Ok(0) => return Ok(()), // client closed (possibly mid-request: nothing was applied)
            Ok(_) => last_read = Instant::now(),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if stop.load(Ordering::Relaxed)
                    || config.idle.is_some_and(|idle| last_read.elapsed() >= idle)
                {
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_shared_and_returned() {
        let b = Budget::new(100, Arc::default());
        let mut a = Charge {
            budget: &b,
            held: 0,
        };
        let mut c = Charge {
            budget: &b,
            held: 0,
        };
        assert!(a.set(FREE_PER_CONNECTION + 60));
        assert!(!c.set(FREE_PER_CONNECTION + 60), "over the shared limit");
        assert!(c.set(FREE_PER_CONNECTION + 40));
        assert!(a.set(10)); // a's request completed: its charge is returned
        assert!(c.set(FREE_PER_CONNECTION + 100));
        drop(c);
        assert_eq!(b.used.load(Ordering::Relaxed), 0);
    }
}
