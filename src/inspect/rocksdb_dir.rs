//! A RocksDB database directory for `dump_filter`: its live SST files (from the MANIFEST that
//! `CURRENT` names) with their levels, each decoded by `rocksdb_sst`, and totals per level.
//!
//! The MANIFEST is a RocksDB log (32 KiB blocks of records with 7-byte headers, or 11 with a
//! recyclable log) of version edits; the edits' tags are varints, and the ones read here are
//! new file (103: level, file number, ...) and deleted file (6: level, number). Tags marked
//! safe to ignore (bit 13) are skipped by their length. When the MANIFEST holds something this
//! reader does not know, the report says why and lists every `*.sst` in the directory without
//! levels: it shows levels only where it can tell.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::rocksdb_sst::{read_table_file, varint, RocksTableReport};
use crate::error::{Error, Result};

/// A RocksDB database directory.
#[derive(Clone, Debug, Serialize)]
pub struct RocksDatabaseReport {
    /// The MANIFEST read, if any.
    pub manifest: Option<String>,
    /// Why levels are unknown (the MANIFEST could not be read); `None` when they are known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub levels_unknown: Option<String>,
    /// Live tables per level, level 0 first (empty when levels are unknown).
    pub levels: Vec<Vec<RocksTableReport>>,
    /// Tables whose level is unknown.
    pub unleveled: Vec<RocksTableReport>,
    /// Totals per level.
    pub level_totals: Vec<RocksTotals>,
    /// Totals over all tables.
    pub totals: RocksTotals,
}

/// Totals over some tables.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RocksTotals {
    /// Tables.
    pub tables: u64,
    /// Entries (`rocksdb.num.entries`).
    pub entries: u64,
    /// Filter entries (`rocksdb.num.filter_entries`).
    pub filter_entries: u64,
    /// Bytes of filter blocks.
    pub filter_bytes: u64,
    /// Filter bits per filter entry.
    pub bits_per_key: f64,
    /// Sum of the filters' estimated FPRs (expected wasted reads of an absent key that
    /// reaches every table).
    pub expected_fpr_sum: f64,
    /// Filter kinds seen ("lsm_bloom:blocked", "fast_local_bloom", ...).
    pub kinds: Vec<String>,
    /// Filter blocks that failed validation.
    pub invalid_filters: u64,
}

impl RocksTotals {
    fn add(&mut self, t: &RocksTableReport) {
        self.tables += 1;
        self.entries = self.entries.saturating_add(t.entries.unwrap_or(0));
        self.filter_entries = self
            .filter_entries
            .saturating_add(t.filter_entries.unwrap_or(0));
        for f in &t.filters {
            self.filter_bytes = self.filter_bytes.saturating_add(f.bytes);
            let (kind, fpr) = match (&f.lsm_bloom, &f.builtin) {
                (Some(l), _) => (
                    format!("lsm_bloom:{}", l.info.kind),
                    Some(l.info.expected_fpr),
                ),
                (None, Some(b)) => (b.kind.to_string(), b.estimated_fpr),
                (None, None) => (f.status.to_string(), None),
            };
            self.expected_fpr_sum += fpr.unwrap_or(0.0);
            if !self.kinds.contains(&kind) {
                self.kinds.push(kind);
            }
            self.invalid_filters += u64::from(f.status == "invalid");
        }
        self.bits_per_key = if self.filter_entries == 0 {
            0.0
        } else {
            self.filter_bytes as f64 * 8.0 / self.filter_entries as f64
        };
    }
}

/// True if `dir` looks like a RocksDB database (a `CURRENT` naming a `MANIFEST-`).
pub fn is_rocksdb_dir(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("CURRENT")).is_ok_and(|s| s.starts_with("MANIFEST-"))
}

fn skip_len_prefixed(buf: &[u8], pos: &mut usize) -> Option<()> {
    let n = usize::try_from(varint(buf, pos)?).ok()?;
    *pos = pos.checked_add(n).filter(|&e| e <= buf.len())?;
    Some(())
}

/// The records of a RocksDB log file, reassembled from fragments.
pub(crate) fn log_records(bytes: &[u8]) -> std::result::Result<Vec<Vec<u8>>, String> {
    const BLOCK: usize = 32 * 1024;
    let mut out = Vec::new();
    let mut partial: Option<Vec<u8>> = None;
    let mut pos = 0;
    while pos < bytes.len() {
        let left_in_block = BLOCK - pos % BLOCK;
        if left_in_block < 7 {
            pos += left_in_block;
            continue;
        }
        let Some(h) = bytes.get(pos..pos + 7) else {
            break; // a torn tail
        };
        let len = usize::from(u16::from_le_bytes([h[4], h[5]]));
        let kind = h[6];
        let header = if (5..=8).contains(&kind) || kind >= 11 {
            11
        } else {
            7
        };
        if kind == 0 && len == 0 {
            pos += left_in_block; // pre-allocated zeros: skip the block's rest
            continue;
        }
        let start = pos + header;
        let Some(data) = bytes.get(start..start + len) else {
            break;
        };
        pos = start + len;
        match kind {
            1 | 5 => out.push(data.to_vec()),
            2 | 6 => partial = Some(data.to_vec()),
            3 | 7 => match partial.as_mut() {
                Some(p) => p.extend_from_slice(data),
                None => return Err("MANIFEST: a middle fragment without a first".into()),
            },
            4 | 8 => match partial.take() {
                Some(mut p) => {
                    p.extend_from_slice(data);
                    out.push(p);
                }
                None => return Err("MANIFEST: a last fragment without a first".into()),
            },
            _ => {} // compression / timestamp-size metadata records: not edits
        }
    }
    Ok(out)
}

