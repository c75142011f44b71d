//! The block cache: data blocks that were read, checksummed and decoded once, shared by every
//! table of a store, so a hit costs no system call, no CRC and no linear decode.
//!
//! Use: the store makes one `BlockCache` (`Options::block_cache_bytes`) and passes it to
//! `Table::get`, which calls `get(table, offset)` and on a miss reads the block and checks its
//! CRC; it `insert`s it if the cache `admit`s it (missed recently before: `doorkeeper.rs`),
//! else reads it into the thread's scratch buffer (`scratch.rs`) and keeps nothing. Keys are (table file number, block offset): file numbers are never reused,
//! so a block of a deleted table can never be served for a new one; it just ages out.
//!
//! The cache is `quick_cache::sync::Cache` (sharded, CLOCK-Pro-like eviction, weighted by
//! bytes): a hit takes one shard's read lock and clones an `Arc`, so two readers contend only
//! when they hit the same shard.
//!
//! What a cached block holds was measured (`db_bench`, 2M keys, 32 MiB cache, so ~88% of
//! present-key gets miss): a first version decoded every entry on a miss (checking key order
//! and recording entry starts for a binary search on hits); present gets fell from 319k/s
//! (no cache) to 204k/s on one thread, the full decode, its allocations and the key-order
//! comparisons costing more on the many misses than the binary search saved on the few hits.
//! A block now holds its verified payload and a lookup decodes entries up to the key, as the
//! uncached path does (~16 entry headers for a 4 KiB block of 116-byte entries).
//!
//! What a miss-heavy store pays for the cache (same run, `db_bench --hold present`, 2 threads):
//! 603k gets/s with 32 MiB against 872k with `block_cache_bytes = 0`. Neither 64 shards instead
//! of quick_cache's default 8 (539k) nor jemalloc instead of glibc malloc (617k–665k) closed
//! the gap: a miss copies the block into fresh, cold memory that stays cached, where the
//! uncached path reuses one hot buffer. So a miss now inserts only a block missed once before,
//! recently (`doorkeeper.rs`); a first miss is read into the thread's reused buffer
//! (`scratch.rs`). Interleaved pairs of `db_bench --hold present --hold-secs 8` (2×10^6 keys
//! in 2 + 3 tables, 32 MiB) against the build before: 1.04, 1.02, 1.12, 1.15× at 1 thread,
//! 1.40, 1.14, 1.48× at 2; absent gets (`--hold absent`) 1.05, 0.99, 1.06, 1.07×. The hit
//! rate stayed: 13.1% against 13.2% of present-key lookups, 43.5% against 42.6% of the
//! absent gets' false-positive reads. Under skew (`--hold-skew 4`: a tenth of the keys get
//! 56% of the gets; `--hold-skew 2`) it rose: 34.7% against 33.3%, 17.7% against 16.9%, at
//! 1.18, 1.29× and 1.04, 1.10× the rate of the same build admitting every block (2 pairs
//! each).
//!
//! With compression (table format 3) the cache holds *raw* (decompressed) blocks, as
//! RocksDB's block cache does by default: a hit then costs what it costs without compression.
//! Measured (`db_bench --compression lz4 --values mixed`, 10^6 keys, 100-byte values half
//! random, half text, 1.7× with LZ4): decompressing one 4 KiB block takes 0.47 µs, against
//! ~3.7 µs for a whole present get, most of which is the `pread` of a miss; a hit is far
//! cheaper than that, so holding compressed blocks would add the 0.47 µs to every hit to fit
//! 1.7× as many blocks in the same bytes. On the miss path the profile of compacted present
//! gets shows `lz4_flex` decompression at 8.0% and zeroing the output buffer at 3.9%
//! (`perf record -e cpu-clock -g` on `db_bench --hold present --hold-compacted --compression
//! lz4 --values mixed --keys 1000000`).

