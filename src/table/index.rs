//! A table's index in memory: each data block's last key and handle (FORMAT.md §3.3), and the
//! search for the one block that may hold a key.
//!
//! Use: `Index::decode(index block, end of the data area)` at `Table::open` (every handle is
//! checked to lie in the data area, keys strictly increasing); `search(key)` → the first block
//! whose last key is ≥ `key`; `handle(i)` → where block `i` is.
//!
//! The search is the cost of a present-key get that finds its block in the cache: a table of
//! 64 MiB has ~16k blocks, and a binary search over an array of (key, handle) entries of 48
//! bytes touches a new cache line on every one of its 14 steps. Measured on present gets
//! (`db_bench --hold present --keys 2000000`, `perf record -e cpu-clock`): `block_for`, that
//! search, was 19.8% of the profile (it compared an 8-byte summary kept beside each key
//! first; over the keys alone it had been 30%). So the search runs over 8-byte integers
//! instead:
//!
//! - `shared`: the bytes every index key starts with (the common prefix of the first and the
//!   last; keys like `user:0000…` share many). A key that does not start with them sorts
//!   before or after every block at once.
//! - `prefixes[i]`: the next 8 bytes of block `i`'s last key after `shared`, big-endian: an
//!   order-preserving summary (`coding::key_prefix`), so unequal summaries decide.
//! - `top[j]`: the summary of the last block of every `STRIDE` blocks: a small array (2 KiB
//!   for 16k blocks) that stays in the CPU cache; its search picks a chunk of `STRIDE`
//!   summaries (two cache lines) that holds the answer.
//!
//! Blocks whose summary ties with the key's are told apart by their keys (a binary search
//! over the tied run, as long as it is).
//!
//! Handles are kept apart from the keys, and once the search has its chunk it requests the
//! chunk's summaries and handles together, so the steps in the chunk and the handle the
//! caller reads next overlap their misses: the handle's load (`Table::data_block`) had been
//! 5.6% of a present get's profile, `Index::search` 4.5% (`perf record --call-graph dwarf`
//! on `db_bench --hold present --keys 2000000`); after, the handle's load left the profile
//! and the search was 5.1%.
//!
//! Measured after the summaries (same command): `Index::search` 7.2% of the profile, plus
//! 4.3% for the one entry (handle) line the answer needs; present gets, medians of 3
//! interleaved rounds against the entry-array search, 220k vs 224k/s on one thread (within
//! this machine's noise) and 418k vs 356k/s on two. The rest of a present get is the block
//! read (`mmap_reads`).

use std::cmp::Ordering;

use super::block::{unseal, BlockHandle, Cursor};
use crate::coding::key_prefix;
use crate::prefetch::prefetch_lines;

/// Summaries per chunk of `prefixes` under one `top` entry: 16 × 8 bytes, two cache lines.
const STRIDE: usize = 16;

/// A table's decoded, validated index.
pub(crate) struct Index {
    /// Bytes every index key starts with.
    shared: Vec<u8>,
    /// `key_prefix(last_key[shared.len()..])` per block.
    prefixes: Vec<u64>,
    /// `prefixes[min((j + 1) × STRIDE, n) − 1]` per chunk `j`.
    top: Vec<u64>,
    /// Per block: its last key (read only when summaries tie).
    keys: Vec<Box<[u8]>>,
    /// Per block: where it is. Apart from the keys, so that the 16 handles of a chunk are
    /// 256 bytes that `search` requests while it searches the chunk.
    handles: Vec<BlockHandle>,
}

impl Index {
    /// Decodes and checks an index block (with its CRC trailer): every handle inside
    /// `[0, data_end)` and at least 4 bytes (a CRC), keys strictly increasing.
    pub(crate) fn decode(block: &[u8], data_end: u64) -> Result<Index, String> {
        let mut c = Cursor::new(unseal(block)?);
        let mut entries: Vec<(Box<[u8]>, BlockHandle)> = Vec::new();
        while !c.is_empty() {
            let last_key: Box<[u8]> = c.len_prefixed()?.into();
            let handle = BlockHandle {
                offset: c.u64()?,
                size: c.u64()?,
            };
            if handle
                .offset
                .checked_add(handle.size)
                .is_none_or(|e| e > data_end)
                || handle.size < 4
            {
                return Err(format!(
                    "data block handle [{}, +{}) outside the data area",
                    handle.offset, handle.size
                ));
            }
            if entries.last().is_some_and(|(k, _)| *k >= last_key) {
                return Err("index keys out of order".into());
            }
            entries.push((last_key, handle));
        }
        Ok(Index::new(entries))
    }

    fn new(entries: Vec<(Box<[u8]>, BlockHandle)>) -> Index {
        let shared = match (entries.first(), entries.last()) {
            (Some((a, _)), Some((b, _))) => {
                let n = a.iter().zip(b.iter()).take_while(|(x, y)| x == y).count();
                a[..n].to_vec()
            }
            _ => Vec::new(),
        };
        let prefixes: Vec<u64> = entries
            .iter()
            .map(|(k, _)| key_prefix(&k[shared.len()..]))
            .collect();
        let top = prefixes
            .chunks(STRIDE)
            .filter_map(|c| c.last().copied())
            .collect();
        let (keys, handles) = entries.into_iter().unzip();
        Index {
            shared,
            prefixes,
            top,
            keys,
            handles,
        }
    }

    /// Data blocks.
    pub(crate) fn len(&self) -> usize {
        self.handles.len()
    }

