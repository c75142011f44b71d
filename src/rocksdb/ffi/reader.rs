//! The reader side: RocksDB's `FilterBitsReader` calls. A block is validated once when
//! RocksDB loads it, and the shim keeps what a probe needs inline (`InlineProbe`); a probe
//! then hashes the key and reads the block in place.

use std::ffi::c_char;
use std::sync::Arc;

use super::{bytes, free, guard, Policy, State};
use crate::filter::{hash_key_with_seed, FilterReader, Probe};
use crate::rocksdb::shape::Live;
use crate::rocksdb::{count, Counter};

/// Filter bytes owned by RocksDB, which keeps them alive as long as the reader.
#[derive(Debug)]
pub(super) struct Borrowed {
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

/// What the shim's reader holds inline (`LsmBloomProbe` in `shim.h`) and passes to every
/// probe: the bit array's address and the header fields a probe reads, so a probe goes from
/// RocksDB's reader object straight to the filter line with no pointer hop through the Rust
/// reader. Measured (`db_bench --workload rocksdb-filters`, profile in README "Inside
/// RocksDB"): the hop and two more non-inlined calls cost ~3% of an absent get.
///
/// All zero (what the shim starts from) means no usable filter: every key may match.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct InlineProbe {
    /// First byte of the validated block's bit array (inside RocksDB's filter block).
    bits: *const u8,
    /// Bytes in the bit array.
    len: usize,
    /// The block's hash seed.
    seed: u64,
    /// What the probe divides the array into (`Probe::parts`: lines, slots or bits).
    units: u64,
    /// Probes or rows per key (header `k`).
    k: u32,
    /// `FilterKind::id()` of the block, or 0: no usable filter.
    kind: u32,
}

impl InlineProbe {
    /// Every key may match (all zero, as the shim starts).
    pub(super) const NONE: InlineProbe = InlineProbe {
        bits: std::ptr::null(),
        len: 0,
        seed: 0,
        units: 0,
        k: 0,
        kind: 0,
    };

    fn of(filter: &FilterReader<Borrowed>) -> InlineProbe {
        let (kind, k, units) = filter.probe().parts();
        let bits = filter.bit_array();
        InlineProbe {
            bits: bits.as_ptr(),
            len: bits.len(),
            seed: filter.header().seed,
            units,
            k,
            kind: u32::from(kind),
        }
    }

    /// False only if `key` was certainly not added.
    #[inline(always)]
    fn may_match(&self, key: &[u8]) -> bool {
        let Some(probe) = u8::try_from(self.kind)
            .ok()
            .and_then(|id| Probe::from_parts(id, self.k, self.units))
        else {
            return true;
        };
        if self.bits.is_null() {
            return true;
        }
        // SAFETY: `bits` and `len` came from a validated block that RocksDB keeps alive and
        // unchanged while the reader holding this probe lives (`of`).
        let bits = unsafe { std::slice::from_raw_parts(self.bits, self.len) };
        probe.test(bits, hash_key_with_seed(key, self.seed))
    }
}

/// One table's filter, as RocksDB opened it: the validated block (the probes themselves go
/// through the `InlineProbe` the shim holds) and, under a budget policy, its place in the
/// live shape.
#[derive(Debug)]
pub struct Reader {
    /// The block, if it passed every check of FORMAT.md §1; if not (damaged, unknown version
    /// or kind), every key may match.
    pub(super) filter: Option<FilterReader<Borrowed>>,
    /// Under a budget policy: where the shape counts this table while it is open.
    live: Option<(Arc<State>, Live)>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        if let Some((state, live)) = self.live.take() {
            state.shape.closed(live);
        }
    }
}

/// `GetFilterBitsReader`: validates the block once and fills `*probe` (when not null) for
/// `lsm_bloom_rdb_probe`. A block that fails validation gives a probe that answers "may
/// match" for every key, and is counted. Null only if Rust could not allocate the reader; the
/// probe then stays as the shim zeroed it (every key may match).
///
/// # Safety
/// `p` is null or a live policy; `data` points to `len` bytes that stay alive and unchanged
/// while the reader lives; `probe` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_reader_new(
    p: *const Policy,
    data: *const u8,
    len: usize,
    probe: *mut InlineProbe,
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
        let reader = Box::new(Reader { filter, live });
        // SAFETY: the caller's contract.
        if let Some(out) = unsafe { probe.as_mut() } {
            *out = reader
                .filter
                .as_ref()
                .map_or(InlineProbe::NONE, InlineProbe::of);
        }
        Box::into_raw(reader)
    })
}

/// `MayMatch`: false only if `key` was certainly not added.
///
/// # Safety
/// `probe` is null or filled by `lsm_bloom_rdb_reader_new` for a reader still alive; `key`
/// points to `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_probe(
    probe: *const InlineProbe,
    key: *const c_char,
    len: usize,
) -> bool {
    guard(true, || {
        // SAFETY: the caller's contract.
        unsafe { probe.as_ref() }.is_none_or(|p| p.may_match(unsafe { bytes(key, len) }))
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
/// `probe` as for `lsm_bloom_rdb_probe`; `keys` and `out` hold `n` elements; each key is
/// valid.
#[no_mangle]
pub unsafe extern "C" fn lsm_bloom_rdb_probe_batch(
    probe: *const InlineProbe,
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
        let (Some(p), keys) = (unsafe { probe.as_ref() }, unsafe {
            std::slice::from_raw_parts(keys, n)
        }) else {
            return false;
        };
        for (o, k) in out.iter_mut().zip(keys) {
            // SAFETY: each key is valid by contract.
            *o = p.may_match(unsafe { bytes(k.data, k.len) });
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
