//! Partitioned filters in RocksDB SSTs (`partition_filters` with a two-level index). The
//! metaindex names a partition index (`partitionedfilter.<name>`): an index block whose entries
//! hold each partition's last key and block handle. Each partition is a whole filter block of
//! the policy's kind, a built-in one or an lsm-bloom block (FORMAT.md §1), described by
//! `rocksdb_builtin::describe`. This reads the index and every partition, each verified by its
//! checksum, and reports them one by one and in total. Layout: FORMAT.md §5.

use serde::Serialize;

use super::rocksdb_block::{block_entries, varint, Handle, Sst, BLOCK_TRAILER};
use super::rocksdb_builtin::{describe, BuiltinFilterInfo};
use super::FilterReport;

/// One partition of a partitioned filter.
#[derive(Clone, Debug, Serialize)]
pub struct PartitionReport {
    /// Block offset in the file.
    pub offset: u64,
    /// Block size (without RocksDB's 5-byte trailer).
    pub bytes: u64,
    /// "valid" or "invalid".
    pub status: &'static str,
    /// Why the block is invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// An lsm-bloom block, decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lsm_bloom: Option<FilterReport>,
    /// A RocksDB built-in filter, by its metadata (its keys estimated as the table's filter
    /// entries in proportion to its array).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub builtin: Option<BuiltinFilterInfo>,
}

/// A partitioned filter in total.
#[derive(Clone, Debug, Serialize)]
pub struct PartitionSummary {
    /// Partitions the index names.
    pub partitions: u64,
    /// Partitions that failed their checksum or validation.
    pub invalid: u64,
    /// Bytes of the partitions' blocks.
    pub bytes: u64,
    /// Filter bytes per filter entry, in bits (all partitions, metadata included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bits_per_key: Option<f64>,
    /// The partitions' false-positive rates, weighted by their keys.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimated_fpr: Option<f64>,
}

/// The partitions' handles, in key order, from the partition index `index`. From
/// format_version 4 on, an entry is `shared, non_shared` (varints) and the key's new bytes,
/// then a whole handle where the key shares nothing with the previous one, else only the size
/// as a zigzag varint delta from the previous size (the block follows the previous one and
/// its trailer); before 4, entries have a value length and the value is a whole handle.
fn handles(index: &[u8], value_deltas: bool) -> Result<Vec<Handle>, String> {
    if !value_deltas {
        return block_entries(index, "partition index")?
            .into_iter()
            .map(|(_, value)| {
                let mut pos = 0;
                Handle::decode(&value, &mut pos)
                    .ok_or_else(|| "partition index entry holds no block handle".to_string())
            })
            .collect();
    }
    let bad = |m: &str| format!("partition index block: {m}");
    let count = index
        .len()
        .checked_sub(4)
        .map(|at| u32::from_le_bytes([index[at], index[at + 1], index[at + 2], index[at + 3]]))
        .ok_or_else(|| bad("shorter than its restart count"))?;
    let restarts = u64::from(count & 0x7fff_ffff);
    let end = restarts
        .checked_mul(4)
        .and_then(|r| r.checked_add(4))
        .and_then(|r| (index.len() as u64).checked_sub(r))
        .ok_or_else(|| bad("restart array larger than the block"))? as usize;
    let (mut pos, mut key_len) = (0usize, 0u64);
    let mut out: Vec<Handle> = Vec::new();
    while pos < end {
        let cut = || bad("entry cut short");
        let shared = varint(&index[..end], &mut pos).ok_or_else(cut)?;
        let non_shared = varint(&index[..end], &mut pos).ok_or_else(cut)?;
        if shared > key_len {
            return Err(bad("entry shares more bytes than the previous key has"));
        }
        key_len = shared.saturating_add(non_shared);
        pos = u64::try_from(pos)
            .ok()
            .and_then(|p| p.checked_add(non_shared))
            .filter(|&p| p <= end as u64)
            .ok_or_else(|| bad("key runs past the entries"))? as usize;
        let handle = match out.last() {
            Some(prev) if shared > 0 => {
                let zigzag = varint(&index[..end], &mut pos).ok_or_else(cut)?;
                let delta = (zigzag >> 1) as i64 ^ -((zigzag & 1) as i64);
                let offset = prev
                    .offset
                    .checked_add(prev.size)
                    .and_then(|o| o.checked_add(BLOCK_TRAILER));
                let size = prev.size.checked_add_signed(delta);
                match (offset, size) {
                    (Some(offset), Some(size)) => Handle { offset, size },
                    _ => return Err(bad("a size delta leaves the file")),
                }
            }
            _ => Handle::decode(&index[..end], &mut pos).ok_or_else(cut)?,
        };
        out.push(handle);
    }
    Ok(out)
}

