//! Keyspace helpers for the integration tests: a model of every keyspace's content, read
//! back from a store, and file counts of a store's directory.

use std::collections::BTreeMap;
use std::path::Path;

use lsm_bloom::Db;

/// Keyspace name → its keys and values.
pub type Model = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

/// Every keyspace's content, read by a full scan of each (both ways: they must agree).
pub fn contents(db: &Db) -> Model {
    let mut out = Model::new();
    for name in db.keyspace_names() {
        let ks = db.keyspace(&name).unwrap();
        let forward: BTreeMap<_, _> = ks.iter().unwrap().map(|kv| kv.unwrap()).collect();
        let mut backward: Vec<_> = ks.iter().unwrap().rev().map(|kv| kv.unwrap()).collect();
        backward.reverse();
        assert_eq!(
            forward.clone().into_iter().collect::<Vec<_>>(),
            backward,
            "keyspace {name}: scans both ways"
        );
        if !forward.is_empty() {
            out.insert(name, forward);
        }
    }
    out
}

/// Files in `dir` whose extension is `ext`.
pub fn files(dir: &Path, ext: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == ext)
        })
        .count()
}
