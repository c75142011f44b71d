//! Writes one table file: `TableBuilder::create` → `(add)*` in strictly increasing key order →
//! `finish`. Data blocks are cut when they reach the block size (uncompressed format 3 blocks:
//! before they would pass it, and placed so that none straddles a page boundary it need not,
//! `page_padding`); the filter is built over
//! every key, tombstones included (a tombstone must be found to hide older values in deeper
//! tables, so its key has to pass the filter). Under a prefix rule a second filter holds each
//! distinct prefix once (keys sharing a prefix are adjacent in key order, so comparing with the
//! previous key's prefix finds every repeat). In format 4 a range filter
//! (`filter::RangeFilterBuilder`) may be built over every key too, tombstones included, so a
//! scan that must see a tombstone to hide an older value never skips its table.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::block::{entry_len, put_entry, seal, BlockHandle};
use super::compression::{BlockCompressor, Compression};
use super::expiries::Expiries;
use super::footer::{Footer, TABLE_VERSION};
use super::properties::Properties;
use super::range_set::{End, RangeSet};
use crate::coding::put_len_prefixed;
use crate::error::{Error, Result};
use crate::expiry::NEVER;
use crate::filter::{hash_key, FilterBuilder, FilterPolicy, RangeFilterBuilder, RangePolicy};
use crate::fs::{CreateMode, FileSystem, StdFs, WritableFile};
use crate::prefix::PrefixExtractor;

