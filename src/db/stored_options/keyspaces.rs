//! The keyspaces' own settings in the options record (version 5, and 6 with a default time to
//! live; FORMAT.md §6): one `KeyspaceRecord` per keyspace given settings of its own
//! (`KeyspaceOptions`), each field `None` where the keyspace follows the store.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{range_filters, Compressions, FilterChoice, PrefixChoice, RangeChoice};
use crate::db::filters::{Filters, PrefixFilters};
use crate::db::keyspace_options::KeyspaceOptions;
use crate::db::options::Options;
use crate::expiry::DefaultTtl;

/// One keyspace's own settings as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyspaceRecord {
    /// The keyspace's id (the manifest's, FORMAT.md §4).
    pub id: u32,
    /// `KeyspaceOptions::filters`.
    pub filter: Option<FilterChoice>,
    /// `KeyspaceOptions::prefix_filters`.
    pub prefix: Option<PrefixChoice>,
    /// `KeyspaceOptions::compression`.
    pub compression: Option<Compressions>,
    /// `KeyspaceOptions::range_filters` (given as none: `Some(None)`).
    pub range: Option<Option<RangeChoice>>,
    /// `KeyspaceOptions::block_size`.
    pub block_size: Option<u64>,
    /// `KeyspaceOptions::memtable_size`.
    pub memtable_size: Option<u64>,
    /// `KeyspaceOptions::default_ttl` in ms (given as `DefaultTtl::Never`: `Some(None)`);
    /// version 6.
    pub default_ttl: Option<Option<u64>>,
}

impl KeyspaceRecord {
    /// The record of keyspace `id` with settings `o`.
    pub fn of(id: u32, o: &KeyspaceOptions) -> KeyspaceRecord {
        KeyspaceRecord {
            id,
            filter: o.filters.as_ref().map(FilterChoice::from),
            prefix: o.prefix_filters.map(PrefixChoice::from),
            compression: o.compression.clone(),
            range: o.range_filters.map(Option::<RangeChoice>::from),
            block_size: o.block_size.map(|b| b as u64),
            memtable_size: o.memtable_size.map(|m| m as u64),
            default_ttl: o.default_ttl.map(DefaultTtl::millis),
        }
    }

    /// The settings recorded; `Err` says what cannot be one.
    pub fn options(&self) -> Result<KeyspaceOptions, String> {
        let size = |what: &str, n: Option<u64>| -> Result<Option<usize>, String> {
            n.map(|n| usize::try_from(n).map_err(|_| format!("{what} {n} is too large")))
                .transpose()
        };
        Ok(KeyspaceOptions {
            filters: self.filter.as_ref().map(Filters::from),
            prefix_filters: self
                .prefix
                .as_ref()
                .map(PrefixFilters::try_from)
                .transpose()?,
            range_filters: self.range.map(range_filters).transpose()?,
            compression: self.compression.clone(),
            block_size: size("block_size", self.block_size)?,
            memtable_size: size("memtable_size", self.memtable_size)?,
            default_ttl: self.default_ttl.map(|t| match t {
                None => DefaultTtl::Never,
                Some(ms) => DefaultTtl::After(Duration::from_millis(ms)),
            }),
        })
    }
}

impl KeyspaceRecord {
    /// Each setting it holds, in words: (setting, value), as `Db::recovery().options` names
    /// them (for tools).
    pub fn describe(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut add = |setting: &str, text: String| out.push((setting.to_string(), text));
        if let Some(f) = &self.filter {
            add("filter", f.to_string());
        }
        if let Some(p) = &self.prefix {
            add("prefix", p.to_string());
        }
        if let Some(c) = &self.compression {
            add("compression", c.to_string());
        }
        if let Some(r) = self.range {
            let text = range_filters(r).map_or_else(|e| e, |r| super::range_text(&r));
            add("range", text);
        }
        if let Some(b) = self.block_size {
            add("block_size", format!("{b} bytes"));
        }
        if let Some(m) = self.memtable_size {
            add("memtable_size", format!("{m} bytes"));
        }
        if let Some(t) = self.default_ttl {
            add(
                "default_ttl",
                t.map_or("never".into(), |ms| format!("{ms} ms")),
            );
        }
        out
    }
}

/// `Err` unless `records` are in id order, one per id, each holding settings that are valid
/// over the default options (whether they go with the store's own is decided at open,
/// `recovery.rs`: a keyspace whose settings do not follows the store's).
pub(super) fn check(records: &[KeyspaceRecord]) -> Result<(), String> {
    if let Some(w) = records.windows(2).find(|w| w[0].id >= w[1].id) {
        return Err(format!(
            "keyspace {} is listed after keyspace {}",
            w[1].id, w[0].id
        ));
    }
    for r in records {
        let o = r.options().map_err(|e| format!("keyspace {}: {e}", r.id))?;
        // A codec this build lacks is checked with the store's (`decode`): here, none.
        let base = Options::default().with_compression(None);
        let o = KeyspaceOptions {
            compression: o.compression.filter(|c| super::lacking_codec(c).is_none()),
            ..o
        };
        o.apply(&base)
            .map_err(|e| format!("keyspace {}: {e}", r.id))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::filters::RangeFilters;
    use crate::table::Compression;

    #[test]
    fn settings_round_trip_and_unlisted_ones_stay_unset() {
        let o = KeyspaceOptions::default()
            .with_compression(Some(Compression::Lz4.into()))
            .with_range_filters(Some(RangeFilters::None))
            .with_block_size(Some(16 << 10));
        let r = KeyspaceRecord::of(7, &o);
        assert_eq!(r.range, Some(None), "given as none is not unset");
        assert_eq!(r.filter, None);
        assert_eq!(r.options().unwrap(), o);
        assert!(check(std::slice::from_ref(&r)).is_ok());
    }

    #[test]
    fn a_default_ttl_round_trips_and_out_of_range_is_refused() {
        let hour = DefaultTtl::After(Duration::from_secs(3600));
        for t in [hour, DefaultTtl::Never] {
            let o = KeyspaceOptions::default().with_default_ttl(Some(t));
            let r = KeyspaceRecord::of(2, &o);
            assert_eq!(r.options().unwrap(), o);
            assert!(check(std::slice::from_ref(&r)).is_ok());
        }
        assert_eq!(
            KeyspaceRecord::of(2, &KeyspaceOptions::default()).default_ttl,
            None
        );
        let zero = KeyspaceRecord {
            default_ttl: Some(Some(0)),
            ..KeyspaceRecord::of(6, &KeyspaceOptions::default())
        };
        let e = check(&[zero]).unwrap_err();
        assert!(e.contains("keyspace 6") && e.contains("default_ttl"), "{e}");
    }

    #[test]
    fn out_of_order_ids_and_invalid_settings_are_refused() {
        let r = |id| KeyspaceRecord::of(id, &KeyspaceOptions::default());
        assert!(check(&[r(1), r(2)]).is_ok());
        let e = check(&[r(2), r(2)]).unwrap_err();
        assert!(e.contains("listed after"), "{e}");
        let tiny = KeyspaceRecord {
            block_size: Some(3),
            ..r(4)
        };
        let e = check(&[tiny]).unwrap_err();
        assert!(e.contains("keyspace 4") && e.contains("block_size"), "{e}");
        let prefixless = KeyspaceRecord {
            prefix: Some(PrefixChoice {
                extractor: None,
                whole_key_filtering: false,
            }),
            ..r(5)
        };
        assert!(check(&[prefixless]).is_err());
    }
}
