//! The server's procedures in cluster mode (`lsm_bloom::replication::Procedures`): a
//! `Change` (`rmw.rs`) travels in the log as one call and is decided when its entry is
//! applied, identically on every node (`CallRmw`), its reply coming back as the answer.
//!
//! The bytes of a call and its answer: `call_codec.rs`.

use lsm_bloom::replication::{CallContext, Op, Procedures};

use super::call_codec::{decode_call, encode_call, encode_reply};
use super::combine::pipeline_change;
use super::resp::Reply;
use super::rmw::Change;
use super::rmw_view::{Found, Listed, Place, Rmw};
use super::store::{Space, Store, StoreResult};
use super::transfer::{transfer, Side, TwoRmw};

/// The name of the server's one procedure.
pub const KV: &str = "kv";

/// The server's procedures: `KV` runs a `Change`.
#[derive(Debug)]
pub struct KvProcedures;

impl Procedures for KvProcedures {
    fn call(
        &self,
        name: &str,
        args: &[u8],
        ctx: &mut CallContext<'_>,
    ) -> lsm_bloom::Result<Vec<u8>> {
        if name != KV {
            return Ok(encode_reply(&Reply::err(format!(
                "unknown procedure {name:?}"
            ))));
        }
        let (keyspace, change) = match decode_call(args) {
            Ok(c) => c,
            Err(m) => return Ok(encode_reply(&Reply::err(format!("bad call: {m}")))),
        };
        let (reply, failed) = match change {
            Change::Transfer {
                key,
                to_key,
                to,
                how,
            } => {
                let mut pair = CallPair {
                    rmw: CallRmw::new(ctx, &keyspace),
                    from: &keyspace,
                    to: &to,
                };
                let reply = transfer(&mut pair, &key, &to_key, how);
                (reply, pair.rmw.failed)
            }
            change => {
                let mut rmw = CallRmw::new(ctx, &keyspace);
                (change.run(&mut rmw), rmw.failed)
            }
        };
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(encode_reply(&reply.unwrap_or_else(|e| e)))
    }
}

/// A pipeline's run of plain SETs and counters (`combine.rs`) in database `index` of a
/// cluster: one call of a `Change::Run`, decided when applied, each command seeing the ones
/// before it; each command's reply. One call rather than one per command: with one per
/// INCR, `redis-benchmark -t incr -P 16` on 3 nodes ran 0.63-0.77x the SETs' rate.
pub fn run_pipeline(db: &Store, index: usize, cmds: Vec<Vec<Vec<u8>>>) -> Vec<Reply> {
    let n = cmds.len();
    let (c, keyspace) = match db.space_for_write(index) {
        Ok(Space::Cluster(c, keyspace)) => (c, keyspace),
        Ok(_) => return vec![Reply::err("internal: a cluster's run outside a cluster"); n],
        Err(e) => return vec![e; n],
    };
    let now = super::expire::now_ms();
    let mut changes = Vec::with_capacity(n);
    // Each command's reply when known now (a count's error), or its place in the run.
    let mut replies: Vec<Result<Reply, usize>> = Vec::with_capacity(n);
    for args in cmds {
        let change = match pipeline_change(args, now) {
            Ok(change) => change,
            Err(e) => {
                replies.push(Ok(e));
                continue;
            }
        };
        replies.push(Err(changes.len()));
        changes.push(change);
    }
    match c.call(&keyspace, &Change::Run(changes)) {
        Ok(Reply::Array(items)) => fill(replies, items),
        // The run failed as a whole: its error is every sent command's reply.
        Ok(e) | Err(e) => replies
            .into_iter()
            .map(|r| r.unwrap_or_else(|_| e.clone()))
            .collect(),
    }
}

