//! Filter blocks of RocksDB SSTs as `dump_filter` describes them (`describe`): an lsm-bloom
//! block decoded in full, a RocksDB built-in filter from its 5 bytes of metadata (kind, probes
//! or blocks) with the rate its shape predicts. The SST reader (`rocksdb_sst.rs`) describes a
//! table's filter block with it, the partition reader (`rocksdb_partitions.rs`) each
//! partition. The metadata layouts are RocksDB's (`util/bloom_impl.h`,
//! `table/block_based/filter_policy.cc`).

use serde::Serialize;

use super::rocksdb_block::{Handle, Sst};
use super::FilterReport;
use crate::filter::math;

/// One filter block, read and checked: its status, and the lsm-bloom block or built-in filter
/// it holds.
pub(super) struct Described {
    /// "valid" or "invalid".
    pub(super) status: &'static str,
    /// Why the block is invalid.
    pub(super) error: Option<String>,
    pub(super) lsm_bloom: Option<FilterReport>,
    pub(super) builtin: Option<BuiltinFilterInfo>,
}

/// Reads the filter block at `h` (its checksum first; `what` names it in an error) and
/// describes it: an lsm-bloom block when `lsm_bloom`, else a built-in filter of `entries` keys.
pub(super) fn describe(
    sst: &Sst<'_>,
    h: Handle,
    what: &str,
    lsm_bloom: bool,
    entries: Option<u64>,
) -> Described {
    let mut d = Described {
        status: "valid",
        error: None,
        lsm_bloom: None,
        builtin: None,
    };
    let block = match h.read(sst, what) {
        Ok(b) => b,
        Err(e) => {
            d.status = "invalid";
            d.error = Some(e);
            return d;
        }
    };
    if !lsm_bloom {
        d.builtin = Some(builtin_info(block, entries));
        return d;
    }
    match FilterReport::from_block(block) {
        Ok(f) => d.lsm_bloom = Some(f),
        Err(e) => {
            d.status = "invalid";
            d.error = Some(e.to_string());
        }
    }
    d
}

/// What a RocksDB built-in filter's 5 bytes of metadata say.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BuiltinFilterInfo {
    /// "fast_local_bloom", "standard128_ribbon", "legacy_bloom", "always_false" (no keys)
    /// or "always_true" (a marker RocksDB reads as "may match everything").
    pub kind: &'static str,
    /// Bytes of the bit array (without the metadata).
    pub array_bytes: u64,
    /// Bloom: probes per key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_probes: Option<u32>,
    /// Ribbon: 128-slot blocks; legacy Bloom: cache lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_blocks: Option<u64>,
    /// Array bits per filter entry (from `rocksdb.num.filter_entries`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bits_per_key: Option<f64>,
    /// False-positive rate predicted from the shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_fpr: Option<f64>,
}

/// Decodes a built-in filter's metadata the way RocksDB's `GetBuiltinFilterBitsReader` does.
pub fn builtin_info(block: &[u8], entries: Option<u64>) -> BuiltinFilterInfo {
    const META: usize = 5;
    let mut info = BuiltinFilterInfo {
        kind: "always_false",
        array_bytes: 0,
        num_probes: None,
        num_blocks: None,
        bits_per_key: None,
        estimated_fpr: None,
    };
    if block.len() <= META {
        return info;
    }
    let len = block.len() - META;
    info.array_bytes = len as u64;
    let bits_per_key = entries
        .filter(|&n| n > 0)
        .map(|n| len as f64 * 8.0 / n as f64);
    info.bits_per_key = bits_per_key;
    let meta = &block[len..];
    match meta[0] as i8 {
        -1 => {
            // New Bloom: sub-implementation, block size and probes, two zero bytes.
            let probes = u32::from(meta[2] & 31);
            let log2_block = ((meta[2] >> 5) & 7) + 6;
            if meta[1] == 0 && log2_block == 6 && (1..=30).contains(&probes) && meta[3..] == [0, 0]
            {
                info.kind = "fast_local_bloom";
                info.num_probes = Some(probes);
                info.estimated_fpr = bits_per_key.map(|b| math::blocked_fpr(b, probes));
            } else {
                info.kind = "always_true";
            }
        }
        -2 => {
            let blocks = u64::from(meta[2]) | u64::from(meta[3]) << 8 | u64::from(meta[4]) << 16;
            if blocks < 2 {
                info.kind = "always_true";
            } else {
                info.kind = "standard128_ribbon";
                info.num_blocks = Some(blocks);
                // 16 bytes per block and result column: 2^-columns (fractional columns are
                // split between c and c + 1 across the blocks).
                let columns = len as f64 / (blocks as f64 * 16.0);
                info.estimated_fpr = Some(2f64.powf(-columns));
            }
        }
        p if p >= 1 => {
            let lines = u64::from(u32::from_le_bytes([meta[1], meta[2], meta[3], meta[4]]));
            info.kind = "legacy_bloom";
            info.num_probes = Some(p as u32);
            info.num_blocks = Some(lines);
            info.estimated_fpr = bits_per_key.map(|b| math::blocked_fpr(b, p as u32));
        }
        _ => info.kind = "always_true",
    }
    info
}
