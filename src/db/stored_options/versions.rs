//! Older versions of the options record (FORMAT.md §6), as they are read: each converts to
//! the current `StoredOptions`, with what it lacks at its default.

use serde::{Deserialize, Serialize};

use super::{Compressions, FilterChoice, KeyspaceRecord, PrefixChoice, RangeChoice, StoredOptions};

/// Version 5 of the record: version 6 without the keyspaces' default time to live. Still
/// written for a record none of whose keyspaces has one (`encode`), so that builds before
/// default times to live open it. Version 4's fields, then the keyspace records (a nested
/// struct encodes as its fields in order: the same bytes).
#[derive(Serialize, Deserialize)]
pub(super) struct StoredOptionsV5 {
    v4: StoredOptionsV4,
    keyspaces: Vec<KeyspaceRecordV5>,
}

/// Version 5's keyspace record: version 6's without `default_ttl`.
#[derive(Serialize, Deserialize)]
struct KeyspaceRecordV5 {
    id: u32,
    filter: Option<FilterChoice>,
    prefix: Option<PrefixChoice>,
    compression: Option<Compressions>,
    range: Option<Option<RangeChoice>>,
    block_size: Option<u64>,
    memtable_size: Option<u64>,
}

impl StoredOptionsV5 {
    /// `data` as version 5 holds it (the keyspaces' default time to live left out).
    pub(super) fn of(data: &StoredOptions) -> Self {
        let keyspaces = data.keyspaces.iter().map(|k| KeyspaceRecordV5 {
            id: k.id,
            filter: k.filter.clone(),
            prefix: k.prefix.clone(),
            compression: k.compression.clone(),
            range: k.range,
            block_size: k.block_size,
            memtable_size: k.memtable_size,
        });
        StoredOptionsV5 {
            v4: StoredOptionsV4::of(data),
            keyspaces: keyspaces.collect(),
        }
    }
}

impl From<StoredOptionsV5> for StoredOptions {
    fn from(v5: StoredOptionsV5) -> Self {
        let keyspaces = v5.keyspaces.into_iter().map(|k| KeyspaceRecord {
            id: k.id,
            filter: k.filter,
            prefix: k.prefix,
            compression: k.compression,
            range: k.range,
            block_size: k.block_size,
            memtable_size: k.memtable_size,
            default_ttl: None,
        });
        StoredOptions {
            keyspaces: keyspaces.collect(),
            ..v5.v4.into()
        }
    }
}

/// Version 4 of the record: version 5 without the keyspaces' own settings. Still written for
/// a record that lists none (`encode`), so that builds before keyspace settings open it.
#[derive(Serialize, Deserialize)]
pub(super) struct StoredOptionsV4 {
    filter: FilterChoice,
    prefix: PrefixChoice,
    memtable_size: u64,
    l0_compaction_trigger: u64,
    compression: Compressions,
    range: Option<RangeChoice>,
}

impl StoredOptionsV4 {
    /// `data` as version 4 holds it (its keyspace records left out).
    pub(super) fn of(data: &StoredOptions) -> Self {
        StoredOptionsV4 {
            filter: data.filter.clone(),
            prefix: data.prefix.clone(),
            memtable_size: data.memtable_size,
            l0_compaction_trigger: data.l0_compaction_trigger,
            compression: data.compression.clone(),
            range: data.range,
        }
    }
}

impl From<StoredOptionsV4> for StoredOptions {
    fn from(v4: StoredOptionsV4) -> Self {
        StoredOptions {
            filter: v4.filter,
            prefix: v4.prefix,
            memtable_size: v4.memtable_size,
            l0_compaction_trigger: v4.l0_compaction_trigger,
            compression: v4.compression,
            range: v4.range,
            keyspaces: Vec::new(),
        }
    }
}

/// Version 3 of the record: version 4 with a range setting that is a fixed policy or none.
#[derive(Deserialize)]
pub(super) struct StoredOptionsV3 {
    filter: FilterChoice,
    prefix: PrefixChoice,
    memtable_size: u64,
    l0_compaction_trigger: u64,
    compression: Compressions,
    range: Option<RangeChoiceV3>,
}

/// Version 3's range setting: a fixed policy's two numbers.
#[derive(Clone, Copy, Deserialize)]
struct RangeChoiceV3 {
    bits_per_key: f64,
    max_range: u64,
}

impl From<StoredOptionsV3> for StoredOptions {
    fn from(v3: StoredOptionsV3) -> Self {
        StoredOptions {
            filter: v3.filter,
            prefix: v3.prefix,
            memtable_size: v3.memtable_size,
            l0_compaction_trigger: v3.l0_compaction_trigger,
            compression: v3.compression,
            range: v3.range.map(|r| RangeChoice::Fixed {
                bits_per_key: r.bits_per_key,
                max_range: r.max_range,
            }),
            keyspaces: Vec::new(),
        }
    }
}

/// Version 2 of the record: version 3 without the range filter setting.
#[derive(Deserialize)]
pub(super) struct StoredOptionsV2 {
    filter: FilterChoice,
    prefix: PrefixChoice,
    memtable_size: u64,
    l0_compaction_trigger: u64,
    compression: Compressions,
}

impl From<StoredOptionsV2> for StoredOptions {
    fn from(v2: StoredOptionsV2) -> Self {
        StoredOptions {
            filter: v2.filter,
            prefix: v2.prefix,
            memtable_size: v2.memtable_size,
            l0_compaction_trigger: v2.l0_compaction_trigger,
            compression: v2.compression,
            range: None,
            keyspaces: Vec::new(),
        }
    }
}

/// Version 1 of the record: version 2 without the compression setting.
#[derive(Deserialize)]
pub(super) struct StoredOptionsV1 {
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
            compression: Compressions::default(),
            range: None,
            keyspaces: Vec::new(),
        }
    }
}