/// Lets `BufWriter` batch small writes into one `WritableFile::write_all`.
struct Sink(Box<dyn WritableFile>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How to write a table.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TableBuilderOptions {
    /// Target data block size in bytes. An uncompressed format 3 block is cut before an entry
    /// would take its stored size (trailer included) past this, so that it fits the pages it
    /// is aligned to (a lone larger entry makes a larger block); other blocks are cut once
    /// their payload reaches it.
    pub block_size: usize,
    /// Filter to build; `None` writes a table without a filter (whole-key or prefix).
    pub filter: Option<FilterPolicy>,
    /// Level the table is written for (recorded in its properties).
    pub level: u32,
    /// Also build a prefix filter under this rule (default none), with
    /// `prefix_filter_policy`, or `filter`'s policy when that is `None`.
    pub prefix_extractor: Option<PrefixExtractor>,
    /// The prefix filter's policy when it differs from `filter`'s (default `None`: the same);
    /// a prefix filter is built with it even when `filter` is `None`.
    pub prefix_filter_policy: Option<FilterPolicy>,
    /// Build the whole-key filter (default true); turning it off leaves only the prefix
    /// filter, to save memory when lookups are by prefix.
    pub whole_key_filter: bool,
    /// How data blocks are compressed (default none; needs format version 3).
    pub compression: Compression,
    /// Also build a range filter over every key with this policy (default none; needs
    /// format version 4).
    pub range_filter: Option<RangePolicy>,
    /// Table format version to write (default `TABLE_VERSION`, 5). 3 writes tables that
    /// builds before range filters read; 2 those before compression; 1 those before prefix
    /// filters too.
    pub format_version: u32,
}

impl Default for TableBuilderOptions {
    /// 4 KiB blocks, no filter, level 0.
    fn default() -> Self {
        TableBuilderOptions {
            block_size: 4096,
            filter: None,
            level: 0,
            prefix_extractor: None,
            prefix_filter_policy: None,
            whole_key_filter: true,
            compression: Compression::None,
            range_filter: None,
            format_version: TABLE_VERSION,
        }
    }
}

setters!(TableBuilderOptions {
    with_block_size => block_size: usize,
    with_filter => filter: Option<FilterPolicy>,
    with_level => level: u32,
    with_prefix_extractor => prefix_extractor: Option<PrefixExtractor>,
    with_prefix_filter_policy => prefix_filter_policy: Option<FilterPolicy>,
    with_whole_key_filter => whole_key_filter: bool,
    with_compression => compression: Compression,
    with_range_filter => range_filter: Option<RangePolicy>,
    with_format_version => format_version: u32,
});

/// The page size the data blocks of uncompressed tables are placed by (FORMAT.md §3): 4 KiB,
/// the base page of Linux on x86-64 and of most systems' page caches.
pub const PAGE: u64 = 4096;

/// An uncompressed format 3 block's trailer: type byte and CRC-32.
const RAW_TRAILER: usize = 5;

/// Zero bytes to pad with: at most `PAGE - 1` are written at a time.
static ZEROS: [u8; PAGE as usize] = [0; PAGE as usize];

/// Zero bytes to write at `offset` before a block of `len` bytes so that it touches no more
/// pages than its length needs: 0 when it already does, else up to the next page boundary.
///
/// Why: reading a block from the page cache costs per page it touches. `pread` of 4 KiB at
/// random offsets of a cached 68 MB table file, this machine: 1.05-1.15 µs page-aligned
/// against 1.50-1.66 µs straddling two pages (a C loop, 300,000 reads, two runs each). With
/// 4 KiB blocks cut to fit, the padding is the block's shortfall from 4096 bytes (~2.3% of the
/// data area with 125-byte entries).
pub(crate) fn page_padding(offset: u64, len: u64) -> usize {
    let within = offset % PAGE;
    let touched = (within + len).div_ceil(PAGE);
    if touched > len.div_ceil(PAGE) {
        (PAGE - within) as usize
    } else {
        0
    }
}

/// Builds a table file.
pub struct TableBuilder {
    path: PathBuf,
    out: BufWriter<Sink>,
    opts: TableBuilderOptions,
    offset: u64,
    block: Vec<u8>,
    index: Vec<u8>,
    last_key: Option<Vec<u8>>,
    min_key: Option<Vec<u8>>,
    filter: Option<FilterBuilder>,
    prefix_filter: Option<FilterBuilder>,
    range_filter: Option<RangeFilterBuilder>,
    /// The last prefix added to `prefix_filter`.
    last_prefix: Option<Vec<u8>>,
    prefixes: u64,
    entries: u64,
    tombstones: u64,
    data_blocks: u64,
    raw_data_bytes: u64,
    /// Expiring puts: their count and how their expiries spread.
    expiries: Expiries,
    compressor: BlockCompressor,
    /// The block being sealed (reused).
    sealed: Vec<u8>,
    /// The deleted ranges the table carries (`set_range_deletes`).
    range_deletes: RangeSet,
}

impl TableBuilder {
    /// Creates (truncates) the file at `path`.
    pub fn create(path: &Path, opts: TableBuilderOptions) -> Result<Self> {
        Self::create_in(&StdFs, path, opts)
    }

    /// Creates (truncates) the file at `path` through `fs`.
    pub fn create_in(fs: &dyn FileSystem, path: &Path, opts: TableBuilderOptions) -> Result<Self> {
        if let Some(rule) = opts.prefix_extractor {
            rule.validate().map_err(Error::InvalidArgument)?;
        }
        let v = opts.format_version;
        let refuse = |what: &str| {
            Err(Error::InvalidArgument(format!(
                "table format version {v} cannot hold {what}"
            )))
        };
        if !(1..=TABLE_VERSION).contains(&v) {
            return refuse("anything: versions are 1..=6");
        }
        let prefix_policy = opts.prefix_filter_policy.or(opts.filter);
        if v < 2 && opts.prefix_extractor.is_some() && prefix_policy.is_some() {
            return refuse("a prefix filter (version 2 added them)");
        }
        if v < 3 && opts.compression != Compression::None {
            return refuse("compressed blocks (version 3 added them)");
        }
        if v < 4 && opts.range_filter.is_some() {
            return refuse("a range filter (version 4 added them)");
        }
        let compressor = BlockCompressor::new(opts.compression)?;
        let filter = match opts.filter {
            Some(p) if opts.whole_key_filter => Some(FilterBuilder::new(p)?),
            _ => None,
        };
        let prefix_filter = match (
            opts.prefix_filter_policy.or(opts.filter),
            opts.prefix_extractor,
        ) {
            (Some(p), Some(_)) => Some(FilterBuilder::new(p)?),
            _ => None,
        };
        let range_filter = opts.range_filter.map(RangeFilterBuilder::new);
        let file = fs
            .create(path, CreateMode::Truncate)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        Ok(TableBuilder {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 16, Sink(file)),
            opts,
            offset: 0,
            block: Vec::new(),
            index: Vec::new(),
            last_key: None,
            min_key: None,
            filter,
            prefix_filter,
            range_filter,
            last_prefix: None,
            prefixes: 0,
            entries: 0,
            tombstones: 0,
            data_blocks: 0,
            raw_data_bytes: 0,
            expiries: Expiries::default(),
            compressor,
            sealed: Vec::new(),
            range_deletes: RangeSet::default(),
        })
    }

    /// Gives the table `ranges` to carry (FORMAT.md §3, table format 6): keys they hold are
    /// deleted in older tables, not in this one. Each must end through a key.
    pub fn set_range_deletes(&mut self, ranges: RangeSet) -> Result<()> {
        if ranges.is_empty() {
            self.range_deletes = ranges;
            return Ok(());
        }
        if self.opts.format_version < 6 {
            return Err(Error::InvalidArgument(format!(
                "table format version {} cannot hold deleted ranges (version 6 added them)",
                self.opts.format_version
            )));
        }
        if ranges
            .ranges()
            .iter()
            .any(|r| !matches!(r.end, End::Through(_)))
        {
            return Err(Error::InvalidArgument(
                "a table's deleted range must end through a key".into(),
            ));
        }
        self.range_deletes = ranges;
        Ok(())
    }

    /// Deleted ranges given (`set_range_deletes`).
    pub fn range_deletes(&self) -> usize {
        self.range_deletes.len()
    }

    /// Adds an entry; `value == None` is a tombstone. Keys must strictly increase.
    pub fn add(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.add_with_expiry(key, value, None)
    }

    /// `add`, for a put that expires at `expiry` (milliseconds since the Unix epoch; `None`:
    /// never; a tombstone's is ignored). Expiries need table format 5.
    pub fn add_with_expiry(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
        expiry: Option<u64>,
    ) -> Result<()> {
        let expiry = match (expiry, value) {
            (Some(at), Some(_)) if self.opts.format_version >= 5 => crate::expiry::stored(at),
            (Some(_), Some(_)) => {
                return Err(Error::InvalidArgument(format!(
                    "table format version {} cannot hold an expiring entry (version 5 added them)",
                    self.opts.format_version
                )))
            }
            _ => NEVER,
        };
        if self.last_key.as_deref().is_some_and(|last| last >= key) {
            return Err(Error::InvalidArgument(
                "table keys must be added in strictly increasing order".into(),
            ));
        }
        if self.aligned() && !self.block.is_empty() {
            let entry = entry_len(key.len(), value.map(<[u8]>::len), expiry);
            if self.block.len() + entry + RAW_TRAILER > self.opts.block_size {
                self.cut_block()?;
            }
        }
        put_entry(&mut self.block, key, value, expiry)?;
        self.expiries
            .add(expiry, key.len() + value.map_or(0, <[u8]>::len));
        if self.min_key.is_none() {
            self.min_key = Some(key.to_vec());
        }
        if let Some(f) = &mut self.filter {
            f.add_hash(hash_key(key));
        }
        if let Some(f) = &mut self.range_filter {
            f.add_key(key);
        }
        if let (Some(f), Some(rule)) = (&mut self.prefix_filter, self.opts.prefix_extractor) {
            if let Some(p) = rule.prefix(key) {
                if self.last_prefix.as_deref() != Some(p) {
                    f.add_hash(hash_key(p));
                    self.prefixes += 1;
                    self.last_prefix = Some(p.to_vec());
                }
            }
        }
        self.entries += 1;
        self.tombstones += u64::from(value.is_none());
        self.last_key = Some(key.to_vec());
        if !self.aligned() && self.block.len() >= self.opts.block_size {
            self.cut_block()?;
        }
        Ok(())
    }

    /// Whether data blocks are cut to fit `block_size` and placed by `page_padding`: format 3
    /// tables without compression, whose blocks' sizes are known before they are sealed.
    fn aligned(&self) -> bool {
        self.opts.format_version >= 3 && self.opts.compression == Compression::None
    }

    /// The last key added, if any.
    pub fn last_key(&self) -> Option<&[u8]> {
        self.last_key.as_deref()
    }

    /// Entries added so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Approximate file size so far.
    pub fn estimated_size(&self) -> u64 {
        self.offset + self.block.len() as u64
    }

    fn write(&mut self, bytes: &[u8]) -> Result<BlockHandle> {
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(format!("writing {}", self.path.display()), e))?;
        let h = BlockHandle {
            offset: self.offset,
            size: bytes.len() as u64,
        };
        self.offset += bytes.len() as u64;
        Ok(h)
    }

    fn cut_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let mut block = std::mem::take(&mut self.block);
        let mut sealed = std::mem::take(&mut self.sealed);
        sealed.clear();
        self.raw_data_bytes += block.len() as u64;
        if self.opts.format_version >= 3 {
            self.compressor.seal(&block, &mut sealed)?;
        } else {
            sealed.extend_from_slice(&block);
            seal(&mut sealed, 0);
        }
        if self.aligned() {
            let pad = page_padding(self.offset, sealed.len() as u64);
            if pad > 0 {
                self.write(&ZEROS[..pad])?;
            }
        }
        let h = self.write(&sealed)?;
        self.sealed = sealed;
        let last = self.last_key.as_deref().unwrap_or_default();
        put_len_prefixed(&mut self.index, last, "key")?;
        self.index.extend_from_slice(&h.offset.to_le_bytes());
        self.index.extend_from_slice(&h.size.to_le_bytes());
        self.data_blocks += 1;
        block.clear();
        self.block = block;
        Ok(())
    }

    /// Writes a filter block (an empty handle where there is none).
    fn write_filter(&mut self, f: Option<FilterBuilder>) -> Result<BlockHandle> {
        match f {
            Some(f) => self.write(&f.finish()),
            None => Ok(BlockHandle {
                offset: self.offset,
                size: 0,
            }),
        }
    }

    /// Writes the filter, prefix filter, range filter, index and properties blocks and the
    /// footer, and syncs the file.
    pub fn finish(mut self) -> Result<Properties> {
        self.cut_block()?;
        let data_bytes = self.offset;
        let filter_policy = self.filter.as_ref().map(|f| *f.policy());
        let prefix_policy = self.prefix_filter.as_ref().map(|f| *f.policy());
        let (f, pf) = (self.filter.take(), self.prefix_filter.take());
        let filter = self.write_filter(f)?;
        let prefix_filter = self.write_filter(pf)?;
        let range_filter = match self.range_filter.take() {
            Some(f) => self.write(&f.finish())?,
            None => BlockHandle {
                offset: self.offset,
                size: 0,
            },
        };
        let range_delete_block = if self.range_deletes.is_empty() {
            (0, 0)
        } else {
            let mut block = self.range_deletes.encode()?;
            seal(&mut block, 0);
            let h = self.write(&block)?;
            (h.offset, h.size)
        };
        let mut index = std::mem::take(&mut self.index);
        seal(&mut index, 0);
        let index = self.write(&index)?;
        // The key range bounds the deleted ranges too.
        let mut min_key = self.min_key.take();
        let mut max_key = self.last_key.take();
        if let Some((first, End::Through(last))) = self.range_deletes.bounds() {
            if min_key.as_deref().is_none_or(|k| first < k) {
                min_key = Some(first.to_vec());
            }
            if max_key.as_deref().is_none_or(|k| last.as_slice() > k) {
                max_key = Some(last.clone());
            }
        }
        let props = Properties {
            entries: self.entries,
            tombstones: self.tombstones,
            data_blocks: self.data_blocks,
            data_bytes,
            raw_data_bytes: self.raw_data_bytes,
            compression: self.opts.compression,
            min_key: min_key.unwrap_or_default(),
            max_key: max_key.unwrap_or_default(),
            filter_kind: filter_policy.map(|p| p.kind),
            filter_bits_per_key: filter_policy.map_or(0.0, |p| p.bits_per_key_value()),
            level: self.opts.level,
            created_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            writer: concat!("lsm-bloom ", env!("CARGO_PKG_VERSION")).to_string(),
            prefix_filter_kind: prefix_policy.map(|p| p.kind),
            prefix_extractor: prefix_policy
                .and(self.opts.prefix_extractor)
                .map(|r| r.id()),
            prefixes: self.prefixes,
            range_filter: self.opts.range_filter,
            expiring: self.expiries.count(),
            expiry_span: self.expiries.span(),
            expiring_bytes: match self.opts.format_version {
                7.. => self.expiries.bytes(),
                _ => 0,
            },
            expiry_quantiles: match self.opts.format_version {
                7.. => self.expiries.quantiles(),
                _ => Vec::new(),
            },
            range_deletes: self.range_deletes.len() as u64,
            range_delete_block,
        };
        let properties = self.write(&props.encode(self.opts.format_version)?)?;
        self.write(
            &Footer {
                version: self.opts.format_version,
                index,
                filter,
                prefix_filter,
                properties,
                range_filter,
            }
            .encode(),
        )?;
        let mut file = self
            .out
            .into_inner()
            .map_err(|e| Error::io(format!("writing {}", self.path.display()), e.into_error()))?;
        file.0
            .sync()
            .map_err(|e| Error::io(format!("syncing {}", self.path.display()), e))?;
        Ok(props)
    }
}

#[cfg(test)]
mod tests;
