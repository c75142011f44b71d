//! The options record (`OPTIONS`, FORMAT.md §6): the settings that decide how the store's
//! files are written and read — the filter choice (one policy, per-level overrides or a
//! budget), the prefix rule with whole-key filtering, the range filter policy and the
//! compression per level — kept in the directory, so that a
//! reopen that does not repeat them goes on writing tables the same way instead of silently
//! falling back to the defaults.
//!
//! Use (`recovery.rs`): `read` at open, before anything in the directory changes (a damaged
//! record refuses the open and nothing is deleted); `resolve` merges the record with the
//! `Options` passed, setting by setting — one not given (`None`) takes the recorded value,
//! one given replaces it — and says what it kept and changed (`Db::recovery().options`); a
//! recorded setting that cannot go with the options given gives way to the default, alone;
//! `write` stores the result, atomically like the manifest, when it differs from the record.
//!
//! The budget's planning inputs (`memtable_size`, `l0_compaction_trigger`) are recorded as the
//! last open ran with them, for tools (`dump_filter DIR` plans the budget from them); they
//! are tuning, not layout, and a reopen never takes them from the record.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::budget::FilterBudget;
use super::filters::{Compressions, Filters, PrefixFilters, RangeFilters};
use super::options::Options;
use super::report::{OptionChange, OptionsReport};
use super::version::MAX_LEVELS;
use crate::error::{Error, Result};
use crate::filter::{FilterPolicy, RangePolicy};
use crate::framed::Framed;
use crate::fs::FileSystem;
use crate::prefix::PrefixExtractor;
use crate::table::Compression;
pub use keyspaces::KeyspaceRecord;
use text::range_text;
use versions::{
    StoredOptionsV1, StoredOptionsV2, StoredOptionsV3, StoredOptionsV4, StoredOptionsV5,
};

const MAGIC: [u8; 4] = *b"LBOP";
/// Options record version this build writes (5: keyspaces' own settings; 6: with a default
/// time to live); it reads 1 to 6.
pub const OPTIONS_VERSION: u32 = 6;
/// File name of the options record.
pub const OPTIONS_FILE: &str = "OPTIONS";
const TEMP_FILE: &str = "OPTIONS.tmp";

/// `Options::filters` as recorded (FORMAT.md §6): a policy with per-level overrides, or a
/// budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilterChoice {
    /// The fixed policy (`Filters::Fixed`; `None`: no filters).
    pub policy: Option<FilterPolicy>,
    /// Its per-level overrides.
    pub per_level: BTreeMap<usize, Option<FilterPolicy>>,
    /// The budget (`Filters::Budget`), which replaces the policy.
    pub budget: Option<FilterBudget>,
}

/// `Options::prefix_filters` as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrefixChoice {
    /// The prefix rule (`None`: no prefix filters).
    pub extractor: Option<PrefixExtractor>,
    /// Whole-key filters beside the prefix filters.
    pub whole_key_filtering: bool,
}

/// `Options::range_filters` as recorded (`None` in the record: no range filters).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum RangeChoice {
    /// `RangeFilters::On`: the policy's two numbers.
    Fixed {
        /// Bits per key.
        bits_per_key: f64,
        /// The longest range answered, in points.
        max_range: u64,
    },
    /// `RangeFilters::InBudget` (version 4).
    InBudget {
        /// The longest range answered, in points.
        max_range: u64,
    },
}

/// The record's content (FORMAT.md §6), version 5.
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
    pub compression: Compressions,
    /// The range filter setting (version 3, a fixed policy only; version 4, either; older
    /// records read as none).
    pub range: Option<RangeChoice>,
    /// The settings keyspaces were given of their own (`KeyspaceOptions`), by id ascending;
    /// a keyspace not listed has none (version 5; older records list none).
    pub keyspaces: Vec<KeyspaceRecord>,
}

impl From<&Filters> for FilterChoice {
    fn from(f: &Filters) -> Self {
        let (policy, per_level, budget) = match f {
            Filters::Budget(b) => (Some(FilterPolicy::default()), BTreeMap::new(), Some(*b)),
            Filters::Fixed { policy, per_level } => (Some(*policy), per_level.clone(), None),
            Filters::None => (None, BTreeMap::new(), None),
        };
        FilterChoice {
            policy,
            per_level,
            budget,
        }
    }
}

