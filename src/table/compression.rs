//! Per-block compression of data blocks (table format 3, FORMAT.md §3 "Data block trailer").
//!
//! Use: `TableBuilder` seals each data block through a `BlockCompressor` (the table's codec,
//! chosen per level by `Options::compression`), and `Table` opens each block it reads with
//! `open_block`, which checks the CRC, the block's compression type and the raw length before
//! it allocates, and returns the raw payload. Only data blocks are compressed: filters must be
//! probed in place, and index and properties blocks are read once at open.
//!
//! A block is stored raw (type 0) when its codec saves less than an eighth of it (RocksDB's
//! rule): reading such a block then costs no decompression. The block cache holds *raw*
//! blocks, so a cache hit never decompresses (why: `cache.rs`).
//!
//! Bytes from disk never panic here: a damaged length, an unknown type, or a compressed body
//! that does not decode to exactly its recorded length is an error naming what was wrong.

use std::fmt;

/// How a table's data blocks are compressed (`Options::compression`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Compression {
    /// Raw blocks (the default).
    #[default]
    None,
    /// LZ4 block format (`lz4_flex`, pure Rust): fast to decompress, about 2× on text.
    Lz4,
    /// Zstandard at a level in 1..=22 (the `zstd` crate; needs this crate's `zstd` feature):
    /// smaller than LZ4, slower to write and somewhat slower to read.
    Zstd(i32),
}

/// Largest raw size an LZ4 block can produce per compressed byte (a match token of 1 byte
/// can copy 255 more): bounds what a damaged or crafted length can make us allocate.
const LZ4_MAX_RATIO: u64 = 255;
/// The same for zstd: an RLE block of 4 bytes (3 header + 1) expands to at most 128 KiB.
const ZSTD_MAX_RATIO: u64 = 32 * 1024;

impl Compression {
    /// The type byte of a block compressed this way (FORMAT.md §3): 0 raw, 1 LZ4, 2 zstd.
    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Lz4 => 1,
            Compression::Zstd(_) => 2,
        }
    }

    /// The zstd level (0 for the other codecs).
    pub fn level(self) -> i32 {
        match self {
            Compression::Zstd(l) => l,
            _ => 0,
        }
    }

    /// The codec recorded as `id` and `level` in a table's properties.
    pub(crate) fn from_parts(id: u8, level: i32) -> Result<Compression, String> {
        let c = match id {
            0 => Compression::None,
            1 => Compression::Lz4,
            2 => Compression::Zstd(level),
            other => return Err(format!("unknown compression id {other}")),
        };
        if id != 2 && level != 0 {
            return Err(format!("compression {c} recorded with level {level}"));
        }
        if id == 2 && !(1..=22).contains(&level) {
            return Err(format!("zstd level {level} outside 1..=22"));
        }
        Ok(c)
    }

    /// Whether this build can write and read it: zstd needs a level in 1..=22 and the
    /// `zstd` feature.
    pub fn validate(self) -> Result<(), String> {
        match self {
            Compression::Zstd(l) if !(1..=22).contains(&l) => {
                Err(format!("zstd level {l} outside 1..=22"))
            }
            Compression::Zstd(_) if !cfg!(feature = "zstd") => Err(
                "zstd compression needs lsm-bloom's `zstd` feature (this build lacks it)".into(),
            ),
            _ => Ok(()),
        }
    }

    /// The most raw bytes `compressed` bytes of this codec can decode to.
    pub(crate) fn max_raw(self, compressed: u64) -> u64 {
        let ratio = match self {
            Compression::None => 1,
            Compression::Lz4 => LZ4_MAX_RATIO,
            Compression::Zstd(_) => ZSTD_MAX_RATIO,
        };
        compressed.saturating_mul(ratio)
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compression::None => write!(f, "none"),
            Compression::Lz4 => write!(f, "lz4"),
            Compression::Zstd(l) => write!(f, "zstd:{l}"),
        }
    }
}

