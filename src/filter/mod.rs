//! Bloom filter blocks: build one per set of keys, store it anywhere, query it in place.
//!
//! This module knows nothing of the LSM store; any table format can embed its blocks.
//!
//! Use: pick a [`FilterPolicy`] (kind plus bits/key or a target false-positive rate), then
//! `FilterBuilder::new(policy)` → `(add_key | add_hash)*` → `finish()` gives one block as
//! bytes (layout: FORMAT.md §1). `FilterReader::new(&bytes)` validates the whole block and then
//! answers `may_contain(key)` / `may_contain_hash(hash)`: `false` means the key was certainly
//! not added; `true` means it may have been.
//!
//! Adding a filter kind: one module beside `standard.rs` / `blocked.rs` / `ribbon.rs` that
//! builds and tests its array, and one arm in each `match` on [`FilterKind`] (`kind.rs`,
//! `policy.rs`, `format.rs`, `budget.rs` and this file's builder and reader).

pub mod blocked;
pub mod budget;
mod builder;
mod error;
pub mod format;
pub mod hash;
mod kind;
pub mod math;
mod policy;
pub mod range;
pub mod ribbon;
pub mod standard;

pub use builder::FilterBuilder;
#[cfg(feature = "rocksdb-plugin")]
pub(crate) use builder::Shape;
pub use error::FilterError;
pub use format::Header;
pub use hash::{hash_key, hash_key_with_seed};
pub use kind::FilterKind;
pub use policy::{FilterPolicy, Sizing};
pub use range::{
    RangeAnswer, RangeFilterBuilder, RangeFilterError, RangeFilterInfo, RangeFilterReader,
    RangePolicy, RateAt,
};

use crate::prefetch::{prefetch_lines_into, CacheLevel};

/// A validated block's probe parameters (from its header), for a caller that keeps the bit
/// array's address itself. `units` is what the kind's probe divides its array into, worked
/// out once here instead of on every probe: a Ribbon filter's slots are m / r, and that
/// 64-bit division, made twice per Ribbon probe (prefetch span and test), held 5.8% of
/// `Inner::get`'s own samples (3% of the profile) at the defaults (`db_bench --defaults
/// --hold absent`, 2×10^6 keys, `perf annotate`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Probe {
    kind: FilterKind,
    k: u32,
    /// Standard: bits (m); blocked: 64-byte lines (m / 512); Ribbon: slots (m / r). 0 for an
    /// empty filter.
    units: u64,
}

impl Probe {
    /// The parameters of a block with header fields `kind`, `k` and `m` (validated by
    /// `format::decode`: k ≥ 1, m a multiple of the kind's unit).
    #[inline]
    fn new(kind: FilterKind, k: u32, m: u64) -> Probe {
        let units = match kind {
            FilterKind::Standard => m,
            FilterKind::Blocked => m / blocked::LINE_BITS,
            FilterKind::Ribbon => m.checked_div(u64::from(k)).unwrap_or(0),
        };
        Probe { kind, k, units }
    }

    /// The parameters `parts()` gave, taken back from a caller that stored them apart (the
    /// kind as its header id). None for an unknown kind id.
    #[inline]
    #[cfg(feature = "rocksdb-plugin")]
    pub(crate) fn from_parts(kind_id: u8, k: u32, units: u64) -> Option<Probe> {
        Some(Probe {
            kind: FilterKind::from_id(kind_id)?,
            k,
            units,
        })
    }

    /// The parameters as `from_parts` takes them: kind id, k, units.
    #[cfg(feature = "rocksdb-plugin")]
    pub(crate) fn parts(self) -> (u8, u32, u64) {
        (self.kind.id(), self.k, self.units)
    }

    /// The byte range of the bit array `test(_, hash)` reads first (offset, length); `None`
    /// for an empty filter.
    #[inline(always)]
    fn span(self, hash: u64) -> Option<(usize, usize)> {
        let Probe { kind, k, units } = self;
        if units == 0 {
            return None;
        }
        Some(match kind {
            FilterKind::Standard => ((standard::start(units, hash).0 >> 3) as usize, 1),
            FilterKind::Blocked => (blocked::line_start(hash, units), 1),
            FilterKind::Ribbon => ribbon::row_span(units, k, hash),
        })
    }