impl From<&FilterChoice> for Filters {
    fn from(c: &FilterChoice) -> Self {
        if let Some(b) = c.budget {
            return Filters::Budget(b);
        }
        match (c.policy, c.per_level.values().flatten().next()) {
            (Some(policy), _) => Filters::Fixed {
                policy,
                per_level: c.per_level.clone(),
            },
            (None, None) => Filters::None,
            // No filter but on some levels (a record of `Options` from before `Filters`):
            // the same, with every other level's "none" written out.
            (None, Some(&policy)) => Filters::Fixed {
                policy,
                per_level: (0..MAX_LEVELS)
                    .map(|l| (l, c.per_level.get(&l).copied().flatten()))
                    .collect(),
            },
        }
    }
}

impl From<PrefixFilters> for PrefixChoice {
    fn from(p: PrefixFilters) -> Self {
        PrefixChoice {
            extractor: p.rule(),
            whole_key_filtering: p.whole_key_filters(),
        }
    }
}

impl TryFrom<&PrefixChoice> for PrefixFilters {
    type Error = String;
    fn try_from(c: &PrefixChoice) -> std::result::Result<Self, String> {
        match (c.extractor, c.whole_key_filtering) {
            (None, true) => Ok(PrefixFilters::None),
            (None, false) => Err("no whole-key filters and no prefix rule".into()),
            (Some(rule), whole_key_filters) => Ok(PrefixFilters::On {
                rule,
                whole_key_filters,
            }),
        }
    }
}

impl From<RangeFilters> for Option<RangeChoice> {
    fn from(r: RangeFilters) -> Self {
        match r {
            RangeFilters::None => None,
            RangeFilters::On(p) => Some(RangeChoice::Fixed {
                bits_per_key: p.bits(),
                max_range: p.max_range(),
            }),
            RangeFilters::InBudget { max_range } => Some(RangeChoice::InBudget { max_range }),
        }
    }
}

/// The range filters a recorded choice stands for; `Err` when its numbers are no policy (a
/// budgeted length is checked with the rest of the options, `Options::validate`).
pub(crate) fn range_filters(c: Option<RangeChoice>) -> std::result::Result<RangeFilters, String> {
    match c {
        None => Ok(RangeFilters::None),
        Some(RangeChoice::Fixed {
            bits_per_key,
            max_range,
        }) => RangePolicy::bits_per_key(bits_per_key, max_range)
            .map(RangeFilters::On)
            .map_err(|e| e.to_string()),
        Some(RangeChoice::InBudget { max_range }) => Ok(RangeFilters::InBudget { max_range }),
    }
}

impl StoredOptions {
    /// What `opts` would store (a setting not given as its default), with no keyspace's own
    /// settings (the caller adds those: `keyspaces`).
    pub fn of(opts: &Options) -> Self {
        StoredOptions {
            filter: opts.filters().into(),
            prefix: opts.prefix_filters().into(),
            memtable_size: opts.memtable_size as u64,
            l0_compaction_trigger: opts.l0_compaction_trigger as u64,
            compression: opts.compressions().clone(),
            range: opts.range_filters().into(),
            keyspaces: Vec::new(),
        }
    }

    /// The recorded settings as `Options` take them; `Err` says what cannot be one.
    fn settings(&self) -> std::result::Result<Settings, String> {
        Ok(Settings {
            filters: (&self.filter).into(),
            prefix: PrefixFilters::try_from(&self.prefix)?,
            compression: self.compression.clone(),
            range: range_filters(self.range)?,
        })
    }

    /// The range filter setting, in words (for tools).
    pub fn range_text(&self) -> String {
        range_filters(self.range).map_or_else(|e| e, |r| range_text(&r))
    }
}

/// The recorded settings as `Options` take them.
struct Settings {
    filters: Filters,
    prefix: PrefixFilters,
    compression: Compressions,
    range: RangeFilters,
}

const FRAMED: Framed = Framed {
    magic: MAGIC,
    version: OPTIONS_VERSION,
    oldest: 1,
    what: "options record",
};

/// Version 4's framing, for records with no keyspace records.
const FRAMED_V4: Framed = Framed {
    version: 4,
    ..FRAMED
};

/// Version 5's framing, for records with no keyspace's default time to live.
const FRAMED_V5: Framed = Framed {
    version: 5,
    ..FRAMED
};

/// The record's bytes for `data`: the oldest version that holds it, so builds from before a
/// setting open a store that does not use it — version 4 when it lists no keyspace's own
/// settings, 5 when none of them is a default time to live, else 6.
pub fn encode(data: &StoredOptions) -> Result<Vec<u8>> {
    if data.keyspaces.is_empty() {
        return FRAMED_V4.encode(&StoredOptionsV4::of(data));
    }
    if data.keyspaces.iter().all(|k| k.default_ttl.is_none()) {
        return FRAMED_V5.encode(&StoredOptionsV5::of(data));
    }
    FRAMED.encode(data)
}

