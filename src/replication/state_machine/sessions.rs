//! Write sessions: which forwarded writes the state machine has applied, so that a copy of
//! one reaching the log again is skipped, and a forwarded write is applied at most once.
//!
//! A follower forwards a client's write to the leader (`tcp::Forwarder`). When the answer
//! does not come back — the leader lost its leadership after appending the entry (openraft
//! then answers "not the leader" for an entry that may still commit), or the connection
//! broke — the forwarder sends the same write again, to the new leader, under the same
//! [`WriteId`]. Both copies may commit; every node applies the log in the same order and
//! skips the later one here, so every node skips the same copy.
//!
//! Per session (a forwarder's lifetime), the table keeps `settled_below` (every write
//! numbered below it was answered to its caller: it is never sent again) and the numbers
//! applied at or above it. A write whose number is held is a duplicate: skipped, and
//! answered as done. A write numbered below `settled_below` and not held is a late copy of a
//! write its caller was already answered about: skipped, and answered as not applied.
//!
//! Bounds, so that a peer cannot grow the table: at most `MAX_WINDOW` numbers per session
//! (past it the lowest is dropped and `settled_below` moves above it — a retry of that
//! write is then answered "not applied", never applied twice) and `MAX_SESSIONS` sessions
//! (past it the one that wrote longest ago, by log index, is dropped — a retry from it would
//! be applied again: it would have to come after 1,024 other forwarders wrote since). A
//! forwarder keeps at most `MAX_FORWARDS` (48) writes in flight, so a window of 1,024 numbers
//! is never reached by a live one.
//!
//! The table is part of the replicated data: each session is a key `m/s/` + its id
//! (big-endian), written in the batch of the entries that changed it (FORMAT.md §7.2), so it
//! travels in snapshots and is exactly as durable as the data. Its copy in memory is loaded at
//! open and at each snapshot install. A failed write of a batch fails the apply, which stops
//! the Raft core, so memory never runs ahead of the disk for long: a restart reloads it.

use std::collections::{BTreeSet, HashMap};

use crate::coding::Cursor;
use crate::db::{Db, WriteBatch};
use crate::replication::WriteId;

/// The key prefix of the session records.
const PREFIX: &[u8] = b"m/s/";
/// Sessions kept.
pub(super) const MAX_SESSIONS: usize = 1024;
/// Applied numbers kept per session.
pub(super) const MAX_WINDOW: usize = 1024;

/// What to do with a write that carries an id.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Apply it: first time seen.
    Apply,
    /// Skip it, answered as done: applied before.
    Duplicate,
    /// Skip it, answered as not applied: below its session's window.
    Late,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    settled_below: u64,
    applied: BTreeSet<u64>,
    /// The log index of the entry that last touched it (which session to drop first).
    last_index: u64,
}

/// The table of one state machine's store.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    map: HashMap<u64, Session>,
    /// Sessions changed since the last `flush`.
    dirty: BTreeSet<u64>,
    /// Sessions dropped since the last `flush`.
    dropped: Vec<u64>,
}

fn key(session: u64) -> Vec<u8> {
    let mut k = PREFIX.to_vec();
    k.extend_from_slice(&session.to_be_bytes());
    k
}

impl Sessions {
    /// Reads the table from `db`, validating each record.
    pub(super) fn load(db: &Db) -> crate::Result<Sessions> {
        let mut hi = PREFIX.to_vec();
        if let Some(last) = hi.last_mut() {
            *last += 1;
        }
        let mut map = HashMap::new();
        for item in db.scan(PREFIX.to_vec()..hi)? {
            let (k, v) = item?;
            let corrupt = |reason: String| crate::Error::Corruption {
                path: db.path().to_path_buf(),
                reason: format!("state machine write session {k:02x?}: {reason}"),
            };
            let id = <[u8; 8]>::try_from(&k[PREFIX.len()..])
                .map_err(|_| corrupt("a key of the wrong length".into()))?;
            map.insert(u64::from_be_bytes(id), decode(&v).map_err(corrupt)?);
        }
        if map.len() > MAX_SESSIONS {
            return Err(crate::Error::Corruption {
                path: db.path().to_path_buf(),
                reason: format!(
                    "{} write sessions (at most {MAX_SESSIONS} are kept)",
                    map.len()
                ),
            });
        }
        Ok(Sessions {
            map,
            ..Sessions::default()
        })
    }

    /// Records that the entry at log `index` holds the write `id`, and says whether to apply
    /// it. Deterministic: every node decides alike from the same log.
    pub(super) fn check(&mut self, id: WriteId, index: u64) -> Verdict {
        if !self.map.contains_key(&id.session) && self.map.len() >= MAX_SESSIONS {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(s, v)| (v.last_index, **s))
                .map(|(s, _)| *s);
            if let Some(s) = oldest {
                self.map.remove(&s);
                self.dirty.remove(&s);
                self.dropped.push(s);
            }
        }
        self.dirty.insert(id.session);
        let s = self.map.entry(id.session).or_default();
        s.last_index = s.last_index.max(index);
        if id.settled_below > s.settled_below {
            s.settled_below = id.settled_below;
            s.applied = s.applied.split_off(&id.settled_below);
        }
        if s.applied.contains(&id.seq) {
            return Verdict::Duplicate;
        }
        if id.seq < s.settled_below {
            return Verdict::Late;
        }
        s.applied.insert(id.seq);
        if s.applied.len() > MAX_WINDOW {
            if let Some(lowest) = s.applied.pop_first() {
                s.settled_below = lowest + 1;
            }
        }
        Verdict::Apply
    }

    /// Writes the sessions changed since the last flush into `batch`, and deletes the
    /// dropped ones.
    pub(super) fn flush(&mut self, batch: &mut WriteBatch) {
        for s in self.dropped.drain(..) {
            batch.delete(key(s));
        }
        for s in std::mem::take(&mut self.dirty) {
            if let Some(v) = self.map.get(&s) {
                batch.put(key(s), encode(v));
            }
        }
    }

    /// How many sessions are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}