    /// The block's answer for `hash` (seeded as the block says), `bits` its bit array.
    /// Always inlined: the store's `get` loop measured ~10% slower on absent keys when the
    /// compiler chose a call here (`db_bench --hold absent`, 10^6 keys).
    #[inline(always)]
    pub(crate) fn test(self, bits: &[u8], hash: u64) -> bool {
        let Probe { kind, k, units } = self;
        if units == 0 {
            return false;
        }
        match kind {
            FilterKind::Standard => standard::test(bits, units, k, hash),
            FilterKind::Blocked => blocked::test(bits, units, k, hash),
            FilterKind::Ribbon => ribbon::test(bits, units, k, hash),
        }
    }
}

/// Hints to the CPU to load every cache line of bytes `at..at + len` of the `array_len`-byte
/// array at `address` (what lies past the array is skipped), whatever the array's alignment:
/// a Ribbon row reads two blocks of r × 16 bytes (4 lines at r = 8), and prefetching only
/// the first left the others to miss one after another.
#[inline(always)]
fn prefetch_span(address: usize, array_len: usize, at: usize, len: usize, into: CacheLevel) {
    let end = at.saturating_add(len).min(array_len);
    if end > at {
        prefetch_lines_into(address + at, end - at, into);
    }
}

/// Where a filter's bit array is and how it is probed, copied out of its reader so that a
/// lookup can start loading the lines a probe will read before it touches the table that
/// holds the reader (`db::version`: one per table, in a dense array per level). Only an
/// address: `prefetch` never reads through it, so a hint that outlived its filter would
/// prefetch harmless garbage, never read it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FilterHint {
    probe: Probe,
    address: usize,
    len: usize,
}

impl FilterHint {
    /// Starts loading the cache lines `may_contain_prehashed(_, hash)` reads first, and
    /// returns at once: a caller about to probe several filters issues this for each, so
    /// that their memory misses overlap instead of following one another (blocked Bloom: its
    /// one line; standard Bloom: the first probe's; Ribbon: every line of the two blocks its
    /// row reads), into L1. Never changes an answer.
    #[inline(always)]
    pub(crate) fn prefetch(self, hash: u64) {
        self.prefetch_into(hash, CacheLevel::L1);
    }

    /// `prefetch` into `into`: L2 for a batch (`multi_get`), see `CacheLevel`.
    #[inline(always)]
    pub(crate) fn prefetch_into(self, hash: u64, into: CacheLevel) {
        if let Some((at, len)) = self.probe.span(hash) {
            prefetch_span(self.address, self.len, at, len, into);
        }
    }
}

/// A validated filter block, borrowed (`&[u8]`) or owned (`Vec<u8>`); the bit array is used in
/// place, never copied.
#[derive(Clone, Debug)]
pub struct FilterReader<B: AsRef<[u8]>> {
    block: B,
    header: Header,
    /// The header's probe parameters, worked out once (`Probe::new`).
    probe: Probe,
}

/// Facts about a filter block, as the dump tool shows them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FilterInfo {
    /// Format version.
    pub version: u16,
    /// Filter kind.
    pub kind: FilterKind,
    /// Hash function name.
    pub hash: String,
    /// Hash seed.
    pub seed: u64,
    /// Probes per key.
    pub k: u32,
    /// Bits in the array.
    pub m: u64,
    /// Keys added.
    pub n: u64,
    /// Blocked filters: number of 64-byte lines; standard: 0.
    pub lines: u64,
    /// m / n (0 when empty).
    pub bits_per_key: f64,
    /// Whole block size in bytes.
    pub block_bytes: u64,
    /// Fraction of bits set.
    pub fill_ratio: f64,
    /// False-positive rate predicted from k, m, n.
    pub expected_fpr: f64,
    /// False-positive rate estimated from the bits actually set.
    pub estimated_fpr_from_fill: f64,
    /// The block's CRC-32 (verified).
    pub crc32: u32,
}

impl<B: AsRef<[u8]>> FilterReader<B> {
    /// Validates `block` (every check in FORMAT.md §1, checksum included).
    pub fn new(block: B) -> Result<Self, FilterError> {
        let header = format::decode(block.as_ref())?;
        let probe = Probe::new(header.kind, header.k, header.m);
        Ok(FilterReader {
            block,
            header,
            probe,
        })
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The whole block as validated (header, bit array, trailer), in the storage it was
    /// handed in.
    pub fn block(&self) -> &B {
        &self.block
    }

    /// The bytes of the bit array.
    fn bits(&self) -> &[u8] {
        let b = self.block.as_ref();
        &b[format::HEADER_LEN..b.len() - format::TRAILER_LEN]
    }

    /// False if `key` was certainly never added.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_hash(hash_key_with_seed(key, self.header.seed))
    }

