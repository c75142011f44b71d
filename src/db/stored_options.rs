//! The options record (`OPTIONS`, FORMAT.md §6): the settings that decide how the store's
//! files are written and read — the filter choice (one policy, per-level overrides or a
//! budget), the prefix rule with whole-key filtering, and the compression per level — kept in the directory, so that a
//! reopen that does not repeat them goes on writing tables the same way instead of silently
//! falling back to the defaults.
//!
//! Use (`recovery.rs`): `read` at open, before anything in the directory changes (a damaged
//! record refuses the open and nothing is deleted); `resolve` merges the record with the
//! `Options` passed, group by group — a group the caller left at its default takes the stored
//! value, a group set to anything else replaces it, and `OptionsRecord::Replace` takes every
//! group as given — and says what it kept and changed (`Db::recovery().options`); `write`
//! stores the result, atomically like the manifest, when it differs from the record.
//!
//! The budget's planning inputs (`memtable_size`, `l0_compaction_trigger`) are recorded as the
//! last open ran with them, for tools (`dump_filter DIR` plans the budget from them); they
//! are tuning, not layout, and a reopen never takes them from the record.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::budget::{FilterBudget, FilterMemory};
use super::options::{Options, OptionsRecord};
use super::report::{OptionChange, OptionsReport};
use crate::error::{Error, Result};
use crate::filter::{FilterPolicy, Sizing};
use crate::framed::Framed;
use crate::fs::FileSystem;
use crate::prefix::PrefixExtractor;
use crate::table::Compression;

const MAGIC: [u8; 4] = *b"LBOP";
/// Options record version this build writes (2: compression); it reads 1 and 2.
pub const OPTIONS_VERSION: u32 = 2;
/// File name of the options record.
pub const OPTIONS_FILE: &str = "OPTIONS";
const TEMP_FILE: &str = "OPTIONS.tmp";

/// Which filters new tables get (`Options::filter_policy`, `filter_policy_per_level`,
/// `filter_budget`): one setting, since the budget replaces the other two.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilterChoice {
    /// `Options::filter_policy`.
    pub policy: Option<FilterPolicy>,
    /// `Options::filter_policy_per_level`.
    pub per_level: BTreeMap<usize, Option<FilterPolicy>>,
    /// `Options::filter_budget`.
    pub budget: Option<FilterBudget>,
}

/// Which prefix filters new tables get (`Options::prefix_extractor`, `whole_key_filtering`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrefixChoice {
    /// `Options::prefix_extractor`.
    pub extractor: Option<PrefixExtractor>,
    /// `Options::whole_key_filtering`.
    pub whole_key_filtering: bool,
}

/// How new tables' data blocks are compressed (`Options::compression`,
/// `compression_per_level`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CompressionChoice {
    /// `Options::compression`.
    pub default: Compression,
    /// `Options::compression_per_level`.
    pub per_level: BTreeMap<usize, Compression>,
}

/// The record's content (FORMAT.md §6), version 2.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredOptions {
    /// The filter setting.
    pub filter: FilterChoice,
    /// The prefix setting.
    pub prefix: PrefixChoice,
    /// `Options::memtable_size` of the last open (a budget plans level 0 from it).
    pub memtable_size: u64,
    /// `Options::l0_compaction_trigger` of the last open.
    pub l0_compaction_trigger: u64,
    /// The compression setting (version 2; a version 1 record reads as none).
    pub compression: CompressionChoice,
}

/// Version 1 of the record: version 2 without the compression setting.
#[derive(Deserialize)]
struct StoredOptionsV1 {
    filter: FilterChoice,
    prefix: PrefixChoice,
    memtable_size: u64,
    l0_compaction_trigger: u64,
}

impl From<StoredOptionsV1> for StoredOptions {
    fn from(v1: StoredOptionsV1) -> Self {
        StoredOptions {
            filter: v1.filter,
            prefix: v1.prefix,
            memtable_size: v1.memtable_size,
            l0_compaction_trigger: v1.l0_compaction_trigger,
            compression: CompressionChoice::default(),
        }
    }
}

impl FilterChoice {
    fn of(o: &Options) -> Self {
        FilterChoice {
            policy: o.filter_policy,
            per_level: o.filter_policy_per_level.clone(),
            budget: o.budget_in_effect().copied(),
        }
    }

    fn apply(&self, o: &mut Options) {
        o.filter_policy = self.policy;
        o.filter_policy_per_level = self.per_level.clone();
        o.filter_budget = self.budget;
    }
}

impl PrefixChoice {
    fn of(o: &Options) -> Self {
        PrefixChoice {
            extractor: o.prefix_extractor,
            whole_key_filtering: o.whole_key_filtering,
        }
    }

