//! Who may talk on a raft port, and how a connection proves it (FORMAT.md §8, "Handshake").
//!
//! Every connection between nodes — a call, a pipelined append stream, a forwarded write —
//! starts with a handshake, and nothing it carries is decoded before that handshake ends.
//! With [`PeerAuth::tls`] it is mutual TLS (rustls) against the cluster's CA, each side's
//! certificate naming its node as a URI subject alternative name `lsm-bloom://node/<id>`: a
//! caller refuses a server whose certificate names another node than the one it called, and
//! a server learns its caller's id from the caller's certificate. Then, over TLS or plain TCP,
//! both sides send a hello (`hello.rs`) with the protocol version, the cluster id and their
//! node id: two clusters never exchange a message, and a TLS peer cannot claim another id than
//! its certificate's. The handshake must finish within `HANDSHAKE`.
//!
//! [`PeerAuth::plain_loopback`] skips TLS and authenticates nothing, so it serves and calls
//! loopback addresses only: tests, benchmarks and single-machine clusters ask for it by name.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::hello::{self, Side};
use crate::replication::NodeId;

/// The URI subject alternative name that binds a certificate to a node: this, then the id.
pub const NODE_URI: &str = "lsm-bloom://node/";
/// How long a connection may take to authenticate (TCP connect, TLS, hellos).
pub const HANDSHAKE: Duration = Duration::from_secs(5);

#[derive(Clone)]
enum Mode {
    Tls {
        acceptor: TlsAcceptor,
        connector: TlsConnector,
    },
    PlainLoopback,
}

/// A node's identity on the raft port — its cluster, its node id — and how its connections
/// prove it. One value serves a node's `RaftServer`, `TcpNetwork` and `Forwarder`.
#[derive(Clone)]
pub struct PeerAuth {
    cluster: Arc<str>,
    node: NodeId,
    mode: Mode,
    /// Nodes dialled at another address than the one they are called at (`with_route`).
    routes: Arc<BTreeMap<NodeId, String>>,
}

fn invalid(m: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, m)
}

impl PeerAuth {
    /// Mutual TLS with rustls configurations of the caller's making. Whatever their
    /// verifiers, every connection is also held to the node binding: the peer's certificate
    /// must name the node (`NODE_URI`) the hello claims, and a called node must be the one
    /// called. `server` must ask for client certificates (a caller without one is refused).
    pub fn tls(
        cluster: &str,
        node: NodeId,
        server: Arc<ServerConfig>,
        client: Arc<ClientConfig>,
    ) -> io::Result<PeerAuth> {
        hello::check_cluster_id(cluster).map_err(invalid)?;
        Ok(PeerAuth {
            cluster: cluster.into(),
            node,
            routes: Arc::default(),
            mode: Mode::Tls {
                acceptor: TlsAcceptor::from(server),
                connector: TlsConnector::from(client),
            },
        })
    }

