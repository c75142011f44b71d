//! What filter to build: a kind plus bits/key or a target false-positive rate, and an optional
//! fixed probe count; `validate` checks the numbers before a builder accepts them.

use super::{math, ribbon, FilterError, FilterKind};

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
#[non_exhaustive]
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
