//! The fixed-size table footer and the properties block (FORMAT.md §3).

use super::block::{seal, unseal, BlockHandle, Cursor};
use super::compression::Compression;
use crate::coding::put_len_prefixed;
use crate::filter::FilterKind;

/// Magic bytes closing every table file.
pub const TABLE_MAGIC: [u8; 4] = *b"LBST";
/// Table format version this build writes by default (3: per-block compression); it reads
/// this one and every older one, and writes 1 and 2 on request
/// (`TableBuilderOptions::format_version`).
pub const TABLE_VERSION: u32 = 3;
/// Length of the footer of versions 2 and 3, in bytes.
pub const FOOTER_LEN: usize = 80;
/// Length of a version 1 footer (no prefix filter handle).
pub const FOOTER_V1_LEN: usize = 64;

/// Handles to the metadata blocks, at the end of every table file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    /// Table format version (1, 2 or 3).
    pub version: u32,
    /// The index block.
    pub index: BlockHandle,
    /// The filter block over whole keys (size 0: none).
    pub filter: BlockHandle,
    /// The prefix filter block (size 0: none; always 0 in version 1).
    pub prefix_filter: BlockHandle,
    /// The properties block.
    pub properties: BlockHandle,
}

/// Why a footer was rejected; `Version` is kept apart so callers can report it as such.
#[derive(Debug)]
pub enum FooterError {
    /// Written by a table format this build does not read.
    Version(u32),
    /// Anything else.
    Invalid(String),
}

fn put_handle(b: &mut [u8], h: BlockHandle) {
    b[..8].copy_from_slice(&h.offset.to_le_bytes());
    b[8..16].copy_from_slice(&h.size.to_le_bytes());
}

impl Footer {
    /// The footer bytes: 80 for versions 2 and 3 (FORMAT.md §3), 64 for version 1.
    pub fn encode(&self) -> Vec<u8> {
        let handles = [self.index, self.filter, self.properties];
        let mut b = match self.version {
            1 => vec![0u8; FOOTER_V1_LEN],
            _ => {
                let mut b = vec![0u8; FOOTER_LEN];
                put_handle(&mut b[..16], self.prefix_filter);
                b
            }
        };
        let base = b.len() - FOOTER_V1_LEN;
        for (i, h) in handles.iter().enumerate() {
            put_handle(&mut b[base + i * 16..], *h);
        }
        b[base + 48..base + 52].copy_from_slice(&self.version.to_le_bytes());
        let crc = crc32fast::hash(&b[..base + 56]);
        b[base + 56..base + 60].copy_from_slice(&crc.to_le_bytes());
        b[base + 60..].copy_from_slice(&TABLE_MAGIC);
        b
    }

