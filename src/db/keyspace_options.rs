//! `KeyspaceOptions`: the settings a keyspace may hold apart from the store's — which filters,
//! prefix filters and range filters its tables get, their compression and block size, and its
//! memtable size (`Db::create_keyspace`).
//!
//! A setting a keyspace was never given follows the store's (`Options`, as resolved at each
//! open); one given is the keyspace's own from then on, recorded in the options record
//! (FORMAT.md §6) and kept at every reopen, as `Options`' own settings are ("`None` keeps what
//! was recorded"). `apply` lays a keyspace's own settings over the store's options: the
//! result is what its flushes, compactions and reads go by (`state::State::opts`).

use super::filters::{Compressions, Filters, PrefixFilters, RangeFilters};
use super::options::Options;
use crate::error::{Error, Result};
use crate::expiry::DefaultTtl;

/// The settings of one keyspace that may differ from the store's (`Db::create_keyspace`).
/// Each `None` keeps what the keyspace has: its own setting if it was given one before,
/// otherwise the store's (`Options`), which it then follows across reopens. Each `Some` becomes
/// the keyspace's own, for tables written from then on, and is recorded for the next open.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// use lsm_bloom::{Compressions, Db, KeyspaceOptions, Options, PrefixExtractor, PrefixFilters};
/// let db = Db::open(dir.path(), Options::default())?;
/// // Sessions are looked up by whole key; events are scanned by user, "user:<id>/...".
/// let events = db.create_keyspace(
///     "events",
///     KeyspaceOptions::default()
///         .with_prefix_filters(Some(PrefixFilters::with(PrefixExtractor::delimiter(b'/', 1))))
///         .with_block_size(Some(16 << 10)),
/// )?;
/// events.put("user:7/0001", "login")?;
/// assert_eq!(events.options()?.block_size, Some(16 << 10));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// The store's `memtable_size` bounds the memtables of all keyspaces together (they are
/// flushed together, `docs/keyspaces.md`); a keyspace's own `memtable_size` flushes them
/// sooner, when its memtable alone reaches it, so one above the store's has no effect.
///
/// `#[non_exhaustive]`, like `Options`: start from `KeyspaceOptions::default()` and chain the
/// setters.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct KeyspaceOptions {
    /// The filters of the keyspace's new tables (`Options::filters`).
    pub filters: Option<Filters>,
    /// Its prefix filters (`Options::prefix_filters`).
    pub prefix_filters: Option<PrefixFilters>,
    /// Its range filters (`Options::range_filters`).
    pub range_filters: Option<RangeFilters>,
    /// The compression of its new tables (`Options::compression`).
    pub compression: Option<Compressions>,
    /// The data block size of its new tables, in bytes (`Options::block_size`).
    pub block_size: Option<usize>,
    /// The size its memtable alone may reach before the memtables are flushed, in bytes.
    pub memtable_size: Option<usize>,
    /// How long a put written here without an expiry of its own lives
    /// (`DefaultTtl::After`), from its write on; `DefaultTtl::Never` (a keyspace's default):
    /// it never expires. Changing it changes puts written from then on.
    pub default_ttl: Option<DefaultTtl>,
}

setters!(KeyspaceOptions {
    with_filters => filters: Option<Filters>,
    with_prefix_filters => prefix_filters: Option<PrefixFilters>,
    with_range_filters => range_filters: Option<RangeFilters>,
    with_compression => compression: Option<Compressions>,
    with_block_size => block_size: Option<usize>,
    with_memtable_size => memtable_size: Option<usize>,
    with_default_ttl => default_ttl: Option<DefaultTtl>,
});

impl KeyspaceOptions {
    /// These settings with each one `given` holds in its place.
    pub(crate) fn overlaid(&self, given: &KeyspaceOptions) -> KeyspaceOptions {
        KeyspaceOptions {
            filters: given.filters.clone().or_else(|| self.filters.clone()),
            prefix_filters: given.prefix_filters.or(self.prefix_filters),
            range_filters: given.range_filters.or(self.range_filters),
            compression: given
                .compression
                .clone()
                .or_else(|| self.compression.clone()),
            block_size: given.block_size.or(self.block_size),
            memtable_size: given.memtable_size.or(self.memtable_size),
            default_ttl: given.default_ttl.or(self.default_ttl),
        }
    }

