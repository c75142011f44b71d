//! Applying committed entries: each entry's writes (less those its write sessions skip),
//! its log id (and membership), the sessions and the keyspace map entries it changed, in one
//! batch, not synced (`mod.rs` says why that is durable enough). Entries openraft has at
//! hand are written together; a batch is cut at `APPLY_BATCH_BYTES`. A keyspace an entry
//! creates is created before its batch is written, and one it clears is dropped after
//! (`keyspaces.rs`).

use std::ops::Bound;
use std::sync::PoisonError;
use std::time::{Duration, UNIX_EPOCH};

use futures_util::{Stream, StreamExt};
use openraft::storage::EntryResponder;
use openraft::EntryPayload;

use super::keyspaces::{Place, Staged};
use super::sessions::{Sessions, Verdict};
use super::{
    data_key, data_range, sm_err, ErrorVerb, StateMachine, StorageResult, APPLIED, MEMBERSHIP,
};
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
                    Ok(()) => stage(
                        req,
                        e.log_id.index,
                        &mut self.sessions(),
                        &mut staged,
                        &mut batch,
                        &mut response,
                    )
                    .map_err(|err| sm_err(ErrorVerb::Write, err))?,
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

/// Adds the operations of `req` (at log `index`, already validated) to `batch`, less the
/// writes `sessions` skips; a late copy is named in `response`. Keyspace operations are
/// staged in `staged`; an error is a store failure creating a keyspace.
fn stage(
    req: Request,
    index: u64,
    sessions: &mut Sessions,
    staged: &mut Staged,
    batch: &mut WriteBatch,
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
                continue;
            }
            match op {
                Op::Put { key, value } => put(staged, batch, "", (key, value), None)?,
                Op::PutIn {
                    keyspace,
                    key,
                    value,
                } => put(staged, batch, &keyspace, (key, value), None)?,
                Op::Delete { key } => delete(staged, batch, "", key),
                Op::DeleteIn { keyspace, key } => delete(staged, batch, &keyspace, key),
                Op::Clear { keyspace } => staged.clear(&keyspace, batch),
                Op::Swap { a, b } => staged.swap(&a, &b, batch),
                Op::PutUntil {
                    keyspace,
                    key,
                    value,
                    at,
                } => put(staged, batch, &keyspace, (key, value), Some(at))?,
                Op::DeleteRange {
                    keyspace,
                    start,
                    end,
                } => delete_range(staged, batch, &keyspace, (start, end)),
            }
        }
    }
    Ok(())
}

/// Sets `key` to `value` in `keyspace`, until `at` (ms since the epoch) when given.
fn put(
    staged: &mut Staged,
    batch: &mut WriteBatch,
    keyspace: &str,
    (key, value): (Vec<u8>, Vec<u8>),
    at: Option<u64>,
) -> crate::Result<()> {
    // A `SystemTime` holds every u64 of milliseconds on Linux (i64 seconds); where it would
    // not, the latest it holds, which the store clamps like any time past its own latest.
    let at = at.map(|ms| {
        UNIX_EPOCH
            .checked_add(Duration::from_millis(ms))
            .unwrap_or(UNIX_EPOCH + Duration::from_millis(u64::MAX >> 11))
    });
    match (staged.place_for_write(keyspace, batch)?, at) {
        (Place::Default, None) => batch.put(data_key(&key), value),
        (Place::Default, Some(at)) => batch.put_with_expiry(data_key(&key), value, at),
        (Place::Own(k), None) => batch.put_in(&k, key, value),
        (Place::Own(k), Some(at)) => batch.put_in_with_expiry(&k, key, value, at),
    };
    Ok(())
}

fn delete(staged: &Staged, batch: &mut WriteBatch, keyspace: &str, key: Vec<u8>) {
    match staged.resolve(keyspace) {
        None => {}
        Some(Place::Default) => {
            batch.delete(data_key(&key));
        }
        Some(Place::Own(k)) => {
            batch.delete_in(&k, key);
        }
    }
}

