//! The framing the manifest (FORMAT.md §4) and the options record (§6) share: a 16-byte
//! header — magic, version, payload length, payload CRC-32 — then a `bincode` 2 payload
//! (`config::standard()`). `Framed::decode` checks the header and the checksum before it
//! decodes anything, and refuses bytes left over after the payload.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};

/// Length of the header.
pub(crate) const HEADER_LEN: usize = 16;

/// One framed file kind.
pub(crate) struct Framed {
    /// The first 4 bytes.
    pub(crate) magic: [u8; 4],
    /// The version this build writes (and the newest it reads).
    pub(crate) version: u32,
    /// The oldest version it reads.
    pub(crate) oldest: u32,
    /// What the file is, in errors ("manifest", "options record").
    pub(crate) what: &'static str,
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

impl Framed {
    /// The file's bytes for `data`.
    pub(crate) fn encode<T: Serialize>(&self, data: &T) -> Result<Vec<u8>> {
        let payload = bincode::serde::encode_to_vec(data, config()).map_err(|e| {
            Error::io(
                format!("encoding the {}", self.what),
                std::io::Error::other(e),
            )
        })?;
        let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
        out.extend_from_slice(&self.magic);
        out.extend_from_slice(&self.version.to_le_bytes());
        crate::coding::put_u32_len(&mut out, payload.len(), self.what)?;
        out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
        Ok(out)
    }

    /// The version and the payload bytes of `bytes`, once every header field and the
    /// checksum are checked; `parse` then decodes the payload as that version's structure.
    pub(crate) fn open<'a>(&self, path: &Path, bytes: &'a [u8]) -> Result<(u32, &'a [u8])> {
        let what = self.what;
        let bad = |r: String| Err(Error::corruption(path, r));
        if bytes.len() < HEADER_LEN {
            return bad(format!(
                "{what} is {} bytes, shorter than its header",
                bytes.len()
            ));
        }
        if bytes[..4] != self.magic {
            return bad(format!("bad {what} magic {:02x?}", &bytes[..4]));
        }
        let word =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let version = word(4);
        if !(self.oldest..=self.version).contains(&version) {
            return Err(Error::UnsupportedVersion {
                path: path.to_path_buf(),
                what,
                found: version,
                supported: self.version,
            });
        }
        let (len, crc) = (word(8) as usize, word(12));
        if bytes.len() - HEADER_LEN != len {
            return bad(format!(
                "{what} payload is {} bytes, header says {len}",
                bytes.len() - HEADER_LEN
            ));
        }
        let payload = &bytes[HEADER_LEN..];
        let actual = crc32fast::hash(payload);
        if actual != crc {
            return bad(format!(
                "{what} checksum mismatch: stored {crc:#010x}, computed {actual:#010x}"
            ));
        }
        Ok((version, payload))
    }

    /// Decodes a payload `open` returned; bytes left over are `Error::Corruption`.
    pub(crate) fn parse<T: DeserializeOwned>(&self, path: &Path, payload: &[u8]) -> Result<T> {
        let what = self.what;
        let bad = |r: String| Err(Error::corruption(path, r));
        let (data, used): (T, usize) = match bincode::serde::decode_from_slice(payload, config()) {
            Ok(v) => v,
            Err(e) => return bad(format!("{what} payload does not decode: {e}")),
        };
        if used != payload.len() {
            return bad(format!("trailing bytes after the {what} payload"));
        }
        Ok(data)
    }
}