use std::cmp::Ordering;
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::block::{entry_at, next_entry, Cursor, SCAN_AHEAD};
use super::doorkeeper::Doorkeeper;
use crate::coding::{cmp_prefixed, key_prefix};
use crate::expiry::Now;
use crate::prefetch::{prefetch_address, prefetch_lines};

/// A data block whose checksum was verified when it was read: its payload.
#[derive(Debug)]
pub(crate) struct Block {
    payload: Vec<u8>,
}

impl Block {
    /// A block from a payload whose checksum was checked.
    pub(crate) fn new(payload: Vec<u8>) -> Block {
        Block { payload }
    }

    /// The verified payload.
    pub(crate) fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// `find` in this block.
    #[cfg(test)]
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Option<&[u8]>>, String> {
        find(&self.payload, key, &Now::never())
    }

    /// Bytes charged to the cache: the payload and the fixed parts.
    fn charge(&self) -> u64 {
        (self.payload.capacity() + 64) as u64
    }
}

/// The entry for `key` in a verified data block payload: `Some(Some(v))` a value,
/// `Some(None)` a tombstone or a put expired at `now`, `None` absent. Decodes entries in order up to `key`; the error
/// says what was malformed.
///
/// Keys are compared by their 8-byte `key_prefix` first (one load and compare for keys of 8
/// bytes or more), the bytes only when those tie. With a `memcmp` call per entry, the scan
/// (`next_entry`, `memcmp`, `Cursor::u32`, `find_in`) was ~11% of an absent get at 2×10^6
/// keys, one false positive per 35 gets (`db_bench --hold absent`, `perf record`); with the
/// prefix first, `memcmp` (2.7%) left the profile and the scan fell to ~9%.
///
/// Each entry's fixed part is decoded in place, with one bounds check for it and one for its
/// key and value. Through `next_entry` (a call per entry, returning its entry or a `String`
/// error) finding an absent key in a 4 KiB block of 34 entries (16-byte keys, 100-byte
/// values) already in L1 took 200 ns, here 74 ns (a timing loop over 8 such blocks, 160,000
/// lookups); the scan was 7% of an absent get's profile at 2×10^6 keys settled (`find_in`,
/// one false positive per 35 gets) and ~10% of a present get's. Any entry this decoding
/// cannot take sends the whole lookup to `find_checked`, whose errors say what was wrong.
pub(crate) fn find<'b>(
    payload: &'b [u8],
    key: &[u8],
    now: &Now,
) -> Result<Option<Option<&'b [u8]>>, String> {
    let p = key_prefix(key);
    let base = payload.as_ptr() as usize;
    prefetch_lines(base, SCAN_AHEAD);
    let mut pos = 0;
    while pos < payload.len() {
        prefetch_address(base + pos + SCAN_AHEAD);
        // An entry in place (FORMAT.md §3.2): its fixed part, key and value bounds-checked.
        let Ok(e) = entry_at(payload, pos) else {
            return find_checked(payload, key, now);
        };
        let k = &payload[e.key];
        match cmp_prefixed(key_prefix(k), k, p, key) {
            Ordering::Less => pos = e.end,
            Ordering::Equal if now.expired(e.expiry) => return Ok(Some(None)),
            Ordering::Equal => return Ok(Some(e.value.map(|v| &payload[v]))),
            Ordering::Greater => break,
        }
    }
    Ok(None)
}

/// `find` entry by entry through `next_entry`, whose errors say what was malformed: what
/// `find` falls back to when its fast decoding meets an entry it cannot take, so that both
/// give the same answer or the same error for every payload.
pub(crate) fn find_checked<'b>(
    payload: &'b [u8],
    key: &[u8],
    now: &Now,
) -> Result<Option<Option<&'b [u8]>>, String> {
    let p = key_prefix(key);
    let mut c = Cursor::new(payload);
    while !c.is_empty() {
        let e = next_entry(&mut c)?;
        match cmp_prefixed(key_prefix(e.key), e.key, p, key) {
            Ordering::Less => continue,
            Ordering::Equal if now.expired(e.expiry) => return Ok(Some(None)),
            Ordering::Equal => return Ok(Some(e.value)),
            Ordering::Greater => break,
        }
    }
    Ok(None)
}

