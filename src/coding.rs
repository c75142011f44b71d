//! Little-endian field helpers shared by every on-disk structure (table blocks, WAL records,
//! the manifest header): a bounds-checked read cursor, and length fields that refuse to
//! truncate. Nothing here panics on malformed input: every read returns an error instead.

/// A cursor over little-endian fields with bounds checks.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    #[inline]
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }
    #[inline]
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                format!(
                    "field of {n} bytes at offset {} overruns a {}-byte block",
                    self.pos,
                    self.buf.len()
                )
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    #[inline]
    pub(crate) fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }
    #[inline]
    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    #[inline]
    pub(crate) fn u64(&mut self) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.bytes(8)?);
        Ok(u64::from_le_bytes(a))
    }
    /// A u32 length followed by that many bytes.
    #[inline]
    pub(crate) fn len_prefixed(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.bytes(n)
    }
}

/// `len` as a u32 length field, or an error naming `what` if it does not fit.
pub(crate) fn u32_len(len: usize, what: &str) -> crate::error::Result<u32> {
    u32::try_from(len).map_err(|_| {
        crate::error::Error::InvalidArgument(format!(
            "{what} is {len} bytes, more than a 32-bit length field holds"
        ))
    })
}

/// Appends `len` as a u32 length field (see [`u32_len`]).
pub(crate) fn put_u32_len(out: &mut Vec<u8>, len: usize, what: &str) -> crate::error::Result<()> {
    out.extend_from_slice(&u32_len(len, what)?.to_le_bytes());
    Ok(())
}

/// Appends a u32 length and then `bytes`.
pub(crate) fn put_len_prefixed(
    out: &mut Vec<u8>,
    bytes: &[u8],
    what: &str,
) -> crate::error::Result<()> {
    put_u32_len(out, bytes.len(), what)?;
    out.extend_from_slice(bytes);
    Ok(())
}

/// The first 8 bytes of `key`, big-endian, zero-padded: order-preserving (a < b implies
/// prefix(a) <= prefix(b)), so unequal prefixes decide a comparison without the keys.
///
/// A key of 8 bytes or more is one load; a shorter one is assembled a byte at a time. The
/// first version copied `min(len, 8)` bytes into a buffer: a variable-length copy, which the
/// compiler made a `memcpy` call, 6.5% of an absent get at 2x10^6 keys (`perf record
/// --call-graph dwarf` on `db_bench --hold absent`; a get computes it for every level).
#[inline]
pub(crate) fn key_prefix(key: &[u8]) -> u64 {
    if let Some(head) = key.first_chunk::<8>() {
        return u64::from_be_bytes(*head);
    }
    key.iter()
        .zip((0..8u32).rev())
        .fold(0, |p, (&b, i)| p | u64::from(b) << (8 * i))
}

/// For each of `probes`, the number of elements of `sorted` (ascending) below it, as
/// `sorted.partition_point(|&m| m < probe)`, into `out`. The searches run in lockstep, one
/// step of every probe per round: each search is a chain of dependent loads and compares, and
/// one at a time the next step waits on the last; across probes the steps are independent and
/// overlap. Measured in `multi_get`: the one-at-a-time search's compare was ~7% of an
/// absent `multi_get` at the defaults (`db_bench --defaults --hold absent-multi`).
pub(crate) fn partition_points(sorted: &[u64], probes: &[u64], out: &mut [usize]) {
    debug_assert_eq!(probes.len(), out.len());
    out.fill(0);
    if sorted.is_empty() {
        return;
    }
    // std's search: `base + size` never passes the end, so `base + half` < `sorted.len()`.
    let mut size = sorted.len();
    while size > 1 {
        let half = size / 2;
        for (base, &p) in out.iter_mut().zip(probes) {
            let mid = *base + half;
            let below = sorted.get(mid).is_some_and(|&m| m < p);
            *base = std::hint::select_unpredictable(below, mid, *base);
        }
        size -= half;
    }
    for (base, &p) in out.iter_mut().zip(probes) {
        *base += usize::from(sorted.get(*base).is_some_and(|&m| m < p));
    }
}

/// Compares keys `a` and `b` given their `key_prefix`es: the prefixes first, the key bytes
/// only when those tie (same result as `a.cmp(b)`).
pub(crate) fn cmp_prefixed(a_prefix: u64, a: &[u8], b_prefix: u64, b: &[u8]) -> std::cmp::Ordering {
    a_prefix.cmp(&b_prefix).then_with(|| a.cmp(b))
}

/// A key as text: printable ASCII as is, other bytes as `\xNN`.
pub fn printable(key: &[u8]) -> String {
    key.iter()
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `key_prefix` is the zero-padded first 8 bytes, for every length up to and past 8, and
    /// preserves order between keys.
    #[test]
    fn partition_points_agree_with_partition_point() {
        use proptest::prelude::*;
        proptest!(|(mut sorted in proptest::collection::vec(0u64..40, 0..40),
                    probes in proptest::collection::vec(0u64..45, 0..70))| {
            sorted.sort_unstable();
            let mut out = vec![usize::MAX; probes.len()];
            partition_points(&sorted, &probes, &mut out);
            for (&p, &got) in probes.iter().zip(&out) {
                prop_assert_eq!(got, sorted.partition_point(|&m| m < p), "probe {}", p);
            }
        });
    }

    #[test]
    fn key_prefix_is_the_padded_head_and_preserves_order() {
        let mut keys: Vec<Vec<u8>> = vec![Vec::new()];
        for len in 1..=10usize {
            for b in [0u8, 1, 0x7f, 0x80, 0xff] {
                keys.push((0..len).map(|i| b.wrapping_add(i as u8)).collect());
                keys.push(vec![b; len]);
            }
        }
        keys.sort();
        for k in &keys {
            let mut padded = [0u8; 8];
            let n = k.len().min(8);
            padded[..n].copy_from_slice(&k[..n]);
            assert_eq!(key_prefix(k), u64::from_be_bytes(padded), "{k:?}");
        }
        for w in keys.windows(2) {
            assert!(key_prefix(&w[0]) <= key_prefix(&w[1]), "{w:?}");
        }
    }

    #[test]
    fn cursor_reads_fields_and_rejects_overruns() {
        let mut out = Vec::new();
        put_len_prefixed(&mut out, b"key", "key").unwrap();
        out.extend_from_slice(&7u64.to_le_bytes());
        let mut c = Cursor::new(&out);
        assert_eq!(c.len_prefixed().unwrap(), b"key");
        assert_eq!(c.u64().unwrap(), 7);
        assert!(c.is_empty());
        assert!(c.u8().unwrap_err().contains("overruns"));
        let huge = u32::MAX.to_le_bytes();
        assert!(Cursor::new(&huge).len_prefixed().is_err());
    }

    #[test]
    fn lengths_past_u32_are_refused_not_truncated() {
        assert_eq!(u32_len(5, "x").unwrap(), 5);
        let too_big = u32::MAX as usize + 1;
        let e = u32_len(too_big, "value").unwrap_err().to_string();
        assert!(e.contains("value is 4294967296 bytes"), "{e}");
    }
}