/// Reads the partition index at `index` and every partition it names. `entries` is the
/// table's `rocksdb.num.filter_entries`; `lsm_bloom` says the partitions are lsm-bloom blocks.
pub(super) fn read(
    sst: &Sst<'_>,
    index: Handle,
    format_version: u32,
    entries: Option<u64>,
    lsm_bloom: bool,
) -> Result<(Vec<PartitionReport>, PartitionSummary), String> {
    let block = index.read(sst, "partition index")?;
    let handles = handles(block, format_version >= 4)?;
    // A built-in partition's keys, estimated from its share of the array bytes.
    let array_total: u64 = handles.iter().map(|h| h.size.saturating_sub(5)).sum();
    let mut reports = Vec::with_capacity(handles.len());
    let (mut weighted, mut keys) = (0.0, 0u64);
    for h in handles {
        let share = entries.filter(|_| array_total > 0).map(|n| {
            (n as f64 * h.size.saturating_sub(5) as f64 / array_total as f64).round() as u64
        });
        let d = describe(sst, h, "filter partition", lsm_bloom, share);
        if let Some(f) = &d.lsm_bloom {
            weighted += f.info.expected_fpr * f.info.n as f64;
            keys += f.info.n;
        }
        if let Some((p, n)) = d.builtin.as_ref().and_then(|b| b.estimated_fpr.zip(share)) {
            weighted += p * n as f64;
            keys += n;
        }
        reports.push(PartitionReport {
            offset: h.offset,
            bytes: h.size,
            status: d.status,
            error: d.error,
            lsm_bloom: d.lsm_bloom,
            builtin: d.builtin,
        });
    }
    let bytes: u64 = reports.iter().map(|r| r.bytes).sum();
    let summary = PartitionSummary {
        partitions: reports.len() as u64,
        invalid: reports.iter().filter(|r| r.status != "valid").count() as u64,
        bytes,
        bits_per_key: entries
            .filter(|&n| n > 0)
            .map(|n| bytes as f64 * 8.0 / n as f64),
        estimated_fpr: (keys > 0).then(|| weighted / keys as f64),
    };
    Ok((reports, summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Value-delta entries: a whole handle where the key shares nothing, else a size delta.
    #[test]
    fn index_entries_decode_whole_handles_and_size_deltas() {
        // "k1" -> (10, 100); shared 1, "2" -> size 98 (delta -2, zigzag 3); "x" -> (300, 7).
        let mut b = vec![0, 2, b'k', b'1', 10, 100];
        b.extend_from_slice(&[1, 1, b'2', 3]);
        b.extend_from_slice(&[0, 1, b'x', 0xac, 0x02, 7]);
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        let h = handles(&b, true).unwrap();
        assert_eq!(
            h,
            [
                Handle {
                    offset: 10,
                    size: 100
                },
                Handle {
                    offset: 115,
                    size: 98
                },
                Handle {
                    offset: 300,
                    size: 7
                },
            ]
        );
        let mut bad = b.clone();
        bad[6] = 5; // shares 5 bytes of a 2-byte key
        assert!(handles(&bad, true).is_err());
        let mut bad = b.clone();
        bad.splice(9..10, [0xff, 0x01]); // zigzag 255: a size delta of -128, below zero
        assert!(handles(&bad, true).is_err());
    }
}