impl std::str::FromStr for Compression {
    type Err = String;
    /// `none`, `lz4`, `zstd` (level 3) or `zstd:<level>`.
    fn from_str(s: &str) -> Result<Self, String> {
        let c = match s {
            "none" => Compression::None,
            "lz4" => Compression::Lz4,
            "zstd" => Compression::Zstd(3),
            _ => match s.strip_prefix("zstd:").map(str::parse) {
                Some(Ok(l)) => Compression::Zstd(l),
                _ => {
                    return Err(format!(
                        "unknown compression {s:?} (none, lz4, zstd[:level])"
                    ))
                }
            },
        };
        Ok(c)
    }
}

/// Seals data blocks for one table: compresses, keeps the result only if it saves ≥ 1/8.
pub(crate) struct BlockCompressor {
    kind: Compression,
    scratch: Vec<u8>,
    #[cfg(feature = "zstd")]
    zstd: Option<zstd::bulk::Compressor<'static>>,
}

impl BlockCompressor {
    /// A compressor for `kind`; a codec this build lacks is `InvalidArgument`.
    pub(crate) fn new(kind: Compression) -> crate::error::Result<BlockCompressor> {
        kind.validate()
            .map_err(crate::error::Error::InvalidArgument)?;
        Ok(BlockCompressor {
            kind,
            scratch: Vec::new(),
            #[cfg(feature = "zstd")]
            zstd: match kind {
                Compression::Zstd(l) => Some(
                    zstd::bulk::Compressor::new(l)
                        .map_err(|e| crate::error::Error::io("creating a zstd compressor", e))?,
                ),
                _ => None,
            },
        })
    }

    /// Compresses `raw` into `scratch` as `u32 raw length ‖ codec output`; false when the
    /// codec is none or the block cannot be stored compressed.
    fn compress(&mut self, raw: &[u8]) -> crate::error::Result<bool> {
        let Ok(raw_len) = u32::try_from(raw.len()) else {
            return Ok(false);
        };
        self.scratch.clear();
        self.scratch.extend_from_slice(&raw_len.to_le_bytes());
        match self.kind {
            Compression::None => return Ok(false),
            Compression::Lz4 => {
                let bound = lz4_flex::block::get_maximum_output_size(raw.len());
                self.scratch.resize(4 + bound, 0);
                let n = lz4_flex::block::compress_into(raw, &mut self.scratch[4..])
                    .map_err(|e| crate::error::Error::InvalidArgument(format!("lz4: {e}")))?;
                self.scratch.truncate(4 + n);
            }
            #[cfg(feature = "zstd")]
            Compression::Zstd(_) => {
                let c = self.zstd.as_mut().ok_or_else(|| {
                    crate::error::Error::InvalidArgument("zstd compressor missing".into())
                })?;
                let bound = zstd::zstd_safe::compress_bound(raw.len());
                self.scratch.resize(4 + bound, 0);
                // A slice: a `Vec` as the buffer would be written from its start.
                let n = c
                    .compress_to_buffer(raw, &mut self.scratch[4..])
                    .map_err(|e| crate::error::Error::io("zstd compression", e))?;
                self.scratch.truncate(4 + n);
            }
            #[cfg(not(feature = "zstd"))]
            Compression::Zstd(_) => return Ok(false),
        }
        Ok(self.scratch.len() < raw.len() - raw.len() / 8)
    }

