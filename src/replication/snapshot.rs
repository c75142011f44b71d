//! Snapshot files: a state machine's checkpoint packed into one file (FORMAT.md §7.3), and
//! its unpacking, verified, into a directory.
//!
//! A pack is a header (magic, version, the snapshot's meta with a CRC), then each file of
//! the checkpoint as name, size, bytes and a CRC-32 of the three, then an end marker with the
//! file count. The transport sends the pack in chunks (`tcp.rs`); the
//! receiver writes the chunks to a file and unpacks it only once whole, so neither side
//! holds more than a chunk and a copy buffer in memory.
//!
//! Unpacking trusts nothing: names must be plain file names, sizes must fit what is left of
//! the pack, every CRC must match, nothing may follow the end marker. Any failure is an
//! error naming what was wrong, and the partly written directory is removed.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::path::Path;

use super::codec;
use super::{LogId, StoredMembership, TypeConfig};
use crate::coding::Cursor;

const MAGIC: &[u8; 8] = b"LSMBSNAP";
const VERSION: u32 = 1;
const FILE: u8 = 1;
const END: u8 = 0;
/// Longest file name in a pack.
const MAX_NAME: usize = 255;
/// Largest meta section (a membership of a few thousand nodes).
const MAX_META: usize = 1 << 20;
const COPY_BUF: usize = 256 * 1024;

/// A snapshot's meta as openraft describes it.
pub type RaftMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;

/// A snapshot's meta as a pack stores it: openraft's (the last log id it covers and the
/// membership as of it) and the id it is named by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// The last log id the snapshot covers.
    pub last_log_id: Option<LogId>,
    /// The membership as of it.
    pub last_membership: StoredMembership,
    /// The snapshot's id.
    pub snapshot_id: String,
}

impl Meta {
    /// openraft's part of it.
    pub fn raft(&self) -> RaftMeta {
        RaftMeta {
            last_log_id: self.last_log_id,
            last_membership: self.last_membership.clone(),
        }
    }
}

