//! `fixtures/replication-v<N>/node/`: a one-node replicated store written by layout version N
//! (FORMAT.md §7) — a log with a purged prefix, a vote and a commit mark; a state machine
//! with data, its applied position and membership; a snapshot pack. Version 2 adds writes
//! with ids: one applied, a plain write after it, and a copy of the first, skipped (entries
//! with parts, and a write session). Version 3 adds keyspace operations: writes in two
//! keyspaces, a swap of them, a clear and a write after it. Version 4 adds puts with an expiry
//! (`Op::PutUntil`): one long passed, two far off. Version 5 adds range deletes
//! (`Op::DeleteRange`): `k50`..`k52` in the default keyspace, `r1`..`r2` of three in `users`.
//! Version 6 adds procedure calls (`Op::Call`): one entry calling `incr` on `n` twice.
//! Frozen: this build must read each as written. Written once, when missing and
//! `LSM_BLOOM_WRITE_MISSING_FIXTURES` is set (never overwritten; this build writes version 6
//! only).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lsm_bloom::replication::network::Router;
use lsm_bloom::replication::openraft::storage::{RaftLogStorage, RaftStateMachine};
use lsm_bloom::replication::openraft::{RaftLogReader, SnapshotPolicy};
use lsm_bloom::replication::{
    BasicNode, CallContext, LogStore, Op, Part, Procedures, ReadPolicy, ReplicatedDb, Request,
    StateMachine, WriteId,
};
use lsm_bloom::{KeyExpiry, Options};

use crate::cluster::fast_config;
use crate::common::copy_dir;

pub const WRITES: usize = 60;
pub const DELETED: usize = 7;
/// The expiry of the version 4 fixture's lasting expiring keys: 2100-01-01, in ms.
const FAR: u64 = 4_102_444_800_000;

pub fn dir(version: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/replication-v{version}/node"))
}

/// The keys of the default keyspace version 5's range delete removes (`k50`..`k52`).
const RANGE_DELETED: std::ops::Range<usize> = 50..53;

/// The data the fixture holds: `k00`..`k59` = `v00`..`v59`, less `k07` (and from version 5
/// `RANGE_DELETED`); from version 2, `t0` = `second`.
pub fn expected(version: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut data: Vec<_> = (0..WRITES)
        .filter(|&i| i != DELETED && (version < 5 || !RANGE_DELETED.contains(&i)))
        .map(|i| {
            (
                format!("k{i:02}").into_bytes(),
                format!("v{i:02}").into_bytes(),
            )
        })
        .collect();
    if version >= 2 {
        data.push((b"t0".to_vec(), b"second".to_vec()));
    }
    if version >= 4 {
        data.push((b"e2".to_vec(), b"later".to_vec()));
    }
    if version >= 6 {
        data.push((b"n".to_vec(), b"2".to_vec()));
    }
    data.sort();
    data
}

/// A put until `at` of `key` = `value` in `keyspace`.
fn until(keyspace: &str, key: &str, value: &str, at: u64) -> Op {
    Op::PutUntil {
        keyspace: keyspace.into(),
        key: key.into(),
        value: value.into(),
        at,
    }
}

/// `t0` = `value`, as write 0 of session `0xf1` (a forwarded write's id).
fn with_id(value: &str) -> Request {
    Request {
        ops: vec![Op::Put {
            key: b"t0".to_vec(),
            value: value.into(),
        }],
        parts: vec![Part {
            id: Some(WriteId {
                session: 0xf1,
                seq: 0,
                settled_below: 0,
            }),
            ops: 1,
        }],
    }
}

