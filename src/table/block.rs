//! Checksummed blocks and the entry encoding inside data and index blocks (FORMAT.md §3).
//! Every function here takes bytes from disk and returns an error, never panics, on any
//! malformed input.

use crate::coding::put_u32_len;
pub(crate) use crate::coding::Cursor;
use crate::expiry::NEVER;
use crate::prefetch::{prefetch_address, prefetch_lines};

/// Where a block lives in a table file: offset and size, the size including the 4-byte CRC
/// for data, index and properties blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockHandle {
    /// Byte offset in the file.
    pub offset: u64,
    /// Length in bytes.
    pub size: u64,
}

/// One entry of a data block: a key and its value, or a tombstone (`None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The user key.
    pub key: Vec<u8>,
    /// The value; `None` marks a deletion.
    pub value: Option<Vec<u8>>,
    /// When the entry expires, in milliseconds since the Unix epoch; `None`: never.
    pub expiry: Option<u64>,
}

/// How far ahead of the entry being decoded `cache::find` and `seek` request the block's lines: a block taken
/// from the block cache is usually in no CPU cache (32 MiB of blocks), and each entry's
/// position depends on the one before, so without the hint the scan waits for its lines one
/// after another. A timing loop over 16,384 such blocks (64 MiB, 34 entries each, absent
/// keys): 760–945 ns per lookup without, 576–590 ns 512 bytes ahead, 514–545 ns 1 KiB ahead,
/// 588–613 ns 2 KiB ahead and 699 ns with the whole block requested first; in L1 all ~76 ns.
pub(crate) const SCAN_AHEAD: usize = 1024;

/// An entry's bytes before its key (FORMAT.md §3, data block): tag, key length, value length.
pub(crate) const ENTRY_HEAD: usize = 9;

pub(crate) const TAG_PUT: u8 = 1;
pub(crate) const TAG_DELETE: u8 = 2;
/// A put with an expiry (format 5): the entry of `TAG_PUT` followed by a `u64` expiry.
pub(crate) const TAG_PUT_EXPIRING: u8 = 3;
/// Bytes an expiry adds to an entry (`TAG_PUT_EXPIRING`).
pub(crate) const EXPIRY_LEN: usize = 8;

/// Appends one data-block entry; `expiry` is `expiry::NEVER` or a stored expiry (a put's
/// only). A key or value too long for its length field is an error.
pub(crate) fn put_entry(
    out: &mut Vec<u8>,
    key: &[u8],
    value: Option<&[u8]>,
    expiry: u64,
) -> crate::error::Result<()> {
    let expiring = expiry != NEVER && value.is_some();
    out.push(match (value, expiring) {
        (None, _) => TAG_DELETE,
        (Some(_), false) => TAG_PUT,
        (Some(_), true) => TAG_PUT_EXPIRING,
    });
    put_u32_len(out, key.len(), "key")?;
    put_u32_len(out, value.map_or(0, <[u8]>::len), "value")?;
    out.extend_from_slice(key);
    if let Some(v) = value {
        out.extend_from_slice(v);
    }
    if expiring {
        out.extend_from_slice(&expiry.to_le_bytes());
    }
    Ok(())
}

/// The bytes of an entry in a data block.
pub(crate) fn entry_len(key: usize, value: Option<usize>, expiry: u64) -> usize {
    let expiring = expiry != NEVER && value.is_some();
    ENTRY_HEAD + key + value.unwrap_or(0) + if expiring { EXPIRY_LEN } else { 0 }
}

/// An expiry as stored after an entry: a time since the epoch, never 0 nor `NEVER`.
fn check_expiry(at: u64) -> Result<u64, String> {
    if at == 0 || at == NEVER {
        return Err(format!("entry with expiry {at}, outside 1..u64::MAX"));
    }
    Ok(at)
}

/// Appends the CRC-32 of everything in `out` from `start`.
pub(crate) fn seal(out: &mut Vec<u8>, start: usize) {
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// Checks a block's trailing CRC and returns its payload.
pub(crate) fn unseal(block: &[u8]) -> Result<&[u8], String> {
    if block.len() < 4 {
        return Err(format!("block of {} bytes has no checksum", block.len()));
    }
    let (payload, crc) = block.split_at(block.len() - 4);
    let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let actual = crc32fast::hash(payload);
    if stored != actual {
        return Err(format!(
            "block checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"
        ));
    }
    Ok(payload)
}

/// One decoded entry borrowing from the block.
pub(crate) struct RawEntry<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) value: Option<&'a [u8]>,
    /// `expiry::NEVER` unless the entry is an expiring put.
    pub(crate) expiry: u64,
}

