//! The filter kinds a block can hold (FORMAT.md §1 `kind` byte) and what the sizing math says
//! about each: default probes (or result bits), expected false-positive rate, array size.

use std::fmt;

use super::{blocked, math, ribbon, FilterError};

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
    pub(crate) fn bloom_bits_for(self, n: u64, bits_per_key: f64) -> u64 {
        if n == 0 {
            return 0;
        }
        let want = ((n as f64) * bits_per_key).ceil().max(1.0) as u64;
        match self {
            // Whole 64-bit words, the bytes the array takes anyway, and at least one
            // (`builder.rs` has the measurements).
            FilterKind::Standard => want.div_ceil(64).max(1) * 64,
            FilterKind::Blocked => want.div_ceil(blocked::LINE_BITS) * blocked::LINE_BITS,
            // Not used: a Ribbon array is sized from its slot count (`Shape::of`).
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
