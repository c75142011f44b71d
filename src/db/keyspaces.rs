//! Creating, listing and dropping keyspaces (`Db::keyspace`, `Db::keyspace_names`,
//! `Db::drop_keyspace`): changes to the registry the manifest lists (`registry.rs`,
//! FORMAT.md §4).
//!
//! Both changes are one manifest write, made under the writer lock (so no batch is being
//! applied: every batch sees a keyspace whole or not at all) and the work lock (so no job
//! installs a table set meanwhile):
//! - create: the registry gains (id, name), the manifest is written, then the keyspace is
//!   published with an empty memtable in every live generation (`state::Published`);
//! - drop: the log is synced (every write before the drop is as durable as the drop), the
//!   registry loses it, the manifest is written, it is unpublished, and its table
//!   files are removed (readers and snapshots holding them keep reading through their open
//!   handles). A crash before the manifest's rename leaves the keyspace whole; after it, gone:
//!   the next open removes its tables as files the manifest does not name, and replay skips
//!   the log's operations on an id the manifest does not list. Ids are never reused, so a
//!   keyspace created again under the same name starts empty.

use std::sync::Arc;

use super::inner::{Inner, Work};
use super::keyspace::{Keyspace, DEFAULT_KEYSPACE};
use super::keyspace_options::KeyspaceOptions;
use super::memtable::Memtable;
use super::state::State;
use super::stored_options;
use super::version::Version;
use super::Db;
use crate::error::{Error, Result};

/// Longest keyspace name accepted, in bytes.
pub const MAX_KEYSPACE_NAME: usize = 1024;

/// `Error::InvalidArgument` unless `name` may name a keyspace.
fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_KEYSPACE_NAME {
        return Err(Error::InvalidArgument(format!(
            "a keyspace name must be 1 to {MAX_KEYSPACE_NAME} bytes, not {}",
            name.len()
        )));
    }
    Ok(())
}

impl Db {
    /// The keyspace named `name`, created empty if it does not exist (fjall's way: no need to
    /// list keyspaces at open). `DEFAULT_KEYSPACE` names the one `Db`'s own methods act on.
    /// Creating one writes the manifest (durable before this returns); opening an existing
    /// one takes a lock and a lookup. A keyspace created here follows the store's settings
    /// (`create_keyspace` gives it its own). `Error::InvalidArgument` for an empty name or one
    /// over `MAX_KEYSPACE_NAME` bytes.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use lsm_bloom::{Db, Options, WriteBatch};
    /// let db = Db::open(dir.path(), Options::default())?;
    /// let users = db.keyspace("users")?;
    /// let by_email = db.keyspace("users-by-email")?;
    /// let mut batch = WriteBatch::new();
    /// batch.put_in(&users, "u:7", "Ada");
    /// batch.put_in(&by_email, "ada@example.com", "u:7");
    /// db.write(batch)?; // both or neither, one log record
    /// assert_eq!(users.get("u:7")?, Some(b"Ada".to_vec()));
    /// assert_eq!(db.get("u:7")?, None); // the default keyspace is another
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keyspace(&self, name: &str) -> Result<Keyspace> {
        self.create_keyspace(name, KeyspaceOptions::default())
    }

    /// `keyspace`, with settings of its own (`KeyspaceOptions`): each one given applies to the
    /// keyspace's tables written from now on, created or not, and is recorded for the next
    /// open; each one not given keeps what the keyspace has. Recorded before this returns.
    /// `Error::InvalidArgument` when the settings with the store's are not valid options
    /// (naming what is wrong), or when settings are given for the default keyspace, which
    /// goes by the `Options` the store is opened with.
    pub fn create_keyspace(&self, name: &str, given: KeyspaceOptions) -> Result<Keyspace> {
        check_name(name)?;
        let inner = &self.inner;
        if name == DEFAULT_KEYSPACE {
            if !given.is_empty() {
                return Err(Error::InvalidArgument(
                    "the default keyspace goes by the store's Options: give its settings to Db::open"
                        .into(),
                ));
            }
            return Ok(Keyspace::new(Arc::clone(inner), 0, name));
        }
        if given.is_empty() {
            if let Some(id) = inner.lock_checked(&inner.work).keyspaces.id_of(name) {
                return Ok(Keyspace::new(Arc::clone(inner), id, name));
            }
        }
        let _writer = inner.lock_checked(&inner.writer);
        inner.errors.check()?;
        let mut work = inner.lock_checked(&inner.work);
        if let Some(id) = work.keyspaces.id_of(name) {
            inner.change_settings(&mut work, id, &given)?;
            return Ok(Keyspace::new(Arc::clone(inner), id, name));
        }
        let opts = Arc::new(given.apply(&inner.opts)?);
        let in_store_budget = given.follows_store_filters();
        let id = work.keyspaces.next_id;
        let before = work.keyspaces.clone();
        work.keyspaces.next_id = id.checked_add(1).ok_or_else(|| {
            Error::InvalidArgument("every keyspace id has been used (2^32 creations)".into())
        })?;
        work.keyspaces.names.push((id, name.to_string()));
        if !given.is_empty() {
            // Recorded before the manifest names the keyspace: a crash between the two leaves
            // settings of an id no keyspace has, which the next open drops, and which the
            // next creation (given the same id) replaces.
            work.keyspaces.own.insert(id, given);
            if let Err(e) = inner.write_options_record(&work) {
                work.keyspaces = before;
                return Err(e);
            }
        }
        let log_number = inner.log_number_after(None);
        if let Err(e) = inner.write_manifest(&mut work, &[], log_number) {
            work.keyspaces = before;
            return Err(inner.errors.set(e));
        }
        inner.update_state(|p| {
            // A memtable in each live generation, sharing its count: a batch applied to it is
            // visible with the rest of its generation, and the flush of the generation takes it.
            let joined = |m: &Arc<Memtable>| Arc::new(Memtable::following(m));
            let version = Arc::new(Version::empty());
            let mem = joined(&p.default.mem);
            let mut state = State::new((id, name), mem, version, opts, in_store_budget);
            state.imm = p.default.imm.iter().map(joined).collect();
            p.others.push((id, state)); // ids only grow: the list stays sorted
        });
        tracing::info!(keyspace = name, id, "keyspace created");
        Ok(Keyspace::new(Arc::clone(inner), id, name))
    }

