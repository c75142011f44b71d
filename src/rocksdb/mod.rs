//! lsm-bloom's filters inside RocksDB (feature `rocksdb-plugin`): RocksDB filter policies
//! whose filter blocks are lsm-bloom's own (FORMAT.md §1, and §5 for where RocksDB keeps
//! them), plus a per-level budget over RocksDB's built-in filters.
//!
//! Use, with rust-rocksdb:
//!
//! ```no_run
//! let mut opts = rocksdb::Options::default();
//! opts.create_if_missing(true);
//! let opts = lsm_bloom::rocksdb::with_filter(&mut opts, "lsm_bloom.blocked:10")?;
//! let db = rocksdb::DB::open(&opts, "/tmp/db")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`register`] (which `with_filter` calls) adds one factory to RocksDB's object library for
//! every name starting `lsm_bloom.` ([`Spec`] lists them). RocksDB writes the name to its
//! OPTIONS file, so after `register()` a database reopened with `Options::load_latest` uses
//! the same filters. Tables keep their filter under the metaindex key
//! `fullfilter.lsm_bloom` whatever the lsm-bloom policy, so switching between lsm-bloom
//! policies keeps every table's filter in use (the block says its own kind); switching to or
//! from RocksDB's built-in filters reads the other's tables without a filter — correct
//! answers, more reads — until compaction rewrites them.
//!
//! The pieces: `spec.rs` (names and the per-level plan, pure), `shape.rs` (the live runs a
//! budget policy plans on), `ffi/` (the `extern "C"` functions: building, validating and
//! probing blocks), and the C++ shim beside them: `shim_internal.cc` adapts RocksDB's
//! `FilterBitsBuilder` / `FilterBitsReader` (internal headers of the bundled RocksDB 11.8.1)
//! to `ffi/`, `shim_public.cc` registers the factory and holds the built-in budget policy
//! (public headers only). Depends on `filter` only.

mod ffi;
mod shape;
mod spec;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

pub use spec::{plan_bits, Builtin, FileContext, Spec, L0_FILE_SHARE, L0_RUNS, SIZE_RATIO};

use crate::error::{Error, Result};

/// The metaindex key RocksDB files an lsm-bloom filter block under (`fullfilter.` plus the
/// policies' `CompatibilityName`).
pub const METAINDEX_KEY: &str = "fullfilter.lsm_bloom";

extern "C" {
    /// `shim_public.cc`: adds the `lsm_bloom.` factory to `ObjectLibrary::Default()`; 0, or
    /// 1 (out of memory) or 2 (another C++ exception), caught in the shim.
    fn lsm_bloom_shim_register() -> i32;
    /// `shim_public.cc`: the shim's exception guard over a function that throws nothing (0),
    /// `std::bad_alloc` (1) or `std::runtime_error` (2).
    #[cfg(test)]
    fn lsm_bloom_shim_guard_selftest(kind: i32) -> i32;
}

/// What a shim call's error code means.
fn shim_failure(rc: i32) -> &'static str {
    match rc {
        1 => "out of memory (std::bad_alloc)",
        _ => "a C++ exception",
    }
}

/// Makes every `lsm_bloom.` policy name known to RocksDB (`FilterPolicy::CreateFromString`,
/// options strings, OPTIONS files). Idempotent; call it before `Options::load_latest` on a
/// database that uses these policies. Errors: `Io` when RocksDB's registry failed (out of
/// memory): the shim catches every C++ exception, so none reaches Rust.
pub fn register() -> Result<()> {
    static DONE: OnceLock<i32> = OnceLock::new();
    // SAFETY: the shim function takes no arguments, only registers a factory, and returns an
    // error code instead of letting an exception out.
    let rc = *DONE.get_or_init(|| unsafe { lsm_bloom_shim_register() });
    if rc == 0 {
        return Ok(());
    }
    Err(Error::io(
        "registering lsm-bloom's filter policies with RocksDB",
        std::io::Error::other(shim_failure(rc)),
    ))
}

/// The options string that selects `spec` in a block-based table factory.
pub fn options_string(spec: &Spec) -> String {
    format!("block_based_table_factory={{filter_policy={spec}}}")
}

/// `base` with its block-based table's filter policy set to the lsm-bloom policy `name`
/// (the rest of the table options kept). Registers the policies first.
///
/// Errors: `InvalidArgument` naming what was wrong with `name`, or RocksDB's refusal.
pub fn with_filter(base: &mut ::rocksdb::Options, name: &str) -> Result<::rocksdb::Options> {
    let spec: Spec = name.parse().map_err(Error::InvalidArgument)?;
    register()?;
    base.get_options_from_string(options_string(&spec))
        .map_err(|e| Error::InvalidArgument(format!("RocksDB refused {spec}: {e}")))
}

/// What the plugin has done in this process (all policies together).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PluginStats {
    /// Filter blocks built.
    pub filters_built: u64,
    /// Readers created (one per table whose filter RocksDB loaded).
    pub readers: u64,
    /// Blocks that failed validation: those tables answer "may match" for every key.
    pub rejected_blocks: u64,
    /// Panics caught at the FFI boundary (each answered safely).
    pub panics: u64,
}

#[derive(Clone, Copy)]
enum Counter {
    FiltersBuilt,
    Readers,
    Rejected,
    Panics,
}

static COUNTERS: [AtomicU64; 4] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

/// Counted on block build and reader creation, never per probe.
fn count(c: Counter) {
    COUNTERS[c as usize].fetch_add(1, Ordering::Relaxed);
}

/// The plugin's counters.
pub fn stats() -> PluginStats {
    let get = |c: Counter| COUNTERS[c as usize].load(Ordering::Relaxed);
    PluginStats {
        filters_built: get(Counter::FiltersBuilt),
        readers: get(Counter::Readers),
        rejected_blocks: get(Counter::Rejected),
        panics: get(Counter::Panics),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shim's guard turns every C++ exception into its error code: without it, a
    /// `std::bad_alloc` unwinding into Rust through `extern "C"` aborts this test process.
    #[test]
    fn cpp_exceptions_stop_at_the_shim() {
        // SAFETY: the self-test takes an integer and returns one; it throws only inside the
        // guard.
        let rc = |kind| unsafe { lsm_bloom_shim_guard_selftest(kind) };
        assert_eq!(rc(0), 0);
        assert_eq!(rc(1), 1, "std::bad_alloc");
        assert_eq!(rc(2), 2, "std::runtime_error");
        assert!(shim_failure(1).contains("out of memory"));
        assert!(register().is_ok());
    }
}
