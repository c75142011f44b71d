//! The expected state of the stress run, as `db_stress` keeps it: every key has a version,
//! and the value of version `v` of key `i` is a pure function of `(i, v)` (a put of a value
//! that names its key and version, or a delete). Each key is written by one thread only, which
//! raises `started` before its write and `acked` after the store returned `Ok`; a read that
//! ran between two moments may see any version from `acked` at the first to `started` at the
//! second, and nothing else. A value read from the store names its own version, so a wrong
//! value, a stale one and a lost one are all told apart.

use std::sync::atomic::{AtomicU64, Ordering};

/// Keys per prefix group (`PPP:` + index): the prefix rule `delimiter(':', 1)` groups them.
pub const GROUPS: usize = 97;

/// The keyspaces keys live in: key `i` in `KEYSPACES[i % 3]`, so a batch of a thread's keys
/// spans keyspaces (one log record, applied whole or not at all).
pub const KEYSPACES: [&str; 3] = [lsm_bloom::DEFAULT_KEYSPACE, "ks1", "ks2"];

/// The keyspace of key `i`.
pub fn space(i: usize) -> &'static str {
    KEYSPACES[i % KEYSPACES.len()]
}

/// Name of key `i`.
pub fn key(i: usize) -> Vec<u8> {
    format!("{:03}:{i:07}", i % GROUPS).into_bytes()
}

/// The prefix (group) of key `i`, with its delimiter.
pub fn prefix(group: usize) -> Vec<u8> {
    format!("{group:03}:").into_bytes()
}

fn mix(i: usize, v: u64) -> u64 {
    let mut x = (i as u64) << 32 ^ v ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

/// Version `v` of key `i`: `None` (a delete) for version 0 and one in eight others.
pub fn value(i: usize, v: u64) -> Option<Vec<u8>> {
    let m = mix(i, v);
    if v == 0 || m.is_multiple_of(8) {
        return None;
    }
    let pad = (m >> 8) % 160;
    Some(format!("{i}/{v}/{}", "ab".repeat(pad as usize / 2)).into_bytes())
}

/// The version a value names, if it is well formed (checked in full by `allowed`).
fn version_of(v: &[u8]) -> Option<(usize, u64)> {
    let s = std::str::from_utf8(v).ok()?;
    let mut parts = s.splitn(3, '/');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Per-key versions.
pub struct Oracle {
    acked: Vec<AtomicU64>,
    started: Vec<AtomicU64>,
}

impl Oracle {
    /// `n` keys, all at version 0 (absent), or at the versions given.
    pub fn new(versions: &[u64]) -> Self {
        Oracle {
            acked: versions.iter().map(|&v| AtomicU64::new(v)).collect(),
            started: versions.iter().map(|&v| AtomicU64::new(v)).collect(),
        }
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.acked.len()
    }

    /// The last acknowledged version of every key.
    pub fn acked_all(&self) -> Vec<u64> {
        self.acked
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .collect()
    }

    /// The last started version of every key.
    pub fn started_all(&self) -> Vec<u64> {
        self.started
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .collect()
    }

    /// The writer of key `i` begins its next version; returns it.
    pub fn start(&self, i: usize) -> u64 {
        self.started[i].fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The write of version `v` of key `i` returned `Ok`.
    pub fn ack(&self, i: usize, v: u64) {
        self.acked[i].fetch_max(v, Ordering::SeqCst);
    }

    /// Version `v` of key `i` was started elsewhere (a child process's log).
    pub fn raise_started(&self, i: usize, v: u64) {
        self.started[i].fetch_max(v, Ordering::SeqCst);
    }

    /// The window start for key `i`: call before the read.
    pub fn before(&self, i: usize) -> u64 {
        self.acked[i].load(Ordering::SeqCst)
    }

    /// The window end for key `i`: call after the read.
    pub fn after(&self, i: usize) -> u64 {
        self.started[i].load(Ordering::SeqCst)
    }

    /// Sets key `i` to version `v` (after a recovery found it there).
    pub fn reset(&self, i: usize, v: u64) {
        self.acked[i].store(v, Ordering::SeqCst);
        self.started[i].store(v, Ordering::SeqCst);
    }
}

/// Whether `seen` (a value or absence) is version `lo..=hi` of key `i`; the version found
/// when it names one (absence: the newest absent version in the window).
pub fn allowed(i: usize, seen: Option<&[u8]>, lo: u64, hi: u64) -> Result<u64, String> {
    match seen {
        Some(v) => match version_of(v) {
            Some((k, ver)) if k == i && (lo..=hi).contains(&ver) => {
                if value(i, ver).as_deref() == Some(v) {
                    Ok(ver)
                } else {
                    Err(format!("key {i}: damaged value for version {ver}"))
                }
            }
            Some((k, ver)) => Err(format!(
                "key {i}: saw key {k} version {ver}, may see versions {lo}..={hi}"
            )),
            None => Err(format!(
                "key {i}: malformed value {:?}",
                String::from_utf8_lossy(v)
            )),
        },
        None => (lo..=hi)
            .rev()
            .find(|&ver| value(i, ver).is_none())
            .ok_or_else(|| format!("key {i}: absent, but versions {lo}..={hi} all hold a value")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows() {
        let v = (1..).find(|&v| value(3, v).is_some()).unwrap();
        assert_eq!(allowed(3, value(3, v).as_deref(), v, v), Ok(v));
        assert!(allowed(3, value(3, v).as_deref(), v + 1, v + 5).is_err());
        assert!(allowed(4, value(3, v).as_deref(), v, v).is_err());
        assert_eq!(allowed(3, None, 0, 0), Ok(0));
    }
}
