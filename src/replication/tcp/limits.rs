//! The raft server's connection counts beyond its total: connections still authenticating
//! (in all and per IP address) and authenticated connections per node. A guard holds each
//! count and gives it back when dropped.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use super::{MAX_HANDSHAKING, MAX_HANDSHAKING_PER_IP, MAX_PER_PEER};
use crate::replication::NodeId;

/// The counts, shared by a server's connections.
#[derive(Default)]
pub(super) struct Limits {
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    handshaking: usize,
    handshaking_from: HashMap<IpAddr, usize>,
    of_peer: HashMap<NodeId, usize>,
}

impl Limits {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Decrements `map[key]`, removing it at zero.
fn give_back<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            map.remove(key);
        }
    }
}

/// A connection in its handshake.
pub(super) struct Handshaking {
    limits: Arc<Limits>,
    ip: IpAddr,
}

impl Handshaking {
    /// Counts a new connection from `ip`, or `None` when either limit is reached.
    pub(super) fn enter(limits: &Arc<Limits>, ip: IpAddr) -> Option<Handshaking> {
        let mut c = limits.counts();
        let from = c.handshaking_from.get(&ip).copied().unwrap_or(0);
        if c.handshaking >= MAX_HANDSHAKING || from >= MAX_HANDSHAKING_PER_IP {
            return None;
        }
        c.handshaking += 1;
        c.handshaking_from.insert(ip, from + 1);
        Some(Handshaking {
            limits: Arc::clone(limits),
            ip,
        })
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        let mut c = self.limits.counts();
        c.handshaking -= 1;
        give_back(&mut c.handshaking_from, &self.ip);
    }
}

/// An authenticated connection of one node.
pub(super) struct PeerSlot {
    limits: Arc<Limits>,
    peer: NodeId,
}

impl PeerSlot {
    /// Counts a connection of `peer`, or `None` when it has `MAX_PER_PEER` already.
    pub(super) fn enter(limits: &Arc<Limits>, peer: NodeId) -> Option<PeerSlot> {
        let mut c = limits.counts();
        let n = c.of_peer.entry(peer).or_insert(0);
        if *n >= MAX_PER_PEER {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            limits: Arc::clone(limits),
            peer,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        give_back(&mut self.limits.counts().of_peer, &self.peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_hold_and_are_given_back() {
        let l = Arc::new(Limits::default());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let held: Vec<_> = (0..MAX_HANDSHAKING_PER_IP)
            .map(|_| Handshaking::enter(&l, a).unwrap())
            .collect();
        assert!(
            Handshaking::enter(&l, a).is_none(),
            "past the per-address limit"
        );
        let others: Vec<_> = (0..MAX_HANDSHAKING - MAX_HANDSHAKING_PER_IP)
            .map(|i| Handshaking::enter(&l, IpAddr::from([10, 0, 1, i as u8])).unwrap())
            .collect();
        assert!(Handshaking::enter(&l, "10.0.0.9".parse().unwrap()).is_none());
        drop(held);
        assert!(Handshaking::enter(&l, a).is_some(), "given back");
        drop(others);
        assert_eq!(l.counts().handshaking, 0);
        assert!(l.counts().handshaking_from.is_empty());

        let peers: Vec<_> = (0..MAX_PER_PEER)
            .map(|_| PeerSlot::enter(&l, 3).unwrap())
            .collect();
        assert!(PeerSlot::enter(&l, 3).is_none());
        assert!(PeerSlot::enter(&l, 4).is_some());
        drop(peers);
        assert!(l.counts().of_peer.is_empty());
    }
}
