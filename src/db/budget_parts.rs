//! Each keyspace's filter budget: the part of the store's budget (`Options::filters`) a
//! keyspace following it gets (`budget::split`, weighted by its recent lookups,
//! `lookups.rs`), or the budget it was given of its own, planned apart; none with fixed
//! filters. Computed once per flush (for every keyspace it writes) and per compaction.

use super::budget::{self, FilterBudget, Member, Outlook};
use super::inner::Inner;
use super::keyspace::DEFAULT_KEYSPACE;
use super::lookups::{Weights, SLOTS};
use super::options::Options;
use super::state::Published;
use super::stats::KeyspaceStats;
use super::version::Version;

/// A keyspace as the split sees it.
pub(crate) struct Space<'a> {
    pub(crate) id: u32,
    pub(crate) version: &'a Version,
    pub(crate) opts: &'a Options,
    /// It follows the store's filter setting (`State::in_store_budget`).
    pub(crate) in_store_budget: bool,
    /// Keys about to be flushed to its level 0.
    pub(crate) pending: u64,
}

/// A keyspace's filter budget and what its plans expect of level 0.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Part {
    /// The budget its tables are planned with.
    pub(crate) budget: FilterBudget,
    /// Its share of the store's keys: what share of a flush (of every keyspace's memtable
    /// together) its level-0 tables are expected to hold, where it has none to go by.
    pub(super) flush_share: f64,
}

impl Part {
    /// What `opts`' plan of this keyspace expects (`budget::Outlook`): its memtable as its
    /// share of the store's, since all keyspaces' memtables are flushed together when their
    /// bytes together reach `memtable_size` (so eight keyspaces do not each reserve the filters
    /// of three whole memtables for their level 0).
    pub(crate) fn outlook(&self, opts: &Options) -> Outlook {
        let mut o = Outlook::of(opts);
        o.memtable_bytes = (o.memtable_bytes as f64 * self.flush_share) as u64;
        o
    }
}

/// The budget each of `spaces` plans its new tables with (in their order), the store's
/// options being `store` and the lookups per slot `slots`.
pub(crate) fn parts(
    store: &Options,
    spaces: &[Space<'_>],
    slots: &[f64; SLOTS],
) -> Vec<Option<Part>> {
    // Each space's keys, counted once (`Version::entries` walks every table).
    let keys: Vec<u64> = spaces
        .iter()
        .map(|s| s.version.entries() + s.pending)
        .collect();
    let all_keys: u64 = keys.iter().sum();
    let part = |i: usize, budget: Option<&FilterBudget>| {
        budget.map(|&budget| Part {
            budget,
            flush_share: match all_keys {
                0 => 1.0,
                n => keys[i] as f64 / n as f64,
            },
        })
    };
    let mut out: Vec<Option<Part>> = spaces
        .iter()
        .enumerate()
        .map(|(i, s)| part(i, s.opts.filters().budget()))
        .collect();
    let Some(shared) = store.filters().budget() else {
        return out;
    };
    let sharing: Vec<usize> = (0..spaces.len())
        .filter(|&i| spaces[i].in_store_budget)
        .collect();
    let sharing_keys: Vec<(u32, u64)> = sharing.iter().map(|&i| (spaces[i].id, keys[i])).collect();
    let lookups = Weights::of(slots, &sharing_keys);
    let members: Vec<Member> = sharing
        .iter()
        .zip(&lookups)
        .map(|(&i, &l)| {
            let s = &spaces[i];
            Member::of(shared, s.version, s.pending, l)
        })
        .collect();
    for (&i, budget) in sharing.iter().zip(budget::split(shared, &members)) {
        out[i] = part(i, Some(&budget));
    }
    out
}

impl Inner {
    /// `DbStats::keyspaces`.
    pub(super) fn keyspace_stats(&self) -> Vec<KeyspaceStats> {
        let names: Vec<(u32, String)> = {
            let work = super::locks::lock(&self.work);
            work.keyspaces
                .all()
                .map(|(id, n)| (id, n.to_string()))
                .collect()
        };
        let published = self.read_state();
        let slots = self.lookup_slots();
        let parts = self.budget_parts_with(&published, &[], &slots);
        let keys: Vec<(u32, u64)> = published
            .all()
            .map(|(id, s)| (id, s.version.entries()))
            .collect();
        let lookups = Weights::of(&slots, &keys);
        published
            .all()
            .zip(parts)
            .zip(lookups)
            .map(|(((id, s), (_, part)), recent_lookups)| {
                let tables = s.version.levels().iter().flatten();
                KeyspaceStats {
                    name: match id {
                        0 => DEFAULT_KEYSPACE.to_string(),
                        _ => names
                            .iter()
                            .find(|n| n.0 == id)
                            .map_or_else(String::new, |n| n.1.clone()),
                    },
                    id,
                    tables: tables.clone().count() as u64,
                    table_bytes: tables.clone().map(|t| t.file_size()).sum(),
                    entries: s.version.entries(),
                    filter_bytes: tables
                        .map(|t| {
                            t.filter_bytes() + t.prefix_filter_bytes() + t.range_filter_bytes()
                        })
                        .sum(),
                    recent_lookups,
                    filter_budget: part.map(|p| {
                        budget::plan(
                            &p.budget,
                            &s.version,
                            budget::Change::None,
                            p.outlook(&s.opts),
                        )
                        .allocation
                    }),
                }
            })
            .collect()
    }

    /// The lookups per slot, decayed, brought up to now.
    pub(super) fn lookup_slots(&self) -> [f64; SLOTS] {
        let counts = self.counters.keyspace_lookups();
        super::locks::lock(&self.lookup_weights).update(counts, std::time::Instant::now())
    }

    /// `parts` for every keyspace of `published`, with `pending` keys ((id, keys)) about to be
    /// flushed: (id, its budget).
    pub(super) fn budget_parts(
        &self,
        published: &Published,
        pending: &[(u32, u64)],
    ) -> Vec<(u32, Option<Part>)> {
        self.budget_parts_with(published, pending, &self.lookup_slots())
    }

    /// `budget_parts` under lookups per slot `slots`.
    fn budget_parts_with(
        &self,
        published: &Published,
        pending: &[(u32, u64)],
        slots: &[f64; SLOTS],
    ) -> Vec<(u32, Option<Part>)> {
        let spaces: Vec<Space<'_>> = published
            .all()
            .map(|(id, s)| Space {
                id,
                version: &s.version,
                opts: &s.opts,
                in_store_budget: s.in_store_budget,
                pending: pending.iter().find(|p| p.0 == id).map_or(0, |p| p.1),
            })
            .collect();
        let parts = parts(&self.opts, &spaces, slots);
        spaces.iter().map(|s| s.id).zip(parts).collect()
    }
}
