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

use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use super::shape::{Live, Shape};
use super::spec::{plan_bits, Builtin, FileContext, Spec};
use super::{count, Counter};
use crate::filter::{
    format, hash_key, ribbon, FilterBuilder, FilterKind, FilterPolicy, FilterReader, Header,
};

/// Runs `f`, or returns `fallback` if it panicked.
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

    /// Bytes of a block holding `n` keys (a budget's: at its average).
    fn space_for(&self, n: u64) -> u64 {
        let policy = self.state.estimate_policy();
        let kind = policy.kind;
        let m = match kind {
            _ if n == 0 => 0,
            FilterKind::Ribbon => {
                let slots = ribbon::slots_for(n);
                let r = match policy.sizing {
                    crate::filter::Sizing::BitsPerKey(b) if policy.num_probes.is_none() => {
                        crate::filter::math::ribbon_r(b * n as f64 / slots as f64, 1.0)
                    }
                    _ => policy.k(),
                };
                slots * u64::from(r)
            }
            _ => kind.bloom_bits_for(n, policy.bits_per_key_value()),
        };
        (format::HEADER_LEN + format::TRAILER_LEN) as u64
            + Header::array_len(kind, m).unwrap_or(u64::MAX / 2)
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

/// Filter bytes owned by RocksDB, which keeps them alive as long as the reader.
#[derive(Debug)]
struct Borrowed {
    ptr: *const u8,
    len: usize,
}

// SAFETY: the bytes are immutable while the reader lives (RocksDB's contract for
// `GetFilterBitsReader`), so sharing the pointer between threads only shares reads.
unsafe impl Send for Borrowed {}
// SAFETY: as above.
unsafe impl Sync for Borrowed {}

impl AsRef<[u8]> for Borrowed {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: non-null (checked at construction) and alive for the reader's lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// One table's filter, as RocksDB probes it.
#[derive(Debug)]
pub struct Reader {
    /// The block, if it passed every check of FORMAT.md §1; if not (damaged, unknown version
    /// or kind), every key may match.
    filter: Option<FilterReader<Borrowed>>,
    /// Under a budget policy: where the shape counts this table while it is open.
    live: Option<(Arc<State>, Live)>,
}

impl Reader {
    #[inline]
    fn may_match(&self, key: &[u8]) -> bool {
        self.filter.as_ref().is_none_or(|r| r.may_contain(key))
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some((state, live)) = self.live.take() {
            state.shape.closed(live);
        }
    }
}

/// `GetFilterBitsReader`: validates the block once. A block that fails validation gives a
/// reader that answers "may match" for every key, and is counted. Null only if Rust could
/// not allocate the reader (the shim then uses an always-match reader of its own).
///
/// # Safety
/// `p` is null or a live policy; `data` points to `len` bytes that stay alive and unchanged
/// while the reader lives.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_reader_new(
    p: *const Policy,
    data: *const u8,
    len: usize,
) -> *mut Reader {
    guard(std::ptr::null_mut(), || {
        let block = Borrowed {
            ptr: data,
            len: if data.is_null() { 0 } else { len },
        };
        count(Counter::Readers);
        let filter = match FilterReader::new(block) {
            Ok(r) => Some(r),
            Err(_) => {
                count(Counter::Rejected);
                None
            }
        };
        // SAFETY: the caller's contract.
        let state = unsafe { p.as_ref() }.map(|p| p.state.clone());
        let live = match (state, &filter) {
            (Some(state), Some(f)) if state.is_budget() => {
                let live = state.shape.opened(f.header().crc, f.header().n);
                Some((state, live))
            }
            _ => None,
        };
        Box::into_raw(Box::new(Reader { filter, live }))
    })
}

/// `MayMatch`: false only if `key` was certainly not added.
///
/// # Safety
/// `r` is a live reader; `key` points to `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_reader_may_match(
    r: *const Reader,
    key: *const c_char,
    len: usize,
) -> bool {
    guard(true, || {
        // SAFETY: the caller's contract.
        unsafe { r.as_ref() }.is_none_or(|r| r.may_match(unsafe { bytes(key, len) }))
    })
}

/// A key as the batch call passes it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct KeyRef {
    /// First byte.
    pub data: *const c_char,
    /// Length.
    pub len: usize,
}

/// `MayMatch` for `n` keys (MultiGet): `out[i]` for `keys[i]`.
///
/// # Safety
/// `r` is a live reader; `keys` and `out` hold `n` elements; each key is valid.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_reader_may_match_batch(
    r: *const Reader,
    n: usize,
    keys: *const KeyRef,
    out: *mut bool,
) {
    if keys.is_null() || out.is_null() || n == 0 {
        return;
    }
    // SAFETY: `out` holds `n` elements by contract.
    let out = unsafe { std::slice::from_raw_parts_mut(out, n) };
    let ok = guard(false, || {
        // SAFETY: the caller's contract.
        let (Some(r), keys) = (unsafe { r.as_ref() }, unsafe {
            std::slice::from_raw_parts(keys, n)
        }) else {
            return false;
        };
        for (o, k) in out.iter_mut().zip(keys) {
            // SAFETY: each key is valid by contract.
            *o = r.may_match(unsafe { bytes(k.data, k.len) });
        }
        true
    });
    if !ok {
        out.fill(true);
    }
}

