//! The fixed-size table footer (FORMAT.md §3): the handles of the metadata blocks, the table
//! format version and the magic, read first when a table is opened.

use super::block::{BlockHandle, Cursor};

/// Magic bytes closing every table file.
pub const TABLE_MAGIC: [u8; 4] = *b"LBST";
/// Table format version this build writes by default (7: expiry quantiles in the
/// properties); it reads this one and every older one, and writes 1 to 6 on request
/// (`TableBuilderOptions::format_version`).
pub const TABLE_VERSION: u32 = 7;
/// Length of the longest footer (version 4), in bytes: what a reader reads from the end.
pub const FOOTER_LEN: usize = 96;
/// Length of a version 2 or 3 footer (no range filter handle).
pub const FOOTER_V2_LEN: usize = 80;
/// Length of a version 1 footer (no prefix filter handle either).
pub const FOOTER_V1_LEN: usize = 64;

/// The footer length of table format `version` (`None`: no such version).
fn footer_len(version: u32) -> Option<usize> {
    match version {
        1 => Some(FOOTER_V1_LEN),
        2 | 3 => Some(FOOTER_V2_LEN),
        4..=7 => Some(FOOTER_LEN),
        _ => None,
    }
}

/// Handles to the metadata blocks, at the end of every table file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    /// Table format version (1 to 4).
    pub version: u32,
    /// The index block.
    pub index: BlockHandle,
    /// The filter block over whole keys (size 0: none).
    pub filter: BlockHandle,
    /// The prefix filter block (size 0: none; always 0 in version 1).
    pub prefix_filter: BlockHandle,
    /// The properties block.
    pub properties: BlockHandle,
    /// The range filter block (size 0: none; always 0 before version 4).
    pub range_filter: BlockHandle,
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
    /// The footer bytes (FORMAT.md §3): 96 in version 4, 80 in versions 2 and 3, 64 in
    /// version 1. Handles a version has no field for are not written.
    pub fn encode(&self) -> Vec<u8> {
        let len = footer_len(self.version).unwrap_or(FOOTER_LEN);
        let mut b = vec![0u8; len];
        let handles = [
            self.range_filter,
            self.prefix_filter,
            self.index,
            self.filter,
            self.properties,
        ];
        let skip = (FOOTER_LEN - len) / 16;
        for (i, h) in handles[skip..].iter().enumerate() {
            put_handle(&mut b[i * 16..], *h);
        }
        b[len - 16..len - 12].copy_from_slice(&self.version.to_le_bytes());
        let crc = crc32fast::hash(&b[..len - 8]);
        b[len - 8..len - 4].copy_from_slice(&crc.to_le_bytes());
        b[len - 4..].copy_from_slice(&TABLE_MAGIC);
        b
    }

    /// Validates the footer at the end of `tail`, the last `min(FOOTER_LEN, file_len)` bytes
    /// of a file of `file_len` bytes. The last 64 bytes have the same shape in every version
    /// (magic last, version 16 bytes before the end); versions 2 and 3 add the prefix filter
    /// handle in front, version 4 the range filter handle before that, and the CRC covers
    /// them.
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
        let len = match (version, footer_len(version)) {
            (_, Some(len)) => len,
            // Every format has a version ≥ 1: a 0 is damage, not a newer format.
            (0, _) => {
                return bad("table format version 0 does not exist: the footer is damaged".into())
            }
            (v, None) => return Err(FooterError::Version(v)),
        };
        if tail.len() < len {
            return bad(format!(
                "file of {file_len} bytes is too short for a version {version} footer of {len}"
            ));
        }
        let b = &tail[tail.len() - len..];
        let mut c = Cursor::new(b);
        let mut handles = [BlockHandle::default(); 5];
        for h in &mut handles[(FOOTER_LEN - len) / 16..] {
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
        let names = [
            "range filter",
            "prefix filter",
            "index",
            "filter",
            "properties",
        ];
        for (name, h) in names.iter().zip(handles) {
            if h.offset.checked_add(h.size).is_none_or(|end| end > body) {
                return bad(format!(
                    "{name} block [{}, +{}) lies outside the file body of {body} bytes",
                    h.offset, h.size
                ));
            }
        }
        let [range_filter, prefix_filter, index, filter, properties] = handles;
        Ok(Footer {
            version,
            index,
            filter,
            prefix_filter,
            properties,
            range_filter,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(offset: u64, size: u64) -> BlockHandle {
        BlockHandle { offset, size }
    }

    #[test]
    fn footer_round_trip_and_rejections_in_every_version() {
        let none = BlockHandle::default();
        for (version, prefix_filter, range_filter) in [
            (7, handle(100, 10), handle(40, 10)),
            (6, handle(100, 10), handle(40, 10)),
            (5, handle(100, 10), handle(40, 10)),
            (4, handle(100, 10), handle(40, 10)),
            (3, handle(100, 10), none),
            (2, handle(100, 10), none),
            (1, none, none),
        ] {
            let f = Footer {
                version,
                index: handle(110, 10),
                filter: handle(50, 50),
                prefix_filter,
                properties: handle(120, 30),
                range_filter,
            };
            let b = f.encode();
            let file_len = 150 + b.len() as u64;
            assert_eq!(Footer::decode(&b, file_len).unwrap(), f);
            // A reader is handed the last 96 bytes; a shorter footer then follows body bytes.
            let mut tail = vec![7u8; 32];
            tail.extend_from_slice(&b);
            assert_eq!(
                Footer::decode(&tail[tail.len() - FOOTER_LEN..], file_len).unwrap(),
                f
            );
            assert!(matches!(
                Footer::decode(&b, 100),
                Err(FooterError::Invalid(_))
            ));
            let mut newer = b.clone();
            let at = newer.len() - 16;
            newer[at] = 8;
            assert!(matches!(
                Footer::decode(&newer, file_len),
                Err(FooterError::Version(8))
            ));
            newer[at] = 0;
            assert!(matches!(
                Footer::decode(&newer, file_len),
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
        for version in [2, 4] {
            let b = Footer {
                version,
                index: none,
                filter: none,
                prefix_filter: none,
                properties: none,
                range_filter: none,
            }
            .encode();
            assert!(matches!(
                Footer::decode(&b[16..], 64),
                Err(FooterError::Invalid(_))
            ));
        }
    }
}
