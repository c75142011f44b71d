//! What readers load: every live keyspace's `State` (its memtables, its table set and the
//! options it goes by) in one `Published`, replaced whole on every change
//! (`Inner::update_state`) and loaded with one atomic read, so that a reader sees every
//! keyspace at one moment.

use std::sync::Arc;

use super::memtable::Memtable;
use super::options::Options;
use super::version::Version;
use crate::prefix::PrefixExtractor;

/// What readers of one keyspace see: the mutable memtable, the immutable ones waiting for
/// flush, the tables. Never changed in place: a change publishes a new `Published`
/// (`Inner::update_state`).
#[derive(Clone)]
pub(super) struct State {
    pub(super) mem: Arc<Memtable>,
    /// Oldest first.
    pub(super) imm: Vec<Arc<Memtable>>,
    pub(super) version: Arc<Version>,
    /// The options the keyspace goes by: the store's, with its own settings in their place
    /// (`KeyspaceOptions::apply`); flushes and compactions write its tables with them.
    pub(super) opts: Arc<Options>,
    /// `opts`' prefix rule, kept beside the rest so that a get reads it without following
    /// `opts`.
    pub(super) rule: Option<PrefixExtractor>,
    /// Its counter slot for lookups (`lookups::slot`).
    pub(super) slot: usize,
    /// It follows the store's filter setting, and so shares the store's budget if there is
    /// one (`budget_parts.rs`); one given filters of its own is planned apart.
    pub(super) in_store_budget: bool,
    /// The keyspace's name: a checkpoint of a snapshot names a keyspace dropped since by it
    /// (`checkpoint.rs`).
    pub(super) name: Arc<str>,
}

impl State {
    /// Keyspace `id`'s (named `name`) state with no immutable memtables.
    pub(super) fn new(
        (id, name): (u32, &str),
        mem: Arc<Memtable>,
        version: Arc<Version>,
        opts: Arc<Options>,
        in_store_budget: bool,
    ) -> State {
        State {
            mem,
            imm: Vec::new(),
            version,
            rule: opts.prefix_rule(),
            opts,
            slot: super::lookups::slot(id),
            in_store_budget,
            name: Arc::from(name),
        }
    }

    /// The memtables newest first, each with the batches a reader of it sees: the active one
    /// through `mem_seen`, then the immutable ones through all they hold.
    pub(super) fn memtables(&self, mem_seen: u64) -> impl Iterator<Item = (&Memtable, u64)> {
        let older = self.imm.iter().rev().map(|m| (&**m, m.visible()));
        std::iter::once((&*self.mem, mem_seen)).chain(older)
    }

    /// Whether a memtable holds deleted ranges: reads then ask them
    /// (`read::memtables_delete`, a scan's `Cover`).
    #[inline(always)]
    pub(super) fn memtables_have_ranges(&self) -> bool {
        self.mem.has_ranges() || self.imm.iter().any(|m| m.has_ranges())
    }
}

/// What readers load: every live keyspace's `State`, published together, so that one load
/// sees all of them at one moment.
///
/// The keyspaces' memtables come in generations: a rotation retires every keyspace's
/// memtable at once, starts one new log, and gives each keyspace a new memtable sharing one
/// batch count (`memtable::Batches`), so a batch across keyspaces becomes visible in all of
/// them at once, and a flush writes one generation (one level-0 table per keyspace that holds
/// anything) and frees its one log. So every keyspace's `imm` has the same length, position
/// `i` of each belonging to generation `i`.
#[derive(Clone)]
pub(super) struct Published {
    /// The default keyspace (id 0), inline: its reads take no step the others do not.
    pub(super) default: State,
    /// Every other live keyspace by id, ascending.
    pub(super) others: Vec<(u32, State)>,
}

impl Published {
    /// Keyspace `id`'s state; `None` once it is dropped.
    pub(super) fn get(&self, id: u32) -> Option<&State> {
        if id == 0 {
            return Some(&self.default);
        }
        let i = self.others.binary_search_by_key(&id, |(k, _)| *k).ok()?;
        Some(&self.others[i].1)
    }

    /// `get`, to change (a copy being built for publication).
    pub(super) fn get_mut(&mut self, id: u32) -> Option<&mut State> {
        if id == 0 {
            return Some(&mut self.default);
        }
        let i = self.others.binary_search_by_key(&id, |(k, _)| *k).ok()?;
        Some(&mut self.others[i].1)
    }

    /// Every live keyspace, the default first, then by id.
    pub(super) fn all(&self) -> impl Iterator<Item = (u32, &State)> {
        std::iter::once((0, &self.default)).chain(self.others.iter().map(|(id, s)| (*id, s)))
    }

    /// `all`, to change.
    pub(super) fn all_mut(&mut self) -> impl Iterator<Item = (u32, &mut State)> {
        std::iter::once((0, &mut self.default))
            .chain(self.others.iter_mut().map(|(id, s)| (*id, s)))
    }
}
