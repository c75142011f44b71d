//! The registry of keyspaces the manifest lists (FORMAT.md §4): each live keyspace's id and
//! name besides the default, and the id the next one gets; and the settings of their own the
//! options record lists (FORMAT.md §6). Held in `Work`, under the work lock every manifest
//! write takes; changed by `keyspaces.rs`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::keyspace_options::KeyspaceOptions;
use super::manifest::ManifestData;
use super::options::Options;
use super::report::OptionChange;
use super::stored_options::{KeyspaceRecord, StoredOptions};

/// The live keyspaces other than the default, and the id the next one gets.
#[derive(Clone, Debug)]
pub(super) struct Registry {
    /// (id, name), by id ascending.
    pub(super) names: Vec<(u32, String)>,
    /// The id the next keyspace created gets.
    pub(super) next_id: u32,
    /// The settings keyspaces were given of their own (`Db::create_keyspace`); one not
    /// listed follows the store's.
    pub(super) own: BTreeMap<u32, KeyspaceOptions>,
    /// The logs may hold puts with an expiry (manifest version 3, FORMAT.md §4): set before the
    /// first such put is logged, and kept.
    pub(super) expiring: bool,
    /// The logs may hold range deletes (manifest version 4): set before the first one is
    /// logged, and kept.
    pub(super) range_deletes: bool,
}

impl Registry {
    /// The registry `m` lists, with no keyspace's own settings yet (`recovery.rs` adds those
    /// the options record holds).
    pub(super) fn of(m: &ManifestData) -> Registry {
        Registry {
            names: m.keyspaces.iter().map(|k| (k.id, k.name.clone())).collect(),
            next_id: m.next_keyspace,
            own: BTreeMap::new(),
            expiring: m.expiring,
            range_deletes: m.range_deletes,
        }
    }

    /// Each keyspace's options at open, the default's (the store's, `store`) first: the
    /// store's with the keyspace's own settings (`recorded`, the options record's) in their
    /// place, which this registry takes. Settings that no longer go with the store's (range
    /// filters in the budget, the budget now gone) give way to the store's, and `changed`
    /// says so; settings of ids the manifest does not list (a crash between a creation's two
    /// writes) are left out.
    pub(super) fn settle_own(
        &mut self,
        recorded: &[KeyspaceRecord],
        store: &Options,
        changed: &mut Vec<OptionChange>,
    ) -> Vec<(u32, Arc<Options>)> {
        let mut out = vec![(0, Arc::new(store.clone()))];
        for (id, name) in &self.names {
            let own = recorded
                .iter()
                .find(|r| r.id == *id)
                .and_then(|r| r.options().ok())
                .unwrap_or_default();
            match own.apply(store) {
                Ok(applied) => {
                    if !own.is_empty() {
                        self.own.insert(*id, own);
                    }
                    out.push((*id, Arc::new(applied)));
                }
                Err(e) => {
                    changed.push(OptionChange {
                        setting: format!("keyspace {name}"),
                        was: "its own settings".into(),
                        now: format!("the store's ({e})"),
                    });
                    out.push((*id, Arc::new(store.clone())));
                }
            }
        }
        out
    }

    /// Whether keyspace `id` follows the store's filter setting (the default always does).
    pub(super) fn follows_store_filters(&self, id: u32) -> bool {
        self.own
            .get(&id)
            .is_none_or(KeyspaceOptions::follows_store_filters)
    }

    /// The settings keyspace `id` was given of its own (none: empty).
    pub(super) fn own(&self, id: u32) -> KeyspaceOptions {
        self.own.get(&id).cloned().unwrap_or_default()
    }

    /// The options record of a store opened with `store` holding these keyspaces.
    pub(super) fn record(&self, store: &Options) -> StoredOptions {
        let mut r = StoredOptions::of(store);
        r.keyspaces = self
            .own
            .iter()
            .filter(|(_, o)| !o.is_empty())
            .map(|(id, o)| KeyspaceRecord::of(*id, o))
            .collect();
        r
    }

    /// The id the next keyspace created gets.
    pub(super) fn next_id(&self) -> u32 {
        self.next_id
    }

    /// The name of live keyspace `id` (not the default).
    pub(super) fn name(&self, id: u32) -> Option<&str> {
        let i = self.names.binary_search_by_key(&id, |(k, _)| *k).ok()?;
        Some(&self.names[i].1)
    }

    /// Every live keyspace but the default: (id, name), by id.
    pub(super) fn all(&self) -> impl Iterator<Item = (u32, &str)> {
        self.names.iter().map(|(id, n)| (*id, n.as_str()))
    }

    /// Keeps only the keyspaces whose id `f` accepts (next_id unchanged).
    pub(super) fn keep(&mut self, f: impl Fn(u32) -> bool) {
        self.names.retain(|(id, _)| f(*id));
        self.own.retain(|id, _| f(*id));
    }

    /// Lists keyspace `id` as `name` again, in id order (a checkpoint's copy of a keyspace
    /// dropped since its snapshot; it follows the store's settings).
    pub(super) fn restore(&mut self, id: u32, name: &str) {
        if let Err(i) = self.names.binary_search_by_key(&id, |(k, _)| *k) {
            self.names.insert(i, (id, name.to_string()));
        }
    }

    /// The id of the live keyspace named `name` (not the default).
    pub(super) fn id_of(&self, name: &str) -> Option<u32> {
        self.names
            .iter()
            .find(|(_, n)| n == name)
            .map(|(id, _)| *id)
    }
}
