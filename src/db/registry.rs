//! The registry of keyspaces the manifest lists (FORMAT.md §4): each live keyspace's id and
//! name besides the default, and the id the next one gets. Held in `Work`, under the work
//! lock every manifest write takes; changed by `keyspaces.rs`.

use super::manifest::ManifestData;

/// The live keyspaces other than the default, and the id the next one gets.
#[derive(Clone, Debug)]
pub(super) struct Registry {
    /// (id, name), by id ascending.
    pub(super) names: Vec<(u32, String)>,
    /// The id the next keyspace created gets.
    pub(super) next_id: u32,
}

impl Registry {
    /// The registry `m` lists.
    pub(super) fn of(m: &ManifestData) -> Registry {
        Registry {
            names: m.keyspaces.iter().map(|k| (k.id, k.name.clone())).collect(),
            next_id: m.next_keyspace,
        }
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
    }

    /// The id of the live keyspace named `name` (not the default).
    pub(super) fn id_of(&self, name: &str) -> Option<u32> {
        self.names
            .iter()
            .find(|(_, n)| n == name)
            .map(|(id, _)| *id)
    }
}