/// Decodes the next entry of a data block payload.
#[inline]
pub(crate) fn next_entry<'a>(c: &mut Cursor<'a>) -> Result<RawEntry<'a>, String> {
    let tag = c.u8()?;
    let key_len = c.u32()? as usize;
    let value_len = c.u32()? as usize;
    let key = c.bytes(key_len)?;
    let value = c.bytes(value_len)?;
    match tag {
        TAG_PUT => Ok(RawEntry {
            key,
            value: Some(value),
            expiry: NEVER,
        }),
        TAG_PUT_EXPIRING => Ok(RawEntry {
            key,
            value: Some(value),
            expiry: check_expiry(c.u64()?)?,
        }),
        TAG_DELETE if value_len == 0 => Ok(RawEntry {
            key,
            value: None,
            expiry: NEVER,
        }),
        TAG_DELETE => Err(format!("tombstone with a {value_len}-byte value")),
        other => Err(format!("unknown entry tag {other}")),
    }
}

/// Where one entry of a data block payload lies (`entry_at`).
pub(crate) struct EntrySpan {
    /// The key's bytes.
    pub(crate) key: std::ops::Range<usize>,
    /// The value's bytes; `None` for a tombstone.
    pub(crate) value: Option<std::ops::Range<usize>>,
    /// `expiry::NEVER` unless the entry is an expiring put.
    pub(crate) expiry: u64,
    /// Where the next entry starts.
    pub(crate) end: usize,
}

/// Decodes the entry that starts at `pos` of a data block payload (FORMAT.md §3.2) in place:
/// one bounds check for its fixed part and one for its key and value. The error says what
/// was malformed.
#[inline]
pub(crate) fn entry_at(payload: &[u8], pos: usize) -> Result<EntrySpan, String> {
    let Some(head) = payload
        .get(pos..)
        .and_then(|r| r.first_chunk::<ENTRY_HEAD>())
    else {
        return Err(format!(
            "entry at offset {pos} cut short in a {}-byte block",
            payload.len()
        ));
    };
    let key_len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let value_len = u32::from_le_bytes([head[5], head[6], head[7], head[8]]) as usize;
    let key_start = pos + ENTRY_HEAD;
    let Some((key_end, end)) = key_start
        .checked_add(key_len)
        .and_then(|key_end| Some((key_end, key_end.checked_add(value_len)?)))
        .filter(|&(_, end)| end <= payload.len())
    else {
        return Err(format!(
            "entry at offset {pos} ({key_len}-byte key, {value_len}-byte value) overruns a {}-byte block",
            payload.len()
        ));
    };
    let (value, expiry, end) = match head[0] {
        TAG_PUT => (Some(key_end..end), NEVER, end),
        TAG_PUT_EXPIRING => {
            let Some(at) = payload
                .get(end..)
                .and_then(|r| r.first_chunk::<EXPIRY_LEN>())
            else {
                return Err(format!("entry at offset {pos} has its expiry cut short"));
            };
            let at = check_expiry(u64::from_le_bytes(*at))?;
            (Some(key_end..end), at, end + EXPIRY_LEN)
        }
        TAG_DELETE if value_len == 0 => (None, NEVER, end),
        TAG_DELETE => return Err(format!("tombstone with a {value_len}-byte value")),
        other => return Err(format!("unknown entry tag {other}")),
    };
    Ok(EntrySpan {
        key: key_start..key_end,
        value,
        expiry,
        end,
    })
}

/// Walks a data block payload's entries from its start, decoding each (`entry_at`) and
/// checking that keys increase, and calls `f` with each entry's offset, span, key and key
/// prefix until it returns false. Returns the offset it stopped at: that entry's, or the
/// payload's length. The walk behind a forward scan's seek and a backward scan's block entry
/// (`iter.rs`).
///
/// A block from the block cache is usually in no CPU cache, and each entry's position
/// depends on the one before, so the walk requests the lines `SCAN_AHEAD` bytes ahead of the
/// entry it decodes, as `cache::find` does.
pub(crate) fn walk(
    payload: &[u8],
    mut f: impl FnMut(usize, &EntrySpan, &[u8], u64) -> bool,
) -> Result<usize, String> {
    let base = payload.as_ptr() as usize;
    prefetch_lines(base, SCAN_AHEAD.min(payload.len()));
    let mut pos = 0;
    let mut prev: Option<(u64, &[u8])> = None;
    while pos < payload.len() {
        prefetch_address(base + pos + SCAN_AHEAD);
        let e = entry_at(payload, pos)?;
        let k = &payload[e.key.clone()];
        let p = crate::coding::key_prefix(k);
        if prev.is_some_and(|(pp, pk)| crate::coding::cmp_prefixed(pp, pk, p, k).is_ge()) {
            return Err("data block keys out of order".to_string());
        }
        if !f(pos, &e, k, p) {
            return Ok(pos);
        }
        prev = Some((p, k));
        pos = e.end;
    }
    Ok(pos)
}