async fn write_fixture(to: &Path, version: u32) {
    assert_eq!(version, 6, "this build writes layout version 6");
    let mut config = fast_config();
    config.procedures = Some(Arc::new(Incr));
    config.raft.snapshot_policy = SnapshotPolicy::LogsSinceLast(25);
    config.raft.max_in_snapshot_log_to_keep = 5;
    config.raft.purge_batch_size = 1;
    let router = Router::new();
    let node = ReplicatedDb::open(1, to, config, router.network(1))
        .await
        .unwrap();
    router.register(1, node.clone());
    node.initialize(BTreeMap::from([(1, BasicNode::new("127.0.0.1:7001"))]))
        .await
        .unwrap();
    for i in 0..WRITES {
        loop {
            if node
                .put(format!("k{i:02}"), format!("v{i:02}"))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    node.delete(format!("k{DELETED:02}")).await.unwrap();
    node.write(with_id("first")).await.unwrap();
    node.put("t0", "second").await.unwrap();
    // A copy of the first: skipped.
    node.write(with_id("first")).await.unwrap();
    let put_in = |keyspace: &str, key: &str, value: &str| Op::PutIn {
        keyspace: keyspace.into(),
        key: key.into(),
        value: value.into(),
    };
    let writes = [
        vec![put_in("users", "u1", "ada"), put_in("users", "u2", "bob")],
        vec![put_in("sessions", "s1", "x")],
        vec![Op::Swap {
            a: "users".into(),
            b: "sessions".into(),
        }],
        vec![
            Op::Clear {
                keyspace: "users".into(),
            },
            put_in("users", "u3", "cy"),
        ],
        vec![
            until("", "e1", "soon", 1_000),
            until("", "e2", "later", FAR),
        ],
        vec![until("users", "u5", "dan", FAR)],
        vec![
            put_in("users", "r1", "x"),
            put_in("users", "r2", "y"),
            put_in("users", "r3", "z"),
        ],
        vec![
            Op::DeleteRange {
                keyspace: "users".into(),
                start: Bound::Included(b"r1".to_vec()),
                end: Bound::Excluded(b"r3".to_vec()),
            },
            Op::DeleteRange {
                keyspace: String::new(),
                start: Bound::Excluded(b"k49".to_vec()),
                end: Bound::Included(b"k52".to_vec()),
            },
        ],
    ];
    for ops in writes {
        node.write(Request::new(ops)).await.unwrap();
    }
    let incr = || Op::Call {
        name: "incr".into(),
        args: b"n".to_vec(),
        at: 1_700_000_000_000,
    };
    let answers = node
        .write_answered(Request::new(vec![incr(), incr()]))
        .await
        .unwrap();
    assert_eq!(answers, [Some(b"1".to_vec()), Some(b"2".to_vec())]);
    assert!(
        node.metrics().purged.is_some(),
        "the fixture needs a purged log"
    );
    node.shutdown().await.unwrap();
}

/// The version 6 fixture's procedure: `incr` adds one to the integer at the key `args` of
/// the default keyspace (absent: 0) and answers the new value.
#[derive(Debug)]
pub struct Incr;

impl Procedures for Incr {
    fn call(
        &self,
        name: &str,
        args: &[u8],
        ctx: &mut CallContext<'_>,
    ) -> lsm_bloom::Result<Vec<u8>> {
        if name != "incr" {
            return Ok(b"unknown".to_vec());
        }
        let old = ctx.get("", args)?.map_or(Some(0), |s| {
            std::str::from_utf8(&s.value)
                .ok()
                .and_then(|v| v.parse::<i64>().ok())
        });
        let Some(new) = old.and_then(|n| n.checked_add(1)) else {
            return Ok(b"not an integer".to_vec());
        };
        let new = new.to_string().into_bytes();
        ctx.put("", args, &new, None)?;
        Ok(new)
    }
}

/// Keys and values, in key order.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// The keyspaces the fixture holds from version 3, each with its keys and values.
pub fn expected_keyspaces(version: u32) -> Vec<(&'static str, Pairs)> {
    if version < 3 {
        return Vec::new();
    }
    let kv = |k: &str, v: &str| (k.as_bytes().to_vec(), v.as_bytes().to_vec());
    let mut users = vec![kv("u3", "cy")];
    if version >= 4 {
        users.push(kv("u5", "dan"));
    }
    if version >= 5 {
        users.insert(0, kv("r3", "z"));
    }
    vec![
        ("sessions", vec![kv("u1", "ada"), kv("u2", "bob")]),
        ("users", users),
    ]
}

/// The expiries the fixture holds (keyspace, key, expiry) from version 4, and of a key of
/// every version.
fn expected_expiries(version: u32) -> Vec<(&'static str, &'static str, KeyExpiry)> {
    let mut e = vec![
        ("", "k00", KeyExpiry::Never),
        ("", "k07", KeyExpiry::Absent),
    ];
    if version >= 4 {
        e.extend([
            ("", "e1", KeyExpiry::Absent),
            ("", "e2", KeyExpiry::At(FAR)),
            ("users", "u5", KeyExpiry::At(FAR)),
            ("users", "u3", KeyExpiry::Never),
        ]);
    }
    e
}

/// A fresh copy of the fixture (opening a store changes its directory).
pub async fn copy(version: u32) -> tempfile::TempDir {
    let src = dir(version);
    if !src.exists() {
        assert!(
            std::env::var_os("LSM_BLOOM_WRITE_MISSING_FIXTURES").is_some(),
            "missing fixture {}",
            src.display()
        );
        write_fixture(&src, version).await;
    }
    let t = tempfile::tempdir().unwrap();
    copy_dir(&src, &t.path().join("node"));
    t
}

/// The stores read the fixture as written, piece by piece, and a node opened on it serves
/// its data.
pub async fn check(version: u32) {
    let t = copy(version).await;
    let node_dir = t.path().join("node");

    let mut log = LogStore::open(node_dir.join("log")).unwrap();
    let state = log.get_log_state().await.unwrap();
    let purged = state.last_purged_log_id.expect("a purged prefix");
    let last = state.last_log_id.expect("entries");
    let entries = log
        .try_get_log_entries(purged.index + 1..=last.index)
        .await
        .unwrap();
    assert_eq!(entries.len() as u64, last.index - purged.index);
    assert!(log.read_vote().await.unwrap().is_some(), "a vote");
    drop(log);

    let mut sm = StateMachine::open(node_dir.join("sm"), Options::default()).unwrap();
    let (applied, membership) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(last), "applied up to the log's end");
    let nodes: Vec<_> = membership
        .membership()
        .nodes()
        .map(|(id, n)| (*id, n.addr.clone()))
        .collect();
    assert_eq!(nodes, vec![(1, "127.0.0.1:7001".to_string())]);
    let data: Vec<_> = sm
        .scan::<&[u8], _>(..)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(data, expected(version));
    for (name, want) in expected_keyspaces(version) {
        let got: Vec<_> = sm
            .scan_in::<&[u8], _>(name, ..)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got, want, "keyspace {name}");
    }
    for (name, key, want) in expected_expiries(version) {
        let got = sm.expiry_of_in(name, key.as_bytes()).unwrap();
        assert_eq!(got, want, "expiry of {name:?}/{key}");
    }
    let snap = sm
        .get_current_snapshot()
        .await
        .unwrap()
        .expect("a snapshot");
    assert!(
        snap.meta.last_log_id >= Some(purged),
        "the snapshot covers the purged log"
    );
    drop(sm);

    // The pack installs into another state machine: its data is the fixture's as of the
    // snapshot's position.
    let mut other = StateMachine::open(t.path().join("other"), Options::default()).unwrap();
    let mut into = other.begin_receiving_snapshot().await.unwrap();
    let mut from = snap.snapshot;
    tokio::io::copy(&mut from, &mut into).await.unwrap();
    other.install_snapshot(&snap.meta, into).await.unwrap();
    let (at, _) = other.applied_state().await.unwrap();
    assert_eq!(at, snap.meta.last_log_id);
    let data: Vec<_> = other
        .scan::<&[u8], _>(..)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let all = expected(version);
    assert!(data.len() > 30, "{} keys", data.len());
    // Keys deleted after the snapshot may still be in it.
    let deleted_later = |k: &[u8]| {
        k == b"k07"
            || (version >= 5
                && RANGE_DELETED
                    .clone()
                    .any(|i| k == format!("k{i:02}").as_bytes()))
    };
    assert!(
        data.iter()
            .all(|kv| all.contains(kv) || deleted_later(&kv.0)),
        "data not the fixture's"
    );
    drop(other);

    let router = Router::new();
    let config = fast_config().with_procedures(Some(Arc::new(Incr)));
    let node = ReplicatedDb::open(1, &node_dir, config, router.network(1))
        .await
        .unwrap();
    router.register(1, node.clone());
    let mut got = None;
    for _ in 0..300 {
        if let Ok(v) = node.get("k42", ReadPolicy::Linearizable).await {
            got = Some(v);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(got, Some(Some(b"v42".to_vec())));
    assert_eq!(
        node.get("k07", ReadPolicy::Linearizable).await.unwrap(),
        None
    );
    // Another copy of the id-carrying write: the session read back from the fixture skips
    // it (version 2), or it is new (version 1).
    node.write(with_id("first")).await.unwrap();
    let t0 = node.get("t0", ReadPolicy::Linearizable).await.unwrap();
    let want: &[u8] = if version >= 2 { b"second" } else { b"first" };
    assert_eq!(t0.as_deref(), Some(want));
    // A store of any version takes expiring puts once opened here, in the default place
    // (where every version keeps `""`) and in a keyspace.
    node.write(Request::new(vec![
        until("", "e3", "new", FAR + 1),
        until("users", "u6", "eve", FAR + 2),
        until("", "e4", "gone", 5),
    ]))
    .await
    .unwrap();
    for (name, key, want) in [
        ("", "e3", KeyExpiry::At(FAR + 1)),
        ("users", "u6", KeyExpiry::At(FAR + 2)),
        ("", "e4", KeyExpiry::Absent),
    ] {
        let got = node.expiry_of_in(name, key, ReadPolicy::Linearizable);
        assert_eq!(got.await.unwrap(), want, "expiry of {name:?}/{key}");
    }
    assert_eq!(
        node.get("e3", ReadPolicy::Linearizable).await.unwrap(),
        Some(b"new".to_vec())
    );
    node.shutdown().await.unwrap();
}
