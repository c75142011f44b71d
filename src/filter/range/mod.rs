//! Range filters: one block per set of keys that answers "might any key lie in this range?"
//! for short ranges, as a point filter answers it for one key. A scan of an empty range can
//! then skip a table as a lookup of an absent key does.
//!
//! Use: pick a [`RangePolicy`] (bits per key and the longest range it is asked about, or a
//! target rate at a range length), then `RangeFilterBuilder::new(policy)` → `add_key`* →
//! `finish()` gives one block as bytes (FORMAT.md §9). `RangeFilterReader::new(&bytes)`
//! validates the whole block and answers `may_contain_range(lo, hi)`: `false` means no key
//! added lies between the bounds; `true` means one may. A range wider than the filter's
//! design is always `true`.
//!
//! The filter is Grafite (`grafite.rs`): keys become points of the u64 line in order
//! (`map.rs`), the points are hashed so that a range stays a few intervals, and the hashed
//! set is stored in Elias–Fano coding (`elias_fano.rs`). Its false-positive rate on a range
//! of `ℓ` points is at most `ℓ / 2^(B − 2)` at `B` bits per key, whatever the queries —
//! ranges right after a present key included, where SuRF, SNARF and Proteus degrade toward 1.
//!
//! This module knows nothing of the LSM store; a block is built from keys, not hashes.

mod elias_fano;
mod error;
pub mod format;
mod grafite;
mod map;
mod words;

use std::ops::Bound;

pub use error::RangeFilterError;

use elias_fano::EliasFano;
use format::Fields;
use grafite::Hash;

/// How a range filter is sized (built only by its checked constructors).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct RangePolicy {
    bits_per_key: f64,
    max_range: u64,
}

/// Bits per key a policy may ask for: under 3 the bound passes 1/2 at ℓ = 1; over 50 the
/// low bits no longer fit the format's 63.
const BITS_PER_KEY: std::ops::RangeInclusive<f64> = 3.0..=50.0;

/// The longest design range a policy may give: 2^40 points.
const MAX_RANGE: u64 = 1 << 40;

impl RangePolicy {
    /// `bits_per_key` bits per key (3 to 50), answering ranges of up to `max_range` points
    /// (1 to 2^40; wider ranges are "maybe"). The rate on `ℓ` points is at most
    /// `ℓ / 2^(bits_per_key − 2)`.
    pub fn bits_per_key(bits_per_key: f64, max_range: u64) -> Result<Self, RangeFilterError> {
        if !BITS_PER_KEY.contains(&bits_per_key) {
            return Err(RangeFilterError::InvalidPolicy(format!(
                "{bits_per_key} bits per key: give 3 to 50"
            )));
        }
        if !(1..=MAX_RANGE).contains(&max_range) {
            return Err(RangeFilterError::InvalidPolicy(format!(
                "a longest range of {max_range} points: give 1 to 2^40"
            )));
        }
        Ok(RangePolicy {
            bits_per_key,
            max_range,
        })
    }

    /// The bits per key that hold the rate to `rate` on ranges of `range` points (also the
    /// longest range answered): `2 + log2(range / rate)`.
    pub fn rate_at(rate: f64, range: u64) -> Result<Self, RangeFilterError> {
        if !(rate > 0.0 && rate < 1.0) {
            return Err(RangeFilterError::InvalidPolicy(format!(
                "a rate of {rate}: give more than 0 and less than 1"
            )));
        }
        Self::bits_per_key(2.0 + (range as f64 / rate).log2(), range)
    }

    /// Bits per key.
    pub fn bits(self) -> f64 {
        self.bits_per_key
    }

    /// The longest range answered, in points, as asked.
    pub fn max_range(self) -> u64 {
        self.max_range
    }
}

/// Builds one range-filter block from keys, in any order.
#[derive(Clone, Debug)]
pub struct RangeFilterBuilder {
    policy: RangePolicy,
    /// The first key added, up to the most the prefix and its 8 bytes can use.
    first: Option<Vec<u8>>,
    /// The keys' common prefix so far (of `first`), at most `MAX_PREFIX` bytes.
    common: usize,
    /// Each key's point after its common prefix with the keys before it, and that prefix's
    /// length: rebased on the final prefix by `finish`.
    points: Vec<(u64, u32)>,
    /// The longest key's length: with the final prefix, it gives the points' width.
    longest: usize,
}

impl RangeFilterBuilder {
    /// An empty builder.
    pub fn new(policy: RangePolicy) -> Self {
        RangeFilterBuilder {
            policy,
            first: None,
            common: map::MAX_PREFIX,
            points: Vec::new(),
            longest: 0,
        }
    }

    /// Adds a key (adding one twice changes nothing but the count).
    pub fn add_key(&mut self, key: &[u8]) {
        let first = self
            .first
            .get_or_insert_with(|| key[..key.len().min(map::MAX_PREFIX + 8)].to_vec());
        self.common = self.common.min(map::common(first, key));
        self.points
            .push((map::point(&key[self.common..]), self.common as u32));
        self.longest = self.longest.max(key.len());
    }

