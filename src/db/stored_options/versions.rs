//! Older versions of the options record (FORMAT.md §6), as they are read: each converts to
//! the current `StoredOptions`, with what it lacks at its default.

use serde::Deserialize;

use super::{Compressions, FilterChoice, PrefixChoice, RangeChoice, StoredOptions};

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
        }
    }
}
