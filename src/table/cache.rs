//! The block cache: data blocks that were read, checksummed and decoded once, shared by every
//! table of a store, so a hit costs no system call, no CRC and no linear decode.
//!
//! Use: the store makes one `BlockCache` (`Options::block_cache_bytes`) and passes it to
//! `Table::get`, which calls `get(table, offset)` and on a miss reads the block, builds a
//! `Block` (`Block::decode` verifies every entry and records where each starts) and
//! `insert`s it. Keys are (table file number, block offset): file numbers are never reused,
//! so a block of a deleted table can never be served for a new one; it just ages out.
//!
//! The cache is `quick_cache::sync::Cache` (sharded, CLOCK-Pro-like eviction, weighted by
//! bytes): a hit takes one shard's read lock and clones an `Arc`, so two readers contend only
//! when they hit the same shard. A `Block` is binary-searched through its entry starts: a
//! 4 KiB block of 16-byte keys and 100-byte values has ~32 entries, found in 5 comparisons
//! instead of ~16 entry decodes on average.

use std::cmp::Ordering;
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::block::{next_entry, Cursor, RawEntry};

/// A verified data block and where each entry starts (ascending key order).
#[derive(Debug)]
pub(crate) struct Block {
    payload: Vec<u8>,
    starts: Vec<u32>,
}

impl Block {
    /// Decodes `payload` (a data block whose checksum was checked): every entry must parse and
    /// keys must ascend. The error says what was wrong.
    pub(crate) fn decode(payload: Vec<u8>) -> Result<Block, String> {
        let mut starts = Vec::new();
        let mut c = Cursor::new(&payload);
        let mut prev: Option<&[u8]> = None;
        while !c.is_empty() {
            let start = payload.len() - c.remaining();
            let e = next_entry(&mut c)?;
            if prev.is_some_and(|p| p >= e.key) {
                return Err("data block keys out of order".into());
            }
            prev = Some(e.key);
            starts.push(u32::try_from(start).map_err(|_| "data block over 4 GiB".to_string())?);
        }
        Ok(Block { payload, starts })
    }

    fn entry(&self, i: usize) -> Result<RawEntry<'_>, String> {
        let start = self.starts.get(i).copied().unwrap_or(u32::MAX) as usize;
        let rest = self
            .payload
            .get(start..)
            .ok_or_else(|| format!("entry {i} outside its block"))?;
        next_entry(&mut Cursor::new(rest))
    }

    /// The entry for `key`: `Some(Some(v))` a value, `Some(None)` a tombstone, `None` absent.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Option<&[u8]>>, String> {
        let (mut lo, mut hi) = (0, self.starts.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = self.entry(mid)?;
            match e.key.cmp(key) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(Some(e.value)),
            }
        }
        Ok(None)
    }

    /// Bytes charged to the cache: payload, entry starts and the fixed parts.
    fn charge(&self) -> u64 {
        (self.payload.capacity() + 4 * self.starts.capacity() + 64) as u64
    }
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
        })
    }

    pub(crate) fn get(&self, table: u64, offset: u64) -> Option<Arc<Block>> {
        self.cache.get(&(table, offset))
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
            put_entry(&mut b, k, (i % 3 != 2).then_some(v.as_bytes())).unwrap();
        }
        b
    }

    #[test]
    fn binary_search_finds_every_key_and_nothing_else() {
        let keys: Vec<Vec<u8>> = (0..40u32).map(|i| (i * 2).to_be_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let b = Block::decode(block(&refs)).unwrap();
        for (i, k) in refs.iter().enumerate() {
            let want = (i % 3 != 2).then(|| format!("v{i}").into_bytes());
            assert_eq!(b.get(k).unwrap().map(|v| v.map(<[u8]>::to_vec)), Some(want));
            let odd = (i as u32 * 2 + 1).to_be_bytes();
            assert_eq!(b.get(&odd).unwrap(), None);
        }
        assert_eq!(b.get(b"").unwrap(), None);
        assert!(Block::decode(Vec::new()).unwrap().get(b"a").unwrap().is_none());
    }

    #[test]
    fn decode_rejects_damage_and_disorder() {
        let good = block(&[b"a", b"b"]);
        assert!(Block::decode(block(&[b"b", b"a"])).unwrap_err().contains("order"));
        assert!(Block::decode(block(&[b"a", b"a"])).unwrap_err().contains("order"));
        let first = block(&[b"a"]).len(); // a cut there leaves one whole entry
        for len in (1..good.len()).filter(|&l| l != first) {
            assert!(Block::decode(good[..len].to_vec()).is_err(), "cut at {len}");
        }
        assert_eq!(Block::decode(good[..first].to_vec()).unwrap().starts.len(), 1);
    }

    #[test]
    fn the_cache_is_bounded_in_bytes() {
        let c = BlockCache::new(64 << 10).unwrap();
        assert!(BlockCache::new(0).is_none());
        let keys: Vec<Vec<u8>> = (0..200u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        for off in 0..200 {
            c.insert(1, off, Arc::new(Block::decode(block(&refs)).unwrap()));
        }
        assert!(c.bytes() <= c.capacity(), "{} > {}", c.bytes(), c.capacity());
        assert!(c.bytes() > 0);
        assert!(c.get(1, 199).is_some() || c.get(1, 198).is_some());
    }
}
