//! The text form of `dump_filter`'s reports (`Display`); the JSON form is their `serde`
//! serialisation.

use std::fmt;

use super::rocksdb_dir::RocksTotals;
use super::rocksdb_sst::{RocksFilterReport, RocksTableReport};
use super::{printable, FilterReport, RangeFilterReport, Report, TableReport, Totals};

impl fmt::Display for FilterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.info;
        writeln!(f, "  format version  {}", i.version)?;
        writeln!(f, "  kind            {}", i.kind)?;
        writeln!(f, "  hash            {} (seed {})", i.hash, i.seed)?;
        writeln!(f, "  k (probes)      {}", i.k)?;
        writeln!(
            f,
            "  m (bits)        {}{}",
            i.m,
            if i.lines > 0 {
                format!(" ({} lines of 64 bytes)", i.lines)
            } else {
                String::new()
            }
        )?;
        writeln!(f, "  n (keys)        {}", i.n)?;
        writeln!(f, "  bits/key        {:.3}", i.bits_per_key)?;
        writeln!(f, "  block bytes     {}", i.block_bytes)?;
        writeln!(f, "  fill ratio      {:.4}", i.fill_ratio)?;
        writeln!(f, "  expected FPR    {:.4}%", i.expected_fpr * 100.0)?;
        writeln!(
            f,
            "  FPR from fill   {:.4}%",
            i.estimated_fpr_from_fill * 100.0
        )?;
        writeln!(
            f,
            "  checksum        {} (crc32 {:#010x})",
            self.checksum, i.crc32
        )
    }
}

impl fmt::Display for RangeFilterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.info;
        writeln!(f, "  format version  {}", i.version)?;
        writeln!(f, "  kind            {} (seed {})", i.kind, i.seed)?;
        writeln!(f, "  n (keys)        {}", i.n)?;
        writeln!(f, "  values stored   {}", i.values)?;
        writeln!(
            f,
            "  universe r      {} ({} low bits per value)",
            i.universe, i.low_bits
        )?;
        writeln!(f, "  longest range   {} points", i.max_range)?;
        writeln!(f, "  point width     {} bytes after the prefix", i.width)?;
        writeln!(f, "  common prefix   \"{}\"", i.prefix)?;
        writeln!(
            f,
            "  bits/key        {:.3} ({:.3} in memory)",
            i.bits_per_key, i.memory_bits_per_key
        )?;
        writeln!(f, "  block bytes     {}", i.block_bytes)?;
        for r in &i.expected_rate {
            writeln!(
                f,
                "  expected FPR    {:.4}% at ℓ = {} (empty ranges)",
                r.rate * 100.0,
                r.points
            )?;
        }
        writeln!(
            f,
            "  checksum        {} (crc32 {:#010x})",
            self.checksum, i.crc32
        )
    }
}

impl fmt::Display for TableReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.properties;
        writeln!(
            f,
            "table {} (level {}, {} bytes)",
            self.file, self.level, self.file_bytes
        )?;
        writeln!(
            f,
            "  entries         {} ({} tombstones) in {} data blocks",
            p.entries, p.tombstones, p.data_blocks
        )?;
        if let Some((earliest, latest)) = p.expiry_span {
            writeln!(
                f,
                "  expiring        {} puts, expiries {earliest} .. {latest} ms since the epoch",
                p.expiring
            )?;
        }
        if !p.expiry_quantiles.is_empty() {
            let q: Vec<String> = p.expiry_quantiles.iter().map(u64::to_string).collect();
            writeln!(f, "  expiry ranks    1/16 .. 15/16: {}", q.join(" "))?;
        }
        if p.range_deletes > 0 {
            writeln!(
                f,
                "  deleted ranges  {} (hide keys in older tables)",
                p.range_deletes
            )?;
            for [first, last] in &self.deleted_ranges {
                writeln!(f, "    {first} ..= {last}")?;
            }
            let more = p
                .range_deletes
                .saturating_sub(self.deleted_ranges.len() as u64);
            if more > 0 {
                writeln!(f, "    … {more} more")?;
            }
        }
        writeln!(
            f,
            "  data blocks     {} bytes on disk, {} uncompressed ({}, table format {})",
            p.data_bytes, p.raw_data_bytes, p.compression, self.format_version
        )?;
        writeln!(
            f,
            "  key range       {} .. {}",
            printable(&p.min_key),
            printable(&p.max_key)
        )?;
        writeln!(
            f,
            "  written by      {} at {} ms since epoch",
            p.writer, p.created_unix_ms
        )?;
        match (&self.filter, &self.filter_error) {
            (Some(r), _) => {
                writeln!(
                    f,
                    "  filter block (policy {} bits/key)",
                    p.filter_bits_per_key
                )?;
                write!(f, "{r}")?;
                writeln!(
                    f,
                    "  FPR, 100k random probes {:.4}%",
                    self.observed_fpr_random_probes.unwrap_or(0.0) * 100.0
                )
            }
            (None, Some(e)) => writeln!(
                f,
                "  filter block    INVALID: {e} (table is read without a filter)"
            ),
            (None, None) => writeln!(f, "  filter block    none"),
        }?;
        match (&self.prefix_filter, &self.prefix_filter_error) {
            (Some(r), _) => {
                writeln!(
                    f,
                    "  prefix filter (rule {}, {} distinct prefixes)",
                    p.prefix_extractor.as_deref().unwrap_or("?"),
                    p.prefixes
                )?;
                write!(f, "{r}")
            }
            (None, Some(e)) => writeln!(
                f,
                "  prefix filter   INVALID: {e} (prefix scans read the table)"
            ),
            (None, None) if self.format_version >= 2 => writeln!(f, "  prefix filter   none"),
            (None, None) => writeln!(f, "  prefix filter   none (table format 1)"),
        }?;
        match (&self.range_filter, &self.range_filter_error) {
            (Some(r), _) => {
                if let Some(policy) = p.range_filter {
                    writeln!(
                        f,
                        "  range filter (policy {} bits/key, ranges up to {} points)",
                        policy.bits(),
                        policy.max_range()
                    )?;
                }
                write!(f, "{r}")
            }
            (None, Some(e)) => writeln!(f, "  range filter    INVALID: {e} (scans read the table)"),
            (None, None) if self.format_version >= 4 => writeln!(f, "  range filter    none"),
            (None, None) => writeln!(
                f,
                "  range filter    none (table format {})",
                self.format_version
            ),
        }
    }
}

