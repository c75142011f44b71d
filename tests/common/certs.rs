//! A CA and certificates made in memory with rcgen, for the tests and benchmarks that run
//! nodes over mutual TLS (each node's certificate names it as the URI subject alternative
//! name `lsm-bloom://node/<id>`, for both server and client use) or serve Redis clients
//! over TLS (a server certificate for 127.0.0.1).

use std::path::{Path, PathBuf};

use lsm_bloom::rustls::pki_types::CertificateDer;
#[cfg(feature = "replication")]
use lsm_bloom::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// The URI alternative name prefix that binds a certificate to a node (FORMAT.md §8).
const NODE_URI: &str = "lsm-bloom://node/";
#[cfg(feature = "replication")]
use lsm_bloom::replication::tcp::PeerAuth;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, SanType,
};

/// A CA of one cluster.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A node's certificate and key, DER and PEM.
pub struct NodeCert {
    pub cert: CertificateDer<'static>,
    pub key: Vec<u8>,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Ca {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    /// A certificate naming each URI of `uris` (usually one, `lsm-bloom://node/<id>`).
    pub fn cert_naming(&self, uris: &[String]) -> NodeCert {
        self.cert_with(
            uris.iter()
                .map(|u| SanType::URI(u.as_str().try_into().unwrap()))
                .collect(),
        )
    }

    /// A certificate for the address 127.0.0.1 (a server on loopback).
    pub fn loopback_server(&self) -> NodeCert {
        self.cert_with(vec![SanType::IpAddress([127, 0, 0, 1].into())])
    }

    /// A certificate with these subject alternative names, for server and client use.
    fn cert_with(&self, names: Vec<SanType>) -> NodeCert {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.subject_alt_names = names;
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        NodeCert {
            cert: cert.der().clone(),
            key: key.serialize_der(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Node `id`'s certificate.
    pub fn node(&self, id: u64) -> NodeCert {
        self.cert_naming(&[format!("{NODE_URI}{id}")])
    }

    /// The CA's certificate.
    pub fn der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// The CA's certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// The `PeerAuth` of node `id` of cluster `cluster`, with `cert` as its certificate.
    #[cfg(feature = "replication")]
    pub fn auth_with(&self, cluster: &str, id: u64, cert: &NodeCert) -> PeerAuth {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.key.clone()));
        PeerAuth::tls_from_der(cluster, id, vec![cert.cert.clone()], key, vec![self.der()]).unwrap()
    }

    /// The `PeerAuth` of node `id` of cluster `cluster`, with a new certificate naming it.
    #[cfg(feature = "replication")]
    pub fn auth(&self, cluster: &str, id: u64) -> PeerAuth {
        self.auth_with(cluster, id, &self.node(id))
    }

    /// Writes node `id`'s certificate, its key and the CA certificate as PEM files in `dir`,
    /// as kv_server's `--cluster-tls-cert`, `--cluster-tls-key` and `--cluster-tls-ca`
    /// take them.
    pub fn write_pem(&self, dir: &Path, id: u64) -> [PathBuf; 3] {
        let n = self.node(id);
        let paths = [
            dir.join(format!("node{id}.crt")),
            dir.join(format!("node{id}.key")),
            dir.join("ca.crt"),
        ];
        std::fs::write(&paths[0], n.cert_pem).unwrap();
        std::fs::write(&paths[1], n.key_pem).unwrap();
        std::fs::write(&paths[2], self.pem()).unwrap();
        paths
    }
}
