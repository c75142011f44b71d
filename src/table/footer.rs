//! The fixed-size table footer and the properties block (FORMAT.md §3).

use super::block::{seal, unseal, BlockHandle, Cursor};
use crate::coding::put_len_prefixed;
use crate::filter::FilterKind;

/// Magic bytes closing every table file.
pub const TABLE_MAGIC: [u8; 4] = *b"LBST";
/// Table format version this build writes and reads.
pub const TABLE_VERSION: u32 = 1;
/// Footer length in bytes.
pub const FOOTER_LEN: usize = 64;

/// Handles to the metadata blocks, at the end of every table file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    /// The index block.
    pub index: BlockHandle,
    /// The filter block (size 0: the table has no filter).
    pub filter: BlockHandle,
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

impl Footer {
    /// The 64 footer bytes.
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut b = [0u8; FOOTER_LEN];
        for (i, h) in [self.index, self.filter, self.properties]
            .iter()
            .enumerate()
        {
            b[i * 16..i * 16 + 8].copy_from_slice(&h.offset.to_le_bytes());
            b[i * 16 + 8..i * 16 + 16].copy_from_slice(&h.size.to_le_bytes());
        }
        b[48..52].copy_from_slice(&TABLE_VERSION.to_le_bytes());
        let crc = crc32fast::hash(&b[..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b[60..64].copy_from_slice(&TABLE_MAGIC);
        b
    }

    /// Validates a footer read from a file of `file_len` bytes.
    pub fn decode(b: &[u8], file_len: u64) -> Result<Footer, FooterError> {
        let bad = |s: String| Err(FooterError::Invalid(s));
        if b.len() != FOOTER_LEN {
            return bad(format!(
                "footer is {} bytes, expected {FOOTER_LEN}",
                b.len()
            ));
        }
        if b[60..64] != TABLE_MAGIC {
            return bad(format!(
                "bad table magic {:02x?}, expected \"LBST\"",
                &b[60..64]
            ));
        }
        let mut c = Cursor::new(b);
        let mut handles = [BlockHandle::default(); 3];
        for h in &mut handles {
            let (offset, size) = (
                c.u64().map_err(FooterError::Invalid)?,
                c.u64().map_err(FooterError::Invalid)?,
            );
            *h = BlockHandle { offset, size };
        }
        let version = c.u32().map_err(FooterError::Invalid)?;
        if version != TABLE_VERSION {
            return Err(FooterError::Version(version));
        }
        let stored = u32::from_le_bytes([b[56], b[57], b[58], b[59]]);
        let actual = crc32fast::hash(&b[..56]);
        if stored != actual {
            return bad(format!(
                "footer checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"
            ));
        }
        let reserved = u32::from_le_bytes([b[52], b[53], b[54], b[55]]);
        if reserved != 0 {
            return bad(format!("footer reserved field is {reserved:#x}, must be 0"));
        }
        let body = file_len.saturating_sub(FOOTER_LEN as u64);
        for (name, h) in ["index", "filter", "properties"].iter().zip(handles) {
            if h.offset.checked_add(h.size).is_none_or(|end| end > body) {
                return bad(format!(
                    "{name} block [{}, +{}) lies outside the file body of {body} bytes",
                    h.offset, h.size
                ));
            }
        }
        let [index, filter, properties] = handles;
        Ok(Footer {
            index,
            filter,
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
    /// Bytes of data blocks.
    pub data_bytes: u64,
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
}

fn ser_key<S: serde::Serializer>(k: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&crate::inspect::printable(k))
}

impl Properties {
    /// The properties block, CRC included; a key or writer name too long for its u32 length
    /// field is an error.
    pub fn encode(&self) -> crate::Result<Vec<u8>> {
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
        seal(&mut b, 0);
        Ok(b)
    }

    /// Validates and decodes a properties block (CRC included).
    pub fn decode(block: &[u8]) -> Result<Properties, String> {
        let mut c = Cursor::new(unseal(block)?);
        let (entries, tombstones, data_blocks, data_bytes) =
            (c.u64()?, c.u64()?, c.u64()?, c.u64()?);
        let min_key = c.len_prefixed()?.to_vec();
        let max_key = c.len_prefixed()?.to_vec();
        let kind_id = c.u8()?;
        let filter_kind = match kind_id {
            0 => None,
            id => Some(
                FilterKind::from_id(id)
                    .ok_or_else(|| format!("unknown filter kind id {id} in properties"))?,
            ),
        };
        let filter_bits_per_key =
            f64::from_le_bytes(c.bytes(8)?.try_into().map_err(|_| "short field")?);
        let level = c.u32()?;
        let created_unix_ms = c.u64()?;
        let writer = String::from_utf8_lossy(c.len_prefixed()?).into_owned();
        if !c.is_empty() {
            return Err("trailing bytes in properties block".into());
        }
        if tombstones > entries || (entries > 0 && min_key > max_key) {
            return Err("inconsistent properties (counts or key range)".into());
        }
        Ok(Properties {
            entries,
            tombstones,
            data_blocks,
            data_bytes,
            min_key,
            max_key,
            filter_kind,
            filter_bits_per_key,
            level,
            created_unix_ms,
            writer,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_round_trip_and_rejections() {
        let f = Footer {
            index: BlockHandle {
                offset: 100,
                size: 20,
            },
            filter: BlockHandle {
                offset: 50,
                size: 50,
            },
            properties: BlockHandle {
                offset: 120,
                size: 30,
            },
        };
        let b = f.encode();
        assert_eq!(Footer::decode(&b, 150 + 64).unwrap(), f);
        assert!(matches!(
            Footer::decode(&b, 100),
            Err(FooterError::Invalid(_))
        ));
        let mut v2 = b;
        v2[48] = 2;
        assert!(matches!(
            Footer::decode(&v2, 214),
            Err(FooterError::Version(2))
        ));
        for i in 0..FOOTER_LEN {
            let mut d = b;
            d[i] ^= 0x40;
            assert!(Footer::decode(&d, 214).is_err(), "flip at {i} accepted");
        }
    }

    #[test]
    fn properties_round_trip() {
        let p = Properties {
            entries: 3,
            tombstones: 1,
            data_blocks: 1,
            data_bytes: 99,
            min_key: b"a".to_vec(),
            max_key: b"z".to_vec(),
            filter_kind: Some(FilterKind::Blocked),
            filter_bits_per_key: 9.5,
            level: 2,
            created_unix_ms: 7,
            writer: "w".into(),
        };
        let b = p.encode().unwrap();
        assert_eq!(Properties::decode(&b).unwrap(), p);
        for len in 0..b.len() {
            assert!(Properties::decode(&b[..len]).is_err());
        }
    }
}