/// The replies of commands of which some were sent as changes: each command's own reply
/// (`Ok`, known before anything was sent), or the `i`th of `items` (`Err(i)`), the replies
/// of the changes sent, in order.
pub fn fill(slots: Vec<Result<Reply, usize>>, mut items: Vec<Reply>) -> Vec<Reply> {
    slots
        .into_iter()
        .map(|s| match s {
            Ok(r) => r,
            Err(i) => items.get_mut(i).map_or_else(
                || Reply::err("internal: fewer replies came back than changes were sent"),
                |r| std::mem::replace(r, Reply::Null),
            ),
        })
        .collect()
}

/// The log operation of `change` in `keyspace`: a call of `KV`, judged at this time.
pub fn call_op(keyspace: &str, change: &Change) -> Op {
    Op::Call {
        name: KV.into(),
        args: encode_call(keyspace, change),
        at: super::expire::now_ms().max(0) as u64,
    }
}

/// A change's view of one replicated database while its entry is applied: its keyspace and
/// its filters keyspace (`databases::filters_name`). A store failure is kept, to fail the
/// apply, and the change stopped with a placeholder error.
struct CallRmw<'c, 'a> {
    ctx: &'c mut CallContext<'a>,
    keyspace: &'c str,
    filters: String,
    failed: Option<lsm_bloom::Error>,
}

impl<'c, 'a> CallRmw<'c, 'a> {
    fn new(ctx: &'c mut CallContext<'a>, keyspace: &'c str) -> Self {
        CallRmw {
            ctx,
            keyspace,
            filters: super::databases::filters_name(keyspace),
            failed: None,
        }
    }

    /// Views the database of `keyspace` from now on.
    fn view(&mut self, keyspace: &'c str) {
        if self.keyspace != keyspace {
            self.keyspace = keyspace;
            self.filters = super::databases::filters_name(keyspace);
        }
    }
}

impl CallRmw<'_, '_> {
    fn fail(&mut self, e: lsm_bloom::Error) -> Reply {
        let reply = Reply::err(e.to_string());
        self.failed = Some(e);
        reply
    }

    fn keyspace(&self, place: Place) -> &str {
        match place {
            Place::Values => self.keyspace,
            Place::Filters => &self.filters,
        }
    }
}

impl Rmw for CallRmw<'_, '_> {
    fn read(&mut self, place: Place, key: &[u8]) -> StoreResult<Found> {
        match self.ctx.get(self.keyspace(place), key) {
            Ok(found) => Ok(found.map(|s| (s.value, s.expires))),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn contains(&mut self, place: Place, key: &[u8]) -> StoreResult<bool> {
        Ok(self.read(place, key)?.is_some())
    }

    fn write(&mut self, place: Place, key: &[u8], to: Found) -> StoreResult<()> {
        let keyspace = self.keyspace(place).to_string();
        match to {
            None => {
                self.ctx.delete(&keyspace, key);
                Ok(())
            }
            Some((value, expires)) => match self.ctx.put(&keyspace, key, &value, expires) {
                Ok(()) => Ok(()),
                Err(e) => Err(self.fail(e)),
            },
        }
    }

    fn delete_range(&mut self, place: Place, start: &[u8], end: &[u8]) -> StoreResult<()> {
        let keyspace = self.keyspace(place).to_string();
        self.ctx.delete_range(&keyspace, start, end);
        Ok(())
    }

    fn entries(
        &mut self,
        place: Place,
        (start, end): (&[u8], &[u8]),
        limit: usize,
    ) -> StoreResult<Listed> {
        let keyspace = self.keyspace(place).to_string();
        self.ctx
            .scan(&keyspace, start, end, limit)
            .map_err(|e| self.fail(e))
    }

    fn now_ms(&self) -> u64 {
        self.ctx.now_millis()
    }
}

/// A transfer's two replicated databases (`transfer.rs`): one view, switched between them.
struct CallPair<'c, 'a> {
    rmw: CallRmw<'c, 'a>,
    from: &'c str,
    to: &'c str,
}

impl TwoRmw for CallPair<'_, '_> {
    fn side(&mut self, side: Side) -> &mut dyn Rmw {
        let keyspace = match side {
            Side::Source => self.from,
            Side::Dest => self.to,
        };
        self.rmw.view(keyspace);
        &mut self.rmw
    }
}