/// Frees a reader.
///
/// # Safety
/// `r` is null or from `lsm_bloom_rdb_reader_new`, freed once.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_reader_free(r: *mut Reader) {
    // SAFETY: the caller's contract.
    unsafe { free(r) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str) -> *mut Policy {
        let mut family = -1;
        let mut err = [0 as c_char; 256];
        // SAFETY: valid buffers.
        let p = unsafe {
            lsm_bloom_rdb_policy_new(
                name.as_ptr().cast(),
                name.len(),
                &mut family,
                err.as_mut_ptr(),
                256,
            )
        };
        assert!(!p.is_null(), "{name}");
        p
    }

    fn build(b: *mut Builder, keys: &[&[u8]]) -> Vec<u8> {
        for k in keys {
            // SAFETY: live builder, valid key.
            unsafe { lsm_bloom_rdb_builder_add_key(b, k.as_ptr().cast(), k.len()) };
        }
        let (mut data, mut len) = (std::ptr::null(), 0);
        // SAFETY: live builder, writable outputs.
        assert!(unsafe { lsm_bloom_rdb_builder_finish(b, &mut data, &mut len) });
        // SAFETY: valid until the next call on `b`.
        unsafe { std::slice::from_raw_parts(data, len) }.to_vec()
    }

    #[test]
    fn builds_and_reads_through_the_c_functions() {
        let p = policy("lsm_bloom.ribbon:10");
        // SAFETY: all pointers below are live and valid.
        unsafe {
            let b = lsm_bloom_rdb_builder_new(p, 0, false, 7, true);
            assert!(!b.is_null());
            // Duplicates adjacent in order are counted once.
            let mut keys: Vec<Vec<u8>> = (0..300u32)
                .map(|i| format!("key{i}").into_bytes())
                .collect();
            keys.insert(1, keys[0].clone());
            let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
            let block = build(b, &refs);
            assert_eq!(FilterReader::new(&block[..]).unwrap().header().n, 300);
            // The builder starts over after finish (partitioned filters reuse it).
            assert_eq!(lsm_bloom_rdb_builder_entries(b), 0);
            let r = lsm_bloom_rdb_reader_new(p, block.as_ptr(), block.len());
            for k in &keys {
                assert!(lsm_bloom_rdb_reader_may_match(
                    r,
                    k.as_ptr().cast(),
                    k.len()
                ));
            }
            let owned: Vec<String> = (0..1000u32).map(|i| format!("absent{i}")).collect();
            let refs: Vec<KeyRef> = owned
                .iter()
                .map(|k| KeyRef {
                    data: k.as_ptr().cast(),
                    len: k.len(),
                })
                .collect();
            let mut out = vec![true; refs.len()];
            lsm_bloom_rdb_reader_may_match_batch(r, refs.len(), refs.as_ptr(), out.as_mut_ptr());
            let passed = out.iter().filter(|&&m| m).count();
            assert!(
                passed < 30,
                "{passed} of 1000 absent keys passed a 10 bits/key filter"
            );
            for (k, o) in owned.iter().zip(&out) {
                assert_eq!(
                    *o,
                    lsm_bloom_rdb_reader_may_match(r, k.as_ptr().cast(), k.len())
                );
            }
            lsm_bloom_rdb_reader_free(r);
            lsm_bloom_rdb_builder_free(b);
            lsm_bloom_rdb_policy_free(p);
        }
    }

    #[test]
    fn key_and_alt_are_deduplicated_as_rocksdb_specifies() {
        let p = policy("lsm_bloom.blocked:10");
        // SAFETY: live pointers.
        unsafe {
            let b = lsm_bloom_rdb_builder_new(p, 0, false, 7, true);
            let add = |k: &[u8], a: &[u8]| {
                lsm_bloom_rdb_builder_add_key_and_alt(
                    b,
                    k.as_ptr().cast(),
                    k.len(),
                    a.as_ptr().cast(),
                    a.len(),
                )
            };
            add(b"ab1", b"ab");
            add(b"ab2", b"ab"); // prefix repeats: once
            add(b"ac", b"ac"); // key is its own prefix: once
            add(b"ad1", b"ac"); // new key, the previous prefix again: key only
            assert_eq!(lsm_bloom_rdb_builder_entries(b), 5);
            lsm_bloom_rdb_builder_free(b);
            lsm_bloom_rdb_policy_free(p);
        }
    }

    #[test]
    fn damaged_blocks_answer_may_match_and_are_counted() {
        let p = policy("lsm_bloom.blocked:10");
        // SAFETY: live pointers.
        unsafe {
            let b = lsm_bloom_rdb_builder_new(p, 0, false, 7, true);
            let mut block = build(b, &[b"k1", b"k2"]);
            let at = block.len() / 2;
            block[at] ^= 0x10;
            let before = super::super::stats().rejected_blocks;
            let r = lsm_bloom_rdb_reader_new(p, block.as_ptr(), block.len());
            assert!((*r).filter.is_none());
            assert!(super::super::stats().rejected_blocks > before);
            assert!(lsm_bloom_rdb_reader_may_match(r, b"zz".as_ptr().cast(), 2));
            lsm_bloom_rdb_reader_free(r);
            // Null and empty input are rejected, not read.
            let r = lsm_bloom_rdb_reader_new(p, std::ptr::null(), 100);
            assert!((*r).filter.is_none());
            lsm_bloom_rdb_reader_free(r);
            lsm_bloom_rdb_builder_free(b);
            lsm_bloom_rdb_policy_free(p);
        }
    }

    #[test]
    fn a_budget_gives_new_level0_files_more_bits_than_the_big_level() {
        let p = policy("lsm_bloom.budget:blocked:10");
        let keys = |n: u32, tag: u8| -> Vec<Vec<u8>> {
            (0..n)
                .map(|i| [&[tag][..], &i.to_be_bytes()[..]].concat())
                .collect()
        };
        let bits = |block: &[u8]| FilterReader::new(block).unwrap().info().bits_per_key;
        // SAFETY: live pointers; each block outlives its reader.
        unsafe {
            let big = lsm_bloom_rdb_builder_new(p, 6, true, 7, true);
            let k = keys(200_000, 1);
            let last = build(big, &k.iter().map(|k| &k[..]).collect::<Vec<_>>());
            let r_last = lsm_bloom_rdb_reader_new(p, last.as_ptr(), last.len());
            let l0 = lsm_bloom_rdb_builder_new(p, 0, false, 7, true);
            let k = keys(20_000, 2);
            let young = build(l0, &k.iter().map(|k| &k[..]).collect::<Vec<_>>());
            // Alone, the big level got the average; beside it, the young run gets more.
            assert!((bits(&last) - 10.0).abs() < 0.6, "{}", bits(&last));
            assert!(bits(&young) > 12.0, "{}", bits(&young));
            // Once the big level's table is closed, it no longer counts.
            lsm_bloom_rdb_reader_free(r_last);
            let again = build(l0, &k.iter().map(|k| &k[..]).collect::<Vec<_>>());
            assert!((bits(&again) - 10.0).abs() < 0.6, "{}", bits(&again));
            lsm_bloom_rdb_builder_free(big);
            lsm_bloom_rdb_builder_free(l0);
            lsm_bloom_rdb_policy_free(p);
        }
    }

    #[test]
    fn bad_names_fail_with_a_message() {
        let name = "lsm_bloom.blocked:lots";
        let mut err = [0 as c_char; 16];
        let mut family = -1;
        // SAFETY: valid buffers; the message is cut to fit 16 bytes.
        let p = unsafe {
            lsm_bloom_rdb_policy_new(
                name.as_ptr().cast(),
                name.len(),
                &mut family,
                err.as_mut_ptr(),
                16,
            )
        };
        assert!(p.is_null());
        // SAFETY: NUL-terminated within the buffer.
        let msg = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) };
        assert_eq!(msg.to_bytes().len(), 15);
    }

    #[test]
    fn space_estimates_match_what_finish_builds() {
        for name in [
            "lsm_bloom.blocked:10",
            "lsm_bloom.standard:7",
            "lsm_bloom.ribbon:8",
        ] {
            let p = policy(name);
            // SAFETY: live pointers.
            unsafe {
                let b = lsm_bloom_rdb_builder_new(p, 0, false, 7, true);
                let keys: Vec<Vec<u8>> = (0..5000u32).map(|i| i.to_be_bytes().to_vec()).collect();
                let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
                let space = lsm_bloom_rdb_builder_space(b, keys.len());
                let block = build(b, &refs);
                let diff = (space as f64 - block.len() as f64).abs() / block.len() as f64;
                assert!(
                    diff < 0.02,
                    "{name}: estimate {space}, built {}",
                    block.len()
                );
                let n = lsm_bloom_rdb_builder_entries_for(b, space);
                assert!(n >= keys.len() && n < keys.len() * 11 / 10, "{name}: {n}");
                let fpr = lsm_bloom_rdb_builder_fp_rate(b, keys.len(), block.len());
                assert!(fpr > 0.0 && fpr < 0.1, "{name}: {fpr}");
                lsm_bloom_rdb_builder_free(b);
                lsm_bloom_rdb_policy_free(p);
            }
        }
    }
}