    fn apply(&self, o: &mut Options) {
        o.prefix_extractor = self.extractor;
        o.whole_key_filtering = self.whole_key_filtering;
    }
}

impl CompressionChoice {
    fn of(o: &Options) -> Self {
        CompressionChoice {
            default: o.compression,
            per_level: o.compression_per_level.clone(),
        }
    }

    fn apply(&self, o: &mut Options) {
        o.compression = self.default;
        o.compression_per_level = self.per_level.clone();
    }
}

impl fmt::Display for CompressionChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "compression {}", self.default)?;
        for (level, c) in &self.per_level {
            write!(f, "; level {level}: {c}")?;
        }
        Ok(())
    }
}

impl StoredOptions {
    /// What `opts` would store.
    pub fn of(opts: &Options) -> Self {
        StoredOptions {
            filter: FilterChoice::of(opts),
            prefix: PrefixChoice::of(opts),
            memtable_size: opts.memtable_size as u64,
            l0_compaction_trigger: opts.l0_compaction_trigger as u64,
            compression: CompressionChoice::of(opts),
        }
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

const FRAMED: Framed = Framed {
    magic: MAGIC,
    version: OPTIONS_VERSION,
    oldest: 1,
    what: "options record",
};

/// The record's bytes for `data`.
pub fn encode(data: &StoredOptions) -> Result<Vec<u8>> {
    FRAMED.encode(data)
}

/// Decodes and checks a record (every check of FORMAT.md §6); `path` names it in errors.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<StoredOptions> {
    let data: StoredOptions = match FRAMED.open(path, bytes)? {
        (1, payload) => FRAMED.parse::<StoredOptionsV1>(path, payload)?.into(),
        (_, payload) => FRAMED.parse(path, payload)?,
    };
    // What it holds must be options this build accepts.
    let mut check = Options::default();
    data.filter.apply(&mut check);
    data.prefix.apply(&mut check);
    data.compression.apply(&mut check);
    // A codec this build lacks (zstd without its feature) is not damage.
    let codecs = data.compression.per_level.values();
    let lacking = codecs.chain([&data.compression.default]).find(|c| {
        matches!(c, Compression::Zstd(l) if (1..=22).contains(l)) && c.validate().is_err()
    });
    if let Some(c) = lacking {
        let reason = c.validate().err().unwrap_or_default();
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            reason: format!("the store's tables are written with {c}: {reason}"),
        });
    }
    check
        .validate()
        .map_err(|e| Error::corruption(path, format!("holds options that are not valid: {e}")))?;
    Ok(data)
}

/// Reads the record in `dir`: `None` when there is none (a new store, or one written before
/// records existed).
pub fn read_in(fs: &dyn FileSystem, dir: &Path) -> Result<Option<StoredOptions>> {
    let path = dir.join(OPTIONS_FILE);
    match fs.read_all(&path) {
        Ok(bytes) => decode(&path, &bytes).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("reading {}", path.display()), e)),
    }
}

/// Where `write` puts the record before renaming it (a leftover one is removed at open).
pub fn temp_path(dir: &Path) -> std::path::PathBuf {
    dir.join(TEMP_FILE)
}

/// Writes `data` as the record, atomically (temporary file, sync, rename, directory sync).
pub fn write(fs: &dyn FileSystem, dir: &Path, data: &StoredOptions) -> Result<()> {
    crate::fs::write_atomic(fs, dir, TEMP_FILE, OPTIONS_FILE, &encode(data)?)
}

/// The options to open with: `given` merged with the record `stored` by `given.options_record`
/// (module comment), and what was kept and changed. `filter_budget` comes back as the budget
/// in effect (`Options::budget_in_effect`): `None` where a fixed policy applies.
pub fn resolve(given: Options, stored: Option<&StoredOptions>) -> (Options, OptionsReport) {
    let (mut opts, report) = merge(given, stored);
    opts.filter_budget = opts.budget_in_effect().copied();
    (opts, report)
}

