//! The options record's settings in words (`Db::recovery().options`, `dump_filter`).

use std::fmt;

use super::{Compressions, FilterChoice, PrefixChoice};
use crate::db::budget::FilterMemory;
use crate::db::filters::RangeFilters;
use crate::filter::{FilterPolicy, Sizing};
use crate::prefix::PrefixExtractor;

/// A range filter setting in words.
pub(super) fn range_text(r: &RangeFilters) -> String {
    match r {
        RangeFilters::None => "no range filters".into(),
        RangeFilters::On(p) => format!(
            "range filters of {} bits/key for ranges up to {} points",
            p.bits(),
            p.max_range()
        ),
        RangeFilters::InBudget { max_range } => {
            format!("range filters sized by the filter budget for ranges up to {max_range} points")
        }
    }
}

impl fmt::Display for Compressions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "compression {}", self.default)?;
        for (level, c) in &self.per_level {
            write!(f, "; level {level}: {c}")?;
        }
        Ok(())
    }
}

fn policy_text(p: Option<FilterPolicy>) -> String {
    match p {
        None => "no filter".into(),
        Some(p) => {
            let size = match p.sizing {
                Sizing::BitsPerKey(b) => format!("{b} bits/key"),
                Sizing::TargetFpr(r) => format!("target false-positive rate {r}"),
            };
            let probes = p
                .num_probes
                .map_or(String::new(), |k| format!(", {k} probes"));
            format!("{} Bloom {size}{probes}", p.kind.name()).replace("ribbon Bloom", "Ribbon")
        }
    }
}

impl fmt::Display for FilterChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(b) = &self.budget {
            let memory = match b.memory {
                FilterMemory::BitsPerKey(bits) => format!("{bits} bits/key on average"),
                FilterMemory::TotalBytes(n) => format!("{n} bytes in all"),
            };
            return write!(
                f,
                "a filter budget of {memory} ({} above the largest level, {} on it)",
                b.upper_kind.name(),
                b.last_level_kind.name()
            );
        }
        write!(f, "{}", policy_text(self.policy))?;
        for (level, p) in &self.per_level {
            write!(f, "; level {level}: {}", policy_text(*p))?;
        }
        Ok(())
    }
}

impl fmt::Display for PrefixChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.extractor {
            None => write!(f, "no prefix filters"),
            Some(rule) => {
                let rule = match rule {
                    PrefixExtractor::Fixed { len } => format!("the first {len} bytes"),
                    PrefixExtractor::Delimiter { byte, count } => format!(
                        "up to occurrence {count} of {:?}",
                        char::from(byte).escape_default().to_string()
                    ),
                };
                let whole = if self.whole_key_filtering {
                    "beside whole-key filters"
                } else {
                    "instead of whole-key filters"
                };
                write!(f, "prefix filters on {rule}, {whole}")
            }
        }
    }
}
