//! The store replicated with openraft (feature `replication`).
//!
//! A node keeps two stores under its directory: the Raft log in one `Db` (`log/`, the
//! [`LogStore`]), and the replicated data with the log id it was applied up to in another
//! (`sm/`, the [`StateMachine`]). A client's write becomes a [`Request`] in a log entry; once a
//! majority holds the entry durably, every node applies it to its state machine as one
//! `WriteBatch`. Snapshots are checkpoints of the state machine packed into one file
//! (`snapshot`); a node that falls behind the leader's log receives one and swaps it in.
//!
//! Two stores, not two keyspaces of one: with one write-ahead log, every unsynced apply joins
//! a write group that waits for an append's sync, and the applies queue behind the appends.
//! Measured with a node's storage work per write (`replication_bench --layout --writes 20000
//! --rounds 3`, interleaved): one store with two keyspaces ran 0.97× the two stores at 1
//! client and 0.53× at 8 (4,252 against 4,371 writes/s; 9,177 against 17,447). A snapshot
//! install also swaps the state machine's store whole, which one store could not do.
//!
//! The type config ([`TypeConfig`]) and both stores are public, so a service can run them
//! under `openraft::Raft` with a network of its own; [`ReplicatedDb`] is the same with the
//! reads, writes and membership calls a service needs, over any `RaftNetworkFactory`.
//! The bytes on disk are FORMAT.md §7.
//!
//! openraft is pinned exactly to 0.10.0-alpha.37 (README, "Replication", says why): its
//! types appear in this module's public API, and its alphas change the API between
//! releases, so an upgrade is a deliberate change here.

mod batch;
pub(crate) mod codec;
#[cfg(test)]
pub(crate) mod fuzz_seeds;
mod lease;
mod log_store;
mod log_tail;
mod log_trim;
pub mod network;
mod node;
mod node_reads;
mod read_index;
mod receive;
mod send;
mod service;
pub(crate) mod snapshot;
mod stalled;
pub(crate) mod state_machine;
pub mod tcp;
pub(crate) mod wire;

use std::fmt::{self, Debug, Display};
use std::ops::Bound;

use openraft::error::RaftError;
use openraft::TryAsRef;

use serde::{Deserialize, Serialize};

pub use log_store::LogStore;
pub use node::{ReadPolicy, ReplicatedDb, ReplicationConfig};
pub use openraft;
pub use openraft::BasicNode;
pub use receive::{ChunkAnswer, ChunkResult};
pub use service::{RaftService, RpcAnswer};
pub use snapshot::Meta as PackMeta;
pub use stalled::end_when_stalled;
pub use state_machine::SnapshotFile;
pub use state_machine::{
    Applied, CallContext, Procedures, Scan, StateMachine, Stored, NO_PROCEDURES,
};
pub use wire::{Segment, SnapshotChunk};

/// Largest user key a replicated store accepts (the state machine prefixes keys by a byte).
pub const MAX_REPLICATED_KEY_SIZE: usize = crate::db::MAX_KEY_SIZE - 1;
/// Largest request (its operations' keys and values) a replicated store accepts: one log
/// entry must fit a stored value.
pub const MAX_REQUEST_SIZE: usize = crate::db::MAX_VALUE_SIZE - (1 << 20);

/// A node's id in the cluster.
pub type NodeId = u64;

openraft::declare_raft_types!(
    /// openraft's type config for a replicated lsm-bloom store: requests are write batches,
    /// nodes are named by address; the rest is openraft's default (terms and node ids are
    /// `u64`, a leader id is a term and a node).
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = BasicNode,
);

/// A log entry of this type config.
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
/// The `Raft` of this type config, over this crate's state machine.
pub type Raft = openraft::Raft<TypeConfig, StateMachine>;
/// A log id (the leader's term and node, and an index).
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
/// A vote (a leader id, and whether a quorum granted it).
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
/// A membership (its voter sets and every node's address).
pub type Membership = openraft::Membership<NodeId, BasicNode>;
/// A membership and the log id of the entry that set it.
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
/// The leader id a log id carries.
pub type CommittedLeaderId = openraft::alias::CommittedLeaderIdOf<TypeConfig>;

/// One replicated write: operations applied together, atomically, in order. On the leader,
/// writes that arrive together are merged into one request; `parts` then says which
/// operations were whose.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The operations.
    pub ops: Vec<Op>,
    /// The writes this request holds, in order, each a run of `ops` and the id its forwarder
    /// gave it, if any. Empty: the whole request is one write without an id. A write with an
    /// id is applied at most once, however often it reaches the log (`WriteId`).
    pub parts: Vec<Part>,
}

