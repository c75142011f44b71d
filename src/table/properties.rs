//! The properties block (FORMAT.md §3): the facts a table records about itself — counts, key
//! range, and the filters, prefix rule and compression it was written with — read at open and
//! checked against each other before the table is used.

use super::block::{seal, unseal, Cursor};
use super::compression::Compression;
use super::expiries::{expired_fraction, EXPIRY_QUANTILES};
use crate::coding::put_len_prefixed;
use crate::filter::{FilterKind, RangePolicy};

/// Facts about a table, stored in its properties block.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Properties {
    /// Entries (puts and tombstones).
    pub entries: u64,
    /// Tombstones among them.
    pub tombstones: u64,
    /// Data blocks.
    pub data_blocks: u64,
    /// Bytes of the data area (the data blocks as stored, compressed, trailers included, and
    /// the alignment padding between uncompressed format 3 blocks: FORMAT.md §3).
    pub data_bytes: u64,
    /// Bytes of data block payloads before compression, trailers excluded (versions 1 and 2:
    /// `data_bytes` less the 4-byte CRC of each block).
    pub raw_data_bytes: u64,
    /// The codec data blocks were compressed with (`None` before version 3); a block it did
    /// not shrink by an eighth is stored raw.
    #[serde(serialize_with = "ser_display")]
    pub compression: Compression,
    /// Smallest key.
    #[serde(serialize_with = "ser_key")]
    pub min_key: Vec<u8>,
    /// Largest key.
    #[serde(serialize_with = "ser_key")]
    pub max_key: Vec<u8>,
    /// Filter kind, `None` when the table has no filter.
    pub filter_kind: Option<FilterKind>,
    /// Bits per key the filter policy asked for.
    pub filter_bits_per_key: f64,
    /// Level the table was written for.
    pub level: u32,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_unix_ms: u64,
    /// The writer, e.g. `lsm-bloom 0.1.0`.
    pub writer: String,
    /// The prefix filter's kind, `None` when the table has no prefix filter (always `None`
    /// in table format 1).
    pub prefix_filter_kind: Option<FilterKind>,
    /// The prefix rule the prefix filter was built under (`PrefixExtractor::id`), `None`
    /// exactly when there is no prefix filter.
    pub prefix_extractor: Option<String>,
    /// Distinct prefixes in the prefix filter (keys the rule gives no prefix add none).
    pub prefixes: u64,
    /// The policy the range filter was built with, `None` when the table has none (always
    /// before table format 4).
    pub range_filter: Option<RangePolicy>,
    /// Puts that carry an expiry (always 0 before table format 5).
    pub expiring: u64,
    /// The earliest and the latest expiry among them, milliseconds since the Unix epoch;
    /// `None` exactly when `expiring` is 0.
    pub expiry_span: Option<(u64, u64)>,
    /// The expiries at ranks k/16 (k = 1..=15) of the expiring puts, from a sample
    /// (`expiries.rs`); empty when `expiring` is 0, and always before table format 7.
    pub expiry_quantiles: Vec<u64>,
    /// The expiring puts' key and value bytes (always 0 before table format 7).
    pub expiring_bytes: u64,
    /// Deleted ranges in the range-delete block (always 0 before table format 6): with them
    /// `min_key` and `max_key` bound the ranges too.
    pub range_deletes: u64,
    /// Where the range-delete block lies (offset and size, CRC included; `(0, 0)` when there
    /// are no deleted ranges).
    pub range_delete_block: (u64, u64),
}

/// The properties' range filter kind id of Grafite (FORMAT.md §3; `0` is none).
const RANGE_GRAFITE: u8 = 1;

fn ser_display<S: serde::Serializer>(c: &Compression, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&c.to_string())
}

fn ser_key<S: serde::Serializer>(k: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::coding::printable(k))
}