/// Decodes and checks a record (every check of FORMAT.md §6); `path` names it in errors.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<StoredOptions> {
    let data: StoredOptions = match FRAMED.open(path, bytes)? {
        (1, payload) => FRAMED.parse::<StoredOptionsV1>(path, payload)?.into(),
        (2, payload) => FRAMED.parse::<StoredOptionsV2>(path, payload)?.into(),
        (3, payload) => FRAMED.parse::<StoredOptionsV3>(path, payload)?.into(),
        (4, payload) => FRAMED.parse::<StoredOptionsV4>(path, payload)?.into(),
        (5, payload) => FRAMED.parse::<StoredOptionsV5>(path, payload)?.into(),
        (_, payload) => FRAMED.parse(path, payload)?,
    };
    keyspaces::check(&data.keyspaces).map_err(|e| {
        Error::corruption(
            path,
            format!("holds keyspace settings that are not valid: {e}"),
        )
    })?;
    // What it holds must be options this build accepts.
    let settings = data
        .settings()
        .map_err(|e| Error::corruption(path, format!("holds options that are not valid: {e}")))?;
    let check = Options::default()
        .with_filters(Some(settings.filters))
        .with_prefix_filters(Some(settings.prefix))
        .with_compression(Some(settings.compression))
        .with_range_filters(Some(settings.range));
    // A codec this build lacks (zstd without its feature) is not damage.
    let keyspace_codecs = data.keyspaces.iter().filter_map(|k| k.compression.as_ref());
    let lacking = std::iter::once(&data.compression)
        .chain(keyspace_codecs)
        .find_map(lacking_codec);
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

/// A codec of `c` that this build lacks (zstd without its feature), if any.
fn lacking_codec(c: &Compressions) -> Option<Compression> {
    c.per_level
        .values()
        .chain([&c.default])
        .find(|c| {
            matches!(c, Compression::Zstd(l) if (1..=22).contains(l)) && c.validate().is_err()
        })
        .copied()
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

/// The options to open with: each setting `given` leaves `None` takes the record's (module
/// comment), and what was kept and changed. Every setting is `Some` in the result.
pub fn resolve(given: Options, stored: Option<&StoredOptions>) -> (Options, OptionsReport) {
    let mut report = OptionsReport {
        record_found: stored.is_some(),
        ..OptionsReport::default()
    };
    let mut o = given;
    // A record whose settings cannot be options is refused by `decode`; one built here
    // always can.
    if let Some(recorded) = stored.and_then(|s| s.settings().ok()) {
        let text = |f: &Filters| FilterChoice::from(f).to_string();
        settle(
            "filter",
            &mut o,
            |o| &mut o.filters,
            recorded.filters,
            &text,
            &mut report,
        );
        let text = |p: &PrefixFilters| PrefixChoice::from(*p).to_string();
        settle(
            "prefix",
            &mut o,
            |o| &mut o.prefix_filters,
            recorded.prefix,
            &text,
            &mut report,
        );
        let text = |c: &Compressions| c.to_string();
        settle(
            "compression",
            &mut o,
            |o| &mut o.compression,
            recorded.compression,
            &text,
            &mut report,
        );
        settle(
            "range",
            &mut o,
            |o| &mut o.range_filters,
            recorded.range,
            &range_text,
            &mut report,
        );
    }
    o.filters = Some(o.filters().clone());
    o.prefix_filters = Some(o.prefix_filters());
    o.compression = Some(o.compressions().clone());
    o.range_filters = Some(o.range_filters());
    (o, report)
}

/// One setting of `resolve`: given, it replaces `recorded` (a change if it differs); not
/// given, it takes `recorded` when the options stay valid with it, and the default otherwise.
fn settle<T: Clone + PartialEq + Default>(
    setting: &str,
    o: &mut Options,
    field: impl Fn(&mut Options) -> &mut Option<T>,
    recorded: T,
    text: &dyn Fn(&T) -> String,
    report: &mut OptionsReport,
) {
    let change = |was: &T, now: String| OptionChange {
        setting: setting.into(),
        was: text(was),
        now,
    };
    if let Some(now) = field(o).clone() {
        if now != recorded {
            report.changed.push(change(&recorded, text(&now)));
        }
        return;
    }
    *field(o) = Some(recorded.clone());
    if o.validate().is_ok() {
        // Listed where it differs from what a new store would get.
        if recorded != T::default() {
            report.kept.push((setting.into(), text(&recorded)));
        }
        return;
    }
    *field(o) = None;
    if recorded != T::default() {
        let now = format!(
            "{} (the recorded setting cannot be combined with the options given)",
            text(&T::default())
        );
        report.changed.push(change(&recorded, now));
    }
}

mod keyspaces;
#[cfg(test)]
mod tests;
mod text;
mod versions;