/// One write of a merged [`Request`]: the next `ops` operations, and its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// The write's id, when its sender may send it again (a forwarded write).
    pub id: Option<WriteId>,
    /// How many of the request's operations, after the previous part's, are this write's.
    pub ops: u32,
}

/// The id a forwarder gives a write, so that the state machine applies it at most once
/// however many times it is sent (a retry after the leader changed, say): every node keeps,
/// per session, the sequence numbers applied at or above the session's `settled_below`, and
/// skips a write whose number it holds (FORMAT.md §7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WriteId {
    /// The sender's session: a random number drawn once per `tcp::Forwarder`.
    pub session: u64,
    /// The write's number in its session, from 0.
    pub seq: u64,
    /// Every write of the session numbered below this has been answered to its caller, so
    /// will never be sent again: the state machine forgets them, and refuses a late copy of
    /// one (it is not applied).
    pub settled_below: u64,
}

impl fmt::Display for WriteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}/{}", self.session, self.seq)
    }
}

/// One operation of a [`Request`]. `Put` and `Delete` act on the default keyspace (named
/// `""`); the others name a keyspace of the replicated data, at most
/// [`MAX_REPLICATED_KEYSPACE_NAME`] bytes, created by its first write (how the state machine
/// keeps them: `state_machine/keyspaces.rs`, FORMAT.md §7.2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Op {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Removes `key`.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// Sets `key` to `value` in `keyspace`.
    PutIn {
        /// The keyspace's name.
        keyspace: String,
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Removes `key` from `keyspace`.
    DeleteIn {
        /// The keyspace's name.
        keyspace: String,
        /// The key.
        key: Vec<u8>,
    },
    /// Empties `keyspace` at once, whatever it holds (its tables are dropped, not its keys
    /// deleted one by one).
    Clear {
        /// The keyspace's name.
        keyspace: String,
    },
    /// Exchanges the contents of two keyspaces, at once.
    Swap {
        /// One keyspace's name.
        a: String,
        /// The other's.
        b: String,
    },
    /// Sets `key` to `value` in `keyspace` (`""`: the default one) until `at`, milliseconds
    /// since the Unix epoch: from then on the key is absent on every node
    /// (`WriteBatch::put_with_expiry`). The time is absolute, so every node expires the key
    /// at once, by its own clock; the writer turns a relative time into one before it
    /// writes. An `at` of 0 is taken as 1 ms past the epoch, `u64::MAX` as the latest time
    /// a store keeps.
    PutUntil {
        /// The keyspace's name.
        keyspace: String,
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
        /// When the key expires, in milliseconds since the Unix epoch.
        at: u64,
    },
    /// Deletes every key of `keyspace` (`""`: the default one) from `start` to `end`, as one
    /// operation (`WriteBatch::delete_range_in`), on every node alike; the state machine's
    /// store must write table format 6 or later.
    DeleteRange {
        /// The keyspace's name.
        keyspace: String,
        /// Where the range starts.
        start: Bound<Vec<u8>>,
        /// Where it ends.
        end: Bound<Vec<u8>>,
    },
    /// Runs the procedure `name` of every node's [`Procedures`] on `args` when the entry is
    /// applied: a read-modify-write or a conditional write, decided from the replicated data
    /// as the log leaves it, identically on every node (so it is linearizable, etcd's way).
    /// Expiry is judged at `at` (milliseconds since the Unix epoch, stamped once by the
    /// writer), not by each node's clock. Its answer comes back to the writer
    /// ([`ReplicatedDb::write_answered`]).
    Call {
        /// The procedure's name (at most [`MAX_REPLICATED_KEYSPACE_NAME`] bytes).
        name: String,
        /// Its arguments, as the procedure reads them.
        args: Vec<u8>,
        /// The time the call is judged at, in milliseconds since the Unix epoch.
        at: u64,
    },
}

/// Longest keyspace name an [`Op`] may carry, in bytes.
pub const MAX_REPLICATED_KEYSPACE_NAME: usize = 255;

impl Op {
    /// The key the operation writes, if it writes one.
    fn key(&self) -> Option<&[u8]> {
        match self {
            Op::Put { key, .. }
            | Op::Delete { key }
            | Op::PutIn { key, .. }
            | Op::DeleteIn { key, .. }
            | Op::PutUntil { key, .. } => Some(key),
            Op::Clear { .. } | Op::Swap { .. } | Op::DeleteRange { .. } | Op::Call { .. } => None,
        }
    }

