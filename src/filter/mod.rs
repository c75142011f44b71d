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
//! builds and tests its array, and one arm in each `match` on [`FilterKind`] in this file,
//! `format.rs` and `budget.rs`.

pub mod blocked;
pub mod budget;
pub mod format;
pub mod hash;
pub mod math;
pub mod ribbon;
pub mod standard;

use std::fmt;

pub use format::Header;
pub use hash::{hash_key, hash_key_with_seed};

/// The layout of a filter's bit array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FilterKind {
    /// Textbook Bloom filter: k probes spread over the whole array.
    Standard,
    /// Cache-local Bloom filter: all k probes inside one 64-byte line.
    Blocked,
    /// Ribbon filter: a solved linear system, ~30% smaller than Bloom at the same rate, slower
    /// to build (`ribbon.rs`).
    Ribbon,
}

impl FilterKind {
    /// The kind's id in the block header.
    pub fn id(self) -> u8 {
        match self {
            FilterKind::Standard => 1,
            FilterKind::Blocked => 2,
            FilterKind::Ribbon => 3,
        }
    }

    /// The kind with header id `id`, if known.
    pub fn from_id(id: u8) -> Option<Self> {
        match id {
            1 => Some(FilterKind::Standard),
            2 => Some(FilterKind::Blocked),
            3 => Some(FilterKind::Ribbon),
            _ => None,
        }
    }

    /// Lower-case name, as in dump output.
    pub fn name(self) -> &'static str {
        match self {
            FilterKind::Standard => "standard",
            FilterKind::Blocked => "blocked",
            FilterKind::Ribbon => "ribbon",
        }
    }

    /// Default probes at `bits_per_key` for this kind (Ribbon: result bits, at the model's
    /// slots per key; the builder recomputes them from the real slot count).
    pub fn default_k(self, bits_per_key: f64) -> u32 {
        match self {
            FilterKind::Standard => math::optimal_k(bits_per_key, 1.0),
            FilterKind::Blocked => math::blocked_default_k(bits_per_key),
            FilterKind::Ribbon => math::ribbon_r(bits_per_key, ribbon::MODEL_SLOTS_PER_KEY),
        }
    }

    /// Expected false-positive rate with m bits, n keys and k probes (Ribbon: k result bits).
    pub fn expected_fpr(self, m: u64, n: u64, k: u32) -> f64 {
        if n == 0 {
            return 0.0;
        }
        match self {
            FilterKind::Standard => math::standard_fpr(m as f64, n as f64, k),
            FilterKind::Blocked => math::blocked_fpr(m as f64 / n as f64, k),
            FilterKind::Ribbon => math::ribbon_fpr(k),
        }
    }

    /// Bits in the array for `n` keys at `bits_per_key` (0 for 0 keys); Bloom kinds only.
    fn bloom_bits_for(self, n: u64, bits_per_key: f64) -> u64 {
        if n == 0 {
            return 0;
        }
        let want = ((n as f64) * bits_per_key).ceil().max(1.0) as u64;
        match self {
            FilterKind::Standard => want,
            FilterKind::Blocked => want.div_ceil(blocked::LINE_BITS) * blocked::LINE_BITS,
            // Not used: a Ribbon array is sized by `finish_ribbon` from its slot count.
            FilterKind::Ribbon => want,
        }
    }
}

impl fmt::Display for FilterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FilterKind {
    type Err = FilterError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "standard" => Ok(FilterKind::Standard),
            "blocked" => Ok(FilterKind::Blocked),
            "ribbon" => Ok(FilterKind::Ribbon),
            other => Err(FilterError::InvalidPolicy(format!(
                "unknown filter kind {other:?} (expected \"standard\", \"blocked\" or \"ribbon\")"
            ))),
        }
    }
}

/// Everything that can be wrong with a filter block or a policy.
#[derive(Clone, Debug, PartialEq)]
pub enum FilterError {
    /// The block is shorter than header plus trailer.
    TooShort {
        /// Bytes given.
        len: usize,
        /// Bytes needed at least.
        min: usize,
    },
    /// The first four bytes are not `LBFB`.
    BadMagic {
        /// Bytes found.
        found: [u8; 4],
    },
    /// A format version this build does not read.
    UnsupportedVersion {
        /// Version in the block.
        found: u16,
        /// Newest version this build reads.
        supported: u16,
    },
    /// The stored CRC does not match the block.
    ChecksumMismatch {
        /// CRC stored in the block.
        expected: u32,
        /// CRC computed over the block.
        actual: u32,
    },
    /// Unknown filter kind id.
    UnknownKind {
        /// Id found.
        found: u8,
    },
    /// Unknown hash function id.
    UnknownHashFunction {
        /// Id found.
        found: u8,
    },
    /// A reserved field is not zero.
    ReservedNotZero {
        /// Offset of the field in the block.
        offset: usize,
        /// Value found.
        found: u64,
    },
    /// k, m, n and the length disagree or are out of range.
    BadParameters {
        /// What is inconsistent.
        reason: String,
    },
    /// A policy that cannot build a filter.
    InvalidPolicy(String),
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FilterError::TooShort { len, min } => {
                write!(
                    f,
                    "filter block too short: {len} bytes, at least {min} needed"
                )
            }
            FilterError::BadMagic { found } => {
                write!(
                    f,
                    "bad filter block magic: found {found:02x?}, expected \"LBFB\""
                )
            }
            FilterError::UnsupportedVersion { found, supported } => write!(
                f,
                "unsupported filter format version {found} (this build reads up to {supported})"
            ),
            FilterError::ChecksumMismatch { expected, actual } => write!(
                f,
                "filter block checksum mismatch: stored {expected:#010x}, computed {actual:#010x}"
            ),
            FilterError::UnknownKind { found } => write!(f, "unknown filter kind id {found}"),
            FilterError::UnknownHashFunction { found } => {
                write!(f, "unknown hash function id {found}")
            }
            FilterError::ReservedNotZero { offset, found } => {
                write!(
                    f,
                    "reserved field at offset {offset} is {found:#x}, must be 0"
                )
            }
            FilterError::BadParameters { reason } => write!(f, "bad filter parameters: {reason}"),
            FilterError::InvalidPolicy(reason) => write!(f, "invalid filter policy: {reason}"),
        }
    }
}

