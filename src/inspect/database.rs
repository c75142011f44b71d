//! A database directory as `dump_filter DIR` shows it: every live table the manifest lists,
//! per level, with totals (the default keyspace's, then each other keyspace's), the options
//! record in words, and, with a filter budget (given as arguments or recorded), the
//! allocation the store would make for the current shape: with keyspaces, each keyspace's
//! part of the budget and its allocation, split as the store splits it at open (no lookups
//! seen: a directory keeps no lookup counts, so the parts follow the keyspaces' keys alone).

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use super::{TableReport, Totals};
use crate::db::budget::{self, Allocation, Change, FilterBudget, Outlook};
use crate::db::version::Version;
use crate::db::{budget_parts, lookups, manifest, stored_options};
use crate::error::{Error, Result};
use crate::fs::StdFs;
use crate::table::Table;

/// A database directory: every live table, per level, and totals.
#[derive(Clone, Debug, Serialize)]
pub struct DatabaseReport {
    /// Tables per level, level 0 first.
    pub levels: Vec<Vec<TableReport>>,
    /// Totals per level.
    pub level_totals: Vec<Totals>,
    /// Totals over all levels.
    pub totals: Totals,
    /// With a budget given (`dump_filter --budget-...`): the allocation the store would make
    /// for this shape now, per level, beside what the tables hold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_budget: Option<Allocation>,
    /// Where the budget came from: `"arguments"` (`dump_filter --budget-...`) or `"record"`
    /// (the store's options record, FORMAT.md §6).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_from: Option<&'static str>,
    /// The store's options record, in words: (filter setting, prefix setting, compression
    /// setting, range filter setting); none for a store written before records existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_options: Option<(String, String, String, String)>,
    /// Every keyspace besides the default (manifest version 2), by id; `levels`, `level_totals`
    /// and `totals` above are the default keyspace's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keyspaces: Vec<KeyspaceReport>,
}

/// One keyspace besides the default: its tables per level and totals.
#[derive(Clone, Debug, Serialize)]
pub struct KeyspaceReport {
    /// Its id in the store.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Tables per level, level 0 first.
    pub levels: Vec<Vec<TableReport>>,
    /// Totals per level.
    pub level_totals: Vec<Totals>,
    /// Totals over all its levels.
    pub totals: Totals,
    /// The settings of its own the options record holds, in words: (setting, value); empty
    /// when it follows the store's (FORMAT.md §6).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub own_settings: Vec<(String, String)>,
    /// With a budget: its part of it (or its own budget) and the allocation the store would
    /// make for its shape now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_budget: Option<Allocation>,
}

/// A table opened, with its level.
type Leveled = (usize, Arc<Table>);

/// The tables of keyspace `id` named `name` whose `levels` (from the manifest) `dir` holds:
/// their reports per level with totals, and the tables opened with their levels.
fn read_keyspace(
    dir: &Path,
    id: u32,
    name: &str,
    levels: &[Vec<manifest::TableMeta>],
) -> Result<(KeyspaceReport, Vec<Leveled>)> {
    let mut r = KeyspaceReport {
        id,
        name: name.to_string(),
        levels: Vec::new(),
        level_totals: Vec::new(),
        totals: Totals::default(),
        own_settings: Vec::new(),
        filter_budget: None,
    };
    let mut opened = Vec::new();
    for (level, metas) in levels.iter().enumerate() {
        let mut tables = Vec::new();
        let mut lt = Totals::default();
        for meta in metas {
            let t = Arc::new(Table::open(&crate::db::table_path(dir, meta.id), meta.id)?);
            opened.push((level, t.clone()));
            let tr = TableReport::new(&t, Some(level as u32));
            lt.add(&tr);
            r.totals.add(&tr);
            tables.push(tr);
        }
        r.levels.push(tables);
        r.level_totals.push(lt);
    }
    Ok((r, opened))
}

/// A filter budget and the options its plan depends on, for `inspect_path_with_budget` (given
/// here, they take the place of what the store's options record says).
#[derive(Clone, Copy, Debug)]
pub struct BudgetArgs {
    /// The budget.
    pub budget: FilterBudget,
    /// `Options::memtable_size` the store runs with.
    pub memtable_bytes: u64,
    /// `Options::l0_compaction_trigger` the store runs with.
    pub l0_compaction_trigger: usize,
}

