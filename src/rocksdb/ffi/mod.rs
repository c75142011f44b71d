//! The `extern "C"` functions the C++ shim calls (declared in `shim.h`). All filter work
//! happens here, in Rust; the shim only adapts RocksDB's classes to these calls.
//!
//! Every function catches panics (`guard`) and answers something safe instead — a reader
//! "may match", a builder a failed `finish` that the shim reports as a corrupt filter — so no
//! unwinding ever crosses into C++. Pointers from C++ are checked for null; a key pointer with
//! length 0 may be dangling and is never read.
//!
//! A reader is shared by all of RocksDB's threads: it is immutable after construction
//! (`Sync`) and a probe hashes the key and reads the block in place — no allocation, no lock,
//! no shared counter.
//!
//! `mod.rs` holds the shared helpers and the policy; `builder.rs` and `reader.rs` the two
//! halves of a filter's life.

use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use super::shape::Shape;
use super::spec::{plan_bits, Builtin, FileContext, Spec};
use super::{count, Counter};
use crate::filter::{FilterKind, FilterPolicy};

mod builder;
mod reader;
#[cfg(test)]
mod tests;

/// Runs `f`, or returns `fallback` if it panicked.
#[inline]
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        count(Counter::Panics);
        fallback
    })
}

/// Drops the box behind `p` (a no-op for null).
///
/// # Safety
/// `p` is null or came from `Box::into_raw` and is not used again.
unsafe fn free<T>(p: *mut T) {
    guard((), || {
        if !p.is_null() {
            // SAFETY: the caller's contract.
            drop(unsafe { Box::from_raw(p) });
        }
    })
}

/// `(ptr, len)` from C++ as a slice (empty when null or zero-length).
///
/// # Safety
/// A non-null `ptr` must point to `len` readable bytes for the returned lifetime.
unsafe fn bytes<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
    }
}

/// A policy created from a name (one per `CreateFromString`): what its builders and readers
/// share, kept alive by each of them (`Arc`), so none depends on RocksDB's drop order.
#[derive(Debug)]
pub struct Policy {
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    spec: Spec,
    /// Shallowest level below L0 a file has been planned for (`i32::MAX`: none yet); the
    /// built-in budget's model uses it.
    base_level: AtomicI32,
    /// Live runs, for lsm-bloom budget policies.
    shape: Shape,
}

impl State {
    fn is_budget(&self) -> bool {
        matches!(self.spec, Spec::Budget { .. })
    }

    /// The lsm-bloom filter policy for a file at `ctx` holding `keys` keys (never below 1/16
    /// bit per key, the budget grid's step: a run the plan gives nothing gets a filter that
    /// passes almost everything, at almost no memory).
    fn filter_policy(&self, ctx: FileContext, keys: u64) -> FilterPolicy {
        match self.spec {
            Spec::Uniform(p) => p,
            Spec::Budget { kind, average_bits } => {
                let bits = if ctx.leveled && ctx.level >= 0 {
                    self.shape.plan(kind, average_bits, ctx.level, keys)
                } else {
                    average_bits
                };
                FilterPolicy::bits_per_key(kind, bits.max(1.0 / 16.0))
            }
            // Not built by lsm-bloom: the shim asks `builtin_bits` instead.
            Spec::BuiltinBudget { .. } => FilterPolicy::default(),
        }
    }

    /// The policy the space estimates use (a budget's average).
    fn estimate_policy(&self) -> FilterPolicy {
        match self.spec {
            Spec::Uniform(p) => p,
            Spec::Budget { kind, average_bits } => FilterPolicy::bits_per_key(kind, average_bits),
            Spec::BuiltinBudget { .. } => FilterPolicy::default(),
        }
    }
}

/// Which shim class serves a policy (`shim.h`).
const FAMILY_LSM_BLOOM: i32 = 0;
const FAMILY_BUILTIN_BLOOM: i32 = 1;
const FAMILY_BUILTIN_RIBBON: i32 = 2;

/// Parses `name`; on success returns a policy (free with `lsm_bloom_rdb_policy_free`) and
/// sets `*family`; on failure returns null and writes a NUL-terminated message into `err`.
///
/// # Safety
/// `name` points to `len` bytes; `family` is writable; `err` has `err_cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_policy_new(
    name: *const c_char,
    len: usize,
    family: *mut i32,
    err: *mut c_char,
    err_cap: usize,
) -> *mut Policy {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let name = unsafe { bytes(name, len) };
        let parsed = std::str::from_utf8(name)
            .map_err(|_| "filter policy name is not UTF-8".to_string())
            .and_then(|s| s.parse::<Spec>());
        match parsed {
            Ok(spec) => {
                let f = match spec {
                    Spec::BuiltinBudget {
                        builtin: Builtin::Bloom,
                        ..
                    } => FAMILY_BUILTIN_BLOOM,
                    Spec::BuiltinBudget {
                        builtin: Builtin::Ribbon,
                        ..
                    } => FAMILY_BUILTIN_RIBBON,
                    _ => FAMILY_LSM_BLOOM,
                };
                if !family.is_null() {
                    // SAFETY: non-null and writable by contract.
                    unsafe { *family = f };
                }
                Box::into_raw(Box::new(Policy {
                    state: Arc::new(State {
                        spec,
                        base_level: AtomicI32::new(i32::MAX),
                        shape: Shape::default(),
                    }),
                }))
            }
            Err(msg) => {
                if !err.is_null() && err_cap > 0 {
                    let n = msg.len().min(err_cap - 1);
                    // SAFETY: `err` has `err_cap` writable bytes; we write `n + 1 <= err_cap`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(msg.as_ptr(), err.cast::<u8>(), n);
                        *err.add(n) = 0;
                    }
                }
                std::ptr::null_mut()
            }
        }
    })
}

/// Frees a policy.
///
/// # Safety
/// `p` is null or from `lsm_bloom_rdb_policy_new`, freed once, with no builder left using it.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_policy_free(p: *mut Policy) {
    // SAFETY: the caller's contract.
    unsafe { free(p) }
}

fn context(level: i32, bottommost: bool, num_levels: i32, leveled: bool) -> FileContext {
    FileContext {
        level,
        bottommost,
        num_levels,
        leveled,
    }
}

/// Bloom-equivalent bits/key of RocksDB's own filter for a file (builtin-budget policies).
///
/// # Safety
/// `p` is a live policy.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_policy_builtin_bits(
    p: *const Policy,
    level: i32,
    bottommost: bool,
    num_levels: i32,
    leveled: bool,
) -> f64 {
    guard(10.0, || {
        // SAFETY: the caller's contract.
        let Some(p) = (unsafe { p.as_ref() }) else {
            return 10.0;
        };
        let s = &p.state;
        match s.spec {
            // RocksDB's Bloom and (Bloom-equivalent) Ribbon follow the blocked curve. Their
            // readers are RocksDB's, so the live shape is unknown: the model plans.
            Spec::BuiltinBudget { average_bits, .. } => {
                if leveled && level >= 1 {
                    s.base_level.fetch_min(level, Ordering::Relaxed);
                }
                let ctx = context(level, bottommost, num_levels, leveled);
                let base = s.base_level.load(Ordering::Relaxed);
                plan_bits(FilterKind::Blocked, average_bits, ctx, base)
            }
            _ => 10.0,
        }
    })
}