impl Properties {
    /// The properties block of a table of format `version`, CRC included; a key or writer
    /// name too long for its u32 length field is an error, and so are fields `version` cannot
    /// hold (a prefix filter before 2, compression before 3, a range filter before 4).
    pub fn encode(&self, version: u32) -> crate::error::Result<Vec<u8>> {
        let lacks = |what: &str| {
            Err(crate::error::Error::InvalidArgument(format!(
                "table format {version} cannot record {what}"
            )))
        };
        if version < 2 && self.prefix_filter_kind.is_some() {
            return lacks("a prefix filter");
        }
        if version < 3 && self.compression != Compression::None {
            return lacks("compression");
        }
        if version < 4 && self.range_filter.is_some() {
            return lacks("a range filter");
        }
        if version < 5 && self.expiring > 0 {
            return lacks("expiring entries");
        }
        if version < 6 && self.range_deletes > 0 {
            return lacks("deleted ranges");
        }
        let mut b = Vec::new();
        for v in [
            self.entries,
            self.tombstones,
            self.data_blocks,
            self.data_bytes,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for k in [&self.min_key, &self.max_key] {
            put_len_prefixed(&mut b, k, "key")?;
        }
        b.push(self.filter_kind.map_or(0, FilterKind::id));
        b.extend_from_slice(&self.filter_bits_per_key.to_le_bytes());
        b.extend_from_slice(&self.level.to_le_bytes());
        b.extend_from_slice(&self.created_unix_ms.to_le_bytes());
        put_len_prefixed(&mut b, self.writer.as_bytes(), "writer name")?;
        if version >= 2 {
            b.push(self.prefix_filter_kind.map_or(0, FilterKind::id));
            let rule = self.prefix_extractor.as_deref().unwrap_or_default();
            put_len_prefixed(&mut b, rule.as_bytes(), "prefix rule")?;
            b.extend_from_slice(&self.prefixes.to_le_bytes());
        }
        if version >= 3 {
            b.push(self.compression.id());
            b.extend_from_slice(&self.compression.level().to_le_bytes());
            b.extend_from_slice(&self.raw_data_bytes.to_le_bytes());
        }
        if version >= 4 {
            let (kind, bits, range) = match self.range_filter {
                Some(p) => (RANGE_GRAFITE, p.bits(), p.max_range()),
                None => (0, 0.0, 0),
            };
            b.push(kind);
            b.extend_from_slice(&bits.to_le_bytes());
            b.extend_from_slice(&range.to_le_bytes());
        }
        if version >= 5 {
            let (earliest, latest) = self.expiry_span.unwrap_or((0, 0));
            for v in [self.expiring, earliest, latest] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        if version >= 6 {
            let (offset, size) = self.range_delete_block;
            for v in [self.range_deletes, offset, size] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        if version >= 7 {
            b.extend_from_slice(&self.expiring_bytes.to_le_bytes());
            b.push(self.expiry_quantiles.len() as u8);
            for v in &self.expiry_quantiles {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        seal(&mut b, 0);
        Ok(b)
    }

    /// Validates and decodes the properties block (CRC included) of a table of format
    /// `version` (1: no prefix filter fields; 1 and 2: no compression fields; before 4: no
    /// range filter fields).
    pub fn decode(block: &[u8], version: u32) -> Result<Properties, String> {
        let mut c = Cursor::new(unseal(block)?);
        let (entries, tombstones, data_blocks, data_bytes) =
            (c.u64()?, c.u64()?, c.u64()?, c.u64()?);
        let min_key = c.len_prefixed()?.to_vec();
        let max_key = c.len_prefixed()?.to_vec();
        let kind_id = c.u8()?;
        let filter_kind = kind_from_id(kind_id, "filter")?;
        let filter_bits_per_key =
            f64::from_le_bytes(c.bytes(8)?.try_into().map_err(|_| "short field")?);
        let level = c.u32()?;
        let created_unix_ms = c.u64()?;
        let writer = String::from_utf8_lossy(c.len_prefixed()?).into_owned();
        let (prefix_filter_kind, prefix_extractor, prefixes) = if version >= 2 {
            let kind = kind_from_id(c.u8()?, "prefix filter")?;
            let rule = std::str::from_utf8(c.len_prefixed()?)
                .map_err(|_| "prefix rule is not UTF-8")?
                .to_string();
            let prefixes = c.u64()?;
            if kind.is_some() == rule.is_empty() || (kind.is_none() && prefixes > 0) {
                return Err(format!(
                    "prefix filter fields disagree: kind {kind:?}, rule {rule:?}, {prefixes} prefixes"
                ));
            }
            (kind, (!rule.is_empty()).then_some(rule), prefixes)
        } else {
            (None, None, 0)
        };
        let (compression, raw_data_bytes) = if version >= 3 {
            let id = c.u8()?;
            let level = c.u32()? as i32;
            let compression = Compression::from_parts(id, level)?;
            let raw = c.u64()?;
            if raw > compression.max_raw(data_bytes) {
                return Err(format!(
                    "{raw} raw data bytes cannot come from {data_bytes} bytes of {compression}"
                ));
            }
            (compression, raw)
        } else {
            let trailers = data_blocks.saturating_mul(4);
            (Compression::None, data_bytes.saturating_sub(trailers))
        };
        let range_filter = if version >= 4 {
            let kind = c.u8()?;
            let bits = f64::from_le_bytes(c.bytes(8)?.try_into().map_err(|_| "short field")?);
            let range = c.u64()?;
            match kind {
                0 if bits == 0.0 && range == 0 => None,
                RANGE_GRAFITE => Some(
                    RangePolicy::bits_per_key(bits, range)
                        .map_err(|e| format!("range filter fields: {e}"))?,
                ),
                _ => {
                    return Err(format!(
                        "range filter fields disagree: kind {kind}, {bits} bits/key, range {range}"
                    ))
                }
            }
        } else {
            None
        };
        let (expiring, expiry_span) = if version >= 5 {
            let (n, earliest, latest) = (c.u64()?, c.u64()?, c.u64()?);
            let puts = entries - tombstones.min(entries);
            match (n, earliest, latest) {
                (0, 0, 0) => (0, None),
                (n, e, l) if n > 0 && n <= puts && 0 < e && e <= l && l < u64::MAX => {
                    (n, Some((e, l)))
                }
                _ => {
                    return Err(format!(
                        "expiry fields disagree: {n} expiring of {puts} puts, span {earliest}..={latest}"
                    ))
                }
            }
        } else {
            (0, None)
        };
        let (range_deletes, range_delete_block) = if version >= 6 {
            let (n, offset, size) = (c.u64()?, c.u64()?, c.u64()?);
            // A range takes at least 8 bytes of its block, which has a count and a CRC.
            if (n == 0) != (size == 0) || (n > 0 && n > (size - 8.min(size)) / 8) {
                return Err(format!(
                    "range delete fields disagree: {n} ranges in a block of {size} bytes"
                ));
            }
            (n, (offset, size))
        } else {
            (0, (0, 0))
        };
        let (expiring_bytes, expiry_quantiles) = if version >= 7 {
            // The expiring puts' keys and values lie in the data blocks' payloads.
            let bytes = c.u64()?;
            if (expiring == 0 && bytes != 0) || bytes > raw_data_bytes {
                return Err(format!(
                    "{bytes} expiring bytes for {expiring} expiring puts in {raw_data_bytes} raw \
                     data bytes"
                ));
            }
            let n = usize::from(c.u8()?);
            let want = match expiring {
                0 => 0,
                _ => EXPIRY_QUANTILES,
            };
            if n != want {
                return Err(format!(
                    "{n} expiry quantiles for {expiring} expiring puts (want {want})"
                ));
            }
            let q = (0..n)
                .map(|_| c.u64())
                .collect::<Result<Vec<u64>, String>>()?;
            let (earliest, latest) = expiry_span.unwrap_or((0, 0));
            let inside =
                q.first().is_none_or(|&f| f >= earliest) && q.last().is_none_or(|&l| l <= latest);
            if !inside || q.windows(2).any(|w| w[0] > w[1]) {
                return Err("expiry quantiles out of order or outside the expiry span".into());
            }
            (bytes, q)
        } else {
            (0, Vec::new())
        };
        if !c.is_empty() {
            return Err("trailing bytes in properties block".into());
        }
        let keyed = entries > 0 || range_deletes > 0;
        if tombstones > entries || prefixes > entries || (keyed && min_key > max_key) {
            return Err("inconsistent properties (counts or key range)".into());
        }
        Ok(Properties {
            entries,
            tombstones,
            data_blocks,
            data_bytes,
            raw_data_bytes,
            compression,
            min_key,
            max_key,
            filter_kind,
            filter_bits_per_key,
            level,
            created_unix_ms,
            writer,
            prefix_filter_kind,
            prefix_extractor,
            prefixes,
            range_filter,
            expiring,
            expiry_span,
            expiry_quantiles,
            expiring_bytes,
            range_deletes,
            range_delete_block,
        })
    }
}

impl Properties {
    /// The share of the table expired at `now` (ms since the epoch): from format 7, of its
    /// bytes (its expiring puts' key and value bytes against its raw data bytes), estimated
    /// from its expiry quantiles; before, of its entries, with its expiring puts taken as
    /// spread evenly over its expiry span (`expiries::expired_fraction`). 0 for a table
    /// without any.
    pub fn expired_share(&self, now: u64) -> f64 {
        let Some(span) = self.expiry_span.filter(|_| self.entries > 0) else {
            return 0.0;
        };
        let passed = expired_fraction(span, &self.expiry_quantiles, now);
        let of_table = match self.expiry_quantiles.is_empty() {
            true => self.expiring as f64 / self.entries as f64,
            false => (self.expiring_bytes as f64 / self.raw_data_bytes.max(1) as f64).min(1.0),
        };
        passed * of_table
    }

    /// When every entry of the table has expired: the latest expiry, when each entry is a put
    /// with an expiry (no tombstone, no put without one); else `None`.
    /// A table with deleted ranges never expires whole: its ranges hide older keys for good.
    pub fn expire_whole_by(&self) -> Option<u64> {
        match self.expiry_span {
            Some((_, latest))
                if self.entries > 0 && self.expiring == self.entries && self.range_deletes == 0 =>
            {
                Some(latest)
            }
            _ => None,
        }
    }
}

fn kind_from_id(id: u8, what: &str) -> Result<Option<FilterKind>, String> {
    match id {
        0 => Ok(None),
        id => FilterKind::from_id(id)
            .map(Some)
            .ok_or_else(|| format!("unknown {what} kind id {id} in properties")),
    }
}

#[cfg(test)]
#[path = "properties_tests.rs"]
mod tests;
