//! The store the commands use: a local `Db` holding Redis's numbered databases as keyspaces
//! (`databases.rs`), or in cluster mode this node of a replicated store (`cluster.rs`: database
//! `n` is the replicated keyspace `db<n>`, 0 the default one). A command resolves its
//! database once (`Store::space`); errors arrive as the replies to send.

use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

#[cfg(feature = "replication")]
use lsm_bloom::replication::Op;
use lsm_bloom::{DbIter, DbStats, KeyExpiry, Keyspace, WriteBatch};

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
    /// A cluster node and how many databases it serves.
    #[cfg(feature = "replication")]
    Cluster(Box<super::cluster::Cluster>, usize),
}

/// One command's writes, applied together.
pub enum Batch {
    Local(WriteBatch),
    #[cfg(feature = "replication")]
    Cluster(Vec<Op>),
}

/// The replicated keyspace holding database `n` in cluster mode.
#[cfg(feature = "replication")]
fn cluster_keyspace(n: usize) -> String {
    if n == 0 {
        String::new()
    } else {
        format!("db{n}")
    }
}

/// One database as a command reads and writes it.
pub enum Space<'a> {
    /// Its keyspace (held for the command's length: see `databases.rs`).
    Local(&'a Databases, Arc<Keyspace>),
    /// A database nothing has been written to: empty. (`Store::space_for_write` never
    /// answers it.)
    Unmade,
    /// A replicated keyspace.
    #[cfg(feature = "replication")]
    Cluster(&'a super::cluster::Cluster, String),
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
            Store::Cluster(_, n) => *n,
        }
    }

    /// Database `n` for reading.
    pub fn space(&self, n: usize) -> StoreResult<Space<'_>> {
        match self {
            Store::Local(d) if n < d.count() => {
                Ok(d.slot(n).map_or(Space::Unmade, |ks| Space::Local(d, ks)))
            }
            #[cfg(feature = "replication")]
            Store::Cluster(c, count) if n < *count => Ok(Space::Cluster(c, cluster_keyspace(n))),
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

    /// `FLUSHDB` of the databases `which` (`FLUSHALL`: all of them), in the background with
    /// `background` (a cluster replicates one `Clear` per database, applied at once).
    pub fn flush(&self, which: &[usize], background: bool) -> StoreResult<()> {
        match self {
            Store::Local(d) => d.flush(which, background).map_err(Reply::err),
            #[cfg(feature = "replication")]
            Store::Cluster(c, _) => {
                let _ = background;
                let clear = |&n: &usize| {
                    let main = cluster_keyspace(n);
                    let side = super::databases::filters_name(&main);
                    [Op::Clear { keyspace: main }, Op::Clear { keyspace: side }]
                };
                c.write(which.iter().flat_map(clear).collect())
            }
        }
    }

    /// `SWAPDB a b`: one map write locally, one replicated `Swap` in a cluster.
    pub fn swap(&self, a: usize, b: usize) -> StoreResult<()> {
        match self {
            Store::Local(d) => d.swap(a, b).map_err(Reply::err),
            #[cfg(feature = "replication")]
            Store::Cluster(c, _) => {
                let (a, b) = (cluster_keyspace(a), cluster_keyspace(b));
                let side = super::databases::filters_name;
                c.write(vec![
                    Op::Swap {
                        a: side(&a),
                        b: side(&b),
                    },
                    Op::Swap { a, b },
                ])
            }
        }
    }

    /// The data store's statistics.
    pub fn stats(&self) -> DbStats {
        match self {
            Store::Local(d) => d.store().stats(),
            #[cfg(feature = "replication")]
            Store::Cluster(c, _) => c.stats(),
        }
    }

    /// INFO's `# Replication` section (role, leader, term, indexes, followers' lag).
    pub fn replication_info(&self) -> String {
        match self {
            Store::Local(_) => "role:master\r\ncluster_enabled:0\r\n".into(),
            #[cfg(feature = "replication")]
            Store::Cluster(c, _) => c.info(),
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
            Store::Cluster(c, _) => c.command(args),
        }
    }

    /// Makes every acknowledged write durable and closes the store.
    pub fn close(self) -> Result<(), Box<dyn std::error::Error>> {
        match self {
            Store::Local(d) => Ok(d.close()?),
            #[cfg(feature = "replication")]
            Store::Cluster(c, _) => c.close(),
        }
    }
}

