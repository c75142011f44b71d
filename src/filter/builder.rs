//! Building a filter block, and the one rule for how big its array is (`Shape::of`): the
//! builder follows it, and so do callers that must know a block's size before building it
//! (the RocksDB plugin's `CalculateSpace`).
//!
//! A policy promises a rate per bits/key, and small filters are common (level-0 flushes of a
//! few hot keys, prefix filters over a handful of tenants, RocksDB's filter partitions), so the
//! rule keeps the rate at every key count, measured by `tests/filter_lengths.rs` (the criteria
//! of LevelDB's and RocksDB's `VaryingLengths` tests: 10 bits/key, lengths 1 to 10,000):
//!
//! - Textbook Bloom: the array is whole 64-bit words (the bytes the format stores anyway) and
//!   at least one word, LevelDB's floor. At a handful of keys an array of `n × bits/key` bits
//!   had the double-hashing stride share a factor with m often enough to repeat probes.
//! - Blocked Bloom: whole 512-bit lines, as before (it held the criteria already).
//! - Ribbon: a system has at least 128 slots, so a bits/key policy fitted to the slot count
//!   gave a few keys 1 result bit (50%). The result bits are now at least the policy's (`k()`,
//!   2^-r), and where a blocked Bloom array sized for that same rate is smaller than the Ribbon
//!   array, the block is a blocked Bloom filter (its kind byte says so; readers need nothing
//!   new): under ~120 keys at 10 bits/key.
//!
//! Rate at 10 bits/key per key count, 10,000 absent keys each, before → after (`cargo test
//! --release --test filter_lengths -- --nocapture`; the array bytes stay within the tests'
//! limits at every count):
//!
//! | keys | textbook Bloom | Ribbon (what the block holds) |
//! |---|---|---|
//! | 1 | 13.03% → 0.20% | 50.75% → 0.00% (blocked) |
//! | 5 | 3.01% → 1.30% | 50.75% → 0.00% (blocked) |
//! | 9 | 2.41% → 0.85% | 49.38% → 0.00% (blocked) |
//! | 30 | 1.28% → 1.07% | 25.61% → 0.04% (blocked) |
//! | 70 | 1.21% → 1.01% | 3.30% → 0.05% (blocked) |
//! | 100 | 0.97% → 0.94% | 0.79% → 0.24% (Ribbon, r = 9) |
//! | 1,000 | 0.82% → 0.86% | 0.14% → 0.14% (unchanged) |
//! | worst | 13.03% → 1.73% (6 keys) | 50.87% → 0.24% |
//! | mediocre (> 1.25%) | 12 → 2 | 17 → 0 |
//!
//! The textbook filter's worst is at 5–6 keys in one word (64 bits, k = 7: the formula says
//! 0.6%; double hashing over 64 positions repeats probes). The blocked filter held before and
//! is unchanged (worst 1.16%).

use super::{blocked, format, hash, hash_key, math, ribbon, FilterError, FilterKind, FilterPolicy};
use super::{Header, Sizing};

use std::sync::OnceLock;

/// The array of a block for a given key count: what `FilterBuilder::finish` builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// A Bloom array (textbook or blocked) of `m` bits probed `k` times; `m` is 0 for no keys.
    Bloom {
        /// Standard or Blocked.
        kind: FilterKind,
        /// Bits.
        m: u64,
        /// Probes per key.
        k: u32,
    },
    /// A Ribbon system of `slots` slots (0 for no keys) with `r` result bits; a banding failure
    /// grows the slots (`ribbon::grow`).
    Ribbon {
        /// Slots: a multiple of 128.
        slots: u64,
        /// Result bits.
        r: u32,
    },
}

