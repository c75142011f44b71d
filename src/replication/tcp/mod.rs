//! The Raft RPCs over TCP on tokio: [`RaftServer`] (here) answers a node's incoming calls,
//! [`TcpNetwork`] (`link.rs`) makes its outgoing ones, [`Forwarder`] (`forward.rs`) carries a
//! follower's writes and read index requests to the leader. Every connection authenticates
//! first ([`PeerAuth`], `auth.rs`: mutual TLS and a hello). Frames and messages are `wire`
//! (FORMAT.md §8).
//!
//! One connection per peer and direction, one call at a time on it (openraft calls each
//! peer's link in turn). Every read and write has a deadline: the caller's RPC time-to-live
//! on the client, fixed ones on the server, each grown by the bytes it covers (`allowance`). A peer that sends anything malformed — a frame
//! over `MAX_FRAME`, a checksum that fails, a message that does not decode — has its
//! connection closed and is counted; nothing panics. The server's memory is bounded: at
//! most `MAX_CONNECTIONS` connections, of which `MAX_HANDSHAKING` still authenticating
//! (`MAX_HANDSHAKING_PER_IP` from one address) and `MAX_PER_PEER` of one node; nothing is
//! decoded and no budget is held before a peer authenticates (`auth.rs`). Frame payloads are
//! read against one shared budget of `READ_BUDGET` bytes, reserved `READ_CHUNK` bytes at a
//! time as they arrive, and refused from their first bytes when longer than their message
//! ever is (`wire::max_request`); a request's share of the budget is released only when it
//! is answered (a pipelined append's too), so requests waiting or being handled are bounded
//! by it as well.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

mod auth;
mod forward;
pub(crate) mod hello;
mod limits;
mod link;
mod pipeline;
mod stats;

pub use auth::{node_of, Conn, PeerAuth, HANDSHAKE, NODE_URI};
pub use forward::Forwarder;
pub use link::{TcpLink, TcpNetwork};
use stats::{bump, Tally};
pub use stats::{PeerKey, PeerStats, Traffic, TransportStats, MAX_PEERS};

pub use hello::{MAX_CLUSTER_ID, PROTOCOL_VERSION};
use link::CallError;
/// The rustls this transport is built with, for `PeerAuth::tls`'s configurations.
pub use rustls;

use super::receive::ChunkAnswer;
use super::service::RaftService;
use super::wire::{self, Request, Response, FRAME_HEADER, MAX_FRAME};
use super::Error;

/// Connections a server holds at once; more are closed on arrival (counted).
pub const MAX_CONNECTIONS: usize = 256;
/// Connections still in their handshake; more are closed on arrival (counted). Each is
/// closed after `HANDSHAKE` at the latest.
pub const MAX_HANDSHAKING: usize = 64;
/// Connections in their handshake from one IP address.
pub const MAX_HANDSHAKING_PER_IP: usize = 16;
/// Authenticated connections of one node (its calls, streams and forwarded requests).
pub const MAX_PER_PEER: usize = 64;
/// Bytes of the read budget reserved at a time as a payload arrives.
pub const READ_CHUNK: usize = 64 << 10;
/// Payloads up to this size are read without the read budget: a heartbeat or a vote never
/// waits behind large frames. Bounded all the same: one frame per connection being read, and
/// up to 64 appends taken on a pipelined stream (256 connections: 64 MiB at the very most).
const SMALL_FRAME: usize = 4 << 10;
/// Bytes of frame payloads all of a server's connections may hold at once.
pub const READ_BUDGET: usize = 2 * MAX_FRAME;
/// How long a server waits for the next frame on an idle connection.
const IDLE: Duration = Duration::from_secs(300);
/// How long a server waits for the rest of a frame, or to write an answer, beyond the
/// frame's `allowance`.
const TRANSFER: Duration = Duration::from_secs(30);
/// The slowest rate, in bytes a second, at which a deadline lets a frame be sent, received
/// and stored: every deadline here grows by `allowance(bytes)` for the bytes it covers. A
/// fixed one (openraft's RPC time-to-live is the 100 ms heartbeat interval) cut off each
/// append of a 60 MiB value part-way and sent it again, for good, while heartbeats went on
/// succeeding. At 8 MiB/s a 63 MiB request gets 7.9 s; the same request took about 1 s
/// end to end on loopback here (sent, fsynced by a follower, answered).
pub const SLOWEST_RATE: u64 = 8 << 20;

/// The time `bytes` take at `SLOWEST_RATE`.
pub(crate) fn allowance(bytes: usize) -> Duration {
    Duration::from_micros((bytes as u64).saturating_mul(1_000_000) / SLOWEST_RATE)
}

