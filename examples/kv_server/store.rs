//! The store the commands use: one `Db`, or in cluster mode this node of a replicated store
//! (`cluster.rs`). Errors arrive as the replies to send.

use std::ops::Bound;

use lsm_bloom::{Db, DbIter, DbStats, WriteBatch};

use super::resp::Reply;

/// A store's failure, as the reply the client gets.
pub type StoreResult<T> = Result<T, Reply>;

fn db_err(e: lsm_bloom::Error) -> Reply {
    Reply::err(e.to_string())
}

pub enum Store {
    Local(Db),
    #[cfg(feature = "replication")]
    Cluster(Box<super::cluster::Cluster>),
}

/// A scan's keys and values, in key order.
pub enum StoreIter {
    Local(DbIter),
    #[cfg(feature = "replication")]
    Cluster(lsm_bloom::replication::Scan),
}

impl Iterator for StoreIter {
    type Item = lsm_bloom::Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            StoreIter::Local(i) => i.next(),
            #[cfg(feature = "replication")]
            StoreIter::Cluster(i) => i.next(),
        }
    }
}

impl Store {
    /// `key`'s value lent to `f` (in cluster mode after a linearizable read barrier).
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> StoreResult<Option<R>> {
        match self {
            Store::Local(db) => db.get_with(key, f).map_err(db_err),
            #[cfg(feature = "replication")]
            Store::Cluster(c) => c.get_with(key, f),
        }
    }

    /// Applies `batch` (in cluster mode replicated, through the leader).
    pub fn write(&self, batch: WriteBatch) -> StoreResult<()> {
        match self {
            Store::Local(db) => db.write(batch).map_err(db_err),
            #[cfg(feature = "replication")]
            Store::Cluster(c) => c.write(batch),
        }
    }

    /// Removes `key`.
    pub fn delete(&self, key: &[u8]) -> StoreResult<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write(b)
    }

    /// Keys from `start` up to `end` (in cluster mode after a read barrier).
    pub fn scan(&self, start: Vec<u8>, end: Bound<Vec<u8>>) -> StoreResult<StoreIter> {
        match self {
            Store::Local(db) => db
                .scan((Bound::Included(start), end))
                .map(StoreIter::Local)
                .map_err(db_err),
            #[cfg(feature = "replication")]
            Store::Cluster(c) => c.scan(start, end).map(StoreIter::Cluster),
        }
    }

    /// The data store's statistics.
    pub fn stats(&self) -> DbStats {
        match self {
            Store::Local(db) => db.stats(),
            #[cfg(feature = "replication")]
            Store::Cluster(c) => c.stats(),
        }
    }

    /// INFO's `# Replication` section (role, leader, term, indexes, followers' lag).
    pub fn replication_info(&self) -> String {
        match self {
            Store::Local(_) => "role:master\r\ncluster_enabled:0\r\n".into(),
            #[cfg(feature = "replication")]
            Store::Cluster(c) => c.info(),
        }
    }

    /// `CLUSTER ...` (membership), in cluster mode.
    pub fn cluster_command(&self, args: &[Vec<u8>]) -> Reply {
        match self {
            Store::Local(_) => {
                let _ = args;
                Reply::err("This instance has cluster support disabled (start it with --node-id)")
            }
            #[cfg(feature = "replication")]
            Store::Cluster(c) => c.command(args),
        }
    }

    /// Makes every acknowledged write durable and closes the store.
    pub fn close(self) -> Result<(), Box<dyn std::error::Error>> {
        match self {
            Store::Local(db) => {
                db.flush()?;
                db.close()?;
                Ok(())
            }
            #[cfg(feature = "replication")]
            Store::Cluster(c) => c.close(),
        }
    }
}
