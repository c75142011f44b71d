//! The reader side: RocksDB's `FilterBitsReader` calls. A block is validated once when
//! RocksDB loads it; a probe then hashes the key and reads the block in place.

use std::ffi::c_char;
use std::sync::Arc;

use super::{bytes, free, guard, Policy, State};
use crate::filter::FilterReader;
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

/// One table's filter, as RocksDB probes it.
#[derive(Debug)]
pub struct Reader {
    /// The block, if it passed every check of FORMAT.md §1; if not (damaged, unknown version
    /// or kind), every key may match.
    pub(super) filter: Option<FilterReader<Borrowed>>,
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