    /// Validates the footer at the end of `tail`, the last `min(FOOTER_LEN, file_len)` bytes
    /// of a file of `file_len` bytes. The last 64 bytes have the same shape in every version
    /// (magic last, version 16 bytes before the end); versions 2 and 3 add the prefix filter
    /// handle in front and their CRC covers it.
    pub fn decode(tail: &[u8], file_len: u64) -> Result<Footer, FooterError> {
        let bad = |s: String| Err(FooterError::Invalid(s));
        if tail.len() < FOOTER_V1_LEN {
            return bad(format!(
                "footer is {} bytes, expected at least {FOOTER_V1_LEN}",
                tail.len()
            ));
        }
        let last = &tail[tail.len() - FOOTER_V1_LEN..];
        if last[60..64] != TABLE_MAGIC {
            return bad(format!(
                "bad table magic {:02x?}, expected \"LBST\"",
                &last[60..64]
            ));
        }
        let version = u32::from_le_bytes([last[48], last[49], last[50], last[51]]);
        let len = match version {
            1 => FOOTER_V1_LEN,
            2 | 3 => FOOTER_LEN,
            // Every format has a version ≥ 1: a 0 is damage, not a newer format.
            0 => return bad("table format version 0 does not exist: the footer is damaged".into()),
            v => return Err(FooterError::Version(v)),
        };
        if tail.len() < len {
            return bad(format!(
                "file of {file_len} bytes is too short for a version {version} footer of {len}"
            ));
        }
        let b = &tail[tail.len() - len..];
        let mut c = Cursor::new(b);
        let mut handles = [BlockHandle::default(); 4];
        for h in &mut handles[4 - (len - 16) / 16..] {
            let (offset, size) = (
                c.u64().map_err(FooterError::Invalid)?,
                c.u64().map_err(FooterError::Invalid)?,
            );
            *h = BlockHandle { offset, size };
        }
        let stored = u32::from_le_bytes([b[len - 8], b[len - 7], b[len - 6], b[len - 5]]);
        let actual = crc32fast::hash(&b[..len - 8]);
        if stored != actual {
            return bad(format!(
                "footer checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"
            ));
        }
        let reserved = u32::from_le_bytes([b[len - 12], b[len - 11], b[len - 10], b[len - 9]]);
        if reserved != 0 {
            return bad(format!("footer reserved field is {reserved:#x}, must be 0"));
        }
        let body = file_len.saturating_sub(len as u64);
        let names = ["prefix filter", "index", "filter", "properties"];
        for (name, h) in names.iter().zip(handles) {
            if h.offset.checked_add(h.size).is_none_or(|end| end > body) {
                return bad(format!(
                    "{name} block [{}, +{}) lies outside the file body of {body} bytes",
                    h.offset, h.size
                ));
            }
        }
        let [prefix_filter, index, filter, properties] = handles;
        Ok(Footer {
            version,
            index,
            filter,
            prefix_filter,
            properties,
        })
    }
}

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
}

fn ser_display<S: serde::Serializer>(c: &Compression, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&c.to_string())
}

fn ser_key<S: serde::Serializer>(k: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::coding::printable(k))
}

impl Properties {
    /// The properties block of a table of format `version`, CRC included; a key or writer
    /// name too long for its u32 length field is an error, and so are fields `version` cannot
    /// hold (a prefix filter before 2, compression before 3).
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
        seal(&mut b, 0);
        Ok(b)
    }

    /// Validates and decodes the properties block (CRC included) of a table of format
    /// `version` (1: no prefix filter fields; 1 and 2: no compression fields).
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
        if !c.is_empty() {
            return Err("trailing bytes in properties block".into());
        }
        if tombstones > entries || prefixes > entries || (entries > 0 && min_key > max_key) {
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
        })
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
mod tests {
    use super::*;

    fn handle(offset: u64, size: u64) -> BlockHandle {
        BlockHandle { offset, size }
    }

    #[test]
    fn footer_round_trip_and_rejections_in_both_versions() {
        for (version, prefix_filter) in [
            (3, handle(100, 10)),
            (2, handle(100, 10)),
            (1, BlockHandle::default()),
        ] {
            let f = Footer {
                version,
                index: handle(110, 10),
                filter: handle(50, 50),
                prefix_filter,
                properties: handle(120, 30),
            };
            let b = f.encode();
            let file_len = 150 + b.len() as u64;
            assert_eq!(Footer::decode(&b, file_len).unwrap(), f);
            // A reader is handed the last 80 bytes; a v1 footer then follows 16 body bytes.
            let mut tail = vec![7u8; 16];
            tail.extend_from_slice(&b);
            assert_eq!(
                Footer::decode(&tail[tail.len() - FOOTER_LEN..], file_len).unwrap(),
                f
            );
            assert!(matches!(
                Footer::decode(&b, 100),
                Err(FooterError::Invalid(_))
            ));
            let mut v4 = b.clone();
            let at = v4.len() - 16;
            v4[at] = 4;
            assert!(matches!(
                Footer::decode(&v4, file_len),
                Err(FooterError::Version(4))
            ));
            v4[at] = 0;
            assert!(matches!(
                Footer::decode(&v4, file_len),
                Err(FooterError::Invalid(_))
            ));
            for i in 0..b.len() {
                let mut d = b.clone();
                d[i] ^= 0x40;
                assert!(
                    Footer::decode(&d, file_len).is_err(),
                    "v{version}: flip at {i} accepted"
                );
            }
        }
        let v2 = Footer {
            version: 2,
            index: handle(0, 0),
            filter: handle(0, 0),
            prefix_filter: handle(0, 0),
            properties: handle(0, 0),
        }
        .encode();
        assert!(matches!(
            Footer::decode(&v2[16..], 64),
            Err(FooterError::Invalid(_))
        ));
    }

