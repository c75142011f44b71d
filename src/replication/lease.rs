//! Leader leases: linearizable reads on the leader without a round trip per read.
//!
//! A read index round (`read_index.rs`) proves leadership at the moment of the round. The
//! lease stretches that proof over time. When a round that began at `t` succeeds, a quorum
//! has acknowledged a heartbeat sent after `t`. Each of those followers then refuses every
//! vote request until `leader_lease` (openraft: `election_timeout_max`) has passed on its own
//! clock since it received that heartbeat. So no other leader can be elected before
//! `t + election_timeout_max` unless this node itself votes for it. This node therefore
//! serves reads from its own store until `t + lease`, where `lease` ≤ `election_timeout_max / 2`
//! (`ReplicationConfig::read_lease`): a clock may run up to 2× faster than another's.
//!
//! The lease also ends when this node's vote changes. openraft makes a vote durable through
//! the log store before it answers the request that changed it (`LogStore::vote`). A new
//! leader needs this node's vote, or must first be learnt of here. Either way, this node's
//! vote changes before any other leader can acknowledge a write. Checking the vote on each
//! read turns that into an order of events, not a race.
//!
//! What a lease read waits for: this node must have applied every entry in its log when the
//! read began (`LogStore::last_log_id`), not just the commit index. Every entry any node can
//! have applied was written to this leader's log first, so the read sees every write that
//! was acknowledged anywhere before it began. With no write in flight, that costs nothing.
//! With writes in flight, the read waits about one write's commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{LogId, LogStore, NodeId, Vote};

/// A lease held: the vote it was granted under and when it ends.
#[derive(Clone, Copy)]
struct Held {
    vote: Vote,
    until: Instant,
}

/// One node's lease. Clones share it.
#[derive(Clone)]
pub(crate) struct Lease {
    /// How long a round's proof lasts. `None`: leases are off and every linearizable read
    /// runs a round.
    duration: Option<Duration>,
    held: Arc<Mutex<Option<Held>>>,
    reads: Arc<AtomicU64>,
}

impl Lease {
    pub(crate) fn new(duration: Option<Duration>) -> Lease {
        Lease {
            duration,
            held: Arc::default(),
            reads: Arc::default(),
        }
    }

    /// Reads served under a lease so far.
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// If this node holds a valid lease now: the position a read beginning now must have
    /// applied (the last entry in the log; `Some(None)` for an empty log). `None` when
    /// there is no lease: the read must run a round.
    pub(crate) fn read_position(&self, log: &LogStore) -> Option<Option<LogId>> {
        let held = (*self.held.lock().unwrap_or_else(PoisonError::into_inner))?;
        if Instant::now() >= held.until || log.vote() != Some(held.vote) {
            return None;
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        Some(log.last_log_id())
    }

    /// What a round is about to prove, read before the round begins: the vote this node
    /// leads under and the round's earliest start. `None` if leases are off or this node
    /// does not lead under a committed vote.
    pub(crate) fn before_round(&self, me: NodeId, log: &LogStore) -> Option<(Vote, Instant)> {
        self.duration?;
        let vote = log.vote()?;
        let leads = vote.committed && vote.leader_id.node_id == me;
        leads.then(|| (vote, Instant::now()))
    }

    /// A round that began after `start` succeeded: grants the lease until `start + duration`,
    /// if the vote is still `vote`.
    pub(crate) fn after_round(&self, log: &LogStore, (vote, start): (Vote, Instant)) {
        let Some(d) = self.duration else { return };
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if log.vote() != Some(vote) {
            return;
        }
        let until = start + d;
        if held.is_none_or(|h| h.vote != vote || h.until < until) {
            *held = Some(Held { vote, until });
        }
    }
}
