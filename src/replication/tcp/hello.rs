//! The hello frame both ends of a raft connection send first (FORMAT.md §8, "Handshake"):
//! protocol version, cluster id and the sender's node id. Read outside the server's read
//! budget, so it is bounded by `MAX_HELLO` instead; nothing else is decoded before it.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::coding::Cursor;
use crate::replication::wire::{self, FRAME_HEADER};
use crate::replication::NodeId;

/// The wire protocol's version (FORMAT.md §8): 2 added this handshake, 3 the write ids of
/// forwarded writes, 4 the keyspace operations in requests, 5 puts with an expiry in them,
/// 6 range deletes in them, 7 procedure calls in them and their answers in a forwarded
/// write's response (FORMAT.md §7.4, §8).
pub const PROTOCOL_VERSION: u32 = 7;
/// Longest cluster id, in bytes.
pub const MAX_CLUSTER_ID: usize = 64;
/// The hello's tag, from the side that connects.
const HELLO: u8 = 7;
/// The hello's tag, from the side that accepts.
const HELLO_BACK: u8 = 0x87;
/// Largest hello payload: tag, version, node id, cluster id with its length.
const MAX_HELLO: usize = 1 + 4 + 8 + 4 + MAX_CLUSTER_ID;

/// Which side sent a hello.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The side that connected.
    Caller,
    /// The side that accepted.
    Server,
}

impl Side {
    fn tag(self) -> u8 {
        match self {
            Side::Caller => HELLO,
            Side::Server => HELLO_BACK,
        }
    }
}

/// Checks a cluster id: 1 to `MAX_CLUSTER_ID` bytes of printable ASCII.
pub(crate) fn check_cluster_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_CLUSTER_ID || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "cluster id {id:?}: 1 to {MAX_CLUSTER_ID} printable ASCII characters, no spaces"
        ));
    }
    Ok(())
}

/// The frame of a hello from `side`.
pub(crate) fn encode(side: Side, cluster: &str, node: NodeId) -> Vec<u8> {
    let mut p = vec![side.tag()];
    p.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    p.extend_from_slice(&node.to_le_bytes());
    p.extend_from_slice(
        &u32::try_from(cluster.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    p.extend_from_slice(cluster.as_bytes());
    wire::frame(&p)
}

/// Decodes a hello payload from `side`: its node id, once the version and the cluster id
/// are checked against ours.
pub(crate) fn decode(p: &[u8], side: Side, cluster: &str) -> Result<NodeId, String> {
    let mut c = Cursor::new(p);
    let tag = c.u8()?;
    if tag != side.tag() {
        return Err(format!("a frame with tag {tag} where a hello was due"));
    }
    let version = c.u32()?;
    if version != PROTOCOL_VERSION {
        return Err(format!(
            "protocol version {version} (this build speaks {PROTOCOL_VERSION})"
        ));
    }
    let node = c.u64()?;
    let theirs = c.len_prefixed()?;
    if !c.is_empty() {
        return Err("trailing bytes after a hello".into());
    }
    if theirs != cluster.as_bytes() {
        return Err(format!(
            "a peer of cluster {:?} (this is {cluster:?})",
            String::from_utf8_lossy(theirs)
        ));
    }
    Ok(node)
}

/// Reads one hello from `side`: at most `MAX_HELLO` bytes of payload, checksum verified.
pub(super) async fn read(
    stream: &mut (impl AsyncRead + Unpin),
    side: Side,
    cluster: &str,
) -> Result<NodeId, String> {
    let mut header = [0u8; FRAME_HEADER];
    stream
        .read_exact(&mut header)
        .await
        .map_err(|e| format!("reading a hello: {e}"))?;
    let (len, crc) = wire::frame_header(&header)?;
    if len > MAX_HELLO {
        return Err(format!("a hello of {len} bytes (at most {MAX_HELLO})"));
    }
    let mut p = vec![0u8; len];
    stream
        .read_exact(&mut p)
        .await
        .map_err(|e| format!("reading a hello: {e}"))?;
    if crc32fast::hash(&p) != crc {
        return Err("a hello whose checksum fails".into());
    }
    decode(&p, side, cluster)
}

/// Writes our hello as `side`.
pub(super) async fn write(
    stream: &mut (impl AsyncWrite + Unpin),
    side: Side,
    cluster: &str,
    node: NodeId,
) -> Result<(), String> {
    stream
        .write_all(&encode(side, cluster, node))
        .await
        .map_err(|e| format!("writing a hello: {e}"))?;
    stream
        .flush()
        .await
        .map_err(|e| format!("writing a hello: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hello_round_trips_and_every_mismatch_is_named() {
        let f = encode(Side::Caller, "prod", 7);
        assert_eq!(read(&mut &f[..], Side::Caller, "prod").await, Ok(7));
        let err = read(&mut &f[..], Side::Caller, "test").await.unwrap_err();
        assert!(err.contains("cluster \"prod\""), "{err}");
        let err = read(&mut &f[..], Side::Server, "prod").await.unwrap_err();
        assert!(err.contains("tag 7"), "{err}");
        let mut d = f.clone();
        d[9] ^= 1; // the version
        let err = read(&mut &d[..], Side::Caller, "prod").await.unwrap_err();
        assert!(err.contains("checksum"), "{err}");
        for n in 0..f.len() {
            assert!(read(&mut &f[..n], Side::Caller, "prod").await.is_err());
        }
    }

    /// A header announcing more than a hello holds is refused before any payload is read.
    #[tokio::test]
    async fn a_long_hello_is_refused_from_its_header() {
        let mut h = [0u8; FRAME_HEADER];
        h[..4].copy_from_slice(&(1u32 << 20).to_le_bytes());
        let err = read(&mut &h[..], Side::Caller, "prod").await.unwrap_err();
        assert!(err.contains("at most"), "{err}");
    }

    #[test]
    fn cluster_ids_are_checked() {
        assert!(check_cluster_id("prod-eu.1").is_ok());
        for bad in ["", "a b", &"x".repeat(65), "é"] {
            assert!(check_cluster_id(bad).is_err(), "{bad:?}");
        }
    }
}