/// u64 settled_below, u64 last index, u32 count, that many u64 numbers, ascending.
fn encode(s: &Session) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + 8 * s.applied.len());
    out.extend_from_slice(&s.settled_below.to_le_bytes());
    out.extend_from_slice(&s.last_index.to_le_bytes());
    crate::replication::codec::put_u32(&mut out, s.applied.len());
    for n in &s.applied {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out
}

/// Decodes a session record, validating it (the fuzzer's target too).
pub(crate) fn decode(b: &[u8]) -> Result<Session, String> {
    let mut c = Cursor::new(b);
    let settled_below = c.u64()?;
    let last_index = c.u64()?;
    let n = c.u32()? as usize;
    if n > MAX_WINDOW {
        return Err(format!("{n} numbers (at most {MAX_WINDOW})"));
    }
    let mut applied = BTreeSet::new();
    let mut prev = None;
    for _ in 0..n {
        let seq = c.u64()?;
        if seq < settled_below || prev.is_some_and(|p| seq <= p) {
            return Err(format!(
                "number {seq} out of order or below the window ({settled_below})"
            ));
        }
        prev = Some(seq);
        applied.insert(seq);
    }
    if !c.is_empty() {
        return Err("trailing bytes".into());
    }
    Ok(Session {
        settled_below,
        applied,
        last_index,
    })
}

/// Valid records, for the decoders' fuzzer: empty, and a window of a few numbers.
#[cfg(test)]
pub(crate) fn seed_records() -> Vec<Vec<u8>> {
    let mut t = Sessions::default();
    for seq in [3, 5, 9, 200] {
        t.check(
            WriteId {
                session: 1,
                seq,
                settled_below: 2,
            },
            seq,
        );
    }
    vec![encode(&Session::default()), encode(&t.map[&1])]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(session: u64, seq: u64, settled_below: u64) -> WriteId {
        WriteId {
            session,
            seq,
            settled_below,
        }
    }

    #[test]
    fn a_copy_is_applied_once_and_a_late_copy_never() {
        let mut t = Sessions::default();
        assert_eq!(t.check(id(1, 0, 0), 1), Verdict::Apply);
        assert_eq!(t.check(id(1, 1, 0), 2), Verdict::Apply);
        // The retry of 0, after 1 was sent: still held.
        assert_eq!(t.check(id(1, 0, 0), 3), Verdict::Duplicate);
        // Another session's 0 is its own.
        assert_eq!(t.check(id(2, 0, 0), 4), Verdict::Apply);
        // 0 and 1 settled: forgotten, and a late copy of either is not applied.
        assert_eq!(t.check(id(1, 2, 2), 5), Verdict::Apply);
        assert_eq!(t.check(id(1, 1, 0), 6), Verdict::Late);
        assert_eq!(t.check(id(1, 2, 0), 7), Verdict::Duplicate);
    }

    #[test]
    fn the_window_and_the_session_count_are_bounded() {
        let mut t = Sessions::default();
        for seq in 0..=MAX_WINDOW as u64 {
            assert_eq!(t.check(id(1, seq, 0), seq + 1), Verdict::Apply);
        }
        // The lowest number left the window: its retry is refused, not applied again.
        assert_eq!(t.check(id(1, 0, 0), 5000), Verdict::Late);
        assert_eq!(t.check(id(1, 1, 0), 5001), Verdict::Duplicate);
        for s in 2..=MAX_SESSIONS as u64 + 1 {
            t.check(id(s, 0, 0), 10_000 + s);
        }
        assert_eq!(t.len(), MAX_SESSIONS);
        // Session 1 wrote longest ago: it was dropped, so its 1 is new again.
        assert_eq!(t.check(id(1, 1, 0), 20_000), Verdict::Apply);
    }

    #[test]
    fn records_round_trip_and_damage_is_refused() {
        let mut t = Sessions::default();
        for seq in [3, 5, 9] {
            t.check(id(7, seq, 2), 40 + seq);
        }
        let s = t.map[&7].clone();
        let b = encode(&s);
        assert_eq!(decode(&b).unwrap(), s);
        for n in 0..b.len() {
            assert!(decode(&b[..n]).is_err(), "truncated to {n}");
        }
        let mut unordered = b.clone();
        unordered[20..28].copy_from_slice(&9u64.to_le_bytes());
        assert!(decode(&unordered).unwrap_err().contains("out of order"));
        let mut huge = b;
        huge[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).unwrap_err().contains("at most"));
    }
}