    /// The keys bounding the operation's range, if it deletes one.
    fn bounds(&self) -> [Option<&[u8]>; 2] {
        fn key(b: &Bound<Vec<u8>>) -> Option<&[u8]> {
            match b {
                Bound::Included(k) | Bound::Excluded(k) => Some(k.as_slice()),
                Bound::Unbounded => None,
            }
        }
        match self {
            Op::DeleteRange { start, end, .. } => [key(start), key(end)],
            _ => [None, None],
        }
    }

    /// The keyspace names the operation carries.
    fn names(&self) -> [Option<&str>; 2] {
        match self {
            Op::Put { .. } | Op::Delete { .. } => [None, None],
            Op::PutIn { keyspace, .. }
            | Op::DeleteIn { keyspace, .. }
            | Op::Clear { keyspace }
            | Op::PutUntil { keyspace, .. }
            | Op::DeleteRange { keyspace, .. } => [Some(keyspace), None],
            Op::Swap { a, b } => [Some(a), Some(b)],
            Op::Call { name, .. } => [Some(name), None],
        }
    }

    /// Bytes of key, value and names.
    fn payload_len(&self) -> usize {
        let value = match self {
            Op::Put { value, .. } | Op::PutIn { value, .. } => value.len(),
            Op::PutUntil { value, .. } => value.len() + 8,
            Op::Call { args, .. } => args.len() + 8,
            _ => 0,
        };
        let names: usize = self.names().iter().flatten().map(|n| n.len()).sum();
        let bounds: usize = self.bounds().iter().flatten().map(|k| k.len()).sum();
        self.key().map_or(0, <[u8]>::len) + value + names + bounds
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request of {} operations", self.ops.len())
    }
}

/// A batch of the default keyspace as a request; `Error::InvalidArgument` for one that
/// changes other keyspaces (the replicated state machine holds the default keyspace only).
impl TryFrom<crate::WriteBatch> for Request {
    type Error = crate::Error;
    fn try_from(b: crate::WriteBatch) -> crate::Result<Request> {
        Ok(Request {
            parts: Vec::new(),
            ops: b
                .into_ops()?
                .into_iter()
                .map(|(key, value)| match value {
                    Some(value) => Op::Put { key, value },
                    None => Op::Delete { key },
                })
                .collect(),
        })
    }
}

impl Request {
    /// One write of `ops`, without an id.
    pub fn new(ops: Vec<Op>) -> Request {
        Request {
            ops,
            parts: Vec::new(),
        }
    }

    /// How many of the request's operations are calls (`Op::Call`).
    pub fn calls(&self) -> usize {
        self.ops
            .iter()
            .filter(|op| matches!(op, Op::Call { .. }))
            .count()
    }

    /// The writes this request holds, each with its id and its operations, in order.
    pub fn writes(&self) -> impl Iterator<Item = (Option<WriteId>, &[Op])> + '_ {
        // No parts: the whole request is one write without an id.
        let whole = self.parts.is_empty().then(|| Part {
            id: None,
            ops: u32::try_from(self.ops.len()).unwrap_or(u32::MAX),
        });
        let mut rest = &self.ops[..];
        self.parts.iter().copied().chain(whole).map(move |p| {
            let n = (p.ops as usize).min(rest.len());
            let (mine, tail) = rest.split_at(n);
            rest = tail;
            (p.id, mine)
        })
    }

    /// Checks the request against the replicated store's limits: every key (and range
    /// bound) at most
    /// [`MAX_REPLICATED_KEY_SIZE`], the whole at most [`MAX_REQUEST_SIZE`]. A request that
    /// fails is refused by `ReplicatedDb::write`, and skipped (on every node alike) if it
    /// reaches the log another way.
    pub fn validate(&self) -> std::result::Result<(), String> {
        for op in &self.ops {
            let keys = op.bounds().into_iter().chain([op.key()]).flatten();
            if let Some(key) = keys.into_iter().find(|k| k.len() > MAX_REPLICATED_KEY_SIZE) {
                return Err(format!(
                    "key of {} bytes (a replicated store takes at most {MAX_REPLICATED_KEY_SIZE})",
                    key.len()
                ));
            }
            if let Some(name) = op
                .names()
                .into_iter()
                .flatten()
                .find(|n| n.len() > MAX_REPLICATED_KEYSPACE_NAME)
            {
                return Err(format!(
                    "keyspace name of {} bytes (at most {MAX_REPLICATED_KEYSPACE_NAME})",
                    name.len()
                ));
            }
        }
        self.check_parts()?;
        let size = self.size();
        if size > MAX_REQUEST_SIZE {
            return Err(format!(
                "request of {size} bytes (at most {MAX_REQUEST_SIZE})"
            ));
        }
        Ok(())
    }

    /// Whether `parts` (when there are any) count exactly the request's operations.
    pub(crate) fn check_parts(&self) -> std::result::Result<(), String> {
        let counted = self
            .parts
            .iter()
            .fold(0usize, |n, p| n.saturating_add(p.ops as usize));
        if self.parts.is_empty() || counted == self.ops.len() {
            return Ok(());
        }
        Err(format!(
            "request of {} operations whose parts count {counted}",
            self.ops.len()
        ))
    }

    /// The size [`Request::validate`] holds to `MAX_REQUEST_SIZE`: each operation's key,
    /// value, keyspace names and range bounds, and 9 bytes of overhead (4 more per name); 29 bytes per
    /// part.
    pub fn size(&self) -> usize {
        let parts = self.parts.len().saturating_mul(PART_SIZE);
        self.ops.iter().fold(parts, |size, op| {
            let names = op.names().iter().flatten().count() * 4;
            size.saturating_add(op.payload_len() + 9 + names)
        })
    }
}