impl std::error::Error for FilterError {}

/// How big a filter should be.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Sizing {
    /// Bits per key (fractional allowed, e.g. 9.5).
    BitsPerKey(f64),
    /// Target false-positive rate in (0, 1); bits/key derived per kind.
    TargetFpr(f64),
}

/// What filter to build: kind, size, and optionally a fixed number of probes.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FilterPolicy {
    /// Filter kind.
    pub kind: FilterKind,
    /// Size rule.
    pub sizing: Sizing,
    /// Probes per key; `None` picks the kind's default for the bits/key.
    pub num_probes: Option<u32>,
}

impl FilterPolicy {
    /// `kind` at `bits_per_key` bits per key.
    pub fn bits_per_key(kind: FilterKind, bits_per_key: f64) -> Self {
        FilterPolicy {
            kind,
            sizing: Sizing::BitsPerKey(bits_per_key),
            num_probes: None,
        }
    }

    /// `kind` sized for false-positive rate `fpr`.
    pub fn target_fpr(kind: FilterKind, fpr: f64) -> Self {
        FilterPolicy {
            kind,
            sizing: Sizing::TargetFpr(fpr),
            num_probes: None,
        }
    }

    /// The same policy with k fixed.
    pub fn with_num_probes(mut self, k: u32) -> Self {
        self.num_probes = Some(k);
        self
    }

    /// Checks the numbers; `FilterBuilder::new` calls it.
    pub fn validate(&self) -> Result<(), FilterError> {
        match self.sizing {
            Sizing::BitsPerKey(b) if !(b.is_finite() && b > 0.0 && b <= 1000.0) => {
                return Err(FilterError::InvalidPolicy(format!(
                    "bits per key must be in (0, 1000], got {b}"
                )))
            }
            Sizing::TargetFpr(p) if !(p.is_finite() && p > 0.0 && p < 1.0) => {
                return Err(FilterError::InvalidPolicy(format!(
                    "target false-positive rate must be in (0, 1), got {p}"
                )))
            }
            _ => {}
        }
        if let Some(k) = self.num_probes {
            if k == 0 || k > math::MAX_PROBES {
                return Err(FilterError::InvalidPolicy(format!(
                    "number of probes must be in 1..={}, got {k}",
                    math::MAX_PROBES
                )));
            }
        }
        if self.bits_per_key_value() > 1000.0 {
            return Err(FilterError::InvalidPolicy(
                "target false-positive rate too small".into(),
            ));
        }
        Ok(())
    }

    /// Bits per key this policy gives.
    pub fn bits_per_key_value(&self) -> f64 {
        match (self.sizing, self.kind) {
            (Sizing::BitsPerKey(b), _) => b,
            (Sizing::TargetFpr(p), FilterKind::Standard) => math::standard_bits_per_key(p),
            (Sizing::TargetFpr(p), FilterKind::Blocked) => math::blocked_bits_per_key(p),
            (Sizing::TargetFpr(p), FilterKind::Ribbon) => {
                f64::from(math::ribbon_r_for(p)) * ribbon::MODEL_SLOTS_PER_KEY
            }
        }
    }

    /// Probes per key this policy gives (Ribbon: result bits; for a bits/key policy without a
    /// fixed count this is the model's guess, and the builder fits r to the real slot count).
    pub fn k(&self) -> u32 {
        match (self.num_probes, self.sizing, self.kind) {
            (Some(k), _, _) => k,
            (None, Sizing::TargetFpr(p), FilterKind::Ribbon) => math::ribbon_r_for(p),
            (None, _, kind) => kind.default_k(self.bits_per_key_value()),
        }
    }
}

impl Default for FilterPolicy {
    /// Blocked filter at 10 bits/key (≈1% false positives, one cache miss per probe).
    fn default() -> Self {
        FilterPolicy::bits_per_key(FilterKind::Blocked, 10.0)
    }
}