/// Serves a node's Raft on a TCP address. Stops when dropped.
pub struct RaftServer {
    addr: SocketAddr,
    stats: Arc<TransportStats>,
    tasks: JoinSet<()>,
}

impl RaftServer {
    /// Listens on `addr` and hands every incoming call to `node`, from callers that
    /// authenticate as `auth` says.
    pub async fn bind(
        addr: impl ToSocketAddrs,
        node: impl RaftService,
        auth: PeerAuth,
    ) -> io::Result<RaftServer> {
        RaftServer::serve(TcpListener::bind(addr).await?, node, auth)
    }

    /// Serves `node` on a listener already bound (a node must know its address before it
    /// exists: bind first, open the node, then serve). Plain TCP serves loopback only.
    pub fn serve(
        listener: TcpListener,
        node: impl RaftService,
        auth: PeerAuth,
    ) -> io::Result<RaftServer> {
        let addr = listener.local_addr()?;
        auth.may_serve(addr)?;
        let stats = Arc::new(TransportStats::default());
        let mut tasks = JoinSet::new();
        tasks.spawn(accept_loop(listener, node, auth, Arc::clone(&stats)));
        Ok(RaftServer { addr, stats, tasks })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its counters.
    pub fn stats(&self) -> &TransportStats {
        &self.stats
    }

    /// Stops accepting and closes every connection (they finish closing in the background).
    pub fn stop(&mut self) {
        self.tasks.abort_all();
    }

    /// Stops accepting, closes every connection, and returns once the listener is closed
    /// (its address may be bound again).
    pub async fn shutdown(&mut self) {
        self.tasks.shutdown().await;
    }
}

async fn accept_loop(
    listener: TcpListener,
    node: impl RaftService,
    auth: PeerAuth,
    stats: Arc<TransportStats>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let budget = Arc::new(Semaphore::new(READ_BUDGET));
    let limits = Arc::new(limits::Limits::default());
    let mut conns = JoinSet::new();
    loop {
        let Ok((stream, from)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        while conns.try_join_next().is_some() {}
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            bump(&stats.refused);
            continue;
        };
        let Some(handshaking) = limits::Handshaking::enter(&limits, from.ip()) else {
            bump(&stats.refused);
            continue;
        };
        bump(&stats.accepted);
        let (node, stats, budget) = (node.clone(), Arc::clone(&stats), Arc::clone(&budget));
        let (auth, limits) = (auth.clone(), Arc::clone(&limits));
        conns.spawn(async move {
            let _slot = slot;
            // Nothing the peer sends is decoded, and no budget is held, before it has
            // authenticated.
            let accepted = tokio::time::timeout(HANDSHAKE, auth.accept(stream)).await;
            drop(handshaking);
            let (conn, peer) = match accepted {
                Ok(Ok(c)) => c,
                _ => {
                    // DEBUG, not WARN: anyone who reaches the port can cause one.
                    tracing::debug!(%from, "raft connection refused: its handshake failed or timed out");
                    bump(&stats.refused_handshakes);
                    return;
                }
            };
            let Some(_peer_slot) = limits::PeerSlot::enter(&limits, peer) else {
                bump(&stats.refused);
                return;
            };
            let tally = stats.tally(peer);
            tally.connected();
            if serve(conn, &node, &tally, &budget).await == Closed::Bad {
                tracing::warn!(peer, %from, "malformed frame from an authenticated peer: connection closed");
                tally.bad_frame();
            }
        });
    }
}

#[derive(PartialEq, Eq)]
enum Closed {
    /// The peer closed, went idle, or was too slow.
    Quietly,
    /// The peer sent something malformed.
    Bad,
}

/// A share of the server's read budget, held while the request read with it lives.
type Permit = Option<OwnedSemaphorePermit>;

/// Reads one frame's payload (its header already read), checksum verified. With a
/// `budget` (the server's side), the payload's bytes are reserved from it `READ_CHUNK` at a
/// time as they arrive, so a peer that announces a long frame and sends nothing holds one
/// chunk at most; and a request longer than its tag's `wire::max_request` is refused after
/// its first chunk. The permit returned covers the payload: the caller keeps it until it is
/// done with the request decoded from it.
async fn read_payload(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    header: &[u8; FRAME_HEADER],
    budget: Option<&Arc<Semaphore>>,
) -> Result<(Vec<u8>, Permit), Closed> {
    let (len, crc) = wire::frame_header(header).map_err(|_| Closed::Bad)?;
    let deadline = tokio::time::Instant::now() + TRANSFER + allowance(len);
    let mut permit: Permit = None;
    let mut buf = Vec::new();
    // A small frame (a heartbeat, a vote, a read index) takes no share: it never waits behind
    // large ones, and all connections together hold at most MAX_CONNECTIONS of them.
    let server = budget.is_some();
    let budget = budget.filter(|_| len > SMALL_FRAME);
    while buf.len() < len {
        let n = (len - buf.len()).min(READ_CHUNK);
        if let Some(b) = budget {
            let take = Arc::clone(b).acquire_many_owned(u32::try_from(n).unwrap_or(u32::MAX));
            let got = tokio::time::timeout_at(deadline, take)
                .await
                .map_err(|_| Closed::Quietly)?
                .map_err(|_| Closed::Quietly)?;
            match &mut permit {
                Some(p) => p.merge(got),
                None => permit = Some(got),
            }
        }
        let start = buf.len();
        buf.resize(start + n, 0);
        match tokio::time::timeout_at(deadline, stream.read_exact(&mut buf[start..])).await {
            Ok(Ok(_)) => {}
            _ => return Err(Closed::Quietly),
        }
        if server && start == 0 && len > wire::max_request(buf[0]) {
            return Err(Closed::Bad);
        }
    }
    if crc32fast::hash(&buf) != crc {
        return Err(Closed::Bad);
    }
    Ok((buf, permit))
}

/// Reads a server connection's next request frame: its header within `IDLE` (a peer silent
/// that long is closed quietly), then its payload against `budget`.
async fn read_request(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    budget: &Arc<Semaphore>,
) -> Result<(Vec<u8>, Permit), Closed> {
    let mut header = [0u8; FRAME_HEADER];
    match tokio::time::timeout(IDLE, stream.read_exact(&mut header)).await {
        Ok(Ok(_)) => read_payload(stream, &header, Some(budget)).await,
        _ => Err(Closed::Quietly),
    }
}

async fn serve(
    mut stream: Conn,
    node: &impl RaftService,
    tally: &Tally,
    budget: &Arc<Semaphore>,
) -> Closed {
    loop {
        // The permit is held until the answer is written: a request decoded from a frame
        // weighs about what the frame did.
        let (payload, _permit) = match read_request(&mut stream, budget).await {
            Ok(p) => p,
            Err(c) => return c,
        };
        let Ok(request) = wire::decode_request(&payload) else {
            return Closed::Bad;
        };
        tally.frame_in(FRAME_HEADER + payload.len());
        drop(payload);
        let response = match request {
            Request::Append(r) => match node.append_entries(r).await {
                Ok(a) => Response::Append(a),
                Err(e) => Response::Failed(e),
            },
            Request::Vote(r) => match node.vote(r).await {
                Ok(v) => Response::Vote(v),
                Err(e) => Response::Failed(e),
            },
            Request::Snapshot(r) => match node.install_snapshot_chunk(r).await {
                Ok(ChunkAnswer::Taken(vote)) => Response::Snapshot(vote),
                Ok(ChunkAnswer::Mismatch { expect, got }) => {
                    Response::SnapshotMismatch { expect, got }
                }
                Err(e) => Response::Failed(e),
            },
            Request::Forward(r) => match node.write(r).await {
                Ok(answers) => forwarded(answers),
                Err(e) => error_response(e),
            },
            Request::Stream => return pipeline::serve(stream, node, tally, budget).await,
            Request::ReadIndex => match node.read_index().await {
                Ok(id) => Response::ReadIndex(id),
                Err(e) => error_response(e),
            },
        };
        let out = wire::frame(&wire::encode_response(&response));
        match tokio::time::timeout(TRANSFER, write_frame(&mut stream, &out)).await {
            Ok(Ok(())) => tally.frame_out(out.len()),
            _ => return Closed::Quietly,
        }
    }
}

/// Writes a whole frame and flushes it (TLS holds written bytes until a flush).
async fn write_frame(stream: &mut (impl AsyncWriteExt + Unpin), frame: &[u8]) -> io::Result<()> {
    stream.write_all(frame).await?;
    stream.flush().await
}

/// A forwarded write's answer, unless its calls' answers would not fit a frame: then a
/// failure saying so (the write was applied).
fn forwarded(answers: Vec<Option<Vec<u8>>>) -> Response {
    let size: usize = answers.iter().flatten().map(|a| a.len() + 5).sum();
    if size + 16 > wire::MAX_FRAME {
        return Response::Failed(format!(
            "the write was applied, but its answers ({size} bytes) do not fit a frame"
        ));
    }
    Response::Forwarded(answers)
}

fn error_response(e: Error) -> Response {
    match e {
        Error::NotLeader { leader } => Response::NotLeader(leader),
        e => Response::Failed(e.to_string()),
    }
}
