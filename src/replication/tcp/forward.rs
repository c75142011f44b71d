//! Writes and linearizable reads from any node of a TCP cluster: a follower forwards a write
//! to the leader over the leader's raft port, and asks the leader for a read index before it
//! reads locally (FORMAT.md §8, messages 4 and 5).
//!
//! Idle connections are pooled, one per leader, and reused only while fresh: one idle past
//! `POOL_IDLE` (under the server's `IDLE`, after which it closes them), or one with anything
//! to read (the server's close, say), is dropped instead of being handed out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use super::{CallError, Conn, PeerAuth, TcpLink, TransportStats};
use crate::replication::wire::{self, Response};
use crate::replication::{Error, NodeId, ReplicatedDb, Request, Result};

/// Writes and linearizable reads from any node: a follower forwards a write to the leader
/// over its raft port, and asks it for a read index before reading locally. Keeps idle
/// connections per leader, authenticated as its `PeerAuth` says.
pub struct Forwarder {
    auth: PeerAuth,
    /// Calls in flight, each on a connection of its own: at most `MAX_FORWARDS`, under the
    /// leader's `MAX_PER_PEER`, which counts this node's raft connections too.
    inflight: tokio::sync::Semaphore,
    idle: tokio::sync::Mutex<Vec<Pooled>>,
    stats: Arc<TransportStats>,
}

/// An idle connection to a leader, and since when it is idle.
struct Pooled {
    target: NodeId,
    addr: String,
    conn: Conn,
    since: Instant,
}

/// How long a pooled connection may stay idle and still be used (the server closes a
/// connection idle for `IDLE`, 300 s).
const POOL_IDLE: Duration = Duration::from_secs(60);
/// Idle connections kept.
const POOL_SIZE: usize = 16;
/// Forwarded calls in flight at once; more wait their turn.
pub const MAX_FORWARDS: usize = 48;

/// Whether a pooled connection may carry a call: nothing to read on it (an answer never
/// owed, or the server's close) and not idle too long.
fn fresh(p: &Pooled) -> bool {
    if p.since.elapsed() > POOL_IDLE {
        return false;
    }
    let tcp = match &p.conn {
        Conn::Plain(s) => s,
        Conn::Tls(s) => s.get_ref().0,
    };
    let mut b = [0u8; 1];
    // Pending: open and quiet. Ready (bytes, end of stream or an error): not reusable.
    tcp.peek(&mut b).now_or_never().is_none()
}

/// Redirects followed before a forwarded call gives up (leaders changing underneath).
const MAX_HOPS: usize = 3;

impl Forwarder {
    /// A forwarder with no connections yet, calling as `auth`.
    pub fn new(auth: PeerAuth) -> Forwarder {
        Forwarder {
            auth,
            inflight: tokio::sync::Semaphore::new(MAX_FORWARDS),
            idle: tokio::sync::Mutex::default(),
            stats: Arc::default(),
        }
    }

    /// Its counters.
    pub fn stats(&self) -> &TransportStats {
        &self.stats
    }

    /// `node.write(request)`, forwarded to the leader when `node` is not it.
    pub async fn write(&self, node: &ReplicatedDb, request: Request) -> Result<()> {
        match node.write(request.clone()).await {
            Err(Error::NotLeader {
                leader: Some((id, addr)),
            }) => {
                let (mut id, mut addr) = (id, addr);
                for _ in 0..MAX_HOPS {
                    match self
                        .call(id, &addr, &wire::encode_forward(&request), node.timeout())
                        .await?
                    {
                        Response::Forwarded => return Ok(()),
                        Response::NotLeader(Some((i, a))) if a != addr => (id, addr) = (i, a),
                        Response::NotLeader(leader) => return Err(Error::NotLeader { leader }),
                        Response::Failed(m) => return Err(Error::Raft(m)),
                        _ => {
                            return Err(Error::Raft(format!(
                                "{addr} answered a forwarded write wrongly"
                            )))
                        }
                    }
                }
                Err(Error::NotLeader { leader: None })
            }
            r => r,
        }
    }

    /// Waits until a linearizable read may be served from `node`'s local state: the leader
    /// confirms itself (read index), on a follower through the leader's raft port, and
    /// `node` applies up to that index.
    pub async fn read_barrier(&self, node: &ReplicatedDb) -> Result<()> {
        match node.read_index().await {
            Ok(_) => Ok(()),
            Err(Error::NotLeader {
                leader: Some((id, addr)),
            }) => match self
                .call(id, &addr, &wire::encode_read_index(), node.timeout())
                .await?
            {
                Response::ReadIndex(id) => node.wait_applied(id.map(|i| i.index)).await,
                Response::NotLeader(leader) => Err(Error::NotLeader { leader }),
                Response::Failed(m) => Err(Error::Raft(m)),
                _ => Err(Error::Raft(format!(
                    "{addr} answered a read index request wrongly"
                ))),
            },
            Err(e) => Err(e),
        }
    }

    async fn call(
        &self,
        target: NodeId,
        addr: &str,
        payload: &[u8],
        ttl: Duration,
    ) -> Result<Response> {
        let _turn = tokio::time::timeout(ttl, self.inflight.acquire())
            .await
            .map_err(|_| Error::Timeout(ttl))?
            .map_err(|_| Error::Raft("the forwarder is closed".into()))?;
        let idle = {
            let mut pool = self.idle.lock().await;
            pool.retain(fresh);
            pool.iter()
                .position(|p| p.target == target && p.addr == addr)
                .map(|i| pool.swap_remove(i).conn)
        };
        let mut link = TcpLink {
            target,
            addr: addr.to_owned(),
            auth: self.auth.clone(),
            stream: idle,
            stats: Arc::clone(&self.stats),
        };
        // A call that failed may have reached the leader (a write may be applied); one that
        // could not connect did not.
        let r = link.call(payload, ttl).await.map_err(|e| match e {
            CallError::Unreachable(e) => {
                Error::Unreachable(format!("node {target} at {addr}: {e}"))
            }
            CallError::Network(e) => Error::Interrupted(format!("node {target} at {addr}: {e}")),
        })?;
        if let Some(conn) = link.stream.take() {
            let mut pool = self.idle.lock().await;
            if pool.len() < POOL_SIZE {
                pool.push(Pooled {
                    target,
                    addr: addr.to_owned(),
                    conn,
                    since: Instant::now(),
                });
            }
        }
        Ok(r)
    }
}
