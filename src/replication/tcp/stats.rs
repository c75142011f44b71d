//! What a transport end counts: totals (connections refused, failed handshakes, frames,
//! bytes, failed calls), and the same per authenticated peer node, so an operator sees which
//! link is slow or failing (kv_server's INFO prints both).
//!
//! A connection looks its peer's counters up once, after the handshake (or when a link is
//! made), and bumps them with the totals through a [`Tally`]. At most `MAX_PEERS` nodes get
//! counters of their own; the rest share one entry, so a peer cannot grow the table.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::replication::NodeId;

/// Peer nodes with counters of their own; others are counted together (`PeerKey::Other`).
pub const MAX_PEERS: usize = 64;

pub(super) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

fn add(c: &AtomicU64, n: usize) {
    c.fetch_add(n as u64, Ordering::Relaxed);
}

/// Traffic counters, kept in all (`TransportStats::traffic`) and per peer node
/// (`PeerStats::traffic`).
#[derive(Debug, Default)]
pub struct Traffic {
    /// Frames sent.
    pub frames_out: AtomicU64,
    /// Frames received whole and decoded.
    pub frames_in: AtomicU64,
    /// Bytes of the frames sent (headers included).
    pub bytes_out: AtomicU64,
    /// Bytes of the frames received whole (headers included).
    pub bytes_in: AtomicU64,
    /// Calls that failed on a timeout or an I/O error.
    pub failed: AtomicU64,
    /// Connections closed for a malformed frame or message (length, checksum, decoding).
    pub bad_frames: AtomicU64,
}

impl Traffic {
    /// The counters by name, as kv_server's INFO prints them.
    pub fn counts(&self) -> [(&'static str, u64); 6] {
        let c = [
            ("frames_out", &self.frames_out),
            ("frames_in", &self.frames_in),
            ("bytes_out", &self.bytes_out),
            ("bytes_in", &self.bytes_in),
            ("failed", &self.failed),
            ("bad_frames", &self.bad_frames),
        ];
        c.map(|(name, n)| (name, n.load(Ordering::Relaxed)))
    }

    fn frame_in(&self, bytes: usize) {
        bump(&self.frames_in);
        add(&self.bytes_in, bytes);
    }

    fn frame_out(&self, bytes: usize) {
        bump(&self.frames_out);
        add(&self.bytes_out, bytes);
    }
}

/// What a transport end counted.
#[derive(Debug, Default)]
pub struct TransportStats {
    /// Frames, bytes and failures, over all peers.
    pub traffic: Traffic,
    /// Connections refused (the server's connection limits: in all, still authenticating,
    /// from one address, of one node).
    pub refused: AtomicU64,
    /// Connections closed for a failed handshake: TLS, a certificate naming no node or
    /// another node, a hello of another cluster or version, or none within `HANDSHAKE`.
    pub refused_handshakes: AtomicU64,
    /// Connections accepted (the server side).
    pub accepted: AtomicU64,
    peers: Mutex<BTreeMap<PeerKey, Arc<PeerStats>>>,
}

/// Whose counters: one node's, or those of the nodes past `MAX_PEERS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PeerKey {
    /// A node with counters of its own.
    Node(NodeId),
    /// The nodes past `MAX_PEERS`, together.
    Other,
}

/// What one end counted of its traffic with one peer node (after authentication).
#[derive(Debug, Default)]
pub struct PeerStats {
    /// Connections made to it, or accepted from it and authenticated.
    pub connections: AtomicU64,
    /// Frames, bytes and failures with it.
    pub traffic: Traffic,
}

impl TransportStats {
    /// The counters of the traffic with `peer`, and the totals, for one connection.
    pub(super) fn tally(self: &Arc<Self>, peer: NodeId) -> Tally {
        let mut peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        let key = if peers.contains_key(&PeerKey::Node(peer))
            || peers.keys().filter(|k| **k != PeerKey::Other).count() < MAX_PEERS
        {
            PeerKey::Node(peer)
        } else {
            PeerKey::Other
        };
        Tally {
            total: Arc::clone(self),
            peer: Arc::clone(peers.entry(key).or_default()),
        }
    }

    /// Each peer's counters, in node id order (`PeerKey::Other` last).
    pub fn peers(&self) -> Vec<(PeerKey, Arc<PeerStats>)> {
        let peers = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        peers.iter().map(|(k, v)| (*k, Arc::clone(v))).collect()
    }
}

/// One connection's counters: the totals and its peer's, bumped together.
#[derive(Clone, Debug)]
pub(super) struct Tally {
    total: Arc<TransportStats>,
    peer: Arc<PeerStats>,
}

impl Tally {
    pub(super) fn connected(&self) {
        bump(&self.peer.connections);
    }

    /// A whole frame of `bytes` received (header included).
    pub(super) fn frame_in(&self, bytes: usize) {
        self.total.traffic.frame_in(bytes);
        self.peer.traffic.frame_in(bytes);
    }

    /// A frame of `bytes` sent.
    pub(super) fn frame_out(&self, bytes: usize) {
        self.total.traffic.frame_out(bytes);
        self.peer.traffic.frame_out(bytes);
    }

    pub(super) fn failed(&self) {
        bump(&self.total.traffic.failed);
        bump(&self.peer.traffic.failed);
    }

    pub(super) fn bad_frame(&self) {
        bump(&self.total.traffic.bad_frames);
        bump(&self.peer.traffic.bad_frames);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_past_the_limit_share_one_entry() {
        let stats = Arc::new(TransportStats::default());
        for id in 0..MAX_PEERS as u64 + 10 {
            stats.tally(id).frame_in(10);
        }
        // A known peer keeps its own entry.
        stats.tally(3).frame_out(7);
        let peers = stats.peers();
        assert_eq!(peers.len(), MAX_PEERS + 1);
        let (last, other) = peers.last().unwrap();
        assert_eq!(*last, PeerKey::Other);
        assert_eq!(other.traffic.frames_in.load(Ordering::Relaxed), 10);
        let three = &peers[3].1;
        assert_eq!(three.traffic.bytes_in.load(Ordering::Relaxed), 10);
        assert_eq!(three.traffic.bytes_out.load(Ordering::Relaxed), 7);
        assert_eq!(
            stats.traffic.bytes_in.load(Ordering::Relaxed),
            10 * (MAX_PEERS as u64 + 10)
        );
    }
}