    /// Keys added so far.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether no key was added.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The block, with seed 0 (FORMAT.md §9).
    pub fn finish(self) -> Vec<u8> {
        self.finish_with_seed(0)
    }

    /// The block, its hash drawn from `seed`.
    pub fn finish_with_seed(self, seed: u64) -> Vec<u8> {
        let n = self.points.len() as u64;
        let first = self.first.unwrap_or_default();
        let common = self.common.min(first.len());
        let prefix = first[..common].to_vec();
        let width = (self.longest - common).clamp(1, 8) as u32;
        let shift = map::shift(width);
        let mut points: Vec<u64> = self
            .points
            .iter()
            .map(|&(p, at)| rebase(&first, common, p, at as usize) >> shift)
            .collect();
        points.sort_unstable();
        points.dedup();
        let log_l = self.policy.max_range.next_power_of_two().ilog2();
        let mut fields = Fields {
            version: format::VERSION,
            low_bits: 0,
            seed,
            n,
            count: 0,
            r: 0,
            log_l,
            width,
            prefix,
            crc: 0,
        };
        if points.is_empty() {
            return format::encode(&fields, &[], &[]);
        }
        let r = universe(points.len() as u64, self.policy.bits_per_key, log_l);
        let hash = Hash::new(seed, r, log_l);
        let mut values: Vec<u64> = points.iter().map(|&p| hash.of(p)).collect();
        values.sort_unstable();
        values.dedup();
        let count = values.len() as u64;
        let low_bits = (r / count).max(1).ilog2();
        let (high, low) = elias_fano::encode(&values, r, low_bits);
        fields.low_bits = low_bits;
        fields.count = count;
        fields.r = r;
        format::encode(&fields, &high, &low)
    }
}

/// The reduced universe for `points` distinct points at `bits` bits per key:
/// `points · 2^(bits − 2)`, at least `2L`, at most 2^62.
fn universe(points: u64, bits: f64, log_l: u32) -> u64 {
    let r = (points as f64 * (bits - 2.0).exp2()).ceil();
    let r = if r >= format::MAX_UNIVERSE as f64 {
        format::MAX_UNIVERSE
    } else {
        r as u64
    };
    r.max(2 << log_l)
}

/// A key's point after the final prefix (`common` bytes), from its point `p` after the
/// `at ≥ common` bytes it shared with the first key when it was added: those `at − common`
/// bytes are the first key's.
fn rebase(first: &[u8], common: usize, p: u64, at: usize) -> u64 {
    let d = at - common;
    if d == 0 {
        p
    } else if d >= 8 {
        map::point(&first[common..])
    } else {
        map::point(&first[common..at]) | p >> (8 * d)
    }
}

/// Facts about a range-filter block, as the dump tool shows them.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RangeFilterInfo {
    /// Format version.
    pub version: u16,
    /// Filter kind ("grafite").
    pub kind: &'static str,
    /// Hash seed.
    pub seed: u64,
    /// Keys added.
    pub n: u64,
    /// Values stored (the keys' distinct hashed points).
    pub values: u64,
    /// The reduced universe r.
    pub universe: u64,
    /// Low bits per stored value.
    pub low_bits: u32,
    /// The longest range answered, in points.
    pub max_range: u64,
    /// Bytes of a key after the prefix that make its point (1 to 8).
    pub width: u32,
    /// The keys' common prefix, printable (`\xNN` for other bytes).
    pub prefix: String,
    /// Whole block size in bytes.
    pub block_bytes: u64,
    /// Block bits per key added.
    pub bits_per_key: f64,
    /// Memory bits per key once decoded (the block's arrays and the select samples).
    pub memory_bits_per_key: f64,
    /// The bound on the false-positive rate on an empty range of 1, 8 and 32 points and of
    /// the longest range answered (those up to it).
    pub expected_rate: Vec<RateAt>,
    /// The block's CRC-32 (verified).
    pub crc32: u32,
}

/// The bound on the false-positive rate at one range length.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct RateAt {
    /// Range length in points.
    pub points: u64,
    /// The bound (`points · values / r`).
    pub rate: f64,
}

/// What a range filter says about a range (`RangeFilterReader::answer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeAnswer {
    /// No key added lies in the range.
    Empty,
    /// A key added may lie in the range.
    Maybe,
    /// The range is wider than the filter answers (it may hold keys).
    TooWide,
}

/// A validated range-filter block, decoded into memory.
#[derive(Clone, Debug)]
pub struct RangeFilterReader {
    fields: Fields,
    hash: Hash,
    /// `None`: no key was added.
    set: Option<EliasFano>,
    block_len: usize,
    /// `map::word_of` the prefix.
    prefix_word: (u64, u64),
}

impl RangeFilterReader {
    /// Validates `block` whole (FORMAT.md §9) and decodes it.
    pub fn new(block: &[u8]) -> Result<Self, RangeFilterError> {
        let (fields, set) = format::decode(block)?;
        let hash = Hash::new(fields.seed, fields.r, fields.log_l);
        Ok(RangeFilterReader {
            prefix_word: map::word_of(&fields.prefix),
            fields,
            hash,
            set,
            block_len: block.len(),
        })
    }

