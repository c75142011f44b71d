//! Helpers shared by the store's integration tests.
#![allow(dead_code)]

pub mod kv;
mod rng;
pub mod workload;

pub use rng::Rng;

use std::path::PathBuf;
use std::process::Command;

use lsm_bloom::Options;

/// The example binary, built now if it is missing or stale (`cargo test` builds examples
/// with `test = true` only as test harnesses, not the binary the tests start).
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let bin = dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if !built.iter().any(|b| b == name) {
        let profile = if dir.ends_with("release") {
            &["--release"][..]
        } else {
            &[]
        };
        let ok = Command::new(env!("CARGO"))
            .args(["build", "--example", name])
            .args(profile)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap()
            .success();
        assert!(ok, "building example {name}");
        built.push(name.to_string());
    }
    bin
}

/// Options with tiny sizes so a few thousand operations flush and compact many times.
pub fn tiny_options() -> Options {
    Options {
        memtable_size: 4 * 1024,
        block_size: 256,
        target_file_size: 8 * 1024,
        level1_max_bytes: 16 * 1024,
        size_ratio: 4,
        l0_compaction_trigger: 2,
        l0_stop_writes_trigger: 6,
        ..Options::default()
    }
}

/// A store at `dir` under the rule `delimiter(':', 1)` holding `tables` flushed tables, table
/// `t` holding the keys `keys(t)` (value `v`); closed before returning.
pub fn colon_prefix_store(
    dir: &std::path::Path,
    tables: usize,
    keys: impl Fn(usize) -> Vec<String>,
) {
    let opts = Options {
        prefix_extractor: Some(lsm_bloom::PrefixExtractor::delimiter(b':', 1)),
        ..Options::default()
    };
    let db = lsm_bloom::Db::open(dir, opts).unwrap();
    for t in 0..tables {
        for k in keys(t) {
            db.put(k, "v").unwrap();
        }
        db.flush().unwrap();
    }
    db.close().unwrap();
}
