//! The policy names RocksDB knows lsm-bloom's filters by, and the per-level plan of the budget
//! policies. Pure: no FFI, no RocksDB.
//!
//! A name is what RocksDB writes as `filter_policy=` in its OPTIONS file and what
//! `FilterPolicy::CreateFromString` is given back on reopen, so [`Spec`] parses every name it
//! prints (`Display`) to the same value (`f64`s print in their shortest round-trip form):
//!
//! | name | filters |
//! |---|---|
//! | `lsm_bloom.blocked:10` | lsm-bloom blocked Bloom at 10 bits/key (also `standard`, `ribbon`) |
//! | `lsm_bloom.ribbon:fpr:0.0095` | lsm-bloom Ribbon sized for a 0.95% false-positive rate |
//! | `lsm_bloom.budget:blocked:10` | lsm-bloom blocked, bits/key per level from a 10 bits/key average (Monkey) |
//! | `lsm_bloom.builtin_budget:bloom:10` | RocksDB's own Bloom (or `ribbon`), bits/key per level from the same plan |
//!
//! The two budgets plan differently. `lsm_bloom.budget` sees every filter block it builds and
//! every table RocksDB opens with one, so it plans on the live tables (`shape.rs`). RocksDB's
//! own filters pass through no lsm-bloom code once built, so `lsm_bloom.builtin_budget` plans
//! on a model of RocksDB's leveled shape ([`plan_bits`]): levels from the base level (the
//! shallowest level a file has been written to below L0; RocksDB's
//! `level_compaction_dynamic_level_bytes`, on by default, fills levels from the bottom up)
//! down to the last, each [`SIZE_RATIO`] times the one above (`max_bytes_for_level_multiplier`
//! default), and [`L0_RUNS`] level-0 files of [`L0_FILE_SHARE`] of the base level each (four
//! 64 MiB memtables make the 256 MiB `max_bytes_for_level_base`). Both spread
//! `average × keys` bits over their runs with `filter::budget::allocate_runs`; each file gets
//! its run's bits/key. Files of unknown level (`level_at_creation = -1`: `SstFileWriter`,
//! ingestion) and stores not using leveled compaction get the average.

use std::fmt;

use crate::filter::{budget, FilterKind, FilterPolicy};

/// Every name starts with this (RocksDB's object library looks the factory up by it).
pub const PREFIX: &str = "lsm_bloom.";

/// Size ratio between adjacent levels that the budget plan assumes.
pub const SIZE_RATIO: f64 = 10.0;
/// Level-0 files the plan provides for (RocksDB's default trigger is 4; on average fewer are
/// live, as our own store's budget plans `l0_compaction_trigger - 1`).
pub const L0_RUNS: usize = 3;
/// Size of one level-0 file relative to the base level.
pub const L0_FILE_SHARE: f64 = 0.25;

/// RocksDB's built-in filter families (their bits/key are Bloom-equivalent: RocksDB's Ribbon
/// at `b` gives the false-positive rate of its Bloom at `b`, in ~30% less memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// `NewBloomFilterPolicy` (cache-local Bloom, format_version ≥ 5).
    Bloom,
    /// `NewRibbonFilterPolicy` (Standard128 Ribbon).
    Ribbon,
}

impl Builtin {
    /// Name in a spec.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Bloom => "bloom",
            Builtin::Ribbon => "ribbon",
        }
    }
}

/// A parsed policy name.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Spec {
    /// One lsm-bloom filter policy for every file.
    Uniform(FilterPolicy),
    /// lsm-bloom filters of `kind`, bits/key per level planned from an average.
    Budget {
        /// Filter kind at every level.
        kind: FilterKind,
        /// Average bits/key over the modelled tree.
        average_bits: f64,
    },
    /// RocksDB's own filters, bits/key per level planned from an average.
    BuiltinBudget {
        /// RocksDB's Bloom or Ribbon.
        builtin: Builtin,
        /// Average (Bloom-equivalent) bits/key over the modelled tree.
        average_bits: f64,
    },
}