    /// Appends `raw` to `out` as a format-3 data block: body, type byte, CRC-32 of both.
    pub(crate) fn seal(&mut self, raw: &[u8], out: &mut Vec<u8>) -> crate::error::Result<()> {
        let start = out.len();
        if self.compress(raw)? {
            out.extend_from_slice(&self.scratch);
            out.push(self.kind.id());
        } else {
            out.extend_from_slice(raw);
            out.push(Compression::None.id());
        }
        let crc = crc32fast::hash(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(())
    }
}

/// Checks a format-3 data block read from disk and returns its raw payload: the CRC, a type
/// that is raw or the table's codec (`codec`), a raw length ≤ `max_raw` (the table's raw data
/// bytes) and ≤ what the codec can produce from the body, and a body that decodes to exactly
/// that length.
pub(crate) fn open_block(
    mut block: Vec<u8>,
    codec: Compression,
    max_raw: u64,
) -> Result<Vec<u8>, String> {
    let payload_len = super::block::unseal(&block)?.len();
    let Some(body_len) = payload_len.checked_sub(1) else {
        return Err("data block has no compression type byte".into());
    };
    let kind = block[body_len];
    if kind == 0 {
        block.truncate(body_len);
        return Ok(block);
    }
    if kind != codec.id() {
        return Err(format!(
            "data block compressed with type {kind} in a table whose codec is {codec}"
        ));
    }
    let body = &block[..body_len];
    let Some((len, compressed)) = body.split_first_chunk::<4>() else {
        return Err(format!(
            "compressed block body of {body_len} bytes has no length"
        ));
    };
    let raw_len = u64::from(u32::from_le_bytes(*len));
    let bound = codec.max_raw(compressed.len() as u64).min(max_raw);
    if raw_len > bound {
        return Err(format!(
            "compressed block claims {raw_len} raw bytes, more than {bound} possible"
        ));
    }
    let raw_len = raw_len as usize;
    let decoded = match codec {
        // Its id is 0, handled above.
        Compression::None => Err("raw block with a compressed type".to_string()),
        Compression::Lz4 => {
            let mut out = vec![0u8; raw_len];
            lz4_flex::block::decompress_into(compressed, &mut out)
                .map_err(|e| format!("lz4 block does not decode: {e}"))
                .map(|n| (out, n))
        }
        Compression::Zstd(_) => zstd_decompress(compressed, raw_len),
    };
    let (out, n) = decoded?;
    if n != raw_len {
        return Err(format!(
            "compressed block decodes to {n} bytes, its header says {raw_len}"
        ));
    }
    Ok(out)
}

#[cfg(feature = "zstd")]
fn zstd_decompress(compressed: &[u8], raw_len: usize) -> Result<(Vec<u8>, usize), String> {
    use std::cell::RefCell;
    thread_local! {
        // One decompression context per thread: creating one costs an allocation of ~100 KiB.
        static CONTEXT: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { RefCell::new(None) };
    }
    CONTEXT.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(
                zstd::bulk::Decompressor::new()
                    .map_err(|e| format!("creating a zstd decompressor: {e}"))?,
            );
        }
        let d = c.as_mut().ok_or("no zstd decompressor")?;
        let mut out = Vec::with_capacity(raw_len);
        let n = d
            .decompress_to_buffer(compressed, &mut out)
            .map_err(|e| format!("zstd block does not decode: {e}"))?;
        Ok((out, n))
    })
}

