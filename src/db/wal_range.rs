//! A range delete as one operation of a log record (FORMAT.md §2, operation tag 5): the
//! range's first key, then how it ends. Used by `wal.rs` to encode and decode batches.

use crate::coding::{put_len_prefixed, Cursor};
use crate::error::Result;
use crate::table::{DeletedRange, End};

/// Operation tag of a range delete.
pub(crate) const TAG_DELETE_RANGE: u8 = 5;

/// The end kinds' bytes.
const END_UNBOUNDED: u8 = 0;
const END_BEFORE: u8 = 1;
const END_THROUGH: u8 = 2;

/// Payload bytes of the operation: tag, the first key with its length, the end kind, and a
/// bounded end's key with its length.
pub(crate) fn encoded_len(r: &DeletedRange) -> usize {
    let end = match &r.end {
        End::Before(k) | End::Through(k) => 4 + k.len(),
        End::Unbounded => 0,
    };
    1 + 4 + r.start.len() + 1 + end
}

/// Appends the operation.
pub(crate) fn encode(out: &mut Vec<u8>, r: &DeletedRange) -> Result<()> {
    out.push(TAG_DELETE_RANGE);
    put_len_prefixed(out, &r.start, "key")?;
    match &r.end {
        End::Unbounded => out.push(END_UNBOUNDED),
        End::Before(k) => {
            out.push(END_BEFORE);
            put_len_prefixed(out, k, "key")?;
        }
        End::Through(k) => {
            out.push(END_THROUGH);
            put_len_prefixed(out, k, "key")?;
        }
    }
    Ok(())
}

/// Decodes the operation after its tag; `None` if malformed or empty (a writer never logs an
/// empty range).
pub(crate) fn decode(c: &mut Cursor<'_>) -> Option<DeletedRange> {
    let start = c.len_prefixed().ok()?.to_vec();
    let end = match c.u8().ok()? {
        END_UNBOUNDED => End::Unbounded,
        END_BEFORE => End::Before(c.len_prefixed().ok()?.to_vec()),
        END_THROUGH => End::Through(c.len_prefixed().ok()?.to_vec()),
        _ => return None,
    };
    let r = DeletedRange { start, end };
    (!r.is_empty()).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::wal::{
        decode_batch, encode_batch, op_encoded_len, Batch, Op, BATCH_HEADER_LEN, HEADER_LEN,
        KEYSPACE_SWITCH_LEN,
    };
    use crate::expiry::NEVER;

    fn range(start: &[u8], end: End) -> DeletedRange {
        DeletedRange {
            start: start.to_vec(),
            end,
        }
    }

    /// Ranges of every end kind, in two keyspaces beside puts, come back as written; the
    /// record's size is what `encoded_len` says.
    #[test]
    fn range_deletes_round_trip_in_a_batch() {
        let mut b = Batch::default();
        b.part(0)
            .push(Op::from((b"p".to_vec(), Some(b"v".to_vec()))));
        b.push_range(3, range(b"a", End::Unbounded));
        b.push_range(0, range(b"b", End::Before(b"c".to_vec())));
        b.push_range(0, range(b"", End::Through(b"z".to_vec())));
        b.part(3).push(Op::from((b"q".to_vec(), None)));
        let record = encode_batch(&b).unwrap();
        let payload = &record[HEADER_LEN..];
        let back = decode_batch(payload).unwrap();
        assert_eq!(back, b);
        assert_eq!(back.ranges_of(0).count(), 2);
        assert_eq!(back.len(), 5);
        let ranges: usize = b.ranges.iter().map(|(_, r)| encoded_len(r)).sum();
        let ops = op_encoded_len(1, Some(1), NEVER) + op_encoded_len(1, None, NEVER);
        assert_eq!(
            payload.len(),
            BATCH_HEADER_LEN + ranges + ops + KEYSPACE_SWITCH_LEN
        );
    }

    /// An empty range, an unknown end kind or a cut-off operation make the record unusable.
    #[test]
    fn a_bad_range_delete_is_refused() {
        let encode = |r: &DeletedRange| {
            let mut b = Batch::default();
            b.push_range(0, r.clone());
            encode_batch(&b).unwrap()[HEADER_LEN..].to_vec()
        };
        let good = encode(&range(b"b", End::Through(b"c".to_vec())));
        assert!(decode_batch(&good).is_some());
        for empty in [
            range(b"b", End::Before(b"b".to_vec())),
            range(b"c", End::Through(b"b".to_vec())),
        ] {
            assert_eq!(decode_batch(&encode(&empty)), None, "{empty:?}");
        }
        // The end kind follows the tag, the start's length and the start.
        let at = BATCH_HEADER_LEN + 1 + 4 + 1;
        let mut bad = good.clone();
        bad[at] = 3;
        assert_eq!(decode_batch(&bad), None);
        for cut in BATCH_HEADER_LEN..good.len() {
            assert_eq!(decode_batch(&good[..cut]), None, "cut at {cut}");
        }
    }
}