/// What a policy is told about the file being written (RocksDB's `FilterBuildingContext`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileContext {
    /// `level_at_creation` (-1 when unknown).
    pub level: i32,
    /// `is_bottommost`.
    pub bottommost: bool,
    /// `num_levels` (-1 when unknown).
    pub num_levels: i32,
    /// `compaction_style == kCompactionStyleLevel`.
    pub leveled: bool,
}

fn usage(name: &str) -> String {
    format!(
        "filter policy {name:?}: expected lsm_bloom.KIND:BITS, lsm_bloom.KIND:fpr:RATE, \
         lsm_bloom.budget:KIND:BITS or lsm_bloom.builtin_budget:bloom|ribbon:BITS"
    )
}

fn bits(s: &str, what: &str) -> Result<f64, String> {
    let b: f64 = s
        .parse()
        .map_err(|_| format!("{what}: expected a number, got {s:?}"))?;
    if !(b.is_finite() && b > 0.0 && b <= 1000.0) {
        return Err(format!("{what} must be in (0, 1000], got {s}"));
    }
    Ok(b)
}

impl std::str::FromStr for Spec {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        let rest = name
            .strip_prefix(PREFIX)
            .ok_or_else(|| format!("filter policy {name:?} does not start with {PREFIX:?}"))?;
        let parts: Vec<&str> = rest.split(':').collect();
        let kind = |s: &str| s.parse::<FilterKind>().map_err(|e| e.to_string());
        let spec = match parts.as_slice() {
            ["budget", k, avg] => Spec::Budget {
                kind: kind(k)?,
                average_bits: bits(avg, "average bits per key")?,
            },
            ["builtin_budget", b, avg] => Spec::BuiltinBudget {
                builtin: match *b {
                    "bloom" => Builtin::Bloom,
                    "ribbon" => Builtin::Ribbon,
                    other => {
                        return Err(format!(
                            "unknown RocksDB filter {other:?} (expected \"bloom\" or \"ribbon\")"
                        ))
                    }
                },
                average_bits: bits(avg, "average bits per key")?,
            },
            ["budget" | "builtin_budget", ..] => return Err(usage(name)),
            [k, "fpr", p] => {
                let p: f64 = p
                    .parse()
                    .map_err(|_| format!("false-positive rate: expected a number, got {p:?}"))?;
                Spec::Uniform(FilterPolicy::target_fpr(kind(k)?, p))
            }
            [k, b] => Spec::Uniform(FilterPolicy::bits_per_key(
                kind(k)?,
                bits(b, "bits per key")?,
            )),
            _ => return Err(usage(name)),
        };
        if let Spec::Uniform(p) = spec {
            p.validate()
                .map_err(|e| format!("filter policy {name:?}: {e}"))?;
        }
        Ok(spec)
    }
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Spec::Uniform(p) => match p.sizing {
                crate::filter::Sizing::BitsPerKey(b) => write!(f, "{PREFIX}{}:{b}", p.kind),
                crate::filter::Sizing::TargetFpr(r) => write!(f, "{PREFIX}{}:fpr:{r}", p.kind),
            },
            Spec::Budget { kind, average_bits } => {
                write!(f, "{PREFIX}budget:{kind}:{average_bits}")
            }
            Spec::BuiltinBudget {
                builtin,
                average_bits,
            } => write!(
                f,
                "{PREFIX}builtin_budget:{}:{average_bits}",
                builtin.name()
            ),
        }
    }
}