/// Deletes `range` of `keyspace`: in the default place, the data keys of the range only (the
/// state machine's own keys there lie outside `DATA`'s prefix: `data_range`).
fn delete_range(
    staged: &Staged,
    batch: &mut WriteBatch,
    keyspace: &str,
    (start, end): (Bound<Vec<u8>>, Bound<Vec<u8>>),
) {
    match staged.resolve(keyspace) {
        None => {}
        Some(Place::Default) => {
            let (start, end) = (
                start.as_ref().map(Vec::as_slice),
                end.as_ref().map(Vec::as_slice),
            );
            batch.delete_range(data_range(start, end));
        }
        Some(Place::Own(k)) => {
            batch.delete_range_in(&k, (start, end));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::state_machine::keyspaces::Spaces;
    use crate::replication::{Part, WriteId};
    use std::sync::Arc;

    /// A map over a new, empty store (kept in `dir`).
    fn staged(dir: &tempfile::TempDir) -> Staged {
        let db = crate::Db::open(dir.path(), crate::Options::default()).unwrap();
        Staged::new(Arc::new(Spaces::load(Arc::new(db)).unwrap()))
    }

    fn put(k: &str, v: &str) -> Op {
        Op::Put {
            key: k.into(),
            value: v.into(),
        }
    }

    fn forwarded(seq: u64, ops: Vec<Op>) -> Request {
        let n = ops.len() as u32;
        Request {
            ops,
            parts: vec![Part {
                id: Some(WriteId {
                    session: 5,
                    seq,
                    settled_below: 0,
                }),
                ops: n,
            }],
        }
    }

    /// The double apply a retried forward caused: `a` forwarded, `b` written by another
    /// client, then the retry of `a` reaches the log too. Without the sessions the retry
    /// overwrote `b`.
    #[test]
    fn a_retried_forward_does_not_undo_a_later_write() {
        let mut sessions = Sessions::default();
        let dir = tempfile::tempdir().unwrap();
        let mut map = staged(&dir);
        let mut staged = Vec::new();
        let log = [
            forwarded(0, vec![put("k", "a")]),
            Request::new(vec![put("k", "b")]),
            forwarded(0, vec![put("k", "a")]),
        ];
        for (i, req) in log.into_iter().enumerate() {
            let mut batch = WriteBatch::new();
            let mut response = Response::default();
            stage(
                req,
                i as u64 + 1,
                &mut sessions,
                &mut map,
                &mut batch,
                &mut response,
            )
            .unwrap();
            assert!(response.late.is_empty());
            staged.push(batch.into_ops().unwrap());
        }
        assert_eq!(staged[0], [(b"dk".to_vec(), Some(b"a".to_vec()))]);
        assert_eq!(staged[1], [(b"dk".to_vec(), Some(b"b".to_vec()))]);
        assert!(
            staged[2].is_empty(),
            "the retry was applied: {:?}",
            staged[2]
        );
    }

    /// In a merged entry, only the duplicate part is skipped, and a late one is named.
    #[test]
    fn only_the_skipped_part_of_a_merged_entry_is_left_out() {
        let mut sessions = Sessions::default();
        let dir = tempfile::tempdir().unwrap();
        let mut map = staged(&dir);
        let mut first = WriteBatch::new();
        stage(
            forwarded(3, vec![put("x", "1")]),
            1,
            &mut sessions,
            &mut map,
            &mut first,
            &mut Response::default(),
        )
        .unwrap();
        let id = |seq, settled_below| {
            Some(WriteId {
                session: 5,
                seq,
                settled_below,
            })
        };
        let merged = Request {
            ops: vec![put("y", "2"), put("x", "1"), put("z", "3"), put("w", "4")],
            parts: vec![
                Part { id: None, ops: 1 },
                Part {
                    id: id(3, 0),
                    ops: 1,
                },
                Part {
                    id: id(4, 0),
                    ops: 1,
                },
                Part {
                    id: id(1, 2),
                    ops: 1,
                },
            ],
        };
        let mut batch = WriteBatch::new();
        let mut response = Response::default();
        stage(
            merged,
            2,
            &mut sessions,
            &mut map,
            &mut batch,
            &mut response,
        )
        .unwrap();
        let keys: Vec<_> = batch
            .into_ops()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, [b"dy".to_vec(), b"dz".to_vec()]);
        assert_eq!(response.late, [id(1, 2).unwrap()]);
    }
}