    /// The names of the live keyspaces: `DEFAULT_KEYSPACE` first, then the others in the order
    /// they were created.
    pub fn keyspace_names(&self) -> Vec<String> {
        let work = self.inner.lock_checked(&self.inner.work);
        std::iter::once(DEFAULT_KEYSPACE.to_string())
            .chain(work.keyspaces.names.iter().map(|(_, n)| n.clone()))
            .collect()
    }

    /// Drops the keyspace named `name` and everything in it; `Ok(false)` if there is none.
    /// Its table files are removed now (their disk space returns once no snapshot, iterator
    /// or running compaction holds them); handles of it answer `Error::KeyspaceDropped` from
    /// here on, and a keyspace created again under the name is a new, empty one. Durable
    /// before this returns, and whole across a crash at any point (the module comment).
    /// `Error::InvalidArgument` for the default keyspace, which always exists.
    pub fn drop_keyspace(&self, name: &str) -> Result<bool> {
        if name == DEFAULT_KEYSPACE {
            return Err(Error::InvalidArgument(
                "the default keyspace cannot be dropped".into(),
            ));
        }
        let inner = &self.inner;
        let mut writer = inner.lock_checked(&inner.writer);
        inner.errors.check()?;
        let mut work = inner.lock_checked(&inner.work);
        let Some(id) = work.keyspaces.id_of(name) else {
            return Ok(false);
        };
        // Every write acknowledged before the drop is made durable first, so that a crash
        // never keeps the drop while losing a write made before it (a point in time).
        writer.sync().map_err(|e| inner.errors.set(e))?;
        let before = work.keyspaces.clone();
        work.keyspaces.names.retain(|(k, _)| *k != id);
        let log_number = inner.log_number_after(None);
        if let Err(e) = inner.write_manifest(&mut work, &[], log_number) {
            work.keyspaces = before;
            return Err(inner.errors.set(e));
        }
        work.cursors.remove(&id);
        if work.keyspaces.own.remove(&id).is_some() {
            // The drop is durable already; settings left for its id are dropped at the next
            // open, and the id is never given again.
            if let Err(e) = inner.write_options_record(&work) {
                tracing::warn!(keyspace = name, error = %e, "options record not rewritten after a drop");
            }
        }
        let removed = inner.update_state(|p| {
            let i = p.others.iter().position(|(k, _)| *k == id)?;
            Some(p.others.remove(i).1)
        });
        drop(work);
        drop(writer);
        if let Some(state) = removed {
            let tables: Vec<_> = state.version.levels().iter().flatten().cloned().collect();
            for t in &tables {
                inner.remove_obsolete(t.path());
            }
            inner.graveyard.bury_tables(tables);
            for m in state.imm.into_iter().chain(std::iter::once(state.mem)) {
                inner.graveyard.bury_memtable(m);
            }
        }
        inner.note_table_sets();
        tracing::info!(keyspace = name, id, "keyspace dropped");
        Ok(true)
    }
}

impl Inner {
    /// Gives keyspace `id` the settings `given` holds in place of those it has (`Db::
    /// create_keyspace`): validated, recorded, then published for the flushes and compactions
    /// that start after. Called with the writer and work locks held.
    fn change_settings(&self, work: &mut Work, id: u32, given: &KeyspaceOptions) -> Result<()> {
        let own = work.keyspaces.own(id).overlaid(given);
        if own == work.keyspaces.own(id) {
            return Ok(());
        }
        let opts = Arc::new(own.apply(&self.opts)?);
        let in_store_budget = own.follows_store_filters();
        let before = work.keyspaces.own.insert(id, own);
        if let Err(e) = self.write_options_record(work) {
            match before {
                Some(b) => work.keyspaces.own.insert(id, b),
                None => work.keyspaces.own.remove(&id),
            };
            return Err(e);
        }
        self.update_state(|p| {
            if let Some(s) = p.get_mut(id) {
                *s = State {
                    rule: opts.prefix_rule(),
                    opts,
                    in_store_budget,
                    ..s.clone()
                };
            }
        });
        tracing::info!(id, "keyspace settings changed");
        Ok(())
    }

    /// Writes the options record: the store's settings and every keyspace's own. Atomic
    /// (FORMAT.md §6): a failure leaves the previous record, and the store as it was.
    pub(super) fn write_options_record(&self, work: &Work) -> Result<()> {
        let record = work.keyspaces.record(&self.opts);
        stored_options::write(&*self.opts.fs, &self.dir, &record)
    }
}