/// Bits/key for a file written at `ctx` under a budget of `average_bits` on `kind`'s curve,
/// given the shallowest level below L0 written so far (`base_level`; see the module docs).
pub fn plan_bits(kind: FilterKind, average_bits: f64, ctx: FileContext, base_level: i32) -> f64 {
    if !ctx.leveled || ctx.level < 0 || ctx.num_levels < 2 {
        return average_bits;
    }
    let last = ctx.num_levels - 1;
    let base = base_level.clamp(1, last);
    // Runs: L0_RUNS level-0 files, then levels base..=last growing by SIZE_RATIO. Keys are
    // relative (base level = 1 << 20) so the bisection works on sizeable integers.
    let unit = f64::from(1u32 << 20);
    let mut runs: Vec<(FilterKind, u64)> = vec![(kind, (unit * L0_FILE_SHARE) as u64); L0_RUNS];
    for l in base..=last {
        runs.push((kind, (unit * SIZE_RATIO.powi(l - base)) as u64));
    }
    let total: f64 = runs.iter().map(|&(_, n)| n as f64).sum();
    let plan = budget::allocate_runs(&runs, average_bits * total);
    let index = match ctx.level {
        0 => 0,
        // A bottommost file, or one below the modelled levels, takes the last level's bits;
        // one above the base level (the base moved up since) the base level's.
        l if ctx.bottommost || l >= last => runs.len() - 1,
        l => L0_RUNS + (l.max(base) - base) as usize,
    };
    plan.get(index).copied().unwrap_or(average_bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in [
            "lsm_bloom.blocked:10",
            "lsm_bloom.standard:9.5",
            "lsm_bloom.ribbon:7.25",
            "lsm_bloom.ribbon:fpr:0.0095",
            "lsm_bloom.budget:blocked:10",
            "lsm_bloom.budget:ribbon:6.5",
            "lsm_bloom.builtin_budget:bloom:10",
            "lsm_bloom.builtin_budget:ribbon:8",
        ] {
            let spec: Spec = name.parse().unwrap();
            assert_eq!(spec.to_string(), name);
            assert_eq!(spec.to_string().parse::<Spec>().unwrap(), spec);
        }
        let odd = Spec::Uniform(FilterPolicy::bits_per_key(FilterKind::Blocked, 0.1 + 0.2));
        assert_eq!(odd.to_string().parse::<Spec>().unwrap(), odd);
    }

    #[test]
    fn bad_names_say_what_is_wrong() {
        for (name, says) in [
            ("bloomfilter:10", "does not start with"),
            ("lsm_bloom.xor:10", "unknown filter kind"),
            ("lsm_bloom.blocked:ten", "expected a number"),
            ("lsm_bloom.blocked:0", "must be in (0, 1000]"),
            (
                "lsm_bloom.blocked:fpr:1.5",
                "false-positive rate must be in (0, 1)",
            ),
            ("lsm_bloom.budget:blocked", "expected lsm_bloom.KIND:BITS"),
            (
                "lsm_bloom.builtin_budget:cuckoo:10",
                "unknown RocksDB filter",
            ),
        ] {
            let e = name.parse::<Spec>().unwrap_err();
            assert!(e.contains(says), "{name}: {e}");
        }
    }

    fn ctx(level: i32, bottommost: bool) -> FileContext {
        FileContext {
            level,
            bottommost,
            num_levels: 7,
            leveled: true,
        }
    }

    #[test]
    fn plan_gives_young_runs_more_bits_and_keeps_the_average() {
        let kind = FilterKind::Blocked;
        for base in [6, 4, 1] {
            let l0 = plan_bits(kind, 10.0, ctx(0, false), base);
            let bottom = plan_bits(kind, 10.0, ctx(6, true), base);
            assert!(
                l0 > 10.0 && bottom < 10.0,
                "base {base}: L0 {l0}, bottom {bottom}"
            );
            // The modelled memory equals the average.
            let mut keys = vec![L0_FILE_SHARE; L0_RUNS];
            let mut spent: f64 = keys.iter().map(|k| k * l0).sum();
            for l in base..=6 {
                let n = SIZE_RATIO.powi(l - base);
                keys.push(n);
                spent += n * plan_bits(kind, 10.0, ctx(l, l == 6), base);
            }
            let avg = spent / keys.iter().sum::<f64>();
            assert!((9.5..=10.0).contains(&avg), "base {base}: average {avg}");
        }
    }

    #[test]
    fn unknown_levels_and_other_styles_get_the_average() {
        let k = FilterKind::Ribbon;
        assert_eq!(plan_bits(k, 8.0, ctx(-1, false), 6), 8.0);
        let universal = FileContext {
            leveled: false,
            ..ctx(0, false)
        };
        assert_eq!(plan_bits(k, 8.0, universal, 6), 8.0);
    }
}
