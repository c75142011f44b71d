//! Writes and linearizable reads from any node of a TCP cluster: a follower forwards a write
//! to the leader over the leader's raft port, and asks the leader for a read index before it
//! reads locally (FORMAT.md §8, messages 4 and 5).

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

use super::{CallError, TcpLink, TransportStats};
use crate::replication::wire::{self, Response};
use crate::replication::{Error, ReplicatedDb, Request, Result};

/// Writes and linearizable reads from any node: a follower forwards a write to the leader
/// over its raft port, and asks it for a read index before reading locally. Keeps one idle
/// connection per leader address.
#[derive(Default)]
pub struct Forwarder {
    idle: tokio::sync::Mutex<Vec<(String, TcpStream)>>,
    stats: Arc<TransportStats>,
}

/// Redirects followed before a forwarded call gives up (leaders changing underneath).
const MAX_HOPS: usize = 3;

impl Forwarder {
    /// A forwarder with no connections yet.
    pub fn new() -> Forwarder {
        Forwarder::default()
    }

    /// `node.write(request)`, forwarded to the leader when `node` is not it.
    pub async fn write(&self, node: &ReplicatedDb, request: Request) -> Result<()> {
        match node.write(request.clone()).await {
            Err(Error::NotLeader {
                leader: Some((_, addr)),
            }) => {
                let mut addr = addr;
                for _ in 0..MAX_HOPS {
                    match self
                        .call(&addr, &wire::encode_forward(&request), node.timeout())
                        .await?
                    {
                        Response::Forwarded => return Ok(()),
                        Response::NotLeader(Some((_, a))) if a != addr => addr = a,
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
                leader: Some((_, addr)),
            }) => match self
                .call(&addr, &wire::encode_read_index(), node.timeout())
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

    async fn call(&self, addr: &str, payload: &[u8], ttl: Duration) -> Result<Response> {
        let idle = {
            let mut pool = self.idle.lock().await;
            pool.iter()
                .position(|(a, _)| a == addr)
                .map(|i| pool.swap_remove(i).1)
        };
        let mut link = TcpLink {
            target: 0,
            addr: addr.to_owned(),
            stream: idle,
            stats: Arc::clone(&self.stats),
        };
        let r = link.call(payload, ttl).await.map_err(|e| match e {
            CallError::Unreachable(e) | CallError::Network(e) => {
                Error::Raft(format!("forwarding to the leader at {addr}: {e}"))
            }
        })?;
        if let Some(s) = link.stream.take() {
            let mut pool = self.idle.lock().await;
            if pool.len() < 16 {
                pool.push((addr.to_owned(), s));
            }
        }
        Ok(r)
    }
}