/// Reads the store in `dir`: its manifest's tables, its options record, and with a budget (given
/// or recorded) the plan for its current shape.
pub(super) fn inspect(dir: &Path, filter_budget: Option<&BudgetArgs>) -> Result<DatabaseReport> {
    let data = manifest::read(dir)?.ok_or_else(|| Error::NotFound {
        path: dir.to_path_buf(),
    })?;
    let record = stored_options::read_in(&StdFs, dir)?;
    let recorded_budget = record.as_ref().and_then(|r| {
        r.filter.budget.map(|budget| BudgetArgs {
            budget,
            memtable_bytes: r.memtable_size,
            l0_compaction_trigger: usize::try_from(r.l0_compaction_trigger).unwrap_or(usize::MAX),
        })
    });
    let (filter_budget, budget_from) = match (filter_budget, &recorded_budget) {
        (Some(b), _) => (Some(b), Some("arguments")),
        (None, Some(b)) => (Some(b), Some("record")),
        (None, None) => (None, None),
    };
    let (default, opened) = read_keyspace(dir, 0, crate::DEFAULT_KEYSPACE, &data.levels)?;
    let mut keyspaces = Vec::new();
    let mut versions = vec![(0, version_of(opened))];
    for k in &data.keyspaces {
        let (mut report, opened) = read_keyspace(dir, k.id, &k.name, &k.levels)?;
        let own = record
            .as_ref()
            .and_then(|r| r.keyspaces.iter().find(|o| o.id == k.id));
        report.own_settings = own.map(|o| o.describe()).unwrap_or_default();
        keyspaces.push(report);
        versions.push((k.id, version_of(opened)));
    }
    let KeyspaceReport {
        levels,
        level_totals,
        totals,
        ..
    } = default;
    let mut split = match filter_budget {
        Some(b) if !keyspaces.is_empty() => split_budget(b, record.as_ref(), &versions),
        _ => Vec::new(),
    };
    for (k, a) in keyspaces.iter_mut().zip(split.iter_mut().skip(1)) {
        k.filter_budget = a.take();
    }
    let default_split = split.into_iter().next().flatten();
    let version = &versions[0].1;
    Ok(DatabaseReport {
        levels,
        level_totals,
        totals,
        filter_budget: default_split.or_else(|| {
            let b = filter_budget?;
            // Which filters tables get: the record's prefix and range settings, else
            // whole-key only.
            let prefix = record.as_ref().map(|r| &r.prefix);
            let outlook = Outlook {
                runs: b.l0_compaction_trigger.saturating_sub(1),
                memtable_bytes: b.memtable_bytes,
                key_filters: prefix.is_none_or(|p| p.whole_key_filtering),
                prefix_filters: prefix.is_some_and(|p| p.extractor.is_some()),
                // A record `decode` accepted holds a range setting that is one.
                range_filters: record
                    .as_ref()
                    .and_then(|r| stored_options::range_filters(r.range).ok())
                    .unwrap_or_default(),
            };
            Some(budget::plan(&b.budget, version, Change::None, outlook).allocation)
        }),
        budget_from,
        recorded_options: record.map(|r| {
            (
                r.filter.to_string(),
                r.prefix.to_string(),
                r.compression.to_string(),
                r.range_text(),
            )
        }),
        keyspaces,
    })
}

/// A version holding `opened` tables at their levels.
fn version_of(opened: Vec<Leveled>) -> Version {
    let mut version = Version::empty();
    version.edit(|levels| {
        for (level, t) in opened {
            if let Some(l) = levels.get_mut(level) {
                l.push(t);
            }
        }
    });
    version
}

/// Each keyspace's allocation (of `versions`, the default's first) under budget `b`: the
/// keyspaces following the store's filters share it, split as the store splits it at open
/// (`budget_parts::parts`, no lookups seen); one with a budget of its own plans with that;
/// one with fixed filters has none.
fn split_budget(
    b: &BudgetArgs,
    record: Option<&stored_options::StoredOptions>,
    versions: &[(u32, Version)],
) -> Vec<Option<Allocation>> {
    let store = stored_options::resolve(crate::Options::default(), record)
        .0
        .with_filters(Some(crate::Filters::Budget(b.budget)))
        .with_memtable_size(usize::try_from(b.memtable_bytes).unwrap_or(usize::MAX))
        .with_l0_compaction_trigger(b.l0_compaction_trigger);
    let own = |id: u32| {
        record
            .and_then(|r| r.keyspaces.iter().find(|o| o.id == id))
            .and_then(|o| o.options().ok())
    };
    let opts: Vec<(crate::Options, bool)> = versions
        .iter()
        .map(|(id, _)| match own(*id) {
            Some(k) => (
                k.apply(&store).unwrap_or_else(|_| store.clone()),
                k.follows_store_filters(),
            ),
            None => (store.clone(), true),
        })
        .collect();
    let spaces: Vec<budget_parts::Space<'_>> = versions
        .iter()
        .zip(&opts)
        .map(|((id, version), (opts, follows))| budget_parts::Space {
            id: *id,
            version,
            opts,
            in_store_budget: *follows,
            pending: 0,
        })
        .collect();
    budget_parts::parts(&store, &spaces, &[0.0; lookups::SLOTS])
        .into_iter()
        .zip(&spaces)
        .map(|(part, s)| {
            let p = part?;
            Some(budget::plan(&p.budget, s.version, Change::None, p.outlook(s.opts)).allocation)
        })
        .collect()
}