    /// `may_contain(key)` given `hash = hash_key(key)`, computed once by a caller that asks
    /// several filters: used as is when this block has the default seed (what the builder
    /// always writes), else the key is hashed again with the block's seed.
    #[inline]
    pub fn may_contain_prehashed(&self, key: &[u8], hash: u64) -> bool {
        if self.header.seed == hash::DEFAULT_SEED {
            self.may_contain_hash(hash)
        } else {
            self.may_contain(key)
        }
    }

    /// Starts loading the memory `may_contain_prehashed(key, hash)` will read first (see
    /// `FilterHint::prefetch`); a block with its own seed is left alone (it rehashes the key).
    #[inline(always)]
    pub fn prefetch_prehashed(&self, hash: u64) {
        if let Some(hint) = self.hint() {
            hint.prefetch(hash);
        }
    }

    /// What `prefetch_prehashed` prefetches through, to keep apart from the reader: `None`
    /// for a block with its own seed.
    #[inline(always)]
    pub(crate) fn hint(&self) -> Option<FilterHint> {
        let bits = self.bits();
        (self.header.seed == hash::DEFAULT_SEED).then(|| FilterHint {
            probe: self.probe(),
            address: bits.as_ptr() as usize,
            len: bits.len(),
        })
    }

    /// Like `may_contain`, for a key already hashed with this block's seed
    /// (`hash_key` when `header().seed == 0`, which the builder always writes).
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        self.probe().test(self.bits(), hash)
    }

    /// What a probe needs besides the bit array, to keep next to a pointer to it: the
    /// RocksDB reader holds this inline, saving a pointer hop per probe (`rocksdb::ffi`).
    pub(crate) fn probe(&self) -> Probe {
        self.probe
    }

    /// The bit array, as `Probe::test` takes it.
    #[cfg(feature = "rocksdb-plugin")]
    pub(crate) fn bit_array(&self) -> &[u8] {
        self.bits()
    }

    /// Size, shape and predicted/estimated false-positive rates (scans the bit array once).
    pub fn info(&self) -> FilterInfo {
        let Header {
            version,
            kind,
            seed,
            k,
            m,
            n,
            crc,
            ..
        } = self.header;
        let bits = self.bits();
        let set: u64 = bits.iter().map(|b| u64::from(b.count_ones())).sum();
        let fill_ratio = if m == 0 { 0.0 } else { set as f64 / m as f64 };
        let estimated = match kind {
            _ if m == 0 => 0.0,
            FilterKind::Standard => fill_ratio.powi(k as i32),
            FilterKind::Blocked => {
                let lines = bits.chunks(blocked::LINE_BYTES);
                let count = lines.len() as f64;
                lines
                    .map(|l| {
                        let ones: u32 = l.iter().map(|b| b.count_ones()).sum();
                        (f64::from(ones) / blocked::LINE_BITS as f64).powi(k as i32)
                    })
                    .sum::<f64>()
                    / count
            }
            // A Ribbon array is a solution, about half ones whatever the load: its rate is
            // 2^-r by construction, not readable from the fill.
            FilterKind::Ribbon => math::ribbon_fpr(k),
        };
        FilterInfo {
            version,
            kind,
            hash: "xxh3_64".to_string(),
            seed,
            k,
            m,
            n,
            lines: if kind == FilterKind::Blocked {
                m / blocked::LINE_BITS
            } else {
                0
            },
            bits_per_key: if n == 0 { 0.0 } else { m as f64 / n as f64 },
            block_bytes: self.block.as_ref().len() as u64,
            fill_ratio,
            expected_fpr: kind.expected_fpr(m, n, k),
            estimated_fpr_from_fill: estimated,
            crc32: crc,
        }
    }

    /// The block's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.block.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(policy: FilterPolicy, keys: impl Iterator<Item = Vec<u8>>) -> Vec<u8> {
        let mut b = FilterBuilder::new(policy).unwrap();
        for k in keys {
            b.add_key(&k);
        }
        b.finish()
    }

    /// A prefetch reads nothing the program sees: for every kind, full and empty, across the
    /// whole hash range (the last line, the last Ribbon block), the answers after prefetching
    /// (through the reader and through its `FilterHint`) are the answers without, and nothing
    /// panics.
    #[test]
    fn prefetch_changes_no_answer_for_any_kind() {
        for kind in [
            FilterKind::Standard,
            FilterKind::Blocked,
            FilterKind::Ribbon,
        ] {
            for n in [0u32, 1, 3000] {
                let block = build(
                    FilterPolicy::bits_per_key(kind, 10.0),
                    (0..n).map(|i| i.to_le_bytes().to_vec()),
                );
                let r = FilterReader::new(block).unwrap();
                let hint = r.hint().expect("the builder writes the default seed");
                for i in 0..20_000u64 {
                    let h = match i {
                        0 => 0,
                        1 => u64::MAX,
                        _ => hash_key(&i.to_le_bytes()),
                    };
                    let before = r.may_contain_hash(h);
                    r.prefetch_prehashed(h);
                    hint.prefetch(h);
                    hint.prefetch_into(h, CacheLevel::L2);
                    assert_eq!(r.may_contain_hash(h), before, "{kind:?} n={n} h={h:#x}");
                }
            }
        }
    }

    #[test]
    fn empty_block_answers_absent() {
        for kind in [
            FilterKind::Standard,
            FilterKind::Blocked,
            FilterKind::Ribbon,
        ] {
            let block = build(FilterPolicy::bits_per_key(kind, 10.0), std::iter::empty());
            let r = FilterReader::new(&block[..]).unwrap();
            assert!(!r.may_contain(b"anything"));
            assert_eq!(r.info().n, 0);
            assert_eq!(r.info().m, 0);
        }
    }

    #[test]
    fn duplicates_are_harmless() {
        let policy = FilterPolicy::bits_per_key(FilterKind::Standard, 10.0);
        let block = build(policy, (0..10).map(|_| b"same".to_vec()));
        let r = FilterReader::new(block).unwrap();
        assert!(r.may_contain(b"same"));
        assert_eq!(r.info().n, 10);
    }

    #[test]
    fn hash_and_key_queries_agree() {
        let policy = FilterPolicy::bits_per_key(FilterKind::Blocked, 10.0);
        let block = build(policy, (0..1000u32).map(|i| i.to_le_bytes().to_vec()));
        let r = FilterReader::new(&block[..]).unwrap();
        for i in 0..5000u32 {
            let key = i.to_le_bytes();
            assert_eq!(r.may_contain(&key), r.may_contain_hash(hash_key(&key)));
        }
    }

    #[test]
    fn policies_out_of_range_are_rejected() {
        for p in [
            FilterPolicy::bits_per_key(FilterKind::Standard, 0.0),
            FilterPolicy::bits_per_key(FilterKind::Standard, f64::NAN),
            FilterPolicy::target_fpr(FilterKind::Blocked, 1.0),
            FilterPolicy::target_fpr(FilterKind::Blocked, 0.0),
            FilterPolicy::bits_per_key(FilterKind::Blocked, 10.0).with_num_probes(0),
            FilterPolicy::bits_per_key(FilterKind::Blocked, 10.0).with_num_probes(31),
        ] {
            assert!(
                matches!(FilterBuilder::new(p), Err(FilterError::InvalidPolicy(_))),
                "{p:?}"
            );
        }
    }

    #[test]
    fn target_fpr_policy_sizes_by_formula() {
        let p = FilterPolicy::target_fpr(FilterKind::Standard, 0.01);
        assert!((p.bits_per_key_value() - 9.585).abs() < 0.001);
        assert_eq!(p.k(), 7);
        assert_eq!(
            "blocked".parse::<FilterKind>().unwrap(),
            FilterKind::Blocked
        );
        assert_eq!("ribbon".parse::<FilterKind>().unwrap(), FilterKind::Ribbon);
        assert!("xor".parse::<FilterKind>().is_err());
    }

    #[test]
    /// 9,500 bits asked for: the textbook array is the 149 whole words that hold them.
    fn fractional_bits_per_key_sizes_array() {
        let block = build(
            FilterPolicy::bits_per_key(FilterKind::Standard, 9.5),
            (0..1000u32).map(|i| i.to_be_bytes().to_vec()),
        );
        let info = FilterReader::new(&block[..]).unwrap().info();
        assert_eq!(info.m, 9536);
        assert_eq!(info.k, 7);
        assert_eq!(
            block.len(),
            format::HEADER_LEN + 9536 / 8 + format::TRAILER_LEN
        );
    }
}