impl Shape {
    /// The array for `n` keys under `policy` (validated: `FilterBuilder::new`).
    pub(crate) fn of(policy: &FilterPolicy, n: u64) -> Shape {
        let bits_per_key = policy.bits_per_key_value();
        match policy.kind {
            kind @ (FilterKind::Standard | FilterKind::Blocked) => Shape::Bloom {
                kind,
                m: kind.bloom_bits_for(n, bits_per_key),
                k: policy.k(),
            },
            FilterKind::Ribbon => {
                let slots = ribbon::slots_for(n);
                // The rate the policy promises (2^-r); a bits/key policy without a fixed r
                // takes more where the slots leave room for it (large tables, whose slots per
                // key are under the model's), never fewer.
                let promised = policy.k();
                let r = match (policy.num_probes, policy.sizing) {
                    (None, Sizing::BitsPerKey(b)) if slots > 0 => {
                        math::ribbon_r(b * n as f64 / slots as f64, 1.0).max(promised)
                    }
                    _ => promised,
                };
                let ribbon = Shape::Ribbon { slots, r };
                let bloom_bits = blocked_bits_for_ribbon(r);
                let bloom = Shape::Bloom {
                    kind: FilterKind::Blocked,
                    m: FilterKind::Blocked.bloom_bits_for(n, bloom_bits),
                    k: math::blocked_default_k(bloom_bits),
                };
                if bloom.array_bytes() < ribbon.array_bytes() {
                    bloom
                } else {
                    ribbon
                }
            }
        }
    }

    /// Bytes of the bit array.
    pub(crate) fn array_bytes(self) -> u64 {
        match self {
            Shape::Bloom { kind, m, .. } => Header::array_len(kind, m).unwrap_or(u64::MAX / 2),
            Shape::Ribbon { slots, r } => slots * u64::from(r) / 8,
        }
    }

    /// Bytes of the whole block: header, array, trailer (FORMAT.md §1).
    #[cfg_attr(
        not(feature = "rocksdb-plugin"),
        expect(dead_code, reason = "the plugin's CalculateSpace is its caller")
    )]
    pub(crate) fn block_bytes(self) -> u64 {
        (format::HEADER_LEN + format::TRAILER_LEN) as u64 + self.array_bytes()
    }
}

/// Bits/key a blocked Bloom filter needs for a Ribbon filter's rate with `r` result bits,
/// worked out once per r: the plugin's `ApproximateNumEntries` sizes ~40 shapes per call.
fn blocked_bits_for_ribbon(r: u32) -> f64 {
    static BITS: [OnceLock<f64>; math::MAX_PROBES as usize + 1] =
        [const { OnceLock::new() }; math::MAX_PROBES as usize + 1];
    let r = r.min(math::MAX_PROBES);
    *BITS[r as usize].get_or_init(|| math::blocked_bits_per_key(math::ribbon_fpr(r)))
}

/// Builds one filter block: `(add_key | add_hash)* finish`.
///
/// Hashes are buffered (8 bytes per key) because the array is sized from the final key count.
#[derive(Debug)]
pub struct FilterBuilder {
    policy: FilterPolicy,
    hashes: Vec<u64>,
}

impl FilterBuilder {
    /// A builder for `policy`; fails if the policy's numbers are out of range.
    pub fn new(policy: FilterPolicy) -> Result<Self, FilterError> {
        policy.validate()?;
        Ok(FilterBuilder {
            policy,
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

    /// Builds the block (FORMAT.md §1), of the shape `Shape::of` gives for the keys added.
    pub fn finish(mut self) -> Vec<u8> {
        let n = self.hashes.len() as u64;
        let (kind, k, m, bits) = match Shape::of(&self.policy, n) {
            Shape::Bloom { kind, m, k } => {
                let len = Header::array_len(kind, m).unwrap_or(0) as usize;
                let mut bits = vec![0u8; len];
                if kind == FilterKind::Blocked {
                    let lines = m / blocked::LINE_BITS;
                    for &h in &self.hashes {
                        blocked::set(&mut bits, lines, k, h);
                    }
                } else {
                    for &h in &self.hashes {
                        super::standard::set(&mut bits, m, k, h);
                    }
                }
                (kind, k, m, bits)
            }
            Shape::Ribbon { mut slots, r } => {
                // A banding failure (about 1 build in 20) grows the slots ~1.5% and keeps r,
                // so a filter that needed a retry is that much over its bits/key.
                let array = loop {
                    if slots == 0 {
                        break Vec::new();
                    }
                    if let Some(a) = ribbon::build(&mut self.hashes, slots, r) {
                        break a;
                    }
                    slots = ribbon::grow(slots);
                };
                (FilterKind::Ribbon, r, slots * u64::from(r), array)
            }
        };
        format::encode(
            kind,
            hash::HASH_FN_XXH3_64,
            hash::DEFAULT_SEED,
            k,
            m,
            n,
            &bits,
        )
    }
}