#[cfg(not(feature = "zstd"))]
fn zstd_decompress(_: &[u8], _: usize) -> Result<(Vec<u8>, usize), String> {
    Err("zstd-compressed block, and this build lacks the `zstd` feature".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_block(len: usize) -> Vec<u8> {
        let mut b = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        while b.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.extend_from_slice(&x.to_le_bytes()[..4]);
            b.extend_from_slice(b"the same words again and again, ");
        }
        b.truncate(len);
        b
    }

    fn codecs() -> Vec<Compression> {
        let mut c = vec![Compression::None, Compression::Lz4];
        if cfg!(feature = "zstd") {
            c.extend([
                Compression::Zstd(1),
                Compression::Zstd(3),
                Compression::Zstd(19),
            ]);
        }
        c
    }

    #[test]
    fn round_trip_per_codec_and_incompressible_blocks_stay_raw() {
        for codec in codecs() {
            let mut c = BlockCompressor::new(codec).unwrap();
            for raw in [text_block(4096), text_block(1), Vec::new()] {
                let mut out = Vec::new();
                c.seal(&raw, &mut out).unwrap();
                let kind = out[out.len() - 5];
                let compressed = codec != Compression::None && raw.len() > 100;
                assert_eq!(kind, if compressed { codec.id() } else { 0 }, "{codec}");
                if compressed {
                    assert!(out.len() < raw.len() / 2, "{codec}: {} bytes", out.len());
                }
                assert_eq!(open_block(out, codec, 1 << 20).unwrap(), raw, "{codec}");
            }
            // Random bytes do not compress: stored raw.
            let mut x = 0x2545_f491_4f6c_dd1du64;
            let random: Vec<u8> = (0..4096)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 32) as u8
                })
                .collect();
            let mut out = Vec::new();
            c.seal(&random, &mut out).unwrap();
            assert_eq!(out[out.len() - 5], 0);
            assert_eq!(open_block(out, codec, 1 << 20).unwrap(), random);
        }
    }

    /// Re-seals `body ‖ kind` with a correct CRC, so a test reaches the decoder past it.
    fn reseal(body: &[u8], kind: u8) -> Vec<u8> {
        let mut b = body.to_vec();
        b.push(kind);
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn damaged_blocks_are_errors_never_panics() {
        let raw = text_block(4096);
        for codec in codecs().into_iter().filter(|c| *c != Compression::None) {
            let mut sealed = Vec::new();
            BlockCompressor::new(codec)
                .unwrap()
                .seal(&raw, &mut sealed)
                .unwrap();
            let body = &sealed[..sealed.len() - 5];
            // Wrong lengths: too long for the bound, one off either way.
            for len in [u32::MAX, 4097, 4095, 0] {
                let mut b = body.to_vec();
                b[..4].copy_from_slice(&len.to_le_bytes());
                assert!(
                    open_block(reseal(&b, codec.id()), codec, 1 << 20).is_err(),
                    "{codec} {len}"
                );
            }
            // A raw length above the table's raw bytes.
            assert!(open_block(reseal(body, codec.id()), codec, 4095).is_err());
            // Another codec's type, an unknown type, a cut body.
            assert!(open_block(reseal(body, 7), codec, 1 << 20).is_err());
            assert!(open_block(reseal(&body[..3], codec.id()), codec, 1 << 20).is_err());
            for cut in [4, body.len() / 2, body.len() - 1] {
                assert!(open_block(reseal(&body[..cut], codec.id()), codec, 1 << 20).is_err());
            }
            // Every single-byte change of the body: an error or exactly 4096 bytes.
            for i in 4..body.len() {
                let mut b = body.to_vec();
                b[i] ^= 0x5a;
                if let Ok(out) = open_block(reseal(&b, codec.id()), codec, 1 << 20) {
                    assert_eq!(out.len(), 4096);
                }
            }
            // The CRC still guards all of it.
            let mut flipped = sealed.clone();
            flipped[10] ^= 1;
            assert!(open_block(flipped, codec, 1 << 20)
                .unwrap_err()
                .contains("checksum"));
        }
        assert!(open_block(reseal(b"abc", 1), Compression::None, 100).is_err());
        assert!(open_block(vec![0, 0, 0, 0], Compression::Lz4, 100).is_err());
    }

    #[test]
    fn names_parse_back_and_recorded_parts_are_checked() {
        for c in [Compression::None, Compression::Lz4, Compression::Zstd(7)] {
            assert_eq!(c.to_string().parse::<Compression>().unwrap(), c);
            assert_eq!(Compression::from_parts(c.id(), c.level()).unwrap(), c);
        }
        assert_eq!("zstd".parse::<Compression>().unwrap(), Compression::Zstd(3));
        assert!("snappy".parse::<Compression>().is_err());
        assert!(Compression::from_parts(3, 0).is_err());
        assert!(Compression::from_parts(1, 4).is_err());
        assert!(Compression::from_parts(2, 0).is_err());
        assert!(Compression::Zstd(23).validate().is_err());
        assert_eq!(
            Compression::Zstd(3).validate().is_ok(),
            cfg!(feature = "zstd")
        );
    }
}
