//! Decoding files for people: what the `dump_filter` example prints. `inspect_path` looks at a
//! path and returns a [`Report`] that serialises to JSON (`serde`) and prints as text
//! (`Display`). Each kind of file gets one variant; the path decides which.

use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::filter::{FilterInfo, FilterReader};

/// What `inspect_path` found.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Report {
    /// A stand-alone filter block file.
    Filter(FilterReport),
}

/// A valid filter block.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FilterReport {
    /// Always "ok": an invalid block is an error, not a report.
    pub checksum: &'static str,
    /// Everything the block says about itself.
    #[serde(flatten)]
    pub info: FilterInfo,
}

impl FilterReport {
    /// Validates `block` and describes it.
    pub fn from_block(block: &[u8]) -> Result<Self> {
        let reader = FilterReader::new(block)?;
        Ok(FilterReport {
            checksum: "ok",
            info: reader.info(),
        })
    }
}

/// Reads and describes the file at `path`.
pub fn inspect_path(path: &Path) -> Result<Report> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    FilterReport::from_block(&bytes)
        .map(Report::Filter)
        .map_err(|e| match e {
            Error::Filter(f) => Error::corruption(path, f.to_string()),
            other => other,
        })
}

impl fmt::Display for FilterReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.info;
        writeln!(f, "  format version  {}", i.version)?;
        writeln!(f, "  kind            {}", i.kind)?;
        writeln!(f, "  hash            {} (seed {})", i.hash, i.seed)?;
        writeln!(f, "  k (probes)      {}", i.k)?;
        writeln!(
            f,
            "  m (bits)        {}{}",
            i.m,
            if i.lines > 0 {
                format!(" ({} lines of 64 bytes)", i.lines)
            } else {
                String::new()
            }
        )?;
        writeln!(f, "  n (keys)        {}", i.n)?;
        writeln!(f, "  bits/key        {:.3}", i.bits_per_key)?;
        writeln!(f, "  block bytes     {}", i.block_bytes)?;
        writeln!(f, "  fill ratio      {:.4}", i.fill_ratio)?;
        writeln!(f, "  expected FPR    {:.4}%", i.expected_fpr * 100.0)?;
        writeln!(
            f,
            "  FPR from fill   {:.4}%",
            i.estimated_fpr_from_fill * 100.0
        )?;
        writeln!(
            f,
            "  checksum        {} (crc32 {:#010x})",
            self.checksum, i.crc32
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Report::Filter(r) => {
                writeln!(f, "filter block")?;
                write!(f, "{r}")
            }
        }
    }
}

/// A key as text: printable ASCII as is, other bytes as `\xNN`.
pub fn printable(key: &[u8]) -> String {
    key.iter()
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect()
}
