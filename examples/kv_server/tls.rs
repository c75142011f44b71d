//! TLS for Redis clients (feature `tls`): `--tls-port` with the flags Redis 6 names them by,
//! `--tls-cert-file`, `--tls-key-file`, `--tls-ca-cert-file` and `--tls-auth-clients`
//! (`yes`, Redis's default: a client must present a certificate the CA signed; `optional`:
//! one it presents must be; `no`). rustls with the ring provider, TLS 1.2 and 1.3.

use std::path::Path;
use std::sync::Arc;

use lsm_bloom::rustls::pki_types::pem::PemObject;
use lsm_bloom::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use lsm_bloom::rustls::server::WebPkiClientVerifier;
use lsm_bloom::rustls::{RootCertStore, ServerConfig};

/// The server's TLS configuration from the flags.
pub fn server_config(
    cert: &Path,
    key: &Path,
    ca: Option<&Path>,
    auth_clients: &str,
) -> Result<Arc<ServerConfig>, String> {
    let read =
        |what: &str, p: &Path, e: &dyn std::fmt::Display| format!("{what} {}: {e}", p.display());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| read("--tls-cert-file", cert, &e))?
        .collect::<Result<_, _>>()
        .map_err(|e| read("--tls-cert-file", cert, &e))?;
    if certs.is_empty() {
        return Err(format!(
            "--tls-cert-file {}: no certificate",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| read("--tls-key-file", key, &e))?;
    let provider = Arc::new(lsm_bloom::rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match (auth_clients, ca) {
        ("no", _) => builder.with_no_client_auth(),
        (_, None) => {
            return Err(format!(
                "--tls-auth-clients {auth_clients} needs --tls-ca-cert-file (or give \
                 --tls-auth-clients no)"
            ))
        }
        (mode, Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for c in
                CertificateDer::pem_file_iter(ca).map_err(|e| read("--tls-ca-cert-file", ca, &e))?
            {
                let c = c.map_err(|e| read("--tls-ca-cert-file", ca, &e))?;
                roots
                    .add(c)
                    .map_err(|e| read("--tls-ca-cert-file", ca, &e))?;
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let v = if mode == "optional" {
                v.allow_unauthenticated()
            } else {
                v
            };
            builder.with_client_cert_verifier(v.build().map_err(|e| format!("TLS: {e}"))?)
        }
    };
    builder
        .with_single_cert(certs, key)
        .map(Arc::new)
        .map_err(|e| format!("--tls-cert-file and --tls-key-file: {e}"))
}