fn merge(given: Options, stored: Option<&StoredOptions>) -> (Options, OptionsReport) {
    let mut report = OptionsReport {
        record_found: stored.is_some(),
        ..OptionsReport::default()
    };
    let Some(stored) = stored else {
        return (given, report);
    };
    let defaults = Options::default();
    let replace = given.options_record == OptionsRecord::Replace;
    let (filter, prefix) = (FilterChoice::of(&given), PrefixChoice::of(&given));
    let compression = CompressionChoice::of(&given);
    // Which settings come from the record: those the caller left at their defaults.
    let keep_filter = !replace && filter == FilterChoice::of(&defaults);
    let keep_prefix = !replace && prefix == PrefixChoice::of(&defaults);
    let keep_compression = !replace && compression == CompressionChoice::of(&defaults);
    let merged = |keep: [bool; 3]| {
        let mut o = given.clone();
        if keep[0] {
            stored.filter.apply(&mut o);
        }
        if keep[1] {
            stored.prefix.apply(&mut o);
        }
        if keep[2] {
            stored.compression.apply(&mut o);
        }
        o
    };
    // Recorded settings that cannot go with the options given (recorded LZ4 beside a
    // `table_format_version` of 2 given now) give way to them: that is the caller's latest
    // word. The options given alone must then be valid, or the open refuses them.
    let would_keep = [keep_filter, keep_prefix, keep_compression];
    let gave_way = would_keep.contains(&true) && merged(would_keep).validate().is_err();
    let keep = if gave_way { [false; 3] } else { would_keep };
    for (i, (setting, was, now)) in [
        ("filter", stored.filter.to_string(), filter.to_string()),
        ("prefix", stored.prefix.to_string(), prefix.to_string()),
        (
            "compression",
            stored.compression.to_string(),
            compression.to_string(),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        if was == now {
            continue;
        }
        let (kept, now) = match (keep[i], gave_way && would_keep[i]) {
            (false, true) => (
                false,
                format!("{now} (the recorded setting cannot be combined with the options given)"),
            ),
            (kept, _) => (kept, now),
        };
        if kept {
            report.kept.push((setting.into(), was));
        } else {
            report.changed.push(OptionChange {
                setting: setting.into(),
                was,
                now,
            });
        }
    }
    (merged(keep), report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::FilterKind;

    fn budget_store() -> Options {
        Options {
            filter_budget: Some(FilterBudget::bits_per_key(8.0)),
            ..Options::default()
        }
    }

    #[test]
    fn records_round_trip_and_every_damage_is_refused() {
        let mut o = Options {
            filter_policy: Some(FilterPolicy::bits_per_key(FilterKind::Ribbon, 7.5)),
            prefix_extractor: Some(PrefixExtractor::delimiter(b':', 2)),
            whole_key_filtering: false,
            ..Options::default()
        };
        o.filter_policy_per_level.insert(0, None);
        let data = StoredOptions::of(&o);
        let bytes = encode(&data).unwrap();
        let path = Path::new("OPTIONS");
        assert_eq!(decode(path, &bytes).unwrap(), data);
        for i in 0..bytes.len() {
            for bit in [0x01u8, 0x80] {
                let mut b = bytes.clone();
                b[i] ^= bit;
                assert!(decode(path, &b).is_err(), "flip at {i} accepted");
            }
        }
        for len in 0..bytes.len() {
            assert!(
                decode(path, &bytes[..len]).is_err(),
                "cut at {len} accepted"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(path, &longer).is_err());
    }

    #[test]
    fn a_record_holding_invalid_options_is_refused_naming_them() {
        let o = Options {
            filter_policy: Some(FilterPolicy::bits_per_key(FilterKind::Blocked, -3.0)),
            ..Options::default()
        };
        let bytes = encode(&StoredOptions::of(&o)).unwrap();
        let e = decode(Path::new("d/OPTIONS"), &bytes)
            .unwrap_err()
            .to_string();
        assert!(e.contains("d/OPTIONS") && e.contains("not valid"), "{e}");
    }

    #[test]
    fn defaults_take_the_record_and_anything_else_replaces_it() {
        let stored = StoredOptions::of(&budget_store());
        // Nothing given: the budget is kept and reported.
        let (o, r) = resolve(Options::default(), Some(&stored));
        assert_eq!(o.filter_budget, Some(FilterBudget::bits_per_key(8.0)));
        assert!(r.record_found && r.changed.is_empty());
        assert_eq!(r.kept.len(), 1);
        assert!(r.kept[0].1.contains("budget of 8 bits/key"), "{:?}", r.kept);
        // A different filter: applied and reported as a change.
        let given = Options {
            filter_policy: Some(FilterPolicy::bits_per_key(FilterKind::Standard, 12.0)),
            ..Options::default()
        };
        let (o, r) = resolve(given, Some(&stored));
        assert_eq!(o.filter_budget, None);
        assert_eq!(r.changed.len(), 1);
        assert!(
            r.changed[0].now.contains("standard Bloom 12 bits/key"),
            "{:?}",
            r.changed
        );
        // Back to the defaults on purpose.
        let given = Options {
            options_record: OptionsRecord::Replace,
            ..Options::default()
        };
        let (o, r) = resolve(given, Some(&stored));
        assert_eq!(o.filter_budget, Some(FilterBudget::default()));
        assert_eq!(r.changed.len(), 1);
        // The same options again: nothing to report.
        let (_, r) = resolve(budget_store(), Some(&stored));
        assert!(r.kept.is_empty() && r.changed.is_empty());
        // A recorded prefix rule goes beside a budget given now: the budget plans both.
        let prefixed = StoredOptions::of(&Options {
            prefix_extractor: Some(PrefixExtractor::fixed(3)),
            ..Options::default()
        });
        let (o, r) = resolve(budget_store(), Some(&prefixed));
        assert!(o.validate().is_ok());
        assert_eq!(o.filter_budget, Some(FilterBudget::bits_per_key(8.0)));
        assert_eq!(o.prefix_extractor, Some(PrefixExtractor::fixed(3)));
        assert_eq!(r.kept.len(), 1, "{r:?}");
        assert_eq!(r.changed.len(), 1, "{r:?}");
        // Recorded LZ4 cannot go beside table format 2 given now: it gives way, and its
        // removal is reported, saying why.
        let lz4 = StoredOptions::of(&Options {
            compression: Compression::Lz4,
            ..Options::default()
        });
        let v2 = Options {
            table_format_version: 2,
            ..Options::default()
        };
        let (o, r) = resolve(v2, Some(&lz4));
        assert!(o.validate().is_ok());
        assert_eq!(o.compression, Compression::None);
        assert!(r.kept.is_empty(), "{r:?}");
        assert_eq!(r.changed.len(), 1, "{r:?}");
        assert!(r.changed[0].now.contains("cannot be combined"), "{r:?}");
        // So does a recorded prefix rule beside table format 1, which cannot hold one.
        let v1 = Options {
            table_format_version: 1,
            ..Options::default()
        };
        // Without the prefix rule, the default budget no longer gives way to it (the recorded
        // fixed policy was there only because of the rule), and that is reported too.
        let (o, r) = resolve(v1, Some(&prefixed));
        assert!(o.validate().is_ok());
        assert_eq!(o.prefix_extractor, None);
        assert_eq!(o.filter_budget, Some(FilterBudget::default()));
        let settings: Vec<&str> = r.changed.iter().map(|c| c.setting.as_str()).collect();
        assert_eq!(settings, ["filter", "prefix"], "{r:?}");
        assert!(r.changed[1].now.contains("cannot be combined"), "{r:?}");
        // No record: as given.
        let (o, r) = resolve(Options::default(), None);
        assert!(!r.record_found && o.filter_budget == Some(FilterBudget::default()));
    }

    #[test]
    fn the_default_budget_gives_way_to_a_fixed_policy_given_and_to_a_recorded_one() {
        let ribbon = Some(FilterPolicy::bits_per_key(FilterKind::Ribbon, 7.0));
        // A policy other than the default, `None` included, or a per-level override: fixed.
        for given in [
            Options {
                filter_policy: ribbon,
                ..Options::default()
            },
            Options {
                filter_policy: None,
                ..Options::default()
            },
            Options {
                filter_policy_per_level: [(2, None)].into(),
                ..Options::default()
            },
            Options {
                prefix_extractor: Some(PrefixExtractor::fixed(3)),
                ..Options::default()
            },
        ] {
            assert!(given.validate().is_ok());
            assert_eq!(given.budget_in_effect(), None);
            let (o, _) = resolve(given.clone(), None);
            assert_eq!(o.filter_budget, None);
            assert_eq!(StoredOptions::of(&given).filter.budget, None);
        }
        // A budget given on purpose replaces the policy, and cannot go with per-level ones.
        let mine = FilterBudget::bits_per_key(12.0);
        let both = Options {
            filter_policy: ribbon,
            filter_budget: Some(mine),
            ..Options::default()
        };
        assert_eq!(both.budget_in_effect(), Some(&mine));
        let bad = Options {
            filter_policy_per_level: [(2, None)].into(),
            filter_budget: Some(mine),
            ..Options::default()
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("filter_policy_per_level"), "{e}");
        // A store recorded before the budget was the default (the fixed default policy, no
        // budget) keeps its fixed policy when reopened with the defaults.
        let old = StoredOptions::of(&Options {
            filter_budget: None,
            ..Options::default()
        });
        assert_eq!(old.filter.budget, None);
        let (o, r) = resolve(Options::default(), Some(&old));
        assert_eq!(o.filter_budget, None);
        assert_eq!(o.filter_policy, Some(FilterPolicy::default()));
        assert_eq!(r.kept.len(), 1, "{r:?}");
        assert!(r.kept[0].1.contains("blocked Bloom 10 bits/key"), "{r:?}");
        // The default now recorded reads back as the budget.
        let new = StoredOptions::of(&Options::default());
        let (o, r) = resolve(Options::default(), Some(&new));
        assert_eq!(o.filter_budget, Some(FilterBudget::default()));
        assert!(r.kept.is_empty() && r.changed.is_empty(), "{r:?}");
    }
}
