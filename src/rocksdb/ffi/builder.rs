//! The builder side: RocksDB's `FilterBitsBuilder` calls, one file's filter block each.
//! Keys are hashed as they come (adjacent duplicates dropped, as RocksDB's own builders do)
//! and the block is built at `Finish`, when the key count and, under a budget, the plan for
//! the file's level are known.

use std::ffi::c_char;
use std::sync::Arc;

use super::{bytes, context, free, guard, Policy, State};
use crate::filter::{format, hash_key, FilterBuilder, Shape};
use crate::rocksdb::spec::FileContext;
use crate::rocksdb::{count, Counter};

/// Collects one file's keys (and prefixes) and builds its lsm-bloom filter block.
#[derive(Debug)]
pub struct Builder {
    state: Arc<State>,
    ctx: FileContext,
    /// Hashes of the entries added since the last finish (the array is sized from their
    /// count, and under a budget from the plan at finish).
    hashes: Vec<u64>,
    last_key: Option<u64>,
    last_alt: Option<u64>,
    finished: Vec<u8>,
    /// Entries in the last block built.
    hashes_built: u64,
}

impl Builder {
    fn add(&mut self, h: u64) {
        self.hashes.push(h);
    }

    /// Bytes of a block holding `n` keys (a budget's: at its average): the shape the
    /// builder will give it.
    fn space_for(&self, n: u64) -> u64 {
        Shape::of(&self.state.estimate_policy(), n).block_bytes()
    }

    /// Builds the block of the entries added and starts over.
    fn finish(&mut self) -> Option<()> {
        let hashes = std::mem::take(&mut self.hashes);
        self.last_key = None;
        self.last_alt = None;
        self.hashes_built = hashes.len() as u64;
        let policy = self.state.filter_policy(self.ctx, self.hashes_built);
        let mut b = FilterBuilder::new(policy).ok()?;
        for h in hashes {
            b.add_hash(h);
        }
        self.finished = b.finish();
        if self.state.is_budget() {
            let crc = self
                .finished
                .last_chunk::<4>()
                .map(|c| u32::from_le_bytes(*c))?;
            let keys = self.hashes_built;
            self.state.shape.built(crc, self.ctx.level, keys);
        }
        Some(())
    }
}

/// A builder for a file written at the given level (RocksDB's `FilterBuildingContext`);
/// null if the policy cannot build lsm-bloom filters.
///
/// # Safety
/// `p` is a live policy that outlives the builder.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_builder_new(
    p: *const Policy,
    level: i32,
    bottommost: bool,
    num_levels: i32,
    leveled: bool,
) -> *mut Builder {
    guard(std::ptr::null_mut(), || {
        // SAFETY: the caller's contract.
        let Some(p) = (unsafe { p.as_ref() }) else {
            return std::ptr::null_mut();
        };
        let ctx = context(level, bottommost, num_levels, leveled);
        if FilterBuilder::new(p.state.filter_policy(ctx, 0)).is_err() {
            return std::ptr::null_mut();
        }
        Box::into_raw(Box::new(Builder {
            state: p.state.clone(),
            ctx,
            hashes: Vec::new(),
            last_key: None,
            last_alt: None,
            finished: Vec::new(),
            hashes_built: 0,
        }))
    })
}

/// `AddKey`: adds a key unless it equals the previous key (RocksDB adds keys in order, so
/// duplicates are adjacent).
///
/// # Safety
/// `b` is a live builder; `key` points to `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_builder_add_key(
    b: *mut Builder,
    key: *const c_char,
    len: usize,
) {
    guard((), || {
        // SAFETY: the caller's contract.
        let (Some(b), key) = (unsafe { b.as_mut() }, unsafe { bytes(key, len) }) else {
            return;
        };
        let h = hash_key(key);
        if b.last_key != Some(h) {
            b.add(h);
        }
        b.last_key = Some(h);
    })
}