    fn properties(prefix: bool) -> Properties {
        Properties {
            entries: 3,
            tombstones: 1,
            data_blocks: 1,
            data_bytes: 99,
            raw_data_bytes: 180,
            compression: Compression::Lz4,
            min_key: b"a".to_vec(),
            max_key: b"z".to_vec(),
            filter_kind: Some(FilterKind::Blocked),
            filter_bits_per_key: 9.5,
            level: 2,
            created_unix_ms: 7,
            writer: "w".into(),
            prefix_filter_kind: prefix.then_some(FilterKind::Ribbon),
            prefix_extractor: prefix.then(|| "fixed:4".to_string()),
            prefixes: if prefix { 2 } else { 0 },
        }
    }

    #[test]
    fn properties_round_trip_in_every_version() {
        for prefix in [false, true] {
            let p = properties(prefix);
            let b = p.encode(3).unwrap();
            assert_eq!(Properties::decode(&b, 3).unwrap(), p);
            for len in 0..b.len() {
                assert!(Properties::decode(&b[..len], 3).is_err());
            }
            // Version 2 has no compression fields: a raw table's derive from its blocks.
            assert!(p.encode(2).is_err());
            let raw = Properties {
                compression: Compression::None,
                raw_data_bytes: 95,
                ..p.clone()
            };
            assert_eq!(Properties::decode(&raw.encode(2).unwrap(), 2).unwrap(), raw);
            assert_eq!(prefix, raw.encode(1).is_err());
        }
        // A v1 block ends after the writer.
        let v1 = Properties {
            compression: Compression::None,
            raw_data_bytes: 95,
            ..properties(false)
        };
        let b = v1.encode(1).unwrap();
        assert_eq!(Properties::decode(&b, 1).unwrap(), v1);
        assert!(Properties::decode(&b, 2).is_err());
    }

    #[test]
    fn properties_with_impossible_compression_fields_are_refused() {
        for (compression, raw) in [
            (Compression::Lz4, 99 * 255 + 1),
            (Compression::None, 100),
            (Compression::Zstd(0), 10),
            (Compression::Zstd(23), 10),
        ] {
            let p = Properties {
                compression,
                raw_data_bytes: raw,
                ..properties(false)
            };
            assert!(
                Properties::decode(&p.encode(3).unwrap(), 3).is_err(),
                "{compression} {raw}"
            );
        }
    }

    #[test]
    fn properties_with_disagreeing_prefix_fields_are_refused() {
        for (kind, rule, prefixes) in [
            (Some(FilterKind::Blocked), None, 1),
            (None, Some("fixed:4"), 0),
            (None, None, 1),
            (Some(FilterKind::Blocked), Some("fixed:4"), 4),
        ] {
            let p = Properties {
                prefix_filter_kind: kind,
                prefix_extractor: rule.map(str::to_string),
                prefixes,
                ..properties(false)
            };
            let err = Properties::decode(&p.encode(3).unwrap(), 3).unwrap_err();
            assert!(
                err.contains("prefix") || err.contains("inconsistent"),
                "{err}"
            );
        }
    }
}
