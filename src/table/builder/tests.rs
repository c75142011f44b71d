//! Tests of the table builder: block cutting, page padding, layout per format.

use super::*;
use crate::table::{Table, TableReadStats};

#[test]
fn padding_moves_only_blocks_that_straddle_a_page_needlessly() {
    for (offset, len, pad) in [
        (0, 4096, 0),
        (100, 4096, 3996),
        (100, 3996, 0),
        (4000, 200, 96),
        (4000, 96, 0),
        (10, 9000, 0),      // needs 3 pages and touches 3
        (5000, 8192, 3192), // would touch 3 where 2 do
        (8192, 1, 0),
    ] {
        assert_eq!(page_padding(offset, len), pad, "at {offset}, {len} bytes");
    }
}

/// Entries of 16-byte keys and values of 0..600 bytes, some tombstones.
fn entries(n: usize) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    (0..n)
        .map(|i| {
            let v = (i * 7919 % 600, i % 11 == 4);
            let key = format!("key{i:013}").into_bytes();
            (key, (!v.1).then(|| vec![i as u8; v.0]))
        })
        .collect()
}

fn write(
    dir: &Path,
    name: &str,
    opts: TableBuilderOptions,
    entries: &[(Vec<u8>, Option<Vec<u8>>)],
) -> Table {
    let path = dir.join(name);
    let mut b = TableBuilder::create(&path, opts).unwrap();
    for (k, v) in entries {
        b.add(k, v.as_deref()).unwrap();
    }
    b.finish().unwrap();
    let t = Table::open(&path, 1).unwrap();
    let mut stats = TableReadStats::default();
    for (k, v) in entries {
        assert_eq!(
            t.get(k, &mut stats, None).unwrap(),
            Some(v.clone()),
            "{name}"
        );
    }
    t
}

#[test]
fn uncompressed_format_3_blocks_fit_their_size_and_straddle_no_page_needlessly() {
    let dir = tempfile::tempdir().unwrap();
    let want = entries(3000);
    for block_size in [1024, 4096, 8192] {
        let opts = TableBuilderOptions {
            block_size,
            ..TableBuilderOptions::default()
        };
        let t = write(dir.path(), &format!("raw{block_size}"), opts, &want);
        let (mut gaps, mut end) = (0, 0);
        for h in t.data_block_handles() {
            assert!(h.size <= block_size as u64, "{h:?} over {block_size}");
            let pages = (h.offset % PAGE + h.size).div_ceil(PAGE);
            assert_eq!(pages, h.size.div_ceil(PAGE), "{h:?} straddles needlessly");
            assert!(h.offset >= end, "{h:?} overlaps the block before");
            gaps += u64::from(h.offset > end);
            end = h.offset + h.size;
        }
        assert!(gaps > 0, "block size {block_size}: no block needed padding");
        let scanned: Vec<_> = std::sync::Arc::new(t)
            .iter(std::ops::Bound::Unbounded)
            .map(|e| e.map(|e| (e.key, e.value)).unwrap())
            .collect();
        assert_eq!(scanned, want);
    }
}

#[test]
fn format_2_and_compressed_blocks_stay_contiguous() {
    let dir = tempfile::tempdir().unwrap();
    let want = entries(3000);
    for (name, opts) in [
        (
            "v2",
            TableBuilderOptions {
                format_version: 2,
                ..TableBuilderOptions::default()
            },
        ),
        (
            "lz4",
            TableBuilderOptions {
                compression: Compression::Lz4,
                ..TableBuilderOptions::default()
            },
        ),
    ] {
        let t = write(dir.path(), name, opts, &want);
        let mut end = 0;
        for h in t.data_block_handles() {
            assert_eq!(h.offset, end, "{name}: a gap before {h:?}");
            end += h.size;
        }
        assert_eq!(end, t.properties().data_bytes, "{name}");
    }
}
