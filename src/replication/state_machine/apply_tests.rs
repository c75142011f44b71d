//! Tests of `apply.rs`: staging entries, write sessions and calls.
use super::*;
use crate::replication::state_machine::keyspaces::Spaces;
use crate::replication::{Part, WriteId};
use std::ops::Bound;
use std::sync::Arc;

/// Staging without calls.
fn plain<'a>(staged: &'a mut Staged, batch: &'a mut WriteBatch) -> Stage<'a> {
    Stage {
        staged,
        batch,
        overlay: None,
        procedures: None,
    }
}

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
        let to = plain(&mut map, &mut batch);
        stage(req, i as u64 + 1, &mut sessions, to, &mut response).unwrap();
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
        plain(&mut map, &mut first),
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
        plain(&mut map, &mut batch),
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

/// A counter: `args` is a key of the default keyspace; adds one to its integer value
/// (absent: 0), keeping its expiry, and answers the new value; a value that is not an
/// integer is answered `NaN` and left alone. `clear` with `start..end` deletes that range.
#[derive(Debug)]
struct Counter;

impl Procedures for Counter {
    fn call(&self, name: &str, args: &[u8], ctx: &mut CallContext<'_>) -> crate::Result<Vec<u8>> {
        if name == "clear" {
            let text = String::from_utf8_lossy(args).into_owned();
            let (start, end) = text.split_once("..").unwrap();
            ctx.delete_range("", start.as_bytes(), end.as_bytes());
            return Ok(Vec::new());
        }
        if let Some(text) = name.strip_prefix("list ") {
            let (range, limit) = text.split_once(' ').unwrap();
            let (start, end) = range.split_once("..").unwrap();
            let limit = limit.parse().unwrap();
            let (found, more) = ctx.scan("", start.as_bytes(), end.as_bytes(), limit)?;
            let mut out: Vec<String> = found
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}={}",
                        String::from_utf8_lossy(k),
                        String::from_utf8_lossy(v)
                    )
                })
                .collect();
            if more {
                out.push("more".into());
            }
            return Ok(out.join(",").into_bytes());
        }
        assert_eq!(name, "incr");
        let (n, expires) = match ctx.get("", args)? {
            None => (0, None),
            Some(s) => match std::str::from_utf8(&s.value)
                .ok()
                .and_then(|v| v.parse::<i64>().ok())
            {
                Some(n) => (n, s.expires),
                None => return Ok(b"NaN".to_vec()),
            },
        };
        let new = (n + 1).to_string().into_bytes();
        ctx.put("", args, &new, expires)?;
        Ok(new)
    }
}

fn incr(key: &str, at: u64) -> Op {
    Op::Call {
        name: "incr".into(),
        args: key.into(),
        at,
    }
}

/// Applies `reqs` as one apply: each entry staged, with an overlay when it has calls, and
/// the batch written before an entry with calls (as `apply_entries` does); answers each
/// entry's response.
fn apply_all(db: &Arc<crate::Db>, sessions: &mut Sessions, reqs: Vec<Request>) -> Vec<Response> {
    let mut map = Staged::new(Arc::new(Spaces::load(Arc::clone(db)).unwrap()));
    let mut batch = WriteBatch::new();
    let mut overlay = Overlay::default();
    let mut out = Vec::new();
    for (i, req) in reqs.into_iter().enumerate() {
        let calls = req.calls() > 0;
        if calls && !batch.is_empty() {
            db.write(std::mem::take(&mut batch)).unwrap();
        }
        overlay.clear();
        let mut response = Response::default();
        let to = Stage {
            staged: &mut map,
            batch: &mut batch,
            overlay: calls.then_some(&mut overlay),
            procedures: Some(&Counter),
        };
        stage(req, i as u64 + 1, sessions, to, &mut response).unwrap();
        out.push(response);
    }
    db.write(batch).unwrap();
    out
}

fn answers(r: &Response) -> Vec<Option<String>> {
    r.answers
        .iter()
        .map(|a| a.as_ref().map(|a| String::from_utf8_lossy(a).into_owned()))
        .collect()
}

/// A call sees the writes before it: earlier entries (written first), and its own entry's
/// earlier operations, calls included (the overlay), through puts, deletes and range deletes.
#[test]
fn calls_read_the_writes_before_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(crate::Db::open(dir.path(), crate::Options::default()).unwrap());
    let mut sessions = Sessions::default();
    let range = |a: &str, b: &str| Op::DeleteRange {
        keyspace: String::new(),
        start: Bound::Included(a.into()),
        end: Bound::Excluded(b.into()),
    };
    let out = apply_all(
        &db,
        &mut sessions,
        vec![
            Request::new(vec![put("a", "10")]),
            Request::new(vec![
                incr("a", 5),
                incr("a", 5),
                put("b", "x"),
                incr("b", 5),
            ]),
            Request::new(vec![
                put("c", "7"),
                incr("c", 5),
                range("c", "d"),
                incr("c", 5),
            ]),
            Request::new(vec![Op::Delete { key: "a".into() }, incr("a", 5)]),
        ],
    );
    assert_eq!(
        answers(&out[1]),
        [Some("11".into()), Some("12".into()), Some("NaN".into())]
    );
    assert_eq!(answers(&out[2]), [Some("8".into()), Some("1".into())]);
    assert_eq!(answers(&out[3]), [Some("1".into())]);
    assert_eq!(db.get(b"da").unwrap(), Some(b"1".to_vec()));
    assert_eq!(db.get(b"db").unwrap(), Some(b"x".to_vec()));
    assert_eq!(db.get(b"dc").unwrap(), Some(b"1".to_vec()));
}

