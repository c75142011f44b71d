//! The reads of `ReplicatedDb`: each passes the read barrier its `ReadPolicy` asks for,
//! then reads this node's state machine (`state_machine/reads.rs`) — a point read on tokio's
//! blocking pool, since it may wait on the disk.

use std::ops::RangeBounds;

use super::node::{ReadPolicy, ReplicatedDb};
use super::state_machine::Scan;
use super::{Error, Result};

impl ReplicatedDb {
    /// `key`'s value under `policy`. The read itself may wait on the disk, so it runs on
    /// tokio's blocking pool (`spawn_blocking`), never on the executor's threads.
    pub async fn get(&self, key: impl AsRef<[u8]>, policy: ReadPolicy) -> Result<Option<Vec<u8>>> {
        self.get_in("", key, policy).await
    }

    /// `get` in the replicated keyspace `keyspace` (`Op::PutIn`; `""`: the default one).
    pub async fn get_in(
        &self,
        keyspace: &str,
        key: impl AsRef<[u8]>,
        policy: ReadPolicy,
    ) -> Result<Option<Vec<u8>>> {
        self.read_barrier(policy).await?;
        let (sm, key, ks) = (self.sm.clone(), key.as_ref().to_vec(), keyspace.to_string());
        off_executor(move || sm.get_with_in(&ks, &key, <[u8]>::to_vec)).await
    }

    /// Whether `key` is live in the replicated keyspace `keyspace` and until when, under
    /// `policy` (`StateMachine::expiry_of_in`): read on this node, by its clock, so nodes
    /// whose clocks differ by *d* may disagree for *d* around the key's expiry.
    pub async fn expiry_of_in(
        &self,
        keyspace: &str,
        key: impl AsRef<[u8]>,
        policy: ReadPolicy,
    ) -> Result<crate::KeyExpiry> {
        self.read_barrier(policy).await?;
        let (sm, key, ks) = (self.sm.clone(), key.as_ref().to_vec(), keyspace.to_string());
        off_executor(move || sm.expiry_of_in(&ks, &key)).await
    }

    /// The values of `keys` under `policy`, all read after one barrier, on the blocking pool
    /// as `get`'s.
    pub async fn multi_get<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        policy: ReadPolicy,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        self.read_barrier(policy).await?;
        let sm = self.sm.clone();
        let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.as_ref().to_vec()).collect();
        off_executor(move || keys.iter().map(|k| sm.get(k)).collect()).await
    }

    /// Live keys in `range` with their values, in key order, under `policy` (the barrier is
    /// passed before the scan opens; the scan then reads one consistent view).
    pub async fn scan<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
        policy: ReadPolicy,
    ) -> Result<Scan> {
        self.scan_in("", range, policy).await
    }

    /// `scan` in the replicated keyspace `keyspace`.
    pub async fn scan_in<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        keyspace: &str,
        range: R,
        policy: ReadPolicy,
    ) -> Result<Scan> {
        self.read_barrier(policy).await?;
        Ok(self.sm.scan_in(keyspace, range)?)
    }
}

/// Runs the store read `read` on tokio's blocking pool: a read may wait on the disk, which
/// would hold an executor thread (and every task queued on it) meanwhile.
async fn off_executor<T: Send + 'static>(
    read: impl FnOnce() -> crate::Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(read).await {
        Ok(r) => Ok(r?),
        // A panic in the read is the caller's, as if it had run here.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(Error::Raft("the runtime is shutting down".into())),
    }
}
