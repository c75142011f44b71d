//! Read index rounds shared by concurrent readers.
//!
//! A linearizable read needs a read index obtained *after* the read began: the leader
//! confirms its leadership with a quorum (one heartbeat round) and returns its commit
//! position. Readers that arrive while a round runs cannot use it — it may have started before
//! them — so they wait for the next one, and that one serves all of them: one round per batch
//! of readers instead of one per read. Rounds run back to back while readers wait.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use openraft::ReadPolicy;
use tokio::sync::oneshot;

use super::{copy_err, raft_err, Error, LogId, Raft};

type Answer = std::result::Result<Option<LogId>, Error>;

/// The readers waiting for the next round, and whether a round runs.
#[derive(Default)]
struct Waiting {
    running: bool,
    readers: Vec<oneshot::Sender<Answer>>,
}

/// One node's read index rounds. Clones share them.
#[derive(Clone, Default)]
pub(crate) struct ReadIndex {
    waiting: Arc<Mutex<Waiting>>,
    rounds: Arc<AtomicU64>,
}

impl ReadIndex {
    /// Rounds run so far.
    pub(crate) fn rounds_run(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    /// A read index obtained after this call began (the leader's commit position, applied
    /// here), shared with the readers that arrive while a round runs.
    pub(crate) async fn get(&self, raft: &Raft, timeout: Duration) -> Answer {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut w = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            w.readers.push(tx);
            !std::mem::replace(&mut w.running, true)
        };
        if start {
            let (me, raft) = (self.clone(), raft.clone());
            tokio::spawn(async move { me.rounds(raft, timeout).await });
        }
        rx.await
            .unwrap_or_else(|_| Err(Error::Raft("the read index round was dropped".into())))
    }

    /// Runs rounds while readers wait; each round answers the readers waiting when it began.
    async fn rounds(&self, raft: Raft, timeout: Duration) {
        loop {
            let batch = {
                let mut w = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
                if w.readers.is_empty() {
                    w.running = false;
                    return;
                }
                std::mem::take(&mut w.readers)
            };
            self.rounds.fetch_add(1, Ordering::Relaxed);
            let answer = match tokio::time::timeout(
                timeout,
                raft.ensure_linearizable(ReadPolicy::ReadIndex),
            )
            .await
            {
                Ok(r) => r.map(|id| Some(*id.log_id())).map_err(raft_err),
                Err(_) => Err(Error::Timeout(timeout)),
            };
            for r in batch {
                let _ = r.send(match &answer {
                    Ok(id) => Ok(*id),
                    Err(e) => Err(copy_err(e)),
                });
            }
        }
    }
}