    /// Where block `i` is (`None` past the end).
    pub(crate) fn handle(&self, i: usize) -> Option<BlockHandle> {
        self.handles.get(i).copied()
    }

    /// Block `i`'s last key (`None` past the end).
    pub(crate) fn last_key(&self, i: usize) -> Option<&[u8]> {
        self.keys.get(i).map(|k| &**k)
    }

    /// The first block whose last key is ≥ `key` (`len()` if none).
    pub(crate) fn search(&self, key: &[u8]) -> usize {
        let n = self.handles.len();
        let s = self.shared.len();
        // A key not starting with `shared` is below or above every index key. (A key shorter
        // than `shared` never compares Equal here: a proper prefix compares Less.)
        match key[..key.len().min(s)].cmp(&self.shared) {
            Ordering::Less => return 0,
            Ordering::Greater => return n,
            Ordering::Equal => {}
        }
        let rest = &key[s..];
        let p = key_prefix(rest);
        // Chunks before `j` end below `p`; chunk `j` ends at or above it.
        let j = self.top.partition_point(|&t| t < p);
        let start = (j * STRIDE).min(n);
        let end = (start + STRIDE).min(n);
        // The chunk's summaries and handles are requested together: the search's steps in
        // the chunk and the handle the caller reads next then wait for one miss, not three.
        let (prefixes, handles) = (&self.prefixes[start..end], &self.handles[start..end]);
        prefetch_lines(prefixes.as_ptr() as usize, size_of_val(prefixes));
        prefetch_lines(handles.as_ptr() as usize, size_of_val(handles));
        let i = start + prefixes.partition_point(|&x| x < p);
        if self.prefixes.get(i) != Some(&p) {
            return i;
        }
        // A tie on the summary: the run of blocks with summary `p` (it may run past this
        // chunk), searched by key.
        let tied = self.prefixes[i..].partition_point(|&x| x == p);
        i + self.keys[i..i + tied].partition_point(|k| &k[s..] < rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index_of(keys: &[Vec<u8>]) -> Index {
        let entries = keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let h = BlockHandle {
                    offset: i as u64 * 10,
                    size: 10,
                };
                (k.clone().into_boxed_slice(), h)
            })
            .collect();
        Index::new(entries)
    }

    /// Every probe's block as a plain binary search over the keys finds it, for key sets with
    /// and without a shared head, ties on the 8-byte summary longer than a chunk, keys
    /// shorter than the shared head and than 8 bytes, and zero bytes.
    #[test]
    fn the_search_agrees_with_a_plain_search_over_the_keys() {
        let mut sets: Vec<Vec<Vec<u8>>> = Vec::new();
        // No shared head; short keys, zero bytes.
        let mut a: Vec<Vec<u8>> = (0..300u32).map(|i| i.to_be_bytes()[1..].to_vec()).collect();
        a.extend([vec![], vec![0], vec![0, 0], vec![0xff; 9]]);
        sets.push(a);
        // A shared head of 10 bytes; a run of 40 keys tied on the next 8 bytes.
        let head = b"user:00000".to_vec();
        let mut b: Vec<Vec<u8>> = (0..200u32)
            .map(|i| [&head[..], format!("{i:06}").as_bytes()].concat())
            .collect();
        b.extend((0..40u8).map(|i| [&head[..], b"12345678", &[i][..]].concat()));
        b.push(head.clone());
        sets.push(b);
        // One block; two blocks.
        sets.push(vec![b"only".to_vec()]);
        sets.push(vec![b"a1".to_vec(), b"a2".to_vec()]);
        sets.push(Vec::new());
        for mut keys in sets {
            keys.sort();
            keys.dedup();
            let index = index_of(&keys);
            let mut probes = keys.clone();
            probes.extend(keys.iter().map(|k| [k.as_slice(), b"\0"].concat()));
            probes.extend(
                keys.iter()
                    .filter(|k| !k.is_empty())
                    .map(|k| k[..k.len() - 1].to_vec()),
            );
            probes.extend([
                vec![],
                vec![0xff; 20],
                b"user:".to_vec(),
                b"user:1".to_vec(),
            ]);
            for k in &probes {
                let plain = keys.partition_point(|x| x.as_slice() < k.as_slice());
                assert_eq!(index.search(k), plain, "{k:?} in {} keys", keys.len());
            }
            assert_eq!(index.len(), keys.len());
            assert_eq!(index.handle(keys.len()), None);
        }
    }

    #[test]
    fn decode_rejects_handles_outside_the_data_area_and_unordered_keys() {
        let block = |entries: &[(&[u8], u64, u64)]| {
            let mut b = Vec::new();
            for (k, off, size) in entries {
                crate::coding::put_len_prefixed(&mut b, k, "k").unwrap();
                b.extend_from_slice(&off.to_le_bytes());
                b.extend_from_slice(&size.to_le_bytes());
            }
            super::super::block::seal(&mut b, 0);
            b
        };
        let good = block(&[(b"a", 0, 10), (b"b", 10, 10)]);
        assert_eq!(Index::decode(&good, 20).unwrap().len(), 2);
        let err = Index::decode(&good, 19).err().unwrap();
        assert!(err.contains("outside the data area"), "{err}");
        let err = Index::decode(&block(&[(b"b", 0, 10), (b"a", 10, 10)]), 20)
            .err()
            .unwrap();
        assert!(err.contains("out of order"), "{err}");
        let err = Index::decode(&block(&[(b"a", 0, 3)]), 20).err().unwrap();
        assert!(err.contains("outside the data area"), "{err}");
    }
}