/// The offset of the first entry of a data block payload whose key is at or above `key`
/// (above it when `exclusive`), or the payload's length when there is none; `key_p` is
/// `key_prefix(key)`. Checks that the keys it passes increase (`walk`): the seek a forward
/// scan starts with, keys compared by their 8-byte prefixes first, as `cache::find` does.
pub(crate) fn seek(
    payload: &[u8],
    key_p: u64,
    key: &[u8],
    exclusive: bool,
) -> Result<usize, String> {
    walk(payload, |_, _, k, p| {
        match crate::coding::cmp_prefixed(p, k, key_p, key) {
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => exclusive,
            std::cmp::Ordering::Less => true,
        }
    })
}

/// Decodes a whole data block payload into owned entries, checking key order: the tests'
/// and the fuzzer's oracle for the cursors' walk (`iter.rs`).
#[cfg(test)]
pub(crate) fn decode_entries(payload: &[u8]) -> Result<Vec<Entry>, String> {
    let mut c = Cursor::new(payload);
    let mut out: Vec<Entry> = Vec::new();
    while !c.is_empty() {
        let e = next_entry(&mut c)?;
        if out.last().is_some_and(|p| p.key.as_slice() >= e.key) {
            return Err("data block keys out of order".to_string());
        }
        out.push(Entry {
            key: e.key.to_vec(),
            value: e.value.map(<[u8]>::to_vec),
            expiry: (e.expiry != NEVER).then_some(e.expiry),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_is_an_error() {
        let mut b = Vec::new();
        put_entry(&mut b, b"a", Some(b"1"), NEVER).unwrap();
        put_entry(&mut b, b"b", None, 7).unwrap();
        put_entry(&mut b, b"c", Some(b""), NEVER).unwrap();
        put_entry(&mut b, b"d", Some(b"x"), 7).unwrap();
        let e = decode_entries(&b).unwrap();
        assert_eq!(e.len(), 4);
        assert_eq!(
            (e[1].value.clone(), e[1].expiry),
            (None, None),
            "a tombstone never expires"
        );
        assert_eq!(e[2].value, Some(vec![]));
        assert_eq!(
            (e[3].value.clone(), e[3].expiry),
            (Some(b"x".to_vec()), Some(7))
        );
        // An expiry of 0 or NEVER is damage.
        for at in [0, NEVER] {
            let mut bad = b.clone();
            let n = bad.len();
            bad[n - 8..].copy_from_slice(&u64::to_le_bytes(at));
            assert!(decode_entries(&bad).unwrap_err().contains("expiry"));
        }
        for len in 0..b.len() {
            // Every strict prefix that cuts an entry is an error, never a panic.
            let _ = decode_entries(&b[..len]);
        }
        let mut bad = b.clone();
        bad[0] = 9;
        assert!(decode_entries(&bad).is_err());
        let mut huge = b.clone();
        huge[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_entries(&huge).is_err());
    }

    /// Walking a block with `entry_at` finds what `decode_entries` finds, and fails where it
    /// fails (apart from key order, which the cursors check themselves).
    #[test]
    fn entry_at_walks_as_decode_entries() {
        let mut b = Vec::new();
        put_entry(&mut b, b"a", Some(b"1"), NEVER).unwrap();
        put_entry(&mut b, b"b", None, NEVER).unwrap();
        put_entry(&mut b, b"c", Some(b"xyz"), 99).unwrap();
        let walk = |p: &[u8]| -> Result<Vec<Entry>, String> {
            let mut out = Vec::new();
            let mut pos = 0;
            while pos < p.len() {
                let e = entry_at(p, pos)?;
                out.push(Entry {
                    key: p[e.key].to_vec(),
                    value: e.value.map(|v| p[v].to_vec()),
                    expiry: (e.expiry != NEVER).then_some(e.expiry),
                });
                pos = e.end;
            }
            Ok(out)
        };
        assert_eq!(walk(&b).unwrap(), decode_entries(&b).unwrap());
        for len in 0..b.len() {
            assert_eq!(
                walk(&b[..len]).is_ok(),
                decode_entries(&b[..len]).is_ok(),
                "{len}"
            );
        }
        for (at, byte) in [(0, 9u8), (1, 0xff), (4, 0x80), (9, 2)] {
            let mut bad = b.clone();
            bad[at] = byte;
            assert_eq!(walk(&bad).is_ok(), decode_entries(&bad).is_ok(), "{at}");
        }
    }

    #[test]
    fn seal_and_unseal() {
        let mut b = b"payload".to_vec();
        seal(&mut b, 0);
        assert_eq!(unseal(&b).unwrap(), b"payload");
        b[0] ^= 1;
        assert!(unseal(&b).unwrap_err().contains("checksum"));
        assert!(unseal(&[1, 2]).is_err());
    }
}
