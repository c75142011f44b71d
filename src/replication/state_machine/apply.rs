//! Applying committed entries: each entry's writes (less those its write sessions skip),
//! its log id (and membership), the sessions and the keyspace map entries it changed, in one
//! batch, not synced (`mod.rs` says why that is durable enough). Entries openraft has at
//! hand are written together; a batch is cut at `APPLY_BATCH_BYTES`. A keyspace an entry
//! creates is created before its batch is written, and one it clears is dropped after
//! (`keyspaces.rs`).

use std::sync::PoisonError;

use futures_util::{Stream, StreamExt};
use openraft::storage::EntryResponder;
use openraft::EntryPayload;

use super::calls::{delete_at, delete_range_at, put_at, CallContext, Overlay, Procedures};
use super::keyspaces::Staged;
use super::sessions::{Sessions, Verdict};
use super::{sm_err, ErrorVerb, StateMachine, StorageResult, APPLIED, MEMBERSHIP};
use crate::db::WriteBatch;
use crate::replication::{codec, Op, Request, Response, StoredMembership, TypeConfig};

/// Batches an apply is split into, by their log record size.
const APPLY_BATCH_BYTES: usize = 32 << 20;

impl StateMachine {
    /// Applies `entries` in order. Each entry's responder is answered once the batch
    /// holding it is written.
    pub(super) async fn apply_entries<Strm>(&mut self, entries: Strm) -> StorageResult<()>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, std::io::Error>> + Unpin + Send,
    {
        let db = self.shared.db.load_full();
        let mut entries = entries;
        let mut answers = Vec::new();
        let mut batch = WriteBatch::new();
        let mut staged = Staged::new(self.shared.spaces.load_full());
        let mut overlay = Overlay::default();
        let write = |mut batch: WriteBatch,
                     staged: &mut Staged,
                     answers: &mut Vec<_>|
         -> StorageResult<()> {
            self.sessions().flush(&mut batch);
            db.write(batch)
                .map_err(|err| sm_err(ErrorVerb::Write, err))?;
            staged.written(|spaces| self.shared.spaces.store(spaces));
            for (responder, response) in answers.drain(..) {
                if let Some(r) = responder {
                    openraft::storage::ApplyResponder::send(r, response);
                }
            }
            Ok(())
        };
        // Entries openraft has at hand are taken without waiting and written as one batch;
        // the stream waits only when none is ready.
        loop {
            let next = match futures_util::FutureExt::now_or_never(entries.next()) {
                Some(next) => next,
                None => {
                    if !batch.is_empty() {
                        write(std::mem::take(&mut batch), &mut staged, &mut answers)?;
                    }
                    entries.next().await
                }
            };
            let Some(item) = next else { break };
            let (e, responder) = item?;
            let mut response = Response::default();
            match e.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(req) => match req.validate() {
                    Err(m) => response.refused = Some(m),
                    Ok(()) => {
                        // A call reads the store: the entries before its own must be in it
                        // (`calls.rs`); the overlay then holds this entry's writes only.
                        let calls = req.calls() > 0;
                        if calls {
                            if !batch.is_empty() {
                                write(std::mem::take(&mut batch), &mut staged, &mut answers)?;
                            }
                            overlay.clear();
                        }
                        let to = Stage {
                            staged: &mut staged,
                            batch: &mut batch,
                            overlay: calls.then_some(&mut overlay),
                            procedures: self.procedures.as_deref(),
                        };
                        stage(req, e.log_id.index, &mut self.sessions(), to, &mut response)
                            .map_err(|err| sm_err(ErrorVerb::Write, err))?;
                    }
                },
                EntryPayload::Membership(m) => {
                    let stored = StoredMembership::new(Some(e.log_id), m);
                    batch.put(MEMBERSHIP, codec::encode_stored_membership(&stored));
                }
            }
            batch.put(APPLIED, codec::encode_opt_log_id(Some(&e.log_id)));
            answers.push((responder, response));
            if batch.encoded_len() >= APPLY_BATCH_BYTES {
                write(std::mem::take(&mut batch), &mut staged, &mut answers)?;
            }
        }
        if !batch.is_empty() || !answers.is_empty() {
            write(batch, &mut staged, &mut answers)?;
        }
        Ok(())
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.shared
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// What staging an entry's operations works on: the keyspace map, the batch, the writes of
/// the entry a call must see (kept only when the entry has calls), and the procedures.
pub(super) struct Stage<'a> {
    pub(super) staged: &'a mut Staged,
    pub(super) batch: &'a mut WriteBatch,
    pub(super) overlay: Option<&'a mut Overlay>,
    pub(super) procedures: Option<&'a dyn Procedures>,
}