/// Live files `(number → level)` after replaying every edit.
pub(crate) fn live_files(records: &[Vec<u8>]) -> std::result::Result<BTreeMap<u64, u32>, String> {
    let mut live = BTreeMap::new();
    for rec in records {
        let mut pos = 0;
        let bad = |what: &str| format!("MANIFEST: version edit with a bad {what}");
        while pos < rec.len() {
            let tag = varint(rec, &mut pos).ok_or_else(|| bad("tag"))?;
            let ok = match tag {
                1 | 201 => skip_len_prefixed(rec, &mut pos),
                2 | 3 | 4 | 9 | 10 | 200 | 203 | 300 => varint(rec, &mut pos).map(|_| ()),
                202 => Some(()),
                5 => varint(rec, &mut pos).and_then(|_| skip_len_prefixed(rec, &mut pos)),
                6 => (|| {
                    varint(rec, &mut pos)?;
                    let number = varint(rec, &mut pos)? & 0x3FFF_FFFF_FFFF_FFFF;
                    live.remove(&number);
                    Some(())
                })(),
                103 => (|| {
                    let level = u32::try_from(varint(rec, &mut pos)?).ok()?;
                    let number = varint(rec, &mut pos)? & 0x3FFF_FFFF_FFFF_FFFF;
                    varint(rec, &mut pos)?; // size
                    skip_len_prefixed(rec, &mut pos)?;
                    skip_len_prefixed(rec, &mut pos)?;
                    varint(rec, &mut pos)?;
                    varint(rec, &mut pos)?;
                    loop {
                        if varint(rec, &mut pos)? == 1 {
                            break;
                        }
                        skip_len_prefixed(rec, &mut pos)?;
                    }
                    live.insert(number, level);
                    Some(())
                })(),
                t if t & (1 << 13) != 0 => skip_len_prefixed(rec, &mut pos),
                other => return Err(format!("MANIFEST: version edit tag {other} not understood")),
            };
            ok.ok_or_else(|| bad(&format!("field after tag {tag}")))?;
        }
    }
    Ok(live)
}

/// Reads the RocksDB database directory `dir`.
pub fn read_database(dir: &Path) -> Result<RocksDatabaseReport> {
    let current = std::fs::read_to_string(dir.join("CURRENT"))
        .map_err(|e| Error::io(format!("reading {}", dir.join("CURRENT").display()), e))?;
    let manifest_name = current.trim().to_string();
    if manifest_name.contains('/') || !manifest_name.starts_with("MANIFEST-") {
        return Err(Error::corruption(
            dir.join("CURRENT"),
            format!("names {manifest_name:?}, not a MANIFEST in this directory"),
        ));
    }
    let manifest_path = dir.join(&manifest_name);
    let levels_known = std::fs::read(&manifest_path)
        .map_err(|e| format!("reading {manifest_name}: {e}"))
        .and_then(|b| log_records(&b))
        .and_then(|r| live_files(&r));
    let mut report = RocksDatabaseReport {
        manifest: Some(manifest_name),
        levels_unknown: None,
        levels: Vec::new(),
        unleveled: Vec::new(),
        level_totals: Vec::new(),
        totals: RocksTotals::default(),
    };
    match levels_known {
        Ok(live) => {
            for (number, level) in live {
                let path = dir.join(format!("{number:06}.sst"));
                let mut t = read_table_file(&path)?;
                t.level = Some(level);
                let l = level as usize;
                if report.levels.len() <= l {
                    report.levels.resize_with(l + 1, Vec::new);
                    report.level_totals.resize_with(l + 1, RocksTotals::default);
                }
                report.level_totals[l].add(&t);
                report.totals.add(&t);
                report.levels[l].push(t);
            }
        }
        Err(why) => {
            report.levels_unknown = Some(why);
            let mut names: Vec<_> = std::fs::read_dir(dir)
                .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sst"))
                .collect();
            names.sort();
            for p in names {
                let t = read_table_file(&p)?;
                report.totals.add(&t);
                report.unleveled.push(t);
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u8, data: &[u8]) -> Vec<u8> {
        let mut r = vec![0, 0, 0, 0];
        r.extend_from_slice(&(data.len() as u16).to_le_bytes());
        r.push(kind);
        r.extend_from_slice(data);
        r
    }

    #[test]
    fn edits_replay_to_the_live_files_with_levels() {
        // add file 7 at L0, add 9 at L6 (with a custom field), delete 7.
        let add = |level: u8, number: u8| {
            let mut e = vec![103, level, number, 10, 1, b'a', 1, b'z', 1, 2];
            e.extend_from_slice(&[2, 1, 0xAA, 1]); // custom tag 2, 1 byte, terminate
            e
        };
        let mut edit1 = vec![2, 5]; // log number
        edit1.extend(add(0, 7));
        let mut edit2 = add(6, 9);
        edit2.extend_from_slice(&[6, 0, 7]); // deleted L0 #7
        edit2.extend_from_slice(&[0x81, 0x40, 2, b'x', b'y']); // ignorable tag 8193
        let mut log = record(1, &edit1);
        log.extend(record(2, &edit2[..3]));
        log.extend(record(4, &edit2[3..]));
        let live = live_files(&log_records(&log).unwrap()).unwrap();
        assert_eq!(live.into_iter().collect::<Vec<_>>(), vec![(9, 6)]);
        // An unknown, non-ignorable tag is reported, not guessed past.
        let e = live_files(&[vec![77, 1]]).unwrap_err();
        assert!(e.contains("77"), "{e}");
        // Truncations never panic.
        for cut in 0..log.len() {
            if let Ok(r) = log_records(&log[..cut]) {
                let _ = live_files(&r);
            }
        }
    }
}