/// A call's range delete removes the range from the batch and from the reads after it in
/// its entry, and nothing outside it.
#[test]
fn a_call_deletes_a_range() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(crate::Db::open(dir.path(), crate::Options::default()).unwrap());
    let mut sessions = Sessions::default();
    let clear = Op::Call {
        name: "clear".into(),
        args: "a..b".into(),
        at: 5,
    };
    let out = apply_all(
        &db,
        &mut sessions,
        vec![
            Request::new(vec![put("a", "1"), put("ab", "7"), put("b", "3")]),
            Request::new(vec![put("aa", "4"), clear, incr("ab", 5), incr("b", 5)]),
        ],
    );
    assert_eq!(
        answers(&out[1]),
        [Some(String::new()), Some("1".into()), Some("4".into())]
    );
    assert_eq!(db.get(b"da").unwrap(), None);
    assert_eq!(db.get(b"daa").unwrap(), None);
    assert_eq!(db.get(b"dab").unwrap(), Some(b"1".to_vec()));
    assert_eq!(db.get(b"db").unwrap(), Some(b"4".to_vec()));
}

/// A call's scan sees the store and its entry's earlier writes (puts, deletes, range
/// deletes), judges expiry at the call's time, and stops at its limit saying more follow.
#[test]
fn a_call_scans_a_range() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(crate::Db::open(dir.path(), crate::Options::default()).unwrap());
    let mut sessions = Sessions::default();
    let call = |name: &str, args: &str, at: u64| Op::Call {
        name: name.into(),
        args: args.into(),
        at,
    };
    let until = Op::PutUntil {
        keyspace: String::new(),
        key: "ad".into(),
        value: "9".into(),
        at: 1000,
    };
    let out = apply_all(
        &db,
        &mut sessions,
        vec![
            Request::new(vec![put("a", "1"), put("ab", "7"), put("b", "3"), until]),
            Request::new(vec![
                put("aa", "4"),
                put("ac", "5"),
                call("clear", "a..aa", 5),
                incr("ab", 5),
                call("clear", "ac..ad", 5),
                call("list a..b 10", "", 999),
                call("list a..b 2", "", 999),
                call("list a..b 3", "", 1000),
                call("list b..c 1", "", 5),
            ]),
        ],
    );
    assert_eq!(
        answers(&out[1])[3..],
        [
            Some("aa=4,ab=8,ad=9".into()),
            Some("aa=4,ab=8,more".into()),
            Some("aa=4,ab=8".into()),
            Some("b=3".into()),
        ]
    );
}

/// Expiry is judged at the call's time, not the store's clock: a key expiring at 1,000 ms
/// is live to a call at 999 (which keeps its expiry) and gone to one at 1,000.
#[test]
fn calls_judge_expiry_at_their_own_time() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(crate::Db::open(dir.path(), crate::Options::default()).unwrap());
    let mut sessions = Sessions::default();
    let until = |k: &str, v: &str| Op::PutUntil {
        keyspace: String::new(),
        key: k.into(),
        value: v.into(),
        at: 1000,
    };
    let out = apply_all(
        &db,
        &mut sessions,
        vec![
            Request::new(vec![until("e", "5"), until("f", "5")]),
            Request::new(vec![incr("e", 999)]),
            Request::new(vec![incr("e", 999), incr("f", 1000)]),
        ],
    );
    assert_eq!(answers(&out[1]), [Some("6".into())]);
    assert_eq!(answers(&out[2]), [Some("7".into()), Some("1".into())]);
    let e = db.entry_at(b"de", 999).unwrap().unwrap();
    assert_eq!(e, (b"7".to_vec(), Some(1000)), "the expiry was kept");
    assert_eq!(
        db.entry_at(b"df", 5000).unwrap().unwrap(),
        (b"1".to_vec(), None)
    );
}

/// The call of a write skipped as a copy applied before is not run again: its answer is
/// `None`, and the counter moved once.
#[test]
fn a_repeated_call_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(crate::Db::open(dir.path(), crate::Options::default()).unwrap());
    let mut sessions = Sessions::default();
    let out = apply_all(
        &db,
        &mut sessions,
        vec![
            forwarded(0, vec![incr("n", 5)]),
            forwarded(0, vec![incr("n", 5)]),
        ],
    );
    assert_eq!(answers(&out[0]), [Some("1".into())]);
    assert_eq!(answers(&out[1]), [None]);
    assert_eq!(db.get(b"dn").unwrap(), Some(b"1".to_vec()));
}