/// Writes the pack of the files in `checkpoint` (a directory of regular files) to `out`,
/// synced. Returns the pack's size.
pub(crate) fn pack(checkpoint: &Path, meta: &Meta, out: &Path) -> io::Result<u64> {
    let mut names = Vec::new();
    for e in fs::read_dir(checkpoint)? {
        let e = e?;
        if e.file_type()?.is_file() {
            names.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    let file = File::create(out)?;
    let mut w = BufWriter::with_capacity(COPY_BUF, file);
    w.write_all(MAGIC)?;
    w.write_all(&VERSION.to_le_bytes())?;
    let m = encode_meta(meta);
    w.write_all(
        &u32::try_from(m.len())
            .map_err(|_| invalid("meta too large"))?
            .to_le_bytes(),
    )?;
    w.write_all(&m)?;
    w.write_all(&crc32fast::hash(&m).to_le_bytes())?;
    let mut buf = vec![0u8; COPY_BUF];
    for name in &names {
        let mut f = File::open(checkpoint.join(name))?;
        let size = f.metadata()?.len();
        w.write_all(&[FILE])?;
        w.write_all(
            &u32::try_from(name.len())
                .map_err(|_| invalid("name too long"))?
                .to_le_bytes(),
        )?;
        w.write_all(name.as_bytes())?;
        w.write_all(&size.to_le_bytes())?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(name.as_bytes());
        crc.update(&size.to_le_bytes());
        let mut left = size;
        while left > 0 {
            let n = usize::try_from(left.min(COPY_BUF as u64)).unwrap_or(COPY_BUF);
            f.read_exact(&mut buf[..n])?;
            crc.update(&buf[..n]);
            w.write_all(&buf[..n])?;
            left -= n as u64;
        }
        w.write_all(&crc.finalize().to_le_bytes())?;
    }
    w.write_all(&[END])?;
    w.write_all(
        &u32::try_from(names.len())
            .map_err(|_| invalid("too many files"))?
            .to_le_bytes(),
    )?;
    let file = w.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    file.metadata().map(|m| m.len())
}

/// A pack's header alone (magic, version, meta, CRC): the fuzz seeds.
#[cfg(test)]
pub(crate) fn encode_header(meta: &Meta) -> Vec<u8> {
    let m = encode_meta(meta);
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(m.len() as u32).to_le_bytes());
    out.extend_from_slice(&m);
    out.extend_from_slice(&crc32fast::hash(&m).to_le_bytes());
    out
}

/// A snapshot's meta (FORMAT.md §7.3), also carried by snapshot chunks on the wire.
pub(crate) fn encode_meta(meta: &Meta) -> Vec<u8> {
    let mut out = Vec::new();
    codec::put_opt_log_id(&mut out, meta.last_log_id.as_ref());
    let m = codec::encode_stored_membership(&meta.last_membership);
    out.extend_from_slice(&u32::try_from(m.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(&m);
    out.extend_from_slice(
        &u32::try_from(meta.snapshot_id.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    out.extend_from_slice(meta.snapshot_id.as_bytes());
    out
}

/// Longest snapshot id accepted.
const MAX_SNAPSHOT_ID: usize = 128;

/// A snapshot id names a file (`snap-<id>.pack`): 1 to 128 of `[A-Za-z0-9._-]`, not
/// starting with `.`, so no id from a peer can reach outside `snapshots/`.
pub(crate) fn check_snapshot_id(id: &str) -> Result<(), String> {
    let plain = id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if id.is_empty() || id.len() > MAX_SNAPSHOT_ID || id.starts_with('.') || !plain {
        return Err(format!(
            "snapshot id {:?} is not a plain name (1 to {MAX_SNAPSHOT_ID} of A-Z a-z 0-9 . _ -)",
            id.chars().take(40).collect::<String>()
        ));
    }
    Ok(())
}

/// Decodes `encode_meta`'s bytes.
pub(crate) fn decode_meta(b: &[u8]) -> Result<Meta, String> {
    let mut c = Cursor::new(b);
    let last_log_id: Option<LogId> = codec::get_opt_log_id(&mut c)?;
    let last_membership = codec::decode_stored_membership(c.len_prefixed()?)?;
    let id = c.len_prefixed()?;
    let snapshot_id = std::str::from_utf8(id)
        .map_err(|_| "snapshot id is not UTF-8".to_string())?
        .to_owned();
    check_snapshot_id(&snapshot_id)?;
    if !c.is_empty() {
        return Err("trailing bytes after the snapshot meta".into());
    }
    Ok(Meta {
        last_log_id,
        last_membership,
        snapshot_id,
    })
}

fn invalid(m: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m.into())
}

/// Reads exactly `n` bytes, failing with a message naming `what` at a short pack.
fn take(r: &mut impl Read, n: usize, what: &str) -> io::Result<Vec<u8>> {
    let mut b = vec![0u8; n];
    r.read_exact(&mut b).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => invalid(format!("snapshot ends inside {what}")),
        _ => e,
    })?;
    Ok(b)
}

fn take_u32(r: &mut impl Read, what: &str) -> io::Result<u32> {
    let b = take(r, 4, what)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn take_u64(r: &mut impl Read, what: &str) -> io::Result<u64> {
    let b = take(r, 8, what)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(&b);
    Ok(u64::from_le_bytes(a))
}

/// A file name a pack may carry: a plain name of `[A-Za-z0-9._-]`, not starting with a dot.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Reads the meta of the pack at `pack` (header checks included).
pub(crate) fn read_meta(pack: &Path) -> io::Result<Meta> {
    let mut r = BufReader::new(File::open(pack)?);
    read_header(&mut r)
}

/// Reads and checks a pack's header (magic, version, meta and its CRC).
pub(crate) fn read_header(r: &mut impl Read) -> io::Result<Meta> {
    if take(r, 8, "the magic")? != MAGIC {
        return Err(invalid("not a snapshot (bad magic)"));
    }
    let v = take_u32(r, "the version")?;
    if v != VERSION {
        return Err(invalid(format!(
            "snapshot format version {v} (this build reads {VERSION})"
        )));
    }
    let n = take_u32(r, "the meta length")? as usize;
    if n > MAX_META {
        return Err(invalid(format!(
            "snapshot meta of {n} bytes (at most {MAX_META})"
        )));
    }
    let m = take(r, n, "the meta")?;
    let crc = take_u32(r, "the meta checksum")?;
    if crc != crc32fast::hash(&m) {
        return Err(invalid("snapshot meta checksum mismatch"));
    }
    decode_meta(&m).map_err(|e| invalid(format!("snapshot meta: {e}")))
}

/// Unpacks the pack read from `pack` (from its current position to its end) into the new
/// directory `dir` (files synced, the directory synced), checking every name, size and CRC;
/// returns the pack's meta. On any error `dir` is removed.
pub(crate) fn unpack(pack: File, dir: &Path) -> io::Result<Meta> {
    let result = unpack_into(pack, Some(dir));
    if result.is_err() {
        let _ = fs::remove_dir_all(dir);
    }
    result
}

/// Checks the pack read from `file` (its current position to its end) as `unpack` does —
/// every name, size, CRC, the count and the end — writing nothing; returns its meta.
pub(crate) fn verify(file: File) -> io::Result<Meta> {
    unpack_into(file, None)
}

/// `unpack`'s work; with no `dir`, only the checks.
fn unpack_into(mut file: File, dir: Option<&Path>) -> io::Result<Meta> {
    let mut left = file
        .metadata()?
        .len()
        .saturating_sub(file.stream_position()?);
    let mut r = CountingReader {
        inner: BufReader::with_capacity(COPY_BUF, file),
        read: 0,
    };
    let meta = read_header(&mut r)?;
    if let Some(dir) = dir {
        fs::create_dir(dir)?;
    }
    let mut seen = BTreeSet::new();
    let mut buf = vec![0u8; COPY_BUF];
    loop {
        match take(&mut r, 1, "a file marker")?[0] {
            FILE => {}
            END => break,
            t => return Err(invalid(format!("file marker {t} (not 0 or 1)"))),
        }
        let n = take_u32(&mut r, "a file name length")? as usize;
        if n > MAX_NAME {
            return Err(invalid(format!(
                "file name of {n} bytes (at most {MAX_NAME})"
            )));
        }
        let name = String::from_utf8(take(&mut r, n, "a file name")?)
            .map_err(|_| invalid("file name is not UTF-8"))?;
        if !plain_name(&name) {
            return Err(invalid(format!(
                "file name {name:?} is not a plain file name"
            )));
        }
        if !seen.insert(name.clone()) {
            return Err(invalid(format!("file {name} appears twice")));
        }
        let size = take_u64(&mut r, "a file size")?;
        left = left.saturating_sub(r.read);
        r.read = 0;
        if size > left {
            return Err(invalid(format!(
                "file {name} says {size} bytes, more than the {left} left in the snapshot"
            )));
        }
        let mut out = match dir {
            Some(dir) => Some(File::create(dir.join(&name))?),
            None => None,
        };
        let mut crc = crc32fast::Hasher::new();
        crc.update(name.as_bytes());
        crc.update(&size.to_le_bytes());
        let mut rest = size;
        while rest > 0 {
            let k = usize::try_from(rest.min(COPY_BUF as u64)).unwrap_or(COPY_BUF);
            r.read_exact(&mut buf[..k])
                .map_err(|_| invalid(format!("snapshot ends inside file {name}")))?;
            crc.update(&buf[..k]);
            if let Some(out) = out.as_mut() {
                out.write_all(&buf[..k])?;
            }
            rest -= k as u64;
        }
        if take_u32(&mut r, "a file checksum")? != crc.finalize() {
            return Err(invalid(format!(
                "file {name} in the snapshot fails its CRC"
            )));
        }
        if let Some(out) = out {
            out.sync_all()?;
        }
    }
    let count = take_u32(&mut r, "the file count")? as usize;
    if count != seen.len() {
        return Err(invalid(format!(
            "snapshot's end says {count} files, {} were read",
            seen.len()
        )));
    }
    if r.inner.read(&mut [0u8; 1])? != 0 {
        return Err(invalid("bytes after the snapshot's end"));
    }
    if let Some(dir) = dir {
        sync_dir(dir)?;
    }
    Ok(meta)
}

struct CountingReader<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// Makes a directory's entries durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::{BasicNode, CommittedLeaderId, Membership};
    use openraft::vote::RaftLeaderId;
    use std::collections::BTreeMap;

    fn meta() -> Meta {
        let nodes: BTreeMap<u64, BasicNode> =
            [(1, BasicNode::new("a:1")), (2, BasicNode::new("b:2"))].into();
        let id = LogId::new(CommittedLeaderId::new(2, 1), 40);
        Meta {
            last_log_id: Some(id),
            last_membership: StoredMembership::new(
                Some(id),
                Membership::new(vec![[1, 2].into()], nodes).unwrap(),
            ),
            snapshot_id: "2-40-7".into(),
        }
    }

    fn make_pack(t: &Path) -> std::path::PathBuf {
        let src = t.join("src");
        fs::create_dir(&src).unwrap();
        fs::write(src.join("000001.sst"), vec![5u8; 700_000]).unwrap();
        fs::write(src.join("MANIFEST"), b"manifest").unwrap();
        fs::write(src.join("empty"), b"").unwrap();
        let p = t.join("p.pack");
        pack(&src, &meta(), &p).unwrap();
        p
    }

    /// A snapshot id names a file: anything but a plain name is refused where it is decoded.
    #[test]
    fn snapshot_ids_are_plain_names() {
        for bad in ["", "../../etc/x", "a/b", ".hidden", "a b", &"x".repeat(129)] {
            let m = Meta {
                snapshot_id: bad.into(),
                ..meta()
            };
            let err = decode_meta(&encode_meta(&m)).unwrap_err();
            assert!(err.contains("plain name"), "{bad:?}: {err}");
        }
        let m = Meta {
            snapshot_id: "3-1-900-1764000000000000000".into(),
            ..meta()
        };
        assert_eq!(decode_meta(&encode_meta(&m)).unwrap(), m);
    }

    #[test]
    fn a_pack_unpacks_to_the_same_files_and_meta() {
        let t = tempfile::tempdir().unwrap();
        let p = make_pack(t.path());
        assert_eq!(read_meta(&p).unwrap(), meta());
        let out = t.path().join("out");
        assert_eq!(unpack(File::open(&p).unwrap(), &out).unwrap(), meta());
        assert_eq!(
            fs::read(out.join("000001.sst")).unwrap(),
            vec![5u8; 700_000]
        );
        assert_eq!(fs::read(out.join("MANIFEST")).unwrap(), b"manifest");
        assert_eq!(fs::read(out.join("empty")).unwrap(), b"");
    }

    /// A flipped byte anywhere, a truncation anywhere, or bytes appended: an error, nothing
    /// left behind, no panic.
    #[test]
    fn damaged_packs_are_refused_and_leave_nothing() {
        let t = tempfile::tempdir().unwrap();
        let p = make_pack(t.path());
        let good = fs::read(&p).unwrap();
        let out = t.path().join("out");
        let bad = t.path().join("bad.pack");
        let step = good.len() / 97;
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for i in (0..good.len())
            .step_by(step)
            .chain([good.len() - 1, 13, 20])
        {
            let mut d = good.clone();
            d[i] ^= 0x41;
            cases.push(d);
            cases.push(good[..i].to_vec());
        }
        let mut long = good.clone();
        long.push(0);
        cases.push(long);
        for (n, d) in cases.iter().enumerate() {
            fs::write(&bad, d).unwrap();
            let r = unpack(File::open(&bad).unwrap(), &out);
            // A flip inside a file's bytes is caught by its CRC; elsewhere by a structural check.
            assert!(r.is_err(), "case {n} unpacked");
            assert!(!out.exists(), "case {n} left {}", out.display());
        }
    }

    #[test]
    fn names_that_leave_the_directory_are_refused() {
        for bad in ["../x", "/etc/passwd", ".hidden", "a/b", "", "x\0y"] {
            assert!(!plain_name(bad), "{bad:?}");
        }
        assert!(plain_name("000012.sst") && plain_name("MANIFEST") && plain_name("OPTIONS-1"));
    }
}