impl fmt::Display for Totals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} tables, {} entries, filters {} ({:.2} bits/key requested), filter memory {} bytes ({:.2} bits/key), expected FPR sum {:.4}%, observed (random probes) {:.4}%, invalid filters {}",
            self.tables,
            self.entries,
            if self.kinds.is_empty() {
                "none".to_string()
            } else {
                self.kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join("+")
            },
            self.requested_bits_per_key,
            self.filter_bytes,
            self.bits_per_key,
            self.expected_fpr_sum * 100.0,
            self.observed_fpr_sum * 100.0,
            self.invalid_filters
        )?;
        writeln!(
            f,
            "  data blocks: {} bytes on disk, {} uncompressed ({:.2}x)",
            self.data_bytes,
            self.raw_data_bytes,
            self.raw_data_bytes as f64 / self.data_bytes.max(1) as f64
        )?;
        if self.prefix_filters > 0 {
            writeln!(
                f,
                "  prefix filters: {} tables under {}, {} prefixes, {} bytes, expected FPR sum {:.4}%",
                self.prefix_filters,
                self.prefix_rules.join(", "),
                self.prefixes,
                self.prefix_filter_bytes,
                self.prefix_expected_fpr_sum * 100.0
            )?;
        }
        if self.range_filters > 0 {
            writeln!(
                f,
                "  range filters: {} tables, {} bytes",
                self.range_filters, self.range_filter_bytes
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Filter(r) => {
                writeln!(f, "filter block")?;
                write!(f, "{r}")
            }
            Report::RangeFilter(r) => {
                writeln!(f, "range filter block")?;
                write!(f, "{r}")
            }
            Report::Table(t) => write!(f, "{t}"),
            Report::Database(d) => {
                writeln!(f, "database")?;
                match &d.recorded_options {
                    Some((filter, prefix, compression, range)) => {
                        writeln!(
                            f,
                            "recorded options: {filter}; {prefix}; {compression}; {range}"
                        )?;
                    }
                    None => writeln!(f, "recorded options: none (written before records)")?,
                }
                write_levels(f, &d.levels, &d.level_totals)?;
                write!(f, "total: {}", d.totals)?;
                for k in &d.keyspaces {
                    writeln!(f, "keyspace {:?} (id {})", k.name, k.id)?;
                    if k.own_settings.is_empty() {
                        writeln!(f, "  settings: the store's")?;
                    }
                    for (setting, value) in &k.own_settings {
                        writeln!(f, "  own {setting}: {value}")?;
                    }
                    write_levels(f, &k.levels, &k.level_totals)?;
                    write!(f, "total: {}", k.totals)?;
                    if let Some(a) = &k.filter_budget {
                        writeln!(f, "its part of the budget:")?;
                        write!(f, "{a}")?;
                    }
                }
                if let Some(a) = &d.filter_budget {
                    if d.budget_from == Some("record") {
                        writeln!(f, "budget from the options record:")?;
                    }
                    if !d.keyspaces.is_empty() {
                        writeln!(
                            f,
                            "the default keyspace's part (the parts are split by keys, as at \
                             open: a directory keeps no lookup counts):"
                        )?;
                    }
                    write!(f, "{a}")?;
                }
                Ok(())
            }
            Report::RocksdbTable(t) => write!(f, "{t}"),
            Report::RocksdbDatabase(d) => {
                writeln!(
                    f,
                    "RocksDB database (MANIFEST {})",
                    d.manifest.as_deref().unwrap_or("?")
                )?;
                write_levels(f, &d.levels, &d.level_totals)?;
                if let Some(why) = &d.levels_unknown {
                    writeln!(f, "levels unknown: {why}")?;
                    for t in &d.unleveled {
                        write!(f, "{t}")?;
                    }
                }
                write!(f, "total: {}", d.totals)
            }
        }
    }
}