/// `AddKeyAndAlt`: a key and its prefix, each de-duplicated against the previous key and
/// previous prefix (a whole key may be its own prefix), as `FilterBitsBuilder` specifies.
///
/// # Safety
/// `b` is a live builder; `key` / `alt` point to `key_len` / `alt_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_builder_add_key_and_alt(
    b: *mut Builder,
    key: *const c_char,
    key_len: usize,
    alt: *const c_char,
    alt_len: usize,
) {
    guard((), || {
        // SAFETY: the caller's contract.
        let Some(b) = (unsafe { b.as_mut() }) else {
            return;
        };
        // SAFETY: the caller's contract.
        let (key, alt) = unsafe { (bytes(key, key_len), bytes(alt, alt_len)) };
        let (hk, ha) = (hash_key(key), hash_key(alt));
        if b.last_key != Some(hk) && b.last_alt != Some(hk) {
            b.add(hk);
        }
        if ha != hk && b.last_alt != Some(ha) && b.last_key != Some(ha) {
            b.add(ha);
        }
        b.last_key = Some(hk);
        b.last_alt = Some(ha);
    })
}

/// `EstimateEntriesAdded`: entries added since the last finish (0 iff none).
///
/// # Safety
/// `b` is a live builder.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_builder_entries(b: *const Builder) -> usize {
    // SAFETY: the caller's contract.
    guard(0, || unsafe { b.as_ref() }.map_or(0, |b| b.hashes.len()))
}

/// `Finish`: builds the block (FORMAT.md §1) from the entries added, which it clears (a
/// partitioned filter reuses the builder). On success stores the bytes in the builder, points
/// `*data`/`*len` at them (valid until the next call on the builder) and returns true.
///
/// # Safety
/// `b` is a live builder; `data` and `len` are writable.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_builder_finish(
    b: *mut Builder,
    data: *mut *const u8,
    len: *mut usize,
) -> bool {
    guard(false, || {
        // SAFETY: the caller's contract.
        let Some(b) = (unsafe { b.as_mut() }) else {
            return false;
        };
        if data.is_null() || len.is_null() {
            return false;
        }
        if b.finish().is_none() {
            return false;
        }
        count(Counter::FiltersBuilt);
        // SAFETY: both checked non-null above; writable by contract.
        unsafe {
            *data = b.finished.as_ptr();
            *len = b.finished.len();
        }
        true
    })
}

/// `CalculateSpace`: bytes of a block for `n` entries.
///
/// # Safety
/// `b` is a live builder.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_builder_space(b: *const Builder, n: usize) -> usize {
    guard(0, || {
        // SAFETY: the caller's contract.
        unsafe { b.as_ref() }.map_or(0, |b| {
            usize::try_from(b.space_for(n as u64)).unwrap_or(usize::MAX)
        })
    })
}

/// `ApproximateNumEntries`: the most entries whose block fits in `bytes`.
///
/// # Safety
/// `b` is a live builder.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_builder_entries_for(
    b: *const Builder,
    bytes: usize,
) -> usize {
    guard(0, || {
        // SAFETY: the caller's contract.
        let Some(b) = (unsafe { b.as_ref() }) else {
            return 0;
        };
        let bytes = bytes as u64;
        let (mut lo, mut hi) = (0u64, bytes.saturating_mul(8).max(1));
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if b.space_for(mid) <= bytes {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        usize::try_from(lo).unwrap_or(usize::MAX)
    })
}

/// `EstimatedFpRate` of a block of `bytes` holding `n` entries.
///
/// # Safety
/// `b` is a live builder.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_builder_fp_rate(
    b: *const Builder,
    n: usize,
    bytes: usize,
) -> f64 {
    guard(1.0, || {
        // SAFETY: the caller's contract.
        let Some(b) = (unsafe { b.as_ref() }) else {
            return 1.0;
        };
        let overhead = format::HEADER_LEN + format::TRAILER_LEN;
        let m = (bytes.saturating_sub(overhead) as u64) * 8;
        let policy = b.state.estimate_policy();
        policy.kind.expected_fpr(m, n as u64, policy.k())
    })
}

/// Frees a builder.
///
/// # Safety
/// `b` is null or from `lsm_bloom_rdb_builder_new`, freed once.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_builder_free(b: *mut Builder) {
    // SAFETY: the caller's contract.
    unsafe { free(b) }
}