impl<'a> Space<'a> {
    /// This database's Bloom filter keys (`bloom.rs`): its filters keyspace, made with
    /// `create` if it has none (else `Unmade`).
    pub fn filters(&self, create: bool) -> StoreResult<Space<'a>> {
        match self {
            Space::Local(d, ks) => {
                let fs = match create {
                    true => Some(d.filters_for_write(ks.name()).map_err(Reply::err)?),
                    false => d.filters_of(ks.name()),
                };
                Ok(fs.map_or(Space::Unmade, |fs| Space::Local(d, fs)))
            }
            Space::Unmade => Ok(Space::Unmade),
            #[cfg(feature = "replication")]
            Space::Cluster(c, name) => Ok(Space::Cluster(c, super::databases::filters_name(name))),
        }
    }

    /// Makes the reads that follow (`peek_with`) linearizable: in cluster mode one read
    /// barrier; nothing on a single server.
    pub fn sync(&self) -> StoreResult<()> {
        match self {
            #[cfg(feature = "replication")]
            Space::Cluster(c, _) => c.barrier(),
            _ => Ok(()),
        }
    }

    /// `get_with` without a read barrier of its own (after `sync`).
    pub fn peek_with<R>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> StoreResult<Option<R>> {
        match self {
            #[cfg(feature = "replication")]
            Space::Cluster(c, name) => c.peek_with(name, key, f),
            _ => self.get_with(key, f),
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
            Space::Cluster(c, name) => c.get_with(name, key, f),
        }
    }

    /// Whether `key` is live and until when (`Db::expiry_of`; in cluster mode after a
    /// linearizable read barrier, by this node's clock).
    pub fn expiry_of(&self, key: &[u8]) -> StoreResult<KeyExpiry> {
        match self {
            Space::Local(_, ks) => ks.expiry_of(key).map_err(db_err),
            Space::Unmade => Ok(KeyExpiry::Absent),
            #[cfg(feature = "replication")]
            Space::Cluster(c, name) => c.expiry_of(name, key),
        }
    }

    /// Adds "set `key` to `value` here until `at`" (ms since the epoch) to `b`. In cluster
    /// mode the log entry carries `at` as it is, so every node expires the key at once.
    pub fn put_until(&self, b: &mut Batch, key: Vec<u8>, value: Vec<u8>, at: u64) {
        match (self, b) {
            (Space::Local(_, ks), Batch::Local(b)) => {
                let at = UNIX_EPOCH + Duration::from_millis(at);
                b.put_in_with_expiry(ks, key, value, at);
            }
            #[cfg(feature = "replication")]
            (Space::Cluster(_, name), Batch::Cluster(ops)) => ops.push(Op::PutUntil {
                keyspace: name.clone(),
                key,
                value,
                at,
            }),
            _ => {}
        }
    }

    /// `put_until` of a string written without a change (`rmw_view.rs`): a dead filter
    /// header under `key` is deleted with it, so it cannot come back when the string expires.
    pub fn put_string_until(&self, b: &mut Batch, key: Vec<u8>, value: Vec<u8>, at: u64) {
        self.drop_header(b, &key);
        self.put_until(b, key, value, at);
    }

    /// `delete` of a string without a change: a filter of that name goes too.
    pub fn delete_string(&self, b: &mut Batch, key: Vec<u8>) {
        self.drop_header(b, &key);
        self.delete(b, key);
    }

    /// Adds "delete the filter header of `key`" to `b`, where this database may have one.
    fn drop_header(&self, b: &mut Batch, key: &[u8]) {
        let header = super::bloom::header_key(key);
        match (self, b) {
            (Space::Local(d, ks), Batch::Local(b)) => {
                if let Some(fs) = d.filters_of(ks.name()) {
                    b.delete_in(&fs, header);
                }
            }
            #[cfg(feature = "replication")]
            (Space::Cluster(_, name), Batch::Cluster(ops)) => ops.push(Op::DeleteIn {
                keyspace: super::databases::filters_name(name),
                key: header,
            }),
            _ => {}
        }
    }

    /// Adds "delete every key from `start` up to `end` (excluded) here" to `b`.
    pub fn delete_range(&self, b: &mut Batch, start: Vec<u8>, end: Vec<u8>) {
        match (self, b) {
            (Space::Local(_, ks), Batch::Local(b)) => {
                b.delete_range_in(ks, start..end);
            }
            #[cfg(feature = "replication")]
            (Space::Cluster(_, name), Batch::Cluster(ops)) => ops.push(Op::DeleteRange {
                keyspace: name.clone(),
                start: Bound::Included(start),
                end: Bound::Excluded(end),
            }),
            _ => {}
        }
    }

    /// An empty batch of the kind this space's writes go in (one per store: a batch may
    /// hold writes to several databases of it, as MOVE's does).
    pub fn batch(&self) -> Batch {
        match self {
            #[cfg(feature = "replication")]
            Space::Cluster(..) => Batch::Cluster(Vec::new()),
            _ => Batch::Local(WriteBatch::new()),
        }
    }

    /// Adds "set `key` to `value` here" to `b` (a batch of this store: `batch`).
    pub fn put(&self, b: &mut Batch, key: Vec<u8>, value: Vec<u8>) {
        match (self, b) {
            (Space::Local(_, ks), Batch::Local(b)) => {
                b.put_in(ks, key, value);
            }
            #[cfg(feature = "replication")]
            (Space::Cluster(_, name), Batch::Cluster(ops)) => ops.push(Op::PutIn {
                keyspace: name.clone(),
                key,
                value,
            }),
            _ => {}
        }
    }

    /// Adds "delete `key` here" to `b`.
    pub fn delete(&self, b: &mut Batch, key: Vec<u8>) {
        match (self, b) {
            (Space::Local(_, ks), Batch::Local(b)) => {
                b.delete_in(ks, key);
            }
            #[cfg(feature = "replication")]
            (Space::Cluster(_, name), Batch::Cluster(ops)) => ops.push(Op::DeleteIn {
                keyspace: name.clone(),
                key,
            }),
            _ => {}
        }
    }

    /// Applies `batch`, made with `put` and `delete` of this store's spaces (in cluster mode
    /// replicated, through the leader).
    pub fn write(&self, batch: Batch) -> StoreResult<()> {
        match (self, batch) {
            (Space::Local(d, _), Batch::Local(b)) => d.store().write(b).map_err(db_err),
            #[cfg(feature = "replication")]
            (Space::Cluster(c, _), Batch::Cluster(ops)) => c.write(ops),
            _ => Err(Reply::err(
                "internal: a write to a database without a keyspace",
            )),
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
            Space::Cluster(c, name) => c
                .scan(name, start, end)
                .map(|i| StoreIter::Cluster(Box::new(i))),
        }
    }

    /// `DBSIZE`: the keys held, counted exactly up to `EXACT_DBSIZE`, estimated above it
    /// (`Keyspace::approximate_len`, an upper bound; in cluster mode after a read barrier).
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
            Space::Cluster(c, name) => c.len(name, Some(EXACT_DBSIZE)),
        }
    }

    /// INFO's upper bound of the keys with an expiry (`Keyspace::approximate_expiring_len`;
    /// in cluster mode this node's, without a read barrier).
    pub fn approximate_expiring_len(&self) -> Option<u64> {
        match self {
            Space::Local(_, ks) => ks.approximate_expiring_len().ok(),
            Space::Unmade => None,
            #[cfg(feature = "replication")]
            Space::Cluster(c, name) => c.expiring_len(name).ok(),
        }
    }

    /// INFO's estimate of the keys held (`Keyspace::approximate_len`; in cluster mode this
    /// node's, without a read barrier).
    pub fn approximate_len(&self) -> Option<u64> {
        match self {
            Space::Local(_, ks) => ks.approximate_len().ok(),
            Space::Unmade => None,
            #[cfg(feature = "replication")]
            Space::Cluster(c, name) => c.len(name, None).ok(),
        }
    }
}