/// The encoded size of a part with an id (FORMAT.md §7.4).
const PART_SIZE: usize = 29;

/// What applying a [`Request`] answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// Why the request was skipped rather than applied (it failed `Request::validate`).
    pub refused: Option<String>,
    /// Writes of the request skipped as late copies: their number is below their session's
    /// window (`WriteId::settled_below`, or the window's bound). A write skipped because it
    /// was applied before is not listed: it is done.
    pub late: Vec<WriteId>,
    /// The answer of each [`Op::Call`] of the request, in order: `None` for a call of a
    /// write that was skipped (applied before, or late).
    pub answers: Vec<Option<Vec<u8>>>,
}

/// A failure of a replicated operation.
#[derive(Debug)]
pub enum Error {
    /// The local store failed (I/O, corruption, a write too large).
    Store(crate::Error),
    /// This node is not the leader; writes and linearizable reads go to the leader, if known.
    NotLeader {
        /// The leader's id and address, when this node knows them.
        leader: Option<(NodeId, String)>,
    },
    /// No answer within `ReplicationConfig::request_timeout` (no quorum reachable, say). A
    /// write that timed out may still be applied later.
    Timeout(std::time::Duration),
    /// The node is shutting down, or openraft refused the call (the message says which).
    Raft(String),
    /// The leader could not be reached to forward a call to it (refused, reset, timed out,
    /// a failed handshake): the cluster may be electing a new one. Nothing was applied.
    Unreachable(String),
    /// A call forwarded to the leader broke off after it was sent (a reset, no answer in
    /// time): a write may or may not have been applied.
    Interrupted(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Store(e) => write!(f, "store: {e}"),
            Error::NotLeader {
                leader: Some((id, addr)),
            } => write!(f, "not the leader: node {id} at {addr} is"),
            Error::NotLeader { leader: None } => {
                write!(f, "not the leader, and no leader is known")
            }
            Error::Timeout(d) => write!(f, "no answer within {d:?} (no quorum reachable?)"),
            Error::Raft(m) => write!(f, "raft: {m}"),
            Error::Unreachable(m) => write!(f, "the leader is unreachable: {m}"),
            Error::Interrupted(m) => write!(f, "the call to the leader broke off: {m}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<crate::Error> for Error {
    fn from(e: crate::Error) -> Self {
        Error::Store(e)
    }
}

/// A `Result` of the replication layer.
pub type Result<T> = std::result::Result<T, Error>;

/// A copy of `e` for each caller sharing one outcome: a read index round's readers, a
/// merged write's writers (errors are not `Clone`).
pub(crate) fn copy_err(e: &Error) -> Error {
    match e {
        Error::NotLeader { leader } => Error::NotLeader {
            leader: leader.clone(),
        },
        Error::Timeout(d) => Error::Timeout(*d),
        Error::Store(e) => Error::Raft(e.to_string()),
        Error::Raft(m) => Error::Raft(m.clone()),
        Error::Unreachable(m) => Error::Unreachable(m.clone()),
        Error::Interrupted(m) => Error::Interrupted(m.clone()),
    }
}

/// openraft's error as ours: `NotLeader` naming the leader when openraft says whom to
/// forward to.
pub(crate) fn raft_err<E>(e: RaftError<TypeConfig, E>) -> Error
where
    E: Debug + Display + TryAsRef<openraft::error::ForwardToLeader<TypeConfig>>,
{
    if let Some(f) = e.forward_to_leader() {
        return Error::NotLeader {
            leader: f.leader_id.map(|id| {
                (
                    id,
                    f.leader_node
                        .as_ref()
                        .map(|n| n.addr.clone())
                        .unwrap_or_default(),
                )
            }),
        };
    }
    Error::Raft(e.to_string())
}
