//! Random concurrent transactions checked for serializability. Every value is a version
//! number and the transaction that wrote it; every write is read-modify-write (the version
//! read plus one). From the committed transactions' reads and writes the test builds the
//! direct serialization graph (Adya): an edge from the writer of a version to each reader
//! of it (wr), to the writer of the next version (ww), and from each reader of a version to
//! the writer of the next (rw). The history is serializable exactly when the graph has no
//! cycle; under snapshot isolation a write skew makes one. Each key's versions must also be
//! 1, 2, 3, … with one writer each (no lost update), and every aborted transaction must have
//! read a key that some other transaction changed (no false conflict).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use lsm_bloom::{Db, Error, Options};

const KEYS: u64 = 8;

fn key(i: u64) -> Vec<u8> {
    format!("key{i}").into_bytes()
}

fn value(version: u64, writer: u64) -> Vec<u8> {
    [version.to_le_bytes(), writer.to_le_bytes()].concat()
}

fn version_of(v: &[u8]) -> (u64, u64) {
    let n = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    (n(&v[..8]), n(&v[8..16]))
}

/// What a transaction did: (key, version) read, and (key, version) written.
#[derive(Debug, Default, Clone)]
struct Done {
    id: u64,
    reads: Vec<(u64, u64)>,
    writes: Vec<(u64, u64)>,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One random transaction: reads by get, multi_get or scan, then writes some keys it read.
fn run_one(db: &Db, id: u64, rng: &mut Rng) -> (Done, lsm_bloom::Result<()>) {
    let mut tx = db.transaction();
    let mut done = Done {
        id,
        ..Done::default()
    };
    let mut read: BTreeMap<u64, u64> = BTreeMap::new();
    match rng.below(3) {
        0 => {
            for _ in 0..1 + rng.below(3) {
                let k = rng.below(KEYS);
                let v = tx.get(key(k)).expect("get").expect("every key exists");
                read.insert(k, version_of(&v).0);
            }
        }
        1 => {
            let ks: Vec<u64> = (0..1 + rng.below(3)).map(|_| rng.below(KEYS)).collect();
            let names: Vec<Vec<u8>> = ks.iter().map(|&k| key(k)).collect();
            for (k, v) in ks.iter().zip(tx.multi_get(&names).expect("multi_get")) {
                read.insert(*k, version_of(&v.expect("every key exists")).0);
            }
        }
        _ => {
            let a = rng.below(KEYS);
            let b = (a + 1 + rng.below(3)).min(KEYS);
            let entries: Vec<_> = match rng.below(2) {
                0 => tx.scan(key(a)..key(b)).expect("scan").collect(),
                _ => tx.scan(key(a)..key(b)).expect("scan").rev().collect(),
            };
            assert_eq!(entries.len() as u64, b - a, "every key of {a}..{b} exists");
            for e in entries {
                let (k, v) = e.expect("entry");
                let k: u64 = String::from_utf8_lossy(&k[3..])
                    .parse()
                    .expect("key number");
                read.insert(k, version_of(&v).0);
            }
        }
    }
    done.reads = read.iter().map(|(&k, &v)| (k, v)).collect();
    for (&k, &v) in &read {
        if rng.below(2) == 0 {
            tx.put(key(k), value(v + 1, id)).expect("put");
            done.writes.push((k, v + 1));
        }
    }
    (done, tx.commit())
}

#[test]
fn concurrent_transactions_commit_a_serializable_history() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Db::open(dir.path(), Options::default()).expect("open"));
    for k in 0..KEYS {
        db.put(key(k), value(0, 0)).expect("put");
    }
    let (threads, each) = (4u64, 1500u64);
    let committed = Mutex::new(Vec::new());
    let aborted = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..threads {
            let (db, committed, aborted) = (Arc::clone(&db), &committed, &aborted);
            s.spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((t + 1) * 0x1234_5678));
                for i in 0..each {
                    let id = 1 + t * each + i;
                    match run_one(&db, id, &mut rng) {
                        (done, Ok(())) => committed.lock().expect("lock").push(done),
                        (done, Err(Error::Conflict { .. })) => {
                            aborted.lock().expect("lock").push(done)
                        }
                        (_, Err(e)) => panic!("{e}"),
                    }
                }
            });
        }
    });
    let committed = committed.into_inner().expect("lock");
    let aborted = aborted.into_inner().expect("lock");
    // Each key's versions 1..=last, one writer each; the store holds the last.
    let mut writer: HashMap<(u64, u64), u64> = HashMap::new();
    for k in 0..KEYS {
        writer.insert((k, 0), 0);
    }
    for t in &committed {
        for &w in &t.writes {
            if let Some(other) = writer.insert(w, t.id) {
                panic!(
                    "version {w:?} written by {other} and {} (a lost update)",
                    t.id
                );
            }
        }
    }
    for k in 0..KEYS {
        let last = (0..)
            .take_while(|v| writer.contains_key(&(k, *v)))
            .last()
            .expect("v0");
        let count = writer.keys().filter(|(kk, _)| *kk == k).count() as u64;
        assert_eq!(count, last + 1, "key {k}: versions with a gap");
        let stored = version_of(&db.get(key(k)).expect("get").expect("key"));
        assert_eq!(stored, (last, writer[&(k, last)]), "key {k}");
    }
    // The serialization graph is acyclic (Kahn's algorithm removes every node).
    let mut edges: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut add = |a: u64, b: u64| {
        if a != b {
            edges.entry(a).or_default().push(b);
        }
    };
    for t in &committed {
        for &(k, v) in &t.reads {
            add(writer[&(k, v)], t.id);
            if let Some(&next) = writer.get(&(k, v + 1)) {
                add(t.id, next);
            }
        }
        for &(k, v) in &t.writes {
            add(writer[&(k, v - 1)], t.id);
        }
    }
    let nodes: Vec<u64> = std::iter::once(0)
        .chain(committed.iter().map(|t| t.id))
        .collect();
    let mut indegree: HashMap<u64, usize> = nodes.iter().map(|&n| (n, 0)).collect();
    for targets in edges.values() {
        for b in targets {
            *indegree.get_mut(b).expect("node") += 1;
        }
    }
    let mut ready: Vec<u64> = indegree
        .iter()
        .filter(|(_, &d)| d == 0)
        .map(|(&n, _)| n)
        .collect();
    let mut removed = 0;
    while let Some(n) = ready.pop() {
        removed += 1;
        for b in edges.get(&n).into_iter().flatten() {
            let d = indegree.get_mut(b).expect("node");
            *d -= 1;
            if *d == 0 {
                ready.push(*b);
            }
        }
    }
    assert_eq!(
        removed,
        nodes.len(),
        "the committed history has a cycle: not serializable"
    );
    // Every abort read a key that changed after the version it read.
    let last: HashMap<u64, u64> = writer.keys().fold(HashMap::new(), |mut m, &(k, v)| {
        let e = m.entry(k).or_insert(0);
        *e = (*e).max(v);
        m
    });
    let false_conflicts = aborted
        .iter()
        .filter(|t| t.reads.iter().all(|(k, v)| last[k] == *v))
        .count();
    eprintln!(
        "{} committed, {} aborted, {false_conflicts} of them without a change to what they read",
        committed.len(),
        aborted.len()
    );
    assert!(
        committed.len() > aborted.len() / 4,
        "too few commits to say anything"
    );
    assert!(
        !aborted.is_empty(),
        "no conflict arose: the test checks nothing"
    );
    assert_eq!(false_conflicts, 0);
}
