//! Tests of the SST reader, and `reseal`, which the decoder fuzzing uses to recompute the
//! checksums of mutated tables.

use super::*;
use crate::inspect::rocksdb_checksum as checksum;

#[test]
fn block_entries_decode_key_deltas_and_refuse_overruns() {
    // Two entries: "abc" -> "1", then shared 2 + "d" -> "22"; one restart at 0.
    let mut b = vec![0, 3, 1, b'a', b'b', b'c', b'1', 2, 1, 2, b'd', b'2', b'2'];
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    let e = block_entries(&b, "test").unwrap();
    assert_eq!(e[1], (b"abd".to_vec(), b"22".to_vec()));
    let mut bad = b.clone();
    bad[1] = 200; // key longer than the block
    assert!(block_entries(&bad, "test").is_err());
    let mut bad = b.clone();
    bad[7] = 9; // shares more than the previous key has
    assert!(block_entries(&bad, "test").is_err());
    let n = bad.len();
    bad[n - 4..].copy_from_slice(&1000u32.to_le_bytes());
    assert!(block_entries(&bad, "test").is_err());
}

/// Appends `block` and its trailer (uncompressed, CRC-32C as format_version 5 writes it).
fn push_block(file: &mut Vec<u8>, block: &[u8]) {
    file.extend_from_slice(block);
    let crc = crc32c::crc32c_append(crc32c::crc32c(block), &[0]);
    file.push(0);
    file.extend_from_slice(&crc.rotate_right(15).wrapping_add(0xa282_ead8).to_le_bytes());
}

/// A format_version 5 table (CRC-32C) whose metaindex block is `meta`.
fn table_with_metaindex(meta: &[u8]) -> Vec<u8> {
    let mut file = Vec::new();
    push_block(&mut file, meta);
    let mut footer = vec![1u8, 0, 0]; // CRC-32C; metaindex at 0 (varint), size next
    let mut size = meta.len() as u64;
    footer.truncate(2);
    while size >= 0x80 {
        footer.push(size as u8 | 0x80);
        size >>= 7;
    }
    footer.push(size as u8);
    footer.resize(41, 0);
    footer.extend_from_slice(&5u32.to_le_bytes());
    footer.extend_from_slice(&BLOCK_BASED_MAGIC.to_le_bytes());
    file.extend_from_slice(&footer);
    file
}

