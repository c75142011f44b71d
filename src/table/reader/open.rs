//! Opening a table (`Table::open`, `Table::open_in`): the footer, properties and index read
//! and validated, the filter blocks loaded where `TableOpen` says (FORMAT.md §3); and the
//! positional block reads the rest of the reader shares.

use std::path::Path;

use super::super::block::{unseal, BlockHandle};
use super::super::filter_state::{
    FilterBytes, FilterPages, FilterProblem, FilterState, RangeFilterState,
};
use super::super::footer::{Footer, FooterError, FOOTER_LEN, FOOTER_V1_LEN, TABLE_VERSION};
use super::super::index::Index;
use super::super::properties::Properties;
use super::super::range_set::{End, RangeSet};
use super::Table;
use crate::coding::key_prefix;
use crate::error::{Error, Result};
use crate::filter::{FilterReader, RangeFilterReader};
use crate::fs::{FileSystem, RandomAccessFile, StdFs};
use crate::prefix::PrefixExtractor;

/// How a table's data blocks are read (`Options::mmap_reads`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TableReads {
    /// Positional reads into a buffer (`pread`), through the block cache.
    #[default]
    Pread,
    /// Through a memory map, where the file system has one: a table stored uncompressed is
    /// looked up in the mapped bytes in place (checksum checked on every read, no copy, no
    /// block cache); a compressed one reads its blocks out of the map and caches them
    /// decompressed, as with `Pread`.
    Mmap,
}

/// How a table is opened: how its data blocks are read and where its filters are held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableOpen {
    /// How data blocks are read.
    pub reads: TableReads,
    /// Where the filter blocks are held.
    pub filters: FilterPages,
}

/// Reads the block at `h` into a new buffer.
fn read_at(file: &dyn RandomAccessFile, path: &Path, h: BlockHandle) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    read_at_into(file, path, h, &mut buf)?;
    Ok(buf)
}

/// `read_at` into `buf`, whose length becomes `h.size`.
pub(super) fn read_at_into(
    file: &dyn RandomAccessFile,
    path: &Path,
    h: BlockHandle,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let len = usize::try_from(h.size)
        .map_err(|_| Error::corruption(path, "block size overflows usize"))?;
    // Only bytes past the buffer's length are zeroed: a reused buffer keeps its old bytes,
    // which the read overwrites.
    if buf.len() >= len {
        buf.truncate(len);
    } else {
        buf.resize(len, 0);
    }
    read_into(file, path, h, buf)
}

/// Reads the block at `h` into `buf` (of `h.size` bytes).
fn read_into(
    file: &dyn RandomAccessFile,
    path: &Path,
    h: BlockHandle,
    buf: &mut [u8],
) -> Result<()> {
    file.read_exact_at(buf, h.offset).map_err(|e| {
        Error::io(
            format!(
                "reading {} bytes at {} of {}",
                h.size,
                h.offset,
                path.display()
            ),
            e,
        )
    })
}

impl Table {
    /// Opens and validates `path`: footer, index and properties must be intact (else
    /// `Error::Corruption` / `Error::UnsupportedVersion`); a damaged filter block is kept as
    /// `FilterState::Invalid` and the table stays readable.
    pub fn open(path: &Path, id: u64) -> Result<Table> {
        Self::open_in(&StdFs, path, id, TableOpen::default())
    }

    /// `open`, reading through `fs` (the store's file system) as `how` says.
    pub fn open_in(fs: &dyn FileSystem, path: &Path, id: u64, how: TableOpen) -> Result<Table> {
        let file = match how.reads {
            TableReads::Pread => fs.open_read(path),
            TableReads::Mmap => fs.open_read_mapped(path),
        }
        .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        let file_size = file
            .size()
            .map_err(|e| Error::io(format!("stat {}", path.display()), e))?;
        if file_size < FOOTER_V1_LEN as u64 {
            return Err(Error::corruption(
                path,
                format!(
                    "table file is {file_size} bytes, shorter than the smallest footer ({FOOTER_V1_LEN})"
                ),
            ));
        }
        let tail = file_size.min(FOOTER_LEN as u64);
        let footer_bytes = read_at(
            &*file,
            path,
            BlockHandle {
                offset: file_size - tail,
                size: tail,
            },
        )?;
        let footer = Footer::decode(&footer_bytes, file_size).map_err(|e| match e {
            FooterError::Version(found) => Error::UnsupportedVersion {
                path: path.to_path_buf(),
                what: "table format",
                found,
                supported: TABLE_VERSION,
            },
            FooterError::Invalid(reason) => Error::corruption(path, reason),
        })?;
        let props = Properties::decode(&read_at(&*file, path, footer.properties)?, footer.version)
            .map_err(|r| Error::corruption(path, format!("properties block: {r}")))?;
        props
            .compression
            .validate()
            .map_err(|reason| Error::Unsupported {
                path: path.to_path_buf(),
                reason: format!(
                    "its data blocks are compressed with {}: {reason}",
                    props.compression
                ),
            })?;
        let mut data_end = footer.filter.offset.min(footer.index.offset);
        if footer.version >= 2 {
            data_end = data_end.min(footer.prefix_filter.offset);
        }
        if footer.version >= 4 {
            data_end = data_end.min(footer.range_filter.offset);
        }
        let range_deletes = Self::load_range_deletes(&*file, path, &props, footer.index.offset)?;
        if props.range_deletes > 0 {
            data_end = data_end.min(props.range_delete_block.0);
        }
        let index = Index::decode(&read_at(&*file, path, footer.index)?, data_end)
            .map_err(|r| Error::corruption(path, format!("index block: {r}")))?;
        let pages = how.filters;
        let filter = Self::load_filter(&*file, path, footer.filter, props.entries, pages, |n| {
            FilterProblem::KeyCountMismatch {
                filter_keys: n,
                table_entries: props.entries,
            }
        })?;
        let prefix_filter = Self::load_filter(
            &*file,
            path,
            footer.prefix_filter,
            props.prefixes,
            pages,
            |n| FilterProblem::PrefixCountMismatch {
                filter_prefixes: n,
                table_prefixes: props.prefixes,
            },
        )?;
        let range_filter =
            Self::load_range_filter(&*file, path, footer.range_filter, props.entries)?;
        let prefix_rule = props
            .prefix_extractor
            .as_deref()
            .and_then(PrefixExtractor::from_id);
        Ok(Table {
            id,
            path: path.to_path_buf(),
            file,
            file_size,
            min_prefix: key_prefix(&props.min_key),
            max_prefix: key_prefix(&props.max_key),
            index,
            props,
            filter,
            prefix_filter,
            prefix_rule,
            range_filter,
            range_deletes,
            format_version: footer.version,
        })
    }

