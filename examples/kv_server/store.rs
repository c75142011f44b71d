//! The store the commands use: a local `Db` holding Redis's numbered databases as keyspaces
//! (`databases.rs`), or in cluster mode this node of a replicated store (`cluster.rs`, which
//! serves database 0 only). A command resolves its database once (`Store::space`); errors
//! arrive as the replies to send.

use std::ops::Bound;
use std::sync::Arc;

use lsm_bloom::{DbIter, DbStats, Keyspace, WriteBatch};

use super::databases::Databases;
use super::resp::Reply;

/// A store's failure, as the reply the client gets.
pub type StoreResult<T> = Result<T, Reply>;

fn db_err(e: lsm_bloom::Error) -> Reply {
    Reply::err(e.to_string())
}

/// Databases up to this many keys are counted exactly by `DBSIZE` (a scan of at most this
/// many entries); larger ones are answered with `Keyspace::approximate_len`.
pub const EXACT_DBSIZE: u64 = 100_000;

pub enum Store {
    Local(Databases),
    #[cfg(feature = "replication")]
    Cluster(Box<super::cluster::Cluster>),
}

/// One database as a command reads and writes it.
pub enum Space<'a> {
    /// Its keyspace (held for the command's length: see `databases.rs`).
    Local(&'a Databases, Arc<Keyspace>),
    /// A database nothing has been written to: empty. (`Store::space_for_write` never
    /// answers it.)
    Unmade,
    #[cfg(feature = "replication")]
    Cluster(&'a super::cluster::Cluster),
}

/// A scan's keys and values, in key order.
pub enum StoreIter {
    Local(Box<DbIter>),
    Empty,
    #[cfg(feature = "replication")]
    Cluster(Box<lsm_bloom::replication::Scan>),
}

impl Iterator for StoreIter {
    type Item = lsm_bloom::Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            StoreIter::Local(i) => i.next(),
            StoreIter::Empty => None,
            #[cfg(feature = "replication")]
            StoreIter::Cluster(i) => i.next(),
        }
    }
}

fn out_of_range(n: usize) -> Reply {
    Reply::err(format!("DB index is out of range ({n})"))
}

impl Store {
    /// How many databases are served.
    pub fn databases(&self) -> usize {
        match self {
            Store::Local(d) => d.count(),
            #[cfg(feature = "replication")]
            Store::Cluster(_) => 1,
        }
    }

    /// Database `n` for reading.
    pub fn space(&self, n: usize) -> StoreResult<Space<'_>> {
        match self {
            Store::Local(d) if n < d.count() => {
                Ok(d.slot(n).map_or(Space::Unmade, |ks| Space::Local(d, ks)))
            }
            #[cfg(feature = "replication")]
            Store::Cluster(c) if n == 0 => Ok(Space::Cluster(c)),
            _ => Err(out_of_range(n)),
        }
    }

    /// Database `n` for writing: its keyspace created if it has none.
    pub fn space_for_write(&self, n: usize) -> StoreResult<Space<'_>> {
        match self {
            Store::Local(d) if n < d.count() => {
                let ks = d.slot_for_write(n).map_err(Reply::err)?;
                Ok(Space::Local(d, ks))
            }
            _ => self.space(n),
        }
    }

    /// The local databases, or the error a cluster answers `cmd` with (it serves database 0
    /// only: the replicated store has one keyspace).
    pub fn local(&self, cmd: &str) -> StoreResult<&Databases> {
        let _ = cmd; // named in the cluster's refusal
        match self {
            Store::Local(d) => Ok(d),
            #[cfg(feature = "replication")]
            Store::Cluster(_) => Err(Reply::err(format!(
                "{cmd} is not supported in cluster mode (a cluster serves database 0 only)"
            ))),
        }
    }

    /// The data store's statistics.
    pub fn stats(&self) -> DbStats {
        match self {
            Store::Local(d) => d.store().stats(),
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
            Store::Local(d) => Ok(d.close()?),
            #[cfg(feature = "replication")]
            Store::Cluster(c) => c.close(),
        }
    }
}

impl Space<'_> {
    /// `key`'s value lent to `f` (in cluster mode after a linearizable read barrier).
    pub fn get_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> StoreResult<Option<R>> {
        match self {
            Space::Local(_, ks) => ks.get_with(key, f).map_err(db_err),
            Space::Unmade => Ok(None),
            #[cfg(feature = "replication")]
            Space::Cluster(c) => c.get_with(key, f),
        }
    }

    /// Adds "set `key` to `value` here" to `b`.
    pub fn put(&self, b: &mut WriteBatch, key: Vec<u8>, value: Vec<u8>) {
        match self {
            Space::Local(_, ks) => b.put_in(ks, key, value),
            _ => b.put(key, value),
        };
    }

    /// Adds "delete `key` here" to `b`.
    pub fn delete(&self, b: &mut WriteBatch, key: Vec<u8>) {
        match self {
            Space::Local(_, ks) => b.delete_in(ks, key),
            _ => b.delete(key),
        };
    }

    /// Applies `batch`, made with this space's `put` and `delete` (in cluster mode
    /// replicated, through the leader).
    pub fn write(&self, batch: WriteBatch) -> StoreResult<()> {
        match self {
            Space::Local(d, _) => d.store().write(batch).map_err(db_err),
            Space::Unmade => Err(Reply::err(
                "internal: a write to a database without a keyspace",
            )),
            #[cfg(feature = "replication")]
            Space::Cluster(c) => c.write(batch),
        }
    }

    /// Keys from `start` up to `end` (in cluster mode after a read barrier).
    pub fn scan(&self, start: Vec<u8>, end: Bound<Vec<u8>>) -> StoreResult<StoreIter> {
        match self {
            Space::Local(_, ks) => ks
                .scan((Bound::Included(start), end))
                .map(|i| StoreIter::Local(Box::new(i)))
                .map_err(db_err),
            Space::Unmade => Ok(StoreIter::Empty),
            #[cfg(feature = "replication")]
            Space::Cluster(c) => c.scan(start, end).map(|i| StoreIter::Cluster(Box::new(i))),
        }
    }

    /// `DBSIZE`: the keys held, counted exactly up to `EXACT_DBSIZE`, estimated above it
    /// (`Keyspace::approximate_len`, an upper bound). Not in cluster mode.
    pub fn size(&self) -> StoreResult<u64> {
        match self {
            Space::Local(_, ks) => {
                let bound = ks.approximate_len().map_err(db_err)?;
                if bound > EXACT_DBSIZE {
                    return Ok(bound);
                }
                let mut n = 0;
                for e in ks.iter().map_err(db_err)? {
                    e.map_err(db_err)?;
                    n += 1;
                }
                Ok(n)
            }
            Space::Unmade => Ok(0),
            #[cfg(feature = "replication")]
            Space::Cluster(_) => Err(Reply::err(
                "DBSIZE is not supported in cluster mode: lsm-bloom keeps no key count",
            )),
        }
    }

    /// INFO's estimate of the keys held (`Keyspace::approximate_len`); none in cluster mode.
    pub fn approximate_len(&self) -> Option<u64> {
        match self {
            Space::Local(_, ks) => ks.approximate_len().ok(),
            _ => None,
        }
    }
}