    /// Whether a key added may lie between `lo` and `hi`: `false` only when none does.
    /// Ranges wider than twice the design's longest (`max_range` rounded up to a power of
    /// two, counted in points; `answered_range`) are always `true`.
    pub fn may_contain_range(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
        self.answer(lo, hi) != RangeAnswer::Empty
    }

    /// What the filter says about the keys between `lo` and `hi`, telling a range too wide
    /// to answer apart from a "maybe" (one mapping of the bounds, where `answers` and
    /// `may_contain_range` make two).
    #[inline]
    pub fn answer(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> RangeAnswer {
        let Some(set) = &self.set else {
            return RangeAnswer::Empty;
        };
        let Some((a, b)) = map::points(self.key_prefix(), self.fields.width, lo, hi) else {
            return RangeAnswer::Empty;
        };
        if b - a >= self.answered_range() {
            RangeAnswer::TooWide
        } else if self.hash.any_interval(a, b, |s, e| set.any_between(s, e)) {
            RangeAnswer::Maybe
        } else {
            RangeAnswer::Empty
        }
    }

    /// The prefix the block strips, with its word.
    #[inline]
    fn key_prefix(&self) -> map::KeyPrefix<'_> {
        map::KeyPrefix::with_word(&self.fields.prefix, self.prefix_word)
    }

    /// Whether `key` may have been added (the range `key..=key`).
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.may_contain_range(Bound::Included(key), Bound::Included(key))
    }

    /// Whether a range of `lo..=hi` keys fits the design, so the filter can answer "empty"
    /// (counting points, as `may_contain_range` does).
    pub fn answers(&self, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
        map::points(self.key_prefix(), self.fields.width, lo, hi)
            .is_none_or(|(a, b)| b - a < self.answered_range())
    }

    /// Keys added.
    pub fn keys(&self) -> u64 {
        self.fields.n
    }

    /// Values stored (distinct hashed points).
    pub fn values(&self) -> u64 {
        self.fields.count
    }

    /// The design's longest range, in points (a power of two): the rate bound is given for
    /// ranges up to this long.
    pub fn max_range(&self) -> u64 {
        self.hash.block()
    }

    /// The longest range answered, in points: twice `max_range`, at the same bound per point
    /// (`grafite::Hash::any_interval`), so that a range of `max_range` points whose exclusive
    /// end maps one point further (`map.rs`) is still answered.
    pub fn answered_range(&self) -> u64 {
        2 * self.hash.block()
    }

    /// The keys' common prefix the block strips.
    pub fn prefix(&self) -> &[u8] {
        &self.fields.prefix
    }

    /// The block's length in bytes.
    pub fn block_len(&self) -> usize {
        self.block_len
    }

    /// Bytes of memory the decoded filter holds.
    pub fn memory(&self) -> usize {
        self.set.as_ref().map_or(0, EliasFano::memory) + self.fields.prefix.len()
    }

    /// Block bits per key added (0 with none).
    pub fn bits_per_key(&self) -> f64 {
        if self.fields.n == 0 {
            0.0
        } else {
            self.block_len as f64 * 8.0 / self.fields.n as f64
        }
    }

    /// The bound on the false-positive rate for an empty range of `len` points: `len · values / r`
    /// (1 past the longest range answered).
    pub fn expected_rate(&self, len: u64) -> f64 {
        if self.fields.r == 0 {
            0.0
        } else if len > self.answered_range() {
            1.0
        } else {
            (len as f64 * self.fields.count as f64 / self.fields.r as f64).min(1.0)
        }
    }

    /// The block's CRC-32 (verified).
    pub fn crc32(&self) -> u32 {
        self.fields.crc
    }

    /// What the block says about itself, and the rates it promises.
    pub fn info(&self) -> RangeFilterInfo {
        let per_key = |bytes: usize| {
            if self.fields.n == 0 {
                0.0
            } else {
                bytes as f64 * 8.0 / self.fields.n as f64
            }
        };
        let lengths: Vec<u64> = [1, 8, 32]
            .into_iter()
            .filter(|&l| l < self.max_range())
            .chain([self.max_range()])
            .collect();
        RangeFilterInfo {
            version: self.fields.version,
            kind: "grafite",
            seed: self.fields.seed,
            n: self.fields.n,
            values: self.fields.count,
            universe: self.fields.r,
            low_bits: self.fields.low_bits,
            max_range: self.max_range(),
            width: self.fields.width,
            // As `coding::printable` does; `coding` sits above the filter layer.
            prefix: self
                .fields
                .prefix
                .iter()
                .flat_map(|&b| std::ascii::escape_default(b))
                .map(char::from)
                .collect(),
            block_bytes: self.block_len as u64,
            bits_per_key: self.bits_per_key(),
            memory_bits_per_key: per_key(self.memory()),
            expected_rate: lengths
                .into_iter()
                .map(|points| RateAt {
                    points,
                    rate: self.expected_rate(points),
                })
                .collect(),
            crc32: self.fields.crc,
        }
    }
}

#[cfg(test)]
mod tests;