    /// Reads and validates the range-delete block the properties name (none when they count
    /// no ranges): it must lie before the index block at `index_at`, carry its CRC, hold the
    /// counted ranges as a sorted union (`RangeSet::decode`), and lie inside the key range.
    /// Unlike a filter, it is not optional: a table read without it would show deleted keys,
    /// so damage refuses the table.
    fn load_range_deletes(
        file: &dyn RandomAccessFile,
        path: &Path,
        props: &Properties,
        index_at: u64,
    ) -> Result<RangeSet> {
        if props.range_deletes == 0 {
            return Ok(RangeSet::default());
        }
        let (offset, size) = props.range_delete_block;
        if offset.checked_add(size).is_none_or(|end| end > index_at) {
            return Err(Error::corruption(
                path,
                format!("range-delete block at {offset}+{size} is not before the index block"),
            ));
        }
        let block = read_at(file, path, BlockHandle { offset, size })?;
        let bad = |r: String| Error::corruption(path, format!("range-delete block: {r}"));
        let set = RangeSet::decode(unseal(&block).map_err(bad)?).map_err(bad)?;
        if set.len() as u64 != props.range_deletes {
            return Err(bad(format!(
                "{} ranges where the properties count {}",
                set.len(),
                props.range_deletes
            )));
        }
        match set.bounds() {
            Some((first, End::Through(last)))
                if first >= props.min_key.as_slice()
                    && last.as_slice() <= props.max_key.as_slice() => {}
            _ => return Err(bad("ranges outside the table's key range".into())),
        }
        Ok(set)
    }

    /// Reads and validates the filter block at `h` (none when its size is 0); a block that
    /// fails validation, or holds other than `n` keys, is kept as `Invalid` and never used.
    fn load_filter(
        file: &dyn RandomAccessFile,
        path: &Path,
        h: BlockHandle,
        n: u64,
        pages: FilterPages,
        mismatch: impl Fn(u64) -> FilterProblem,
    ) -> Result<FilterState> {
        if h.size == 0 {
            return Ok(FilterState::None);
        }
        let len = usize::try_from(h.size)
            .map_err(|_| Error::corruption(path, "filter block size overflows usize"))?;
        let mut bytes = FilterBytes::zeroed(len, pages);
        read_into(file, path, h, bytes.as_mut())?;
        Ok(match FilterReader::new(bytes) {
            Ok(r) if r.header().n == n => FilterState::Valid(r),
            Ok(r) => FilterState::Invalid(mismatch(r.header().n)),
            Err(e) => FilterState::Invalid(FilterProblem::Damaged(e)),
        })
    }

    /// Reads and validates the range-filter block at `h` (none when its size is 0), as
    /// `load_filter`: a damaged block, or one over other than the table's `entries` keys, is
    /// kept as `Invalid` and never asked.
    fn load_range_filter(
        file: &dyn RandomAccessFile,
        path: &Path,
        h: BlockHandle,
        entries: u64,
    ) -> Result<RangeFilterState> {
        if h.size == 0 {
            return Ok(RangeFilterState::None);
        }
        let bytes = read_at(file, path, h)?;
        Ok(match RangeFilterReader::new(&bytes) {
            Ok(r) if r.keys() == entries => RangeFilterState::Valid(Box::new(r)),
            Ok(r) => RangeFilterState::Invalid(FilterProblem::KeyCountMismatch {
                filter_keys: r.keys(),
                table_entries: entries,
            }),
            Err(e) => RangeFilterState::Invalid(FilterProblem::RangeDamaged(e)),
        })
    }
}