    /// Mutual TLS from PEM files: this node's certificate (chain) and private key, and the
    /// cluster's CA certificate(s), which must have signed every node's certificate. The
    /// certificate must name `node` (`lsm-bloom://node/<node>`).
    pub fn tls_from_pem(
        cluster: &str,
        node: NodeId,
        cert: &Path,
        key: &Path,
        ca: &Path,
    ) -> io::Result<PeerAuth> {
        let read_err = |what: &str, p: &Path, e: &dyn std::fmt::Display| {
            invalid(format!("reading the {what} {}: {e}", p.display()))
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .map_err(|e| read_err("certificate", cert, &e))?
            .collect::<Result<_, _>>()
            .map_err(|e| read_err("certificate", cert, &e))?;
        let key =
            PrivateKeyDer::from_pem_file(key).map_err(|e| read_err("private key", key, &e))?;
        let cas: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(ca)
            .map_err(|e| read_err("CA certificate", ca, &e))?
            .collect::<Result<_, _>>()
            .map_err(|e| read_err("CA certificate", ca, &e))?;
        PeerAuth::tls_from_der(cluster, node, certs, key, cas).map_err(|e| {
            invalid(format!(
                "{e} (certificate {}, CA {})",
                cert.display(),
                ca.display()
            ))
        })
    }

    /// Mutual TLS from DER: this node's certificate chain (its own first) and private key,
    /// and the cluster's CA certificates. The certificate must name `node`.
    pub fn tls_from_der(
        cluster: &str,
        node: NodeId,
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        cas: Vec<CertificateDer<'static>>,
    ) -> io::Result<PeerAuth> {
        let Some(leaf) = certs.first() else {
            return Err(invalid("no certificate".into()));
        };
        match node_of(leaf) {
            Ok(id) if id == node => {}
            Ok(id) => {
                return Err(invalid(format!(
                    "the certificate names node {id}, not node {node}"
                )))
            }
            Err(m) => return Err(invalid(m)),
        }
        let mut roots = RootCertStore::empty();
        for c in cas {
            roots
                .add(c)
                .map_err(|e| invalid(format!("a CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(invalid("no CA certificate".into()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls_err = |e: rustls::Error| invalid(format!("TLS set-up: {e}"));
        let roots = Arc::new(roots);
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::clone(&roots), Arc::clone(&provider))
                .build()
                .map_err(|e| invalid(format!("TLS set-up: {e}")))?;
        let server = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(tls_err)?;
        let client = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(tls_err)?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ClusterCa {
                roots,
                algs: provider.signature_verification_algorithms,
            }))
            .with_client_auth_cert(certs, key)
            .map_err(tls_err)?;
        PeerAuth::tls(cluster, node, Arc::new(server), Arc::new(client))
    }

    /// Plain TCP, which authenticates nothing: a `RaftServer` with it serves a loopback
    /// address only, and a `TcpNetwork` or `Forwarder` with it calls loopback addresses only.
    /// The hellos still carry the cluster id and node ids.
    pub fn plain_loopback(cluster: &str, node: NodeId) -> io::Result<PeerAuth> {
        hello::check_cluster_id(cluster).map_err(invalid)?;
        Ok(PeerAuth {
            cluster: cluster.into(),
            node,
            routes: Arc::default(),
            mode: Mode::PlainLoopback,
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.node
    }

    /// The cluster's id.
    pub fn cluster_id(&self) -> &str {
        &self.cluster
    }

    /// Dials node `node` at `addr` from now on, whatever address it is called at (its
    /// address in the membership, a leader's address in a redirect): a proxy, a tunnel, or
    /// an address translated on the way. The peer must still prove it is `node`.
    #[must_use]
    pub fn with_route(mut self, node: NodeId, addr: impl Into<String>) -> PeerAuth {
        Arc::make_mut(&mut self.routes).insert(node, addr.into());
        self
    }

    /// Whether connections are TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self.mode, Mode::Tls { .. })
    }

    /// Authenticates an accepted connection: TLS (when on) and the hellos. Returns the
    /// connection and the caller's node id. The server side of `connect`, for tools and
    /// tests that answer frames themselves; `RaftServer` bounds its time (`HANDSHAKE`).
    pub async fn accept(&self, tcp: TcpStream) -> Result<(Conn, NodeId), String> {
        let _ = tcp.set_nodelay(true);
        let (mut conn, cert_id) = match &self.mode {
            Mode::PlainLoopback => {
                let peer = tcp.peer_addr().map_err(|e| e.to_string())?;
                if !peer.ip().is_loopback() {
                    return Err(format!("plain TCP from {peer}, not a loopback address"));
                }
                (Conn::Plain(tcp), None)
            }
            Mode::Tls { acceptor, .. } => {
                let tls = acceptor
                    .accept(tcp)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?;
                let id = match tls.get_ref().1.peer_certificates() {
                    Some([leaf, ..]) => node_of(leaf)?,
                    _ => return Err("no client certificate".into()),
                };
                (
                    Conn::Tls(Box::new(tokio_rustls::TlsStream::Server(tls))),
                    Some(id),
                )
            }
        };
        let claimed = hello::read(&mut conn, Side::Caller, &self.cluster).await?;
        if cert_id.is_some_and(|id| id != claimed) {
            return Err(format!(
                "a hello from node {claimed} over a certificate of node {}",
                cert_id.unwrap_or_default()
            ));
        }
        hello::write(&mut conn, Side::Server, &self.cluster, self.node).await?;
        Ok((conn, claimed))
    }

    /// Connects to node `target` at `addr` and authenticates, within `HANDSHAKE`: the
    /// connection the transport's own calls use, for tools and tests that speak frames
    /// themselves.
    pub async fn connect(&self, addr: &str, target: NodeId) -> io::Result<Conn> {
        match tokio::time::timeout(HANDSHAKE, self.connect_now(addr, target)).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connecting to node {target} at {addr}: no handshake within {HANDSHAKE:?}"),
            )),
        }
    }