/// Each non-empty level: its totals line, then its tables.
fn write_levels<T: fmt::Display, U: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    levels: &[Vec<T>],
    totals: &[U],
) -> fmt::Result {
    for (level, (tables, totals)) in levels.iter().zip(totals).enumerate() {
        if tables.is_empty() {
            continue;
        }
        write!(f, "level {level}: {totals}")?;
        for t in tables {
            write!(f, "{t}")?;
        }
    }
    Ok(())
}

impl fmt::Display for RocksTotals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} tables, {} entries, filters {}, {} filter entries, filter memory {} bytes ({:.2} bits/key), expected FPR sum {:.4}%, invalid filters {}",
            self.tables,
            self.entries,
            if self.kinds.is_empty() { "none".to_string() } else { self.kinds.join("+") },
            self.filter_entries,
            self.filter_bytes,
            self.bits_per_key,
            self.expected_fpr_sum * 100.0,
            self.invalid_filters
        )
    }
}

impl fmt::Display for RocksTableReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = self
            .level
            .map_or_else(String::new, |l| format!("level {l}, "));
        writeln!(
            f,
            "RocksDB table {} ({level}{} bytes, format_version {}, checksum {})",
            self.file, self.file_bytes, self.format_version, self.checksum_type
        )?;
        let opt = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
        writeln!(f, "  entries         {}", opt(self.entries))?;
        writeln!(
            f,
            "  filter policy   {} ({} filter entries, {} bytes)",
            self.filter_policy.as_deref().unwrap_or("none"),
            opt(self.filter_entries),
            opt(self.filter_size)
        )?;
        if self.filters.is_empty() {
            writeln!(f, "  filter block    none")?;
        }
        for r in &self.filters {
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl fmt::Display for RocksFilterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "  {} at {} ({} bytes): {}",
            self.metaindex_key, self.offset, self.bytes, self.status
        )?;
        if let Some(e) = &self.error {
            writeln!(
                f,
                "  INVALID: {e} (RocksDB reads this table as if every key may match)"
            )?;
        }
        if let Some(r) = &self.lsm_bloom {
            write!(f, "{r}")?;
        }
        if let Some(b) = &self.builtin {
            writeln!(f, "  RocksDB filter  {}", b.kind)?;
            writeln!(f, "  array bytes     {}", b.array_bytes)?;
            if let Some(k) = b.num_probes {
                writeln!(f, "  probes          {k}")?;
            }
            if let Some(n) = b.num_blocks {
                writeln!(f, "  blocks          {n}")?;
            }
            if let Some(bpk) = b.bits_per_key {
                writeln!(f, "  bits/key        {bpk:.3}")?;
            }
            if let Some(p) = b.estimated_fpr {
                writeln!(f, "  estimated FPR   {:.4}%", p * 100.0)?;
            }
        }
        if let Some(s) = &self.partition_summary {
            writeln!(
                f,
                "  partitions      {} ({} bytes, {} invalid)",
                s.partitions, s.bytes, s.invalid
            )?;
            if let Some(bpk) = s.bits_per_key {
                writeln!(f, "  bits/key        {bpk:.3} (all partitions)")?;
            }
            if let Some(p) = s.estimated_fpr {
                writeln!(f, "  estimated FPR   {:.4}% (keys-weighted)", p * 100.0)?;
            }
            for (i, p) in self.partitions.iter().enumerate() {
                write!(
                    f,
                    "    #{i} at {} ({} bytes): {}",
                    p.offset, p.bytes, p.status
                )?;
                if let Some(b) = &p.builtin {
                    write!(f, ", {}", b.kind)?;
                    if let Some(k) = b.num_probes {
                        write!(f, ", {k} probes")?;
                    }
                    if let Some(e) = b.estimated_fpr {
                        write!(f, ", ~{:.3}%", e * 100.0)?;
                    }
                }
                if let Some(l) = &p.lsm_bloom {
                    let i = &l.info;
                    write!(
                        f,
                        ", {} k={} n={} {:.2} bits/key, {:.3}%",
                        i.kind,
                        i.k,
                        i.n,
                        i.bits_per_key,
                        i.expected_fpr * 100.0
                    )?;
                }
                if let Some(e) = &p.error {
                    write!(f, ": {e}")?;
                }
                writeln!(f)?;
            }
        }
        Ok(())
    }
}