#[derive(Clone)]
struct ByBytes;

impl Weighter<(u64, u64), Arc<Block>> for ByBytes {
    fn weight(&self, _key: &(u64, u64), block: &Arc<Block>) -> u64 {
        block.charge()
    }
}

/// A store's cache of decoded data blocks, bounded in bytes.
pub struct BlockCache {
    cache: Cache<(u64, u64), Arc<Block>, ByBytes>,
    /// Which missed blocks to insert (`doorkeeper.rs`).
    doorkeeper: Doorkeeper,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("bytes", &self.bytes())
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl BlockCache {
    /// A cache of at most `capacity` bytes; `None` for 0 (no cache).
    pub fn new(capacity: u64) -> Option<BlockCache> {
        (capacity > 0).then(|| BlockCache {
            // quick_cache sizes its tables from an item estimate: a 4 KiB block each.
            cache: Cache::with_weighter((capacity / 4096).max(16) as usize, capacity, ByBytes),
            doorkeeper: Doorkeeper::new(capacity / 4096),
        })
    }

    pub(crate) fn get(&self, table: u64, offset: u64) -> Option<Arc<Block>> {
        self.cache.get(&(table, offset))
    }

    /// Whether a block just missed should be read for the cache and inserted (it was missed
    /// recently before), or read into the thread's scratch buffer and not kept.
    pub(crate) fn admit(&self, table: u64, offset: u64) -> bool {
        self.doorkeeper.admit(table, offset)
    }

    pub(crate) fn insert(&self, table: u64, offset: u64, block: Arc<Block>) {
        self.cache.insert((table, offset), block);
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.cache.weight()
    }

    /// The bound given at creation.
    pub fn capacity(&self) -> u64 {
        self.cache.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::block::put_entry;

    fn block(keys: &[&[u8]]) -> Vec<u8> {
        let mut b = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let v = format!("v{i}");
            // Every fifth entry (a put unless also every third) expires at 1000 + i.
            let expiry = if i % 5 == 0 {
                1_000 + i as u64
            } else {
                crate::expiry::NEVER
            };
            put_entry(&mut b, k, (i % 3 != 2).then_some(v.as_bytes()), expiry).unwrap();
        }
        b
    }

    #[test]
    fn an_expired_put_is_found_as_a_tombstone() {
        let keys: Vec<Vec<u8>> = (0..40u32).map(|i| (i * 2).to_be_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let b = block(&refs);
        for (i, k) in refs.iter().enumerate() {
            for at in [0, 1_000, 1_010, 2_000] {
                let now = if at == 0 {
                    Now::never()
                } else {
                    Now::fixed(at)
                };
                let expired = i % 5 == 0 && at >= 1_000 + i as u64;
                let want = (i % 3 != 2 && !expired).then(|| format!("v{i}").into_bytes());
                let got = find(&b, k, &now).unwrap().map(|v| v.map(<[u8]>::to_vec));
                assert_eq!(got, Some(want), "key {i} at {at}");
            }
        }
    }

    #[test]
    fn finds_every_key_and_nothing_else() {
        let keys: Vec<Vec<u8>> = (0..40u32).map(|i| (i * 2).to_be_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let b = Block::new(block(&refs));
        for (i, k) in refs.iter().enumerate() {
            let want = (i % 3 != 2).then(|| format!("v{i}").into_bytes());
            assert_eq!(b.get(k).unwrap().map(|v| v.map(<[u8]>::to_vec)), Some(want));
            let odd = (i as u32 * 2 + 1).to_be_bytes();
            assert_eq!(b.get(&odd).unwrap(), None);
        }
        assert_eq!(b.get(b"").unwrap(), None);
        assert!(Block::new(Vec::new()).get(b"a").unwrap().is_none());
    }

    /// Keys that tie on their 8-byte prefix (shorter than 8 bytes with trailing zeros, equal
    /// first 8 bytes, one a prefix of another): `find` answers as a plain comparison would,
    /// for every key in the block and for keys between, before and after them.
    #[test]
    fn prefix_ties_are_decided_by_the_whole_key() {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for head in [
            &b""[..],
            b"a",
            b"a\0",
            b"a\0\0",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefgz",
        ] {
            for tail in [&b""[..], b"\0", b"1", b"12", b"\xff"] {
                keys.push([head, tail].concat());
            }
        }
        keys.sort();
        keys.dedup();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let b = Block::new(block(&refs));
        let mut probes = keys.clone();
        probes.extend(keys.iter().map(|k| [k.as_slice(), b"\0"].concat()));
        probes.extend(keys.iter().map(|k| [k.as_slice(), b"0"].concat()));
        probes.push(vec![0xff; 9]);
        for p in &probes {
            let want = keys
                .iter()
                .position(|k| k == p)
                .map(|i| (i % 3 != 2).then(|| format!("v{i}").into_bytes()));
            assert_eq!(
                b.get(p).unwrap().map(|v| v.map(<[u8]>::to_vec)),
                want,
                "{p:?}"
            );
        }
    }

    /// `find` and `find_checked` give the same answer or the same error for every payload:
    /// well-formed blocks, and the same with bytes changed, cut short or lengthened.
    #[test]
    fn the_fast_scan_answers_as_the_checked_one() {
        use proptest::prelude::*;
        let keys: Vec<Vec<u8>> = (0..24u32)
            .map(|i| format!("k{:02}{}", i * 3, "x".repeat(i as usize % 11)).into_bytes())
            .collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let good = block(&refs);
        let mut probes = keys.clone();
        probes.extend((0..24u32).map(|i| format!("k{:02}", i * 3 + 1).into_bytes()));
        probes.extend([Vec::new(), b"zzz".to_vec(), b"k".to_vec()]);
        let edits = proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4);
        proptest!(|(edits in edits, cut in any::<usize>(), cut_it in any::<bool>(), tail in proptest::collection::vec(any::<u8>(), 0..12))| {
            let mut b = good.clone();
            for (at, byte) in edits {
                let at = at % b.len();
                b[at] = byte;
            }
            if cut_it {
                b.truncate(cut % (b.len() + 1));
            }
            b.extend_from_slice(&tail);
            for p in &probes {
                for now in [Now::never(), Now::fixed(1_010)] {
                    prop_assert_eq!(find(&b, p, &now), find_checked(&b, p, &now), "probe {:?}", p);
                }
            }
        });
        // And on the unedited block, every key is found.
        for (i, k) in refs.iter().enumerate() {
            let want = (i % 3 != 2).then(|| format!("v{i}").into_bytes());
            let found = find(&good, k, &Now::never())
                .unwrap()
                .map(|v| v.map(<[u8]>::to_vec));
            assert_eq!(found, Some(want));
        }
    }

    #[test]
    fn a_malformed_entry_is_an_error() {
        let good = block(&[b"a", b"b"]);
        let first = block(&[b"a"]).len();
        for len in (first + 1)..good.len() {
            assert!(
                Block::new(good[..len].to_vec()).get(b"b").is_err(),
                "cut at {len}"
            );
        }
    }

    #[test]
    fn the_cache_is_bounded_in_bytes() {
        let c = BlockCache::new(64 << 10).unwrap();
        assert!(BlockCache::new(0).is_none());
        let keys: Vec<Vec<u8>> = (0..200u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        for off in 0..200 {
            c.insert(1, off, Arc::new(Block::new(block(&refs))));
        }
        assert!(
            c.bytes() <= c.capacity(),
            "{} > {}",
            c.bytes(),
            c.capacity()
        );
        assert!(c.bytes() > 0);
        assert!(c.get(1, 199).is_some() || c.get(1, 198).is_some());
    }
}