    async fn connect_now(&self, addr: &str, target: NodeId) -> io::Result<Conn> {
        let addr = self.routes.get(&target).map_or(addr, String::as_str);
        let tcp = TcpStream::connect(addr).await?;
        let _ = tcp.set_nodelay(true);
        let refused = |m: String| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("node {target} at {addr}: {m}"),
            )
        };
        let mut conn = match &self.mode {
            Mode::PlainLoopback => {
                let peer = tcp.peer_addr()?;
                if !peer.ip().is_loopback() {
                    return Err(refused(format!(
                        "plain TCP to {peer} refused: not a loopback address (use TLS)"
                    )));
                }
                Conn::Plain(tcp)
            }
            Mode::Tls { connector, .. } => {
                let name = ServerName::try_from(format!("node-{target}"))
                    .map_err(|e| refused(e.to_string()))?;
                let tls = connector.connect(name, tcp).await?;
                let id = match tls.get_ref().1.peer_certificates() {
                    Some([leaf, ..]) => node_of(leaf).map_err(refused)?,
                    _ => return Err(refused("no server certificate".into())),
                };
                if id != target {
                    return Err(refused(format!("presented the certificate of node {id}")));
                }
                Conn::Tls(Box::new(tokio_rustls::TlsStream::Client(tls)))
            }
        };
        hello::write(&mut conn, Side::Caller, &self.cluster, self.node)
            .await
            .map_err(refused)?;
        let theirs = hello::read(&mut conn, Side::Server, &self.cluster)
            .await
            .map_err(refused)?;
        if theirs != target {
            return Err(refused(format!("answered as node {theirs}")));
        }
        Ok(conn)
    }

    /// Whether a server with this may listen on `addr`.
    pub(super) fn may_serve(&self, addr: std::net::SocketAddr) -> io::Result<()> {
        match self.mode {
            Mode::PlainLoopback if !addr.ip().is_loopback() => Err(invalid(format!(
                "plain TCP on {addr} refused: not a loopback address (use TLS)"
            ))),
            _ => Ok(()),
        }
    }
}

/// The node a certificate names: its one `lsm-bloom://node/<id>` URI alternative name.
pub fn node_of(cert: &CertificateDer<'_>) -> Result<NodeId, String> {
    let cert = webpki::EndEntityCert::try_from(cert).map_err(|e| format!("certificate: {e}"))?;
    let mut ids = cert
        .valid_uri_names()
        .filter_map(|u| u.strip_prefix(NODE_URI))
        .map(|id| {
            id.parse::<NodeId>()
                .map_err(|_| format!("certificate names {NODE_URI}{id}, not a node id"))
        });
    match (ids.next(), ids.next()) {
        (Some(id), None) => id,
        (None, _) => Err(format!("certificate names no node ({NODE_URI}<id>)")),
        (Some(_), Some(_)) => Err("certificate names more than one node".into()),
    }
}

/// A caller's check of a server certificate: signed by the cluster's CA, for server use.
/// The name a caller gives rustls is a placeholder; which node the certificate names is
/// checked after the handshake (`PeerAuth::connect`), against the node called.
#[derive(Debug)]
struct ClusterCa {
    roots: Arc<RootCertStore>,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ClusterCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algs.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// An authenticated raft connection, its handshake done: plain TCP (loopback only) or TLS
/// over TCP. What follows on it is frames (FORMAT.md §8).
pub enum Conn {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS.
    Tls(Box<tokio_rustls::TlsStream<TcpStream>>),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, s) = match self {
            Conn::Plain(s) => ("plain", s),
            Conn::Tls(t) => ("TLS", t.get_ref().0),
        };
        write!(f, "Conn({kind}, {:?})", s.peer_addr().ok())
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, b),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, b),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that accepts and then says nothing (as a dropped or stopped one would) is given
    /// up on after `HANDSHAKE`, not waited on for as long as TCP retries.
    #[tokio::test]
    async fn a_silent_peer_fails_the_handshake_within_its_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let held = tokio::spawn(async move {
            let (conn, _) = listener.accept().await.unwrap();
            tokio::time::sleep(HANDSHAKE * 3).await;
            drop(conn);
        });
        let auth = PeerAuth::plain_loopback("c", 1).unwrap();
        let started = std::time::Instant::now();
        let e = auth.connect(&addr, 2).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(started.elapsed() < HANDSHAKE * 2, "{:?}", started.elapsed());
        held.abort();
    }
}