/// Builds one filter block: `(add_key | add_hash)* finish`.
///
/// Hashes are buffered (8 bytes per key) because the array is sized from the final key count.
#[derive(Debug)]
pub struct FilterBuilder {
    policy: FilterPolicy,
    bits_per_key: f64,
    k: u32,
    hashes: Vec<u64>,
}

impl FilterBuilder {
    /// A builder for `policy`; fails if the policy's numbers are out of range.
    pub fn new(policy: FilterPolicy) -> Result<Self, FilterError> {
        policy.validate()?;
        Ok(FilterBuilder {
            policy,
            bits_per_key: policy.bits_per_key_value(),
            k: policy.k(),
            hashes: Vec::new(),
        })
    }

    /// Adds a key.
    pub fn add_key(&mut self, key: &[u8]) {
        self.hashes.push(hash_key(key));
    }

    /// Adds a key by its [`hash_key`] hash.
    pub fn add_hash(&mut self, hash: u64) {
        self.hashes.push(hash);
    }

    /// Keys added so far (duplicates counted).
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// True when no key was added.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// The policy this builder follows.
    pub fn policy(&self) -> &FilterPolicy {
        &self.policy
    }

    /// Builds the block (FORMAT.md §1).
    pub fn finish(self) -> Vec<u8> {
        let kind = self.policy.kind;
        let n = self.hashes.len() as u64;
        if kind == FilterKind::Ribbon {
            return self.finish_ribbon();
        }
        let m = kind.bloom_bits_for(n, self.bits_per_key);
        let len = Header::array_len(kind, m).unwrap_or(0) as usize;
        let mut bits = vec![0u8; len];
        match kind {
            FilterKind::Standard => {
                for &h in &self.hashes {
                    standard::set(&mut bits, m, self.k, h);
                }
            }
            FilterKind::Blocked => {
                let lines = m / blocked::LINE_BITS;
                for &h in &self.hashes {
                    blocked::set(&mut bits, lines, self.k, h);
                }
            }
            FilterKind::Ribbon => unreachable!("finish_ribbon builds Ribbon filters"),
        }
        format::encode(
            kind,
            hash::HASH_FN_XXH3_64,
            hash::DEFAULT_SEED,
            self.k,
            m,
            n,
            &bits,
        )
    }
}

impl FilterBuilder {
    /// Ribbon: r result bits over `ribbon::slots_for(n)` slots. A bits/key policy without a
    /// fixed r takes the largest r whose array fits `bits_per_key × n` at the first slot count
    /// (at least 1); a banding failure grows the slots (~1.5%) and keeps r, so a filter that
    /// needed a retry is that much over its bits/key.
    fn finish_ribbon(self) -> Vec<u8> {
        let n = self.hashes.len() as u64;
        let mut slots = ribbon::slots_for(n);
        let r = match (self.policy.num_probes, self.policy.sizing) {
            (None, Sizing::BitsPerKey(b)) if slots > 0 => {
                math::ribbon_r(b * n as f64 / slots as f64, 1.0)
            }
            _ => self.k,
        };
        let array = loop {
            if slots == 0 {
                break Vec::new();
            }
            if let Some(a) = ribbon::build(&self.hashes, slots, r) {
                break a;
            }
            slots = ribbon::grow(slots);
        };
        format::encode(
            FilterKind::Ribbon,
            hash::HASH_FN_XXH3_64,
            hash::DEFAULT_SEED,
            r,
            slots * u64::from(r),
            n,
            &array,
        )
    }
}

/// A validated filter block, borrowed (`&[u8]`) or owned (`Vec<u8>`); the bit array is used in
/// place, never copied.
#[derive(Clone, Debug)]
pub struct FilterReader<B: AsRef<[u8]>> {
    block: B,
    header: Header,
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
        Ok(FilterReader { block, header })
    }

    /// The validated header.
    pub fn header(&self) -> &Header {
        &self.header
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

    /// Like `may_contain`, for a key already hashed with this block's seed
    /// (`hash_key` when `header().seed == 0`, which the builder always writes).
    #[inline]
    pub fn may_contain_hash(&self, hash: u64) -> bool {
        let Header { kind, k, m, .. } = self.header;
        if m == 0 {
            return false;
        }
        match kind {
            FilterKind::Standard => standard::test(self.bits(), m, k, hash),
            FilterKind::Blocked => blocked::test(self.bits(), m / blocked::LINE_BITS, k, hash),
            FilterKind::Ribbon => ribbon::test(self.bits(), m / u64::from(k), k, hash),
        }
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
    fn fractional_bits_per_key_sizes_array() {
        let block = build(
            FilterPolicy::bits_per_key(FilterKind::Standard, 9.5),
            (0..1000u32).map(|i| i.to_be_bytes().to_vec()),
        );
        let info = FilterReader::new(&block[..]).unwrap().info();
        assert_eq!(info.m, 9500);
        assert_eq!(info.k, 7);
        assert_eq!(
            block.len(),
            format::HEADER_LEN + 9536 / 8 + format::TRAILER_LEN
        );
    }
}