    /// Its filters are the store's, so it shares the store's budget if there is one
    /// (`budget_parts.rs`).
    pub(crate) fn follows_store_filters(&self) -> bool {
        self.filters.is_none()
    }

    /// No setting of its own.
    pub(crate) fn is_empty(&self) -> bool {
        *self == KeyspaceOptions::default()
    }

    /// The options a keyspace with these settings goes by: `store`'s, with each setting given
    /// here in its place. `Error::InvalidArgument` when the result is not valid options
    /// (`Options::validate`: range filters in the budget with fixed filters, say), naming the
    /// setting that is wrong.
    pub(crate) fn apply(&self, store: &Options) -> Result<Options> {
        let mut o = store.clone();
        if let Some(f) = &self.filters {
            o.filters = Some(f.clone());
        }
        if let Some(p) = self.prefix_filters {
            o.prefix_filters = Some(p);
        }
        if let Some(r) = self.range_filters {
            o.range_filters = Some(r);
        }
        if let Some(c) = &self.compression {
            o.compression = Some(c.clone());
        }
        if let Some(b) = self.block_size {
            o.block_size = b;
        }
        if let Some(m) = self.memtable_size {
            o.memtable_size = m;
        }
        if let Some(t) = self.default_ttl {
            t.check()
                .map_err(|e| Error::InvalidArgument(format!("keyspace options: {e}")))?;
            o.keyspace_ttl = t.millis();
        }
        o.validate().map_err(|e| match e {
            Error::InvalidArgument(why) => {
                Error::InvalidArgument(format!("keyspace options: {why}"))
            }
            other => other,
        })?;
        Ok(o)
    }

    /// Every setting `opts` goes by, as a keyspace's (for `Keyspace::options`).
    pub(crate) fn resolved(opts: &Options) -> KeyspaceOptions {
        KeyspaceOptions {
            filters: Some(opts.filters().clone()),
            prefix_filters: Some(opts.prefix_filters()),
            range_filters: Some(opts.range_filters()),
            compression: Some(opts.compressions().clone()),
            block_size: Some(opts.block_size),
            memtable_size: Some(opts.memtable_size),
            default_ttl: Some(match opts.keyspace_ttl {
                None => DefaultTtl::Never,
                Some(ms) => DefaultTtl::After(std::time::Duration::from_millis(ms)),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Compression;

    #[test]
    fn given_settings_replace_and_the_rest_follow_the_store() {
        let store = Options::default().with_block_size(8 << 10);
        let own = KeyspaceOptions::default().with_compression(Some(Compression::Lz4.into()));
        let o = own.apply(&store).unwrap();
        assert_eq!(o.compression_for_level(3), Compression::Lz4);
        assert_eq!(o.block_size, 8 << 10, "not given: the store's");
        // Overlaying keeps what is not given again.
        let more = own.overlaid(&KeyspaceOptions::default().with_block_size(Some(1 << 12)));
        assert_eq!(more.block_size, Some(1 << 12));
        assert_eq!(more.compression, own.compression);
        assert!(KeyspaceOptions::default().is_empty() && !more.is_empty());
    }

    #[test]
    fn an_invalid_combination_is_refused_with_its_reason() {
        let bad = KeyspaceOptions::default().with_block_size(Some(10));
        match bad.apply(&Options::default()) {
            Err(Error::InvalidArgument(why)) => {
                assert!(
                    why.contains("keyspace options") && why.contains("block_size"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        let in_budget = KeyspaceOptions::default()
            .with_filters(Some(Filters::fixed(crate::filter::FilterPolicy::default())))
            .with_range_filters(Some(RangeFilters::InBudget { max_range: 64 }));
        assert!(in_budget.apply(&Options::default()).is_err());
    }
}