/// Adds the operations of `req` (at log `index`, already validated) to `batch`, less the
/// writes `sessions` skips; a late copy is named in `response`, and each call's answer put
/// there. Keyspace operations are staged in `staged`; an error is a store failure
/// (creating a keyspace, or a call's read).
fn stage(
    req: Request,
    index: u64,
    sessions: &mut Sessions,
    mut to: Stage<'_>,
    response: &mut Response,
) -> crate::Result<()> {
    // Which operations to take: a count and a verdict per write, decided in log order.
    let runs: Vec<(usize, bool)> = req
        .writes()
        .map(|(id, ops)| {
            let take = match id {
                None => true,
                Some(id) => match sessions.check(id, index) {
                    Verdict::Apply => true,
                    Verdict::Duplicate => false,
                    Verdict::Late => {
                        response.late.push(id);
                        false
                    }
                },
            };
            (ops.len(), take)
        })
        .collect();
    let mut ops = req.ops.into_iter();
    for (n, take) in runs {
        for op in ops.by_ref().take(n) {
            if !take {
                if matches!(op, Op::Call { .. }) {
                    response.answers.push(None);
                }
                continue;
            }
            apply_op(op, &mut to, response)?;
        }
    }
    Ok(())
}

/// Adds one operation to the batch (and the overlay, when kept).
fn apply_op(op: Op, to: &mut Stage<'_>, response: &mut Response) -> crate::Result<()> {
    match op {
        Op::Put { key, value } => put(to, "", (key, value), None)?,
        Op::PutIn {
            keyspace,
            key,
            value,
        } => put(to, &keyspace, (key, value), None)?,
        Op::PutUntil {
            keyspace,
            key,
            value,
            at,
        } => put(to, &keyspace, (key, value), Some(at))?,
        Op::Delete { key } => delete(to, "", &key),
        Op::DeleteIn { keyspace, key } => delete(to, &keyspace, &key),
        Op::Clear { keyspace } => to.staged.clear(&keyspace, to.batch),
        Op::Swap { a, b } => to.staged.swap(&a, &b, to.batch),
        Op::DeleteRange {
            keyspace,
            start,
            end,
        } => {
            if let Some(place) = to.staged.resolve(&keyspace) {
                if let Some(o) = to.overlay.as_deref_mut() {
                    o.delete_range(&place, &start, &end);
                }
                delete_range_at(to.batch, &place, (start, end));
            }
        }
        Op::Call { name, args, at } => {
            let answer = call(to, &name, &args, at)?;
            response.answers.push(Some(answer));
        }
    }
    Ok(())
}

/// Sets `key` to `value` in `keyspace`, until `expires` (ms since the epoch) when given.
fn put(
    to: &mut Stage<'_>,
    keyspace: &str,
    (key, value): (Vec<u8>, Vec<u8>),
    expires: Option<u64>,
) -> crate::Result<()> {
    let place = to.staged.place_for_write(keyspace, to.batch)?;
    if let Some(o) = to.overlay.as_deref_mut() {
        o.put(&place, &key, &value, expires);
    }
    put_at(to.batch, &place, &key, &value, expires);
    Ok(())
}

fn delete(to: &mut Stage<'_>, keyspace: &str, key: &[u8]) {
    if let Some(place) = to.staged.resolve(keyspace) {
        if let Some(o) = to.overlay.as_deref_mut() {
            o.delete(&place, key);
        }
        delete_at(to.batch, &place, key);
    }
}

/// Runs one call. Without procedures, or with no overlay (a caller's mistake: an entry with
/// calls always has one), it answers that it was not run, writing nothing.
fn call(to: &mut Stage<'_>, name: &str, args: &[u8], at: u64) -> crate::Result<Vec<u8>> {
    let (Some(procedures), Some(overlay)) = (to.procedures, to.overlay.as_deref_mut()) else {
        return Ok(NO_PROCEDURES.to_vec());
    };
    let mut ctx = CallContext {
        at,
        staged: to.staged,
        batch: to.batch,
        overlay,
    };
    procedures.call(name, args, &mut ctx)
}

/// The answer of a call on a node without procedures (`ReplicationConfig::procedures`).
pub const NO_PROCEDURES: &[u8] = b"ERR this node has no procedures";

#[cfg(test)]
#[path = "apply_tests.rs"]
mod tests;