/// A constructed metaindex whose every entry repeats all of the previous key (3 bytes an
/// entry, after one 64 KiB key): 1 MiB of block would materialise ~22 GB of keys. It is
/// refused, quickly, naming the block.
#[test]
fn a_block_whose_keys_expand_quadratically_is_refused() {
    let mut meta = vec![0u8];
    let mut len = 64u64 << 10;
    while len >= 0x80 {
        meta.push(len as u8 | 0x80);
        len >>= 7;
    }
    meta.push(len as u8);
    meta.push(0);
    meta.extend(std::iter::repeat_n(b'k', 64 << 10));
    while meta.len() < 1 << 20 {
        meta.extend_from_slice(&[0x80, 0x80, 0x04, 0, 0]); // shared 65,536, nothing new
    }
    meta.extend_from_slice(&0u32.to_le_bytes());
    meta.extend_from_slice(&1u32.to_le_bytes());
    let started = std::time::Instant::now();
    let e = read_table("t.sst", &table_with_metaindex(&meta)).unwrap_err();
    assert!(e.contains("metaindex block") && e.contains("expand"), "{e}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// A block whose bytes or trailer changed is refused by its checksum.
#[test]
fn a_damaged_block_fails_its_checksum() {
    let mut meta = Vec::new();
    meta.extend_from_slice(&0u32.to_le_bytes());
    meta.extend_from_slice(&1u32.to_le_bytes());
    let file = table_with_metaindex(&meta);
    assert!(read_table("t.sst", &file).is_ok());
    for i in 0..meta.len() + 5 {
        let mut f = file.clone();
        f[i] ^= 0x10;
        let e = read_table("t.sst", &f).unwrap_err();
        assert!(e.contains("checksum mismatch"), "byte {i}: {e}");
    }
}

#[test]
fn every_truncation_and_flip_of_a_table_is_an_error_or_a_report() {
    // A minimal format_version 5 table: metaindex with a filter and properties.
    let mut file = Vec::new();
    let filter = {
        let mut f = vec![0u8; 64];
        f.extend_from_slice(&[0xff, 0, 6, 0, 0]); // fast local Bloom, 6 probes
        f
    };
    push_block(&mut file, &filter);
    let entry = |key: &str, h: Handle| {
        let mut v = Vec::new();
        for x in [h.offset, h.size] {
            let mut x = x;
            while x >= 0x80 {
                v.push(x as u8 | 0x80);
                x >>= 7;
            }
            v.push(x as u8);
        }
        let mut e = vec![0, key.len() as u8, v.len() as u8];
        e.extend_from_slice(key.as_bytes());
        e.extend_from_slice(&v);
        e
    };
    let mut meta = entry(
        "fullfilter.rocksdb.BuiltinBloomFilter",
        Handle {
            offset: 0,
            size: filter.len() as u64,
        },
    );
    meta.extend_from_slice(&0u32.to_le_bytes());
    meta.extend_from_slice(&1u32.to_le_bytes());
    let meta_handle = Handle {
        offset: file.len() as u64,
        size: meta.len() as u64,
    };
    push_block(&mut file, &meta);
    let mut footer = vec![1u8];
    let mut part2 = Vec::new();
    for x in [meta_handle.offset, meta_handle.size, 0, 0] {
        part2.push(x as u8); // all < 128
    }
    part2.resize(40, 0);
    footer.extend_from_slice(&part2);
    footer.extend_from_slice(&5u32.to_le_bytes());
    footer.extend_from_slice(&BLOCK_BASED_MAGIC.to_le_bytes());
    file.extend_from_slice(&footer);
    let r = read_table("t.sst", &file).unwrap();
    assert_eq!(r.format_version, 5);
    let b = r.filters[0].builtin.as_ref().unwrap();
    assert_eq!((b.kind, b.num_probes), ("fast_local_bloom", Some(6)));
    for cut in 0..file.len() {
        let _ = read_table("t.sst", &file[cut..]);
        let _ = read_table("t.sst", &file[..cut]);
    }
    for i in 0..file.len() {
        for bit in 0..8 {
            let mut f = file.clone();
            f[i] ^= 1 << bit;
            let _ = read_table("t.sst", &f);
        }
    }
}

/// Recomputes the checksum of every block the footer and metaindex name (as far as they
/// decode), so mutation fuzzing reaches the decoders behind the checksums.
pub(crate) fn reseal(bytes: &mut [u8]) {
    let Ok(Footer {
        checksum: kind,
        base_context: base,
        metaindex: meta,
        ..
    }) = footer(bytes)
    else {
        return;
    };
    let seal = |bytes: &mut [u8], h: Handle| {
        let Some(end) = h
            .offset
            .checked_add(h.size)
            .filter(|&e| e + BLOCK_TRAILER <= bytes.len() as u64)
        else {
            return;
        };
        let (start, end) = (h.offset as usize, end as usize);
        if let Some(v) =
            checksum::stored_value(kind, base, h.offset, &bytes[start..end], bytes[end])
        {
            bytes[end + 1..end + 5].copy_from_slice(&v.to_le_bytes());
        }
    };
    seal(bytes, meta);
    let entries = {
        let end = (meta.offset + meta.size) as usize;
        block_entries(&bytes[meta.offset as usize..end], "metaindex").unwrap_or_default()
    };
    for (_, value) in entries {
        let mut pos = 0;
        if let Some(h) = Handle::decode(&value, &mut pos) {
            seal(bytes, h);
        }
    }
}
