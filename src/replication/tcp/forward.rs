//! Writes and linearizable reads from any node of a TCP cluster: a follower forwards a write
//! to the leader over the leader's raft port, and asks the leader for a read index before it
//! reads locally (FORMAT.md §8, messages 4 and 5).
//!
//! Idle connections are pooled, one per leader, and reused only while fresh: one idle past
//! `POOL_IDLE` (under the server's `IDLE`, after which it closes them), or one with anything
//! to read (the server's close, say), is dropped instead of being handed out.
//!
//! **Exactly once.** Each forwarded write carries a [`WriteId`]: this forwarder's session
//! (random), the write's number, and the lowest number still waiting for its answer. When
//! the leader answers that another node leads now (openraft says so also for an entry it
//! appended and may yet commit), or the call breaks off after it was sent, the write is sent
//! again under the same id — to the new leader, or once more on a fresh connection — and
//! the state machine applies whichever copy reaches the log first and skips the others
//! (`state_machine/sessions.rs`).

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use super::{CallError, Conn, PeerAuth, TcpLink, TransportStats};
use crate::replication::wire::{self, Response};
use crate::replication::{Error, NodeId, Part, ReplicatedDb, Request, Result, WriteId};

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
    /// This forwarder's write session (`WriteId::session`).
    session: u64,
    next_seq: AtomicU64,
    /// Numbers of the forwarded writes not answered to their callers yet.
    unsettled: Mutex<BTreeSet<u64>>,
}

/// A write's number, unsettled until dropped (answered, or its caller gone).
struct Unsettled<'a> {
    fwd: &'a Forwarder,
    seq: u64,
}

impl<'a> Unsettled<'a> {
    fn new(fwd: &'a Forwarder) -> Unsettled<'a> {
        let seq = fwd.next_seq.fetch_add(1, Ordering::Relaxed);
        fwd.unsettled().insert(seq);
        Unsettled { fwd, seq }
    }

    /// `request` as one write under this number's id.
    fn tag(&self, request: Request) -> Request {
        let settled_below = self.fwd.unsettled().first().copied().unwrap_or(self.seq);
        let ops = u32::try_from(request.ops.len()).unwrap_or(u32::MAX);
        Request {
            ops: request.ops,
            parts: vec![Part {
                id: Some(WriteId {
                    session: self.fwd.session,
                    seq: self.seq,
                    settled_below,
                }),
                ops,
            }],
        }
    }
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        self.fwd.unsettled().remove(&self.seq);
    }
}

/// A session id no other forwarder draws: the process's random hash keys (std draws them
/// from the OS), over the time, the process id and a counter.
fn new_session() -> u64 {
    static DRAWN: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    std::time::SystemTime::now().hash(&mut h);
    std::process::id().hash(&mut h);
    DRAWN.fetch_add(1, Ordering::Relaxed).hash(&mut h);
    h.finish()
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
            session: new_session(),
            next_seq: AtomicU64::new(0),
            unsettled: Mutex::default(),
        }
    }

    fn unsettled(&self) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
        self.unsettled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Its counters.
    pub fn stats(&self) -> &TransportStats {
        &self.stats
    }

    /// `node.write(request)`, forwarded to the leader when `node` is not it, under one
    /// write id however often it is sent (module comment): tried here when `node` leads (or
    /// knows no leader), then sent to the leader a "not the leader" answer names (at most
    /// `MAX_HOPS` times), and once more on a fresh connection when a call breaks off after it
    /// was sent. The local try carries the id too: a leader that appended the write and then
    /// lost the leadership answers "not the leader", and its entry may still commit.
    ///
    /// Memory: on a follower the request is encoded once, straight into its frame (no copy
    /// for a local try); a leader copies it once for the try.
    pub async fn write(&self, node: &ReplicatedDb, request: Request) -> Result<()> {
        self.write_answered(node, request).await.map(drop)
    }

    /// [`Forwarder::write`], answering each [`Op::Call`](crate::replication::Op::Call) of
    /// `request` in order (`ReplicatedDb::write_answered`). When a copy sent again found
    /// its write applied before, the first copy's answers are lost: `Error::Interrupted`.
    pub async fn write_answered(
        &self,
        node: &ReplicatedDb,
        request: Request,
    ) -> Result<Vec<Vec<u8>>> {
        let calls = request.calls();
        let answers = self.send(node, request).await?;
        if answers.len() != calls || answers.iter().any(Option::is_none) {
            return Err(Error::Interrupted(
                "the write was applied by an earlier copy; its answers were lost".into(),
            ));
        }
        Ok(answers.into_iter().flatten().collect())
    }

    /// Sends `request` (`Forwarder::write`), answering its calls' answers.
    async fn send(&self, node: &ReplicatedDb, request: Request) -> Result<Vec<Option<Vec<u8>>>> {
        let number = Unsettled::new(self);
        let tagged = number.tag(request);
        // Refused here as the leader would refuse it (its id counts toward the size).
        tagged
            .validate()
            .map_err(|m| Error::Store(crate::Error::InvalidArgument(m)))?;
        let (mut id, mut addr) = match node.leader_addr() {
            Some((id, addr)) if id != node.id() => (id, addr),
            _ => match node.write_answered(tagged.clone()).await {
                Err(Error::NotLeader {
                    leader: Some((id, addr)),
                }) => (id, addr),
                r => return r,
            },
        };
        let frame = wire::forward_frame(&tagged);
        drop(tagged);
        let mut resent = false;
        for _ in 0..MAX_HOPS {
            match self.call(id, &addr, &frame, node.timeout()).await {
                Ok(Response::Forwarded(answers)) => return Ok(answers),
                Ok(Response::NotLeader(Some((i, a)))) if a != addr => (id, addr) = (i, a),
                Ok(Response::NotLeader(leader)) => return Err(Error::NotLeader { leader }),
                Ok(Response::Failed(m)) => return Err(Error::Raft(m)),
                Ok(_) => {
                    return Err(Error::Raft(format!(
                        "{addr} answered a forwarded write wrongly"
                    )))
                }
                Err(Error::Interrupted(_)) if !resent => resent = true,
                Err(e) => return Err(e),
            }
        }
        Err(Error::NotLeader { leader: None })
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
                .call(
                    id,
                    &addr,
                    &wire::frame(&wire::encode_read_index()),
                    node.timeout(),
                )
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

    /// One call of the request `frame` (`wire::frame`) to `target` at `addr`.
    async fn call(
        &self,
        target: NodeId,
        addr: &str,
        frame: &[u8],
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
            tally: self.stats.tally(target),
        };
        // A call that failed may have reached the leader (a write may be applied); one that
        // could not connect did not.
        let r = link.call_framed(frame, ttl).await.map_err(|e| match e {
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
